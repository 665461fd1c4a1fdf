//! The disruption controller (kube-controller-manager's `disruption` controller,
//! `pkg/controller/disruption`): it keeps each PodDisruptionBudget's status, which the eviction
//! subresource reads and decrements.
//!
//! For a budget, a reconcile reads the pods its selector matches (all of them, finished ones
//! too), and as `trySync` does:
//! - `expectedPods`: for an integer `minAvailable`, the number of those pods; otherwise (a
//!   percent, or `maxUnavailable`) the sum of the scale of their controllers — a Deployment
//!   through its ReplicaSet, a ReplicaSet, a ReplicationController, a StatefulSet, or any kind
//!   with a `scale` subresource. Pods without a controller are reported (`UnmanagedPods`).
//! - `desiredHealthy`: `minAvailable`, or `expectedPods` less `maxUnavailable`, percents rounded
//!   up; `currentHealthy`: the pods that are ready, not being deleted and not among the
//!   `disruptedPods` the eviction subresource recorded in the last two minutes (older entries
//!   are dropped, and the pod gets a `NotDeleted` warning);
//! - `disruptionsAllowed`: `currentHealthy - desiredHealthy`, never below 0, and 0 while no pod
//!   is expected; the condition `DisruptionAllowed` (`SufficientPods` / `InsufficientPods`).
//!
//! A budget whose status cannot be computed gets `disruptionsAllowed: 0` and
//! `DisruptionAllowed=False`, `SyncFailed`, with the error (`failSafe`). The controller is woken
//! by its budgets and by the pods they select; a budget with recorded disruptions is looked at
//! again when the first of them expires.
//!
//! Where it differs: every budget selecting a changed pod is woken (kube-controller-manager wakes
//! one and warns `MultiplePodDisruptionBudgets` on the pod); a `DisruptionTarget` condition left
//! on a pod whose eviction did not delete it is not reset after two minutes (this cluster's
//! evictions delete at once).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::replicaset::selector::Selector;
use crate::{owners, pods, Context, Error};

/// The component the disruption controller writes Events as (kube-controller-manager's).
pub const COMPONENT: &str = "controllermanager";
/// How long a disruption the eviction subresource recorded counts before the pod is expected
/// gone (`DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(120);
/// The budget's condition.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// `DisruptionAllowed=True`: more pods are healthy than needed.
pub const SUFFICIENT_PODS: &str = "SufficientPods";
/// `DisruptionAllowed=False`: no more than needed are healthy.
pub const INSUFFICIENT_PODS: &str = "InsufficientPods";
/// `DisruptionAllowed=False`: the status could not be computed.
pub const SYNC_FAILED: &str = "SyncFailed";

struct Shared {
    client: kube::Client,
    recorder: Recorder,
}

