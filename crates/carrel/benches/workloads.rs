//! Workload benchmark: what a tenant's controllers add to the time pods take to run, against a
//! client doing the same by itself in the same run.
//!
//! Run with `cargo bench -p carrel --bench workloads`. A plain program (no harness), bounded in
//! count and time, with a watchdog. It starts the `carrel` binary (`carrel up --sim-nodes 2
//! --sim-max-pods 8000`) on 127.0.0.1:0, makes one tenant with `carrel tenant create`, and talks
//! to the tenant with a kube client, as a user's program would; the tenant's pods reach the
//! host through its syncer and are played by the simulated kubelets.
//!
//! | measurement | ours | baseline (same run, same tenant) |
//! |---|---|---|
//! | 100 replicas Running | POST of a Deployment of 100 replicas → its 100 pods seen Running on a tenant watch | the client POSTs 100 bare pods of the same template, 32 in flight, → all seen Running |
//! | a 1,000-pod Job | POST of a Job (completions 1,000, parallelism 100; each pod's run lasts 0.2 s in the simulated kubelet) → its `Complete` condition | the client keeps 100 bare pods of the same template in flight until 1,000 have Succeeded |
//!
//! Each is run [`ROUNDS`] times, ours and the baseline in turns, with everything deleted between
//! rounds; the medians are compared. Targets (issue 18): 100 replicas ≤ 1.5x.

#![allow(clippy::print_stdout)]

mod up;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use carrel_bench::{median, ms, ratio, runtime, section, verdict, watchdog, Table};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};
use up::{client_from, create_tenant, start, BenchResult};

const ROUNDS: usize = 3;
const REPLICAS: usize = 100;
const JOB_PODS: usize = 1_000;
const JOB_PARALLELISM: usize = 100;
const IN_FLIGHT: usize = 32;
const TARGET_REPLICAS_RATIO: f64 = 1.5;
const WATCHDOG: Duration = Duration::from_secs(1_200);
const WAIT: Duration = Duration::from_secs(300);
const NS: &str = "default";

/// The pod template every measurement runs: one container; `run_seconds` sets how long the
/// simulated kubelet plays each run (none: until deleted).
fn template(app: &str, run_seconds: Option<f64>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(s) = run_seconds {
        annotations
            .insert(carrel_sim::kubelet::ANNOTATION_RUN_SECONDS.into(), s.to_string().into());
    }
    json!({
        "metadata": {"labels": {"app": app}, "annotations": annotations},
        "spec": {
            "restartPolicy": if run_seconds.is_some() { "Never" } else { "Always" },
            "containers": [{"name": "main", "image": "registry.example/app:1"}],
        },
    })
}

/// Watch pods labelled `app=<app>` until `count` distinct ones have shown `phase`; the time then.
async fn until_pods(api: Api<Pod>, app: String, phase: &str, count: usize) -> BenchResult<Instant> {
    let mut seen = HashSet::new();
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let stream = watcher(api, config).default_backoff().applied_objects();
    futures::pin_mut!(stream);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.try_next()).await;
        let pod = match next {
            Ok(Ok(Some(pod))) => pod,
            Ok(Ok(None)) => return Err("the pod watch ended".into()),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                return Err(format!("{count} pods of {app} not {phase} within {WAIT:?}").into())
            }
        };
        if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase) {
            seen.insert(pod.metadata.name.clone().unwrap_or_default());
            if seen.len() >= count {
                return Ok(Instant::now());
            }
        }
    }
}

/// Create bare pods `<app>-<i>` for `i` in `range`, at most `in_flight` at once.
async fn create_pods(
    api: &Api<Pod>,
    app: &str,
    range: std::ops::Range<usize>,
    template: &Value,
    in_flight: usize,
) -> BenchResult<()> {
    let creates = futures::stream::iter(range).map(|i| {
        let mut pod = template.clone();
        pod["metadata"]["name"] = json!(format!("{app}-{i}"));
        let api = api.clone();
        async move {
            let pod: Pod = serde_json::from_value(pod)?;
            api.create(&PostParams::default(), &pod).await?;
            BenchResult::Ok(())
        }
    });
    let results: Vec<BenchResult<()>> = creates.buffer_unordered(in_flight).collect().await;
    results.into_iter().collect()
}

/// Delete everything of `app` (pods, the Deployment or Job) and wait until no pod of it is left.
async fn clear(client: &kube::Client, app: &str) -> BenchResult<()> {
    let background = DeleteParams::background();
    let _ = Api::<Deployment>::namespaced(client.clone(), NS).delete(app, &background).await;
    let _ = Api::<Job>::namespaced(client.clone(), NS).delete(app, &background).await;
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let selector = ListParams::default().labels(&format!("app={app}"));
    let _ = pods.delete_collection(&background, &selector).await;
    let deadline = Instant::now() + WAIT;
    while !pods.list(&selector).await?.items.is_empty() {
        if Instant::now() > deadline {
            return Err(format!("the pods of {app} not gone within {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// A Deployment of [`REPLICAS`] → all Running.
async fn deployment(client: &kube::Client, app: &str) -> BenchResult<Duration> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let watch = tokio::spawn(until_pods(pods, owned(app), "Running", REPLICAS));
    tokio::time::sleep(Duration::from_millis(200)).await; // The watch is listening.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": app}},
            "template": template(app, None),
        },
    }))?;
    let start = Instant::now();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment)
        .await?;
    Ok(watch.await??.duration_since(start))
}

