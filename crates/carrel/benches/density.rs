//! Density benchmark: what thousands of idle tenants cost the `carrel up` that users run, read
//! from outside the process, each figure beside the same process measured with no tenant.
//!
//! Run with `cargo bench -p carrel --bench density`. A plain program (no harness): every wait is
//! bounded, and a watchdog kills `carrel up`, removes the temp dir and ends the run after 15
//! minutes. It starts the release `carrel` binary as a child:
//! `carrel up --listen 127.0.0.1:0 --data-dir <temp> --sim-nodes 1 --sim-gpus h200x1
//! --tenant-idle-after 2s` (syncers on), and reads `/proc/<pid>` for its memory, descriptors,
//! threads and CPU time. Its log goes to a file in the temp dir; its warnings are counted.
//! With 10,000 tenants a run takes about 5 minutes on 2 cores and needs about 13 GB of disk in
//! the temp dir (some 1.25 MB per tenant), plus 20 s to delete it at the end.
//!
//! | section | ours | baseline (same run) |
//! |---|---|---|
//! | idle tenants' cost | N tenants (10,000; `CARREL_BENCH_DENSITY_TENANTS`) created through a kube client of the host API, 32 creates in flight, all Ready (a host watch), then left alone until every one is closed (none of their store files open, the descriptor count steady): (VmRSS, descriptors, threads) − baseline, / N; creates per second; first create → all Ready, per second | the process with no tenant, after 60 s idle |
//! | idle CPU | utime + stime of the process over 60 s (`CARREL_BENCH_DENSITY_IDLE_S`) with the N closed tenants, % of one core, after 30 s quiet (`CARREL_BENCH_DENSITY_QUIET_S`) whose CPU, the closes' tail, is shown apart | the same over the same time with no tenant, at the start, after the same quiet |
//! | opening an idle tenant | 200 closed tenants spread over the range, one after another, each with a kube client made beforehand from its admin kubeconfig (read from its host Secret): (a) its first `GET /api/v1/namespaces` (TLS connect, the tenant opened); (b) a second one on the same client (open, connection reused) | (c) right after, a new client's first request to the now open tenant (the same TLS connect, no opening) |
//!
//! With `CARREL_BENCH_DENSITY_OPEN` set, the tenants are kept open (`--tenant-idle-after 0s`),
//! each with its store, syncer and controllers: their cost is read once the descriptor count is
//! steady, the idle CPU is theirs, and no tenant is opened (there is none closed).

#![allow(clippy::print_stdout)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_bench::{clock_ticks, ms, rate, ratio, runtime, section, verdict, Held, Run, Table};
use carrel_tenants::{host_namespace, KUBECONFIG_SECRET};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;

const CARREL: &str = env!("CARGO_BIN_EXE_carrel");
/// Tenants created; `CARREL_BENCH_DENSITY_TENANTS` sets another count.
const TENANTS: usize = 10_000;
const TENANTS_ENV: &str = "CARREL_BENCH_DENSITY_TENANTS";
/// The idle CPU windows, in seconds; `CARREL_BENCH_DENSITY_IDLE_S` sets another length.
const IDLE_S: u64 = 60;
const IDLE_S_ENV: &str = "CARREL_BENCH_DENSITY_IDLE_S";
/// Quiet before each idle CPU window, in seconds, with and without tenants alike: the tail of
/// what came before (starting; the tenants' closes, their threads ending and the heap trim) is
/// measured and shown apart, not counted as idle. `CARREL_BENCH_DENSITY_QUIET_S` sets another.
const QUIET_S: u64 = 30;
const QUIET_S_ENV: &str = "CARREL_BENCH_DENSITY_QUIET_S";
/// `--tenant-idle-after`.
const IDLE_AFTER: &str = "2s";
/// Set, the tenants are kept open (`--tenant-idle-after 0s`): each keeps its store, syncer and
/// controllers, and what they cost idle is measured in place of closed tenants'.
const OPEN_ENV: &str = "CARREL_BENCH_DENSITY_OPEN";
/// Creates in flight at once.
const CONCURRENCY: usize = 32;
/// Closed tenants whose opening is timed.
const SAMPLE: usize = 200;
/// How long the process gets after it says where it is, before anything is read.
const SETTLE: Duration = Duration::from_secs(3);
/// All tenants must be Ready within this, and some tenant must become Ready every minute.
const READY_WITHIN: Duration = Duration::from_secs(600);
const NO_PROGRESS: Duration = Duration::from_secs(60);
/// All tenants must be closed within this once Ready.
const CLOSE_WITHIN: Duration = Duration::from_secs(120);
/// Readings of the descriptor count, a second apart, that must agree for it to count as steady.
const STEADY_READINGS: usize = 3;
/// Any one request of the benchmark.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The whole run.
const WATCHDOG: Duration = Duration::from_secs(15 * 60);