/// Run the disruption controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let shared = Arc::new(Shared { client: client.clone(), recorder: context.recorder(COMPONENT) });
    let controller = Controller::new(
        Api::<PodDisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
    );
    let budgets = controller.store();
    controller
        .watches(Api::<Pod>::all(client), watcher::Config::default(), move |pod| {
            budgets_of_pod(&budgets, &pod)
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

/// The budgets (as last seen) whose selector matches `pod`.
fn budgets_of_pod(
    budgets: &Store<PodDisruptionBudget>,
    pod: &Pod,
) -> Vec<ObjectRef<PodDisruptionBudget>> {
    let Some(namespace) = pod.metadata.namespace.as_deref() else { return Vec::new() };
    budgets
        .state()
        .into_iter()
        .filter(|b| b.metadata.namespace.as_deref() == Some(namespace))
        .filter(|b| {
            selector_of(b.spec.as_ref())
                .is_ok_and(|s| s.is_some_and(|s| s.matches(pod.metadata.labels.as_ref())))
        })
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

fn error_policy(budget: Arc<PodDisruptionBudget>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(budget = %budget.name_any(), %error, "disruption budget sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::Api(kube::Error::Api(s)) if s.code == 409)
}

/// The selector of a budget: `None` (no selector) selects no pod, an empty one every pod of
/// its namespace (`LabelSelectorAsSelector`).
fn selector_of(spec: Option<&PodDisruptionBudgetSpec>) -> Result<Option<Selector>, String> {
    match spec.and_then(|s| s.selector.as_ref()) {
        None => Ok(None),
        Some(selector) => Selector::from_label_selector(selector).map(Some),
    }
}

/// Now, in whole seconds (as times are written).
fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

async fn reconcile(budget: Arc<PodDisruptionBudget>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = budget.namespace().unwrap_or_default();
    let api: Api<PodDisruptionBudget> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version: the one that triggered this reconcile may be older than a write.
    let Some(budget) = api.get_opt(&budget.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let sync = Sync { shared: &shared, api: &api, target: target(&budget) };
    match sync.try_sync(&budget).await {
        Ok(action) => Ok(action),
        Err(e) if is_conflict(&e) => Err(e),
        Err(e) => {
            tracing::debug!(budget = %budget.name_any(), error = %e, "failed to sync a disruption budget");
            sync.write(&budget, fail_safe(&budget, &e.to_string(), now())).await?;
            match e {
                // The API may answer next time.
                Error::Api(_) => Ok(Action::requeue(Duration::from_secs(5))),
                Error::Invalid(_) => Ok(Action::await_change()),
            }
        }
    }
}

fn target(budget: &PodDisruptionBudget) -> EventTarget {
    EventTarget {
        api_version: "policy/v1".into(),
        kind: "PodDisruptionBudget".into(),
        namespace: budget.namespace().unwrap_or_default(),
        name: budget.name_any(),
        uid: budget.uid(),
    }
}

/// One reconcile of one budget.
struct Sync<'a> {
    shared: &'a Shared,
    api: &'a Api<PodDisruptionBudget>,
    target: EventTarget,
}

impl Sync<'_> {
    async fn record(&self, target: &EventTarget, kind: EventType, reason: &str, message: &str) {
        if let Err(error) = self.shared.recorder.record(target, kind, reason, message).await {
            tracing::warn!(%error, reason, "recording an event");
        }
    }

    /// `trySync`: the status from the pods; when to look again.
    async fn try_sync(&self, budget: &PodDisruptionBudget) -> Result<Action, Error> {
        let namespace = self.target.namespace.clone();
        let selector = match selector_of(budget.spec.as_ref()) {
            Ok(selector) => selector,
            Err(why) => {
                let message = format!("Failed to get pods: {why}");
                self.record(&self.target, EventType::Warning, "NoPods", &message).await;
                return Err(Error::Invalid(why));
            }
        };
        let pod_api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        let pods: Vec<Pod> = match &selector {
            None => Vec::new(),
            Some(selector) => pod_api
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|p| selector.matches(p.metadata.labels.as_ref()))
                .collect(),
        };
        if pods.is_empty() {
            self.record(&self.target, EventType::Normal, "NoPods", "No matching pods found").await;
        }

        let spec = budget.spec.clone().unwrap_or_default();
        let counted = if needs_scale(&spec) {
            let scales = Scales { client: &self.shared.client, namespace: &namespace };
            match expected_scale(&pods, |r| scales.of(r)).await {
                Ok(counted) => counted,
                Err(e) => {
                    let message = format!("Failed to calculate the number of expected pods: {e}");
                    self.record(
                        &self.target,
                        EventType::Warning,
                        "CalculateExpectedPodCountFailed",
                        &message,
                    )
                    .await;
                    return Err(e);
                }
            }
        } else {
            Counted { expected: count(pods.len()), unmanaged: Vec::new() }
        };
        if !counted.unmanaged.is_empty() {
            tracing::debug!(budget = %self.target.name, pods = ?counted.unmanaged, "unmanaged pods");
            let message = format!(
                "Pods selected by this PodDisruptionBudget (selector: {}) were found to be \
                 unmanaged. As a result, the status of the PDB cannot be calculated correctly, \
                 which may result in undefined behavior. To account for these pods please set \
                 \".spec.minAvailable\" field of the PDB to an integer value.",
                go_selector(spec.selector.as_ref())
            );
            self.record(&self.target, EventType::Warning, "UnmanagedPods", &message).await;
        }
        let desired = desired_healthy(&spec, counted.expected).map_err(Error::Invalid)?;

        let now = now();
        let recorded = budget.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
        let disrupted = disrupted_pods(&pods, recorded, now);
        for name in &disrupted.expired {
            let pod = pods.iter().find(|p| p.metadata.name.as_deref() == Some(name));
            let uid = pod.and_then(|p| p.metadata.uid.clone());
            // kube-controller-manager names the budget's namespace twice here.
            let message = format!(
                "Pod was expected by PDB {namespace}/{namespace} to be deleted but it wasn't"
            );
            let target = EventTarget::pod(&namespace, name, uid);
            self.record(&target, EventType::Warning, "NotDeleted", &message).await;
        }
        let current = current_healthy(&pods, &disrupted.kept, now);
        let counts = Counts { current, desired, expected: counted.expected };
        if let Some(status) = status(budget, counts, disrupted.kept, now) {
            self.write(budget, status).await?;
        }
        Ok(match disrupted.recheck {
            Some(at) => {
                let wait = at.as_second().saturating_sub(now.as_second()).max(1);
                Action::requeue(Duration::from_secs(wait.unsigned_abs()))
            }
            None => Action::await_change(),
        })
    }

    /// Write `status` as the budget's, on the budget's `resourceVersion` (`UpdateStatus`).
    async fn write(
        &self,
        budget: &PodDisruptionBudget,
        status: PodDisruptionBudgetStatus,
    ) -> Result<(), Error> {
        let mut updated = budget.clone();
        updated.status = Some(status);
        match self.api.replace_status(&budget.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Whether a budget's arithmetic needs its pods' controllers' scale: `maxUnavailable`, or a
/// percent `minAvailable` (an integer `minAvailable` counts the pods themselves).
pub fn needs_scale(spec: &PodDisruptionBudgetSpec) -> bool {
    spec.max_unavailable.is_some() || matches!(spec.min_available, Some(IntOrString::String(_)))
}

/// `GetScaledValueFromIntOrPercent(value, total, roundUp=true)`.
pub fn scaled(value: &IntOrString, total: i32) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let Some(digits) = s.strip_suffix('%') else {
                return Err(
                    "invalid value for IntOrString: invalid type: string is not a percentage"
                        .into(),
                );
            };
            let percent: i64 = digits
                .parse()
                .map_err(|e| format!("invalid value for IntOrString: invalid value {s:?}: {e}"))?;
            let scaled = (percent * i64::from(total) + 99).div_euclid(100);
            Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
        }
    }
}

/// The healthy pods a budget needs out of `expected` (`getExpectedPodCount`): `minAvailable`,
/// or `expected` less `maxUnavailable` (at least 0); 0 when it sets neither.
pub fn desired_healthy(spec: &PodDisruptionBudgetSpec, expected: i32) -> Result<i32, String> {
    if let Some(max) = &spec.max_unavailable {
        return Ok((expected - scaled(max, expected)?).max(0));
    }
    match &spec.min_available {
        Some(min) => scaled(min, expected),
        None => Ok(0),
    }
}

/// The counts a status is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// `currentHealthy`.
    pub current: i32,
    /// `desiredHealthy`.
    pub desired: i32,
    /// `expectedPods`.
    pub expected: i32,
}

impl Counts {
    /// `disruptionsAllowed`: what is healthy beyond the need, none while no pod is expected.
    pub fn allowed(self) -> i32 {
        let allowed = self.current - self.desired;
        if self.expected <= 0 || allowed <= 0 {
            0
        } else {
            allowed
        }
    }
}

/// What the pods' controllers expect.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// The sum of their scales.
    pub expected: i32,
    /// The pods without a controller.
    pub unmanaged: Vec<String>,
}

