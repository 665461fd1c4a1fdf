//! Autoscalers through the API and its HTTP routes: written in one version, read in the other,
//! stored once in v2, watched converted, listed by discovery in both versions.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use super::conversion::METRICS;
use super::{TYPE, V1};
use crate::api::{Api, Target, Write};

fn open(dir: &std::path::Path) -> Api {
    let store = carrel_store::SledStore::open(dir.join("s"), carrel_store::Options::create())
        .expect("store");
    Api::new(Arc::new(store)).expect("api")
}

/// The served type of autoscalers in `version`.
fn served(version: &str) -> &'static crate::ResourceType {
    crate::resource::BUILT_IN
        .iter()
        .find(|t| t.group == "autoscaling" && t.version == version && t.plural == TYPE.plural)
        .expect("served")
}

fn v1() -> Target<'static> {
    Target { rt: served(V1.version), namespace: Some("default".into()) }
}

fn v2() -> Target<'static> {
    Target { rt: served(TYPE.version), namespace: Some("default".into()) }
}

fn write() -> Write {
    Write::by("test", false)
}

fn v1_web() -> Value {
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 3,
            "targetCPUUtilizationPercentage": 50,
        },
    })
}

fn stored(api: &Api, name: &str) -> Value {
    let key = format!("/autoscaling/horizontalpodautoscalers/default/{name}");
    let object = api.store().get(&key).expect("read").expect("stored");
    serde_json::from_slice(&object.value).expect("json")
}

