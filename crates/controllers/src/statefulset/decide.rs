//! What a StatefulSet should do about its pods and claims, decided from what is observed, with
//! no I/O (kube-controller-manager's `updateStatefulSet` and `stateful_set_utils.go`):
//!
//! - each pod has a stable identity: the name `<set>-<ordinal>` for ordinals from
//!   `spec.ordinals.start`, the labels `statefulset.kubernetes.io/pod-name` and
//!   `apps.kubernetes.io/pod-index`, `hostname` = its name and `subdomain` = `spec.serviceName`;
//! - each pod has stable storage: for every volume claim template a claim
//!   `<template>-<set>-<ordinal>`, made before the pod, which the pod's volume of the template's
//!   name mounts;
//! - [`plan`] decides, in kube-controller-manager's order, what a sync does: replace finished
//!   pods, create the missing ones (`OrderedReady`: one at a time, in ordinal order, each once
//!   its predecessors are Running, Ready and available; `Parallel`: all at once), bring the
//!   claims' owners in line with `persistentVolumeClaimRetentionPolicy`, delete the pods beyond
//!   `spec.replicas` (highest ordinal first, one at a time unless `Parallel`), and roll pods of
//!   an old revision over (`RollingUpdate`: highest ordinal first down to `partition`, one at a
//!   time, or `maxUnavailable` at a time when it is set; `OnDelete`: never).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::deployment::util::scaled;
use crate::{owners, pods};

/// The label naming a StatefulSet's pod after itself.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label giving a StatefulSet's pod its ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label naming the revision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The set's name and the ordinal of a pod named `<set>-<ordinal>` (`getParentNameAndOrdinal`):
/// `None` for a name of another shape; an ordinal that does not fit 32 bits is `None` in a
/// name that has the shape.
pub fn parent_and_ordinal(name: &str) -> Option<(&str, Option<i32>)> {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (head, tail) = name.split_at(name.len() - digits);
    let parent = head.strip_suffix('-')?;
    Some((parent, tail.parse::<i32>().ok()))
}

/// The ordinal of a pod of a StatefulSet, from its name.
pub fn ordinal(pod: &Pod) -> Option<i32> {
    parent_and_ordinal(pod.metadata.name.as_deref()?)?.1
}

/// Whether `pod` is named as a pod of the set named `set` (`isMemberOf`).
pub fn is_member(set: &str, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    parent_and_ordinal(name).is_some_and(|(parent, _)| parent == set)
}

fn spec(set: &StatefulSet) -> &StatefulSetSpec {
    static EMPTY: std::sync::OnceLock<StatefulSetSpec> = std::sync::OnceLock::new();
    set.spec.as_ref().unwrap_or_else(|| EMPTY.get_or_init(StatefulSetSpec::default))
}

/// `spec.replicas` (1 when unset).
pub fn replicas(set: &StatefulSet) -> i32 {
    spec(set).replicas.unwrap_or(1)
}

/// The first ordinal (`spec.ordinals.start`, 0 when unset).
pub fn start_ordinal(set: &StatefulSet) -> i32 {
    spec(set).ordinals.as_ref().and_then(|o| o.start).unwrap_or(0)
}

/// `spec.minReadySeconds`.
pub fn min_ready_seconds(set: &StatefulSet) -> i32 {
    spec(set).min_ready_seconds.unwrap_or(0)
}

/// Whether `ordinal` is one of the set's `spec.replicas` ordinals (`podInOrdinalRange`).
pub fn in_range(set: &StatefulSet, ordinal: Option<i32>) -> bool {
    let start = start_ordinal(set);
    ordinal
        .is_some_and(|o| o >= start && i64::from(o) < i64::from(start) + i64::from(replicas(set)))
}

/// The name of the set's pod of `ordinal`.
pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set.name_any())
}

/// The name of the claim of `template` for the set's pod of `ordinal`.
pub fn claim_name(template: &str, set: &StatefulSet, ordinal: i32) -> String {
    format!("{template}-{}-{ordinal}", set.name_any())
}

