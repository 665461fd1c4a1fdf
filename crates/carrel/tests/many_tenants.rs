//! Thousands of tenants in one `carrel up`, with its syncers: 2,500 are created through the host
//! API, all become Ready, a GPU pod in a sample of them runs on a simulated GPU, and what the
//! process holds (descriptors, threads, memory) is printed in all and per tenant. Idle tenants
//! close their stores, so that the count fits under the open-file limit, and the log stays
//! short however many tenants there are.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_e2e::ok;
use common::{eventually, Up};
use futures::StreamExt as _;
use kube::api::{ListParams, PostParams};

/// How many tenants are created: three times as many as fit open under the open-file limit,
/// few enough that a debug build on 2 cores makes them Ready well within `READY_WITHIN` (the
/// density benchmark measures 10,000 on the release build); `CARREL_MANY_TENANTS` sets another
/// count.
const TENANTS: usize = 2_500;

/// What makes a tenant's cost while idle small: one that gets no request for this long closes
/// its store and stops its syncer, and wakes on its next request. Leave it out (`&[]`) to see
/// what every tenant costs while served: about 4 descriptors, so some 800 fit under a hard
/// open-file limit of 20,000 (the stores' reserve is 24 descriptors each).
const IDLE_ARGS: &[&str] = &["--tenant-idle-after", "2s"];

/// The simulated cluster: one node with one H200, seven `1g.18gb` slices of it.
const SIM_ARGS: &[&str] = &["--sim-nodes", "1", "--sim-gpus", "h200x1"];

/// How many tenants run a GPU pod, spread over the range created.
const SAMPLE: usize = 4;

/// How many creates are in flight at once.
const CONCURRENCY: usize = 32;

/// How long all the tenants get to be Ready.
const READY_WITHIN: Duration = Duration::from_secs(600);

#[allow(clippy::print_stderr)]
fn say(line: &str) {
    eprintln!("{line}");
}

fn tenant_count() -> usize {
    match std::env::var("CARREL_MANY_TENANTS") {
        Ok(n) => n.parse().ok().filter(|&n| n > 0).expect("CARREL_MANY_TENANTS: a count above 0"),
        Err(_) => TENANTS,
    }
}

fn name(i: usize) -> String {
    format!("m{i:05}")
}

/// The tenants that run a GPU pod: the first, the last, and some between.
fn sample(count: usize) -> Vec<usize> {
    let mut picked: Vec<usize> =
        (0..SAMPLE).map(|k| k * (count - 1) / (SAMPLE - 1).max(1)).collect();
    picked.dedup();
    picked
}

/// What the process holds: descriptors, threads and resident memory (KiB).
#[derive(Clone, Copy, Debug)]
struct Held {
    files: usize,
    threads: usize,
    rss_kib: usize,
}

fn held(pid: u32) -> Held {
    let files = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Held { files, threads: field("Threads:"), rss_kib: field("VmRSS:") }
}

/// Say what the process holds, in all and per tenant beyond what it held with none.
fn report(when: &str, now: Held, before: Held, tenants: usize) {
    let total = format!(
        "{} descriptors, {} threads, {} MiB resident",
        now.files,
        now.threads,
        now.rss_kib / 1024
    );
    if tenants == 0 {
        return say(&format!("{when}: {total}"));
    }
    let per = |now: usize, before: usize| (now as f64 - before as f64) / tenants as f64;
    say(&format!(
        "{when}: {total}; per tenant: {:.2} descriptors, {:.3} threads, {:.1} KiB",
        per(now.files, before.files),
        per(now.threads, before.threads),
        per(now.rss_kib, before.rss_kib),
    ));
}

/// A client of the host API, from the kubeconfig `carrel up` wrote.
async fn host_client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("the host kubeconfig");
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A tenant as `carrel tenant create` makes it, with a quota of one GPU slice when `gpu`.
fn tenant(name: &str, gpu: bool) -> Tenant {
    let gpu_quota = if gpu { BTreeMap::from([("1g.18gb".to_owned(), 1)]) } else { BTreeMap::new() };
    Tenant {
        metadata: kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(TenantSpec { gpu_quota, ..Default::default() }),
        ..Default::default()
    }
}

