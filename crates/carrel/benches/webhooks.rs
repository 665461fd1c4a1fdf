//! Webhooks benchmark: what an admission webhook adds to a create, and what a conversion webhook
//! adds to a list, in `carrel up` as users run it, against the webhook's own cost.
//!
//! Run with `cargo bench -p carrel --bench webhooks`. A plain program (no harness), bounded in
//! count and time, with a watchdog. It starts the `carrel` binary (`carrel up --sim-nodes 2`) on
//! 127.0.0.1:0, makes one tenant with `carrel tenant create`, and a webhook server in this
//! process (HTTPS with rustls, HTTP/1.1, `TCP_NODELAY`, a CA of its own), and measures with
//! kube-rs clients over TLS:
//!
//! | measurement | ours | baseline (same run) | target (issue 21) |
//! |---|---|---|---|
//! | admission | a ConfigMap create in a namespace a validating webhook selects, minus one in a namespace it does not (alternating, p50 of [`CREATES`] each) | one round trip of the same AdmissionReview (the bytes the webhook was last sent) to the webhook over a kept TLS connection from another process, as Carrel makes it (this benchmark run again as a client), p50 of [`CREATES`]; and from this process | overhead ≤ 1.1x a round trip from another process |
//! | conversion | a LIST in v2 of [`OBJECTS`] custom resources stored in v1, converted by the definition's webhook in one review (median of [`LISTS`]) | the same ConversionReview of [`OBJECTS`] objects posted to the webhook directly over a kept TLS connection (median of [`LISTS`]) | (reported) |

#![allow(clippy::print_stdout)]

mod up;

use std::time::{Duration, Instant};

use carrel_bench::{median, ms, ratio, runtime, section, verdict, watchdog, Run, Table};
use carrel_e2e::webhooks::{convert_shirts, shirts_definition, WebhookServer};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};
use tokio_rustls::rustls;
use up::{client_from, create_tenant, start, BenchResult};

const CREATES: usize = 300;
const OBJECTS: usize = 1000;
const LISTS: usize = 9;
const TARGET_ADMISSION: f64 = 1.1;
const WATCHDOG: Duration = Duration::from_secs(600);

/// The webhook: admission reviews allowed; shirts converted (`spec.color` in v1 is
/// `spec.colour` in v2).
fn answer(_path: &str, review: &Value) -> Value {
    let request = &review["request"];
    if review["kind"] != "ConversionReview" {
        return json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": request["uid"], "allowed": true}});
    }
    convert_shirts(request)
}

/// A kept TLS connection to the webhook at `port`, trusting `ca_pem`, as the baseline's client.
async fn webhook_client(
    ca_pem: &str,
    port: u16,
) -> BenchResult<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let tls =
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)).connect(name, stream).await?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One POST of `body` to the webhook at `path`, to the end of its answer.
async fn round_trip(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    port: u16,
    path: &str,
    body: &Bytes,
) -> BenchResult<Duration> {
    let start = Instant::now();
    sender.ready().await?;
    let request = hyper::Request::post(format!("{path}?timeout=10s"))
        .header("host", format!("127.0.0.1:{port}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, */*")
        .body(Full::new(body.clone()))?;
    let answer = sender.send_request(request).await?.into_body().collect().await?.to_bytes();
    let elapsed = start.elapsed();
    if answer.is_empty() {
        return Err("the webhook answered nothing".into());
    }
    Ok(elapsed)
}

/// What the round-trip client of another process is told: the webhook's port, its CA and the
/// review to post, as files in a directory named by this variable.
const CLIENT: &str = "CARREL_BENCH_WEBHOOK_CLIENT";

/// The baseline from another process, as Carrel calls the webhook: this benchmark run again as
/// a client ([`client_main`]) that posts `body` to `path` [`CREATES`] times (after 20) over one
/// kept connection, each round trip's time written back.
fn round_trips_from_another_process(
    hooks: &WebhookServer,
    path: &str,
    body: &Bytes,
) -> BenchResult<Run> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ca.pem"), &hooks.ca_pem)?;
    std::fs::write(dir.path().join("body.json"), body)?;
    std::fs::write(dir.path().join("target"), format!("{} {path}", hooks.port))?;
    let start = Instant::now();
    let out = std::process::Command::new(std::env::current_exe()?)
        .env(CLIENT, dir.path())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return Err(format!("the round-trip client failed: {}", out.status).into());
    }
    let trips = String::from_utf8(out.stdout)?
        .lines()
        .map(|l| l.parse().map(Duration::from_nanos))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Run::from_parts(trips, elapsed))
}