/// The sum of the scales of the controllers of `pods`, each controller once (`getExpectedScale`);
/// `scale_of` finds a controller reference's object and its scale (`None`: not found). A pod
/// whose controller is not found makes it an error.
pub async fn expected_scale<F, Fut>(pods: &[Pod], scale_of: F) -> Result<Counted, Error>
where
    F: Fn(OwnerReference) -> Fut,
    Fut: std::future::Future<Output = Result<Option<(String, i32)>, Error>>,
{
    let mut scales: HashMap<String, i32> = HashMap::new();
    let mut unmanaged = Vec::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(reference) = owners::controller_of(&pod.metadata) else {
            unmanaged.push(name);
            continue;
        };
        if scales.contains_key(&reference.uid) {
            continue;
        }
        match scale_of(reference.clone()).await? {
            Some((uid, scale)) => {
                scales.insert(uid, scale);
            }
            None => return Err(Error::Invalid(format!("found no controllers for pod {name:?}"))),
        }
    }
    let expected = scales.values().fold(0i32, |sum, s| sum.saturating_add(*s));
    Ok(Counted { expected, unmanaged })
}

/// The recorded disruptions that still count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disrupted {
    /// Pods recorded less than [`DELETION_TIMEOUT`] ago and not yet being deleted.
    pub kept: BTreeMap<String, Time>,
    /// When the first of them expires.
    pub recheck: Option<Timestamp>,
    /// Pods recorded longer ago that still are not being deleted.
    pub expired: Vec<String>,
}

