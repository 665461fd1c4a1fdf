//! What a DaemonSet should do about its pods, decided from what is observed, with no I/O
//! (kube-controller-manager's `pkg/controller/daemon` and its `util`): which nodes should run a
//! daemon pod (`NodeShouldRunDaemonPod`), the pod made for a node (`CreatePodTemplate`,
//! `ReplaceDaemonSetPodNodeNameNodeAffinity`), which pods to create and delete
//! (`podsShouldBeOnNode`), how far a rolling update goes (`rollingUpdate`), and the status.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, PodTemplateSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use carrel_gpu::fit::{NodeFacts, PodNeeds};

use crate::deployment::util::scaled;
use crate::pods;

/// The label that ties a pod (and a ControllerRevision) to one template of its DaemonSet.
pub const HASH_LABEL: &str = "controller-revision-hash";
/// The label giving a pod its DaemonSet's template generation.
pub const TEMPLATE_GENERATION_LABEL: &str = "pod-template-generation";
/// The DaemonSet annotation holding its template generation.
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
/// Most pods created or deleted by one reconcile (the daemon controller's `BurstReplicas`).
pub const BURST_REPLICAS: usize = 250;

/// The tolerations every daemon pod gets (`AddOrUpdateDaemonPodTolerations`): node problems
/// neither evict nor keep off a daemon pod; a node without network only keeps off one that does
/// not use the host's.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut wanted = vec![
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec.host_network == Some(true) {
        wanted.push(("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    for (key, effect) in wanted {
        let toleration = Toleration {
            key: Some(key.to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some(effect.to_owned()),
            ..Toleration::default()
        };
        add_or_update_toleration(spec, toleration);
    }
}

/// `AddOrUpdateTolerationInPodSpec`: `toleration` replaces one of the same key, operator, value
/// and effect, or is added last.
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        t.key == toleration.key
            && t.effect == toleration.effect
            && t.operator == toleration.operator
            && t.value == toleration.value
    };
    match tolerations.iter_mut().find(|t| same(t)) {
        Some(existing) => *existing = toleration,
        None => tolerations.push(toleration),
    }
}

/// The node affinity that binds a daemon pod to `node`
/// (`ReplaceDaemonSetPodNodeNameNodeAffinity`): its required terms become the one term
/// `matchFields metadata.name In [node]`; the rest of `affinity` is kept.
pub fn node_name_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![node.to_owned()]),
        }]),
        match_expressions: None,
    };
    let mut affinity = affinity.unwrap_or_default();
    let node_affinity = affinity.node_affinity.get_or_insert_with(NodeAffinity::default);
    node_affinity.required_during_scheduling_ignored_during_execution =
        Some(NodeSelector { node_selector_terms: vec![term] });
    affinity
}

/// The node a daemon pod is for (`GetTargetNodeName`): its `nodeName` once bound, else the one
/// value of a `matchFields metadata.name In` requirement of its required node affinity.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(name) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(name.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    let requirement = terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == "metadata.name" && r.operator == "In")?;
    match requirement.values.as_deref() {
        Some([only]) => Some(only.clone()),
        _ => None,
    }
}

/// The DaemonSet's template generation (its annotation), if it has one that parses.
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata.annotations.as_ref()?.get(TEMPLATE_GENERATION)?.parse().ok()
}

/// Whether `pod` is of the current template (`IsPodUpdated`): its hash label is `hash`, or its
/// generation label is the DaemonSet's template generation.
pub fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let label = |key: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(key));
    let hash_matches = !hash.is_empty() && label(HASH_LABEL).is_some_and(|h| h == hash);
    let generation_matches = generation
        .is_some_and(|g| label(TEMPLATE_GENERATION_LABEL).is_some_and(|l| *l == g.to_string()));
    hash_matches || generation_matches
}

/// The template of the DaemonSet's new pods (`CreatePodTemplate`): its own, with the daemon
/// tolerations, and labelled with the template generation and `hash`.
pub fn pod_template(ds: &DaemonSet, hash: &str) -> PodTemplateSpec {
    let mut template = ds.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    add_daemon_tolerations(template.spec.get_or_insert_with(PodSpec::default));
    let labels = template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(BTreeMap::new);
    if let Some(generation) = template_generation(ds) {
        labels.insert(TEMPLATE_GENERATION_LABEL.to_owned(), generation.to_string());
    }
    if !hash.is_empty() {
        labels.insert(HASH_LABEL.to_owned(), hash.to_owned());
    }
    template
}

