//! A pod's `ephemeralcontainers` subresource through the router, as `kubectl debug` uses it: a
//! strategic merge patch adding a container, and the refusals kube-apiserver gives.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::admission::{Level, TenantAdmission, TenantPolicy};
use crate::api::{Api, Target, Write};
use crate::resource::built_in;

const NS: &str = "default";

struct Cluster {
    _dir: tempfile::TempDir,
    api: Arc<Api>,
    router: axum::Router,
}

impl Cluster {
    fn new(level: Level) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Arc::new(Api::new(Arc::new(store)).expect("api"));
        let policy = TenantPolicy { level, ..TenantPolicy::default() };
        api.set_admission(Arc::new(TenantAdmission::new(policy)));
        let router = crate::http::router(Arc::new(crate::Server::new(api.clone(), "")));
        let pods = Target { rt: built_in("", "pods").expect("pods"), namespace: Some(NS.into()) };
        let pod = json!({
            "metadata": {"name": "train"},
            "spec": {
                "containers": [{"name": "main", "image": "trainer",
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}}}],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
        });
        api.create(&pods, pod, &Write::by("test", false)).expect("pod");
        Cluster { _dir: dir, api, router }
    }

    /// `method` on `path` with `body` as `content_type`: the answer's code and body.
    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> (u16, Value) {
        let request = Request::builder()
            .method(method)
            .uri(format!("/api/v1/namespaces/{NS}/pods/{path}"))
            .header("content-type", content_type)
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("request");
        let answer = self.router.clone().oneshot(request).await.expect("answer");
        let code = answer.status().as_u16();
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.expect("body");
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// What `kubectl debug` sends: a strategic merge patch of the subresource.
    async fn debug(&self, container: Value) -> (u16, Value) {
        let patch = json!({"spec": {"ephemeralContainers": [container]}});
        let strategic = "application/strategic-merge-patch+json";
        self.send("PATCH", "train/ephemeralcontainers", strategic, patch).await
    }

    fn stored(&self) -> Value {
        let pods = Target { rt: built_in("", "pods").expect("pods"), namespace: Some(NS.into()) };
        self.api.get(&pods, "train").expect("pod")
    }
}

fn debugger(name: &str) -> Value {
    json!({"name": name, "image": "busybox:1.36", "command": ["sh"], "stdin": true, "tty": true,
           "targetContainerName": "main",
           "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true,
               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}})
}

fn causes(body: &Value) -> Vec<String> {
    body.pointer("/details/causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn kubectl_debug_adds_an_ephemeral_container_and_only_that() {
    let cluster = Cluster::new(Level::Restricted);
    let (code, body) = cluster.debug(debugger("debugger-1")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["kind"], "Pod");
    let added = &body["spec"]["ephemeralContainers"][0];
    assert_eq!(added["name"], "debugger-1");
    assert_eq!(added["targetContainerName"], "main");
    // Defaulted as kube-apiserver defaults a container, without resources.
    assert_eq!(added["terminationMessagePolicy"], "File");
    assert_eq!(added["imagePullPolicy"], "IfNotPresent");
    assert!(added.get("resources").is_none(), "{added}");
    // The rest of the pod is as it was: a change of anything else in the body is dropped.
    let (code, body) = cluster
        .send(
            "PATCH",
            "train/ephemeralcontainers",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"x": "y"}}, "spec": {"activeDeadlineSeconds": 5}}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let stored = cluster.stored();
    assert!(stored.pointer("/metadata/labels/x").is_none(), "{stored}");
    assert!(stored.pointer("/spec/activeDeadlineSeconds").is_none(), "{stored}");
    assert_eq!(stored["spec"]["ephemeralContainers"].as_array().map(Vec::len), Some(1));
    // A second one is added beside the first (the list merges by name).
    let (code, body) = cluster.debug(debugger("debugger-2")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["spec"]["ephemeralContainers"].as_array().map(Vec::len), Some(2));
    // The subresource reads as the pod.
    let (code, body) = cluster.send("GET", "train/ephemeralcontainers", "", json!(null)).await;
    assert_eq!((code, body["kind"].as_str()), (200, Some("Pod")));
}