#[test]
fn written_in_v1_read_in_v2_and_back() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let created = api.create(&v1(), v1_web(), &write()).expect("created");
    assert_eq!(created["apiVersion"], "autoscaling/v1");
    assert_eq!(created["spec"]["minReplicas"], 1, "v1's default");
    assert_eq!(created["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(created["status"], json!({"currentReplicas": 0, "desiredReplicas": 0}));
    assert!(created["metadata"].get("generation").is_none(), "autoscalers keep no generation");

    // Stored once, in v2, without annotations.
    let raw = stored(&api, "web");
    assert_eq!(raw["apiVersion"], "autoscaling/v2");
    assert_eq!(raw["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 50);
    assert!(raw["metadata"].get("annotations").is_none(), "{raw}");
    assert_eq!(raw["status"], json!({"desiredReplicas": 0, "currentMetrics": null}));

    let read = api.get(&v2(), "web").expect("read in v2");
    assert_eq!(read["apiVersion"], "autoscaling/v2");
    assert_eq!(read["spec"]["metrics"], raw["spec"]["metrics"]);
    assert_eq!(read["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
    let json = api.get_json(&v1(), "web").expect("read in v1 as bytes");
    let json: Value = serde_json::from_slice(&json).expect("json");
    assert_eq!(json, created, "a read in v1 gives what the create answered");

    // A v2 write of a metric v1 cannot say: v1 carries it in an annotation, and a v1 update
    // that keeps the annotation keeps the metric.
    let mut rich = read.clone();
    rich["spec"]["metrics"] = json!([
        {"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
        {"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}},
    ]);
    api.update(&v2(), "web", rich, None, &write()).expect("v2 update");
    let mut in_v1 = api.get(&v1(), "web").expect("read in v1");
    assert!(in_v1["metadata"]["annotations"][METRICS].as_str().is_some_and(|m| m.contains("1Gi")));
    in_v1["spec"]["maxReplicas"] = json!(5);
    let updated = api.update(&v1(), "web", in_v1, None, &write()).expect("v1 update");
    assert_eq!(updated["spec"]["maxReplicas"], 5);
    let read = api.get(&v2(), "web").expect("read in v2");
    assert_eq!(read["spec"]["maxReplicas"], 5);
    assert_eq!(read["spec"]["metrics"][0]["resource"]["name"], "memory", "{read}");
    assert!(stored(&api, "web")["metadata"].get("annotations").is_none());

    // A v1 update that sends the object back unchanged writes nothing.
    let same = api.get(&v1(), "web").expect("read");
    let again = api.update(&v1(), "web", same.clone(), None, &write()).expect("no-op");
    assert_eq!(again["metadata"]["resourceVersion"], same["metadata"]["resourceVersion"]);

    // Lists in both versions hold the one object.
    for target in [v1(), v2()] {
        let list = api.list(&target, &Default::default()).expect("list");
        assert_eq!(list["kind"], "HorizontalPodAutoscalerList");
        assert_eq!(list["apiVersion"], target.rt.group_version());
        assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
        assert_eq!(list["items"][0]["apiVersion"], target.rt.group_version());
    }
}

#[test]
fn an_invalid_v1_autoscaler_is_refused_in_kubes_words() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let mut bad = v1_web();
    bad["spec"]["maxReplicas"] = json!(0);
    let e = api.create(&v1(), bad, &write()).expect_err("refused");
    assert_eq!(e.code(), 422);
    assert_eq!(
        e.message(),
        "HorizontalPodAutoscaler.autoscaling \"web\" is invalid: spec.maxReplicas: Invalid value: \
         0: must be greater than 0, spec.maxReplicas: Invalid value: 0: must be greater than or \
         equal to `minReplicas`"
    );
}

#[test]
fn a_v2_write_drops_v1s_annotations() {
    let dir = tempfile::tempdir().expect("dir");
    let api = open(dir.path());
    let object = json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "annotations": {METRICS: "[]", "team": "ml"}},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
    });
    let created = api.create(&v2(), object, &write()).expect("created");
    assert_eq!(created["metadata"]["annotations"], json!({"team": "ml"}));
    assert_eq!(created["status"], json!({"desiredReplicas": 0, "currentMetrics": null}));
    assert_eq!(created["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
}

async fn send(
    router: &axum::Router,
    method: &str,
    path: &str,
    accept: &str,
    body: Value,
) -> axum::response::Response {
    let body = if body.is_null() { Vec::new() } else { serde_json::to_vec(&body).expect("json") };
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("accept", accept)
        .body(Body::from(body))
        .expect("request");
    router.clone().oneshot(request).await.expect("answer")
}

async fn json_of(response: axum::response::Response) -> Value {
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).expect("json")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_v1_watch_sees_a_v2_write_converted() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
    let collection = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
    let watch =
        send(&router, "GET", &format!("{collection}?watch=true"), "application/json", Value::Null)
            .await;
    assert_eq!(watch.status().as_u16(), 200);
    let mut body = watch.into_body();

    let object = json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 4,
            "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 60}}},
                {"type": "Pods", "pods": {"metric": {"name": "rps"},
                    "target": {"type": "AverageValue", "averageValue": "5"}}},
            ],
        },
    });
    let created =
        tokio::task::block_in_place(|| api.create(&v2(), object, &write())).expect("created in v2");

    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("an event in time")
            .expect("a frame")
            .expect("no error");
        if let Ok(data) = frame.into_data() {
            line.extend_from_slice(&data);
        }
    }
    let event: Value = serde_json::from_slice(&line).expect("an event");
    assert_eq!(event["type"], "ADDED");
    let seen = &event["object"];
    assert_eq!(seen["apiVersion"], "autoscaling/v1");
    assert_eq!(seen["spec"]["targetCPUUtilizationPercentage"], 60);
    assert_eq!(seen["spec"]["maxReplicas"], 4);
    assert!(seen["metadata"]["annotations"][METRICS].as_str().is_some_and(|m| m.contains("rps")));
    assert_eq!(seen["metadata"]["resourceVersion"], created["metadata"]["resourceVersion"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_lists_both_versions_with_v2_preferred() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let router = crate::http::router(Arc::new(crate::Server::new(api, "")));
    let group =
        json_of(send(&router, "GET", "/apis/autoscaling", "application/json", Value::Null).await)
            .await;
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert_eq!(versions, ["v2", "v1"]);
    for version in ["v1", "v2"] {
        let list = json_of(
            send(
                &router,
                "GET",
                &format!("/apis/autoscaling/{version}"),
                "application/json",
                Value::Null,
            )
            .await,
        )
        .await;
        let names: Vec<&str> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
            "{version}"
        );
        assert_eq!(list["resources"][0]["shortNames"], json!(["hpa"]));
        assert_eq!(list["resources"][0]["categories"], json!(["all"]));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn both_versions_print_kubes_table() {
    let dir = tempfile::tempdir().expect("dir");
    let api = Arc::new(open(dir.path()));
    let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
    tokio::task::block_in_place(|| api.create(&v1(), v1_web(), &write())).expect("created");
    let table = "application/json;as=Table;v=v1;g=meta.k8s.io";
    for version in ["v1", "v2"] {
        let path =
            format!("/apis/autoscaling/{version}/namespaces/default/horizontalpodautoscalers/web");
        let answer = json_of(send(&router, "GET", &path, table, Value::Null).await).await;
        let headers: Vec<&str> = answer["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(
            headers,
            ["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"]
        );
        let cells = &answer["rows"][0]["cells"];
        let want = json!(["web", "Deployment/web", "cpu: <unknown>/50%", "1", 3, 0]);
        assert_eq!(
            cells.as_array().expect("cells")[..6],
            want.as_array().expect("cells")[..],
            "{version}"
        );
    }
}
