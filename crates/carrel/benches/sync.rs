//! Syncer benchmark: how long a tenant pod takes to become a host pod, and to show Running in
//! the tenant (simulated nodes), with 1 and with 20 tenants creating 500 pods (between them, and
//! each); and what
//! `carrel up` spends in CPU time and memory per 1,000 synced pods.
//!
//! Run with `cargo bench -p carrel --bench sync`. A plain program (no harness), bounded in count
//! and time, with a watchdog. It starts the `carrel` binary (`carrel up --sim-nodes 2
//! --sim-max-pods 8000`: the run keeps about 11,500 pods running on the two nodes) on
//! 127.0.0.1:0 and talks to it with kube clients, as tenants and the host would.
//!
//! | measurement | ours | baseline (same run) |
//! |---|---|---|
//! | pod → host pod | tenant POST returned → the host pod seen on a host watch | one pod POST to the host, request to response (the least a synced pod costs the host) |
//! | pod → Running | tenant POST returned → the tenant pod seen Running on a tenant watch | host POST returned → the host pod seen Running |
//! | where a pod waits, 20 tenants | pod → host pod; the tenant POST's round trip; POST sent → host pod | the same on a fresh `carrel up --sync-window 0` (every create let through at once) |
//! | CPU, memory | `carrel up`'s CPU seconds and VmRSS growth per 1,000 synced pods (host API, tenant APIs, syncers and simulated kubelets together) | the same per 1,000 host pods created directly |
//! | the syncers alone | 20 tenants' syncers in a process of their own beside `carrel up --no-syncers` (this program, run again as that process): its CPU seconds and VmRSS growth per 1,000 synced pods, and `carrel up`'s | as above |

#![allow(clippy::print_stdout)]

mod up;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, runtime, section, verdict, watchdog, Run, Table};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use parking_lot::Mutex;
use up::{client_from, create_tenant, start, usage, BenchResult, Up};

use base64::Engine as _;
use carrel_tenants::host_namespace;
use serde_json::json;

const PODS: usize = 500;
const WATCHDOG: Duration = Duration::from_secs(600);
const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// When each pod was seen, by key.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<HashMap<String, Instant>>>);

impl Seen {
    fn mark(&self, key: String) {
        self.0.lock().entry(key).or_insert_with(Instant::now);
    }
    fn get(&self, key: &str) -> Option<Instant> {
        self.0.lock().get(key).copied()
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }))
    .expect("a pod")
}

/// Watch pods on `api`, marking when each is first seen (`seen`) and first Running (`running`).
fn watch_pods(
    api: Api<Pod>,
    prefix: String,
    seen: Seen,
    running: Seen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
                continue;
            };
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let key = format!("{prefix}{ns}/{}", p.metadata.name.clone().unwrap_or_default());
            seen.mark(key.clone());
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                running.mark(key);
            }
        }
    })
}