/// `buildDisruptedPodMap`: of the pods `recorded` names, those still there and not yet being
/// deleted, until [`DELETION_TIMEOUT`] after they were recorded.
pub fn disrupted_pods(
    pods: &[Pod],
    recorded: Option<&BTreeMap<String, Time>>,
    now: Timestamp,
) -> Disrupted {
    let mut disrupted = Disrupted::default();
    let Some(recorded) = recorded else { return disrupted };
    let timeout = i64::try_from(DELETION_TIMEOUT.as_secs()).unwrap_or(i64::MAX);
    for pod in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let Some(name) = pod.metadata.name.as_deref() else { continue };
        let Some(at) = recorded.get(name) else { continue };
        let expires = at.0.as_second().saturating_add(timeout);
        if expires < now.as_second() {
            disrupted.expired.push(name.to_owned());
        } else {
            let expires = Timestamp::from_second(expires).unwrap_or(now);
            if disrupted.recheck.is_none_or(|r| expires < r) {
                disrupted.recheck = Some(expires);
            }
            disrupted.kept.insert(name.to_owned(), at.clone());
        }
    }
    disrupted
}

/// `countHealthyPods`: ready pods, not being deleted, and not disrupted within the timeout.
pub fn current_healthy(pods: &[Pod], disrupted: &BTreeMap<String, Time>, now: Timestamp) -> i32 {
    let timeout = i64::try_from(DELETION_TIMEOUT.as_secs()).unwrap_or(i64::MAX);
    let healthy = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            disrupted
                .get(name)
                .is_none_or(|at| at.0.as_second().saturating_add(timeout) <= now.as_second())
        })
        .filter(|p| pods::is_ready(p))
        .count();
    count(healthy)
}

