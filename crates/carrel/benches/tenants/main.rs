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

mod host;
mod latency;
mod memory;
mod stores;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use carrel_bench::{median, ms, runtime, section, watchdog, Table};
use serde_json::Value;

use host::{client_from, start_host};
use latency::{baseline_latency, latency_rows, tenant_latency};
use memory::{memory_child, memory_rows};
use stores::{store_rows, tenant_stores};

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
