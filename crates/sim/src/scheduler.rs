//! A simulated scheduler for the embedded host of `carrel up`: every pod without a node (and for
//! the default scheduler) is bound, through the pods' `binding` subresource, to the simulated
//! node ([`LABEL_SIMULATED`]) running the fewest non-terminated pods among those it may run on,
//! ties broken by name. Which nodes a pod may run on is kube-scheduler's filters' decision, read
//! by [`carrel_gpu::fit`]: cordon, taints, readiness, `nodeSelector` and required node affinity.
//! A pod no node takes gets kube-scheduler's `PodScheduled=False` condition and
//! `FailedScheduling` event, saying why.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;

use carrel_gpu::fit::{self, Misfit, NeedsError, NodeFacts, PodNeeds};
use kube::api::{Patch, PatchParams};

use crate::kubelet::LABEL_SIMULATED;
use carrel_events::{EventTarget, EventType, Recorder};

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

/// Why a pod waits for a node, in kube-scheduler's words.
#[derive(Debug, thiserror::Error)]
pub enum Unschedulable {
    /// The pod's placement fields do not read.
    #[error(transparent)]
    Needs(#[from] NeedsError),
    /// No node may take it (`0/3 nodes are available: …`).
    #[error("{}", fit::unavailable(*.nodes, .misfits))]
    NoNode {
        /// How many nodes were looked at.
        nodes: usize,
        /// Why each refused the pod.
        misfits: Vec<Misfit>,
    },
}

/// A node as the scheduler sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// What the filters read of it.
    pub facts: NodeFacts,
    /// Whether it is labelled [`LABEL_SIMULATED`] `"true"`.
    pub simulated: bool,
}

impl Candidate {
    /// The candidate a Node makes.
    pub fn of(node: &Node) -> Candidate {
        let facts = serde_json::to_value(node).map(|n| NodeFacts::of_node(&n)).unwrap_or_default();
        let simulated = facts.labels.get(LABEL_SIMULATED).is_some_and(|v| v == "true");
        Candidate { facts, simulated }
    }
}

/// The node for the next pod: among simulated nodes a pod without needs may run on, the one with
/// the fewest pods in `load` (non-terminated pods per node), ties broken by name.
pub fn choose_node(candidates: &[Candidate], load: &BTreeMap<String, usize>) -> Option<String> {
    choose_node_for(candidates, load, &PodNeeds::default()).ok()
}

/// [`choose_node`] for a pod with `needs`; when no node may take it, kube-scheduler's message
/// saying why.
pub fn choose_node_for(
    candidates: &[Candidate],
    load: &BTreeMap<String, usize>,
    needs: &PodNeeds,
) -> Result<String, Unschedulable> {
    let simulated: Vec<&Candidate> =
        candidates.iter().filter(|c| c.simulated && !c.facts.name.is_empty()).collect();
    let mut misfits = Vec::new();
    let mut best: Option<(usize, &str)> = None;
    for c in &simulated {
        let pods = load.get(&c.facts.name).copied().unwrap_or(0);
        if let Err(m) = needs.check(&c.facts).and_then(|()| c.facts.room_for_one(pods)) {
            misfits.push(m);
            continue;
        }
        if best.is_none_or(|b| (pods, c.facts.name.as_str()) < b) {
            best = Some((pods, &c.facts.name));
        }
    }
    best.map(|(_, name)| name.to_owned())
        .ok_or(Unschedulable::NoNode { nodes: simulated.len(), misfits })
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

/// Say why `pod` waits, as kube-scheduler does: its `PodScheduled` condition turns `False` with
/// reason `Unschedulable` and message `why`, and a `FailedScheduling` event is written. Nothing is
/// written when the condition already says so.
async fn report_unschedulable(
    client: &Client,
    recorder: &Recorder,
    pod: &Pod,
    why: &str,
) -> Result<(), kube::Error> {
    let said =
        pod.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.message.as_deref() == Some(why)
        });
    let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
        return Ok(());
    };
    if said {
        return Ok(());
    }
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": why,
        "lastProbeTime": null,
        "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }]}});
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)).await?;
    let target = EventTarget::pod(namespace, name, pod.metadata.uid.clone());
    recorder.record(&target, EventType::Warning, "FailedScheduling", why).await
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
    let mut tracker = Tracker::default();
    for pod in all {
        tracker.apply(pod);
    }
    let candidates: Vec<Candidate> = nodes.iter().map(Candidate::of).collect();
    let recorder = Arc::new(Recorder::for_component(client.clone(), DEFAULT_SCHEDULER, ""));
    tracker.round(client, &recorder, &candidates).await
}