/// Targets (from the issue).
const TARGET_RSS_KIB: f64 = 256.0;
/// An open tenant, its syncer and controllers running (issue 18).
const TARGET_OPEN_RSS_KIB: f64 = 1024.0;
const TARGET_FDS: f64 = 1.0;
const TARGET_CREATES_PER_S: f64 = 500.0;
const TARGET_OPEN_ADDED_P99: Duration = Duration::from_millis(10);
/// "Indistinguishable from none": the idle CPU with the tenants within this many percentage
/// points of one core of the same process's with none (6 clock ticks in 60 s at 100 Hz).
const TARGET_CPU_DIFF_PP: f64 = 0.1;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the watchdog must clean up if it fires: the child and the temp dir.
static CLEANUP: Mutex<Option<(Arc<Mutex<Child>>, PathBuf)>> = Mutex::new(None);

/// Kill `carrel up` and remove the temp dir (what `Up`'s drop does), from the watchdog.
fn cleanup() {
    let taken = CLEANUP.lock().map(|mut c| c.take()).unwrap_or(None);
    if let Some((child, dir)) = taken {
        if let Ok(mut child) = child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `carrel_bench::watchdog`, but one that kills `carrel up` and removes the temp dir first: the
/// run exits with `process::exit`, where no destructor runs.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        println!(
            "benchmark still running after {} s: giving up (a tenant never Ready or closed, or a hang?)",
            limit.as_secs()
        );
        cleanup();
        std::process::exit(2);
    });
}

/// The running `carrel up`: killed, and its temp dir removed, when dropped.
struct Up {
    child: Arc<Mutex<Child>>,
    pid: u32,
    kubeconfig: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// Dropped after the child is killed (fields drop after `drop` runs).
    dir: Option<tempfile::TempDir>,
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Ok(mut cleanup) = CLEANUP.lock() {
            *cleanup = None;
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

fn start(idle_after: &str) -> BenchResult<Up> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let log = dir.path().join("carrel.log");
    let mut child = Command::new(CARREL)
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args(["--sim-nodes", "1", "--sim-gpus", "h200x1", "--tenant-idle-after", idle_after])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let child = Arc::new(Mutex::new(child));
    if let Ok(mut cleanup) = CLEANUP.lock() {
        *cleanup = Some((child.clone(), dir.path().to_owned()));
    }
    let mut up = Up { child, pid, kubeconfig: PathBuf::new(), data, log, dir: Some(dir) };
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if let Some(path) = line?.strip_prefix("host kubeconfig: ") {
            up.kubeconfig = PathBuf::from(path);
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    if up.kubeconfig.as_os_str().is_empty() {
        let log = std::fs::read_to_string(&up.log).unwrap_or_default();
        return Err(format!("carrel up did not start: {log}").into());
    }
    Ok(up)
}

/// `up`'s process, its descriptors on its tenants' stores counted apart.
fn held(up: &Up) -> Held {
    Held::of(up.pid, &up.data.join("tenants"))
}

fn describe(h: &Held) -> String {
    format!(
        "VmRSS {:.1} MiB (anon {:.1}, file {:.1}), {} descriptors ({} on tenant stores), {} threads",
        h.rss_kib / 1024.0,
        h.anon_kib / 1024.0,
        h.file_kib / 1024.0,
        h.fds,
        h.store_fds,
        h.threads
    )
}

/// The process's CPU over `window` of doing nothing on our side: seconds and % of one core.
struct Cpu {
    seconds: f64,
    percent: f64,
    before: Held,
    after: Held,
    /// The CPU seconds of the window by thread name, most first; threads that ended within it
    /// under `(ended)`.
    by_thread: Vec<(String, f64)>,
    /// The CPU seconds of each of `SLICES` equal slices of the window, in order.
    slices: Vec<f64>,
    /// The most descriptors on tenant stores at any reading in the window: whether some
    /// tenant was opened within it.
    most_store_fds: usize,
}

/// CPU ticks of each of the process's threads, by thread id: its name and utime + stime.
fn thread_ticks(pid: u32) -> HashMap<String, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return out };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = stat[open + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        out.insert(task.file_name().to_string_lossy().into_owned(), (name, ticks(11) + ticks(12)));
    }
    out
}

