//! Calls of a real webhook server: TLS with its own CA on a loopback port, answering as each
//! test's path asks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::*;
use crate::tls::Certificates;

/// A webhook server; what it was last asked (path and query, body), by path, and how many
/// times each path was asked.
pub(crate) struct Server {
    pub(crate) address: SocketAddr,
    pub(crate) ca: Vec<u8>,
    pub(crate) asked: Arc<Mutex<HashMap<String, (String, Value)>>>,
    pub(crate) calls: Arc<Mutex<HashMap<String, usize>>>,
    /// The connections it accepted.
    pub(crate) connections: Arc<std::sync::atomic::AtomicUsize>,
}

/// A JSONPatch answer.
fn patched(uid: &Value, patch: Value) -> Value {
    use base64::Engine;
    let patch = base64::engine::general_purpose::STANDARD.encode(patch.to_string());
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch}})
}

/// Its answer to a review at `path`: `/deny` refuses with a message, `/deny-500` with a 500 of
/// its own, `/warn` allows with a warning, `/label` adds the label `mutated: "yes"`, `/count`
/// counts its calls on the object in the annotation `count`, `/bad-patch` answers a patch that
/// does not apply; anything else allows.
fn answer(path: &str, review: &Value) -> (u16, Value) {
    let uid = review["request"]["uid"].clone();
    let allowed = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": uid, "allowed": true}});
    let reply = |response: Value| {
        let mut response = response;
        response["uid"] = uid.clone();
        (
            200,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
        )
    };
    let object = &review["request"]["object"];
    if review["kind"] == "ConversionReview" {
        return (200, convert(path, review));
    }
    match path {
        "/deny" => {
            reply(json!({"allowed": false, "status": {"message": "no configmaps named bad"}}))
        }
        "/deny-500" => {
            reply(json!({"allowed": false, "status": {"code": 500, "message": "broke"}}))
        }
        "/warn" => reply(json!({"allowed": true, "warnings": ["careful with that"]})),
        "/label" => (
            200,
            match object.pointer("/metadata/labels") {
                Some(_) => patched(
                    &uid,
                    json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]),
                ),
                None => patched(
                    &uid,
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]),
                ),
            },
        ),
        "/count" => {
            let n = object
                .pointer("/metadata/annotations/count")
                .and_then(Value::as_str)
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            let op = if object.pointer("/metadata/annotations").is_some() {
                json!({"op": "add", "path": "/metadata/annotations/count", "value": (n + 1).to_string()})
            } else {
                json!({"op": "add", "path": "/metadata/annotations", "value": {"count": "1"}})
            };
            (200, patched(&uid, json!([op])))
        }
        "/bad-patch" => (200, patched(&uid, json!([{"op": "remove", "path": "/nope"}]))),
        "/wrong-uid" => (
            200,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                    "response": {"uid": "other", "allowed": true}}),
        ),
        "/not-a-review" => (200, json!({"kind": "Status", "message": "secret of the server"})),
        "/broken" => (500, json!({"message": "secret of the server"})),
        _ => (200, allowed),
    }
}

/// A conversion webhook's answer: `/convert` turns `spec.color` (v1) into `spec.colour` (v2)
/// and back and labels what it converted `converted: "yes"`; `/convert-fail` fails.
fn convert(path: &str, review: &Value) -> Value {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let (from, to) =
        if desired.ends_with("/v2") { ("color", "colour") } else { ("colour", "color") };
    let result = match path {
        "/convert-fail" => json!({"status": "Failure", "message": "no colour for you"}),
        _ => json!({"status": "Success"}),
    };
    let converted: Vec<Value> = request["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let mut o = o.clone();
            o["apiVersion"] = json!(desired);
            if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
                if let Some(v) = spec.remove(from) {
                    spec.insert(to.into(), v);
                }
            }
            o["metadata"]["labels"]["converted"] = json!("yes");
            // Not the webhook's to change: restored by the server.
            o["metadata"]["name"] = json!("renamed");
            o
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "response": {"uid": request["uid"], "convertedObjects": converted, "result": result}})
}