/// What the scheduler knows of the cluster's pods, kept up to date one pod at a time from a
/// watch: a round looks only at the pods waiting, however many pods the cluster holds.
#[derive(Debug, Default)]
struct Tracker {
    /// The node of each bound pod that has not finished, by UID: the pods counted in `load`.
    counted: HashMap<String, String>,
    /// Unfinished pods per node.
    load: BTreeMap<String, usize>,
    /// Pods waiting for this scheduler, by UID.
    pending: HashMap<String, Pod>,
    /// Pods this scheduler bound that the watch has not shown bound yet: a lagging watch must not
    /// make them pending again.
    bound: HashSet<String>,
}

impl Tracker {
    /// A pod as the watch shows it now.
    fn apply(&mut self, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        match node {
            Some(node) => {
                self.bound.remove(&uid);
                self.pending.remove(&uid);
                let node = node.to_owned();
                self.count(&uid, (!finished).then_some(node));
            }
            None if self.bound.contains(&uid) => {}
            None if wants_scheduling(&pod) => {
                self.pending.insert(uid, pod);
            }
            None => {
                self.pending.remove(&uid);
            }
        }
    }

    /// A pod is gone.
    fn delete(&mut self, pod: &Pod) {
        if let Some(uid) = &pod.metadata.uid {
            self.pending.remove(uid);
            self.bound.remove(uid);
            self.count(uid, None);
        }
    }

    /// Count pod `uid` on `node` (or on none).
    fn count(&mut self, uid: &str, node: Option<String>) {
        if self.counted.get(uid) == node.as_ref() {
            return;
        }
        if let Some(old) = self.counted.remove(uid) {
            if let Some(n) = self.load.get_mut(&old) {
                *n = n.saturating_sub(1);
            }
        }
        if let Some(node) = node {
            *self.load.entry(node.clone()).or_insert(0) += 1;
            self.counted.insert(uid.to_owned(), node);
        }
    }

    /// Each pod waiting is bound to the least loaded node that suits it, oldest first. Pods that
    /// vanish or get bound by someone else meanwhile are dropped; one that fails otherwise, or
    /// finds no node, waits for the next round.
    async fn round(
        &mut self,
        client: &Client,
        recorder: &Arc<Recorder>,
        candidates: &[Candidate],
    ) -> Result<Vec<Placed>, SchedulerError> {
        let mut waiting: Vec<(String, Pod)> =
            self.pending.iter().map(|(uid, pod)| (uid.clone(), pod.clone())).collect();
        waiting
            .sort_by(|a, b| a.1.metadata.creation_timestamp.cmp(&b.1.metadata.creation_timestamp));
        let mut placed = Vec::new();
        for (uid, pod) in waiting {
            let (Some(namespace), Some(name)) =
                (pod.metadata.namespace.clone(), pod.metadata.name.clone())
            else {
                self.pending.remove(&uid);
                continue;
            };
            // Only the fields placement reads, not the whole spec.
            let spec = pod.spec.as_ref().map(|s| {
                serde_json::json!({
                    "nodeSelector": s.node_selector,
                    "affinity": s.affinity,
                    "tolerations": s.tolerations,
                })
            });
            let chosen = PodNeeds::of_spec(spec.as_ref().unwrap_or(&serde_json::Value::Null))
                .map_err(Unschedulable::from)
                .and_then(|needs| choose_node_for(candidates, &self.load, &needs));
            let node = match chosen {
                Ok(node) => node,
                Err(why) => {
                    let why = why.to_string();
                    tracing::debug!(pod = %format!("{namespace}/{name}"), %why, "no node for the pod yet");
                    if let Err(e) = report_unschedulable(client, recorder, &pod, &why).await {
                        tracing::debug!(pod = %format!("{namespace}/{name}"), error = %e, "could not say why the pod waits");
                    }
                    continue;
                }
            };
            match bind(client, &namespace, &name, &node).await {
                Ok(()) => {
                    tracing::info!(pod = %format!("{namespace}/{name}"), %node, "scheduled a pod");
                    // Said by a task of its own, as binding the next pod need not wait for it.
                    let recorder = recorder.clone();
                    let target = EventTarget::pod(&namespace, &name, Some(uid.clone()));
                    let message = format!("Successfully assigned {namespace}/{name} to {node}");
                    tokio::spawn(async move {
                        if let Err(e) =
                            recorder.record(&target, EventType::Normal, "Scheduled", &message).await
                        {
                            tracing::debug!(pod = %target.name, error = %e, "could not write the Scheduled event");
                        }
                    });
                    self.pending.remove(&uid);
                    self.bound.insert(uid.clone());
                    self.count(&uid, Some(node.clone()));
                    placed.push(Placed { namespace, pod: name, node });
                }
                Err(e @ SchedulerError::BindingUnsupported { .. }) => return Err(e),
                Err(SchedulerError::Kube { source: kube::Error::Api(s), .. })
                    if s.code == 404 || s.code == 409 =>
                {
                    tracing::debug!(pod = %format!("{namespace}/{name}"), reason = %s.message, "pod gone or already bound");
                    self.pending.remove(&uid);
                }
                Err(e) => {
                    tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "could not bind the pod")
                }
            }
        }
        Ok(placed)
    }
}