fn templates(set: &StatefulSet) -> &[PersistentVolumeClaim] {
    spec(set).volume_claim_templates.as_deref().unwrap_or_default()
}

/// The claims of the set's pod of `ordinal`, by template name (`getPersistentVolumeClaims`):
/// each template, named for the pod, in the set's namespace, labelled with the set's
/// `matchLabels` too.
pub fn claims(set: &StatefulSet, ordinal: i32) -> Vec<(String, PersistentVolumeClaim)> {
    let selector = spec(set).selector.match_labels.clone().unwrap_or_default();
    templates(set)
        .iter()
        .map(|template| {
            let template_name = template.name_any();
            let mut claim = template.clone();
            claim.metadata.name = Some(claim_name(&template_name, set, ordinal));
            claim.metadata.namespace = set.namespace();
            if !selector.is_empty() {
                let labels = claim.metadata.labels.get_or_insert_with(BTreeMap::new);
                labels.extend(selector.clone());
            }
            claim.status = None;
            (template_name, claim)
        })
        .collect()
}

/// Make `spec`'s volumes mount the claims of the pod of `ordinal` (`updateStorage`): one
/// volume per template, named as the template, then the other volumes of the pod.
pub fn update_storage(set: &StatefulSet, spec: &mut PodSpec, ordinal: i32) {
    let claims = claims(set, ordinal);
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(name, claim)| Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.name_any(),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    let others = spec.volumes.take().unwrap_or_default();
    volumes.extend(others.into_iter().filter(|v| !claims.iter().any(|(name, _)| *name == v.name)));
    spec.volumes = Some(volumes);
}

/// Give `pod` the name, namespace and labels of the set's pod of its ordinal (`updateIdentity`).
pub fn update_identity(set: &StatefulSet, pod: &mut Pod, ordinal: i32) {
    let name = pod_name(set, ordinal);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.namespace();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.into(), name);
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
}

/// The set's pod of `ordinal` made from `template` at revision `revision`
/// (`newVersionedStatefulSetPod`): controlled by the set, with its identity (and, only at
/// creation, `hostname` and `subdomain`) and its claims' volumes.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, ordinal: i32, revision: &str) -> Pod {
    let namespace = set.namespace().unwrap_or_default();
    let owner = owners::controller_ref(set).unwrap_or_default();
    let mut pod = pods::from_template(template, &namespace, &set.name_any(), owner);
    update_identity(set, &mut pod, ordinal);
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.hostname = pod.metadata.name.clone();
    spec.subdomain = self::spec(set).service_name.clone().filter(|s| !s.is_empty());
    update_storage(set, spec, ordinal);
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_LABEL.into(), revision.into());
    pod
}

/// Whether `pod` has the identity of the set's pod of its ordinal (`identityMatches`: its name,
/// namespace and `statefulset.kubernetes.io/pod-name` label).
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some((parent, Some(ordinal))) = parent_and_ordinal(name) else { return false };
    let label =
        |key: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str);
    ordinal >= 0
        && parent == set.name_any()
        && name == pod_name(set, ordinal)
        && pod.metadata.namespace == set.namespace()
        && label(POD_NAME_LABEL) == Some(name)
}

/// Whether `pod`'s volumes mount the claims of its ordinal (`storageMatches`).
pub fn storage_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let Some(ordinal) = ordinal(pod).filter(|o| *o >= 0) else { return false };
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    templates(set).iter().all(|template| {
        let name = template.name_any();
        volumes.iter().find(|v| v.name == name).is_some_and(|v| {
            v.persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str())
                == Some(claim_name(&name, set, ordinal).as_str())
        })
    })
}

/// What `persistentVolumeClaimRetentionPolicy` says (`Retain` for anything but `Delete`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// `whenDeleted: Delete`: the claims go with the set.
    pub delete_when_deleted: bool,
    /// `whenScaled: Delete`: a pod's claims go when it is scaled away.
    pub delete_when_scaled: bool,
}

