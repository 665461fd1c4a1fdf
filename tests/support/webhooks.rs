//! A webhook server for tests and benchmarks: HTTPS with a CA of its own on a loopback port,
//! answering each review (admission or conversion) with what a function of the path and the
//! review says, and counting what it was sent.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use parking_lot::Mutex;
use serde_json::{json, Value};

/// How many reviews were sent to each path, and the last one.
type Asked = Arc<Mutex<HashMap<String, (usize, Value)>>>;

/// A running webhook server; stopped when dropped.
#[derive(Debug)]
pub struct WebhookServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The CA its certificate (for `127.0.0.1` and `hooks.default.svc`) is signed by, PEM.
    pub ca_pem: String,
    asked: Asked,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl WebhookServer {
    /// Serve, answering a review sent to a path with `answer(path, review)`; `answer` runs on a
    /// blocking thread, so it may take its time.
    pub fn start(answer: fn(&str, &Value) -> Value) -> WebhookServer {
        let names = ["127.0.0.1".to_owned(), "hooks.default.svc".to_owned()];
        let certs = carrel_apiserver::tls::Certificates::generate(&names).expect("certificates");
        let acceptor =
            tokio_rustls::TlsAcceptor::from(certs.server_config().expect("a server config"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let listener =
            runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("a port");
        let port = listener.local_addr().expect("an address").port();
        let asked: Asked = Arc::default();
        let seen = asked.clone();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let _ = stream.set_nodelay(true);
                let (acceptor, seen) = (acceptor.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else { return };
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let seen = seen.clone();
                            async move {
                                let path = request.uri().path().to_owned();
                                let body = request.into_body().collect().await?.to_bytes();
                                let review: Value =
                                    serde_json::from_slice(&body).unwrap_or_default();
                                {
                                    let mut seen = seen.lock();
                                    let entry = seen.entry(path.clone()).or_default();
                                    *entry = (entry.0 + 1, review.clone());
                                }
                                let reply =
                                    tokio::task::spawn_blocking(move || answer(&path, &review))
                                        .await
                                        .expect("an answer");
                                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::from(
                                    reply.to_string(),
                                ))))
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        WebhookServer { port, ca_pem: certs.ca_pem, asked, connections, _runtime: runtime }
    }

    /// The CA as a `caBundle` field holds it (base64).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// How many reviews were sent to `path`.
    pub fn count(&self, path: &str) -> usize {
        self.asked.lock().get(path).map_or(0, |(n, _)| *n)
    }

    /// How many connections it accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The last review sent to `path`.
    pub fn last(&self, path: &str) -> Value {
        self.asked.lock()[path].1.clone()
    }
}

/// The shirts of the tests and benchmarks: `shirts.wear.carrel.dev`, v1 (stored) with
/// `spec.color` and v2 with `spec.colour`, converted by the webhook at `client_config` (a
/// conversion webhook's `clientConfig`).
pub fn shirts_definition(client_config: Value) -> Value {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "shirts.wear.carrel.dev"},
        "spec": {
            "group": "wear.carrel.dev",
            "scope": "Namespaced",
            "names": {"plural": "shirts", "kind": "Shirt"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("color")},
                {"name": "v2", "served": true, "storage": false, "schema": schema("colour")},
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": client_config,
            }},
        },
    })
}

/// The answer of a conversion webhook for the shirts of the tests and benchmarks to a
/// ConversionReview's `request`: v1's `spec.color` is v2's `spec.colour`.
pub fn convert_shirts(request: &Value) -> Value {
    let desired = request["desiredAPIVersion"].as_str().unwrap_or_default();
    let (from, to) =
        if desired.ends_with("/v2") { ("color", "colour") } else { ("colour", "color") };
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
            o
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "response": {"uid": request["uid"], "convertedObjects": converted,
                        "result": {"status": "Success"}}})
}
