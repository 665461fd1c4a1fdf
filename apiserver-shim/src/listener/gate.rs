//! The accept loop's bounds: the connections open in all and per client address ([`Gate`]),
//! the sleep after a failed `accept` ([`Backoff`]), and repeated log lines written once per
//! window ([`LogLimiter`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_logging::{Admit, Repeats};
use parking_lot::Mutex;

/// The first and the longest sleep after a failed `accept`.
const BACKOFF_FIRST: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Writes a repeated log line once per window: the first occurrence is written, the next ones
/// within [`super::LOG_WINDOW`] are counted, and the first one after it is written with that count.
///
/// The accept loop's own bound, whatever logger the process installs; the counting is
/// [`carrel_logging::Repeats`], keyed by the line.
#[derive(Debug)]
pub struct LogLimiter(Repeats<&'static str>);

impl LogLimiter {
    /// Quiet repeats for `window`.
    pub fn new(window: Duration) -> LogLimiter {
        let limits = carrel_logging::Limits { window, distinct: 1, ..Default::default() };
        LogLimiter(Repeats::new(limits))
    }

    /// Whether the line `key` is to be written now: `Some(n)` with the number of repeats not
    /// written since it last was, or `None` to stay quiet.
    pub fn admit(&self, key: &'static str, now: Instant) -> Option<u64> {
        match self.0.admit_at(&key, 0, now) {
            Admit::Write { unwritten } => Some(unwritten),
            Admit::Quiet => None,
        }
    }
}

/// The sleep after each failed `accept` in a row: 5 ms, doubling up to 1 s; a success starts
/// over.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff { next: BACKOFF_FIRST }
    }
}

impl Backoff {
    /// How long to sleep after this failure.
    pub fn failed(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        now
    }

    /// An accept succeeded.
    pub fn succeeded(&mut self) {
        self.next = BACKOFF_FIRST;
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The limit on open connections in all.
    Total,
    /// The limit on open connections from one address.
    PerIp,
}

/// The connections open, in all and by client address.
#[derive(Debug, Default)]
pub struct Gate {
    pub(super) open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// An admitted connection's place: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Gate {
    /// Admit a connection from `ip` if fewer than `total` are open and fewer than `per_ip`
    /// (0: any number) from `ip`.
    pub fn admit(
        self: &Arc<Gate>,
        ip: IpAddr,
        total: usize,
        per_ip: usize,
    ) -> Result<Slot, Refused> {
        let mut open = self.open.lock();
        if open.0 >= total {
            return Err(Refused::Total);
        }
        let from_ip = open.1.get(&ip).copied().unwrap_or(0);
        if per_ip > 0 && from_ip >= per_ip {
            return Err(Refused::PerIp);
        }
        open.0 += 1;
        open.1.insert(ip, from_ip + 1);
        Ok(Slot { gate: self.clone(), ip })
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock();
        open.0 = open.0.saturating_sub(1);
        if let std::collections::hash_map::Entry::Occupied(mut entry) = open.1.entry(self.ip) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }
}
