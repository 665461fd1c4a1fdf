//! Logging for Carrel's programs: one setup for every binary ([`init`]), and no line repeated
//! without bound.
//!
//! A failure that repeats (a refused `accept`, a store that cannot be reached, a syncer whose
//! every connect fails) must not fill a disk with logs. [`Limited`] wraps the line format of
//! `tracing_subscriber::fmt` and writes, per call site in each window (10 s by default):
//!
//! - an identical event (same call site, same field values) once;
//! - at most [`Limits::distinct`] different events (say, one per peer address).
//!
//! The rest are counted, not written. The next line that call site writes after its window ends
//! is preceded by a summary: `<level> <target>: N lines like the next were not written in the
//! last W s`. So the volume of logs is bounded by the number of call sites, whatever fails.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::callsite::Identifier;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How much one call site may write in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The window.
    pub window: Duration,
    /// Different events (by field values) one call site writes in a window; an identical event
    /// is written once.
    pub distinct: usize,
    /// Call sites tracked at once; beyond it, windows that have ended are forgotten, and while
    /// every tracked one is live a new call site's events are counted and not written.
    pub sites: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { window: Duration::from_secs(10), distinct: 20, sites: 4096 }
    }
}

/// Install the process's logger: `tracing_subscriber::fmt` to standard error, filtered by
/// `RUST_LOG` (else `default_filter`, e.g. `"info"`), colours when standard error is a terminal,
/// repeats bounded by [`Limits::default`].
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .event_format(Limited::new(
            tracing_subscriber::fmt::format().with_ansi(ansi),
            Limits::default(),
        ))
        .init();
}

/// The time as [`Repeats`] reads it (a parameter, so tests can move it).
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// What [`Repeats::admit`] decides for one event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Write it; `unwritten` events of its call site were counted and not written in the window
    /// that just ended (0: none).
    Write {
        /// The events not written.
        unwritten: u64,
    },
    /// Do not write it (it is counted).
    Quiet,
}

/// The count of events per key (a call site, by default) and window.
pub struct Repeats<K = Identifier> {
    limits: Limits,
    clock: Clock,
    sites: Mutex<HashMap<K, Window>>,
}

impl<K> fmt::Debug for Repeats<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Repeats").field("limits", &self.limits).finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Window {
    started: Instant,
    /// The field values' hashes of the events written in this window.
    written: Vec<u64>,
    unwritten: u64,
}

impl<K: Hash + Eq + Clone> Repeats<K> {
    /// Counts within `limits`, on the system clock.
    pub fn new(limits: Limits) -> Repeats<K> {
        Repeats::with_clock(limits, Arc::new(Instant::now))
    }

    /// Counts within `limits`, on `clock`.
    pub fn with_clock(limits: Limits, clock: Clock) -> Repeats<K> {
        Repeats { limits, clock, sites: Mutex::new(HashMap::new()) }
    }

    /// Whether an event of `key` whose field values hash to `fields` is written now.
    pub fn admit(&self, key: &K, fields: u64) -> Admit {
        self.admit_at(key, fields, (self.clock)())
    }

    /// Whether an event of `key` whose field values hash to `fields` is written at `now`.
    pub fn admit_at(&self, key: &K, fields: u64, now: Instant) -> Admit {
        let mut sites = self.sites.lock();
        if !sites.contains_key(key) && sites.len() >= self.limits.sites {
            let window = self.limits.window;
            sites.retain(|_, w| now.duration_since(w.started) < window);
            if sites.len() >= self.limits.sites {
                return Admit::Quiet;
            }
        }
        let fresh = || Window { started: now, written: Vec::new(), unwritten: 0 };
        let entry = sites.entry(key.clone()).or_insert_with(fresh);
        let mut unwritten = 0;
        if now.duration_since(entry.started) >= self.limits.window {
            unwritten = entry.unwritten;
            *entry = fresh();
        }
        if entry.written.contains(&fields) || entry.written.len() >= self.limits.distinct {
            entry.unwritten += 1;
            return Admit::Quiet;
        }
        entry.written.push(fields);
        Admit::Write { unwritten }
    }
}

/// A line format that writes what [`Repeats`] admits, with the inner format `F`.
#[derive(Debug)]
pub struct Limited<F> {
    inner: F,
    repeats: Repeats,
}

impl<F> Limited<F> {
    /// `inner`'s lines, within `limits`.
    pub fn new(inner: F, limits: Limits) -> Limited<F> {
        Limited::with_repeats(inner, Repeats::new(limits))
    }

    /// `inner`'s lines, as `repeats` admits them.
    pub fn with_repeats(inner: F, repeats: Repeats) -> Limited<F> {
        Limited { inner, repeats }
    }
}

impl<S, N, F> FormatEvent<S, N> for Limited<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut hasher = FieldHasher(DefaultHasher::new());
        event.record(&mut hasher);
        match self.repeats.admit(&metadata.callsite(), hasher.0.finish()) {
            Admit::Quiet => Ok(()),
            Admit::Write { unwritten } => {
                if unwritten > 0 {
                    writeln!(
                        writer,
                        "{} {}: {unwritten} lines like the next were not written in the last {} s",
                        metadata.level(),
                        metadata.target(),
                        self.repeats.limits.window.as_secs_f64(),
                    )?;
                }
                self.inner.format_event(ctx, writer, event)
            }
        }
    }
}