/// Whether a node should run the DaemonSet's pod, as `NodeShouldRunDaemonPod` answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fit {
    /// A daemon pod should be made for the node if it has none.
    pub should_run: bool,
    /// A daemon pod already on the node may stay: the node only has untolerated `NoSchedule`
    /// taints, or none.
    pub should_continue: bool,
}

/// What decides which nodes a DaemonSet's pods belong on: its template's `nodeName`,
/// `nodeSelector`, required node affinity and tolerations (with the daemon tolerations).
#[derive(Clone, Debug)]
pub struct Placement {
    node_name: Option<String>,
    needs: PodNeeds,
}

impl Placement {
    /// The placement of `ds`'s pods; an error if its template's placement fields do not parse.
    pub fn of(ds: &DaemonSet) -> Result<Placement, String> {
        let mut spec = ds.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
        add_daemon_tolerations(&mut spec);
        let json = serde_json::to_value(&spec).map_err(|e| e.to_string())?;
        let needs = PodNeeds::of_spec(&json).map_err(|e| e.to_string())?;
        Ok(Placement { node_name: spec.node_name.filter(|n| !n.is_empty()), needs })
    }

    /// Whether `node` should run a daemon pod. Only the node's name, labels and taints count:
    /// not its readiness or cordon, which daemon pods tolerate.
    pub fn on(&self, node: &Node) -> Fit {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if self.node_name.as_deref().is_some_and(|n| n != name) {
            return Fit::default();
        }
        let json = serde_json::to_value(node).unwrap_or_default();
        let facts = NodeFacts { ready: true, unschedulable: false, ..NodeFacts::of_node(&json) };
        // The node's name and labels first: a misfit there is final, whatever the taints.
        let untainted = NodeFacts { taints: Vec::new(), ..facts.clone() };
        if self.needs.check(&untainted).is_err() {
            return Fit::default();
        }
        if self.needs.check(&facts).is_ok() {
            return Fit { should_run: true, should_continue: true };
        }
        let mut no_execute = facts;
        no_execute.taints.retain(|t| t.effect == "NoExecute");
        Fit { should_run: false, should_continue: self.needs.check(&no_execute).is_ok() }
    }
}

fn node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// `pods` oldest first, bound ones before unbound ones (`podByCreationTimestampAndPhase`).
pub fn sort_oldest_first(pods: &mut [&Pod]) {
    pods.sort_by(|a, b| {
        node_name(a).is_empty().cmp(&node_name(b).is_empty()).then_with(|| {
            let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b)).then_with(|| a.metadata.name.cmp(&b.metadata.name))
        })
    });
}

/// The DaemonSet's `maxSurge` or `maxUnavailable` of `total` pods: 0 unless it rolls
/// (`SurgeCount`, `UnavailableCount`; percentages round up).
fn rolling_count(ds: &DaemonSet, total: i32, surge: bool) -> Result<i32, String> {
    let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate") != "RollingUpdate" {
        return Ok(0);
    }
    let Some(rolling) = strategy.and_then(|s| s.rolling_update.as_ref()) else { return Ok(0) };
    let value = if surge { rolling.max_surge.as_ref() } else { rolling.max_unavailable.as_ref() };
    match value {
        None if surge => Ok(0),
        None => scaled(&IntOrString::Int(0), total, true),
        Some(v) => scaled(v, total, true),
    }
}

/// Whether the DaemonSet may run two pods on a node while it rolls (`AllowsSurge`).
pub fn allows_surge(ds: &DaemonSet) -> bool {
    rolling_count(ds, 1, true).is_ok_and(|s| s > 0)
}

/// Whether the DaemonSet rolls its pods over by itself (`RollingUpdate`, the default) rather
/// than waiting for them to be deleted (`OnDelete`).
pub fn is_rolling(ds: &DaemonSet) -> bool {
    let strategy = ds.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    strategy.and_then(|s| s.type_.as_deref()).unwrap_or("RollingUpdate") == "RollingUpdate"
}

