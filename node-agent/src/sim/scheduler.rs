//! A simulated scheduler for the embedded host of `carrel up`: every pod without a node (and for
//! the default scheduler) is bound to the Ready simulated node ([`LABEL_SIMULATED`]) running the
//! fewest non-terminated pods, ties broken by name, through the pods' `binding` subresource.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::FutureExt;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;

use super::kubelet::LABEL_SIMULATED;

/// The scheduler name this scheduler serves.
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";
/// How often pending pods are looked at again when nothing changes.
const RETRY: Duration = Duration::from_secs(5);

/// Why scheduling failed.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The host API does not serve `pods/binding`.
    #[error("the host API does not serve the pods/binding subresource (POST /api/v1/namespaces/{namespace}/pods/{pod}/binding answered 404: {message})")]
    BindingUnsupported {
        /// The pod's namespace.
        namespace: String,
        /// The pod.
        pod: String,
        /// The server's message.
        message: String,
    },
    /// The host API refused or failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The client's error.
        source: kube::Error,
    },
}

/// A node as the scheduler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its name.
    pub name: String,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// Whether it is labelled [`LABEL_SIMULATED`] `"true"`.
    pub simulated: bool,
    /// Whether `spec.unschedulable` is set (cordoned).
    pub unschedulable: bool,
    /// Its labels, for pods' `nodeSelector`.
    pub labels: BTreeMap<String, String>,
}

impl Candidate {
    /// The candidate a Node makes.
    pub fn of(node: &Node) -> Candidate {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let simulated = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SIMULATED))
            .is_some_and(|v| v == "true");
        Candidate {
            name: node.metadata.name.clone().unwrap_or_default(),
            ready,
            simulated,
            unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            labels: node.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

/// The node for the next pod: among Ready, simulated, schedulable nodes, the one with the fewest
/// pods in `load` (non-terminated pods per node), ties broken by name.
pub fn choose_node(candidates: &[Candidate], load: &BTreeMap<String, usize>) -> Option<String> {
    choose_node_for(candidates, load, &BTreeMap::new())
}

/// [`choose_node`] among the nodes carrying every label of `selector` (a pod's `nodeSelector`).
pub fn choose_node_for(
    candidates: &[Candidate],
    load: &BTreeMap<String, usize>,
    selector: &BTreeMap<String, String>,
) -> Option<String> {
    candidates
        .iter()
        .filter(|c| c.ready && c.simulated && !c.unschedulable && !c.name.is_empty())
        .filter(|c| selector.iter().all(|(k, v)| c.labels.get(k) == Some(v)))
        .min_by(|a, b| {
            let la = load.get(&a.name).copied().unwrap_or(0);
            let lb = load.get(&b.name).copied().unwrap_or(0);
            la.cmp(&lb).then_with(|| a.name.cmp(&b.name))
        })
        .map(|c| c.name.clone())
}

/// Whether this scheduler should place `pod`: unbound, not being deleted, not finished, and
/// for the default scheduler.
pub fn wants_scheduling(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let bound = spec.and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let scheduler = spec.and_then(|s| s.scheduler_name.as_deref()).unwrap_or(DEFAULT_SCHEDULER);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !bound
        && scheduler == DEFAULT_SCHEDULER
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Bind pod `namespace/name` to `node` (POST `pods/<name>/binding`).
pub async fn bind(
    client: &Client,
    namespace: &str,
    name: &str,
    node: &str,
) -> Result<(), SchedulerError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node.to_owned()),
            ..ObjectReference::default()
        },
    };
    let answer: Result<serde_json::Value, kube::Error> =
        api.create_subresource("binding", name, &PostParams::default(), &binding).await;
    match answer {
        Ok(_) => Ok(()),
        // A 404 that names no object is the server's "no such path".
        Err(kube::Error::Api(s)) if s.code == 404 && s.details.is_none() => {
            Err(SchedulerError::BindingUnsupported {
                namespace: namespace.to_owned(),
                pod: name.to_owned(),
                message: s.message.clone(),
            })
        }
        Err(source) => Err(SchedulerError::Kube {
            action: format!("binding pod {namespace}/{name} to node {node}"),
            source,
        }),
    }
}

