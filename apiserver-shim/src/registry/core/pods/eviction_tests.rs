//! The eviction subresource through the router: what `kubectl drain` and client-go's `Evict`
//! see of pods, their PodDisruptionBudgets and the answers.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::api::{Api, Target, Write};
use crate::resource::{built_in, Subresource};

const NS: &str = "default";

struct Cluster {
    _dir: tempfile::TempDir,
    api: Arc<Api>,
    router: axum::Router,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Arc::new(Api::new(Arc::new(store)).expect("api"));
        let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
        Cluster { _dir: dir, api, router }
    }

    fn target(&self, group: &str, plural: &str) -> Target<'static> {
        Target { rt: built_in(group, plural).expect("served"), namespace: Some(NS.into()) }
    }

    /// A pod labelled `app`, in `phase`, ready or not.
    fn pod(&self, name: &str, app: &str, phase: &str, ready: bool) {
        let pods = self.target("", "pods");
        let pod = json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        });
        let mut pod = self.api.create(&pods, pod, &Write::by("test", false)).expect("pod");
        pod["status"] = json!({"phase": phase, "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" },
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        let write = Write::by("test", false);
        self.api.update(&pods, name, pod, Some(Subresource::Status), &write).expect("status");
    }

    /// A budget selecting `app`, with the status its controller would have written.
    fn budget(&self, name: &str, app: &str, spec: Value, status: Value) {
        let budgets = self.target("policy", "poddisruptionbudgets");
        let mut spec = spec;
        spec["selector"] = json!({"matchLabels": {"app": app}});
        let object = json!({"metadata": {"name": name}, "spec": spec});
        let mut created =
            self.api.create(&budgets, object, &Write::by("test", false)).expect("budget");
        let mut full = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
            "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0});
        for (k, v) in status.as_object().into_iter().flatten() {
            full[k] = v.clone();
        }
        created["status"] = full;
        let write = Write::by("test", false);
        self.api
            .update(&budgets, name, created, Some(Subresource::Status), &write)
            .expect("status");
    }

    fn get(&self, group: &str, plural: &str, name: &str) -> Option<Value> {
        self.api.get(&self.target(group, plural), name).ok()
    }

    /// POST an Eviction of `pod`; the answer's code, `Retry-After` and body.
    async fn evict(&self, pod: &str, body: Value, query: &str) -> (u16, Option<String>, Value) {
        let request = Request::builder()
            .method("POST")
            .uri(format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction{query}"))
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("request");
        let answer = self.router.clone().oneshot(request).await.expect("answer");
        let code = answer.status().as_u16();
        let retry =
            answer.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.expect("body");
        (code, retry, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }
}

fn eviction(pod: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NS}})
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eviction_takes_a_disruption_and_is_refused_once_none_is_left() {
    let c = Cluster::new();
    c.pod("web-1", "web", "Running", true);
    c.pod("web-2", "web", "Running", true);
    c.budget(
        "web",
        "web",
        json!({"minAvailable": 1}),
        json!({"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}),
    );

    let (code, _, body) = c.evict("web-1", eviction("web-1"), "").await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"], "Success");
    assert!(c.get("", "pods", "web-1").is_none(), "the evicted pod is deleted");
    let budget = c.get("policy", "poddisruptionbudgets", "web").expect("budget");
    assert_eq!(budget["status"]["disruptionsAllowed"], 0);
    assert!(budget["status"]["disruptedPods"]["web-1"].is_string(), "{budget}");
    let condition = &budget["status"]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"], &condition["reason"]),
        (&json!("DisruptionAllowed"), &json!("False"), &json!("InsufficientPods"))
    );

    let (code, retry, body) = c.evict("web-2", eviction("web-2"), "").await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(retry, None, "kube-apiserver suggests no wait here");
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(
        body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        body["details"]["causes"],
        json!([{"reason": "DisruptionBudget",
                "message": "The disruption budget web needs 1 healthy pods and has 2 currently"}])
    );
    assert!(c.get("", "pods", "web-2").is_some(), "a refused eviction deletes nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_without_a_budget_or_not_yet_running_go_at_once() {
    let c = Cluster::new();
    c.budget("web", "web", json!({"minAvailable": 5}), json!({"desiredHealthy": 5}));
    c.pod("pending", "web", "Pending", false);
    c.pod("done", "web", "Succeeded", false);
    c.pod("lone", "other", "Running", true);
    for pod in ["pending", "done", "lone"] {
        let (code, _, body) = c.evict(pod, eviction(pod), "").await;
        assert_eq!(code, 201, "{pod}: {body}");
        assert!(c.get("", "pods", pod).is_none(), "{pod} is deleted");
    }
    let budget = c.get("policy", "poddisruptionbudgets", "web").expect("budget");
    assert!(budget["status"].get("disruptedPods").is_none(), "the budget was not asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unready_pod_goes_while_its_budget_is_healthy_or_always_allows() {
    let c = Cluster::new();
    c.pod("sick", "web", "Running", false);
    c.budget(
        "web",
        "web",
        json!({"minAvailable": 1}),
        json!({"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}),
    );
    let (code, _, body) = c.evict("sick", eviction("sick"), "").await;
    assert_eq!(code, 201, "{body}");
    let budget = c.get("policy", "poddisruptionbudgets", "web").expect("budget");
    assert_eq!(budget["status"]["disruptionsAllowed"], 0, "no disruption taken");

    c.pod("db-1", "db", "Running", false);
    c.budget(
        "db",
        "db",
        json!({"minAvailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}),
        json!({"currentHealthy": 0, "desiredHealthy": 1}),
    );
    let (code, _, _) = c.evict("db-1", eviction("db-1"), "").await;
    assert_eq!(code, 429, "the budget lacks healthy pods");
    let budgets = c.target("policy", "poddisruptionbudgets");
    let mut db = c.get("policy", "poddisruptionbudgets", "db").expect("db");
    db["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
    c.api.update(&budgets, "db", db, None, &Write::by("test", false)).expect("updated");
    let (code, _, body) = c.evict("db-1", eviction("db-1"), "").await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_of_two_budgets_a_stale_budget_and_a_dry_run() {
    let c = Cluster::new();
    c.pod("web-1", "web", "Running", true);
    c.budget("a", "web", json!({"minAvailable": 1}), json!({"disruptionsAllowed": 1}));
    c.budget("b", "web", json!({"maxUnavailable": 1}), json!({"disruptionsAllowed": 1}));
    let (code, _, body) = c.evict("web-1", eviction("web-1"), "").await;
    assert_eq!(code, 500, "{body}");
    assert_eq!(
        body["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(c.get("", "pods", "web-1").is_some());

    // A spec change the disruption controller has not seen yet.
    let budgets = c.target("policy", "poddisruptionbudgets");
    c.api.delete(&budgets, "b", &Default::default()).expect("deleted");
    let mut a = c.get("policy", "poddisruptionbudgets", "a").expect("a");
    a["spec"]["minAvailable"] = json!(0);
    c.api.update(&budgets, "a", a, None, &Write::by("test", false)).expect("updated");
    let (code, retry, body) = c.evict("web-1", eviction("web-1"), "").await;
    assert_eq!((code, retry.as_deref()), (429, Some("10")), "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "The disruption budget a is still being processed by the server."
    );

    let mut a = c.get("policy", "poddisruptionbudgets", "a").expect("a");
    a["status"]["observedGeneration"] = a["metadata"]["generation"].clone();
    c.api
        .update(&budgets, "a", a, Some(Subresource::Status), &Write::by("test", false))
        .expect("s");
    let (code, _, body) = c.evict("web-1", eviction("web-1"), "?dryRun=All").await;
    assert_eq!(code, 201, "{body}");
    assert!(c.get("", "pods", "web-1").is_some(), "a dry run deletes nothing");
    let a = c.get("policy", "poddisruptionbudgets", "a").expect("a");
    assert_eq!(a["status"]["disruptionsAllowed"], 1, "and takes no disruption");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_eviction_body_and_verb_are_checked() {
    let c = Cluster::new();
    c.pod("web-1", "web", "Running", true);
    let (code, _, body) = c.evict("web-1", eviction("web-2"), "").await;
    assert_eq!(code, 400);
    assert_eq!(body["message"], "name in URL does not match name in Eviction object");
    let (code, _, _) = c.evict("nope", eviction("nope"), "").await;
    assert_eq!(code, 404);
    let beta = json!({"apiVersion": "policy/v1beta1", "kind": "Eviction",
        "metadata": {"name": "web-1"},
        "deleteOptions": {"preconditions": {"uid": "not-its-uid"}}});
    let (code, _, body) = c.evict("web-1", beta, "").await;
    assert_eq!(code, 409, "the delete options' preconditions hold: {body}");
    assert!(c.get("", "pods", "web-1").is_some());

    let get = Request::builder()
        .uri(format!("/api/v1/namespaces/{NS}/pods/web-1/eviction"))
        .body(Body::empty())
        .expect("request");
    let answer = c.router.clone().oneshot(get).await.expect("answer");
    assert_eq!(answer.status().as_u16(), 405);
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_that_keep_changing_are_still_evicted() {
    let c = Cluster::new();
    let names: Vec<String> = (0..5).map(|i| format!("busy-{i}")).collect();
    for name in &names {
        c.pod(name, "web", "Running", true);
    }
    // Other writers (a kubelet, the syncer) update the pods all along.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (api, stop, names) = (c.api.clone(), stop.clone(), names.clone());
            std::thread::spawn(move || {
                let rt = built_in("", "pods").expect("pods");
                let pods = Target { rt, namespace: Some(NS.into()) };
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for name in &names {
                        let Ok(mut pod) = api.get(&pods, name) else { continue };
                        n += 1;
                        pod["metadata"]["annotations"] = json!({"beat": n.to_string()});
                        let write = Write::by("kubelet", false);
                        let _ = api.update(&pods, name, pod, None, &write);
                    }
                }
                n
            })
        })
        .collect();
    let mut answers = Vec::new();
    for name in &names {
        answers.push((name.clone(), c.evict(name, eviction(name), "").await));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let beats: u64 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    for (name, (code, _, body)) in answers {
        assert_eq!(code, 201, "{name}, among {beats} concurrent writes: {body}");
        assert!(c.get("", "pods", &name).is_none());
    }
}