/// The set's retention policy.
pub fn retention(set: &StatefulSet) -> Retention {
    let policy = spec(set).persistent_volume_claim_retention_policy.as_ref();
    let delete = |p: Option<&String>| p.map(String::as_str) == Some("Delete");
    Retention {
        delete_when_deleted: delete(policy.and_then(|p| p.when_deleted.as_ref())),
        delete_when_scaled: delete(policy.and_then(|p| p.when_scaled.as_ref())),
    }
}

/// An object a claim may be owned by: the set or one of its pods.
struct Owner<'a> {
    api_version: &'static str,
    kind: &'static str,
    name: String,
    uid: &'a str,
}

impl Owner<'_> {
    fn of_set(set: &StatefulSet) -> Owner<'_> {
        Owner {
            api_version: "apps/v1",
            kind: "StatefulSet",
            name: set.name_any(),
            uid: set.metadata.uid.as_deref().unwrap_or_default(),
        }
    }

    fn of_pod(pod: &Pod) -> Owner<'_> {
        Owner {
            api_version: "v1",
            kind: "Pod",
            name: pod.name_any(),
            uid: pod.metadata.uid.as_deref().unwrap_or_default(),
        }
    }

    /// Whether `r` names this object by kind and name (`matchesRef`).
    fn named_by(&self, r: &OwnerReference) -> bool {
        r.api_version == self.api_version && r.kind == self.kind && r.name == self.name
    }

    fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.into(),
            kind: self.kind.into(),
            name: self.name.clone(),
            uid: self.uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

fn refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim.metadata.owner_references.as_deref().unwrap_or_default()
}

fn has_owner_ref(claim: &PersistentVolumeClaim, owner: &Owner<'_>) -> bool {
    refs(claim).iter().any(|r| r.uid == owner.uid)
}

/// A reference naming `owner` with another UID: left by an earlier object of that name.
fn has_stale_owner_ref(claim: &PersistentVolumeClaim, owner: &Owner<'_>) -> bool {
    refs(claim).iter().find(|r| owner.named_by(r)).is_some_and(|r| r.uid != owner.uid)
}

/// Whether another controller than the set or the pod controls the claim, under a policy that
/// deletes (`hasUnexpectedController`).
pub fn has_unexpected_controller(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> bool {
    let policy = retention(set);
    if !policy.delete_when_deleted && !policy.delete_when_scaled {
        return false;
    }
    let (set, pod) = (Owner::of_set(set), Owner::of_pod(pod));
    for r in refs(claim) {
        for owner in [&set, &pod] {
            if owner.named_by(r) {
                if r.uid != owner.uid {
                    return true;
                }
                break;
            }
        }
        if !set.named_by(r) && !pod.named_by(r) && r.controller == Some(true) {
            return true;
        }
    }
    false
}

/// Whether the set or the pod owns the claim without controlling it (`hasNonControllerOwner`).
fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    let (set, pod) = (Owner::of_set(set), Owner::of_pod(pod));
    refs(claim).iter().any(|r| (r.uid == set.uid || r.uid == pod.uid) && r.controller != Some(true))
}

/// Whether the claim's owners are as the retention policy wants for `pod` (`isClaimOwnerUpToDate`):
/// no owner to retain it through both; the set when it goes with the set; the pod once the pod
/// is scaled away when it goes with its pod. A claim an earlier set or pod of the same name
/// still owns, or that another controller holds, is left alone.
pub fn claim_owner_up_to_date(claim: &PersistentVolumeClaim, set: &StatefulSet, pod: &Pod) -> bool {
    let (set_owner, pod_owner) = (Owner::of_set(set), Owner::of_pod(pod));
    if has_stale_owner_ref(claim, &set_owner) || has_stale_owner_ref(claim, &pod_owner) {
        return true;
    }
    let (by_set, by_pod) = (has_owner_ref(claim, &set_owner), has_owner_ref(claim, &pod_owner));
    if has_unexpected_controller(claim, set, pod) {
        return !(by_set || by_pod);
    }
    if has_non_controller_owner(claim, set, pod) {
        return false;
    }
    let policy = retention(set);
    let scaled_down = !in_range(set, ordinal(pod));
    match (policy.delete_when_scaled, policy.delete_when_deleted) {
        (false, false) => !by_set && !by_pod,
        (false, true) => by_set && !by_pod,
        (true, false) => !by_set && scaled_down == by_pod,
        (true, true) => scaled_down != by_set && scaled_down == by_pod,
    }
}

