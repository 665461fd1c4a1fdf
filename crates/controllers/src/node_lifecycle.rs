//! The pod side of kube-controller-manager's node lifecycle controller
//! (`pkg/controller/nodelifecycle`, `MarkPodsNotReady`): when a node's `Ready` condition is not
//! `True` (`False`, or `Unknown` once its kubelet stopped reporting), every pod on it that still
//! counts as ready gets its `Ready` condition set to `False`, and a `NodeNotReady` Warning Event
//! ("Node is not ready").
//!
//! In a tenant, nodes are the syncer's virtual nodes, whose conditions and taints mirror the host
//! nodes: the host's own control plane decides when a node is not ready and taints it, and the
//! taints reach the tenant's nodes with the rest. What this controller adds is what a tenant's
//! users see of their pods. Eviction by `NoExecute` taints is the host's (the pods' host copies
//! are evicted there, and their end reaches the tenant through the syncer).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType};

use crate::{pods, Context, Error};

/// The component the controller is known as.
pub const COMPONENT: &str = "node-controller";

/// The reason of the Event on each pod marked not ready.
pub const NODE_NOT_READY: &str = "NodeNotReady";

/// Run the controller until `stop` is true.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let nodes = Api::<Node>::all(context.client.clone());
    let pods = Api::<Pod>::all(context.client.clone());
    let shared =
        Arc::new(Shared { context: context.clone(), recorder: context.recorder(COMPONENT) });
    Controller::new(nodes, watcher::Config::default())
        // A pod placed on a node that is already not ready is marked too.
        .watches(pods, watcher::Config::default(), |pod: Pod| {
            let node = pod.spec.as_ref()?.node_name.clone()?;
            Some(ObjectRef::<Node>::new(&node))
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

struct Shared {
    context: Arc<Context>,
    recorder: carrel_events::Recorder,
}

fn error_policy(_node: Arc<Node>, error: &Error, _shared: Arc<Shared>) -> Action {
    tracing::debug!(%error, "node lifecycle sync failed");
    Action::requeue(Duration::from_secs(1))
}

/// The status of `node`'s `Ready` condition; `None` for a node that has not reported one yet
/// (kube-controller-manager waits out its startup grace period before it counts such a node as
/// not ready; in a tenant, a virtual node is written with its conditions).
pub fn ready_status(node: &Node) -> Option<&str> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
}

/// Whether `pod` still shows a `Ready` condition other than `False`: what marking changes.
fn shown_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status != "False")
}

async fn reconcile(node: Arc<Node>, shared: Arc<Shared>) -> Result<Action, Error> {
    if matches!(ready_status(&node), None | Some("True")) {
        return Ok(Action::await_change());
    }
    let client = &shared.context.client;
    let on_node = ListParams::default().fields(&format!("spec.nodeName={}", node.name_any()));
    let listed = Api::<Pod>::all(client.clone()).list(&on_node).await?;
    for pod in listed.items.iter().filter(|p| !pods::is_finished(p) && shown_ready(p)) {
        mark_not_ready(&shared, pod).await?;
    }
    Ok(Action::await_change())
}

/// Set `pod`'s `Ready` condition to `False` (the rest of its conditions as they are), with its
/// transition time now, and record the Event.
async fn mark_not_ready(shared: &Shared, pod: &Pod) -> Result<(), Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let now = crate::job::time(chrono::Utc::now());
    let conditions: Vec<PodCondition> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|mut c| {
            if c.type_ == "Ready" {
                c.status = "False".into();
                c.last_transition_time = Some(now.clone());
            }
            c
        })
        .collect();
    // The resourceVersion makes it a compare-and-swap: a kubelet's write in between wins.
    let patch = json!({
        "metadata": {"resourceVersion": pod.resource_version()},
        "status": {"conditions": conditions},
    });
    let api = Api::<Pod>::namespaced(shared.context.client.clone(), &namespace);
    match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let target = EventTarget::pod(&namespace, &pod.name_any(), pod.uid());
    if let Err(error) = shared
        .recorder
        .record(&target, EventType::Warning, NODE_NOT_READY, "Node is not ready")
        .await
    {
        tracing::debug!(%error, "recording a NodeNotReady event");
    }
    Ok(())
}