#[tokio::test]
async fn existing_ephemeral_containers_stay_as_they_are() {
    let cluster = Cluster::new(Level::Baseline);
    assert_eq!(cluster.debug(debugger("debugger-1")).await.0, 200);
    // Removed: refused.
    let mut pod = cluster.stored();
    pod["spec"]["ephemeralContainers"] = json!([]);
    let (code, body) =
        cluster.send("PUT", "train/ephemeralcontainers", "application/json", pod).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        causes(&body).iter().any(|c| c.contains("\"debugger-1\" may not be removed")),
        "{body}"
    );
    // Changed: refused.
    let (code, body) = cluster
        .send(
            "PATCH",
            "train/ephemeralcontainers",
            "application/strategic-merge-patch+json",
            json!({"spec": {"ephemeralContainers": [{"name": "debugger-1", "image": "alpine"}]}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(causes(&body).iter().any(|c| c.contains("may not be changed")), "{body}");
    // Through the pod itself: refused as any other spec change is.
    let mut pod = cluster.stored();
    pod["spec"]["ephemeralContainers"].as_array_mut().expect("list").push(debugger("sneaky"));
    let (code, body) = cluster.send("PUT", "train", "application/json", pod).await;
    assert_eq!(code, 422, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("pod updates may not change"));
    assert_eq!(cluster.stored()["spec"]["ephemeralContainers"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn an_ephemeral_container_is_checked_as_kube_apiserver_checks_it() {
    let cluster = Cluster::new(Level::Baseline);
    let mut bad = debugger("main");
    bad["ports"] = json!([{"containerPort": 80}]);
    bad["resources"] = json!({"limits": {"cpu": "1"}});
    bad["targetContainerName"] = json!("nope");
    bad["volumeMounts"] = json!([{"name": "data", "mountPath": "/d", "subPath": "x"}]);
    let (code, body) = cluster.debug(bad).await;
    assert_eq!(code, 422, "{body}");
    let found = causes(&body);
    for wanted in [
        "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
        "spec.ephemeralContainers[0].resources: Forbidden: cannot be set for an Ephemeral Container",
        "spec.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden: cannot be set for an Ephemeral Container",
        "spec.ephemeralContainers[0].name: Duplicate value: \"main\"",
        "spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"",
    ] {
        assert!(found.iter().any(|c| c == wanted), "{wanted} not in {found:#?}");
    }
    assert!(cluster.stored()["spec"].get("ephemeralContainers").is_none());
    // A new pod may not come with one.
    let (code, body) = cluster
        .send(
            "POST",
            "",
            "application/json",
            json!({"metadata": {"name": "p"}, "spec": {
                "containers": [{"name": "c", "image": "x"}],
                "ephemeralContainers": [{"name": "e", "image": "x"}]}}),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        causes(&body)
            .iter()
            .any(|c| c.contains("spec.ephemeralContainers: Forbidden: cannot be set on create")),
        "{body}"
    );
}

#[tokio::test]
async fn pod_security_applies_to_the_ephemeral_container() {
    let cluster = Cluster::new(Level::Baseline);
    let mut privileged = debugger("root");
    privileged["securityContext"] = json!({"privileged": true});
    let (code, body) = cluster.debug(privileged).await;
    assert_eq!(code, 403, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("violates PodSecurity \"baseline:latest\""), "{message}");
    assert!(message.contains("privileged (container \"root\""), "{message}");
    // Carrel's own rule too: no variable that steers the GPU runtime.
    let mut steering = debugger("gpus");
    steering["env"] = json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);
    assert_eq!(cluster.debug(steering).await.0, 403);
    assert!(cluster.stored()["spec"].get("ephemeralContainers").is_none());

    // At restricted, kubectl debug's default (no security context) is refused; its
    // `--profile=restricted` passes (the first test).
    let cluster = Cluster::new(Level::Restricted);
    let plain = json!({"name": "plain", "image": "busybox"});
    let (code, body) = cluster.debug(plain).await;
    assert_eq!(code, 403, "{body}");
    assert!(body["message"].as_str().unwrap_or("").contains("restricted:latest"), "{body}");
}