/// The status `counts` and `disrupted` make for `budget` (`updatePdbStatus`), or `None` when
/// its status already says it all.
pub fn status(
    budget: &PodDisruptionBudget,
    counts: Counts,
    disrupted: BTreeMap<String, Time>,
    now: Timestamp,
) -> Option<PodDisruptionBudgetStatus> {
    let allowed = counts.allowed();
    let generation = budget.metadata.generation;
    let current = budget.status.clone().unwrap_or_default();
    let recorded = current.disrupted_pods.clone().unwrap_or_default();
    if current.current_healthy == counts.current
        && current.desired_healthy == counts.desired
        && current.expected_pods == counts.expected
        && current.disruptions_allowed == allowed
        && recorded == disrupted
        && current.observed_generation.unwrap_or(0) == generation.unwrap_or(0)
        && conditions_up_to_date(budget)
    {
        return None;
    }
    let mut conditions = current.conditions.unwrap_or_default();
    set_condition(&mut conditions, allowed_condition(allowed, generation), now);
    Some(PodDisruptionBudgetStatus {
        current_healthy: counts.current,
        desired_healthy: counts.desired,
        expected_pods: counts.expected,
        disruptions_allowed: allowed,
        disrupted_pods: Some(disrupted).filter(|d| !d.is_empty()),
        observed_generation: generation,
        conditions: Some(conditions),
    })
}

/// The status of a budget whose sync failed with `message` (`failSafe`): no disruption allowed,
/// and why.
pub fn fail_safe(
    budget: &PodDisruptionBudget,
    message: &str,
    now: Timestamp,
) -> PodDisruptionBudgetStatus {
    let mut status = budget.status.clone().unwrap_or_default();
    status.disruptions_allowed = 0;
    let mut conditions = status.conditions.take().unwrap_or_default();
    let failed = Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: "False".into(),
        reason: SYNC_FAILED.into(),
        message: message.into(),
        observed_generation: status.observed_generation,
        last_transition_time: Time(now),
    };
    set_condition(&mut conditions, failed, now);
    status.conditions = Some(conditions);
    status
}

/// `DisruptionAllowed` as `UpdateDisruptionAllowedCondition` sets it for `allowed` disruptions.
fn allowed_condition(allowed: i32, observed_generation: Option<i64>) -> Condition {
    let (status, reason) =
        if allowed > 0 { ("True", SUFFICIENT_PODS) } else { ("False", INSUFFICIENT_PODS) };
    Condition {
        type_: DISRUPTION_ALLOWED.into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// `ConditionsAreUpToDate`: the budget's status is of its generation and its condition says
/// what its `disruptionsAllowed` does.
fn conditions_up_to_date(budget: &PodDisruptionBudget) -> bool {
    let Some(status) = &budget.status else { return false };
    let Some(c) = status.conditions.iter().flatten().find(|c| c.type_ == DISRUPTION_ALLOWED) else {
        return false;
    };
    if status.observed_generation != budget.metadata.generation {
        return false;
    }
    if status.disruptions_allowed > 0 {
        c.status == "True" && c.reason == SUFFICIENT_PODS
    } else {
        c.status == "False" && c.reason == INSUFFICIENT_PODS
    }
}

/// `meta.SetStatusCondition`: the transition time moves (to `now`) only when the status does.
fn set_condition(conditions: &mut Vec<Condition>, wanted: Condition, now: Timestamp) {
    match conditions.iter_mut().find(|c| c.type_ == wanted.type_) {
        None => conditions.push(Condition { last_transition_time: Time(now), ..wanted }),
        Some(existing) => {
            if existing.status != wanted.status {
                existing.status = wanted.status;
                existing.last_transition_time = Time(now);
            }
            existing.reason = wanted.reason;
            existing.message = wanted.message;
            existing.observed_generation = wanted.observed_generation;
        }
    }
}

/// A `*metav1.LabelSelector` as Go's `%v` prints it (its generated `String()`).
pub fn go_selector(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else { return "nil".into() };
    let labels: String =
        selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}: {v},")).collect();
    let expressions: String = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|r| {
            let values = r.values.as_deref().unwrap_or_default().join(" ");
            format!(
                "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{values}],}},",
                r.key, r.operator
            )
        })
        .collect();
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )
}

/// The scale of the controllers of one namespace's pods, from the API (the finders of
/// `getExpectedScale`).
struct Scales<'a> {
    client: &'a kube::Client,
    namespace: &'a str,
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group).
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