/// The DaemonSet's `minReadySeconds`.
pub fn min_ready_seconds(ds: &DaemonSet) -> i32 {
    ds.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

/// The backoff before another failed daemon pod on one node is deleted
/// (`flowcontrol.Backoff` as the controller makes it: 1 s, doubling to 15 min, forgotten after
/// twice that without a failure).
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    entries: HashMap<String, (Duration, Instant)>,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::new(Duration::from_secs(1), Duration::from_secs(15 * 60))
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max, entries: HashMap::new() }
    }

    fn expired(&self, now: Instant, last: Instant) -> bool {
        now.saturating_duration_since(last) > self.max * 2
    }

    /// The wait left for `key` at `now`, if it is backing off (`IsInBackOffSinceUpdate`, `Get`).
    pub fn waiting(&self, key: &str, now: Instant) -> Option<Duration> {
        let (delay, last) = *self.entries.get(key)?;
        let since = now.saturating_duration_since(last);
        (!self.expired(now, last) && since < delay).then_some(delay)
    }

    /// Record a failure of `key` at `now` (`Next`).
    pub fn next(&mut self, key: &str, now: Instant) {
        let delay = match self.entries.get(key) {
            Some(&(delay, last)) if !self.expired(now, last) => (delay * 2).min(self.max),
            _ => self.initial,
        };
        self.entries.insert(key.to_owned(), (delay, now));
    }

    /// Forget the keys not updated for twice the longest delay (`GC`).
    pub fn forget_old(&mut self, now: Instant) {
        let max = self.max * 2;
        self.entries.retain(|_, (_, last)| now.saturating_duration_since(*last) <= max);
    }
}

/// A daemon pod to report before it is deleted: `FailedDaemonPod` or `SucceededDaemonPod`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    pub pod: String,
    pub node: String,
    pub failed: bool,
}

/// What the DaemonSet's pods need to become one per node (`manage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Nodes to make a daemon pod for.
    pub create_on: Vec<String>,
    /// Pods to delete.
    pub delete: Vec<String>,
    /// Finished pods among `delete`, to report.
    pub finished: Vec<Finished>,
    /// When to look again for a failed pod whose deletion is backing off.
    pub retry_after: Option<Duration>,
}

/// What a reconcile observes: the DaemonSet's pods by the node each is for, and how each node
/// fits the DaemonSet.
#[derive(Debug, Default)]
pub struct Observed<'a> {
    /// Each node and its fit, in name order.
    pub nodes: Vec<(String, Fit)>,
    /// The DaemonSet's pods by target node.
    pub pods: BTreeMap<String, Vec<&'a Pod>>,
}