/// The owner references the claim should have for `pod` (`updateClaimOwnerRefForSetAndPod`):
/// its references to the set and the pod dropped, then the set or the pod added as controller
/// as the policy says (neither when another controller holds it).
pub fn claim_owner_refs(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    pod: &Pod,
) -> Vec<OwnerReference> {
    let (set_owner, pod_owner) = (Owner::of_set(set), Owner::of_pod(pod));
    let unexpected = has_unexpected_controller(claim, set, pod);
    let mut out: Vec<OwnerReference> = refs(claim)
        .iter()
        .filter(|r| !set_owner.named_by(r) && !pod_owner.named_by(r))
        .cloned()
        .collect();
    if unexpected {
        return out;
    }
    let policy = retention(set);
    let scaled_down = !in_range(set, ordinal(pod));
    let mut add = |owner: &Owner<'_>| {
        if !out.iter().any(|r| r.uid == owner.uid) {
            out.push(owner.controller_ref());
        }
    };
    match (policy.delete_when_scaled, policy.delete_when_deleted) {
        (false, false) => {}
        (false, true) => add(&set_owner),
        (true, false) => {
            if scaled_down {
                add(&pod_owner);
            }
        }
        (true, true) => add(if scaled_down { &pod_owner } else { &set_owner }),
    }
    out
}

/// Whether a claim of the set's pod `pod` (not yet created: no UID) belongs to an earlier pod
/// of its name, so that the pod must wait for the claim to go (`PodClaimIsStale`).
pub fn claim_is_stale(
    set: &StatefulSet,
    pod: &Pod,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
) -> bool {
    let Some(ordinal) = ordinal(pod) else { return false };
    if !retention(set).delete_when_scaled {
        return false;
    }
    let owner = Owner::of_pod(pod);
    self::claims(set, ordinal)
        .iter()
        .filter_map(|(_, c)| claims.get(&c.name_any()))
        .any(|c| has_stale_owner_ref(c, &owner))
}

/// Whether the existing claims of `pod` have the owners the policy wants
/// (`ClaimsMatchRetentionPolicy`; a missing claim matches).
pub fn claims_match_retention(
    set: &StatefulSet,
    pod: &Pod,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
) -> bool {
    let Some(ordinal) = ordinal(pod) else { return true };
    self::claims(set, ordinal)
        .iter()
        .filter_map(|(_, c)| claims.get(&c.name_any()))
        .all(|c| claim_owner_up_to_date(c, set, pod))
}

/// Whether the claims of `pod`'s ordinal all exist.
fn claims_exist(
    set: &StatefulSet,
    pod: &Pod,
    claims: &BTreeMap<String, PersistentVolumeClaim>,
) -> bool {
    let Some(ordinal) = ordinal(pod) else { return true };
    self::claims(set, ordinal).iter().all(|(_, c)| claims.contains_key(&c.name_any()))
}

fn is_running_and_ready(pod: &Pod) -> bool {
    pods::phase(pod) == "Running" && pods::is_ready(pod)
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

/// The revision a pod was made from, by its label.
pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata.labels.as_ref().and_then(|l| l.get(REVISION_LABEL)).map_or("", String::as_str)
}