async fn wait_for(seen: &Seen, key: &str) -> BenchResult<Instant> {
    let deadline = Instant::now() + POD_TIMEOUT;
    loop {
        if let Some(t) = seen.get(key) {
            return Ok(t);
        }
        if Instant::now() > deadline {
            return Err(format!("{key} not seen within {POD_TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Runs: create → host pod, create → Running; for tenants also the create's round trip, and
/// the time from sending it to the host pod.
struct Latencies {
    host: Run,
    running: Run,
    post: Option<Run>,
    sent_to_host: Option<Run>,
}

/// A tenant of the run: its name, its admin's kubeconfig and a client of its API.
struct Tenant {
    name: String,
    kubeconfig: PathBuf,
    client: kube::Client,
}

/// Tenants `<tag>-0` … `<tag>-<count - 1>`, created with `carrel tenant create`.
async fn create_tenants(up: &Up, tag: &str, count: usize, home: &Path) -> BenchResult<Vec<Tenant>> {
    let mut tenants = Vec::new();
    for i in 0..count {
        let name = format!("{tag}-{i}");
        let kubeconfig = home.join(format!("{name}.kubeconfig"));
        create_tenant(up, &name, &kubeconfig)?;
        let client = client_from(&kubeconfig).await?;
        tenants.push(Tenant { name, kubeconfig, client });
    }
    Ok(tenants)
}

/// `tenants` new tenants create `pods` pods between them, each tenant one after another, all
/// tenants at once.
async fn tenant_run(
    up: &Up,
    host: &kube::Client,
    tag: &str,
    tenants: usize,
    pods: usize,
    home: &Path,
) -> BenchResult<Latencies> {
    let tenants = create_tenants(up, tag, tenants, home).await?;
    pods_run(host, &tenants, pods, "p").await
}

/// `tenants` create `pods` pods between them, named `<prefix><k>`, each tenant one after
/// another, all tenants at once.
async fn pods_run(
    host: &kube::Client,
    tenants: &[Tenant],
    pods: usize,
    prefix: &str,
) -> BenchResult<Latencies> {
    let clients: Vec<(String, kube::Client)> =
        tenants.iter().map(|t| (t.name.clone(), t.client.clone())).collect();
    let host_seen = Seen::default();
    let host_watch =
        watch_pods(Api::all(host.clone()), String::new(), host_seen.clone(), Seen::default());
    let tenant_running = Seen::default();
    let mut watches = vec![host_watch];
    for (name, client) in &clients {
        watches.push(watch_pods(
            Api::all(client.clone()),
            format!("{name}:"),
            Seen::default(),
            tenant_running.clone(),
        ));
    }
    // The watches list first; give them a moment to be in place before timing starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let per = pods / clients.len();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (name, client) in clients {
        let host_seen = host_seen.clone();
        let running = tenant_running.clone();
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            let api: Api<Pod> = Api::namespaced(client, "default");
            let mut created = Vec::new();
            for k in 0..per {
                let pod_name = format!("{prefix}{k}");
                let sent = Instant::now();
                api.create(&PostParams::default(), &pod(&pod_name)).await?;
                created.push((pod_name, sent, Instant::now()));
            }
            let mut lat = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            for (pod_name, sent, at) in created {
                let h =
                    wait_for(&host_seen, &format!("carrel-{name}/{pod_name}-x-default")).await?;
                let r = wait_for(&running, &format!("{name}:default/{pod_name}")).await?;
                lat[0].push(h.saturating_duration_since(at));
                lat[1].push(r.saturating_duration_since(at));
                lat[2].push(at.saturating_duration_since(sent));
                lat[3].push(h.saturating_duration_since(sent));
            }
            BenchResult::Ok(lat)
        }));
    }
    let mut all: [Vec<Duration>; 4] = Default::default();
    for t in tasks {
        for (into, from) in all.iter_mut().zip(t.await??) {
            into.extend(from);
        }
    }
    let [host_lat, run_lat, post_lat, sent_lat] = all;
    let elapsed = started.elapsed();
    for w in watches {
        w.abort();
    }
    Ok(Latencies {
        host: Run::from_parts(host_lat, elapsed),
        running: Run::from_parts(run_lat, elapsed),
        post: Some(Run::from_parts(post_lat, elapsed)),
        sent_to_host: Some(Run::from_parts(sent_lat, elapsed)),
    })
}

/// The baseline: `PODS` pods POSTed to the host directly, one after another.
async fn host_run(host: &kube::Client, namespace: &str) -> BenchResult<Latencies> {
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(namespace.into()), ..Default::default() },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await?;
    let seen = Seen::default();
    let running = Seen::default();
    let watch = watch_pods(
        Api::namespaced(host.clone(), namespace),
        String::new(),
        seen.clone(),
        running.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let api: Api<Pod> = Api::namespaced(host.clone(), namespace);
    let started = Instant::now();
    let mut created = Vec::new();
    let mut posts = Vec::new();
    for k in 0..PODS {
        let name = format!("p{k}");
        let sent = Instant::now();
        api.create(&PostParams::default(), &pod(&name)).await?;
        posts.push(sent.elapsed());
        created.push((name, Instant::now()));
    }
    let mut to_running = Vec::new();
    for (name, at) in created {
        let key = format!("{namespace}/{name}");
        wait_for(&seen, &key).await?;
        to_running.push(wait_for(&running, &key).await?.saturating_duration_since(at));
    }
    let to_host = posts;
    let elapsed = started.elapsed();
    watch.abort();
    Ok(Latencies {
        host: Run::from_parts(to_host, elapsed),
        running: Run::from_parts(to_running, elapsed),
        post: None,
        sent_to_host: None,
    })
}

/// The argument that makes this program the syncers' own process (see [`SyncersApart`]).
const SYNCERS_ARG: &str = "--carrel-bench-syncers";

/// Tenants' syncers in a process of their own, as `carrel-syncer` runs one against a host: its
/// CPU time and memory are the syncers' alone. Killed when dropped.
struct SyncersApart {
    child: Child,
}

impl SyncersApart {
    fn start(host_kubeconfig: &Path, tenants: &[Tenant]) -> BenchResult<SyncersApart> {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg(SYNCERS_ARG).arg(host_kubeconfig);
        for t in tenants {
            command.arg(format!("{}={}", t.name, t.kubeconfig.display()));
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        Ok(SyncersApart { child })
    }
}

impl Drop for SyncersApart {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The syncers' process: the host kubeconfig, then `NAME=KUBECONFIG` for each tenant. One
/// syncer per tenant on a runtime like `carrel up`'s (a worker per core), configured as
/// `carrel up` configures its own, until killed.
fn syncers_main(args: &[String]) -> BenchResult<()> {
    let (host_kubeconfig, tenants) = args.split_first().ok_or("no host kubeconfig")?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let host = client_from(Path::new(host_kubeconfig)).await?;
        // One host side for every syncer, as in `carrel up`.
        let host_watch = carrel_syncer::HostWatch::new(host.clone());
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut runs = Vec::new();
        for pair in tenants {
            let (name, path) = pair.split_once('=').ok_or("not NAME=KUBECONFIG")?;
            let kubeconfig = Kubeconfig::read_from(path)?;
            let ca = kubeconfig
                .clusters
                .first()
                .and_then(|c| c.cluster.as_ref()?.certificate_authority_data.as_deref())
                .map(|data| base64::engine::general_purpose::STANDARD.decode(data))
                .transpose()?
                .map(String::from_utf8)
                .transpose()?;
            let config = carrel_syncer::Config {
                tenant: name.to_owned(),
                host_namespace: host_namespace(name),
                gpu_quota: Default::default(),
                tenant_ca_pem: ca,
                tenant_api: None,
                gpu_runtime_class: None,
                cluster_dns: carrel_syncer::ClusterDns::TenantService,
                resync: Duration::from_secs(10),
            };
            let tenant = client_from(Path::new(path)).await?;
            let syncer = carrel_syncer::Syncer::new(tenant, &host_watch, config);
            let stop = stop_rx.clone();
            runs.push(tokio::spawn(async move { syncer.run(stop).await }));
        }
        futures::future::join_all(runs).await;
        BenchResult::Ok(())
    })
}

/// Rows `<label>, p50` and `<label>, p99`: `ours` against `baseline`.
fn percentile_rows(table: &mut Table, label: &str, ours: &Run, baseline: &Run) {
    for (p, a, b) in [("p50", ours.p50(), baseline.p50()), ("p99", ours.p99(), baseline.p99())] {
        table.row(
            &format!("{label}, {p}"),
            ms(a),
            ms(b),
            ratio(a.as_secs_f64(), b.as_secs_f64()),
            "-".into(),
        );
    }
}

/// A measurement only tenant runs have.
fn tenant_part(run: &Option<Run>) -> BenchResult<&Run> {
    run.as_ref().ok_or_else(|| "not a tenant run".into())
}

fn main() -> BenchResult<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(SYNCERS_ARG) {
        return syncers_main(&args[2..]);
    }
    watchdog(WATCHDOG, "a pod that never synced, or a hang in carrel up?");
    let tmp = tempfile::tempdir()?;
    println!("carrel sync benchmark: every ratio is ours / baseline, both measured in this run");
    println!("cores: {}", std::thread::available_parallelism().map_or(0, |n| n.get()));
    let up = start(&tmp.path().join("data"), &[])?;
    let pid = up.child.id();
    let rt = runtime("client")?;
    let host = rt.block_on(client_from(&up.kubeconfig))?;

    section("warm-up (not measured): 1 tenant, 20 pods");
    let warm = rt.block_on(tenant_run(&up, &host, "warm", 1, 20, tmp.path()))?;
    println!("  host pod {}", warm.host.describe());

    section(&format!("baseline: {PODS} pods created on the host directly"));
    let (cpu0, rss0) = usage(pid);
    let base = rt.block_on(host_run(&host, "bench-baseline"))?;
    let (cpu1, rss1) = usage(pid);
    println!("  host POST {} ; Running {}", base.host.describe(), base.running.describe());

    section(&format!("1 tenant creating {PODS} pods"));
    let one = rt.block_on(tenant_run(&up, &host, "one", 1, PODS, tmp.path()))?;
    println!("  host pod {} ; tenant Running {}", one.host.describe(), one.running.describe());
    section(&format!("20 tenants creating {PODS} pods between them"));
    let twenty = rt.block_on(tenant_run(&up, &host, "many", 20, PODS, tmp.path()))?;
    let (cpu2, rss2) = usage(pid);
    println!(
        "  host pod {} ; tenant Running {}",
        twenty.host.describe(),
        twenty.running.describe()
    );

    let per_1000 = |x: f64, pods: usize| x * 1000.0 / pods as f64;
    let base_cpu = per_1000(cpu1 - cpu0, PODS);
    let ours_cpu = per_1000(cpu2 - cpu1, 2 * PODS);
    let base_rss = per_1000(rss1.saturating_sub(rss0) as f64, PODS);
    let ours_rss = per_1000(rss2.saturating_sub(rss1) as f64, 2 * PODS);

    section(&format!("20 tenants creating {PODS} pods each ({} pods)", 20 * PODS));
    let each = rt.block_on(tenant_run(&up, &host, "each", 20, 20 * PODS, tmp.path()))?;
    println!("  host pod {} ; tenant Running {}", each.host.describe(), each.running.describe());
    drop(up);

    // The same 20 tenants with every create let through at once (`--sync-window 0`), on a
    // fresh `carrel up`: what the window changes.
    section(&format!("20 tenants creating {PODS} pods, --sync-window 0 (a fresh carrel up)"));
    let open_up = start(&tmp.path().join("data-open"), &["--sync-window", "0"])?;
    let open_host = rt.block_on(client_from(&open_up.kubeconfig))?;
    rt.block_on(tenant_run(&open_up, &open_host, "warm", 1, 20, tmp.path()))?;
    let open = rt.block_on(tenant_run(&open_up, &open_host, "open", 20, PODS, tmp.path()))?;
    println!("  host pod {} ; tenant Running {}", open.host.describe(), open.running.describe());
    drop(open_up);

    // The syncers alone: in a process of their own beside a fresh `carrel up --no-syncers`.
    let apart_pods = 2 * PODS;
    section(&format!(
        "20 tenants creating {apart_pods} pods, syncers in a process of their own (a fresh carrel up --no-syncers)"
    ));
    let apart_up = start(&tmp.path().join("data-apart"), &["--no-syncers"])?;
    let apart_host = rt.block_on(client_from(&apart_up.kubeconfig))?;
    let tenants = rt.block_on(create_tenants(&apart_up, "apart", 20, tmp.path()))?;
    let syncers = SyncersApart::start(&apart_up.kubeconfig, &tenants)?;
    rt.block_on(pods_run(&apart_host, &tenants, 20, "warm"))?;
    let (syncer_cpu0, syncer_rss0) = usage(syncers.child.id());
    let (rest_cpu0, rest_rss0) = usage(apart_up.child.id());
    let apart = rt.block_on(pods_run(&apart_host, &tenants, apart_pods, "p"))?;
    let (syncer_cpu1, syncer_rss1) = usage(syncers.child.id());
    let (rest_cpu1, rest_rss1) = usage(apart_up.child.id());
    println!("  host pod {} ; tenant Running {}", apart.host.describe(), apart.running.describe());
    drop(syncers);
    drop(apart_up);
    let syncer_cpu = per_1000(syncer_cpu1 - syncer_cpu0, apart_pods);
    let syncer_rss = per_1000(syncer_rss1.saturating_sub(syncer_rss0) as f64, apart_pods);
    let rest_cpu = per_1000(rest_cpu1 - rest_cpu0, apart_pods);
    let rest_rss = per_1000(rest_rss1.saturating_sub(rest_rss0) as f64, apart_pods);

    let mut table = Table::default();
    table.header("Tenant pod → host pod (simulated nodes, 2 × h200x8)");
    for (label, run, target) in [
        ("1 tenant, p50", &one.host, None),
        ("1 tenant, p99", &one.host, None),
        ("20 tenants, p50", &twenty.host, Some(Duration::from_millis(10))),
        ("20 tenants, p99", &twenty.host, Some(Duration::from_millis(50))),
        ("20 tenants × 500 each, p50", &each.host, Some(Duration::from_millis(10))),
        ("20 tenants × 500 each, p99", &each.host, Some(Duration::from_millis(50))),
    ] {
        let p99 = label.ends_with("p99");
        let (ours, baseline) =
            if p99 { (run.p99(), base.host.p99()) } else { (run.p50(), base.host.p50()) };
        let target = match target {
            Some(t) => verdict(ours <= t, format!("≤ {}", ms(t))),
            None => "-".to_owned(),
        };
        table.row(
            label,
            ms(ours),
            ms(baseline),
            ratio(ours.as_secs_f64(), baseline.as_secs_f64()),
            target,
        );
    }
    table.header("20 tenants: where a pod waits (baseline: --sync-window 0, same run)");
    for (label, ours, open) in [
        ("pod → host pod", &twenty.host, &open.host),
        ("tenant POST round trip", tenant_part(&twenty.post)?, tenant_part(&open.post)?),
        (
            "POST sent → host pod",
            tenant_part(&twenty.sent_to_host)?,
            tenant_part(&open.sent_to_host)?,
        ),
    ] {
        percentile_rows(&mut table, label, ours, open);
    }
    table.header("Tenant pod → Running in the tenant");
    for (label, run) in [
        ("1 tenant", &one.running),
        ("20 tenants", &twenty.running),
        ("20 tenants × 500 each", &each.running),
    ] {
        percentile_rows(&mut table, label, run, &base.running);
    }
    table.header("carrel up per 1,000 pods (host API, tenant APIs, syncers, simulated kubelets)");
    table.row(
        "CPU seconds",
        format!("{ours_cpu:.2} s"),
        format!("{base_cpu:.2} s"),
        ratio(ours_cpu, base_cpu),
        "-".into(),
    );
    table.row(
        "resident memory growth",
        format!("{:.1} MiB", ours_rss / 1024.0),
        format!("{:.1} MiB", base_rss / 1024.0),
        ratio(ours_rss, base_rss.max(1.0)),
        "-".into(),
    );
    table.header(
        "Syncers in a process of their own, per 1,000 synced pods (baseline: the host API per 1,000 pods created on it)",
    );
    for (label, cpu, rss) in [
        ("syncers", syncer_cpu, syncer_rss),
        ("carrel up --no-syncers (host API, tenant APIs, simulated kubelets)", rest_cpu, rest_rss),
    ] {
        table.row(
            &format!("{label}: CPU seconds"),
            format!("{cpu:.2} s"),
            format!("{base_cpu:.2} s"),
            ratio(cpu, base_cpu),
            "-".into(),
        );
        table.row(
            &format!("{label}: resident memory growth"),
            format!("{:.1} MiB", rss / 1024.0),
            format!("{:.1} MiB", base_rss / 1024.0),
            ratio(rss, base_rss.max(1.0)),
            "-".into(),
        );
    }
    table.header("Syncers in a process of their own (baseline: in carrel up, --sync-window 0)");
    for (label, ours, open) in [
        ("pod → host pod", &apart.host, &open.host),
        ("pod → Running", &apart.running, &open.running),
    ] {
        percentile_rows(&mut table, label, ours, open);
    }
    table.print();
    Ok(())
}
