//! Tenant benchmarks for `carrel up`: how long a new tenant takes until its first
//! `kubectl get ns` succeeds, and how much resident memory an idle tenant costs, each figure
//! printed beside a baseline measured in the same run.
//!
//! Run with `cargo bench -p carrel --bench tenants`. It is a plain program (no harness): every
//! loop is bounded in count and in time, a watchdog ends a hung run after 300 s, and the whole
//! run takes about 100 s on 2 cores (plus the build).
//!
//! Carrel runs in this process as `carrel up` wires it (`crates/carrel/src/up.rs`): the host API
//! (`Api::host` over a `SledStore`, `Server::secured` with the host's CA), the tenant manager
//! (`Manager::run`) and `tls::serve` on 127.0.0.1:0, on a tokio runtime of its own (2 workers).
//! The clients are kube clients made from the admin kubeconfigs, on a second runtime (2 workers).
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | latency, 100 tenants one after another | POST of a `Tenant` to the host API, then polling (1 ms sleeps) the host for the tenant's `admin-kubeconfig` Secret, then a fresh kube client from it listing the tenant's namespaces until that succeeds | in turns with the tenants: POST of a ConfigMap to the host API, then a fresh kube client from the host kubeconfig reading it back |
//! | serving a tenant, 20 one after another | a fresh `SledStore` + `Api::new` (the bootstrap objects) + the tenant's credentials, as the manager makes them; the same reopened after Carrel stopped | a bare `SledStore::open`; the fresh ones |
//! | memory, up to 1,000 idle tenants | VmRSS growth of a fresh process while its tenants are created and left idle; then after each served one list of namespaces | in the same process afterwards: opening as many bare `SledStore`s, `SledStore`s with `Api::new`, raw sled databases, and parked threads |
//!
//! The memory section runs in a child process (this program again, with `CARREL_BENCH_TENANTS_
//! MEMORY` set), so that memory freed by the latency section cannot hide a tenant's cost.

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use carrel_apiserver::access::Security;
use carrel_apiserver::api::Target;
use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::http::clusters_router;
use carrel_apiserver::http::Clusters;
use carrel_apiserver::kubeconfig;
use carrel_apiserver::registry::carrel::tenants::TENANTS;
use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_apiserver::tls::{self, Certificates};
use carrel_apiserver::{Api, Server};
use carrel_bench::{median, ms, ratio, runtime, section, verdict, watchdog, Run, Table};
use carrel_store::{Event, EventKind, Options, SledStore};
use carrel_tenants::{host_namespace, Manager, ADMIN_GROUP, ADMIN_USER, KUBECONFIG_SECRET};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::runtime::Runtime;
use tokio::sync::watch;