/// A pod placed by [`schedule_once`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// The node it was bound to.
    pub node: String,
}

/// One round: every pod waiting for this scheduler bound to a node. Pods that vanish or get bound
/// by someone else meanwhile are skipped; a host API without the binding subresource is an error.
pub async fn schedule_once(client: &Client) -> Result<Vec<Placed>, SchedulerError> {
    let kube_err = |action: &str| {
        let action = action.to_owned();
        move |source| SchedulerError::Kube { action, source }
    };
    let pods: Api<Pod> = Api::all(client.clone());
    let all = pods.list(&ListParams::default()).await.map_err(kube_err("listing pods"))?.items;
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes
        .list(&ListParams::default().labels(&format!("{LABEL_SIMULATED}=true")))
        .await
        .map_err(kube_err("listing simulated nodes"))?
        .items;
    schedule_round(client, all.iter(), nodes.iter(), &mut Default::default()).await
}

/// One round over the pods and simulated nodes given: each pod waiting for a node is bound to
/// the least loaded one. `bound` remembers the pods this scheduler bound until `pods` shows them
/// bound, so a round on a lagging cache does not bind them again.
async fn schedule_round<'a>(
    client: &Client,
    pods: impl Iterator<Item = &'a Pod>,
    nodes: impl Iterator<Item = &'a Node>,
    bound: &mut std::collections::HashSet<String>,
) -> Result<Vec<Placed>, SchedulerError> {
    let candidates: Vec<Candidate> = nodes.map(Candidate::of).collect();
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    let mut pending: Vec<&Pod> = Vec::new();
    let mut seen_bound = std::collections::HashSet::new();
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        match node {
            Some(node) => {
                seen_bound.insert(uid);
                if !matches!(phase, Some("Succeeded" | "Failed")) {
                    *load.entry(node.to_owned()).or_insert(0) += 1;
                }
            }
            None if bound.contains(&uid) => {}
            None if wants_scheduling(pod) => pending.push(pod),
            None => {}
        }
    }
    bound.retain(|uid| !seen_bound.contains(uid));
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let mut placed = Vec::new();
    pending.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    for pod in pending {
        let (Some(namespace), Some(name)) =
            (pod.metadata.namespace.clone(), pod.metadata.name.clone())
        else {
            continue;
        };
        let selector = pod.spec.as_ref().and_then(|s| s.node_selector.clone()).unwrap_or_default();
        let Some(node) = choose_node_for(&candidates, &load, &selector) else {
            tracing::debug!(pod = %format!("{namespace}/{name}"), "no Ready simulated node matches the pod yet");
            continue;
        };
        match bind(client, &namespace, &name, &node).await {
            Ok(()) => {
                tracing::info!(pod = %format!("{namespace}/{name}"), %node, "scheduled a pod");
                *load.entry(node.clone()).or_insert(0) += 1;
                bound.insert(pod.metadata.uid.clone().unwrap_or_default());
                placed.push(Placed { namespace, pod: name, node });
            }
            Err(e @ SchedulerError::BindingUnsupported { .. }) => return Err(e),
            Err(SchedulerError::Kube { source: kube::Error::Api(s), .. })
                if s.code == 404 || s.code == 409 =>
            {
                tracing::debug!(pod = %format!("{namespace}/{name}"), reason = %s.message, "pod gone or already bound");
            }
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "could not bind the pod")
            }
        }
    }
    Ok(placed)
}

