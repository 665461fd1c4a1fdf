//! What the controllers' tests share: a cluster's API in the test's process, reached through a
//! socket-free kube client, the controllers running against it, and a stand-in for kubelets.

#![allow(dead_code)] // Not every test binary uses every helper.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tokio::sync::watch;

use carrel_apiserver::auth::UserInfo;
use carrel_apiserver::{local_client, Server};

/// A cluster's API over a fresh store, with the controllers running against it until dropped.
pub struct Cluster {
    pub client: Client,
    pub server: Arc<Server>,
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// A new cluster, its controllers running.
    pub async fn start() -> Cluster {
        Cluster::start_with(carrel_controllers::Options::default()).await
    }

    /// A new cluster, its controllers running with `options`.
    pub async fn start_with(options: carrel_controllers::Options) -> Cluster {
        let cluster = Cluster::without_controllers();
        let (client, stop) = (cluster.client.clone(), cluster.stop.subscribe());
        tokio::spawn(carrel_controllers::run_with(client, options, stop));
        cluster
    }

    /// A new cluster, nothing running against it.
    pub fn without_controllers() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = carrel_store::SledStore::open(
            dir.path().join("store"),
            carrel_store::Options::create(),
        )
        .expect("store");
        let api = carrel_apiserver::Api::new(Arc::new(store)).expect("api");
        let server = Arc::new(Server::new(Arc::new(api), ""));
        let admin = UserInfo::new("admin", ["system:masters"]).with_authenticated_group();
        let client = local_client::loopback(server.clone(), admin, "default");
        let (stop, _) = watch::channel(false);
        Cluster { client, server, stop, _dir: dir }
    }

    /// Stop the controllers.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait (at most 30 s) until `check` gives `Some`, looking every 20 ms; panics with `what`.
pub async fn until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The pods of `namespace` with label selector `selector`.
pub async fn pods(client: &Client, namespace: &str, selector: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default().labels(selector)).await.expect("list pods").items
}

/// What a kubelet would write: `pod` is in `phase`, ready or not.
pub async fn set_pod(client: &Client, namespace: &str, pod: &str, phase: &str, ready: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({"status": {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": now}],
    }});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch pod status");
}

/// A workload of `replicas` pods labelled `app=<app>`, one nginx container each, as a
/// ReplicaSet, Deployment or any kind of that shape.
pub fn workload<K: serde::de::DeserializeOwned>(name: &str, replicas: i32, app: &str) -> K {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }))
    .expect("a workload")
}

/// What a kubelet would write once `pod` runs: `Running`, with IP `ip`, ready or not.
pub async fn set_pod_ip(client: &Client, namespace: &str, pod: &str, ip: &str, ready: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": now}],
    }});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch pod status");
}