/// The round-trip client of [`round_trips_from_another_process`]: nanoseconds per line.
fn client_main(dir: &std::path::Path) -> BenchResult<()> {
    let ca_pem = std::fs::read_to_string(dir.join("ca.pem"))?;
    let body = Bytes::from(std::fs::read(dir.join("body.json"))?);
    let target = std::fs::read_to_string(dir.join("target"))?;
    let (port, path) = target.split_once(' ').ok_or("a target of `port path`")?;
    let port: u16 = port.parse()?;
    let rt = runtime("webhooks-bench-client")?;
    let trips = rt.block_on(async {
        let mut webhook = webhook_client(&ca_pem, port).await?;
        for _ in 0..20 {
            round_trip(&mut webhook, port, path, &body).await?;
        }
        let mut trips = Vec::with_capacity(CREATES);
        for _ in 0..CREATES {
            trips.push(round_trip(&mut webhook, port, path, &body).await?);
        }
        BenchResult::Ok(trips)
    })?;
    for trip in trips {
        println!("{}", trip.as_nanos());
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    if let Some(dir) = std::env::var_os(CLIENT) {
        return client_main(std::path::Path::new(&dir));
    }
    watchdog(WATCHDOG, "webhooks benchmark");
    let hooks = WebhookServer::start(answer);
    let tmp = tempfile::tempdir()?;
    let up = start(&tmp.path().join("data"), &[])?;
    let kubeconfig = tmp.path().join("bench.kubeconfig");
    create_tenant(&up, "bench", &kubeconfig)?;
    let rt = runtime("webhooks-bench")?;
    let (admission, conversion) = rt.block_on(async {
        let client = client_from(&kubeconfig).await?;
        let post = PostParams::default();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for (name, hooked) in [("hooked", "yes"), ("plain", "no")] {
            let ns = json!({"metadata": {"name": name, "labels": {"hooked": hooked}}});
            namespaces.create(&post, &serde_json::from_value(ns)?).await?;
        }
        let configuration = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "allow"},
            "webhooks": [{
                "name": "allow.bench.carrel.dev",
                "clientConfig": {"url": format!("https://127.0.0.1:{}/allow", hooks.port),
                                 "caBundle": hooks.ca_bundle()},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"hooked": "yes"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }],
        });
        let gvk = GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        );
        let configurations: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        configurations.create(&post, &serde_json::from_value(configuration)?).await?;

        let hooked: Api<ConfigMap> = Api::namespaced(client.clone(), "hooked");
        let plain: Api<ConfigMap> = Api::namespaced(client.clone(), "plain");
        let configmap = |i: usize| -> BenchResult<ConfigMap> {
            Ok(serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i}")}, "data": {"k": "v"}}))?)
        };
        let timed = |api: Api<ConfigMap>, object: ConfigMap| async move {
            let start = Instant::now();
            api.create(&PostParams::default(), &object).await?;
            BenchResult::Ok(start.elapsed())
        };
        // Warm both paths and the webhook's connection.
        for i in 0..20 {
            timed(hooked.clone(), configmap(1_000_000 + i)?).await?;
            timed(plain.clone(), configmap(1_000_000 + i)?).await?;
        }
        let (mut with, mut without) = (Vec::new(), Vec::new());
        let start = Instant::now();
        for i in 0..CREATES {
            with.push(timed(hooked.clone(), configmap(i)?).await?);
            without.push(timed(plain.clone(), configmap(i)?).await?);
        }
        let elapsed = start.elapsed();
        println!(
            "connections to the webhook after {} creates through it: {}",
            CREATES + 20,
            hooks.connections()
        );
        let sent = Bytes::from(hooks.last("/allow").to_string());
        let mut webhook = webhook_client(&hooks.ca_pem, hooks.port).await?;
        for _ in 0..20 {
            round_trip(&mut webhook, hooks.port, "/allow", &sent).await?;
        }
        let mut trips = Vec::new();
        let trips_start = Instant::now();
        for _ in 0..CREATES {
            trips.push(round_trip(&mut webhook, hooks.port, "/allow", &sent).await?);
        }
        let apart = tokio::task::block_in_place(|| {
            round_trips_from_another_process(&hooks, "/allow", &sent)
        })?;
        let admission = (
            Run::from_parts(with, elapsed),
            Run::from_parts(without, elapsed),
            Run::from_parts(trips, trips_start.elapsed()),
            apart,
        );

        // Conversion: OBJECTS shirts stored in v1, listed in v2.
        let definitions: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(client.clone());
        let by_url = json!({"url": format!("https://127.0.0.1:{}/convert", hooks.port),
                            "caBundle": hooks.ca_bundle()});
        definitions.create(&post, &serde_json::from_value(shirts_definition(by_url))?).await?;
        let resource = |version: &str| {
            let gvk = GroupVersionKind::gvk("wear.carrel.dev", version, "Shirt");
            ApiResource::from_gvk_with_plural(&gvk, "shirts")
        };
        let established = Instant::now();
        let v1: Api<DynamicObject> = loop {
            let api = Api::namespaced_with(client.clone(), "plain", &resource("v1"));
            if api.list(&ListParams::default().limit(1)).await.is_ok() {
                break api;
            }
            if established.elapsed() > Duration::from_secs(30) {
                return Err("the definition was not served".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let v2: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "plain", &resource("v2"));
        for i in 0..OBJECTS {
            let shirt = json!({"apiVersion": "wear.carrel.dev/v1", "kind": "Shirt",
                               "metadata": {"name": format!("shirt-{i}")},
                               "spec": {"color": "red"}});
            v1.create(&post, &serde_json::from_value(shirt)?).await?;
        }
        let (mut lists, mut direct) = (Vec::new(), Vec::new());
        // The review of the whole list, for the baseline (the tenant's controllers watch shirts
        // too, and their events are converted one by one meanwhile).
        let mut review = Value::Null;
        for _ in 0..10 {
            let listed = v2.list(&ListParams::default()).await?;
            if listed.items.len() != OBJECTS {
                return Err("a short list".into());
            }
            let last = hooks.last("/convert");
            if last["request"]["objects"].as_array().map_or(0, Vec::len) == OBJECTS {
                review = last;
                break;
            }
        }
        if review.is_null() {
            return Err("no review of the whole list was seen".into());
        }
        let review = Bytes::from(review.to_string());
        for _ in 0..LISTS {
            let start = Instant::now();
            let listed = v2.list(&ListParams::default()).await?;
            lists.push(start.elapsed());
            if listed.items.len() != OBJECTS {
                return Err("a short list".into());
            }
            direct.push(round_trip(&mut webhook, hooks.port, "/convert", &review).await?);
        }
        BenchResult::Ok((admission, (median(lists), median(direct), review.len())))
    })?;
    let (with, without, trips, apart) = admission;
    let (list, direct, review_bytes) = conversion;
    println!("create with the webhook: {}", with.describe());
    println!("create without: {}", without.describe());
    println!("webhook round trip from this process: {}", trips.describe());
    println!("webhook round trip from another process: {}", apart.describe());

    section("admission and conversion webhooks");
    let mut table = Table::default();
    table.header(
        "One tenant of `carrel up --sim-nodes 2`, kube-rs over TLS; baseline: the same review \
         posted to the webhook over a kept TLS connection, from another process (as Carrel \
         calls it) and from the webhook's own process",
    );
    let overhead = with.p50().saturating_sub(without.p50());
    let overhead_ratio = overhead.as_secs_f64() / apart.p50().as_secs_f64();
    table.row(
        &format!("create overhead of one validating webhook, p50 of {CREATES}"),
        format!("{} ({} − {})", ms(overhead), ms(with.p50()), ms(without.p50())),
        format!("{} (another process)", ms(apart.p50())),
        ratio(overhead.as_secs_f64(), apart.p50().as_secs_f64()),
        verdict(overhead_ratio <= TARGET_ADMISSION, format!("≤ {TARGET_ADMISSION}x")),
    );
    table.row(
        "  the same overhead against a round trip within the webhook's process",
        ms(overhead),
        format!("{} (same process)", ms(trips.p50())),
        ratio(overhead.as_secs_f64(), trips.p50().as_secs_f64()),
        "(reported)".into(),
    );
    table.row(
        &format!(
            "LIST of {OBJECTS} converted in one review ({} KiB), median of {LISTS}",
            review_bytes >> 10
        ),
        ms(list),
        ms(direct),
        ratio(list.as_secs_f64(), direct.as_secs_f64()),
        "(reported)".into(),
    );
    table.print();
    Ok(())
}