/// How many slices an idle CPU window is reported in, so that a tail of earlier work shows
/// apart from a steady cost.
const SLICES: u32 = 6;

fn idle_cpu(up: &Up, window: Duration, tick: f64) -> Cpu {
    let before = held(up);
    // Each thread's ticks when first and last seen, read every second: a thread that ends
    // within the window keeps what it used up to its last reading.
    let mut threads: HashMap<String, (String, u64, u64)> = thread_ticks(up.pid)
        .into_iter()
        .map(|(tid, (name, ticks))| (tid, (name, ticks, ticks)))
        .collect();
    let started = Instant::now();
    let mut slices = Vec::new();
    let mut slice_start = before.cpu_ticks;
    let mut most_store_fds = before.store_fds;
    for k in 1..=SLICES {
        let slice_end = started + window * k / SLICES;
        while Instant::now() < slice_end {
            std::thread::sleep(Duration::from_secs(1).min(slice_end - Instant::now()));
            for (tid, (name, ticks)) in thread_ticks(up.pid) {
                // Born within the window: all its ticks are the window's.
                threads.entry(tid).or_insert((name, 0, 0)).2 = ticks;
            }
            most_store_fds = most_store_fds.max(held(up).store_fds);
        }
        let now = held(up).cpu_ticks;
        slices.push(now.saturating_sub(slice_start) as f64 / tick);
        slice_start = now;
    }
    let after = held(up);
    let total = after.cpu_ticks.saturating_sub(before.cpu_ticks);
    let mut by_name: HashMap<String, u64> = HashMap::new();
    let mut seen = 0;
    for (name, first, last) in threads.into_values() {
        let used = last.saturating_sub(first);
        seen += used;
        *by_name.entry(name).or_default() += used;
    }
    by_name.insert("(ended before a reading)".to_owned(), total.saturating_sub(seen));
    let mut by_thread: Vec<(String, f64)> = by_name
        .into_iter()
        .filter(|(_, t)| *t > 0)
        .map(|(name, t)| (name, t as f64 / tick))
        .collect();
    by_thread.sort_by(|a, b| b.1.total_cmp(&a.1));
    let seconds = total as f64 / tick;
    let percent = 100.0 * seconds / started.elapsed().as_secs_f64();
    Cpu { seconds, percent, before, after, by_thread, slices, most_store_fds }
}

/// Wait `quiet` before an idle window, showing what the process used meanwhile: the tail of
/// `what` came before.
fn quiet_tail(up: &Up, quiet: Duration, tick: f64, what: &str) {
    if quiet.is_zero() {
        return;
    }
    let tail = idle_cpu(up, quiet, tick);
    println!(
        "  {} s quiet, the tail of {what}: CPU {:.2} s = {:.3}% of a core (each {} s: {}; {})",
        quiet.as_secs(),
        tail.seconds,
        tail.percent,
        quiet.as_secs() / u64::from(SLICES),
        slices(&tail),
        top_threads(&tail)
    );
}

/// The CPU seconds of each slice of a window.
fn slices(cpu: &Cpu) -> String {
    cpu.slices.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>().join(", ")
}

/// The few threads that used the most CPU in a window, by name.
fn top_threads(cpu: &Cpu) -> String {
    let top: Vec<String> =
        cpu.by_thread.iter().take(4).map(|(name, s)| format!("{name} {s:.2} s")).collect();
    if top.is_empty() {
        "none".to_owned()
    } else {
        top.join(", ")
    }
}

/// The load averages of the machine (1, 5 and 15 minutes): other work on it shows there.
fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn env_count(name: &str, default: u64) -> BenchResult<u64> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{name}: a count above 0").into()),
        Err(_) => Ok(default),
    }
}

fn name(i: usize) -> String {
    format!("d{i:05}")
}

async fn client_from(kubeconfig: Kubeconfig) -> BenchResult<kube::Client> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> BenchResult<T> {
    Ok(carrel_bench::bounded(REQUEST_TIMEOUT, what, f).await?)
}