pub(crate) async fn serve() -> Server {
    let certs = Certificates::generate(&["hook.default.svc".into(), "127.0.0.1".into()]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(certs.server_config().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let asked = Arc::new(Mutex::new(HashMap::new()));
    let calls = Arc::new(Mutex::new(HashMap::new()));
    let (seen, counted) = (asked.clone(), calls.clone());
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (acceptor, seen, counted) = (acceptor.clone(), seen.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else { return };
                let service =
                    hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let (seen, counted) = (seen.clone(), counted.clone());
                        async move {
                            let uri = request.uri().clone();
                            let body =
                                axum::body::to_bytes(Body::new(request.into_body()), 1 << 20)
                                    .await
                                    .unwrap();
                            let review: Value =
                                serde_json::from_slice(&body).unwrap_or(Value::Null);
                            if uri.path() == "/slow" {
                                tokio::time::sleep(Duration::from_secs(3)).await;
                            }
                            let (status, reply) = answer(uri.path(), &review);
                            let query = uri.path_and_query().unwrap().to_string();
                            seen.lock().insert(uri.path().to_owned(), (query, review));
                            *counted.lock().entry(uri.path().to_owned()).or_insert(0) += 1;
                            let reply = serde_json::to_vec(&reply).unwrap();
                            let mut response = Response::builder().status(status);
                            if uri.path() == "/close" {
                                response = response.header("connection", "close");
                            }
                            Ok::<_, std::convert::Infallible>(
                                response.body(Body::from(reply)).unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Server { address, ca: certs.ca_pem.into_bytes(), asked, calls, connections }
}

fn review() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "4b3c", "operation": "CREATE", "object": {"kind": "ConfigMap"}}})
}

fn hook(endpoint: Endpoint, ca: &[u8], timeout: u64) -> Hook {
    Hook {
        name: "check.example.com".into(),
        endpoint,
        ca_bundle: Some(ca.to_vec()),
        timeout: Duration::from_secs(timeout),
    }
}

/// Services of a cluster: `default/hook` an ExternalName for `localhost`.
struct Services;

impl ServiceResolver for Services {
    fn resolve(&self, namespace: &str, name: &str) -> Result<ServiceAddress, String> {
        match (namespace, name) {
            ("default", "hook") => Ok(ServiceAddress::Name("localhost".into())),
            _ => Err(format!("service \"{name}\" not found")),
        }
    }
}

#[tokio::test]
async fn a_webhook_answers_a_review_over_tls_with_its_own_ca() {
    let server = serve().await;
    let url = format!("https://127.0.0.1:{}/validate", server.address.port());
    let by_url = hook(Endpoint::Url(url), &server.ca, 4);
    let answer = call(&by_url, &review(), Egress::with_loopback(), &Services).await.unwrap();
    assert_eq!(answer.0, json!({"uid": "4b3c", "allowed": true}));
    let (query, sent) = server.asked.lock()["/validate"].clone();
    assert_eq!(query, "/validate?timeout=4s", "kube-apiserver's timeout parameter");
    assert_eq!(sent, review());

    // By a Service: dialled where the Service says, verified by its cluster name.
    let service = Endpoint::Service {
        namespace: "default".into(),
        name: "hook".into(),
        port: server.address.port(),
        path: Some("/by-service".into()),
    };
    let answer = call(&hook(service, &server.ca, 4), &review(), Egress::with_loopback(), &Services)
        .await
        .unwrap();
    assert_eq!(answer.0["allowed"], true);
    assert_eq!(server.asked.lock()["/by-service"].0, "/by-service?timeout=4s");
    let missing = Endpoint::Service {
        namespace: "default".into(),
        name: "gone".into(),
        port: server.address.port(),
        path: None,
    };
    let err = call(&hook(missing, &server.ca, 4), &review(), Egress::with_loopback(), &Services)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with(
            "https://gone.default.svc:{port}\": service \"gone\" not found"
                .replace("{port}", &server.address.port().to_string())
                .as_str()
        ),
        "{err}"
    );
}