impl<'a> Observed<'a> {
    /// Group `owned` by target node (a pod with none is left out, as Kubernetes leaves it).
    pub fn new(nodes: Vec<(String, Fit)>, owned: &'a [Pod]) -> Observed<'a> {
        let mut pods: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
        for pod in owned {
            match target_node(pod) {
                Some(node) => pods.entry(node).or_default().push(pod),
                None => {
                    tracing::debug!(pod = ?pod.metadata.name, "a daemon pod without a target node")
                }
            }
        }
        Observed { nodes, pods }
    }

    fn fit(&self, node: &str) -> Option<Fit> {
        self.nodes.iter().find(|(n, _)| n == node).map(|(_, f)| *f)
    }
}

fn hash_label(pod: &Pod) -> Option<&str> {
    pod.metadata.labels.as_ref()?.get(HASH_LABEL).map(String::as_str)
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The pods to create and delete so that each node that should runs one daemon pod and no other
/// does (`manage` and `podsShouldBeOnNode`). Failed pods are deleted (a node's next one only
/// after `backoff` allows, keyed by `backoff_key(node)`), succeeded pods too; of several pods on
/// a node the oldest is kept, or while surging the oldest of the current template and the oldest
/// of an older one until the new one is available. Unbound pods for nodes that are gone are
/// deleted (`getUnscheduledPodsWithoutNode`).
#[allow(clippy::too_many_arguments)]
pub fn manage(
    observed: &Observed<'_>,
    hash: &str,
    surge: bool,
    min_ready_seconds: i32,
    now: DateTime<Utc>,
    backoff: &mut Backoff,
    backoff_key: impl Fn(&str) -> String,
    instant: Instant,
) -> Plan {
    let mut plan = Plan::default();
    for (node, fit) in &observed.nodes {
        let pods = observed.pods.get(node);
        match (fit, pods) {
            (Fit { should_run: true, .. }, None) => plan.create_on.push(node.clone()),
            (Fit { should_continue: true, should_run }, Some(pods)) => {
                let mut running: Vec<&Pod> = Vec::new();
                for pod in pods.iter().copied().filter(|p| !is_deleting(p)) {
                    match pods::phase(pod) {
                        "Failed" => {
                            let key = backoff_key(node);
                            if let Some(delay) = backoff.waiting(&key, instant) {
                                plan.retry_after =
                                    Some(plan.retry_after.map_or(delay, |d| d.min(delay)));
                                continue;
                            }
                            backoff.next(&key, instant);
                            plan.finished.push(Finished {
                                pod: name(pod),
                                node: node.clone(),
                                failed: true,
                            });
                            plan.delete.push(name(pod));
                        }
                        "Succeeded" => {
                            plan.finished.push(Finished {
                                pod: name(pod),
                                node: node.clone(),
                                failed: false,
                            });
                            plan.delete.push(name(pod));
                        }
                        _ => running.push(pod),
                    }
                }
                sort_oldest_first(&mut running);
                if !surge {
                    plan.delete.extend(running.iter().skip(1).map(|p| name(p)));
                    continue;
                }
                if running.is_empty() {
                    if *should_run {
                        plan.create_on.push(node.clone());
                    }
                    continue;
                }
                let label = |p: &Pod| hash_label(p).map(str::to_owned);
                let (mut oldest_new, mut oldest_old): (Option<&Pod>, Option<&Pod>) = (None, None);
                for pod in running {
                    let slot = if label(pod).is_some_and(|h| h == hash) {
                        &mut oldest_new
                    } else {
                        &mut oldest_old
                    };
                    if slot.is_none() {
                        *slot = Some(pod);
                    } else {
                        plan.delete.push(name(pod));
                    }
                }
                if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
                    if !pods::is_ready(old) || pods::is_available(new, min_ready_seconds, now) {
                        plan.delete.push(name(old));
                    }
                }
            }
            (Fit { should_continue: false, .. }, Some(pods)) => {
                plan.delete.extend(pods.iter().filter(|p| !is_deleting(p)).map(|p| name(p)));
            }
            _ => {}
        }
    }
    for (node, pods) in &observed.pods {
        if observed.fit(node).is_none() {
            plan.delete.extend(pods.iter().filter(|p| node_name(p).is_empty()).map(|p| name(p)));
        }
    }
    plan
}

/// The newest-template and older pod on a node, if it has at most one of each not being
/// deleted (`findUpdatedPodsOnNode`); `None` when it has more, for `manage` to prune.
fn updated_and_old<'a>(
    pods: &[&'a Pod],
    hash: &str,
    generation: Option<i64>,
) -> Option<(Option<&'a Pod>, Option<&'a Pod>)> {
    let (mut new, mut old) = (None, None);
    for pod in pods.iter().copied().filter(|p| !is_deleting(p)) {
        let slot = if is_updated(pod, hash, generation) { &mut new } else { &mut old };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// One step of a rolling update: pods to delete and nodes to make a new pod on (`rollingUpdate`).
///
/// Without surge, old pods are deleted while fewer than `maxUnavailable` daemon pods are
/// unavailable (an old pod that is unavailable anyway always may be), and `manage` makes their
/// successors. With surge, a new pod is made beside an old one (at most `maxSurge` at once,
/// beside every old pod that is unavailable), and the old one is deleted once the new one is
/// available. An error for a `maxSurge` or `maxUnavailable` that does not parse, or a surging
/// pod on a node that is gone.
pub fn rolling_update(
    ds: &DaemonSet,
    observed: &Observed<'_>,
    hash: &str,
    now: DateTime<Utc>,
) -> Result<(Vec<String>, Vec<String>), String> {
    let generation = template_generation(ds);
    let min_ready = min_ready_seconds(ds);
    let available = |p: &Pod| pods::is_available(p, min_ready, now);
    // Every node that should run a pod, with its pods (none for some).
    let mut by_node: BTreeMap<&str, Vec<&Pod>> =
        observed.pods.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    let mut desired = 0;
    for (node, fit) in &observed.nodes {
        if fit.should_run {
            desired += 1;
            by_node.entry(node.as_str()).or_default();
        }
    }
    let mut max_unavailable = rolling_count(ds, desired, false)
        .map_err(|e| format!("invalid value for MaxUnavailable: {e}"))?;
    let max_surge =
        rolling_count(ds, desired, true).map_err(|e| format!("invalid value for MaxSurge: {e}"))?;
    if desired > 0 && max_unavailable == 0 && max_surge == 0 {
        max_unavailable = 1;
    }

    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replace: Vec<String> = Vec::new();
        let mut candidates: Vec<String> = Vec::new();
        for pods in by_node.values() {
            let Some(pair) = updated_and_old(pods, hash, generation) else {
                unavailable += 1;
                continue;
            };
            match pair {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !available(old) {
                        replace.push(name(old));
                        unavailable += 1;
                    } else if unavailable < max_unavailable {
                        candidates.push(name(old));
                    }
                }
            }
        }
        let room = usize::try_from((max_unavailable - unavailable).max(0)).unwrap_or(0);
        replace.extend(candidates.into_iter().take(room));
        return Ok((replace, Vec::new()));
    }

    let mut delete: Vec<String> = Vec::new();
    let mut should_not_run: Vec<String> = Vec::new();
    let mut candidates: Vec<String> = Vec::new();
    let mut allowed: Vec<String> = Vec::new();
    let (mut surging, mut available_count) = (0, 0);
    for (node, pods) in &by_node {
        let Some((new, old)) = updated_and_old(pods, hash, generation) else {
            surging += 1;
            continue;
        };
        if let Some(pod) = old.or(new) {
            if available(pod) {
                available_count += 1;
            }
        }
        let fit =
            || observed.fit(node).ok_or_else(|| format!("couldn't get node for nodeName {node:?}"));
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !fit()?.should_run {
                    if available(old) {
                        should_not_run.push(name(old));
                    } else {
                        delete.push(name(old));
                    }
                } else if !available(old) {
                    allowed.push((*node).to_owned());
                } else if surging < max_surge {
                    candidates.push((*node).to_owned());
                }
            }
            (Some(new), Some(old)) => {
                if available(new) {
                    delete.push(name(old));
                } else {
                    surging += 1;
                }
            }
        }
    }
    // A pod on a node it should no longer run on goes only once another is available instead.
    let deletable = usize::try_from((available_count - desired).max(0)).unwrap_or(0);
    delete.extend(should_not_run.into_iter().take(deletable));
    let room = usize::try_from((max_surge - surging).max(0)).unwrap_or(0);
    allowed.extend(candidates.into_iter().take(room));
    Ok((delete, allowed))
}