/// Hashes an event's field names and values.
struct FieldHasher(DefaultHasher);

impl Visit for FieldHasher {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        field.name().hash(&mut self.0);
        let _ = write!(HashWriter(&mut self.0), "{value:?}");
    }
}

/// `fmt::Write` into a hasher, so a value's text is hashed without being kept.
struct HashWriter<'a>(&'a mut DefaultHasher);

impl fmt::Write for HashWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// A clock that moves only when told, in milliseconds from its start.
    fn clock() -> (Clock, Arc<AtomicU64>) {
        let start = Instant::now();
        let offset = Arc::new(AtomicU64::new(0));
        let moved = offset.clone();
        let clock: Clock =
            Arc::new(move || start + Duration::from_millis(moved.load(Ordering::SeqCst)));
        (clock, offset)
    }

    fn limits(distinct: usize, sites: usize) -> Limits {
        Limits { window: Duration::from_secs(10), distinct, sites }
    }

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().clone()).unwrap()
        }
    }

    impl io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    /// Run `log` under a subscriber writing to the returned lines, within `limits` on `clock`.
    fn logged(limits: Limits, clock: Clock, log: impl FnOnce()) -> String {
        let lines = Lines::default();
        let format = tracing_subscriber::fmt::format().without_time().with_ansi(false);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .event_format(Limited::with_repeats(format, Repeats::with_clock(limits, clock)))
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        lines.text()
    }

    #[test]
    fn a_repeated_line_is_written_once_a_window_then_with_the_count_of_the_rest() {
        let (clock, now) = clock();
        // One call site, as a loop that logs a failure each time round.
        let fail = || tracing::warn!(error = "Too many open files", "accept failed");
        let text = logged(limits(20, 16), clock, || {
            for _ in 0..100_000 {
                fail();
            }
            now.store(10_000, Ordering::SeqCst);
            fail();
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].contains("accept failed") && lines[0].contains("Too many open files"));
        assert!(
            lines[1].contains("99999 lines like the next were not written in the last 10 s"),
            "{}",
            lines[1]
        );
        assert!(lines[2].contains("accept failed"));
    }

    #[test]
    fn different_values_are_lines_of_their_own_up_to_the_bound() {
        let (clock, _) = clock();
        let text = logged(limits(3, 16), clock, || {
            for peer in 0..10 {
                for _ in 0..2 {
                    tracing::warn!(peer, "connect failed");
                }
            }
            // Other call sites have counts of their own.
            tracing::info!("other");
            for peer in 0..10 {
                tracing::warn!(peer, "connect failed");
            }
        });
        let lines: Vec<&str> = text.lines().collect();
        let first: Vec<&str> = lines.iter().take(3).copied().collect();
        for (peer, line) in first.iter().enumerate() {
            assert!(line.contains(&format!("peer={peer}")), "{text}");
        }
        assert!(lines[3].contains("other"), "{text}");
        assert_eq!(lines.len(), 7, "{text}");
        assert!(lines[4].contains("peer=0") && lines[6].contains("peer=2"), "{text}");
    }

    #[test]
    fn the_summary_counts_what_its_call_site_did_not_write() {
        let (clock, now) = clock();
        let repeats = Repeats::with_clock(limits(2, 16), clock);
        let site = tracing::callsite::Identifier(&SITE);
        assert_eq!(repeats.admit(&site, 1), Admit::Write { unwritten: 0 });
        assert_eq!(repeats.admit(&site, 1), Admit::Quiet);
        assert_eq!(repeats.admit(&site, 2), Admit::Write { unwritten: 0 });
        assert_eq!(repeats.admit(&site, 3), Admit::Quiet);
        now.store(9_999, Ordering::SeqCst);
        assert_eq!(repeats.admit(&site, 4), Admit::Quiet);
        now.store(10_000, Ordering::SeqCst);
        assert_eq!(repeats.admit(&site, 1), Admit::Write { unwritten: 3 });
        assert_eq!(repeats.admit(&site, 5), Admit::Write { unwritten: 0 });
    }

    #[test]
    fn call_sites_are_bounded_and_ended_windows_make_room() {
        let (clock, now) = clock();
        let repeats = Repeats::with_clock(limits(20, 2), clock);
        let [a, b, c]: [&'static dyn tracing::callsite::Callsite; 3] = [&SITE, &SITE_B, &SITE_C];
        let [a, b, c] = [a, b, c].map(tracing::callsite::Identifier);
        assert_eq!(repeats.admit(&a, 1), Admit::Write { unwritten: 0 });
        assert_eq!(repeats.admit(&b, 1), Admit::Write { unwritten: 0 });
        // Both windows live: a third call site is not written.
        assert_eq!(repeats.admit(&c, 1), Admit::Quiet);
        now.store(10_000, Ordering::SeqCst);
        assert_eq!(repeats.admit(&c, 1), Admit::Write { unwritten: 0 });
    }

    /// Call sites compared by address: each static has a byte of its own.
    struct Site(#[allow(dead_code)] u8);
    static SITE: Site = Site(0);
    static SITE_B: Site = Site(1);
    static SITE_C: Site = Site(2);

    impl tracing::callsite::Callsite for Site {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &tracing::Metadata<'_> {
            unreachable!("the tests only compare identifiers")
        }
    }
}