#[tokio::test]
async fn what_cannot_be_called_is_reported_in_kube_apiservers_words_and_no_more() {
    let server = serve().await;
    let port = server.address.port();
    let at = |path: &str| Endpoint::Url(format!("https://127.0.0.1:{port}{path}"));
    let fails = |hook: Hook, egress: Egress| async move {
        call(&hook, &review(), egress, &Services).await.unwrap_err().to_string()
    };

    // This machine's own addresses are not a tenant's to call, on a real cluster.
    let err = fails(hook(at("/validate"), &server.ca, 4), Egress::strict()).await;
    assert_eq!(
        err,
        format!(
            "failed calling webhook \"check.example.com\": failed to call webhook: Post \
             \"https://127.0.0.1:{port}/validate?timeout=4s\": dial tcp 127.0.0.1:{port}: a \
             loopback address may not be called"
        )
    );
    assert!(!server.asked.lock().contains_key("/validate"), "nothing was sent");

    // A certificate the caBundle does not vouch for.
    let other = Certificates::generate(&["127.0.0.1".into()]).unwrap();
    let err =
        fails(hook(at("/validate"), other.ca_pem.as_bytes(), 4), Egress::with_loopback()).await;
    assert!(err.contains("failed to call webhook") && err.contains("tls:"), "{err}");

    // Too slow for its timeout.
    let err = fails(hook(at("/slow"), &server.ca, 1), Egress::with_loopback()).await;
    assert!(err.ends_with("/slow?timeout=1s\": context deadline exceeded"), "{err}");

    // Answers that are not this request's review; what the server said is not repeated.
    let err = fails(hook(at("/wrong-uid"), &server.ca, 4), Egress::with_loopback()).await;
    assert_eq!(
        err,
        "failed calling webhook \"check.example.com\": received invalid webhook response: \
         expected response.uid=\"4b3c\", got \"other\""
    );
    for path in ["/not-a-review", "/broken"] {
        let err = fails(hook(at(path), &server.ca, 4), Egress::with_loopback()).await;
        assert!(!err.contains("secret"), "{err}");
        assert!(err.starts_with("failed calling webhook \"check.example.com\""), "{err}");
    }
    let err = fails(
        hook(Endpoint::Url(format!("http://127.0.0.1:{port}/")), &server.ca, 4),
        Egress::with_loopback(),
    )
    .await;
    assert!(err.ends_with("unsupported protocol scheme"), "{err}");
}

#[tokio::test]
async fn a_connection_is_kept_for_the_next_call_unless_the_webhook_closes_it() {
    let server = serve().await;
    let port = server.address.port();
    let connections = || server.connections.load(std::sync::atomic::Ordering::SeqCst);
    let at =
        |path: &str| hook(Endpoint::Url(format!("https://127.0.0.1:{port}{path}")), &server.ca, 4);
    for _ in 0..3 {
        call(&at("/validate"), &review(), Egress::with_loopback(), &Services).await.unwrap();
    }
    assert_eq!(connections(), 1, "one TLS connection for three calls");
    // A webhook that closes its connection after answering: the next call makes a new one.
    call(&at("/close"), &review(), Egress::with_loopback(), &Services).await.unwrap();
    call(&at("/validate"), &review(), Egress::with_loopback(), &Services).await.unwrap();
    assert_eq!(connections(), 2);
    // The new one is kept in turn; a connection serves only what it was made for.
    call(&at("/validate"), &review(), Egress::with_loopback(), &Services).await.unwrap();
    assert_eq!(connections(), 2);
    let other_ca = hook(
        Endpoint::Url(format!("https://127.0.0.1:{port}/validate")),
        &[server.ca.clone(), b"\n".to_vec()].concat(),
        4,
    );
    call(&other_ca, &review(), Egress::with_loopback(), &Services).await.unwrap();
    assert_eq!(connections(), 3, "another caBundle is another connection");
}

#[tokio::test]
async fn a_connection_made_on_another_runtime_is_not_used() {
    let server = serve().await;
    let port = server.address.port();
    let hook = hook(Endpoint::Url(format!("https://127.0.0.1:{port}/validate")), &server.ca, 4);
    let elsewhere = hook.clone();
    // A call on a runtime of its own, which then ends: its connection is kept, but its socket
    // belonged to that runtime's IO driver.
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(call(&elsewhere, &review(), Egress::with_loopback(), &Services)).unwrap();
    })
    .await
    .unwrap();
    // Here it would never be driven: this call makes its own.
    call(&hook, &review(), Egress::with_loopback(), &Services).await.unwrap();
    assert_eq!(server.connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}