/// The counts of a DaemonSet's status (`updateDaemonSetStatus`): of the nodes that should run
/// its pod, those that have one, whose oldest pod is ready, available and of the current
/// template; and the nodes that have one but should not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub desired: i32,
    pub current: i32,
    pub misscheduled: i32,
    pub ready: i32,
    pub updated: i32,
    pub available: i32,
    pub unavailable: i32,
}

/// The counts `observed` makes for a DaemonSet whose current template has `hash`.
pub fn counts(
    observed: &Observed<'_>,
    hash: &str,
    generation: Option<i64>,
    min_ready_seconds: i32,
    now: DateTime<Utc>,
) -> Counts {
    let mut c = Counts::default();
    for (node, fit) in &observed.nodes {
        let pods = observed.pods.get(node).filter(|p| !p.is_empty());
        match (fit.should_run, pods) {
            (true, None) => c.desired += 1,
            (true, Some(pods)) => {
                c.desired += 1;
                c.current += 1;
                let mut pods = pods.clone();
                sort_oldest_first(&mut pods);
                let oldest = pods[0];
                if pods::is_ready(oldest) {
                    c.ready += 1;
                    if pods::is_available(oldest, min_ready_seconds, now) {
                        c.available += 1;
                    }
                }
                if is_updated(oldest, hash, generation) {
                    c.updated += 1;
                }
            }
            (false, Some(_)) => c.misscheduled += 1,
            (false, None) => {}
        }
    }
    c.unavailable = c.desired - c.available;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn ds(spec: Value) -> DaemonSet {
        let mut v = json!({
            "metadata": {"name": "agent", "namespace": "default", "uid": "u1",
                         "annotations": {TEMPLATE_GENERATION: "1"}},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": {
                    "metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": "agent:1"}]},
                },
            },
        });
        merge(&mut v, spec);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn node(name: &str, extra: Value) -> Node {
        let mut v = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    /// A pod for `node` (unbound, by affinity), created at second `created`.
    fn pod(name: &str, node: &str, created: u32, extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "labels": {HASH_LABEL: "new"},
                         "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
            "spec": {"containers": [], "affinity": serde_json::to_value(node_name_affinity(None, node)).unwrap()},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn ready() -> Value {
        json!({"status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    }

    fn old_hash() -> Value {
        json!({"metadata": {"labels": {HASH_LABEL: "old"}}})
    }

    fn with(mut a: Value, b: Value) -> Value {
        merge(&mut a, b);
        a
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:10:00Z").unwrap().with_timezone(&Utc)
    }

    fn fits(placement: &Placement, nodes: &[Node]) -> Vec<(String, Fit)> {
        nodes.iter().map(|n| (n.metadata.name.clone().unwrap(), placement.on(n))).collect()
    }

    fn plan(ds: &DaemonSet, nodes: &[Node], pods: &[Pod]) -> Plan {
        let placement = Placement::of(ds).unwrap();
        let observed = Observed::new(fits(&placement, nodes), pods);
        let mut backoff = Backoff::default();
        manage(
            &observed,
            "new",
            allows_surge(ds),
            0,
            now(),
            &mut backoff,
            |n| n.to_owned(),
            Instant::now(),
        )
    }

    const RUN: Fit = Fit { should_run: true, should_continue: true };
    const STAY: Fit = Fit { should_run: false, should_continue: true };
    const NONE: Fit = Fit { should_run: false, should_continue: false };

    #[test]
    fn selectors_affinity_node_name_and_taints_decide_where_pods_belong() {
        let plain = Placement::of(&ds(json!({}))).unwrap();
        assert_eq!(plain.on(&node("a", json!({}))), RUN);
        // Readiness and cordon do not count; untolerated NoSchedule keeps new pods off,
        // NoExecute removes them too.
        let cordoned = node(
            "a",
            json!({"spec": {"unschedulable": true}, "status": {"conditions": [
            {"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(plain.on(&cordoned), RUN);
        let taint = |effect: &str| {
            node(
                "a",
                json!({"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": effect}]}}),
            )
        };
        assert_eq!(plain.on(&taint("NoSchedule")), STAY);
        assert_eq!(plain.on(&taint("NoExecute")), NONE);
        assert_eq!(plain.on(&taint("PreferNoSchedule")), RUN);
        // The daemon tolerations cover node problems.
        let problems = node(
            "a",
            json!({"spec": {"taints": [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(plain.on(&problems), RUN);
        let no_network = node(
            "a",
            json!({"spec": {"taints": [
            {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(plain.on(&no_network), STAY);
        let host_network = ds(json!({"spec": {"template": {"spec": {"hostNetwork": true}}}}));
        assert_eq!(Placement::of(&host_network).unwrap().on(&no_network), RUN);
        let tolerant = ds(json!({"spec": {"template": {"spec": {"tolerations": [
            {"key": "dedicated", "operator": "Exists"}]}}}}));
        assert_eq!(Placement::of(&tolerant).unwrap().on(&taint("NoExecute")), RUN);

        // A selector or affinity that does not match is final, whatever the taints.
        let selected = Placement::of(&ds(json!({"spec": {"template": {"spec": {
            "nodeSelector": {"gpu": "yes"}}}}})))
        .unwrap();
        assert_eq!(selected.on(&node("a", json!({}))), NONE);
        assert_eq!(selected.on(&node("a", json!({"metadata": {"labels": {"gpu": "yes"}}}))), RUN);
        let affine = Placement::of(&ds(json!({"spec": {"template": {"spec": {"affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}}}}})))
        .unwrap();
        assert_eq!(affine.on(&node("a", json!({"metadata": {"labels": {"zone": "z2"}}}))), NONE);
        assert_eq!(affine.on(&node("a", json!({"metadata": {"labels": {"zone": "z1"}}}))), RUN);
        let named =
            Placement::of(&ds(json!({"spec": {"template": {"spec": {"nodeName": "b"}}}}))).unwrap();
        assert_eq!(named.on(&node("a", json!({}))), NONE);
        assert_eq!(named.on(&node("b", json!({}))), RUN);
    }

    #[test]
    fn a_pod_for_a_node_is_bound_by_affinity_labelled_and_tolerates_node_problems() {
        let set = ds(json!({"spec": {"template": {"spec": {
        "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                         "effect": "NoSchedule"}, {"key": "mine", "operator": "Exists"}],
        "affinity": {"podAntiAffinity": {}, "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]},
        }}}}}}));
        let template = pod_template(&set, "h1");
        let labels = template.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels.get(HASH_LABEL).map(String::as_str), Some("h1"));
        assert_eq!(labels.get(TEMPLATE_GENERATION_LABEL).map(String::as_str), Some("1"));
        assert_eq!(labels.get("app").map(String::as_str), Some("agent"));
        let spec = template.spec.unwrap();
        let keys: Vec<&str> = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| t.key.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/unschedulable",
                "mine",
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/disk-pressure",
                "node.kubernetes.io/memory-pressure",
                "node.kubernetes.io/pid-pressure",
            ],
            "a toleration the template has already is kept in its place"
        );
        let affinity = node_name_affinity(spec.affinity, "n1");
        assert!(affinity.pod_anti_affinity.is_some(), "the rest of the affinity is kept");
        assert_eq!(
            serde_json::to_value(&affinity.node_affinity).unwrap(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}})
        );

        let p = pod("p", "n1", 0, json!({}));
        assert_eq!(target_node(&p).as_deref(), Some("n1"));
        let bound = pod("p", "n1", 0, json!({"spec": {"nodeName": "n2"}}));
        assert_eq!(target_node(&bound).as_deref(), Some("n2"), "nodeName wins once bound");
        let nowhere: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(target_node(&nowhere), None);
    }

    #[test]
    fn pods_are_updated_by_hash_or_by_template_generation() {
        let p = pod("p", "n", 0, json!({"metadata": {"labels": {TEMPLATE_GENERATION_LABEL: "2"}}}));
        assert!(is_updated(&p, "new", None));
        assert!(!is_updated(&p, "other", None));
        assert!(is_updated(&p, "other", Some(2)));
        assert!(!is_updated(&p, "", Some(3)));
    }

    #[test]
    fn manage_makes_one_pod_per_fitting_node_and_removes_the_rest() {
        let set = ds(json!({}));
        let nodes = [
            node("a", json!({})),
            node("b", json!({})),
            node("c", json!({"spec": {"taints": [{"key": "k", "effect": "NoExecute"}]}})),
            node("d", json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})),
        ];
        let pods = [
            // Two on a: the newer goes.
            pod("a-old", "a", 1, json!({})),
            pod("a-new", "a", 2, json!({})),
            // c should not run one: it goes; d keeps its pod but gets none.
            pod("c-1", "c", 1, json!({})),
            pod("d-1", "d", 1, json!({})),
            // An unbound pod for a node that is gone goes; a bound one is podgc's.
            pod("gone-1", "gone", 1, json!({})),
            pod("gone-2", "gone2", 1, json!({"spec": {"nodeName": "gone2"}})),
            // Being deleted: not counted, not deleted again.
            pod("c-2", "c", 3, json!({"metadata": {"deletionTimestamp": "2026-01-01T00:01:00Z"}})),
        ];
        let plan = plan(&set, &nodes, &pods);
        assert_eq!(plan.create_on, ["b"]);
        assert_eq!(plan.delete, ["a-new", "c-1", "gone-1"]);
        assert!(plan.finished.is_empty());
    }

    #[test]
    fn finished_pods_are_deleted_and_failed_ones_back_off_per_node() {
        let set = ds(json!({}));
        let nodes = [node("a", json!({})), node("b", json!({}))];
        let pods = [
            pod("a-1", "a", 1, json!({"status": {"phase": "Failed"}})),
            pod("b-1", "b", 1, json!({"status": {"phase": "Succeeded"}})),
        ];
        let placement = Placement::of(&set).unwrap();
        let observed = Observed::new(fits(&placement, &nodes), &pods);
        let mut backoff = Backoff::default();
        let start = Instant::now();
        let first = manage(&observed, "new", false, 0, now(), &mut backoff, |n| n.into(), start);
        assert_eq!(first.delete, ["a-1", "b-1"]);
        assert_eq!(
            first.finished,
            [
                Finished { pod: "a-1".into(), node: "a".into(), failed: true },
                Finished { pod: "b-1".into(), node: "b".into(), failed: false },
            ]
        );
        assert!(first.create_on.is_empty(), "the successor waits for the pod to be gone");
        // A second failure on the node within the backoff waits.
        let soon = start + Duration::from_millis(500);
        let second = manage(&observed, "new", false, 0, now(), &mut backoff, |n| n.into(), soon);
        assert_eq!(second.delete, ["b-1"]);
        assert_eq!(second.retry_after, Some(Duration::from_secs(1)));
        let later = start + Duration::from_secs(2);
        let third = manage(&observed, "new", false, 0, now(), &mut backoff, |n| n.into(), later);
        assert_eq!(third.delete, ["a-1", "b-1"]);
        assert_eq!(
            backoff.waiting("a", later + Duration::from_secs(1)),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn backoff_doubles_to_its_limit_and_is_forgotten() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(4));
        let t = Instant::now();
        assert_eq!(b.waiting("k", t), None);
        b.next("k", t);
        assert_eq!(b.waiting("k", t), Some(Duration::from_secs(1)));
        assert_eq!(b.waiting("k", t + Duration::from_secs(1)), None);
        for _ in 0..4 {
            b.next("k", t);
        }
        assert_eq!(b.waiting("k", t), Some(Duration::from_secs(4)), "at most the limit");
        b.next("k", t + Duration::from_secs(9));
        assert_eq!(b.waiting("k", t + Duration::from_secs(9)), Some(Duration::from_secs(1)));
        b.forget_old(t + Duration::from_secs(18));
        assert_eq!(b.waiting("k", t + Duration::from_secs(9)), None);
    }

    #[test]
    fn surging_keeps_an_old_ready_pod_until_its_successor_is_available() {
        let set = ds(json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}));
        let nodes = [node("a", json!({})), node("b", json!({})), node("c", json!({}))];
        let pods = [
            pod("a-old", "a", 1, with(ready(), old_hash())),
            pod("a-new", "a", 2, json!({})),
            pod("b-old", "b", 1, with(ready(), old_hash())),
            pod("b-new", "b", 2, ready()),
            pod("c-old", "c", 1, old_hash()),
            pod("c-new", "c", 2, json!({})),
        ];
        let plan = plan(&set, &nodes, &pods);
        assert_eq!(plan.delete, ["b-old", "c-old"]);
        assert!(plan.create_on.is_empty());
    }

    fn observed<'a>(nodes: &[(&str, Fit)], pods: &'a [Pod]) -> Observed<'a> {
        Observed::new(nodes.iter().map(|(n, f)| ((*n).to_owned(), *f)).collect(), pods)
    }

    #[test]
    fn a_rolling_update_replaces_at_most_max_unavailable_available_pods() {
        let set = ds(json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 2}}}}));
        let pods = [
            pod("a", "a", 1, with(ready(), old_hash())),
            pod("b", "b", 1, with(ready(), old_hash())),
            pod("c", "c", 1, with(ready(), old_hash())),
            pod("d", "d", 1, old_hash()),
            pod("e", "e", 1, ready()),
        ];
        let nodes = [("a", RUN), ("b", RUN), ("c", RUN), ("d", RUN), ("e", RUN)];
        let (delete, create) =
            rolling_update(&set, &observed(&nodes, &pods), "new", now()).unwrap();
        // d is unavailable anyway and uses one of the two; one available old pod joins it.
        assert_eq!(delete, ["d", "a"]);
        assert!(create.is_empty());

        // A node without its pod counts as unavailable: only one more may go.
        let nodes = [("a", RUN), ("b", RUN), ("c", RUN), ("e", RUN)];
        let (delete, _) =
            rolling_update(&set, &observed(&nodes, &pods[..3]), "new", now()).unwrap();
        assert_eq!(delete, ["a"]);

        // Percentages round up: 25% of 3 is 1.
        let set = ds(json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "25%"}}}}));
        let nodes = [("a", RUN), ("b", RUN), ("c", RUN)];
        let (delete, _) =
            rolling_update(&set, &observed(&nodes, &pods[..3]), "new", now()).unwrap();
        assert_eq!(delete, ["a"]);
    }

    #[test]
    fn a_surging_update_makes_new_pods_beside_old_ones() {
        let set = ds(json!({"spec": {"updateStrategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}));
        let pods = [
            pod("a", "a", 1, with(ready(), old_hash())),
            pod("b", "b", 1, with(ready(), old_hash())),
            pod("c", "c", 1, old_hash()),
            pod("gone", "x", 1, with(ready(), old_hash())),
        ];
        let nodes = [("a", RUN), ("b", RUN), ("c", RUN), ("x", NONE)];
        let (delete, create) =
            rolling_update(&set, &observed(&nodes, &pods), "new", now()).unwrap();
        // c's old pod is unavailable: its successor comes at once; one more surges (a).
        assert_eq!(create, ["c", "a"]);
        // x's pod stays until another is available instead of it (3 desired, 3 available).
        assert!(delete.is_empty(), "{delete:?}");
        let missing = [("a", RUN)];
        assert!(rolling_update(&set, &observed(&missing, &pods[..2]), "new", now()).is_err());
    }

    #[test]
    fn status_counts_read_the_oldest_pod_of_each_node() {
        let pods = [
            pod("a-1", "a", 1, ready()),
            pod("a-2", "a", 2, old_hash()),
            pod("b-1", "b", 1, with(ready(), old_hash())),
            pod("c-1", "c", 1, json!({})),
            pod("x-1", "x", 1, ready()),
        ];
        let nodes = [("a", RUN), ("b", RUN), ("c", RUN), ("d", RUN), ("x", STAY)];
        let c = counts(&observed(&nodes, &pods), "new", None, 0, now());
        assert_eq!(
            c,
            Counts {
                desired: 4,
                current: 3,
                misscheduled: 1,
                ready: 2,
                updated: 2,
                available: 2,
                unavailable: 2
            }
        );
        // minReadySeconds: ready since 00:00:00, now 00:10:00.
        let c = counts(&observed(&nodes, &pods), "new", None, 3600, now());
        assert_eq!((c.ready, c.available, c.unavailable), (2, 0, 4));
    }

    #[test]
    fn bound_pods_sort_before_unbound_then_oldest_first() {
        let a = pod("a", "n", 3, json!({"spec": {"nodeName": "n"}}));
        let b = pod("b", "n", 1, json!({}));
        let c = pod("c", "n", 2, json!({"spec": {"nodeName": "n"}}));
        let d = pod("d", "n", 2, json!({"spec": {"nodeName": "n"}}));
        let mut pods = vec![&a, &b, &d, &c];
        sort_oldest_first(&mut pods);
        let names: Vec<&str> = pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["c", "d", "a", "b"]);
    }
}
