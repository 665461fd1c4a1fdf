//! Endpoints benchmark: how soon after a tenant pod turns Ready its Service's EndpointSlice lists
//! it as ready, in `carrel up` as users run it.
//!
//! Run with `cargo bench -p carrel --bench endpoints`. A plain program (no harness), bounded in
//! count and time, with a watchdog. It starts the `carrel` binary (`carrel up --sim-nodes 2`) on
//! 127.0.0.1:0, makes one tenant with `carrel tenant create`, creates a Service and then
//! [`PODS`] pods it selects, [`IN_FLIGHT`] at a time, and watches both pods and EndpointSlices
//! with one kube client, as a user's program would.
//!
//! | measurement | ours | baseline (same run) | target (issue 19) |
//! |---|---|---|---|
//! | pod Ready → its address ready | per pod: the instant the slice watch first shows the pod's IP ready, less the instant the pod watch first shows the pod Ready; p50 and p99 | the least a controller can do: a client watching the same pods writes one ConfigMap per pod as it sees it Ready, and the same interval is taken to a ConfigMap watch showing it | p50 ≤ 50 ms |
//!
//! Every instant comes from watches on the same connection, so what a watch event takes to
//! arrive counts on every side alike; what remains is the reaction and its write: the
//! endpointslice controller's (it reads the Service, the pods and the slices, and rewrites the
//! slice), against one create.

#![allow(clippy::print_stdout)]

mod up;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, runtime, section, verdict, watchdog, Run, Table};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use parking_lot::Mutex;
use serde_json::json;
use up::{client_from, create_tenant, start, BenchResult};

const PODS: usize = 200;
const IN_FLIGHT: usize = 4;
const TARGET_P50: Duration = Duration::from_millis(50);
const WATCHDOG: Duration = Duration::from_secs(600);
const WAIT: Duration = Duration::from_secs(240);
const NS: &str = "default";
const APP: &str = "eps";

/// When each pod IP was first seen: Ready on the pod watch, ready in the slice watch.
#[derive(Default)]
struct Seen {
    pod_ready: HashMap<String, Instant>,
    slice_ready: HashMap<String, Instant>,
    mirrored: HashMap<String, Instant>,
}

/// The baseline's reaction: for each pod of [`APP`] seen Ready, one ConfigMap naming its IP.
async fn mirror_pods(pods: Api<Pod>, maps: Api<ConfigMap>) -> BenchResult<()> {
    let config = watcher::Config::default().labels(&format!("app={APP}"));
    let stream = watcher(pods, config).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    let mut done = std::collections::HashSet::new();
    while let Some(pod) = stream.try_next().await? {
        let Some(status) = pod.status else { continue };
        let ready =
            status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        let (Some(ip), Some(name)) = (status.pod_ip, pod.metadata.name) else { continue };
        if ready && done.insert(name.clone()) {
            let map: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("mirror-{name}"), "labels": {"mirror": APP}},
                "data": {"ip": ip},
            }))?;
            maps.create(&PostParams::default(), &map).await?;
        }
    }
    Ok(())
}

/// Record the instant each mirrored IP's ConfigMap is first seen.
async fn watch_mirrors(api: Api<ConfigMap>, seen: Arc<Mutex<Seen>>) -> BenchResult<()> {
    let config = watcher::Config::default().labels(&format!("mirror={APP}"));
    let stream = watcher(api, config).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    while let Some(map) = stream.try_next().await? {
        let now = Instant::now();
        if let Some(ip) = map.data.as_ref().and_then(|d| d.get("ip")) {
            seen.lock().mirrored.entry(ip.clone()).or_insert(now);
        }
    }
    Ok(())
}

/// Record the instant each pod of [`APP`] is first seen Ready, by its IP.
async fn watch_pods(api: Api<Pod>, seen: Arc<Mutex<Seen>>) -> BenchResult<()> {
    let config = watcher::Config::default().labels(&format!("app={APP}"));
    let stream = watcher(api, config).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    while let Some(pod) = stream.try_next().await? {
        let now = Instant::now();
        let Some(status) = pod.status else { continue };
        let ready =
            status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        if let (true, Some(ip)) = (ready, status.pod_ip) {
            seen.lock().pod_ready.entry(ip).or_insert(now);
        }
    }
    Ok(())
}

