//! Replicas benchmark: 10,000 tenants over 4 API replicas, the replicas as processes, as a
//! StatefulSet of `carrel serve` runs them on a real host.
//!
//! Run with `cargo bench -p carrel --bench replicas`. A plain program (no harness): every wait is
//! bounded, and a watchdog kills every process, removes the temp dir and ends the run after 30
//! minutes; a guard does the same on every other exit, a panic included. It starts, in a temp dir:
//! `carrel up --no-tenants` as the host (the host API alone, no tenant manager), the namespace
//! `carrel-system` on it, then 4 `carrel serve` processes over the host's admin kubeconfig,
//! replicas `carrel-apiserver-0..3`, each with its own data dir and port, the serving CA shared
//! through the host Secret `carrel-system/carrel-serving-ca`, `--tenant-idle-after 10s`, and
//! replica 0's URL as every replica's `--endpoint`: the front door that tenant kubeconfigs name,
//! which forwards requests for other replicas' tenants to theirs. The processes are read through
//! `/proc/<pid>`; their logs go to files in the temp dir, and their warnings are counted.
//!
//! | section | ours | baseline (same run) |
//! |---|---|---|
//! | tenants over the replicas | N tenants (10,000; `CARREL_BENCH_REPLICA_TENANTS`) created through a kube client of the host API, at most 16 created and not yet Ready at a time (one host watch of `Tenant`s), until N or a time cap (900 s; `CARREL_BENCH_REPLICA_CAP_S`); all Ready, then 15 s idle (idle tenants close after 10 s), and RSS again 75 s after the creates; per replica: its tenants (`status.replica`, from a list), (VmRSS, threads, descriptors) − its 0-tenant reading, / its tenants; du of its data dir | each replica process with no tenant, once the 4 replicas' Leases exist |
//! | latency | 100 more tenants one after another: t0 just before the POST of the `Tenant` to the host, the host's Secret `admin-kubeconfig` in `carrel-<name>` polled every 1 ms, a new kube client from it (naming replica 0) lists namespaces until that succeeds: t1; split by `status.replica` into replica 0's (served there) and the others' (forwarded by replica 0) | in turns with the tenants: a host ConfigMap POST, then a new client from the host kubeconfig GETs it |
//! | forwarding | 200 `GET /api/v1/namespaces` of a tenant of another replica through replica 0, on one kept client | the same tenant at its own replica's port, on one kept client (same kube client, same TLS, same CA), in turns |
//!
//! The disk a tenant takes (about 1.3 MB: its store's preallocated log and sled's files) is
//! checked against the free space first: N is lowered, and said so, where it would not fit.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_bench::{median, ms, ratio, runtime, section, verdict, Held, Run, Table};
use carrel_tenants::{host_namespace, KUBECONFIG_SECRET};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{watcher, WatchStreamExt as _};
use kube::Api;
use parking_lot::Mutex;

const CARREL: &str = env!("CARGO_BIN_EXE_carrel");
/// The replicas, `carrel-apiserver-0..`; the first is the front door.
const REPLICAS: usize = 4;
/// Tenants created; `CARREL_BENCH_REPLICA_TENANTS` sets another count.
const TENANTS: u64 = 10_000;
const TENANTS_ENV: &str = "CARREL_BENCH_REPLICA_TENANTS";
/// How long creating them may take, in seconds; `CARREL_BENCH_REPLICA_CAP_S` sets another.
const CAP_S: u64 = 900;
const CAP_ENV: &str = "CARREL_BENCH_REPLICA_CAP_S";
/// Tenants created and not yet Ready, at most.
const IN_FLIGHT: usize = 16;
/// `--tenant-idle-after` of every replica, and how long all idle before they are read.
const IDLE_AFTER: &str = "10s";
const IDLE: Duration = Duration::from_secs(15);
/// A second reading this long after the creates ended (glibc's heap is trimmed a minute after
/// a few closes).
const LATER: Duration = Duration::from_secs(75);
/// Latency: tenants created one after another (and as many host ConfigMaps, in turns).
const LATENCY_TENANTS: usize = 100;
/// Forwarding: requests timed on each path, after some not timed.
const FORWARD_REQUESTS: usize = 200;
const FORWARD_WARM_UP: usize = 20;
/// The longest sleep between two polls.
const POLL: Duration = Duration::from_millis(1);
/// The longest one latency tenant (or baseline round) may take.
const TENANT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a tenant of the bulk may take from its create to Ready; more failed tenants
/// than `MAX_FAILED` end the creates.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_FAILED: usize = 100;
/// Any one request of the benchmark.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// A process must say where it serves within this; the replicas' Leases must exist within it.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Readings of a fresh replica are taken this long after all 4 Leases exist.
const SETTLE: Duration = Duration::from_secs(3);
/// What a tenant takes on disk, over-estimated (1.24–1.31 MB in the density benchmark), and
/// what must stay free besides.
const DISK_PER_TENANT: u64 = 1_400_000;
const DISK_SPARE: u64 = 4 << 30;
/// The whole run.
const WATCHDOG: Duration = Duration::from_secs(1800);

const REPLICA_NAMESPACE: &str = "carrel-system";
const CA_SECRET: &str = "carrel-system/carrel-serving-ca";
const REPLICA_LABEL: &str = "carrel.dev/replica";
const LOAD_ANNOTATION: &str = "carrel.dev/open-tenants";

/// Targets (those of the tenants benchmark).
const TARGET_P50: Duration = Duration::from_millis(50);
const TARGET_P99: Duration = Duration::from_millis(200);
const TARGET_RSS_PER_TENANT_KIB: f64 = 1024.0;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The processes started, in order (the host first), and the temp dir: what the guard and the
/// watchdog end and remove.
#[derive(Default)]
struct Started {
    children: Vec<Child>,
    dir: Option<PathBuf>,
}

static STARTED: Mutex<Started> = Mutex::new(Started { children: Vec::new(), dir: None });