/// Schedule pods as they appear until `stop` turns true: a round after every burst of changes
/// to pods or simulated nodes, and every few seconds.
pub async fn run_scheduler(client: Client, mut stop: watch::Receiver<bool>) {
    // Every pod and simulated node, cached: a round counts the load in memory instead of
    // listing (and decoding) every pod of the cluster again.
    let (pod_reader, pod_writer) = reflector::store::<Pod>();
    let pods = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(pod_writer);
    let (node_reader, node_writer) = reflector::store::<Node>();
    let simulated = watcher::Config::default().labels(&format!("{LABEL_SIMULATED}=true"));
    let nodes =
        watcher(Api::<Node>::all(client.clone()), simulated).default_backoff().reflect(node_writer);
    let mut pods = std::pin::pin!(pods);
    let mut nodes = std::pin::pin!(nodes);
    let mut retry = tokio::time::interval(RETRY);
    let mut unsupported_reported = false;
    let mut bound = std::collections::HashSet::new();
    loop {
        tokio::select! {
            _ = crate::stopped(&mut stop) => break,
            event = pods.next() => match event {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "scheduler: watching pods");
                    continue;
                }
                None => break,
            },
            event = nodes.next() => match event {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "scheduler: watching nodes");
                    continue;
                }
                None => break,
            },
            _ = retry.tick() => {}
        }
        // Take whatever else is already waiting, so that a burst makes one round.
        while let Some(Some(Ok(_))) = futures::FutureExt::now_or_never(pods.next()) {}
        while let Some(Some(Ok(_))) = futures::FutureExt::now_or_never(nodes.next()) {}
        if pod_reader.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        let all_pods = pod_reader.state();
        let all_nodes = node_reader.state();
        let round = schedule_round(
            &client,
            all_pods.iter().map(|p| &**p),
            all_nodes.iter().map(|n| &**n),
            &mut bound,
        );
        match round.await {
            Ok(_) => unsupported_reported = false,
            Err(e @ SchedulerError::BindingUnsupported { .. }) => {
                if !unsupported_reported {
                    tracing::error!(error = %e, "scheduler cannot bind pods");
                    unsupported_reported = true;
                }
            }
            Err(e) => tracing::warn!(error = %e, "scheduling round failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool) -> Candidate {
        Candidate {
            name: name.into(),
            ready,
            simulated: true,
            unschedulable: false,
            labels: BTreeMap::from([("kubernetes.io/hostname".to_owned(), name.to_owned())]),
        }
    }

    #[test]
    fn the_least_loaded_ready_simulated_node_wins() {
        let nodes = vec![node("b", true), node("a", true), node("c", false)];
        let load = BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)]);
        assert_eq!(choose_node(&nodes, &load).as_deref(), Some("b"));
        let even = BTreeMap::from([("a".to_owned(), 1), ("b".to_owned(), 1)]);
        assert_eq!(choose_node(&nodes, &even).as_deref(), Some("a"), "ties by name");
        let mut real = node("0-real", true);
        real.simulated = false;
        let mut cordoned = node("0-cordoned", true);
        cordoned.unschedulable = true;
        let nodes = vec![real, cordoned, node("z", true)];
        assert_eq!(choose_node(&nodes, &BTreeMap::new()).as_deref(), Some("z"));
        assert_eq!(choose_node(&[node("c", false)], &BTreeMap::new()), None);
        // A nodeSelector narrows the choice, even to a busier node, or to none.
        let nodes = vec![node("a", true), node("b", true)];
        let busy_b = BTreeMap::from([("b".to_owned(), 9)]);
        let on_b = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "b".to_owned())]);
        assert_eq!(choose_node_for(&nodes, &busy_b, &on_b).as_deref(), Some("b"));
        let nowhere = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "x".to_owned())]);
        assert_eq!(choose_node_for(&nodes, &busy_b, &nowhere), None);
    }

    #[test]
    fn only_unbound_default_scheduler_pods_are_placed() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"containers": [{"name": "c"}]},
        }))
        .unwrap();
        assert!(wants_scheduling(&pod));
        pod.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
        assert!(wants_scheduling(&pod));
        pod.spec.as_mut().unwrap().scheduler_name = Some("volcano".into());
        assert!(!wants_scheduling(&pod));
        pod.spec.as_mut().unwrap().scheduler_name = None;
        pod.spec.as_mut().unwrap().node_name = Some("n".into());
        assert!(!wants_scheduling(&pod));
    }

    #[test]
    fn candidates_read_readiness_and_labels() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"carrel.dev/simulated": "true"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let mut want = node("n1", true);
        want.labels = BTreeMap::from([("carrel.dev/simulated".to_owned(), "true".to_owned())]);
        assert_eq!(Candidate::of(&n), want);
        let n: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n2"}})).unwrap();
        assert_eq!(
            Candidate::of(&n),
            Candidate {
                name: "n2".into(),
                ready: false,
                simulated: false,
                unschedulable: false,
                labels: BTreeMap::new(),
            }
        );
    }
}