/// Latency: tenants created one after another (and as many host ConfigMaps, in turns).
const LATENCY_TENANTS: usize = 100;
/// The longest sleep between two polls.
const POLL: Duration = Duration::from_millis(1);
/// The longest one tenant (or one baseline round) may take before the run fails.
const TENANT_TIMEOUT: Duration = Duration::from_secs(20);
/// Fresh stores bootstrapped by `Api::new`, and closed tenant stores reopened, timed one by one.
const STORE_SAMPLES: usize = 20;
/// Memory: tenants wanted, and how long creating them may take in all.
const MEMORY_TENANTS: usize = 1_000;
const CREATE_BUDGET: Duration = Duration::from_secs(120);
/// How long each memory baseline may spend opening its stores, and the use of the tenants may
/// take (each divides by the count it reached).
const BASELINE_BUDGET: Duration = Duration::from_secs(30);
/// Tenants created but not yet Ready, at most: creation keeps pace with the manager.
const IN_FLIGHT: usize = 8;
/// How long everything idles before memory is read.
const IDLE: Duration = Duration::from_secs(2);
/// The whole run is abandoned after this long.
const WATCHDOG: Duration = Duration::from_secs(300);
/// Set (to the child's directory) in the child process that runs the memory section.
const MEMORY_CHILD: &str = "CARREL_BENCH_TENANTS_MEMORY";
/// The child's watchdog, in seconds: what is left of the parent's.
const MEMORY_CHILD_LIMIT: &str = "CARREL_BENCH_TENANTS_LIMIT";
/// The issuer of the host API's service-account tokens (as `carrel up`).
const HOST_ISSUER: &str = "https://kubernetes.default.svc";
/// How long a tenant's admin certificate is valid (as the manager's).
const ADMIN_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// Targets (from the issue).
const TARGET_P50: Duration = Duration::from_millis(50);
const TARGET_P99: Duration = Duration::from_millis(200);
const TARGET_RSS_PER_TENANT: f64 = 1024.0 * 1024.0;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> BenchResult<()> {
    if let Some(dir) = std::env::var_os(MEMORY_CHILD) {
        return memory_child(PathBuf::from(dir));
    }
    let started = Instant::now();
    watchdog(WATCHDOG, "a tenant that never became ready, or a hang in the server or sled?");
    let tmp = tempfile::tempdir()?;
    println!("carrel tenants benchmark: every ratio is ours / baseline, both measured in this run");
    println!("temp dir: {}", tmp.path().display());
    println!("cores: {}", thread::available_parallelism().map_or(0, |n| n.get()));

    let server_rt = runtime("server")?;
    let client_rt = runtime("client")?;
    let data = tmp.path().join("latency");
    let host = start_host(&server_rt, &data)?;
    let client = client_rt.block_on(client_from(&host.kubeconfig))?;

    section("latency: warm-up (not in the percentiles)");
    let warm = client_rt.block_on(tenant_latency(&host, &client, "warm-up"))?;
    let warm_base = client_rt.block_on(baseline_latency(&client, &host.kubeconfig, "warm-up"))?;
    println!(
        "  first tenant: {} to its first list ({} polls); first host ConfigMap: {}",
        ms(warm.total),
        warm.polls,
        ms(warm_base.total)
    );

    section(&format!(
        "latency: {LATENCY_TENANTS} tenants one after another, host ConfigMaps in turns"
    ));
    let mut ours = Vec::with_capacity(LATENCY_TENANTS);
    let mut base = Vec::with_capacity(LATENCY_TENANTS);
    let latency_started = Instant::now();
    for i in 0..LATENCY_TENANTS {
        base.push(client_rt.block_on(baseline_latency(
            &client,
            &host.kubeconfig,
            &format!("cm-{i:03}"),
        ))?);
        ours.push(client_rt.block_on(tenant_latency(&host, &client, &format!("t-{i:03}")))?);
        if (i + 1) % 20 == 0 {
            let done = &ours[i + 1 - 20..=i];
            println!(
                "  {:>3} tenants: last 20 p50 {} (baseline {}), {:.1} s so far",
                i + 1,
                ms(median(done.iter().map(|s| s.total).collect())),
                ms(median(base[i + 1 - 20..=i].iter().map(|s| s.total).collect())),
                latency_started.elapsed().as_secs_f64()
            );
        }
    }
    let latency_elapsed = latency_started.elapsed();
    let served = host.clusters.names().len();
    println!("  tenants served: {served}; host revision {}", host.api.current_revision());

    section("serving a tenant: store, Api::new and credentials, fresh and reopened");
    let fresh = tenant_stores(&tmp.path().join("fresh"), true)?;
    println!(
        "  fresh: SledStore::open p50 {}, with Api::new ({} writes) and credentials p50 {}",
        ms(fresh.open.p50()),
        fresh.writes,
        ms(fresh.total.p50())
    );
    // Stop Carrel, then reopen some of the tenants' stores as a resumed manager would.
    host.stop.send_replace(true);
    client_rt.shutdown_timeout(Duration::from_secs(5));
    server_rt.shutdown_timeout(Duration::from_secs(5));
    drop(client);
    drop(host);
    let reopen = tenant_stores(&data, false);
    match &reopen {
        Ok(r) => println!(
            "  reopened {} tenants: SledStore::open p50 {}, with Api::new and credentials p50 {}",
            r.open.ops(),
            ms(r.open.p50()),
            ms(r.total.p50())
        ),
        Err(e) => println!("  reopening tenant stores failed: {e}"),
    }

    section("memory (in a child process)");
    let limit = WATCHDOG.saturating_sub(started.elapsed()).saturating_sub(Duration::from_secs(5));
    let child_dir = tmp.path().join("memory");
    std::fs::create_dir_all(&child_dir)?;
    let status = std::process::Command::new(std::env::current_exe()?)
        .env(MEMORY_CHILD, &child_dir)
        .env(MEMORY_CHILD_LIMIT, limit.as_secs().to_string())
        .status()?;
    let memory: Option<Value> = if status.success() {
        Some(serde_json::from_slice(&std::fs::read(child_dir.join("result.json"))?)?)
    } else {
        println!("  the memory section failed: {status}");
        None
    };

    let mut table = Table::default();
    latency_rows(&mut table, &ours, &base, &warm, &warm_base, latency_elapsed);
    store_rows(&mut table, &fresh, reopen.as_ref().ok());
    if let Some(memory) = &memory {
        memory_rows(&mut table, memory);
    }
    table.print();
    println!();
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    tmp.close()?;
    if memory.is_none() {
        return Err("the memory section failed".into());
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Carrel, as `carrel up` runs it
// ----------------------------------------------------------------------------------------------

/// A running host API with its tenant manager and listener.
struct Host {
    api: Arc<Api>,
    clusters: Arc<Clusters>,
    kubeconfig: String,
    stop: watch::Sender<bool>,
    seen: Arc<Mutex<Seen>>,
}

/// When this process's host watches saw each tenant become Ready and its kubeconfig Secret
/// appear.
#[derive(Debug, Default)]
struct Seen {
    ready: HashMap<String, Instant>,
    secret: HashMap<String, Instant>,
}

/// Start Carrel in `data` as `carrel up` does, on `rt`.
fn start_host(rt: &Runtime, data: &Path) -> BenchResult<Host> {
    std::fs::create_dir_all(data)?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let hosts = [addr.ip().to_string(), "127.0.0.1".to_owned(), "localhost".to_owned()];
        let certs = Certificates::load_or_generate(&data.join("pki"), &hosts)?;
        let store = SledStore::open(data.join("host"), Options::create())?;
        let api = Arc::new(Api::host(Arc::new(store)).map_err(|e| e.to_string())?);
        let tokens = Signer::load_or_generate(&data.join("pki"))?;
        let security = Security::new(certs.ca_der()?, Some(tokens), HOST_ISSUER);
        let host_server = Arc::new(Server::secured(api.clone(), "", Arc::new(security)));
        let clusters = Arc::new(Clusters::new(host_server.clone()));
        let endpoint = format!("https://{addr}");
        let manager_tokens = Signer::load_or_generate(&data.join("pki"))?;
        let manager_client =
            carrel_tenants::in_process_client(host_server, Some((manager_tokens, HOST_ISSUER)))?;
        let manager = Arc::new(Manager::new(
            manager_client,
            clusters.clone(),
            data,
            &endpoint,
            Some(certs.ca_pem.clone()),
        ));
        let kubeconfig = kubeconfig::admin(&endpoint, Some(&certs));
        let config = certs.server_config()?;
        let (stop, stopped) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let after = api.current_revision();
        tokio::spawn(follow(api.clone(), Followed::Tenants, after, seen.clone(), stopped.clone()));
        tokio::spawn(follow(api.clone(), Followed::Secrets, after, seen.clone(), stopped.clone()));
        tokio::spawn(manager.run(Duration::from_secs(1), stopped.clone()));
        let mut until = stopped;
        tokio::spawn(tls::serve(listener, config, clusters_router(clusters.clone()), async move {
            let _ = until.wait_for(|s| *s).await;
        }));
        Ok(Host { api, clusters, kubeconfig, stop, seen })
    })
}

