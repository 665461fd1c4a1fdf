//! A definition whose versions a webhook converts, against a real webhook server
//! ([`crate::admission::webhook::tests::serve`]: v1's `spec.color` is v2's `spec.colour`): reads,
//! lists, writes and watches in the version that is not stored, and the webhook's failures.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::admission::webhook::tests::{serve, Server};
use crate::admission::webhook::Egress;
use crate::api::{Api, ListParams, Target, Write};
use crate::resource::built_in;
use crate::ServiceNetwork;

fn open(dir: &std::path::Path) -> Api {
    let store = carrel_store::SledStore::open(dir.join("s"), carrel_store::Options::create())
        .expect("store");
    let network = ServiceNetwork::default().with_webhook_egress(Egress::with_loopback());
    Api::new_in(Arc::new(store), network).expect("api")
}

/// Shirts: v1 (stored) with `spec.color`, v2 with `spec.colour`, converted at `path`.
fn shirts(server: &Server, path: &str) -> Value {
    use base64::Engine;
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
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{}{path}", server.address.port()),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&server.ca),
                },
            }},
        },
    })
}

fn definitions() -> Target<'static> {
    Target {
        rt: built_in("apiextensions.k8s.io", "customresourcedefinitions").expect("served"),
        namespace: None,
    }
}

fn shirts_in<'a>(api: &Api, version: &str) -> Target<'a> {
    let rt = api.registry().get("wear.carrel.dev", version, "shirts").cloned().expect("served");
    // The registry's types live as long as the API in these tests.
    Target { rt: Box::leak(Box::new(rt)), namespace: Some("default".into()) }
}

fn shirt(version: &str, name: &str, field: &str, colour: &str) -> Value {
    json!({"apiVersion": format!("wear.carrel.dev/{version}"), "kind": "Shirt",
           "metadata": {"name": name}, "spec": {field: colour}})
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn calls(server: &Server) -> usize {
    server.calls.lock().get("/convert").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_converts_reads_lists_and_writes_in_the_version_not_stored() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let server = serve().await;
    let write = Write::by("test", false);
    blocking(|| api.create(&definitions(), shirts(&server, "/convert"), &write)).expect("defined");
    let (v1, v2) = (shirts_in(&api, "v1"), shirts_in(&api, "v2"));

    // Written and read in the storage version: the webhook is not called.
    for name in ["a", "b", "c"] {
        blocking(|| api.create(&v1, shirt("v1", name, "color", "red"), &write)).expect("created");
    }
    assert_eq!(blocking(|| api.get(&v1, "a")).unwrap()["spec"], json!({"color": "red"}));
    assert_eq!(calls(&server), 0);

    // Read in v2: converted, its metadata kept but for labels.
    let a = blocking(|| api.get(&v2, "a")).unwrap();
    assert_eq!(a["apiVersion"], "wear.carrel.dev/v2");
    assert_eq!(a["spec"], json!({"colour": "red"}));
    assert_eq!(a["metadata"]["name"], "a", "the webhook may not rename");
    assert_eq!(a["metadata"]["labels"], json!({"converted": "yes"}));
    assert_eq!(calls(&server), 1);
    let review = server.asked.lock()["/convert"].1.clone();
    assert_eq!(review["kind"], "ConversionReview");
    assert_eq!(review["request"]["desiredAPIVersion"], "wear.carrel.dev/v2");

    // A list is converted in one call.
    let list = blocking(|| api.list(&v2, &ListParams::default())).unwrap();
    let colours: Vec<&Value> =
        list["items"].as_array().unwrap().iter().map(|i| &i["spec"]["colour"]).collect();
    assert_eq!(colours, [&json!("red"); 3]);
    assert_eq!(calls(&server), 2, "one review for the whole list");
    assert_eq!(
        server.asked.lock()["/convert"].1["request"]["objects"].as_array().unwrap().len(),
        3
    );
    let bytes = blocking(|| api.list_json(&v2, &ListParams::default())).unwrap();
    let list: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["items"][2]["spec"]["colour"], "red");

    // Written in v2: stored in v1, as the webhook converts it; answered in v2.
    let created =
        blocking(|| api.create(&v2, shirt("v2", "d", "colour", "blue"), &write)).expect("created");
    assert_eq!(created["spec"], json!({"colour": "blue"}));
    let stored = blocking(|| api.get(&v1, "d")).unwrap();
    assert_eq!(stored["spec"], json!({"color": "blue"}), "stored as v1");
    assert_eq!(stored["metadata"]["name"], "d");

    // A watch in v2 sees objects converted.
    let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
    let request = Request::builder()
        .uri("/apis/wear.carrel.dev/v2/namespaces/default/shirts?watch=true")
        .body(Body::empty())
        .unwrap();
    let mut body = router.oneshot(request).await.unwrap().into_body();
    blocking(|| api.create(&v1, shirt("v1", "e", "color", "green"), &write)).expect("created");
    // The objects there (sent first, as a watch from no resourceVersion does), then the new one.
    let mut pending = Vec::new();
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Value| e["object"]["metadata"]["name"] == "e") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("an event in time")
            .expect("a frame")
            .expect("no error");
        if let Ok(data) = frame.into_data() {
            pending.extend_from_slice(&data);
        }
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            seen.push(serde_json::from_slice(&line).unwrap());
        }
    }
    for event in &seen {
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["apiVersion"], "wear.carrel.dev/v2", "{event}");
        assert!(event["object"]["spec"].get("colour").is_some(), "{event}");
    }
    assert_eq!(seen.last().unwrap()["object"]["spec"], json!({"colour": "green"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_fails_the_read_in_kube_apiservers_words_and_bad_definitions_are_refused()
{
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let server = serve().await;
    let write = Write::by("test", false);
    blocking(|| api.create(&definitions(), shirts(&server, "/convert-fail"), &write))
        .expect("defined");
    let (v1, v2) = (shirts_in(&api, "v1"), shirts_in(&api, "v2"));
    blocking(|| api.create(&v1, shirt("v1", "a", "color", "red"), &write)).expect("created");
    let err = blocking(|| api.get(&v2, "a")).unwrap_err();
    assert_eq!(err.code(), 500);
    assert_eq!(
        err.message(),
        "Internal error occurred: conversion webhook for wear.carrel.dev/v1, Kind=Shirt failed: \
         no colour for you"
    );
    let err = blocking(|| api.create(&v2, shirt("v2", "b", "colour", "red"), &write)).unwrap_err();
    assert_eq!(err.code(), 500, "nothing stored that could not be converted");
    assert!(blocking(|| api.get(&v1, "b")).is_err());

    // A definition converting by webhook must say where, and which reviews it reads.
    let mut bad = shirts(&server, "/convert");
    bad["metadata"]["name"] = json!("jackets.wear.carrel.dev");
    bad["spec"]["names"] = json!({"plural": "jackets", "kind": "Jacket"});
    bad["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
        "conversionReviewVersions": [], "clientConfig": {"url": "http://hooks.example.com"}}});
    let err = blocking(|| api.create(&definitions(), bad, &write)).unwrap_err();
    assert_eq!(err.code(), 422);
    let causes: Vec<String> =
        err.causes().iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    assert_eq!(
        causes,
        [
            "spec.conversion.webhook.clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme",
            "spec.conversion.webhook.conversionReviewVersions: Required value: must specify one of v1, v1beta1",
        ]
    );
}