/// [`REPLICAS`] bare pods → all Running.
async fn bare_pods(client: &kube::Client, app: &str) -> BenchResult<Duration> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let watch = tokio::spawn(until_pods(pods.clone(), owned(app), "Running", REPLICAS));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    create_pods(&pods, app, 0..REPLICAS, &template(app, None), IN_FLIGHT).await?;
    Ok(watch.await??.duration_since(start))
}

/// A Job of [`JOB_PODS`] completions → `Complete`.
async fn job(client: &kube::Client, app: &str) -> BenchResult<Duration> {
    let jobs = Api::<Job>::namespaced(client.clone(), NS);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": app},
        "spec": {
            "completions": JOB_PODS,
            "parallelism": JOB_PARALLELISM,
            "backoffLimit": 0,
            "template": template(app, Some(0.2)),
        },
    }))?;
    let start = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let deadline = start + WAIT;
    loop {
        let job = jobs.get(app).await?;
        let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
        let holds = |kind: &str| conditions.iter().find(|c| c.type_ == kind && c.status == "True");
        if holds("Complete").is_some() {
            return Ok(start.elapsed());
        }
        if let Some(failed) = holds("Failed") {
            return Err(format!("the Job failed: {:?}", failed.message).into());
        }
        if Instant::now() > deadline {
            return Err(format!("the Job not complete within {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`JOB_PODS`] bare pods, [`JOB_PARALLELISM`] at a time, → all Succeeded.
async fn bare_job(client: &kube::Client, app: &str) -> BenchResult<Duration> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let succeeded = tokio::spawn(until_pods(pods.clone(), owned(app), "Succeeded", JOB_PODS));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let template = template(app, Some(0.2));
    let start = Instant::now();
    // Keep JOB_PARALLELISM pods unfinished: a new one as each earlier one ends, as the Job
    // controller does.
    create_pods(&pods, app, 0..JOB_PARALLELISM, &template, IN_FLIGHT).await?;
    let finished =
        ListParams::default().labels(&format!("app={app}")).fields("status.phase=Succeeded");
    let mut created = JOB_PARALLELISM;
    let deadline = start + WAIT;
    while created < JOB_PODS {
        let done = pods.list_metadata(&finished).await?.items.len();
        let wanted = (done + JOB_PARALLELISM).min(JOB_PODS);
        if wanted > created {
            create_pods(&pods, app, created..wanted, &template, IN_FLIGHT).await?;
            created = wanted;
        } else {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if Instant::now() > deadline {
            return Err(format!("the bare pods not done within {WAIT:?}").into());
        }
    }
    Ok(succeeded.await??.duration_since(start))
}

/// `app` as the pod watch task holds it.
fn owned(app: &str) -> String {
    app.to_owned()
}

fn main() -> BenchResult<()> {
    watchdog(WATCHDOG, "workloads benchmark");
    let tmp = tempfile::tempdir()?;
    let up = start(&tmp.path().join("data"), &[])?;
    let kubeconfig = tmp.path().join("bench.kubeconfig");
    create_tenant(&up, "bench", &kubeconfig)?;
    let rt = runtime("workloads-bench")?;
    let client = rt.block_on(client_from(&kubeconfig))?;

    let (mut ours, mut base, mut job_ours, mut job_base) = (vec![], vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        rt.block_on(async {
            let app = format!("web-{round}");
            ours.push(deployment(&client, &app).await?);
            clear(&client, &app).await?;
            let app = format!("bare-{round}");
            base.push(bare_pods(&client, &app).await?);
            clear(&client, &app).await?;
            let app = format!("job-{round}");
            job_ours.push(job(&client, &app).await?);
            clear(&client, &app).await?;
            let app = format!("bare-job-{round}");
            job_base.push(bare_job(&client, &app).await?);
            clear(&client, &app).await?;
            BenchResult::Ok(())
        })?;
        println!(
            "round {round}: deployment {} / bare {}; job {} / bare {}",
            ms(ours[round]),
            ms(base[round]),
            ms(job_ours[round]),
            ms(job_base[round]),
        );
    }

    section("Controllers against a client doing the same (medians of 3 rounds)");
    let mut table = Table::default();
    table.header("One tenant of `carrel up --sim-nodes 2` (simulated kubelets)");
    let (o, b) = (median(ours), median(base));
    let r = o.as_secs_f64() / b.as_secs_f64();
    table.row(
        &format!("Deployment of {REPLICAS} → all Running"),
        ms(o),
        ms(b),
        ratio(o.as_secs_f64(), b.as_secs_f64()),
        verdict(r <= TARGET_REPLICAS_RATIO, format!("≤ {TARGET_REPLICAS_RATIO}x")),
    );
    let (o, b) = (median(job_ours), median(job_base));
    table.row(
        &format!("Job of {JOB_PODS} (parallelism {JOB_PARALLELISM}) → Complete"),
        ms(o),
        ms(b),
        ratio(o.as_secs_f64(), b.as_secs_f64()),
        "(none)".to_owned(),
    );
    table.print();
    Ok(())
}