#[derive(Clone, Copy, Debug)]
enum Followed {
    Tenants,
    Secrets,
}

/// Note when each tenant becomes Ready, or gets its kubeconfig Secret, from a watch of the host
/// store (no polling: the events come as the manager's writes become durable).
async fn follow(
    api: Arc<Api>,
    what: Followed,
    mut after: carrel_store::Revision,
    seen: Arc<Mutex<Seen>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let watched = match what {
            Followed::Tenants => api.watch(&Target { rt: &TENANTS, namespace: None }, after),
            Followed::Secrets => match carrel_apiserver::resource::built_in("", "secrets") {
                Some(rt) => api.watch(&Target { rt, namespace: None }, after),
                None => return,
            },
        };
        let mut events = match watched {
            Ok(w) => w,
            Err(e) => {
                println!("  (watching {what:?} failed: {e}; the breakdown rows will be empty)");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                next = events.next() => match next {
                    Some(Ok(event)) => {
                        after = event.revision;
                        note(&seen, what, &event);
                    }
                    Some(Err(e)) => {
                        println!("  (the {what:?} watch ended: {e}; watching again)");
                        break;
                    }
                    None => return,
                },
            }
        }
    }
}

fn note(seen: &Mutex<Seen>, what: Followed, event: &Event) {
    if event.kind == EventKind::Deleted {
        return;
    }
    let now = Instant::now();
    let mut parts = event.key.rsplit('/');
    let (Some(name), namespace) = (parts.next(), parts.next()) else { return };
    let mut seen = seen.lock();
    match what {
        Followed::Tenants => {
            if seen.ready.contains_key(name) {
                return;
            }
            let object: Value = serde_json::from_slice(&event.value).unwrap_or_default();
            if object.pointer("/status/phase").and_then(Value::as_str) == Some("Ready") {
                seen.ready.insert(name.to_owned(), now);
            }
        }
        Followed::Secrets => {
            let tenant = namespace.and_then(|ns| ns.strip_prefix("carrel-"));
            if let (KUBECONFIG_SECRET, Some(tenant)) = (name, tenant) {
                seen.secret.entry(tenant.to_owned()).or_insert(now);
            }
        }
    }
}