/// The counts a StatefulSet's status holds (`computeReplicaStatus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Pods that exist.
    pub replicas: i32,
    /// Running and ready.
    pub ready: i32,
    /// Running, and ready for `minReadySeconds`.
    pub available: i32,
    /// Not terminating, of the current revision.
    pub current: i32,
    /// Not terminating, of the update revision.
    pub updated: i32,
}

/// The two revisions a sync works with: the one the set's pods are at (`status.currentRevision`)
/// and the one they go to (its template now).
#[derive(Clone, Copy, Debug)]
pub struct Revisions<'a> {
    pub current: &'a str,
    pub update: &'a str,
}

fn count<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    min_ready_seconds: i32,
    now: DateTime<Utc>,
    revisions: Revisions<'_>,
) -> Counts {
    let mut c = Counts::default();
    for pod in pods {
        c.replicas += 1;
        if is_running_and_ready(pod) {
            c.ready += 1;
            if pods::is_available(pod, min_ready_seconds, now) {
                c.available += 1;
            }
        }
        if !is_terminating(pod) {
            let revision = pod_revision(pod);
            if revision == revisions.current {
                c.current += 1;
            }
            if revision == revisions.update {
                c.updated += 1;
            }
        }
    }
    c
}

/// One thing a sync does, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delete a pod that finished (Failed or Succeeded): it is made again once gone.
    DeleteFinished(String),
    /// Create the pod of `ordinal`, its claims first, at the update revision or the current one.
    Create { ordinal: i32, at_update: bool },
    /// A pending pod's claims: create those missing, set their owners as the policy says.
    EnsureClaims(String),
    /// Bring a pod's identity, volumes and claims' owners in line with the set.
    Update(String),
    /// Set the owners of the claims of a pod beyond `spec.replicas` as the policy says.
    FixClaims(String),
    /// Delete a pod beyond `spec.replicas`.
    ScaleDown(String),
    /// Delete a pod of an old revision, to be made again at the new one.
    Roll(String),
}

/// What a sync does and the status it leaves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub counts: Counts,
    /// A pod waits for a claim an earlier pod of its name still owns.
    pub stale_claim: bool,
}

/// Whether a pod of `ordinal` made now is made at the current revision rather than the update
/// one (`newVersionedStatefulSetPod`): below the partition of a rolling update (or, without
/// `rollingUpdate`, below `status.currentReplicas`).
fn at_current_revision(set: &StatefulSet, ordinal: i32) -> bool {
    let strategy = spec(set).update_strategy.as_ref();
    let rolling_type = strategy.and_then(|s| s.type_.as_deref()) == Some("RollingUpdate");
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let start = i64::from(start_ordinal(set));
    let ordinal = i64::from(ordinal);
    match rolling {
        None => {
            let current = set.status.as_ref().and_then(|s| s.current_replicas).unwrap_or(0);
            rolling_type && ordinal < start + i64::from(current)
        }
        Some(r) => ordinal < start + i64::from(r.partition.unwrap_or(0)),
    }
}

/// A replica slot: the pod of an ordinal in range, or the one to make.
enum Slot<'a> {
    Pod(&'a Pod),
    Missing { ordinal: i32, name: String },
}

impl Slot<'_> {
    fn name(&self) -> &str {
        match self {
            Slot::Pod(p) => p.metadata.name.as_deref().unwrap_or_default(),
            Slot::Missing { name, .. } => name,
        }
    }

    fn healthy(&self) -> bool {
        matches!(self, Slot::Pod(p) if is_healthy(p))
    }
}