/// Schedule pods as they appear until `stop` turns true: a round after every burst of changes
/// to pods or simulated nodes, and every few seconds.
pub async fn run_scheduler(client: Client, mut stop: watch::Receiver<bool>) {
    let pods =
        watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()).default_backoff();
    let (node_reader, node_writer) = reflector::store::<Node>();
    let simulated = watcher::Config::default().labels(&format!("{LABEL_SIMULATED}=true"));
    let nodes =
        watcher(Api::<Node>::all(client.clone()), simulated).default_backoff().reflect(node_writer);
    let mut pods = std::pin::pin!(pods);
    let mut nodes = std::pin::pin!(nodes);
    let mut retry = tokio::time::interval(RETRY);
    let mut unsupported_reported = false;
    let mut tracker = Tracker::default();
    let recorder = Arc::new(Recorder::for_component(client.clone(), DEFAULT_SCHEDULER, ""));
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut nodes_changed = true;
    // While a (re)list is under way the tracker is rebuilt from it and holds only part of the
    // cluster: no rounds until it is whole.
    let mut listing: Option<Tracker> = None;
    let mut listed = false;
    loop {
        let mut pod_events = Vec::new();
        tokio::select! {
            _ = crate::stopped(&mut stop) => break,
            event = pods.next() => match event {
                Some(Ok(e)) => pod_events.push(e),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "scheduler: watching pods");
                    continue;
                }
                None => break,
            },
            event = nodes.next() => match event {
                Some(Ok(_)) => nodes_changed = true,
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "scheduler: watching nodes");
                    continue;
                }
                None => break,
            },
            _ = retry.tick() => {}
        }
        // Take whatever else is already waiting, so that a burst makes one round.
        while let Some(Some(Ok(e))) = futures::FutureExt::now_or_never(pods.next()) {
            pod_events.push(e);
        }
        while let Some(Some(Ok(_))) = futures::FutureExt::now_or_never(nodes.next()) {
            nodes_changed = true;
        }
        for event in pod_events {
            match event {
                watcher::Event::Init => listing = Some(Tracker::default()),
                watcher::Event::InitApply(pod) => {
                    listing.get_or_insert_with(Tracker::default).apply(pod);
                }
                watcher::Event::InitDone => {
                    let mut fresh = listing.take().unwrap_or_default();
                    // Bindings made before the relist that it did not show yet stay known.
                    fresh.bound = std::mem::take(&mut tracker.bound);
                    fresh.bound.retain(|uid| !fresh.counted.contains_key(uid));
                    for uid in fresh.bound.clone() {
                        fresh.pending.remove(&uid);
                        if let Some(node) = tracker.counted.get(&uid) {
                            fresh.count(&uid, Some(node.clone()));
                        }
                    }
                    tracker = fresh;
                    listed = true;
                }
                watcher::Event::Apply(pod) => tracker.apply(pod),
                watcher::Event::Delete(pod) => tracker.delete(&pod),
            }
        }
        if !listed || listing.is_some() || tracker.pending.is_empty() {
            continue;
        }
        // The nodes are read again only when they changed, not on every round.
        if nodes_changed {
            candidates = node_reader.state().iter().map(|n| Candidate::of(n)).collect();
            nodes_changed = false;
        }
        match tracker.round(&client, &recorder, &candidates).await {
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
            facts: NodeFacts {
                name: name.into(),
                labels: BTreeMap::from([("kubernetes.io/hostname".to_owned(), name.to_owned())]),
                taints: Vec::new(),
                unschedulable: false,
                ready,
                allocatable_pods: Some(110),
            },
            simulated: true,
        }
    }

    fn needs(spec: serde_json::Value) -> PodNeeds {
        PodNeeds::of_spec(&spec).expect("parses")
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
        cordoned.facts.unschedulable = true;
        let nodes = vec![real, cordoned, node("z", true)];
        assert_eq!(choose_node(&nodes, &BTreeMap::new()).as_deref(), Some("z"));
        assert_eq!(choose_node(&[node("c", false)], &BTreeMap::new()), None);
    }

    /// The node chosen, or the message saying why none was.
    fn placed(chosen: Result<String, Unschedulable>) -> Result<String, String> {
        chosen.map_err(|e| e.to_string())
    }

    #[test]
    fn a_pods_selector_affinity_and_tolerations_narrow_the_choice() {
        let nodes = vec![node("a", true), node("b", true)];
        let busy_b = BTreeMap::from([("b".to_owned(), 9)]);
        let on_b = needs(serde_json::json!({"nodeSelector": {"kubernetes.io/hostname": "b"}}));
        assert_eq!(placed(choose_node_for(&nodes, &busy_b, &on_b)).as_deref(), Ok("b"));
        let not_a = needs(serde_json::json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a"]}]}]}}}}));
        assert_eq!(placed(choose_node_for(&nodes, &busy_b, &not_a)).as_deref(), Ok("b"));
        let nowhere = needs(serde_json::json!({"nodeSelector": {"kubernetes.io/hostname": "x"}}));
        assert_eq!(
            placed(choose_node_for(&nodes, &busy_b, &nowhere)),
            Err("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
                .to_owned())
        );
        // A tainted node takes only pods that tolerate the taint; a cordoned one none.
        let mut tainted = node("a", true);
        tainted.facts.taints = vec![carrel_gpu::fit::Taint {
            key: "dedicated".into(),
            value: "ml".into(),
            effect: "NoSchedule".into(),
        }];
        let mut cordoned = node("b", true);
        cordoned.facts.unschedulable = true;
        let nodes = vec![tainted, cordoned, node("c", false)];
        assert_eq!(choose_node(&nodes, &BTreeMap::new()), None, "tainted, cordoned and not ready");
        assert_eq!(
            placed(choose_node_for(&nodes, &BTreeMap::new(), &PodNeeds::default())),
            Err("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}, 1 \
                 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) were \
                 unschedulable."
                .to_owned())
        );
        let tolerant = needs(serde_json::json!({"tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}));
        assert_eq!(
            placed(choose_node_for(&nodes, &BTreeMap::new(), &tolerant)).as_deref(),
            Ok("a")
        );
        // A full node takes no more.
        let full = BTreeMap::from([("a".to_owned(), 110)]);
        assert_eq!(
            placed(choose_node_for(&nodes, &full, &tolerant)),
            Err("0/3 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint \
                 {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable."
                .to_owned())
        );
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

    fn pod(uid: &str, node: Option<&str>, phase: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "d", "uid": uid},
            "spec": {"containers": [{"name": "c"}], "nodeName": node},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn the_tracker_counts_unfinished_bound_pods_and_keeps_the_waiting_ones() {
        let mut t = Tracker::default();
        t.apply(pod("a", None, Some("Pending")));
        t.apply(pod("b", Some("n1"), Some("Running")));
        t.apply(pod("c", Some("n1"), Some("Running")));
        t.apply(pod("d", Some("n2"), Some("Succeeded")));
        assert_eq!(t.pending.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(t.load, BTreeMap::from([("n1".to_owned(), 2)]));
        // A pod finishing, moving, or going away changes the count once.
        t.apply(pod("c", Some("n1"), Some("Failed")));
        t.apply(pod("c", Some("n1"), Some("Failed")));
        assert_eq!(t.load.get("n1"), Some(&1));
        t.delete(&pod("b", Some("n1"), Some("Running")));
        assert_eq!(t.load.get("n1"), Some(&0));
        // A pod this scheduler bound is not made to wait again by an older event of it.
        t.pending.remove("a");
        t.bound.insert("a".to_owned());
        t.count("a", Some("n2".to_owned()));
        t.apply(pod("a", None, Some("Pending")));
        assert!(t.pending.is_empty());
        assert_eq!(t.load.get("n2"), Some(&1));
        t.apply(pod("a", Some("n2"), Some("Running")));
        assert!(t.bound.is_empty());
        assert_eq!(t.load.get("n2"), Some(&1), "counted once");
    }

    #[test]
    fn candidates_read_readiness_labels_cordon_and_taints() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"carrel.dev/simulated": "true"}},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let c = Candidate::of(&n);
        assert!(c.simulated && c.facts.ready && c.facts.unschedulable);
        assert_eq!(c.facts.name, "n1");
        assert_eq!(c.facts.taints.len(), 1);
        let n: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n2"}})).unwrap();
        let c = Candidate::of(&n);
        assert!(!c.simulated && !c.facts.ready && !c.facts.unschedulable);
        assert!(c.facts.labels.is_empty() && c.facts.taints.is_empty());
    }
}
