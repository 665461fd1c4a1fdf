//! What Carrel's benchmarks share: bounded runs of timed operations, their percentiles, and the
//! table of figures beside their same-run baselines that every benchmark prints at the end.

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

/// End the process if a benchmark is still running after `limit`: a hang must not run forever.
pub fn watchdog(limit: Duration, what: &'static str) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        println!("benchmark still running after {} s: giving up ({what})", limit.as_secs());
        std::process::exit(2);
    });
}

/// Keep every CPU out of its idle states for as long as the returned file stays open: a Linux
/// PM QoS request of 0 µs on `/dev/cpu_dma_latency`, so that idle CPUs poll instead of halting
/// (what latency benchmarks such as cyclictest do). Without it, a server that answers in a few
/// microseconds lets the CPUs halt between requests and pays their wake-up on every round trip,
/// while a server that keeps more threads busy does not: a bare baseline then comes out slower
/// than the server it is the baseline of. Needs write access to the file (root).
pub fn hold_cpus_awake() -> std::io::Result<std::fs::File> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new().write(true).open("/dev/cpu_dma_latency")?;
    file.write_all(&0i32.to_ne_bytes())?;
    Ok(file)
}

/// Run `op(thread, n)` on `threads` threads at once, started together, each until `time` has
/// passed or it has made `cap` calls (`n` counts its calls from 0); every call's latency and the
/// wall time from the start. The first error ends the run with it.
pub fn on_threads<E>(
    threads: usize,
    time: Duration,
    cap: usize,
    op: impl Fn(usize, usize) -> Result<(), E> + Sync,
) -> Result<Run, E>
where
    E: Send + From<&'static str>,
{
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                scope.spawn(move || -> Result<Vec<Duration>, E> {
                    let mut latencies = Vec::new();
                    barrier.wait();
                    let deadline = Instant::now() + time;
                    while latencies.len() < cap && Instant::now() < deadline {
                        let started = Instant::now();
                        op(t, latencies.len())?;
                        latencies.push(started.elapsed());
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut all = Vec::new();
        for handle in handles {
            all.extend(handle.join().map_err(|_| E::from("a benchmark thread panicked"))??);
        }
        Ok(Run::from_parts(all, start.elapsed()))
    })
}

/// Latencies of a bounded run of operations, and how long it took in all.
#[derive(Debug, Default)]
pub struct Run {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Run {
    /// A run from its operations' latencies and its wall-clock time.
    pub fn from_parts(mut latencies: Vec<Duration>, elapsed: Duration) -> Run {
        latencies.sort_unstable();
        Run { latencies, elapsed }
    }

    /// Pool another run of the same measurement into this one.
    pub fn merge(&mut self, other: Run) {
        self.latencies.extend(other.latencies);
        self.latencies.sort_unstable();
        self.elapsed += other.elapsed;
    }

    /// The run's wall-clock time.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// Operations done.
    pub fn ops(&self) -> usize {
        self.latencies.len()
    }

    /// Operations per second.
    pub fn rate(&self) -> f64 {
        if self.elapsed.is_zero() {
            return 0.0;
        }
        self.ops() as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    /// The median latency.
    pub fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The 99th-percentile latency.
    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// One line for the progress output.
    pub fn describe(&self) -> String {
        format!(
            "{} ops in {:.2} s = {}, p50 {}, p99 {}",
            self.ops(),
            self.elapsed.as_secs_f64(),
            rate(self.rate()),
            ms(self.p50()),
            ms(self.p99())
        )
    }
}

/// The median of some durations (zero for none).
pub fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// Announce a section of the progress output.
pub fn section(name: &str) {
    println!();
    println!("== {name}");
}

/// A duration in µs or ms.
pub fn ms(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1000.0)
    }
}

/// A rate per second.
pub fn rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2} M/s", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.1} k/s", per_s / 1e3)
    } else {
        format!("{per_s:.0} /s")
    }
}

/// `ours / baseline`, or `-` when the baseline is zero.
pub fn ratio(ours: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("{:.2}x", ours / baseline)
    } else {
        "-".to_owned()
    }
}

/// `PASS (target …)` or `MISS (target …)`.
pub fn verdict(pass: bool, target: String) -> String {
    format!("{} (target {target})", if pass { "PASS" } else { "MISS" })
}

#[derive(Debug)]
enum Line {
    Header(String),
    Row([String; 5]),
}

/// A tokio runtime of two workers named `name`: what the benchmarks give their servers and
/// their clients each, so that both sides of a measurement get the same.
pub fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
}

