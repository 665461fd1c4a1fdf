//! Memory: the child process that measures idle tenants and the baselines.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use carrel_apiserver::Api;
use carrel_bench::{median, ratio, runtime, verdict, watchdog, Table};
use carrel_store::{Options, SledStore};
use carrel_tenants::{host_namespace, KUBECONFIG_SECRET};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::ListParams;
use serde_json::{json, Value};

use crate::host::{client_from, create_tenant, start_host};
use crate::{
    BenchResult, BASELINE_BUDGET, CREATE_BUDGET, IDLE, IN_FLIGHT, MEMORY_CHILD_LIMIT,
    MEMORY_TENANTS, TARGET_RSS_PER_TENANT, TENANT_TIMEOUT,
};

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

pub(crate) fn memory_child(dir: PathBuf) -> BenchResult<()> {
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

pub(crate) fn memory_rows(table: &mut Table, m: &Value) {
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