/// What one sync of `set` does about `pods` (the pods it controls, named as its pods) and the
/// claims of its namespace, by name (`updateStatefulSet`).
pub fn plan(
    set: &StatefulSet,
    revisions: Revisions<'_>,
    pods: &[Pod],
    claims: &BTreeMap<String, PersistentVolumeClaim>,
    now: DateTime<Utc>,
) -> Plan {
    let min_ready = min_ready_seconds(set);
    let start = start_ordinal(set);
    let count_of = |slots: &[Slot<'_>], condemned: &[&Pod]| {
        let existing = slots.iter().filter_map(|s| match s {
            Slot::Pod(p) => Some(*p),
            Slot::Missing { .. } => None,
        });
        count(existing.chain(condemned.iter().copied()), min_ready, now, revisions)
    };

    let wanted = usize::try_from(replicas(set)).unwrap_or(0);
    let mut found: Vec<Option<&Pod>> = vec![None; wanted];
    let mut condemned: Vec<&Pod> = Vec::new();
    for pod in pods {
        match ordinal(pod) {
            Some(o) if in_range(set, Some(o)) => {
                found[usize::try_from(o - start).unwrap_or(0)] = Some(pod);
            }
            Some(o) if o >= 0 => condemned.push(pod),
            _ => {}
        }
    }
    let slots: Vec<Slot<'_>> = found
        .into_iter()
        .enumerate()
        .map(|(i, pod)| match pod {
            Some(p) => Slot::Pod(p),
            None => {
                let ordinal = start.saturating_add(i32::try_from(i).unwrap_or(i32::MAX));
                Slot::Missing { ordinal, name: pod_name(set, ordinal) }
            }
        })
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));

    // The first pod that is not healthy: of the replicas in order, else of the condemned from
    // the lowest ordinal.
    let first_unhealthy: Option<String> = slots
        .iter()
        .find(|s| !s.healthy())
        .map(|s| s.name().to_owned())
        .or_else(|| condemned.iter().rev().find(|p| !is_healthy(p)).map(|p| p.name_any()));

    let mut plan = Plan { counts: count_of(&slots, &condemned), ..Plan::default() };
    if set.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let monotonic = spec(set).pod_management_policy.as_deref() != Some("Parallel");

    // The replicas, in ordinal order.
    for slot in &slots {
        match slot {
            Slot::Missing { ordinal, name } => {
                let mut pod = Pod::default();
                pod.metadata.name = Some(name.clone());
                if claim_is_stale(set, &pod, claims) {
                    plan.stale_claim = true;
                    if monotonic {
                        return plan;
                    }
                    continue;
                }
                let at_update = !at_current_revision(set, *ordinal);
                plan.steps.push(Step::Create { ordinal: *ordinal, at_update });
                if monotonic {
                    return plan;
                }
            }
            Slot::Pod(pod) => {
                let name = pod.name_any();
                if matches!(pods::phase(pod), "Failed" | "Succeeded") {
                    if !is_terminating(pod) {
                        plan.steps.push(Step::DeleteFinished(name));
                    }
                    if monotonic {
                        return plan;
                    }
                    continue;
                }
                if pods::phase(pod) == "Pending"
                    && !(claims_exist(set, pod, claims) && claims_match_retention(set, pod, claims))
                {
                    plan.steps.push(Step::EnsureClaims(name.clone()));
                }
                if monotonic
                    && (is_terminating(pod)
                        || !is_running_and_ready(pod)
                        || !pods::is_available(pod, min_ready, now))
                {
                    return plan;
                }
                if !(identity_matches(set, pod)
                    && storage_matches(set, pod)
                    && claims_match_retention(set, pod, claims))
                {
                    plan.steps.push(Step::Update(name));
                }
            }
        }
    }

    // The claims of the pods beyond spec.replicas.
    for pod in &condemned {
        if !claims_match_retention(set, pod, claims) {
            plan.steps.push(Step::FixClaims(pod.name_any()));
        }
    }

    // Scale down: highest ordinal first; in order, only once all others are healthy (or it is
    // the first that is not).
    for pod in &condemned {
        let name = pod.name_any();
        if is_terminating(pod) {
            if monotonic {
                return plan;
            }
            continue;
        }
        let first = first_unhealthy.as_deref() == Some(name.as_str());
        if monotonic
            && !first
            && (!is_running_and_ready(pod) || !pods::is_available(pod, min_ready, now))
        {
            return plan;
        }
        plan.steps.push(Step::ScaleDown(name));
        if monotonic {
            return plan;
        }
    }

    // Updates.
    let strategy = spec(set).update_strategy.as_ref();
    if strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete") {
        return plan;
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let partition = rolling.and_then(|r| r.partition).unwrap_or(0).max(0);
    let update_min = usize::try_from(partition).unwrap_or(0);
    let old = |slot: &Slot<'_>| match slot {
        Slot::Pod(p) => pod_revision(p) != revisions.update && !is_terminating(p),
        Slot::Missing { ordinal, .. } => {
            at_current_revision(set, *ordinal) && revisions.current != revisions.update
        }
    };
    let roll = |slot: &Slot<'_>, plan: &mut Plan| {
        if let Slot::Pod(p) = slot {
            plan.steps.push(Step::Roll(p.name_any()));
        }
        plan.counts.current -= 1;
    };
    if let Some(max) = rolling.and_then(|r| r.max_unavailable.as_ref()) {
        // maxUnavailable at a time, counting the replicas not healthy now.
        let max = max_unavailable(max, replicas(set));
        let unavailable = slots.iter().filter(|s| !s.healthy()).count();
        let Some(mut room) = max.checked_sub(unavailable).filter(|r| *r > 0) else {
            return plan;
        };
        for slot in slots.iter().skip(update_min).rev() {
            if room == 0 {
                break;
            }
            if old(slot) {
                roll(slot, &mut plan);
                room -= 1;
            }
        }
        return plan;
    }
    for slot in slots.iter().skip(update_min).rev() {
        if old(slot) {
            roll(slot, &mut plan);
            return plan;
        }
        if !slot.healthy() {
            return plan;
        }
    }
    plan
}