/// Create the tenants `0..count`, `CONCURRENCY` at a time; the ones that failed, and why.
async fn create_all(api: &kube::Api<Tenant>, count: usize, gpu: &[usize]) -> Vec<String> {
    futures::stream::iter(0..count)
        .map(|i| async move {
            let name = name(i);
            let result = api.create(&PostParams::default(), &tenant(&name, gpu.contains(&i))).await;
            result.err().map(|e| format!("{name}: {e}"))
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|failed| async { failed })
        .collect()
        .await
}

/// The tenants by phase (`None`: none yet): their names, each with its condition's reason and
/// message.
type Phases = BTreeMap<Option<String>, Vec<(String, String)>>;

async fn phases(api: &kube::Api<Tenant>) -> Phases {
    let mut by_phase = Phases::new();
    for t in api.list(&ListParams::default()).await.expect("listing tenants").items {
        let status = t.status.unwrap_or_default();
        let why = status
            .conditions
            .first()
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default();
        let name = t.metadata.name.unwrap_or_default();
        by_phase.entry(status.phase).or_default().push((name, why));
    }
    by_phase
}

/// The tenants not Ready, by phase and reason: how many, and the first few names.
fn not_ready(by_phase: &Phases) -> String {
    let mut by_why: BTreeMap<(&Option<String>, &str), Vec<&str>> = BTreeMap::new();
    for (phase, tenants) in by_phase.iter().filter(|(p, _)| p.as_deref() != Some("Ready")) {
        for (name, why) in tenants {
            by_why.entry((phase, why)).or_default().push(name);
        }
    }
    let lines = by_why.iter().map(|((phase, why), names)| {
        let first = &names[..names.len().min(5)];
        format!("  {} {phase:?} ({why}): {}…", names.len(), first.join(", "))
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// Wait until all `count` tenants are Ready, saying how many are every ten seconds; panics with
/// the phases and reasons of the others once none has become Ready for a minute, or after
/// `READY_WITHIN`.
async fn wait_ready(api: &kube::Api<Tenant>, count: usize) {
    let start = Instant::now();
    let mut said = Instant::now();
    let (mut most, mut progressed) = (0, Instant::now());
    loop {
        let listing = Instant::now();
        let by_phase = phases(api).await;
        let listed = listing.elapsed();
        let ready = by_phase.get(&Some("Ready".to_owned())).map_or(0, Vec::len);
        if ready == count {
            return;
        }
        if ready > most {
            (most, progressed) = (ready, Instant::now());
        }
        let counts: Vec<String> =
            by_phase.iter().map(|(p, names)| format!("{p:?}: {}", names.len())).collect();
        if start.elapsed() > READY_WITHIN || progressed.elapsed() > Duration::from_secs(60) {
            panic!(
                "{ready} of {count} tenants Ready after {:.0?}; the others:\n{}",
                start.elapsed(),
                not_ready(&by_phase)
            );
        }
        if said.elapsed() >= Duration::from_secs(10) {
            say(&format!("{:.0?}: {}", start.elapsed(), counts.join(", ")));
            said = Instant::now();
        }
        // Listing thousands of tenants is work for the server too: a fifth of the time at most.
        tokio::time::sleep(Duration::from_secs(1).max(4 * listed)).await;
    }
}

fn gpu_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: cuda\n    resources:\n      limits:\n        nvidia.com/mig-1g.18gb: 1\n"
    )
}

#[test]
fn thousands_of_tenants_are_ready_and_a_gpu_pod_runs_in_a_sample_of_them() {
    let count = tenant_count();
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("carrel.log");
    let args: Vec<&str> = SIM_ARGS.iter().chain(IDLE_ARGS).copied().collect();
    let up = Up::start_logged(data.path(), None, &args, &log);
    assert!(
        up.host_kubeconfig().exists(),
        "carrel up {args:?} did not start: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let pid = up.pid();
    std::thread::sleep(Duration::from_secs(1));
    let before = held(pid);
    report("no tenant", before, before, 0);

    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let api: kube::Api<Tenant> = kube::Api::all(rt.block_on(host_client(&up.host_kubeconfig())));
    let gpu = sample(count);

    // Created through the host API as `carrel tenant create` does, without waiting for each.
    let start = Instant::now();
    let failed = rt.block_on(create_all(&api, count, &gpu));
    let created = start.elapsed();
    assert!(
        failed.is_empty(),
        "{} creates failed: {:#?}",
        failed.len(),
        &failed[..failed.len().min(20)]
    );
    rt.block_on(wait_ready(&api, count));
    let ready = start.elapsed();
    say(&format!(
        "{count} tenants created in {created:.1?} ({:.0}/s), all Ready after {ready:.1?} ({:.0}/s)",
        count as f64 / created.as_secs_f64(),
        count as f64 / ready.as_secs_f64(),
    ));
    report("all Ready", held(pid), before, count);

    // A GPU pod in each sampled tenant runs, through its syncer, on a slice of the GPU.
    let kubeconfigs: Vec<_> = gpu
        .iter()
        .map(|&i| {
            let name = name(i);
            let kubeconfig = up.home.path().join(format!("{name}.kubeconfig"));
            std::fs::write(&kubeconfig, ok(up.carrel(&["tenant", "kubeconfig", &name]))).unwrap();
            let manifest = up.home.path().join(format!("{name}.yaml"));
            std::fs::write(&manifest, gpu_pod("gpu")).unwrap();
            ok(up.kubectl(&kubeconfig, &["apply", "-f", &manifest.to_string_lossy()]));
            (name, kubeconfig)
        })
        .collect();
    for (name, kubeconfig) in &kubeconfigs {
        eventually(&format!("{name}'s GPU pod Running"), Duration::from_secs(60), || {
            let out =
                up.kubectl(kubeconfig, &["get", "pod", "gpu", "-o", "jsonpath={.status.phase}"]);
            let phase = String::from_utf8_lossy(&out.stdout).into_owned();
            (phase == "Running", phase)
        });
    }
    say(&format!("a GPU pod runs in {:?}", gpu.iter().map(|&i| name(i)).collect::<Vec<_>>()));
    report("pods running", held(pid), before, count);

    // The test's connections to the host API close: they are no tenant's.
    drop(api);
    drop(rt);
    if !IDLE_ARGS.is_empty() {
        // Left alone, the tenants close their stores: at most one descriptor each stays.
        let idle =
            eventually("at most one descriptor per idle tenant", Duration::from_secs(60), || {
                let now = held(pid);
                (now.files <= before.files + count, now)
            });
        report("idle", idle, before, count);
    }

    let text = std::fs::read_to_string(&log).unwrap();
    let head = text.lines().take(100).collect::<Vec<_>>().join("\n");
    assert!(!text.contains("Too many open files"), "the log begins:\n{head}");
    let (lines, most_repeated) = common::log_volume(&text);
    say(&format!("the log: {lines} lines, its most repeated message {most_repeated} times"));
    assert!(lines < 200, "{lines} log lines, beginning:\n{head}");
    assert!(most_repeated < 50, "one message {most_repeated} times");
    up.stop();
}