/// A kube client from a kubeconfig's text, as kubectl would make one.
async fn client_from(kubeconfig: &str) -> BenchResult<kube::Client> {
    let parsed = Kubeconfig::from_yaml(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// POST a `Tenant` to the host API, as `carrel tenant create` does.
async fn create_tenant(client: &kube::Client, name: &str) -> BenchResult<()> {
    let tenant = Tenant {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(TenantSpec::default()),
        ..Default::default()
    };
    kube::Api::<Tenant>::all(client.clone()).create(&PostParams::default(), &tenant).await?;
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Latency
// ----------------------------------------------------------------------------------------------

/// One tenant, from its creation to its first successful list of namespaces.
#[derive(Debug)]
struct Sample {
    /// The POST of the `Tenant` answered.
    posted: Duration,
    /// The tenant's API served (`Clusters::tenant`, checked in-process before each poll).
    served: Option<Duration>,
    /// The poll found the kubeconfig Secret.
    secret_polled: Duration,
    /// The host's watch saw the Secret created.
    secret_event: Option<Duration>,
    /// The host's watch saw the tenant's status become Ready.
    ready: Option<Duration>,
    /// The first successful list of namespaces with a client made from the kubeconfig.
    total: Duration,
    /// Host GETs of the Secret.
    polls: usize,
    /// Lists of namespaces that failed before one succeeded.
    list_retries: usize,
}

async fn tenant_latency(host: &Host, client: &kube::Client, name: &str) -> BenchResult<Sample> {
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &host_namespace(name));
    let t0 = Instant::now();
    let deadline = t0 + TENANT_TIMEOUT;
    create_tenant(client, name).await?;
    let posted = t0.elapsed();
    let mut served = None;
    let mut polls = 0;
    let config = loop {
        if served.is_none() && host.clusters.tenant(name).is_some() {
            served = Some(t0.elapsed());
        }
        polls += 1;
        let secret = secrets.get_opt(KUBECONFIG_SECRET).await?;
        if let Some(bytes) = secret.and_then(|s| s.data?.remove("kubeconfig")) {
            break String::from_utf8(bytes.0)?;
        }
        if Instant::now() > deadline {
            return Err(format!("tenant {name}: no kubeconfig Secret after {polls} polls").into());
        }
        tokio::time::sleep(POLL).await;
    };
    let secret_polled = t0.elapsed();
    let namespaces: kube::Api<Namespace> = kube::Api::all(client_from(&config).await?);
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
    // When the host saw Ready and the Secret (after the clock stopped; these are timestamps).
    let (ready, secret_event) = loop {
        let noted = {
            let seen = host.seen.lock();
            let at = |m: &HashMap<String, Instant>| m.get(name).map(|t| t.duration_since(t0));
            (at(&seen.ready), at(&seen.secret))
        };
        if noted.0.is_some() || Instant::now() > deadline {
            break noted;
        }
        tokio::time::sleep(POLL).await;
    };
    Ok(Sample { posted, served, secret_polled, secret_event, ready, total, polls, list_retries })
}

/// The host API's own create-then-read through the same client path.
#[derive(Debug)]
struct BaseSample {
    posted: Duration,
    total: Duration,
}

async fn baseline_latency(
    client: &kube::Client,
    kubeconfig: &str,
    name: &str,
) -> BenchResult<BaseSample> {
    let configmaps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
    let object = ConfigMap {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        data: Some(BTreeMap::from([("key".to_owned(), "value".to_owned())])),
        ..Default::default()
    };
    let t0 = Instant::now();
    configmaps.create(&PostParams::default(), &object).await?;
    let posted = t0.elapsed();
    let fresh: kube::Api<ConfigMap> =
        kube::Api::namespaced(client_from(kubeconfig).await?, "default");
    fresh.get(name).await?;
    Ok(BaseSample { posted, total: t0.elapsed() })
}

fn run_of(times: impl Iterator<Item = Duration>) -> Run {
    Run::from_parts(times.collect(), Duration::ZERO)
}

fn latency_rows(
    table: &mut Table,
    ours: &[Sample],
    base: &[BaseSample],
    warm: &Sample,
    warm_base: &BaseSample,
    elapsed: Duration,
) {
    let total = run_of(ours.iter().map(|s| s.total));
    let base_total = run_of(base.iter().map(|s| s.total));
    table.header(&format!(
        "Tenant create -> first successful list of namespaces: {} tenants one after another \
         ({:.1} s in all); baseline: host ConfigMap create -> a fresh client's first GET of it",
        ours.len(),
        elapsed.as_secs_f64()
    ));
    let row = |table: &mut Table, what: &str, ours: Duration, base: Duration, target: String| {
        table.row(what, ms(ours), format!("baseline {}", ms(base)), ratio(s(ours), s(base)), target)
    };
    row(
        table,
        "create -> first list OK: p50",
        total.p50(),
        base_total.p50(),
        verdict(total.p50() <= TARGET_P50, format!("<= {}", ms(TARGET_P50))),
    );
    row(
        table,
        "create -> first list OK: p99",
        total.p99(),
        base_total.p99(),
        verdict(total.p99() <= TARGET_P99, format!("<= {}", ms(TARGET_P99))),
    );
    row(
        table,
        "create -> first list OK: max",
        total.percentile(100.0),
        base_total.percentile(100.0),
        String::new(),
    );
    row(
        table,
        "first after start (warm-up, not above)",
        warm.total,
        warm_base.total,
        String::new(),
    );
    let posted = run_of(ours.iter().map(|s| s.posted));
    let base_posted = run_of(base.iter().map(|s| s.posted));
    row(table, "  POST answered: p50", posted.p50(), base_posted.p50(), String::new());
    let served: Vec<Duration> = ours.iter().filter_map(|s| s.served).collect();
    let secret_event: Vec<Duration> = ours.iter().filter_map(|s| s.secret_event).collect();
    let ready: Vec<Duration> = ours.iter().filter_map(|s| s.ready).collect();
    for (what, times) in [
        ("  -> tenant API served (polled): p50", served),
        ("  -> Secret written (host watch): p50", secret_event),
        ("  -> status Ready (host watch): p50", ready),
    ] {
        let n = times.len();
        let run = run_of(times.into_iter());
        let what = if n == ours.len() { what.to_owned() } else { format!("{what} ({n} seen)") };
        table.row(&what, ms(run.p50()), String::new(), String::new(), String::new());
    }
    let polled = run_of(ours.iter().map(|s| s.secret_polled));
    table.row(
        "  -> Secret found by the poll: p50",
        ms(polled.p50()),
        String::new(),
        String::new(),
        String::new(),
    );
    let client_list = run_of(ours.iter().map(|s| s.total - s.secret_polled));
    let client_get = run_of(base.iter().map(|s| s.total - s.posted));
    row(
        table,
        "  new client + first list / GET: p50",
        client_list.p50(),
        client_get.p50(),
        String::new(),
    );
    row(
        table,
        "  new client + first list / GET: p99",
        client_list.p99(),
        client_get.p99(),
        String::new(),
    );
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

fn s(d: Duration) -> f64 {
    d.as_secs_f64()
}

// ----------------------------------------------------------------------------------------------
// Stores: fresh and reopened
// ----------------------------------------------------------------------------------------------

#[derive(Debug)]
struct StoreTimes {
    /// `SledStore::open`.
    open: Run,
    /// `SledStore::open`, then `Api::new` over it (on a fresh store it writes the bootstrap
    /// objects), then the tenant's credentials (generated when fresh, read when reopened).
    total: Run,
    /// The credentials alone.
    credentials: Run,
    /// Writes by `Api::new` on a fresh store.
    writes: u64,
}

/// What the manager does to serve a tenant, `STORE_SAMPLES` times: open its store, bootstrap a
/// tenant cluster in it (`Api::new`) and make or load its credentials (`fresh` = in new
/// directories under `dir`, otherwise the latency section's tenants in `dir`, after Carrel
/// stopped, as a manager that had closed an idle tenant's store would reopen it).
fn tenant_stores(dir: &Path, fresh: bool) -> BenchResult<StoreTimes> {
    let (mut open, mut total, mut credentials, mut writes) =
        (Vec::new(), Vec::new(), Vec::new(), 0);
    for i in 0..STORE_SAMPLES {
        let name = format!("t-{i:03}");
        let (store_dir, pki) = if fresh {
            (dir.join(&name).join("store"), dir.join(&name).join("pki"))
        } else {
            (
                dir.join("tenants").join(&name).join("store"),
                dir.join("tenants").join(&name).join("pki"),
            )
        };
        let options = if fresh { Options::create() } else { Options::default() };
        let t = Instant::now();
        let store = Arc::new(SledStore::open(&store_dir, options)?);
        open.push(t.elapsed());
        let api = Api::new(store).map_err(|e| e.to_string())?;
        let c = Instant::now();
        let ca = TenantCa::load_or_generate(&pki, &name)?;
        Signer::load_or_generate(&pki)?;
        if fresh {
            ca.load_or_issue_client(&pki, "admin", ADMIN_USER, &[ADMIN_GROUP], ADMIN_VALIDITY)?;
        }
        credentials.push(c.elapsed());
        total.push(t.elapsed());
        writes = api.current_revision();
    }
    Ok(StoreTimes {
        open: run_of(open.into_iter()),
        total: run_of(total.into_iter()),
        credentials: run_of(credentials.into_iter()),
        writes,
    })
}

fn store_rows(table: &mut Table, fresh: &StoreTimes, reopen: Option<&StoreTimes>) {
    table.header(&format!(
        "Serving a tenant: its store, Api::new and credentials, {STORE_SAMPLES} one after another \
         (what creating a tenant does before it is served; what reopening a closed one would add)"
    ));
    table.row(
        &format!("fresh store + Api::new ({} writes) + credentials: p50", fresh.writes),
        ms(fresh.total.p50()),
        format!("bare SledStore::open {}", ms(fresh.open.p50())),
        ratio(s(fresh.total.p50()), s(fresh.open.p50())),
        String::new(),
    );
    table.row(
        "  of which new credentials (CA, token key, admin cert): p50",
        ms(fresh.credentials.p50()),
        String::new(),
        String::new(),
        String::new(),
    );
    let Some(reopen) = reopen else {
        table.row("reopen a closed tenant", "failed".into(), "".into(), "".into(), "".into());
        return;
    };
    for (what, p) in [("p50", 50.0), ("p99", 99.0)] {
        let ours = reopen.total.percentile(p);
        let fresh_total = fresh.total.percentile(p);
        table.row(
            &format!("reopen: store + Api::new + credentials: {what}"),
            ms(ours),
            format!("fresh {}", ms(fresh_total)),
            ratio(s(ours), s(fresh_total)),
            String::new(),
        );
    }
}

// ----------------------------------------------------------------------------------------------
// Memory (the child process)
// ----------------------------------------------------------------------------------------------

/// What /proc/self says about this process.
#[derive(Clone, Copy, Debug, Default)]
struct Proc {
    rss_kb: u64,
    anon_kb: u64,
    file_kb: u64,
    threads: u64,
    fds: u64,
    /// Over the idle time before the reading (`Proc::settle`): CPU time used, in cores.
    idle_cpu: f64,
}

impl Proc {
    /// Idle for `IDLE`, then read: the reading and the CPU used meanwhile.
    fn settle() -> Proc {
        let before = cpu_ticks();
        thread::sleep(IDLE);
        let mut now = Proc::now();
        // Linux reports CPU time in USER_HZ ticks, 100 per second on every common platform.
        now.idle_cpu = cpu_ticks().saturating_sub(before) as f64 / 100.0 / IDLE.as_secs_f64();
        now
    }

    fn now() -> Proc {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        Proc {
            rss_kb: field("VmRSS"),
            anon_kb: field("RssAnon"),
            file_kb: field("RssFile"),
            threads: field("Threads"),
            fds,
            idle_cpu: 0.0,
        }
    }

    fn json(&self) -> Value {
        json!({"rss_kb": self.rss_kb, "anon_kb": self.anon_kb, "file_kb": self.file_kb,
               "threads": self.threads, "fds": self.fds, "idle_cpu": self.idle_cpu})
    }

    fn describe(&self) -> String {
        format!(
            "VmRSS {} kB (anon {} kB, file {} kB), {} threads, {} fds; idle CPU {:.1}% of a core",
            self.rss_kb,
            self.anon_kb,
            self.file_kb,
            self.threads,
            self.fds,
            self.idle_cpu * 100.0
        )
    }
}

/// This process's user + system CPU time, in ticks (/proc/self/stat, fields 14 and 15).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses: field 3 is the first.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(14) + field(15)
}

fn memory_child(dir: PathBuf) -> BenchResult<()> {
    let limit = std::env::var(MEMORY_CHILD_LIMIT).ok().and_then(|l| l.parse().ok()).unwrap_or(200);
    watchdog(Duration::from_secs(limit), "the memory section");
    let server_rt = runtime("server")?;
    let client_rt = runtime("client")?;
    let host = start_host(&server_rt, &dir.join("carrel"))?;
    let client = client_rt.block_on(client_from(&host.kubeconfig))?;
    let ready = |prefix: &str| {
        let seen = host.seen.lock();
        seen.ready.keys().filter(|k| k.starts_with(prefix)).count()
    };
    // A first tenant, so that what is set up once (not per tenant) is not counted.
    client_rt.block_on(async {
        create_tenant(&client, "warm-up").await?;
        let deadline = Instant::now() + TENANT_TIMEOUT;
        while ready("warm-up") == 0 {
            if Instant::now() > deadline {
                return Err("the warm-up tenant never became Ready".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        BenchResult::Ok(())
    })?;
    let start = Proc::settle();
    println!("  before: {}", start.describe());

    let created_started = Instant::now();
    let created = client_rt.block_on(async {
        let mut created = 0;
        while created < MEMORY_TENANTS && created_started.elapsed() < CREATE_BUDGET {
            let deadline = Instant::now() + TENANT_TIMEOUT;
            while created >= ready("m-") + IN_FLIGHT {
                if Instant::now() > deadline {
                    return Err(format!("{created} tenants created, {} Ready", ready("m-")).into());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            create_tenant(&client, &format!("m-{created:04}")).await?;
            created += 1;
            if created % 100 == 0 {
                println!(
                    "  {created} tenants created in {:.1} s, {} Ready",
                    created_started.elapsed().as_secs_f64(),
                    ready("m-")
                );
            }
        }
        let deadline = Instant::now() + TENANT_TIMEOUT;
        while ready("m-") < created {
            if Instant::now() > deadline {
                return Err(format!("{created} tenants created, {} Ready", ready("m-")).into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        BenchResult::Ok(created)
    })?;
    let create_s = created_started.elapsed().as_secs_f64();
    if created < MEMORY_TENANTS {
        println!(
            "  CAPPED: only {created} of {MEMORY_TENANTS} tenants fit in the {} s budget",
            CREATE_BUDGET.as_secs()
        );
    }
    println!(
        "  {created} tenants Ready after {create_s:.1} s; {} served",
        host.clusters.names().len()
    );
    let tenants = Proc::settle();
    println!("  with {created} idle tenants: {}", tenants.describe());
    // What the manager does every second (`Manager::expire`): list every tenant in-process.
    let mut expire = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        host.api
            .list(&Target { rt: &TENANTS, namespace: None }, &Default::default())
            .map_err(|e| e.to_string())?;
        expire.push(t.elapsed());
    }
    let expire = median(expire);
    println!("  in-process list of every tenant (Manager::expire's, every 1 s): {}", ms(expire));

    // Then each used once (`kubectl get ns` with the tenant's kubeconfig), and idle again.
    let touched = client_rt.block_on(async {
        let started = Instant::now();
        let mut touched = 0;
        while touched < created && started.elapsed() < BASELINE_BUDGET {
            let name = format!("m-{touched:04}");
            let secrets: kube::Api<Secret> =
                kube::Api::namespaced(client.clone(), &host_namespace(&name));
            let secret = secrets.get(KUBECONFIG_SECRET).await?;
            let bytes =
                secret.data.and_then(|mut d| d.remove("kubeconfig")).ok_or("no kubeconfig")?;
            let tenant = client_from(&String::from_utf8(bytes.0)?).await?;
            kube::Api::<Namespace>::all(tenant).list(&ListParams::default()).await?;
            touched += 1;
        }
        BenchResult::Ok(touched)
    })?;
    let used = Proc::settle();
    println!("  after one list of namespaces in {touched} of them: {}", used.describe());

    // Baselines, with the tenants still open: as many bare stores, stores with a tenant
    // cluster's bootstrap objects (`Api::new`), sled databases and threads.
    let (stores, opens, bare_s) = open_bounded(created, |i| {
        Ok(SledStore::open(dir.join("bare").join(i.to_string()), Options::create())?)
    })?;
    let bare = Proc::settle();
    println!("  + {} bare SledStores ({bare_s:.1} s): {}", stores.len(), bare.describe());

    let (apis, _, api_s) = open_bounded(created, |i| {
        let store = SledStore::open(dir.join("api").join(i.to_string()), Options::create())?;
        Ok(Api::new(Arc::new(store)).map_err(|e| e.to_string())?)
    })?;
    let api = Proc::settle();
    println!("  + {} SledStores + Api::new ({api_s:.1} s): {}", apis.len(), api.describe());

    let cache = Options::default().cache_capacity;
    let (dbs, _, sled_s) = open_bounded(created, |i| {
        let config = sled::Config::new()
            .path(dir.join("sled").join(i.to_string()))
            .cache_capacity(cache)
            .flush_every_ms(None);
        Ok(config.open()?)
    })?;
    let sled = Proc::settle();
    println!("  + {} raw sled databases ({sled_s:.1} s): {}", dbs.len(), sled.describe());

    // As many parked threads (std's default stack) as the tenants added.
    let extra = tenants.threads.saturating_sub(start.threads) as usize;
    let release = Arc::new(AtomicBool::new(false));
    let mut parked = Vec::with_capacity(extra);
    for _ in 0..extra {
        let release = release.clone();
        parked.push(thread::spawn(move || {
            while !release.load(Ordering::Acquire) {
                thread::park();
            }
        }));
    }
    let threads = Proc::settle();
    println!("  + {extra} parked threads: {}", threads.describe());
    release.store(true, Ordering::Release);
    for handle in parked {
        handle.thread().unpark();
        let _ = handle.join();
    }

    let result = json!({
        "requested": MEMORY_TENANTS,
        "created": created,
        "create_s": create_s,
        "budget_s": CREATE_BUDGET.as_secs(),
        "bare_count": stores.len(),
        "bare_open_p50_us": median(opens).as_micros() as u64,
        "bare_open_s": bare_s,
        "api_count": apis.len(),
        "sled_count": dbs.len(),
        "parked_threads": extra,
        "start": start.json(),
        "tenants": tenants.json(),
        "touched": touched,
        "expire_list_us": expire.as_micros() as u64,
        "used": used.json(),
        "bare": bare.json(),
        "api": api.json(),
        "sled": sled.json(),
        "threads": threads.json(),
    });
    std::fs::write(dir.join("result.json"), serde_json::to_vec_pretty(&result)?)?;
    // Closing 2,000 stores and 1,000 sled databases one by one takes long and measures nothing;
    // the parent removes the directory.
    std::process::exit(0)
}

/// Open up to `count` things one after another, for at most `BASELINE_BUDGET`: what was
/// opened, each one's time, and the time in all.
fn open_bounded<T>(
    count: usize,
    mut open: impl FnMut(usize) -> BenchResult<T>,
) -> BenchResult<(Vec<T>, Vec<Duration>, f64)> {
    let started = Instant::now();
    let (mut opened, mut times) = (Vec::with_capacity(count), Vec::with_capacity(count));
    for i in 0..count {
        if started.elapsed() > BASELINE_BUDGET {
            println!("  (baseline capped at {i} by its {} s budget)", BASELINE_BUDGET.as_secs());
            break;
        }
        let t = Instant::now();
        opened.push(open(i)?);
        times.push(t.elapsed());
    }
    Ok((opened, times, started.elapsed().as_secs_f64()))
}

fn memory_rows(table: &mut Table, m: &Value) {
    let num = |path: &str| m.pointer(path).and_then(Value::as_f64).unwrap_or(0.0);
    let n = num("/created").max(1.0);
    // Each stage's growth over the stage before it, per thing opened in it.
    let stages = [
        ("tenants", "start", n),
        ("used", "tenants", num("/touched").max(1.0)),
        ("bare", "used", num("/bare_count").max(1.0)),
        ("api", "bare", num("/api_count").max(1.0)),
        ("sled", "api", num("/sled_count").max(1.0)),
        ("threads", "sled", num("/parked_threads").max(1.0)),
    ];
    let per = |stage: &str, field: &str| {
        let (_, before, count) =
            stages.iter().find(|(s, _, _)| *s == stage).copied().unwrap_or_default();
        (num(&format!("/{stage}/{field}")) - num(&format!("/{before}/{field}"))) / count
    };
    let rss = |stage: &str| per(stage, "rss_kb") * 1024.0;
    let total = |stage: &str, field: &str| num(&format!("/{stage}/{field}"));
    let capped = if num("/created") < num("/requested") {
        format!(" -- CAPPED at {n} of {} by the {} s budget", num("/requested"), num("/budget_s"))
    } else {
        String::new()
    };
    table.header(&format!(
        "Memory: {n} idle tenants in one process (created in {:.1} s{capped}); VmRSS growth / N, \
         read after {} s idle; the baselines are opened afterwards in the same process ({}, {} \
         and {} of them)",
        num("/create_s"),
        IDLE.as_secs(),
        num("/bare_count"),
        num("/api_count"),
        num("/sled_count"),
    ));
    let tenant = rss("tenants");
    table.row(
        "RSS per idle tenant",
        bytes(tenant),
        format!("bare SledStore {}", bytes(rss("bare"))),
        ratio(tenant, rss("bare")),
        verdict(tenant <= TARGET_RSS_PER_TENANT, "<= 1 MiB".to_owned()),
    );
    table.row(
        "RSS per idle tenant",
        bytes(tenant),
        format!("SledStore + Api::new {}", bytes(rss("api"))),
        ratio(tenant, rss("api")),
        String::new(),
    );
    table.row(
        "RSS per idle tenant",
        bytes(tenant),
        format!("raw sled::Db {}", bytes(rss("sled"))),
        ratio(tenant, rss("sled")),
        String::new(),
    );
    let touched = num("/touched");
    if touched > 0.0 {
        table.row(
            &format!("  then one list of namespaces in {touched}: growth"),
            format!("{} per tenant used", bytes(rss("used"))),
            format!("an idle tenant {}", bytes(tenant)),
            String::new(),
            String::new(),
        );
    }
    let split = |stage: &str| {
        format!(
            "{} / {}",
            bytes(per(stage, "anon_kb") * 1024.0),
            bytes(per(stage, "file_kb") * 1024.0)
        )
    };
    table.row(
        "  anonymous / file-backed",
        split("tenants"),
        format!("bare SledStore {}", split("bare")),
        String::new(),
        String::new(),
    );
    table.row(
        "  VmRSS before -> after",
        format!(
            "{} -> {}",
            bytes(total("start", "rss_kb") * 1024.0),
            bytes(total("tenants", "rss_kb") * 1024.0)
        ),
        format!(
            "bare SledStores {} -> {}",
            bytes(total("tenants", "rss_kb") * 1024.0),
            bytes(total("bare", "rss_kb") * 1024.0)
        ),
        String::new(),
        String::new(),
    );
    table.row(
        "threads per tenant",
        format!("{:.2}", per("tenants", "threads")),
        format!("bare SledStore {:.2}", per("bare", "threads")),
        ratio(per("tenants", "threads"), per("bare", "threads")),
        String::new(),
    );
    table.row(
        "  threads before -> after",
        format!("{} -> {}", total("start", "threads"), total("tenants", "threads")),
        format!("bare SledStores {} -> {}", total("tenants", "threads"), total("bare", "threads")),
        String::new(),
        String::new(),
    );
    let parked = num("/parked_threads");
    if parked > 0.0 {
        let thread = rss("threads");
        let threads = per("tenants", "threads");
        table.row(
            "  RSS per parked thread (default stack)",
            bytes(thread),
            format!("{parked} threads"),
            String::new(),
            String::new(),
        );
        table.row(
            "  a tenant's threads at that",
            bytes(thread * threads),
            format!("{:.0}% of a tenant's RSS", 100.0 * thread * threads / tenant),
            String::new(),
            String::new(),
        );
    }
    let cpu = |stage: &str| num(&format!("/{stage}/idle_cpu")) * 100.0;
    table.row(
        "CPU while idle, % of one core",
        format!("{:.1}% ({n} tenants)", cpu("tenants")),
        format!("bare SledStores {:.1}% (+ the tenants)", cpu("bare")),
        String::new(),
        String::new(),
    );
    table.row(
        &format!("  list of all {n} tenants (Manager::expire, each 1 s)"),
        format!("{:.2} ms", num("/expire_list_us") / 1000.0),
        String::new(),
        String::new(),
        String::new(),
    );
    table.row(
        "open files per tenant",
        format!("{:.2}", per("tenants", "fds")),
        format!("bare SledStore {:.2}", per("bare", "fds")),
        ratio(per("tenants", "fds"), per("bare", "fds")),
        String::new(),
    );
    table.row(
        "tenants created and Ready per second",
        format!("{:.1} /s", n / num("/create_s").max(1e-9)),
        format!(
            "bare SledStore::open {:.1} /s (p50 {:.2} ms)",
            num("/bare_count") / num("/bare_open_s").max(1e-9),
            num("/bare_open_p50_us") / 1000.0
        ),
        ratio(n / num("/create_s").max(1e-9), num("/bare_count") / num("/bare_open_s").max(1e-9)),
        String::new(),
    );
}

/// Bytes in KiB or MiB.
fn bytes(b: f64) -> String {
    if b.abs() >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}