/// `maxUnavailable` of `replicas` pods, at least 1 (`getStatefulSetMaxUnavailable`).
fn max_unavailable(value: &IntOrString, replicas: i32) -> usize {
    let n = scaled(value, replicas, false).unwrap_or(1).max(1);
    usize::try_from(n).unwrap_or(1)
}

/// The status a sync leaves (`updateStatefulSet`, then `completeRollingUpdate`): the counts, the
/// revisions, the collision count and the generation seen; a rolling update whose pods are all
/// updated and ready makes the update revision the current one.
pub fn status(
    set: &StatefulSet,
    counts: Counts,
    revisions: Revisions<'_>,
    collision_count: i32,
) -> StatefulSetStatus {
    let mut status = StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas: counts.replicas,
        ready_replicas: Some(counts.ready),
        available_replicas: Some(counts.available),
        current_replicas: Some(counts.current),
        updated_replicas: Some(counts.updated),
        current_revision: Some(revisions.current.to_owned()),
        update_revision: Some(revisions.update.to_owned()),
        collision_count: Some(collision_count),
        conditions: None,
    };
    let rolling = spec(set).update_strategy.as_ref().and_then(|s| s.type_.as_deref())
        == Some("RollingUpdate");
    let wanted = replicas(set);
    if rolling && counts.updated == wanted && counts.ready == wanted && counts.replicas == wanted {
        status.current_replicas = Some(counts.updated);
        status.current_revision = Some(revisions.update.to_owned());
    }
    status
}

/// Whether `new` says something the set's status does not (`inconsistentStatus`).
pub fn status_differs(set: &StatefulSet, new: &StatefulSetStatus) -> bool {
    let old = set.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    new.observed_generation.unwrap_or(0) > old.observed_generation.unwrap_or(0)
        || new.replicas != old.replicas
        || n(new.current_replicas) != n(old.current_replicas)
        || n(new.ready_replicas) != n(old.ready_replicas)
        || n(new.updated_replicas) != n(old.updated_replicas)
        || s(&new.current_revision) != s(&old.current_revision)
        || n(new.available_replicas) != n(old.available_replicas)
        || s(&new.update_revision) != s(&old.update_revision)
}

#[cfg(test)]
mod tests;