impl Scales<'_> {
    /// The controller `reference` names and its scale: its UID and `spec.replicas` for the kinds
    /// the disruption controller knows, else through its `scale` subresource.
    async fn of(&self, reference: OwnerReference) -> Result<Option<(String, i32)>, Error> {
        let group = group_of(&reference.api_version);
        let kind = reference.kind.as_str();
        let uid = reference.uid.clone();
        let same = |found: Option<&str>| found == Some(uid.as_str());
        match (kind, group) {
            ("ReplicationController", "") => {
                let api: Api<ReplicationController> = self.api();
                let Some(rc) = api.get_opt(&reference.name).await? else { return Ok(None) };
                if !same(rc.metadata.uid.as_deref()) {
                    return Ok(None);
                }
                let replicas = rc.spec.and_then(|s| s.replicas).unwrap_or(1);
                Ok(Some((uid, replicas)))
            }
            ("ReplicaSet", "apps" | "extensions") => {
                let api: Api<ReplicaSet> = self.api();
                let Some(rs) = api.get_opt(&reference.name).await? else { return Ok(None) };
                if !same(rs.metadata.uid.as_deref()) {
                    return Ok(None);
                }
                match owners::controller_of(&rs.metadata) {
                    Some(owner) if owner.kind == "Deployment" => {
                        // A Deployment's ReplicaSet: the Deployment's scale counts.
                        if !matches!(group_of(&owner.api_version), "apps" | "extensions") {
                            return Ok(None);
                        }
                        let api: Api<Deployment> = self.api();
                        let Some(d) = api.get_opt(&owner.name).await? else { return Ok(None) };
                        if d.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                            return Ok(None);
                        }
                        let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                        Ok(Some((owner.uid.clone(), replicas)))
                    }
                    _ => {
                        let replicas = rs.spec.and_then(|s| s.replicas).unwrap_or(1);
                        Ok(Some((uid, replicas)))
                    }
                }
            }
            ("StatefulSet", "apps") => {
                let api: Api<StatefulSet> = self.api();
                let Some(ss) = api.get_opt(&reference.name).await? else { return Ok(None) };
                if !same(ss.metadata.uid.as_deref()) {
                    return Ok(None);
                }
                let replicas = ss.spec.and_then(|s| s.replicas).unwrap_or(1);
                Ok(Some((uid, replicas)))
            }
            _ => self.through_scale(&reference).await,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), self.namespace)
    }

    /// `getScaleController`: any other kind, through its `scale` subresource.
    async fn through_scale(
        &self,
        reference: &OwnerReference,
    ) -> Result<Option<(String, i32)>, Error> {
        let api_version = reference.api_version.as_str();
        let group = group_of(api_version);
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        let no_match = || {
            Error::Invalid(format!(
                "no matches for kind {:?} in version {api_version:?}",
                reference.kind
            ))
        };
        let listed = if group.is_empty() {
            self.client.list_core_api_resources(api_version).await
        } else {
            self.client.list_api_group_resources(api_version).await
        };
        let resources = match listed {
            Ok(list) => list.resources,
            Err(e) if is_not_found(&e) => return Err(no_match()),
            Err(e) => return Err(e.into()),
        };
        let Some(resource) =
            resources.iter().find(|r| r.kind == reference.kind && !r.name.contains('/'))
        else {
            return Err(no_match());
        };
        let plural = resource.name.clone();
        let scale_name = format!("{plural}/scale");
        let has_scale = resources.iter().any(|r| {
            r.name == scale_name
                && r.kind == "Scale"
                && r.group.as_deref().unwrap_or("autoscaling") == "autoscaling"
        });
        if !has_scale {
            let resource = if group.is_empty() { plural } else { format!("{plural}.{group}") };
            return Err(Error::Invalid(format!(
                "{resource} does not implement the scale subresource"
            )));
        }
        let ar = ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version: api_version.to_owned(),
            kind: reference.kind.clone(),
            plural,
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), self.namespace, &ar);
        let scale = match api.get_scale(&reference.name).await {
            Ok(scale) => scale,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if scale.metadata.uid.as_deref() != Some(reference.uid.as_str()) {
            return Ok(None);
        }
        let replicas = scale.spec.and_then(|s| s.replicas).unwrap_or(0);
        Ok(Some((reference.uid.clone(), replicas)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(value: serde_json::Value) -> PodDisruptionBudgetSpec {
        serde_json::from_value(value).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(name: &str, ready: bool, owner: Option<&str>) -> Pod {
        let owners = owner.map(|uid| {
            json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid,
                     "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": owners},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_desired_healthy_pods_come_from_min_available_or_max_unavailable() {
        assert!(!needs_scale(&spec(json!({"minAvailable": 2}))));
        assert!(needs_scale(&spec(json!({"minAvailable": "50%"}))));
        assert!(needs_scale(&spec(json!({"maxUnavailable": 1}))));
        assert_eq!(desired_healthy(&spec(json!({"minAvailable": 2})), 5), Ok(2));
        // Percents round up.
        assert_eq!(desired_healthy(&spec(json!({"minAvailable": "50%"})), 5), Ok(3));
        assert_eq!(desired_healthy(&spec(json!({"maxUnavailable": 1})), 5), Ok(4));
        assert_eq!(desired_healthy(&spec(json!({"maxUnavailable": "30%"})), 5), Ok(3));
        assert_eq!(desired_healthy(&spec(json!({"maxUnavailable": 9})), 5), Ok(0), "never below 0");
        assert_eq!(desired_healthy(&spec(json!({})), 5), Ok(0));
        assert!(desired_healthy(&spec(json!({"minAvailable": "half"})), 5).is_err());
        assert_eq!(scaled(&IntOrString::String("0%".into()), 7), Ok(0));
        assert_eq!(scaled(&IntOrString::String("100%".into()), 7), Ok(7));
        assert_eq!(scaled(&IntOrString::String("1%".into()), 7), Ok(1));
    }

    #[test]
    fn disruptions_allowed_is_what_is_healthy_beyond_the_need() {
        assert_eq!(Counts { current: 3, desired: 1, expected: 3 }.allowed(), 2);
        assert_eq!(Counts { current: 1, desired: 1, expected: 2 }.allowed(), 0);
        assert_eq!(Counts { current: 0, desired: 1, expected: 2 }.allowed(), 0, "never negative");
        assert_eq!(Counts { current: 2, desired: 0, expected: 0 }.allowed(), 0, "none expected");
    }

    #[test]
    fn recorded_disruptions_count_for_two_minutes_then_the_pod_is_warned_about() {
        let pods = vec![pod("a", true, None), pod("b", true, None), pod("c", true, None)];
        let recorded: BTreeMap<String, Time> = [
            ("a".to_owned(), Time(at("2026-01-01T00:00:00Z"))),
            ("b".to_owned(), Time(at("2026-01-01T00:01:00Z"))),
            ("gone".to_owned(), Time(at("2026-01-01T00:01:00Z"))),
        ]
        .into();
        let now = at("2026-01-01T00:02:30Z");
        let d = disrupted_pods(&pods, Some(&recorded), now);
        assert_eq!(d.kept.keys().collect::<Vec<_>>(), ["b"], "a expired, gone is gone");
        assert_eq!(d.expired, ["a"]);
        assert_eq!(d.recheck, Some(at("2026-01-01T00:03:00Z")));
        assert_eq!(current_healthy(&pods, &d.kept, now), 2, "b is expected to go");
        let later = at("2026-01-01T00:03:01Z");
        assert_eq!(current_healthy(&pods, &d.kept, later), 3);
        assert_eq!(disrupted_pods(&pods, None, now), Disrupted::default());

        let mut deleting = pod("b", true, None);
        deleting.metadata.deletion_timestamp = Some(Time(now));
        let pods = vec![pod("a", false, None), deleting];
        let d = disrupted_pods(&pods, Some(&recorded), now);
        assert!(d.kept.is_empty(), "a pod being deleted is not kept");
        assert_eq!(d.expired, ["a"], "nor warned about");
        assert_eq!(current_healthy(&pods, &d.kept, now), 0, "unready and deleting pods");
    }

    fn budget(status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "generation": 2},
            "spec": {"minAvailable": 1},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_status_and_its_condition_follow_the_counts() {
        let now = at("2026-01-01T00:00:00Z");
        let fresh = budget(json!({"disruptionsAllowed": 0, "currentHealthy": 0,
            "desiredHealthy": 0, "expectedPods": 0}));
        let counts = Counts { current: 2, desired: 1, expected: 2 };
        let s = status(&fresh, counts, BTreeMap::new(), now).expect("a first status");
        assert_eq!(
            (s.disruptions_allowed, s.current_healthy, s.desired_healthy, s.expected_pods),
            (1, 2, 1, 2)
        );
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(s.disrupted_pods, None);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "True", "SufficientPods")
        );
        assert_eq!((c.message.as_str(), c.observed_generation), ("", Some(2)));
        assert_eq!(c.last_transition_time, Time(now));

        let written = PodDisruptionBudget { status: Some(s.clone()), ..fresh.clone() };
        assert_eq!(status(&written, counts, BTreeMap::new(), now), None, "nothing new to say");

        let later = at("2026-01-01T00:05:00Z");
        let short = Counts { current: 1, desired: 1, expected: 2 };
        let s2 = status(&written, short, BTreeMap::new(), later).expect("fewer healthy");
        assert_eq!(s2.disruptions_allowed, 0);
        let c = &s2.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InsufficientPods"));
        assert_eq!(c.last_transition_time, Time(later), "the status moved");

        let failed = fail_safe(&written, "found no controllers for pod \"x\"", later);
        assert_eq!(failed.disruptions_allowed, 0);
        assert_eq!(failed.current_healthy, 2, "the rest is kept");
        let c = &failed.conditions.as_ref().unwrap()[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "SyncFailed"));
        assert_eq!(c.message, "found no controllers for pod \"x\"");
        let stale = PodDisruptionBudget { status: Some(failed), ..fresh };
        let healed = status(&stale, counts, BTreeMap::new(), later).expect("synced again");
        let c = &healed.conditions.as_ref().unwrap()[0];
        assert_eq!((c.reason.as_str(), c.message.as_str()), ("SufficientPods", ""));
    }

    #[tokio::test]
    async fn the_expected_pods_are_the_sum_of_their_controllers_scales_each_once() {
        let pods = vec![
            pod("a", true, Some("rs-1")),
            pod("b", true, Some("rs-1")),
            pod("c", true, Some("rs-2")),
            pod("lone", true, None),
        ];
        let asked = std::sync::Mutex::new(Vec::new());
        let counted = expected_scale(&pods, |r: OwnerReference| {
            asked.lock().unwrap().push(r.uid.clone());
            let scale = if r.uid == "rs-1" { 3 } else { 2 };
            async move { Ok(Some((r.uid, scale))) }
        })
        .await
        .unwrap();
        assert_eq!(counted, Counted { expected: 5, unmanaged: vec!["lone".into()] });
        assert_eq!(*asked.lock().unwrap(), ["rs-1", "rs-2"], "each controller once");

        let missing = expected_scale(&pods[..1], |_| async { Ok(None) }).await;
        assert_eq!(
            missing.expect_err("no controller").to_string(),
            "found no controllers for pod \"a\""
        );
    }

    #[test]
    fn a_selector_prints_as_go_prints_it() {
        let s: LabelSelector = serde_json::from_value(json!({
            "matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}],
        }))
        .unwrap();
        assert_eq!(
            go_selector(Some(&s)),
            "&LabelSelector{MatchLabels:map[string]string{a: 1,b: 2,},MatchExpressions:[]LabelSelectorRequirement{LabelSelectorRequirement{Key:t,Operator:In,Values:[x y],},},}"
        );
        assert_eq!(go_selector(None), "nil");
    }
}
