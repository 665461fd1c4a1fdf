//! Custom resources against ConfigMaps: what schema pruning, defaulting and validation (CEL
//! included) cost per request, and how long a new definition takes to accept its first object.
//!
//! Run with `cargo bench -p carrel-apiserver --bench crd`. A plain program (no harness), bounded
//! in count and time, with a watchdog. Requests go through the server's router in this process
//! (`tower::ServiceExt::oneshot`: body decoding, pruning, admission, the store; no sockets), so
//! that both sides of each ratio take the same path:
//!
//! | measurement | ours | baseline (same run) |
//! |---|---|---|
//! | CREATE, GET, LIST of 500; 1 and 8 clients | a `TrainingJob` (the test suite's operator definition: defaults, enums, a pattern, list-map keys) and an `InferenceService` (CEL rules) | a ConfigMap of about the same size, measured before and after them; the faster run counts |
//! | definition → first object | POST of a new definition, then POST of an object of it, until the object is accepted | - |

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use carrel_apiserver::{router, Api, Server};
use carrel_bench::{ms, rate, ratio, runtime, section, verdict, watchdog, Run, Table};
use carrel_store::{Options, SledStore};
use tower::ServiceExt;

const CLIENTS: [usize; 2] = [1, 8];
const LOAD_TIME: Duration = Duration::from_secs(2);
const REQUESTS_PER_CLIENT_CAP: usize = 50_000;
const LIST_OBJECTS: usize = 500;
const DEFINITIONS: usize = 30;
const WATCHDOG: Duration = Duration::from_secs(300);

/// Targets.
const TARGET_CREATE_RATIO: f64 = 0.5;
const TARGET_FIRST_OBJECT: Duration = Duration::from_millis(50);

const TRAINING_JOBS: &str = include_str!("../../tests/crds/trainingjobs.yaml");
const INFERENCE_SERVICES: &str = include_str!("../../tests/crds/inferenceservices.yaml");

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One kind of object the benchmark writes.
#[derive(Clone, Copy)]
enum Kind {
    ConfigMap,
    TrainingJob,
    InferenceService,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::TrainingJob => "TrainingJob",
            Kind::InferenceService => "InferenceService",
        }
    }

    fn collection(self) -> &'static str {
        match self {
            Kind::ConfigMap => "/api/v1/namespaces/default/configmaps",
            Kind::TrainingJob => "/apis/ml.carrel.dev/v1/namespaces/default/trainingjobs",
            Kind::InferenceService => {
                "/apis/serving.carrel.dev/v1/namespaces/default/inferenceservices"
            }
        }
    }

    /// An object of this kind as a client sends it; the three are of about the same size.
    fn body(self, name: &str) -> String {
        match self {
            Kind::ConfigMap => format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"app":"train"}}}},"data":{{"image":"registry.example/llama-train:1","workers":"4","gpuProfile":"2g.35gb","checkpointBucket":"s3://ckpt/llama","port":"29500"}}}}"#
            ),
            Kind::TrainingJob => format!(
                r#"{{"apiVersion":"ml.carrel.dev/v1","kind":"TrainingJob","metadata":{{"name":"{name}","labels":{{"app":"train"}}}},"spec":{{"image":"registry.example/llama-train:1","workers":4,"gpuProfile":"2g.35gb","checkpointBucket":"s3://ckpt/llama","ports":[{{"name":"rendezvous","port":29500}}]}}}}"#
            ),
            Kind::InferenceService => format!(
                r#"{{"apiVersion":"serving.carrel.dev/v1","kind":"InferenceService","metadata":{{"name":"{name}","labels":{{"app":"train"}}}},"spec":{{"model":"registry.example/llama-70b:1","minReplicas":1,"maxReplicas":4,"gpus":2}}}}"#
            ),
        }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Create,
    Get,
    List,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Get => "GET",
            Op::List => "LIST",
        }
    }
}

async fn send(
    app: &axum::Router,
    method: Method,
    path: &str,
    content_type: &str,
    body: String,
) -> BenchResult<(StatusCode, bytes::Bytes)> {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(Body::from(body))?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    Ok((status, body))
}

async fn expect(
    app: &axum::Router,
    method: Method,
    path: &str,
    body: String,
    wanted: StatusCode,
) -> BenchResult<()> {
    let content_type = if body.starts_with('{') { "application/json" } else { "application/yaml" };
    let (status, answer) = send(app, method, path, content_type, body).await?;
    if status != wanted {
        let text = String::from_utf8_lossy(&answer[..answer.len().min(400)]).into_owned();
        return Err(format!("{path}: got {status}, wanted {wanted}: {text}").into());
    }
    Ok(())
}