/// Kill every process started, the replicas before the host, and remove the temp dir.
fn cleanup() {
    let (children, dir) = {
        let mut started = STARTED.lock();
        (std::mem::take(&mut started.children), started.dir.take())
    };
    for mut child in children.into_iter().rev() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Some(dir) = dir {
        let removing = Instant::now();
        let _ = std::fs::remove_dir_all(&dir);
        println!(
            "processes killed; temp dir {} removed in {:.1} s",
            dir.display(),
            removing.elapsed().as_secs_f64()
        );
    }
}

/// Ends everything started when dropped: on return, on error and on panic.
struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        cleanup();
    }
}

/// `carrel_bench::watchdog`, but one that kills the processes and removes the temp dir first:
/// `process::exit` runs no destructor.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        println!(
            "benchmark still running after {} s: giving up (a tenant never Ready, or a hang?)",
            limit.as_secs()
        );
        cleanup();
        std::process::exit(2);
    });
}

/// A started process: its id, its log, and what it printed on the line that says it serves.
struct Process {
    pid: u32,
    log: PathBuf,
    said: String,
}

/// Start `command` with its standard error going to `log`; wait for the line of its standard
/// output that starts with `marker`, and keep the process for the cleanup.
fn start(mut command: Command, log: &Path, marker: &'static str) -> BenchResult<Process> {
    let mut child = command
        .env_remove("CARREL_HOST_KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    STARTED.lock().children.push(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix(marker) {
                let _ = tx.send(rest.to_owned());
                break;
            }
        }
        lines.for_each(drop);
    });
    match rx.recv_timeout(START_TIMEOUT) {
        Ok(said) => Ok(Process { pid, log: log.to_owned(), said }),
        Err(_) => {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = text.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            Err(format!("{command:?} did not print {marker:?}; its log ends:\n{tail}").into())
        }
    }
}

/// A port free on 127.0.0.1 now.
fn free_port() -> BenchResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Process `pid`, its descriptors on its tenants' stores (under `data/tenants`) counted apart.
fn held(pid: u32, data: &Path) -> Held {
    Held::of(pid, &data.join("tenants"))
}

fn describe(h: &Held) -> String {
    format!(
        "VmRSS {:.1} MiB (anon {:.1}), {} threads, {} descriptors ({} on tenant stores)",
        h.rss_kib / 1024.0,
        h.anon_kib / 1024.0,
        h.threads,
        h.fds,
        h.store_fds
    )
}

/// Disk used under `path`, in KiB (`du -sk`), if it can be read.
fn disk_kib(path: &Path) -> Option<f64> {
    let out = Command::new("du").arg("-sk").arg(path).output().ok()?;
    String::from_utf8(out.stdout).ok()?.split_whitespace().next()?.parse().ok()
}

/// Bytes free for an unprivileged user on the file system of `path` (`df -Pk`).
fn disk_free(path: &Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(path).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let kib: u64 = text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

/// The load averages of the machine (1, 5 and 15 minutes).
fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Lines of a log, those at WARN or ERROR, and the first few distinct ones (without their
/// timestamps).
fn log_warnings(log: &Path) -> (usize, usize, Vec<String>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let bad: Vec<&str> =
        text.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    let mut first: Vec<String> = Vec::new();
    for line in &bad {
        let message: String =
            line.split_once(' ').map_or(*line, |(_, rest)| rest).chars().take(300).collect();
        if first.len() < 5 && !first.contains(&message) {
            first.push(message);
        }
    }
    (text.lines().count(), bad.len(), first)
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

fn replica_name(i: usize) -> String {
    format!("carrel-apiserver-{i}")
}

fn bulk_name(i: usize) -> String {
    format!("r{i:05}")
}

/// A kube client from a kubeconfig's text, as kubectl would make one.
async fn client_from(kubeconfig: &str) -> BenchResult<kube::Client> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> BenchResult<T> {
    Ok(carrel_bench::bounded(REQUEST_TIMEOUT, what, f).await?)
}

/// POST a `Tenant` to the host API, as `carrel tenant create` does.
async fn create_tenant(api: &Api<Tenant>, name: &str) -> BenchResult<()> {
    let tenant = Tenant {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(TenantSpec::default()),
        ..Default::default()
    };
    bounded(&format!("create tenant {name}"), api.create(&PostParams::default(), &tenant)).await?;
    Ok(())
}

/// What one host watch of `Tenant`s saw, and when: each tenant's replica and its Ready.
#[derive(Default)]
struct Seen {
    assigned: HashMap<String, (String, Instant)>,
    ready: HashMap<String, Instant>,
}

struct Watched {
    seen: Mutex<Seen>,
    /// Bumped at every tenant seen Ready.
    readies: tokio::sync::watch::Sender<u64>,
}

impl Watched {
    fn is_ready(&self, name: &str) -> bool {
        self.seen.lock().ready.contains_key(name)
    }

    fn ready_at(&self, name: &str) -> Option<Instant> {
        self.seen.lock().ready.get(name).copied()
    }

    fn assigned(&self, name: &str) -> Option<(String, Instant)> {
        self.seen.lock().assigned.get(name).cloned()
    }

    /// Tenants of the bulk seen Ready, and each replica's count of the bulk's assigned ones.
    fn bulk_counts(&self) -> (usize, BTreeMap<String, usize>) {
        let seen = self.seen.lock();
        let ready = seen.ready.keys().filter(|n| n.starts_with('r')).count();
        let mut by_replica = BTreeMap::new();
        for (name, (replica, _)) in &seen.assigned {
            if name.starts_with('r') {
                *by_replica.entry(replica.clone()).or_insert(0) += 1;
            }
        }
        (ready, by_replica)
    }

    /// Wait until `name` is seen Ready, up to `within`.
    async fn wait_ready(&self, name: &str, within: Duration) -> BenchResult<()> {
        let mut changed = self.readies.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.is_ready(name) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err("the tenant watch ended".into()),
                Err(_) => return Err(format!("{name}: not Ready within {within:?}").into()),
            }
        }
    }
}

fn watch_tenants(api: Api<Tenant>, watched: Arc<Watched>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(t) | watcher::Event::InitApply(t)) = event else {
                continue;
            };
            let now = Instant::now();
            let name = t.metadata.name.unwrap_or_default();
            let status = t.status.unwrap_or_default();
            let mut seen = watched.seen.lock();
            if let Some(replica) = status.replica {
                seen.assigned.entry(name.clone()).or_insert((replica, now));
            }
            if status.phase.as_deref() == Some("Ready") && !seen.ready.contains_key(&name) {
                seen.ready.insert(name, now);
                drop(seen);
                watched.readies.send_modify(|n| *n += 1);
            }
        }
    })
}

