//! Pods on a node that is not ready are marked as kube-controller-manager marks them.

mod common;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

use common::{set_pod, until, Cluster};

async fn node(client: &Client, name: &str, ready: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = serde_json::from_value(json!({"metadata": {"name": name}})).expect("node");
    if nodes.get_opt(name).await.expect("get").is_none() {
        nodes.create(&PostParams::default(), &node).await.expect("create node");
    }
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": ready}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("node status");
}

async fn running_pod(client: &Client, name: &str, node: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("pod");
    api.create(&PostParams::default(), &pod).await.expect("create pod");
    set_pod(client, "default", name, "Running", true).await;
}

async fn ready(client: &Client, pod: &str) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = api.get(pod).await.expect("pod");
    let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == "Ready").map(|c| c.status).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_on_a_node_that_is_not_ready_are_marked_not_ready() {
    let cluster = Cluster::start().await;
    let client = &cluster.client;
    node(client, "a", "True").await;
    node(client, "b", "True").await;
    running_pod(client, "on-a", "a").await;
    running_pod(client, "on-b", "b").await;

    node(client, "a", "Unknown").await;
    until("the pod on a marked not ready", || async {
        (ready(client, "on-a").await == "False").then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = until("the NodeNotReady event", || async {
        let listed = events.list(&ListParams::default()).await.ok()?;
        listed.items.into_iter().find(|e| e.reason.as_deref() == Some("NodeNotReady"))
    })
    .await;
    assert_eq!(event.involved_object.name.as_deref(), Some("on-a"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some("Node is not ready"));
    // The pod keeps its phase; the ready node's pod is left alone.
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let on_a = api.get("on-a").await.expect("pod");
    assert_eq!(on_a.status.and_then(|s| s.phase).as_deref(), Some("Running"));
    assert_eq!(ready(client, "on-b").await, "True");

    // A node that has not reported a Ready condition yet is not counted as not ready.
    let nodes: Api<Node> = Api::all(client.clone());
    let fresh = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).expect("node");
    nodes.create(&PostParams::default(), &fresh).await.expect("create node");
    running_pod(client, "on-fresh", "fresh").await;

    // A pod that reports ready on a node that is not is marked again.
    running_pod(client, "late", "a").await;
    until("the late pod marked not ready", || async {
        (ready(client, "late").await == "False").then_some(())
    })
    .await;
    assert_eq!(ready(client, "on-fresh").await, "True");
}