/// `clients` tasks doing `op` on `kind` for [`LOAD_TIME`].
async fn load(
    app: &axum::Router,
    kind: Kind,
    op: Op,
    clients: usize,
    tag: &str,
) -> BenchResult<Run> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..clients {
        let app = app.clone();
        let tag = format!("{tag}-{client}");
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let begin = Instant::now();
            for i in 0..REQUESTS_PER_CLIENT_CAP {
                if begin.elapsed() > LOAD_TIME {
                    break;
                }
                let t = Instant::now();
                match op {
                    Op::Create => {
                        let name = format!("{tag}-{i}");
                        expect(
                            &app,
                            Method::POST,
                            kind.collection(),
                            kind.body(&name),
                            StatusCode::CREATED,
                        )
                        .await?
                    }
                    Op::Get => {
                        let path = format!("{}/fill-0", kind.collection());
                        expect(&app, Method::GET, &path, String::new(), StatusCode::OK).await?
                    }
                    Op::List => {
                        let path = format!("{}?labelSelector=app%3Dtrain", kind.collection());
                        expect(&app, Method::GET, &path, String::new(), StatusCode::OK).await?
                    }
                }
                latencies.push(t.elapsed());
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(Run::from_parts(all, started.elapsed()))
}

fn main() -> BenchResult<()> {
    watchdog(WATCHDOG, "a hang in the server or the store?");
    let tmp = tempfile::tempdir()?;
    println!("custom resource benchmark: every ratio is custom resource / ConfigMap, both measured in this run");
    let rt = runtime("crd")?;
    let store = SledStore::open(tmp.path().join("store"), Options::create())?;
    let api = Arc::new(Api::new(Arc::new(store))?);
    let app = router(Arc::new(Server::new(api, "")));
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut table = Table::default();

    rt.block_on(async {
        section("setup");
        expect(&app, Method::POST, crds, TRAINING_JOBS.to_owned(), StatusCode::CREATED).await?;
        expect(&app, Method::POST, crds, INFERENCE_SERVICES.to_owned(), StatusCode::CREATED)
            .await?;
        for kind in [Kind::ConfigMap, Kind::TrainingJob, Kind::InferenceService] {
            let t = Instant::now();
            for i in 0..LIST_OBJECTS {
                let body = kind.body(&format!("fill-{i}"));
                expect(&app, Method::POST, kind.collection(), body, StatusCode::CREATED).await?;
            }
            println!("  {} {}s in {}", LIST_OBJECTS, kind.name(), ms(t.elapsed()));
        }

        // Reads first, while every kind holds the same objects; then the creates.
        for op in [Op::Get, Op::List, Op::Create] {
            section(op.name());
            table.header(&format!("{} (router, in process)", op.name()));
            for clients in CLIENTS {
                let tag = format!("{}{clients}", op.name().to_ascii_lowercase());
                // The ConfigMaps run before and after the custom resources, and the faster of
                // the two is the baseline: whatever the order favours goes to the baseline.
                let before = load(&app, Kind::ConfigMap, op, clients, &format!("cm-{tag}")).await?;
                println!("  ConfigMap, {clients} clients, before: {}", before.describe());
                let mut runs = Vec::new();
                for kind in [Kind::TrainingJob, Kind::InferenceService] {
                    let ours = load(&app, kind, op, clients, &format!("cr-{tag}")).await?;
                    println!("  {}, {clients} clients: {}", kind.name(), ours.describe());
                    runs.push((kind, ours));
                }
                let after = load(&app, Kind::ConfigMap, op, clients, &format!("cm2-{tag}")).await?;
                println!("  ConfigMap, {clients} clients, after: {}", after.describe());
                let base = if after.rate() > before.rate() { after } else { before };
                for (kind, ours) in runs {
                    let target = match op {
                        Op::Create => {
                            let ratio = ours.rate() / base.rate();
                            verdict(ratio >= TARGET_CREATE_RATIO, "≥ 0.50x".into())
                        }
                        _ => "-".into(),
                    };
                    table.row(
                        &format!("{} {}, {clients} clients: rate", kind.name(), op.name()),
                        rate(ours.rate()),
                        rate(base.rate()),
                        ratio(ours.rate(), base.rate()),
                        target,
                    );
                    table.row(
                        &format!("{} {}, {clients} clients: p99", kind.name(), op.name()),
                        ms(ours.p99()),
                        ms(base.p99()),
                        ratio(ours.p99().as_secs_f64(), base.p99().as_secs_f64()),
                        "-".into(),
                    );
                }
            }
        }

        section("definition → first object");
        let mut latencies = Vec::new();
        let started = Instant::now();
        for i in 0..DEFINITIONS {
            let group = format!("bench{i}.carrel.dev");
            let definition = TRAINING_JOBS.replace("ml.carrel.dev", &group);
            let object = Kind::TrainingJob.body("first").replace("ml.carrel.dev", &group);
            let collection = format!("/apis/{group}/v1/namespaces/default/trainingjobs");
            let t = Instant::now();
            expect(&app, Method::POST, crds, definition, StatusCode::CREATED).await?;
            let mut tries = 0;
            loop {
                tries += 1;
                let (status, _) =
                    send(&app, Method::POST, &collection, "application/json", object.clone())
                        .await?;
                if status == StatusCode::CREATED {
                    break;
                }
                if tries > 1000 {
                    return Err(format!("{group}: no object accepted after {tries} tries").into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            latencies.push(t.elapsed());
        }
        let run = Run::from_parts(latencies, started.elapsed());
        println!("  {}", run.describe());
        table.header("definition → first object accepted");
        table.row(
            "p50",
            ms(run.p50()),
            "-".into(),
            "-".into(),
            verdict(run.p50() <= TARGET_FIRST_OBJECT, format!("≤ {}", ms(TARGET_FIRST_OBJECT))),
        );
        table.row(
            "p99",
            ms(run.p99()),
            "-".into(),
            "-".into(),
            verdict(run.p99() <= TARGET_FIRST_OBJECT, format!("≤ {}", ms(TARGET_FIRST_OBJECT))),
        );
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })?;
    table.print();
    Ok(())
}