/// The replicas' Leases in `carrel-system`: replica name → its open-tenants annotation.
async fn replica_leases(host: &kube::Client) -> BenchResult<BTreeMap<String, String>> {
    let leases: Api<Lease> = Api::namespaced(host.clone(), REPLICA_NAMESPACE);
    let list =
        bounded("list Leases", leases.list(&ListParams::default().labels(REPLICA_LABEL))).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.labels?.get(REPLICA_LABEL)?.clone();
            let load = l.metadata.annotations.and_then(|a| a.get(LOAD_ANNOTATION).cloned());
            Some((name, load.unwrap_or_default()))
        })
        .collect())
}

/// One replica process.
struct Replica {
    name: String,
    port: u16,
    data: PathBuf,
    process: Process,
}

/// The host and the replicas, as started.
struct Fleet {
    host: Process,
    host_data: PathBuf,
    host_kubeconfig: String,
    replicas: Vec<Replica>,
    front: u16,
}

/// `carrel up --no-tenants` in `dir/host`, and its admin kubeconfig's path.
fn start_host(dir: &Path) -> BenchResult<(Process, PathBuf)> {
    let mut command = Command::new(CARREL);
    command.args(["up", "--no-tenants", "--listen", "127.0.0.1:0", "--data-dir"]);
    command.arg(dir.join("host"));
    let host = start(command, &dir.join("host.log"), "host kubeconfig: ")?;
    println!("  host: carrel up --no-tenants, pid {}, kubeconfig {}", host.pid, host.said);
    let kubeconfig = PathBuf::from(&host.said);
    Ok((host, kubeconfig))
}

/// The replicas, over `host` (whose `carrel-system` namespace must exist).
fn start_fleet(dir: &Path, host: Process, kubeconfig_path: &Path) -> BenchResult<Fleet> {
    let host_data = dir.join("host");
    let host_kubeconfig = std::fs::read_to_string(kubeconfig_path)?;
    let front = free_port()?;
    let mut replicas = Vec::with_capacity(REPLICAS);
    for i in 0..REPLICAS {
        let port = if i == 0 { front } else { free_port()? };
        let name = replica_name(i);
        let data = dir.join(&name);
        let mut command = Command::new(CARREL);
        command
            .arg("--host-kubeconfig")
            .arg(kubeconfig_path)
            .args(["serve", "--replica", &name])
            .arg(format!("--replica-address=127.0.0.1:{port}"))
            .arg(format!("--replica-namespace={REPLICA_NAMESPACE}"))
            .arg(format!("--serving-ca-secret={CA_SECRET}"))
            .arg("--data-dir")
            .arg(&data)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--endpoint=https://127.0.0.1:{front}"))
            .arg(format!("--tenant-idle-after={IDLE_AFTER}"))
            .arg(format!("--tenant-api-address=127.0.0.1:{front}"));
        let process = start(command, &dir.join(format!("{name}.log")), "tenants' endpoint: ")?;
        println!("  {name}: pid {}, port {port}, endpoint {}", process.pid, process.said);
        replicas.push(Replica { name, port, data, process });
    }
    Ok(Fleet { host, host_data, host_kubeconfig, replicas, front })
}

/// The bulk creates: how many were created and seen Ready, those that failed, and the time.
struct Bulk {
    wanted: usize,
    created: usize,
    failed: Vec<String>,
    elapsed: Duration,
    capped: bool,
}