/// The tenants seen Ready on a host watch, and when the count last grew.
#[derive(Default)]
struct Ready {
    names: Mutex<HashSet<String>>,
    last: Mutex<Option<Instant>>,
}

impl Ready {
    fn count(&self) -> usize {
        self.names.lock().map(|n| n.len()).unwrap_or(0)
    }
    fn last(&self) -> Option<Instant> {
        self.last.lock().ok().and_then(|l| *l)
    }
}

fn watch_ready(api: Api<Tenant>, ready: Arc<Ready>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(t) | watcher::Event::InitApply(t)) = event else {
                continue;
            };
            if t.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Ready") {
                continue;
            }
            let name = t.metadata.name.unwrap_or_default();
            if let Ok(mut names) = ready.names.lock() {
                if names.insert(name) {
                    if let Ok(mut last) = ready.last.lock() {
                        *last = Some(Instant::now());
                    }
                }
            }
        }
    })
}

/// Create tenants `0..count`, `CONCURRENCY` at a time, saying how far it got every 1,000; the
/// creates that failed, and why.
async fn create_all(api: &Api<Tenant>, count: usize, ready: &Ready) -> Vec<String> {
    let started = Instant::now();
    let done = AtomicUsize::new(0);
    futures::stream::iter(0..count)
        .map(|i| {
            let done = &done;
            async move {
                let name = name(i);
                let tenant = Tenant {
                    metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() },
                    spec: Some(TenantSpec::default()),
                    ..Default::default()
                };
                let result = bounded("create", api.create(&PostParams::default(), &tenant)).await;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(1000) {
                    println!(
                        "  {n} created in {:.1} s, {} Ready",
                        started.elapsed().as_secs_f64(),
                        ready.count()
                    );
                }
                result.err().map(|e| format!("{name}: {e}"))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|failed| async { failed })
        .collect()
        .await
}

/// Wait until the watch has seen all `count` Ready; when the last became Ready.
async fn wait_ready(api: &Api<Tenant>, ready: &Ready, count: usize) -> BenchResult<Instant> {
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        let n = ready.count();
        if n >= count {
            return ready.last().ok_or_else(|| "no tenant Ready".into());
        }
        let progressed = ready.last().unwrap_or(started);
        if started.elapsed() > READY_WITHIN || progressed.elapsed() > NO_PROGRESS {
            // Ask the host, in case the watch fell behind.
            let list = bounded("list tenants", api.list(&ListParams::default())).await?;
            let listed: Vec<_> = list
                .items
                .iter()
                .filter(|t| t.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Ready"))
                .map(|t| t.metadata.name.clone().unwrap_or_default())
                .collect();
            if listed.is_empty() && list.items.len() >= count {
                println!("  the host watch missed some; a list shows all {count} Ready");
                return Ok(Instant::now());
            }
            return Err(format!(
                "{n} of {count} tenants Ready (watch) after {:.0?}; not Ready by a list: {} ({:?}…)",
                started.elapsed(),
                listed.len(),
                &listed[..listed.len().min(5)]
            )
            .into());
        }
        if said.elapsed() >= Duration::from_secs(10) {
            println!("  waiting: {n} of {count} Ready");
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until no tenant store's file is open and the descriptor count has been the same
/// `STEADY_READINGS` times a second apart; the reading then, and whether that happened in time.
/// Wait until the descriptor count is steady and, when `closed` is asked for, no tenant store
/// is open; what is held then, whether that came in time, and how long it took.
fn wait_settled(up: &Up, closed: bool) -> (Held, bool, Duration) {
    let started = Instant::now();
    let mut readings: Vec<usize> = Vec::new();
    loop {
        let now = held(up);
        readings.push(now.fds);
        let steady = readings.len() >= STEADY_READINGS
            && readings[readings.len() - STEADY_READINGS..].iter().all(|&f| f == now.fds);
        if (!closed || now.store_fds == 0) && steady {
            return (now, true, started.elapsed());
        }
        if started.elapsed() > CLOSE_WITHIN {
            return (now, false, started.elapsed());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A tenant's admin kubeconfig, from its host Secret (as `carrel tenant kubeconfig` reads it).
async fn tenant_kubeconfig(host: &kube::Client, tenant: &str) -> BenchResult<Kubeconfig> {
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &host_namespace(tenant));
    let secret = bounded("read a kubeconfig Secret", secrets.get(KUBECONFIG_SECRET)).await?;
    let bytes = secret
        .data
        .and_then(|d| d.get("kubeconfig").cloned())
        .ok_or_else(|| format!("{tenant}'s Secret has no kubeconfig"))?;
    Ok(Kubeconfig::from_yaml(std::str::from_utf8(&bytes.0)?)?)
}

/// One `GET /api/v1/namespaces` on `client`, timed.
async fn list_namespaces(client: &kube::Client) -> BenchResult<Duration> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    bounded("list namespaces", namespaces.list(&ListParams::default())).await?;
    Ok(started.elapsed())
}

/// The opening section's times: (a) closed, new client; (b) the same client again; (c) a new
/// client to the open tenant; and how many sampled tenants were closed before (a).
#[derive(Default)]
struct Opening {
    first: Vec<Duration>,
    second: Vec<Duration>,
    fresh: Vec<Duration>,
    closed_before: usize,
    elapsed: Duration,
}

async fn opening(up: &Up, sample: Vec<(String, Kubeconfig)>) -> BenchResult<Opening> {
    let mut out = Opening::default();
    let started = Instant::now();
    let store = |tenant: &str| up.data.join("tenants").join(tenant);
    for (k, (tenant, kubeconfig)) in sample.into_iter().enumerate() {
        let dir = store(&tenant);
        let open_files = std::fs::read_dir(format!("/proc/{}/fd", up.pid))
            .map(|d| {
                d.flatten()
                    .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
                    .count()
            })
            .unwrap_or(0);
        if open_files == 0 {
            out.closed_before += 1;
        }
        let client = client_from(kubeconfig.clone()).await?;
        out.first.push(list_namespaces(&client).await?);
        out.second.push(list_namespaces(&client).await?);
        drop(client);
        let fresh = client_from(kubeconfig).await?;
        out.fresh.push(list_namespaces(&fresh).await?);
        drop(fresh);
        if (k + 1).is_multiple_of(50) {
            let last = |v: &[Duration]| Run::from_parts(v[k + 1 - 50..].to_vec(), Duration::ZERO);
            println!(
                "  {} sampled: last 50 first request p50 {} (open tenant, new client {})",
                k + 1,
                ms(last(&out.first).p50()),
                ms(last(&out.fresh).p50())
            );
        }
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// Disk used under `path`, in KiB (`du -sk`), if it can be read.
fn disk_kib(path: &Path) -> Option<f64> {
    let out = Command::new("du").arg("-sk").arg(path).output().ok()?;
    String::from_utf8(out.stdout).ok()?.split_whitespace().next()?.parse().ok()
}

/// Lines of the log at WARN or ERROR, and the first few of them.
fn log_warnings(log: &Path) -> (usize, usize, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let bad: Vec<&str> =
        text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    let first = bad.iter().take(5).map(|l| l.chars().take(300).collect()).collect();
    (text.lines().count(), bad.len(), first)
}

fn main() -> BenchResult<()> {
    let started = Instant::now();
    watchdog(WATCHDOG);
    let count = usize::try_from(env_count(TENANTS_ENV, TENANTS as u64)?)?;
    let idle = Duration::from_secs(env_count(IDLE_S_ENV, IDLE_S)?);
    let quiet = Duration::from_secs(env_count(QUIET_S_ENV, QUIET_S)?);
    let tick = clock_ticks();
    println!("carrel density benchmark: every ratio is ours / baseline, both measured in this run");
    println!(
        "cores: {}; load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg()
    );
    println!(
        "{count} tenants, idle CPU over {} s after {} s quiet, clock ticks {tick}/s",
        idle.as_secs(),
        quiet.as_secs()
    );
    let open = std::env::var_os(OPEN_ENV).is_some();
    let state = if open { "open" } else { "closed" };
    let up = start(if open { "0s" } else { IDLE_AFTER })?;
    println!("carrel up: pid {}, data {}", up.pid, up.data.display());
    let rt = runtime("client")?;

    section("no tenant: settle, quiet, then idle CPU");
    std::thread::sleep(SETTLE);
    quiet_tail(&up, quiet, tick, "starting");
    let cpu_none = idle_cpu(&up, idle, tick);
    let base = cpu_none.after;
    println!("  at start: {}", describe(&cpu_none.before));
    println!(
        "  after {} s idle: {}; CPU {:.2} s = {:.3}% of a core ({}); load average {}",
        idle.as_secs(),
        describe(&base),
        cpu_none.seconds,
        cpu_none.percent,
        top_threads(&cpu_none),
        loadavg()
    );

    section(&format!("creating {count} tenants, {CONCURRENCY} at a time"));
    let host = rt.block_on(client_from(Kubeconfig::read_from(&up.kubeconfig)?))?;
    let tenants: Api<Tenant> = Api::all(host.clone());
    let ready = Arc::new(Ready::default());
    let watch = {
        let _guard = rt.enter();
        watch_ready(tenants.clone(), ready.clone())
    };
    // The watch lists first; let it be in place before the clock starts.
    std::thread::sleep(Duration::from_millis(300));
    let create_started = Instant::now();
    let failed = rt.block_on(create_all(&tenants, count, &ready));
    let created = create_started.elapsed();
    if !failed.is_empty() {
        return Err(format!(
            "{} creates failed, the first: {:#?}",
            failed.len(),
            &failed[..failed.len().min(10)]
        )
        .into());
    }
    println!(
        "  {count} created in {:.1} s ({:.0}/s); {} Ready so far",
        created.as_secs_f64(),
        count as f64 / created.as_secs_f64(),
        ready.count()
    );
    let all_ready = rt.block_on(wait_ready(&tenants, &ready, count))?;
    let ready_after = all_ready.duration_since(create_started);
    watch.abort();
    let at_ready = held(&up);
    println!(
        "  all Ready {:.1} s after the first create ({:.0}/s); now {}; load average {}",
        ready_after.as_secs_f64(),
        count as f64 / ready_after.as_secs_f64(),
        describe(&at_ready),
        loadavg()
    );

    // The sampled tenants' kubeconfigs, read from the host now: host reads open no tenant.
    let picked: Vec<usize> =
        (0..SAMPLE.min(count)).map(|k| k * count / SAMPLE.min(count)).collect();
    let sample: Vec<(String, Kubeconfig)> = rt.block_on(async {
        let mut out = Vec::new();
        for &i in &picked {
            out.push((name(i), tenant_kubeconfig(&host, &name(i)).await?));
        }
        BenchResult::Ok(out)
    })?;
    // The host client's connections are no tenant's: closed before the tenants are counted.
    drop(tenants);
    drop(host);

    section(if open {
        "left alone until the descriptor count is steady (tenants kept open)"
    } else {
        "left alone until every tenant is closed"
    });
    let (closed, in_time, took) = wait_settled(&up, !open);
    println!(
        "  {} after {:.1} s more: {}",
        if in_time { "settled" } else { "NOT settled" },
        took.as_secs_f64(),
        describe(&closed)
    );

    section(&format!("{count} {state} tenants: quiet, then idle CPU"));
    quiet_tail(&up, quiet, tick, if open { "creating" } else { "closing" });
    let cpu_many = idle_cpu(&up, idle, tick);
    println!(
        "  over {} s: CPU {:.2} s = {:.3}% of a core; then {}; load average {}",
        idle.as_secs(),
        cpu_many.seconds,
        cpu_many.percent,
        describe(&cpu_many.after),
        loadavg()
    );
    println!("  by thread name: {}", top_threads(&cpu_many));
    println!(
        "  the most descriptors on tenant stores at a reading (each second): {}",
        cpu_many.most_store_fds
    );
    println!(
        "  CPU seconds in each {} s of it: {}",
        idle.as_secs() / u64::from(SLICES),
        slices(&cpu_many)
    );

    let opened = if open {
        None
    } else {
        section(&format!("opening {} closed tenants, one after another", picked.len()));
        let opened = rt.block_on(opening(&up, sample))?;
        println!(
            "  {} of {} were closed before their first request; {:.1} s in all",
            opened.closed_before,
            picked.len(),
            opened.elapsed.as_secs_f64()
        );
        Some(opened)
    };
    let disk = disk_kib(&up.data);
    let (log_lines, warnings, first_warnings) = log_warnings(&up.log);
    println!("  carrel up's log: {log_lines} lines, {warnings} at WARN or ERROR");
    for line in &first_warnings {
        println!("    {line}");
    }

    let stop_started = Instant::now();
    drop(rt);
    drop(up);
    let stopped = stop_started.elapsed();

    let mut table = Table::default();
    idle_rows(&mut table, count, open, &base, &at_ready, &closed, &cpu_many.after, in_time, disk);
    rate_rows(&mut table, count, created, ready_after);
    cpu_rows(&mut table, count, state, &cpu_none, &cpu_many);
    if let Some(opened) = &opened {
        opening_rows(&mut table, opened, picked.len());
    }
    table.print();
    println!();
    println!(
        "killing carrel up and removing its data took {:.1} s; total benchmark time: {:.1} s",
        stopped.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    if !in_time {
        return Err(format!("the tenants did not settle within {CLOSE_WITHIN:?}").into());
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn idle_rows(
    table: &mut Table,
    count: usize,
    open: bool,
    base: &Held,
    ready: &Held,
    closed: &Held,
    later: &Held,
    in_time: bool,
    disk: Option<f64>,
) {
    let n = count as f64;
    let per = |now: f64, before: f64| (now - before) / n;
    table.header(&format!(
        "Idle tenants' cost: {count} tenants created ({CONCURRENCY} at a time), all Ready, then \
         left alone until {}{}; per tenant = (with them - with none) / {count}; baseline: the \
         same process with no tenant",
        if open {
            "the descriptor count is steady, every tenant open with its syncer and controllers"
        } else {
            "every one is closed"
        },
        if in_time { "" } else { " (NOT SETTLED)" }
    ));
    let rss = per(closed.rss_kib, base.rss_kib);
    let (what, target) = if open {
        ("RSS per idle open tenant (syncer and controllers running)", TARGET_OPEN_RSS_KIB)
    } else {
        ("RSS per idle (closed) tenant", TARGET_RSS_KIB)
    };
    table.row(
        what,
        format!("{rss:.1} KiB"),
        format!("no tenant: {:.1} MiB in all", base.rss_kib / 1024.0),
        "-".to_owned(),
        verdict(rss <= target, format!("<= {target:.0} KiB")),
    );
    table.row(
        "  anonymous / file-backed per tenant",
        format!(
            "{:.1} / {:.1} KiB",
            per(closed.anon_kib, base.anon_kib),
            per(closed.file_kib, base.file_kib)
        ),
        format!("no tenant: {:.1} / {:.1} MiB", base.anon_kib / 1024.0, base.file_kib / 1024.0),
        String::new(),
        String::new(),
    );
    table.row(
        "  VmRSS: all Ready -> all closed -> after the CPU window",
        format!(
            "{:.1} -> {:.1} -> {:.1} MiB",
            ready.rss_kib / 1024.0,
            closed.rss_kib / 1024.0,
            later.rss_kib / 1024.0
        ),
        format!("no tenant: {:.1} MiB", base.rss_kib / 1024.0),
        ratio(closed.rss_kib, base.rss_kib),
        String::new(),
    );
    table.row(
        "  RSS per tenant while all Ready (before closing)",
        format!("{:.1} KiB", per(ready.rss_kib, base.rss_kib)),
        String::new(),
        String::new(),
        String::new(),
    );
    let fds = per(closed.fds as f64, base.fds as f64);
    table.row(
        "descriptors per idle tenant",
        format!("{fds:.4} ({} -> {})", base.fds, closed.fds),
        format!("no tenant: {}", base.fds),
        "-".to_owned(),
        if open {
            String::new()
        } else {
            verdict(
                fds <= TARGET_FDS && closed.store_fds == 0,
                format!("<= {TARGET_FDS:.0}, 0 on a closed tenant's store"),
            )
        },
    );
    table.row(
        "  on the tenants' stores, closed / all Ready",
        format!("{} / {}", closed.store_fds, ready.store_fds),
        String::new(),
        String::new(),
        String::new(),
    );
    table.row(
        "threads per idle tenant",
        format!(
            "{:.4} ({} -> {})",
            per(closed.threads as f64, base.threads as f64),
            base.threads,
            closed.threads
        ),
        format!("no tenant: {}", base.threads),
        "-".to_owned(),
        String::new(),
    );
    table.row(
        "  threads: all Ready -> all closed -> after the CPU window",
        format!("{} -> {} -> {}", ready.threads, closed.threads, later.threads),
        String::new(),
        String::new(),
        String::new(),
    );
    if let Some(kib) = disk {
        table.row(
            "disk per tenant (du of the data dir / N)",
            format!("{:.0} KiB", kib / n),
            String::new(),
            String::new(),
            String::new(),
        );
    }
}

fn rate_rows(table: &mut Table, count: usize, created: Duration, ready: Duration) {
    let creates = count as f64 / created.as_secs_f64();
    table.row(
        &format!("tenants created per second ({CONCURRENCY} clients)"),
        format!("{} ({count} in {:.1} s)", rate(creates), created.as_secs_f64()),
        String::new(),
        String::new(),
        verdict(creates >= TARGET_CREATES_PER_S, format!(">= {TARGET_CREATES_PER_S:.0} /s")),
    );
    table.row(
        "tenants Ready per second (first create -> all Ready)",
        format!("{} ({:.1} s)", rate(count as f64 / ready.as_secs_f64()), ready.as_secs_f64()),
        String::new(),
        String::new(),
        String::new(),
    );
}

fn cpu_rows(table: &mut Table, count: usize, state: &str, none: &Cpu, many: &Cpu) {
    table.header(
        "Idle CPU of carrel up (utime + stime over the same window); baseline: the same process \
         with no tenant, at the start",
    );
    let diff = many.percent - none.percent;
    table.row(
        &format!("CPU while idle, {count} {state} tenants"),
        format!("{:.3}% of a core ({:.2} s)", many.percent, many.seconds),
        format!("no tenant {:.3}% ({:.2} s)", none.percent, none.seconds),
        ratio(many.percent, none.percent),
        String::new(),
    );
    table.row(
        "  difference",
        format!("{diff:+.3} percentage points of a core"),
        String::new(),
        String::new(),
        verdict(
            diff <= TARGET_CPU_DIFF_PP,
            format!("indistinguishable: <= +{TARGET_CPU_DIFF_PP} pp"),
        ),
    );
    table.row(
        "  CPU seconds in each sixth of the window, in order",
        slices(many),
        format!("no tenant {}", slices(none)),
        String::new(),
        String::new(),
    );
    for (name, seconds) in many.by_thread.iter().take(3) {
        table.row(
            &format!("  of which threads named {name}"),
            format!("{seconds:.2} s"),
            String::new(),
            String::new(),
            String::new(),
        );
    }
}

fn opening_rows(table: &mut Table, open: &Opening, sampled: usize) {
    let first = Run::from_parts(open.first.clone(), Duration::ZERO);
    let second = Run::from_parts(open.second.clone(), Duration::ZERO);
    let fresh = Run::from_parts(open.fresh.clone(), Duration::ZERO);
    table.header(&format!(
        "Opening an idle tenant: {sampled} closed tenants one after another ({} of them seen \
         closed before); GET /api/v1/namespaces; baseline (c): a new client's first request to \
         the same tenant once open",
        open.closed_before
    ));
    for (what, a, c) in [("p50", first.p50(), fresh.p50()), ("p99", first.p99(), fresh.p99())] {
        table.row(
            &format!("(a) first request, closed tenant, new client: {what}"),
            ms(a),
            format!("(c) new client, open tenant {}", ms(c)),
            ratio(a.as_secs_f64(), c.as_secs_f64()),
            String::new(),
        );
    }
    table.row(
        "(a) max",
        ms(first.percentile(100.0)),
        format!("(c) max {}", ms(fresh.percentile(100.0))),
        String::new(),
        String::new(),
    );
    table.row(
        "(b) second request, same client: p50 / p99",
        format!("{} / {}", ms(second.p50()), ms(second.p99())),
        String::new(),
        String::new(),
        String::new(),
    );
    let added = |a: Duration, c: Duration| a.as_secs_f64() * 1e3 - c.as_secs_f64() * 1e3;
    let p50 = added(first.p50(), fresh.p50());
    let p99 = added(first.p99(), fresh.p99());
    table.row(
        "added by opening: p50(a) - p50(c)",
        format!("{p50:.2} ms"),
        String::new(),
        String::new(),
        String::new(),
    );
    table.row(
        "added by opening: p99(a) - p99(c)",
        format!("{p99:.2} ms"),
        String::new(),
        String::new(),
        verdict(
            p99 <= TARGET_OPEN_ADDED_P99.as_secs_f64() * 1e3,
            format!("<= {}", ms(TARGET_OPEN_ADDED_P99)),
        ),
    );
}