/// Record the instant each address is first seen ready in a slice of [`APP`]'s Service.
async fn watch_slices(api: Api<EndpointSlice>, seen: Arc<Mutex<Seen>>) -> BenchResult<()> {
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={APP}"));
    let stream = watcher(api, config).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    while let Some(slice) = stream.try_next().await? {
        let now = Instant::now();
        let mut seen = seen.lock();
        for endpoint in &slice.endpoints {
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            if ready {
                for ip in &endpoint.addresses {
                    seen.slice_ready.entry(ip.clone()).or_insert(now);
                }
            }
        }
    }
    Ok(())
}

async fn measure(client: &kube::Client) -> BenchResult<(Run, Run)> {
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": APP},
        "spec": {"selector": {"app": APP}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))?;
    Api::<Service>::namespaced(client.clone(), NS).create(&PostParams::default(), &service).await?;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), NS);
    let pod_watch = tokio::spawn(watch_pods(pods.clone(), seen.clone()));
    let slice_watch = tokio::spawn(watch_slices(slices, seen.clone()));
    let maps = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let mirror = tokio::spawn(mirror_pods(pods.clone(), maps.clone()));
    let mirror_watch = tokio::spawn(watch_mirrors(maps, seen.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await; // The watches are listening.
    let start = Instant::now();
    let creates = futures::stream::iter(0..PODS).map(|i| {
        let pods = pods.clone();
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{APP}-{i}"), "labels": {"app": APP}},
                "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            BenchResult::Ok(())
        }
    });
    let results: Vec<BenchResult<()>> = creates.buffer_unordered(IN_FLIGHT).collect().await;
    results.into_iter().collect::<BenchResult<Vec<()>>>()?;
    let deadline = Instant::now() + WAIT;
    loop {
        {
            let seen = seen.lock();
            let all = seen
                .pod_ready
                .keys()
                .filter(|ip| seen.slice_ready.contains_key(*ip) && seen.mirrored.contains_key(*ip));
            if all.count() >= PODS {
                break;
            }
        }
        if Instant::now() > deadline {
            return Err(format!("{PODS} pods not ready in the slice within {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = start.elapsed();
    for task in [pod_watch, slice_watch, mirror, mirror_watch] {
        task.abort();
    }
    let seen = seen.lock();
    let after = |reached: &HashMap<String, Instant>| {
        let latencies = seen
            .pod_ready
            .iter()
            .filter_map(|(ip, ready)| Some(reached.get(ip)?.saturating_duration_since(*ready)))
            .collect();
        Run::from_parts(latencies, elapsed)
    };
    Ok((after(&seen.slice_ready), after(&seen.mirrored)))
}

fn main() -> BenchResult<()> {
    watchdog(WATCHDOG, "endpoints benchmark");
    let tmp = tempfile::tempdir()?;
    let up = start(&tmp.path().join("data"), &[])?;
    let kubeconfig = tmp.path().join("bench.kubeconfig");
    create_tenant(&up, "bench", &kubeconfig)?;
    let rt = runtime("endpoints-bench")?;
    let client = rt.block_on(client_from(&kubeconfig))?;
    let (run, base) = rt.block_on(measure(&client))?;
    println!("{} pods, the slice: {}", run.ops(), run.describe());
    println!("{} pods, one ConfigMap each: {}", base.ops(), base.describe());

    section("Pod Ready → EndpointSlice ready");
    let mut table = Table::default();
    table.header(
        "One tenant of `carrel up --sim-nodes 2`, one Service, pods created 4 at a time; \
         baseline: a client writing one ConfigMap per pod it sees Ready",
    );
    table.row(
        &format!("p50 of {PODS} pods"),
        ms(run.p50()),
        ms(base.p50()),
        ratio(run.p50().as_secs_f64(), base.p50().as_secs_f64()),
        verdict(run.p50() <= TARGET_P50, format!("≤ {}", ms(TARGET_P50))),
    );
    table.row(
        &format!("p99 of {PODS} pods"),
        ms(run.p99()),
        ms(base.p99()),
        ratio(run.p99().as_secs_f64(), base.p99().as_secs_f64()),
        "(none)".into(),
    );
    table.print();
    Ok(())
}