async fn create_bulk(
    host: &kube::Client,
    watched: &Watched,
    fleet: &Fleet,
    wanted: usize,
    cap: Duration,
) -> Bulk {
    let api: Api<Tenant> = Api::all(host.clone());
    let started = Instant::now();
    let done = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    futures::stream::iter(0..wanted)
        .take_while(|_| {
            let go = started.elapsed() < cap && failed.lock().len() <= MAX_FAILED;
            futures::future::ready(go)
        })
        .map(|i| {
            let (api, done, failed) = (&api, &done, &failed);
            async move {
                let name = bulk_name(i);
                let made = match create_tenant(api, &name).await {
                    Ok(()) => watched.wait_ready(&name, READY_TIMEOUT).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = made {
                    failed.lock().push(e.to_string());
                }
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_multiple_of(1000) {
                    progress(n, started.elapsed(), watched, fleet);
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .for_each(|()| async {})
        .await;
    let created = done.load(Ordering::Relaxed);
    Bulk {
        wanted,
        created,
        failed: failed.into_inner(),
        elapsed: started.elapsed(),
        capped: created < wanted,
    }
}

fn progress(n: usize, elapsed: Duration, watched: &Watched, fleet: &Fleet) {
    let (ready, by_replica) = watched.bulk_counts();
    let replicas: Vec<String> = fleet
        .replicas
        .iter()
        .map(|r| {
            let h = held(r.process.pid, &r.data);
            format!(
                "{} {} ({:.0} MiB)",
                r.name.trim_start_matches("carrel-apiserver-"),
                by_replica.get(&r.name).copied().unwrap_or(0),
                h.rss_kib / 1024.0
            )
        })
        .collect();
    println!(
        "  {n} created in {:.1} s ({:.1}/s), {ready} Ready; by replica (RSS): {}; load {}",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64().max(1e-9),
        replicas.join(", "),
        loadavg()
    );
}

/// One latency tenant, from its create to its first successful list of namespaces.
struct Sample {
    replica: String,
    posted: Duration,
    assigned: Option<Duration>,
    ready: Option<Duration>,
    secret_polled: Duration,
    total: Duration,
    polls: usize,
    list_retries: usize,
}

async fn tenant_latency(host: &kube::Client, watched: &Watched, name: &str) -> BenchResult<Sample> {
    let tenants: Api<Tenant> = Api::all(host.clone());
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &host_namespace(name));
    let t0 = Instant::now();
    let deadline = t0 + TENANT_TIMEOUT;
    create_tenant(&tenants, name).await?;
    let posted = t0.elapsed();
    let mut polls = 0;
    let config = loop {
        polls += 1;
        let secret = bounded("poll the Secret", secrets.get_opt(KUBECONFIG_SECRET)).await?;
        if let Some(bytes) = secret.and_then(|s| s.data?.remove("kubeconfig")) {
            break String::from_utf8(bytes.0)?;
        }
        if Instant::now() > deadline {
            return Err(format!("tenant {name}: no kubeconfig Secret after {polls} polls").into());
        }
        tokio::time::sleep(POLL).await;
    };
    let secret_polled = t0.elapsed();
    let namespaces: Api<Namespace> = Api::all(client_from(&config).await?);
    let mut list_retries = 0;
    loop {
        match namespaces.list(&ListParams::default()).await {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                return Err(format!("tenant {name}: listing namespaces: {e}").into());
            }
            Err(_) => {
                list_retries += 1;
                tokio::time::sleep(POLL).await;
            }
        }
    }
    let total = t0.elapsed();
    // The host watch's timestamps (read after the clock stopped).
    let mut waited = 0;
    while (watched.assigned(name).is_none() || !watched.is_ready(name)) && waited < 2000 {
        tokio::time::sleep(POLL).await;
        waited += 1;
    }
    let assigned = watched.assigned(name);
    let replica = assigned.as_ref().map_or_else(|| "(unseen)".to_owned(), |(r, _)| r.clone());
    Ok(Sample {
        replica,
        posted,
        assigned: assigned.map(|(_, at)| at.duration_since(t0)),
        ready: watched.ready_at(name).map(|at| at.duration_since(t0)),
        secret_polled,
        total,
        polls,
        list_retries,
    })
}

/// The host API's own create-then-read through the same client path.
async fn baseline_latency(
    host: &kube::Client,
    kubeconfig: &str,
    name: &str,
) -> BenchResult<Duration> {
    let configmaps: Api<ConfigMap> = Api::namespaced(host.clone(), "default");
    let object = ConfigMap {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        data: Some(BTreeMap::from([("key".to_owned(), "value".to_owned())])),
        ..Default::default()
    };
    let t0 = Instant::now();
    bounded("create a ConfigMap", configmaps.create(&PostParams::default(), &object)).await?;
    let fresh: Api<ConfigMap> = Api::namespaced(client_from(kubeconfig).await?, "default");
    bounded("get the ConfigMap", fresh.get(name)).await?;
    Ok(t0.elapsed())
}

/// One `GET /api/v1/namespaces` on `client`, timed.
async fn list_namespaces(client: &kube::Client) -> BenchResult<Duration> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    bounded("list namespaces", namespaces.list(&ListParams::default())).await?;
    Ok(started.elapsed())
}

/// A tenant's admin kubeconfig, from its host Secret.
async fn tenant_kubeconfig(host: &kube::Client, tenant: &str) -> BenchResult<String> {
    let secrets: Api<Secret> = Api::namespaced(host.clone(), &host_namespace(tenant));
    let secret = bounded("read a kubeconfig Secret", secrets.get(KUBECONFIG_SECRET)).await?;
    let bytes = secret
        .data
        .and_then(|mut d| d.remove("kubeconfig"))
        .ok_or_else(|| format!("{tenant}'s Secret has no kubeconfig"))?;
    Ok(String::from_utf8(bytes.0)?)
}

/// The forwarding section's times, per path.
struct Forwarding {
    tenant: String,
    replica: String,
    front: Vec<Duration>,
    direct: Vec<Duration>,
    local: Option<(String, Vec<Duration>)>,
}

/// `GET /api/v1/namespaces` of `away` (a tenant of another replica) through the front door and
/// at its own replica, in turns, each on its own kept client; and of `local` (a tenant of
/// replica 0) through the front door, where it is served.
async fn forwarding(
    host: &kube::Client,
    fleet: &Fleet,
    away: (&str, &str),
    local: Option<&str>,
) -> BenchResult<Forwarding> {
    let (tenant, replica) = away;
    let port = fleet
        .replicas
        .iter()
        .find(|r| r.name == replica)
        .map(|r| r.port)
        .ok_or_else(|| format!("no replica {replica}"))?;
    let config = tenant_kubeconfig(host, tenant).await?;
    let at_front = format!("https://127.0.0.1:{}/tenants/", fleet.front);
    if !config.contains(&at_front) {
        return Err(format!("{tenant}'s kubeconfig does not name {at_front}: {config}").into());
    }
    let direct_config = config.replace(&at_front, &format!("https://127.0.0.1:{port}/tenants/"));
    let front = client_from(&config).await?;
    let direct = client_from(&direct_config).await?;
    let local_client = match local {
        Some(name) => {
            Some((name.to_owned(), client_from(&tenant_kubeconfig(host, name).await?).await?))
        }
        None => None,
    };
    for _ in 0..FORWARD_WARM_UP {
        list_namespaces(&front).await?;
        list_namespaces(&direct).await?;
        if let Some((_, c)) = &local_client {
            list_namespaces(c).await?;
        }
    }
    let mut out = Forwarding {
        tenant: tenant.to_owned(),
        replica: replica.to_owned(),
        front: Vec::with_capacity(FORWARD_REQUESTS),
        direct: Vec::with_capacity(FORWARD_REQUESTS),
        local: local_client.as_ref().map(|(n, _)| (n.clone(), Vec::new())),
    };
    for i in 0..FORWARD_REQUESTS {
        // Alternate which goes first.
        if i % 2 == 0 {
            out.front.push(list_namespaces(&front).await?);
            out.direct.push(list_namespaces(&direct).await?);
        } else {
            out.direct.push(list_namespaces(&direct).await?);
            out.front.push(list_namespaces(&front).await?);
        }
        if let (Some((_, c)), Some((_, times))) = (&local_client, &mut out.local) {
            times.push(list_namespaces(c).await?);
        }
    }
    Ok(out)
}

fn main() -> BenchResult<()> {
    let started = Instant::now();
    watchdog(WATCHDOG);
    let _guard = Guard;
    let mut wanted = usize::try_from(env_count(TENANTS_ENV, TENANTS)?)?;
    let cap = Duration::from_secs(env_count(CAP_ENV, CAP_S)?);
    let dir = tempfile::tempdir()?.keep();
    STARTED.lock().dir = Some(dir.clone());
    println!(
        "carrel replicas benchmark: every ratio is ours / baseline, both measured in this run"
    );
    println!(
        "cores: {}; load average {}; temp dir {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        loadavg(),
        dir.display()
    );
    let free = disk_free(&dir).ok_or("df could not say how much disk is free")?;
    let fits = usize::try_from(free.saturating_sub(DISK_SPARE) / DISK_PER_TENANT)?;
    println!(
        "disk: {:.1} GiB free; {wanted} tenants need about {:.1} GiB (+{} GiB spare)",
        free as f64 / f64::from(1 << 30),
        (wanted as u64 * DISK_PER_TENANT) as f64 / f64::from(1 << 30),
        DISK_SPARE >> 30
    );
    if fits < wanted + LATENCY_TENANTS {
        let lowered = fits.saturating_sub(LATENCY_TENANTS);
        println!(
            "DISK: only {lowered} of {wanted} tenants fit on this disk: N lowered to {lowered}"
        );
        wanted = lowered;
    }
    if wanted == 0 {
        return Err("no room on the disk for any tenant".into());
    }

    section(&format!("starting the host and {REPLICAS} replicas"));
    let (host_process, kubeconfig_path) = start_host(&dir)?;
    let rt = runtime("client")?;
    let host = rt.block_on(client_from(&std::fs::read_to_string(&kubeconfig_path)?))?;
    rt.block_on(async {
        let namespaces: Api<Namespace> = Api::all(host.clone());
        let namespace = Namespace {
            metadata: ObjectMeta { name: Some(REPLICA_NAMESPACE.to_owned()), ..Default::default() },
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(format!("creating namespace {REPLICA_NAMESPACE}: {e}")),
        }
    })?;
    let fleet = start_fleet(&dir, host_process, &kubeconfig_path)?;
    let leases_at = Instant::now();
    let leases = rt.block_on(async {
        loop {
            let leases = replica_leases(&host).await?;
            if leases.len() >= REPLICAS {
                return BenchResult::Ok(leases);
            }
            if leases_at.elapsed() > START_TIMEOUT {
                return Err(format!("only the Leases of {leases:?} after {START_TIMEOUT:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })?;
    println!(
        "  {} replicas' Leases after {:.1} s: {:?}",
        leases.len(),
        leases_at.elapsed().as_secs_f64(),
        leases.keys().collect::<Vec<_>>()
    );
    std::thread::sleep(SETTLE);
    let empty: Vec<Held> = fleet.replicas.iter().map(|r| held(r.process.pid, &r.data)).collect();
    let host_empty = held(fleet.host.pid, &fleet.host_data);
    for (r, h) in fleet.replicas.iter().zip(&empty) {
        println!("  {} with no tenant: {}", r.name, describe(h));
    }
    println!("  host with no tenant: {}", describe(&host_empty));

    let watched =
        Arc::new(Watched { seen: Mutex::default(), readies: tokio::sync::watch::Sender::new(0) });
    let _watch = {
        let _entered = rt.enter();
        watch_tenants(Api::all(host.clone()), watched.clone())
    };

    section(&format!(
        "creating {wanted} tenants through the host, at most {IN_FLIGHT} not yet Ready, cap {} s",
        cap.as_secs()
    ));
    let bulk = rt.block_on(create_bulk(&host, &watched, &fleet, wanted, cap));
    let bulk_ended = Instant::now();
    let ready = bulk.created - bulk.failed.len();
    println!(
        "  {} created in {:.1} s ({:.1}/s), {ready} Ready, {} failed; load {}",
        bulk.created,
        bulk.elapsed.as_secs_f64(),
        bulk.created as f64 / bulk.elapsed.as_secs_f64().max(1e-9),
        bulk.failed.len(),
        loadavg()
    );
    for failure in bulk.failed.iter().take(5) {
        println!("  failed: {failure}");
    }
    if bulk.capped {
        println!(
            "  CAPPED: only {} of {} tenants in the {} s cap",
            bulk.created,
            bulk.wanted,
            cap.as_secs()
        );
    }
    // The balance, from the host (the watch may lag).
    let listed = rt.block_on(bounded(
        "list tenants",
        Api::<Tenant>::all(host.clone()).list(&ListParams::default()),
    ))?;
    let mut balance: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_ready = 0;
    for t in &listed.items {
        let status = t.status.clone().unwrap_or_default();
        *balance.entry(status.replica.unwrap_or_else(|| "(none)".to_owned())).or_insert(0) += 1;
        if status.phase.as_deref() != Some("Ready") {
            not_ready += 1;
        }
    }
    println!(
        "  the host lists {} tenants, {not_ready} not Ready; by status.replica: {balance:?}",
        listed.items.len()
    );

    section(&format!("{} s idle (tenants close after {IDLE_AFTER} idle)", IDLE.as_secs()));
    std::thread::sleep(IDLE);
    let full: Vec<Held> = fleet.replicas.iter().map(|r| held(r.process.pid, &r.data)).collect();
    let host_full = held(fleet.host.pid, &fleet.host_data);
    let loads = rt.block_on(replica_leases(&host)).unwrap_or_default();
    for (r, h) in fleet.replicas.iter().zip(&full) {
        println!(
            "  {} with {} tenants: {}; its Lease's open tenants: {}",
            r.name,
            balance.get(&r.name).copied().unwrap_or(0),
            describe(h),
            loads.get(&r.name).map_or("-", String::as_str)
        );
    }
    println!("  host with {} tenants: {}", listed.items.len(), describe(&host_full));
    let du_started = Instant::now();
    let disk: Vec<Option<f64>> = fleet.replicas.iter().map(|r| disk_kib(&r.data)).collect();
    let host_disk = disk_kib(&fleet.host_data);
    println!(
        "  du of the data dirs (KiB, {:.1} s): {:?}; host {:?}; disk free now {:.1} GiB",
        du_started.elapsed().as_secs_f64(),
        disk,
        host_disk,
        disk_free(&dir).unwrap_or(0) as f64 / f64::from(1 << 30)
    );

    std::thread::sleep(LATER.saturating_sub(bulk_ended.elapsed()));
    let later: Vec<Held> = fleet.replicas.iter().map(|r| held(r.process.pid, &r.data)).collect();
    let host_later = held(fleet.host.pid, &fleet.host_data);
    for ((r, h), f) in fleet.replicas.iter().zip(&later).zip(&full) {
        println!(
            "  {} {:.0} s after the creates ended: {}; CPU since the reading before {:.2}% of a \
             core",
            r.name,
            bulk_ended.elapsed().as_secs_f64(),
            describe(h),
            h.cpu_since(f)
        );
    }
    println!(
        "  host {:.0} s after the creates ended: {}; CPU since the reading before {:.2}% of a core",
        bulk_ended.elapsed().as_secs_f64(),
        describe(&host_later),
        host_later.cpu_since(&host_full)
    );

    // Tenants' stores are written during the creates; what the kernel has not written back yet
    // slows every fsync after. Reported, then written back, so that the latency below is a
    // tenant's own, not the backlog's.
    let (dirty, writeback) = dirty_kib();
    let synced = Instant::now();
    let _ = std::process::Command::new("sync").status();
    println!(
        "  before the latency: {dirty} KiB dirty, {writeback} KiB under writeback; sync took {:.2} s",
        synced.elapsed().as_secs_f64()
    );

    section("latency: warm-up (not in the percentiles)");
    let warm = rt.block_on(tenant_latency(&host, &watched, "lat-warm-up"))?;
    let warm_base = rt.block_on(baseline_latency(&host, &fleet.host_kubeconfig, "cm-warm-up"))?;
    println!(
        "  first tenant ({}): {} to its first list; first host ConfigMap: {}",
        warm.replica,
        ms(warm.total),
        ms(warm_base)
    );
    section(&format!(
        "latency: {LATENCY_TENANTS} tenants one after another through replica 0, host ConfigMaps \
         in turns"
    ));
    let mut ours: Vec<Sample> = Vec::with_capacity(LATENCY_TENANTS);
    let mut base = Vec::with_capacity(LATENCY_TENANTS);
    let latency_started = Instant::now();
    for i in 0..LATENCY_TENANTS {
        base.push(rt.block_on(baseline_latency(
            &host,
            &fleet.host_kubeconfig,
            &format!("cm-{i:03}"),
        ))?);
        ours.push(rt.block_on(tenant_latency(&host, &watched, &format!("lat-{i:03}")))?);
        if (i + 1) % 20 == 0 {
            let last = &ours[i + 1 - 20..=i];
            let local = last.iter().filter(|s| s.replica == replica_name(0)).count();
            println!(
                "  {:>3} tenants: last 20 p50 {} ({local} of them on replica 0; baseline {}), \
                 {:.1} s so far",
                i + 1,
                ms(median(last.iter().map(|s| s.total).collect())),
                ms(median(base[i + 1 - 20..=i].to_vec())),
                latency_started.elapsed().as_secs_f64()
            );
        }
    }
    let latency_elapsed = latency_started.elapsed();

    section("forwarding: a tenant of another replica through replica 0 and at its own");
    let away = ours.iter().find(|s| s.replica != replica_name(0)).map(|s| s.replica.clone());
    let away_name =
        ours.iter().position(|s| s.replica != replica_name(0)).map(|i| format!("lat-{i:03}"));
    let local_name =
        ours.iter().position(|s| s.replica == replica_name(0)).map(|i| format!("lat-{i:03}"));
    let forward = match (away_name, away) {
        (Some(name), Some(replica)) => {
            let f =
                rt.block_on(forwarding(&host, &fleet, (&name, &replica), local_name.as_deref()))?;
            println!(
                "  {} (on {}): through replica 0 p50 {}, at its replica p50 {}",
                f.tenant,
                f.replica,
                ms(median(f.front.clone())),
                ms(median(f.direct.clone()))
            );
            Some(f)
        }
        _ => {
            println!("  no latency tenant went to another replica: nothing to forward");
            None
        }
    };

    section("the processes' logs");
    let mut logs = vec![("host".to_owned(), fleet.host.log.clone())];
    logs.extend(fleet.replicas.iter().map(|r| (r.name.clone(), r.process.log.clone())));
    for (name, log) in &logs {
        let (lines, bad, first) = log_warnings(log);
        println!("  {name}: {lines} lines, {bad} at WARN or ERROR");
        for line in first {
            println!("    {line}");
        }
    }

    let mut table = Table::default();
    spread_rows(&mut table, &fleet, &bulk, &balance, (&empty, &full, &later), &disk, cap);
    host_rows(&mut table, (&host_empty, &host_full), host_disk, listed.items.len());
    let cpu: Vec<String> = later
        .iter()
        .zip(&full)
        .map(|(l, f)| format!("{:.2}%", l.cpu_since(f)))
        .chain([format!("host {:.2}%", host_later.cpu_since(&host_full))])
        .collect();
    let window = (later[0].at - full[0].at).as_secs_f64();
    table.row(
        &format!("idle CPU, {window:.0} s before the latency (% of a core)"),
        cpu.join(" / "),
        String::new(),
        String::new(),
        String::new(),
    );
    latency_rows(&mut table, &ours, &base, (&warm, warm_base), latency_elapsed);
    if let Some(f) = &forward {
        forwarding_rows(&mut table, f);
    }
    table.print();
    println!();
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    drop(rt);
    Ok(())
}

/// Bytes (given in KiB) in KiB, MiB or GiB.
fn kib(k: f64) -> String {
    if k.abs() >= 1024.0 * 1024.0 {
        format!("{:.2} GiB", k / (1024.0 * 1024.0))
    } else if k.abs() >= 1024.0 {
        format!("{:.1} MiB", k / 1024.0)
    } else {
        format!("{k:.1} KiB")
    }
}

fn spread_rows(
    table: &mut Table,
    fleet: &Fleet,
    bulk: &Bulk,
    balance: &BTreeMap<String, usize>,
    (empty, full, later): (&[Held], &[Held], &[Held]),
    disk: &[Option<f64>],
    cap: Duration,
) {
    let capped = if bulk.capped {
        format!(" -- CAPPED at {} of {} by the {} s cap", bulk.created, bulk.wanted, cap.as_secs())
    } else {
        String::new()
    };
    table.header(&format!(
        "Tenants over {REPLICAS} replicas: {} created through the host ({IN_FLIGHT} not yet Ready \
         at most) in {:.1} s{capped}, then {} s idle; per tenant = (replica with its tenants - \
         the same replica with none) / its tenants",
        bulk.created,
        bulk.elapsed.as_secs_f64(),
        IDLE.as_secs()
    ));
    table.row(
        "tenants created and Ready per second",
        format!("{:.1} /s", bulk.created as f64 / bulk.elapsed.as_secs_f64().max(1e-9)),
        format!("{} failed", bulk.failed.len()),
        String::new(),
        String::new(),
    );
    let counts: Vec<usize> =
        fleet.replicas.iter().map(|r| balance.get(&r.name).copied().unwrap_or(0)).collect();
    let (most, least) =
        (counts.iter().max().copied().unwrap_or(0), counts.iter().min().copied().unwrap_or(0));
    table.row(
        "tenants per replica (status.replica)",
        counts.iter().map(usize::to_string).collect::<Vec<_>>().join(" / "),
        format!("even: {:.1} each", counts.iter().sum::<usize>() as f64 / REPLICAS as f64),
        format!("max/min {}", ratio(most as f64, least as f64)),
        String::new(),
    );
    for (i, r) in fleet.replicas.iter().enumerate() {
        let n = counts[i].max(1) as f64;
        let (e, f) = (empty[i], full[i]);
        let per = (f.rss_kib - e.rss_kib) / n;
        table.row(
            &format!("{}: RSS per idle tenant", r.name),
            format!("{} ({} -> {})", kib(per), kib(e.rss_kib), kib(f.rss_kib)),
            format!("no tenant: {}", kib(e.rss_kib)),
            ratio(f.rss_kib, e.rss_kib),
            verdict(per <= TARGET_RSS_PER_TENANT_KIB, "<= 1 MiB".to_owned()),
        );
    }
    for (i, r) in fleet.replicas.iter().enumerate() {
        let n = counts[i].max(1) as f64;
        let (e, l) = (empty[i], later[i]);
        table.row(
            &format!("  {}: the same {} s after the creates", r.name, LATER.as_secs()),
            format!(
                "{} ({} -> {})",
                kib((l.rss_kib - e.rss_kib) / n),
                kib(e.rss_kib),
                kib(l.rss_kib)
            ),
            String::new(),
            ratio(l.rss_kib, e.rss_kib),
            String::new(),
        );
    }
    for (i, r) in fleet.replicas.iter().enumerate() {
        let n = counts[i].max(1) as f64;
        let (e, f) = (empty[i], full[i]);
        table.row(
            &format!("{}: threads, descriptors", r.name),
            format!(
                "{} -> {}, {} -> {} ({} on stores)",
                e.threads, f.threads, e.fds, f.fds, f.store_fds
            ),
            format!(
                "per tenant {:.3}, {:.3}",
                (f.threads as f64 - e.threads as f64) / n,
                (f.fds as f64 - e.fds as f64) / n
            ),
            String::new(),
            String::new(),
        );
    }
    for (i, r) in fleet.replicas.iter().enumerate() {
        let n = counts[i].max(1) as f64;
        let used = disk.get(i).copied().flatten();
        table.row(
            &format!("{}: disk (du of its data dir)", r.name),
            used.map_or_else(|| "-".to_owned(), kib),
            used.map_or_else(String::new, |d| format!("per tenant {}", kib(d / n))),
            String::new(),
            String::new(),
        );
    }
}

fn host_rows(table: &mut Table, (empty, full): (&Held, &Held), disk: Option<f64>, tenants: usize) {
    let n = tenants.max(1) as f64;
    table.row(
        "host (carrel up --no-tenants): RSS",
        format!("{} -> {}", kib(empty.rss_kib), kib(full.rss_kib)),
        format!("per tenant {}", kib((full.rss_kib - empty.rss_kib) / n)),
        ratio(full.rss_kib, empty.rss_kib),
        String::new(),
    );
    table.row(
        "host: disk (du of its data dir)",
        disk.map_or_else(|| "-".to_owned(), kib),
        disk.map_or_else(String::new, |d| format!("per tenant {}", kib(d / n))),
        String::new(),
        String::new(),
    );
}

fn run_of(times: impl Iterator<Item = Duration>) -> Run {
    Run::from_parts(times.collect(), Duration::ZERO)
}

fn latency_rows(
    table: &mut Table,
    ours: &[Sample],
    base: &[Duration],
    (warm, warm_base): (&Sample, Duration),
    elapsed: Duration,
) {
    let base_run = run_of(base.iter().copied());
    table.header(&format!(
        "Tenant create -> first successful list of namespaces through replica 0: {} tenants one \
         after another ({:.1} s in all); baseline: host ConfigMap create -> a fresh client's \
         first GET of it",
        ours.len(),
        elapsed.as_secs_f64()
    ));
    let local: Vec<&Sample> = ours.iter().filter(|s| s.replica == replica_name(0)).collect();
    let away: Vec<&Sample> = ours.iter().filter(|s| s.replica != replica_name(0)).collect();
    let groups = [
        (format!("all {}", ours.len()), ours.iter().collect::<Vec<_>>()),
        (format!("replica 0's, served there ({})", local.len()), local),
        (format!("other replicas', forwarded ({})", away.len()), away),
    ];
    for (what, samples) in &groups {
        let run = run_of(samples.iter().map(|s| s.total));
        table.row(
            &format!("{what}: p50"),
            ms(run.p50()),
            format!("baseline {}", ms(base_run.p50())),
            ratio(run.p50().as_secs_f64(), base_run.p50().as_secs_f64()),
            verdict(run.p50() <= TARGET_P50, format!("<= {}", ms(TARGET_P50))),
        );
        table.row(
            &format!("{what}: p99"),
            ms(run.p99()),
            format!("baseline {}", ms(base_run.p99())),
            ratio(run.p99().as_secs_f64(), base_run.p99().as_secs_f64()),
            verdict(run.p99() <= TARGET_P99, format!("<= {}", ms(TARGET_P99))),
        );
    }
    let all = run_of(ours.iter().map(|s| s.total));
    table.row(
        "all: max",
        ms(all.percentile(100.0)),
        format!("baseline {}", ms(base_run.percentile(100.0))),
        String::new(),
        String::new(),
    );
    table.row(
        "first after the bulk (warm-up, not above)",
        format!("{} ({})", ms(warm.total), warm.replica),
        format!("baseline {}", ms(warm_base)),
        ratio(warm.total.as_secs_f64(), warm_base.as_secs_f64()),
        String::new(),
    );
    let mut by_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for s in ours {
        *by_replica.entry(s.replica.as_str()).or_insert(0) += 1;
    }
    table.row(
        "  tenants by replica",
        by_replica.iter().map(|(r, n)| format!("{r} {n}")).collect::<Vec<_>>().join(", "),
        String::new(),
        String::new(),
        String::new(),
    );
    let step = |what: &str, times: Vec<Duration>| {
        let n = times.len();
        let run = Run::from_parts(times, Duration::ZERO);
        let what = if n == ours.len() { what.to_owned() } else { format!("{what} ({n} seen)") };
        (what, run)
    };
    for (what, run) in [
        step("  POST answered: p50", ours.iter().map(|s| s.posted).collect()),
        step(
            "  -> status.replica (host watch): p50",
            ours.iter().filter_map(|s| s.assigned).collect(),
        ),
        step("  -> Secret found by the poll: p50", ours.iter().map(|s| s.secret_polled).collect()),
        step("  -> status Ready (host watch): p50", ours.iter().filter_map(|s| s.ready).collect()),
        step(
            "  new client + first list: p50",
            ours.iter().map(|s| s.total - s.secret_polled).collect(),
        ),
    ] {
        table.row(&what, ms(run.p50()), String::new(), String::new(), String::new());
    }
    let polls: usize = ours.iter().map(|s| s.polls).sum();
    let retries: usize = ours.iter().map(|s| s.list_retries).sum();
    table.row(
        "  Secret polls per tenant / failed lists",
        format!("{:.1} / {retries}", polls as f64 / ours.len().max(1) as f64),
        String::new(),
        String::new(),
        String::new(),
    );
}

fn forwarding_rows(table: &mut Table, f: &Forwarding) {
    let front = run_of(f.front.iter().copied());
    let direct = run_of(f.direct.iter().copied());
    table.header(&format!(
        "Forwarding: GET /api/v1/namespaces of tenant {} (on {}), {} each in turns after {} not \
         timed, one kept kube client per path; baseline: the same at its replica's own port",
        f.tenant,
        f.replica,
        f.front.len(),
        FORWARD_WARM_UP
    ));
    for (what, p) in [("p50", 50.0), ("p99", 99.0)] {
        let (a, b) = (front.percentile(p), direct.percentile(p));
        table.row(
            &format!("through replica 0 (forwarded): {what}"),
            ms(a),
            format!("at its replica {}", ms(b)),
            ratio(a.as_secs_f64(), b.as_secs_f64()),
            String::new(),
        );
    }
    table.row(
        "  forwarding adds: p50(front) - p50(direct)",
        ms(front.p50().saturating_sub(direct.p50())),
        String::new(),
        String::new(),
        String::new(),
    );
    if let Some((name, times)) = &f.local {
        let local = run_of(times.iter().copied());
        table.row(
            &format!("  a tenant of replica 0 ({name}) through it: p50 / p99"),
            format!("{} / {}", ms(local.p50()), ms(local.p99())),
            String::new(),
            String::new(),
            String::new(),
        );
    }
}

/// The machine's dirty and under-writeback page cache, in KiB (`/proc/meminfo`).
fn dirty_kib() -> (u64, u64) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("Dirty:"), field("Writeback:"))
}