/// The figures, printed at the end as Markdown tables, one per section.
#[derive(Debug, Default)]
pub struct Table {
    lines: Vec<Line>,
}

impl Table {
    /// Start a section.
    pub fn header(&mut self, title: &str) {
        self.lines.push(Line::Header(title.to_owned()));
    }

    /// One measurement beside its baseline.
    pub fn row(
        &mut self,
        what: &str,
        ours: String,
        baseline: String,
        ratio: String,
        target: String,
    ) {
        self.lines.push(Line::Row([what.to_owned(), ours, baseline, ratio, target]));
    }

    /// Print every section.
    pub fn print(&self) {
        let titles = ["measurement", "ours", "baseline (same run)", "ours/baseline", "target"];
        let mut widths = titles.map(|t| t.chars().count());
        for line in &self.lines {
            if let Line::Row(cells) = line {
                for (w, c) in widths.iter_mut().zip(cells) {
                    *w = (*w).max(c.chars().count());
                }
            }
        }
        let fmt_row = |cells: &[String; 5]| {
            let mut out = String::from("|");
            for (w, c) in widths.iter().zip(cells) {
                out.push_str(&format!(" {c}{} |", " ".repeat(w - c.chars().count())));
            }
            out
        };
        println!();
        println!(
            "== results (ratio = ours / baseline; for times lower is better, for rates higher)"
        );
        for line in &self.lines {
            match line {
                Line::Header(title) => {
                    println!();
                    println!("{title}");
                    println!();
                    println!("{}", fmt_row(&titles.map(str::to_owned)));
                    println!("{}", fmt_row(&widths.map(|w| "-".repeat(w))));
                }
                Line::Row(cells) => println!("{}", fmt_row(cells)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let run = Run::from_parts(
            (1..=100).rev().map(Duration::from_millis).collect(),
            Duration::from_secs(2),
        );
        assert_eq!(run.p50(), Duration::from_millis(50));
        assert_eq!(run.p99(), Duration::from_millis(99));
        assert_eq!(run.rate(), 50.0);
        assert_eq!(ratio(3.0, 0.0), "-");
        assert_eq!(median(vec![]), Duration::ZERO);
    }
}

/// What a process holds, read from `/proc/<pid>`: memory, threads, descriptors (those on files
/// under a directory counted apart: a server's tenant stores) and CPU time used.
#[derive(Clone, Copy, Debug)]
pub struct Held {
    /// Open descriptors.
    pub fds: usize,
    /// Descriptors on files under the directory asked about.
    pub store_fds: usize,
    /// Threads.
    pub threads: usize,
    /// `VmRSS`, KiB.
    pub rss_kib: f64,
    /// `RssAnon`, KiB.
    pub anon_kib: f64,
    /// `RssFile`, KiB.
    pub file_kib: f64,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// When it was read.
    pub at: Instant,
}

impl Held {
    /// Process `pid` now, counting apart its descriptors on files under `stores`.
    pub fn of(pid: u32, stores: &std::path::Path) -> Held {
        let (mut fds, mut store_fds) = (0, 0);
        if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
            for entry in entries.flatten() {
                fds += 1;
                if std::fs::read_link(entry.path()).is_ok_and(|t| t.starts_with(stores)) {
                    store_fds += 1;
                }
            }
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0)
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command's closing parenthesis: state is field 0, utime 11, stime 12.
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        Held {
            fds,
            store_fds,
            threads: field("Threads:") as usize,
            rss_kib: field("VmRSS:"),
            anon_kib: field("RssAnon:"),
            file_kib: field("RssFile:"),
            cpu_ticks: ticks(11) + ticks(12),
            at: Instant::now(),
        }
    }

    /// The CPU used between `earlier` and this reading, in % of one core.
    pub fn cpu_since(&self, earlier: &Held) -> f64 {
        let ticks = self.cpu_ticks.saturating_sub(earlier.cpu_ticks) as f64;
        let seconds = self.at.duration_since(earlier.at).as_secs_f64().max(1e-9);
        100.0 * ticks / clock_ticks() / seconds
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's, if that cannot be run).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .filter(|&t: &f64| t > 0.0)
        .unwrap_or(100.0)
}

/// `f`'s value, or why not: its error, or no answer within `limit`, each prefixed with `what`.
pub async fn bounded<T, E: std::fmt::Display>(
    limit: Duration,
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what}: no answer within {limit:?}")),
    }
}
