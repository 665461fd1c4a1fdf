//! What a Deployment's rollout decides, with no I/O (kube-controller-manager's
//! `pkg/controller/deployment/util`): the pod-template hash, maxSurge and maxUnavailable, which
//! ReplicaSet is the new one, how far to scale each, revisions, conditions and status.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The label (and selector term) that ties a ReplicaSet and its pods to one template.
pub const HASH_LABEL: &str = "pod-template-hash";
/// The revision of a ReplicaSet, and of its Deployment (the newest).
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// The revisions a ReplicaSet had before (an undo made it new again).
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's `spec.replicas` when it last scaled the ReplicaSet.
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// `spec.replicas` + maxSurge when it last scaled the ReplicaSet.
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// Annotations of a Deployment not copied to its ReplicaSets.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

pub const PROGRESSING: &str = "Progressing";
pub const AVAILABLE: &str = "Available";
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
pub const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
pub const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
pub const RS_UPDATED: &str = "ReplicaSetUpdated";
pub const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
pub const TIMED_OUT: &str = "ProgressDeadlineExceeded";
pub const PAUSED: &str = "DeploymentPaused";
pub const RESUMED: &str = "DeploymentResumed";
pub const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
pub const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

/// The hash of a pod template (`controller.ComputeHash`): FNV-32a, its decimal value written in
/// the alphabet of `rand.SafeEncodeString`, with `collision_count` (when set) hashed after the
/// template as four little-endian bytes, as Kubernetes does.
///
/// Kubernetes hashes the Go value as `hashutil.DeepHashObject` prints it (go-spew); this hashes
/// the template's JSON (struct fields in their declared order, maps in key order). The hash is
/// stable for one template and differs between templates, but is not byte-equal to
/// Kubernetes' hash of the same template.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    let mut write = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    write(
        &serde_json::to_vec(&go_semantic(serde_json::to_value(template).unwrap_or_default()))
            .unwrap_or_default(),
    );
    if let Some(count) = collision_count {
        write(&count.to_le_bytes());
    }
    hash.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

fn without_hash(template: &PodTemplateSpec) -> serde_json::Value {
    let mut t = template.clone();
    if let Some(meta) = t.metadata.as_mut() {
        if let Some(labels) = meta.labels.as_mut() {
            labels.remove(HASH_LABEL);
        }
        if meta.labels.as_ref().is_some_and(BTreeMap::is_empty) {
            meta.labels = None;
        }
    }
    go_semantic(serde_json::to_value(&t).unwrap_or_default())
}

/// `value` without what Go's structs cannot tell from absent: `null`, `false`, `0`, `""`, empty
/// lists and objects, and `metadata.creationTimestamp` (a template's is always null). Clients in
/// Go (kubectl's `rollout undo` among them) drop those when they send a template, and a template
/// decoded from protobuf has them all; compared as Kubernetes compares templates (semantic
/// equality), they are the same template. Looser than Go for pointer fields only (an explicit
/// `privileged: false` equals an unset one).
pub(crate) fn go_semantic(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(key, _)| key != "creationTimestamp")
                .map(|(key, value)| (key, go_semantic(value)))
                .filter(|(_, value)| !is_go_zero(value))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(go_semantic).collect()),
        other => other,
    }
}

fn is_go_zero(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

/// Whether two templates are equal but for the `pod-template-hash` label (`EqualIgnoreHash`).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    without_hash(a) == without_hash(b)
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn rs_status(
    rs: &ReplicaSet,
    f: impl Fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> Option<i32>,
) -> i32 {
    rs.status.as_ref().and_then(f).unwrap_or(0)
}

pub fn rs_actual(rs: &ReplicaSet) -> i32 {
    rs_status(rs, |s| Some(s.replicas))
}

pub fn rs_ready(rs: &ReplicaSet) -> i32 {
    rs_status(rs, |s| s.ready_replicas)
}

pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs_status(rs, |s| s.available_replicas)
}

pub fn is_rolling(d: &Deployment) -> bool {
    let kind = d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref());
    kind != Some("Recreate")
}

pub fn min_ready_seconds(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
}

pub fn template(d: &Deployment) -> PodTemplateSpec {
    d.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
}

/// `value` of `total`: an int, or a percentage rounded up or down
/// (`GetScaledValueFromIntOrPercent`).
pub fn scaled(value: &IntOrString, total: i32, round_up: bool) -> Result<i32, String> {
    match value {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let product = percent * i64::from(total);
            let value =
                if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
            Ok(i32::try_from(value).unwrap_or(i32::MAX))
        }
    }
}

/// maxSurge and maxUnavailable of a rolling update of `desired` pods (`ResolveFenceposts`): surge
/// rounds up, unavailable down, and both zero makes unavailable one.
pub fn fenceposts(d: &Deployment, desired: i32) -> (i32, i32) {
    let rolling =
        d.spec.as_ref().and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
    let default = IntOrString::String("25%".into());
    let surge = rolling.and_then(|r| r.max_surge.as_ref()).unwrap_or(&default);
    let unavailable = rolling.and_then(|r| r.max_unavailable.as_ref()).unwrap_or(&default);
    let surge = scaled(surge, desired, true).unwrap_or(0);
    let unavailable = scaled(unavailable, desired, false).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

/// maxSurge of `d` (0 unless it rolls).
pub fn max_surge(d: &Deployment) -> i32 {
    if !is_rolling(d) {
        return 0;
    }
    fenceposts(d, replicas(d)).0
}

/// maxUnavailable of `d` (0 unless it rolls or when it wants none; at most its replicas).
pub fn max_unavailable(d: &Deployment) -> i32 {
    let desired = replicas(d);
    if !is_rolling(d) || desired == 0 {
        return 0;
    }
    fenceposts(d, desired).1.min(desired)
}

/// The replicas the new ReplicaSet should have now (`NewRSNewReplicas`).
pub fn new_rs_replicas(d: &Deployment, all: &[&ReplicaSet], new: i32) -> i32 {
    let desired = replicas(d);
    if !is_rolling(d) {
        return desired;
    }
    if new >= desired {
        return new;
    }
    let max_total = desired + max_surge(d);
    let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    if current >= max_total {
        return new;
    }
    let up = (max_total - current).min(desired - new);
    new + up
}

/// The revision of an object (0 when it has none or it does not parse).
pub fn revision(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn created(rs: &ReplicaSet) -> (Option<i64>, String) {
    let at = rs.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
    (at, rs.metadata.name.clone().unwrap_or_default())
}

/// `rss` oldest first (`ReplicaSetsByCreationTimestamp`).
pub fn by_creation(rss: &mut [ReplicaSet]) {
    rss.sort_by_key(created);
}

/// The index of the new ReplicaSet of `d` among `rss` (sorted oldest first): the oldest whose
/// template is the Deployment's (`FindNewReplicaSet`).
pub fn find_new(d: &Deployment, rss: &[ReplicaSet]) -> Option<usize> {
    let template = template(d);
    rss.iter().position(|rs| {
        rs.spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .is_some_and(|t| equal_ignore_hash(t, &template))
    })
}

/// The annotations the new ReplicaSet should carry (`SetNewReplicaSetAnnotations`): the
/// Deployment's (but its own), the new revision (once above the RS's, the old one going to the
/// history), and, for one about to be created, the replicas annotations.
pub fn new_rs_annotations(
    d: &Deployment,
    current: &BTreeMap<String, String>,
    new_revision: i64,
    exists: bool,
) -> BTreeMap<String, String> {
    let mut annotations = current.clone();
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if !NOT_COPIED.contains(&k.as_str()) {
            annotations.insert(k.clone(), v.clone());
        }
    }
    let old = current.get(REVISION).cloned();
    let old_number: i64 = old.as_deref().and_then(|r| r.parse().ok()).unwrap_or(0);
    if old_number < new_revision {
        annotations.insert(REVISION.into(), new_revision.to_string());
        if let Some(old) = old.filter(|o| !o.is_empty()) {
            let history = match current.get(REVISION_HISTORY).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h},{old}"),
                None => old,
            };
            annotations.insert(REVISION_HISTORY.into(), history);
        }
    }
    if !exists {
        let desired = replicas(d);
        annotations.insert(DESIRED_REPLICAS.into(), desired.to_string());
        annotations.insert(MAX_REPLICAS.into(), (desired + max_surge(d)).to_string());
    }
    annotations
}

/// A condition as `NewDeploymentCondition` makes it, at `now`.
pub fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> DeploymentCondition {
    let at = k8s_openapi::jiff::Timestamp::from_second(now.timestamp()).ok().map(Time);
    DeploymentCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: at.clone(),
        last_transition_time: at,
    }
}

pub fn get_condition<'a>(
    status: &'a DeploymentStatus,
    kind: &str,
) -> Option<&'a DeploymentCondition> {
    status.conditions.as_ref()?.iter().find(|c| c.type_ == kind)
}

/// Set `c` in `status` (`SetDeploymentCondition`): nothing changes when one of its type has its
/// status and reason already; one of the same status keeps its transition time.
pub fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(current) = get_condition(status, &c.type_) {
        if current.status == c.status && current.reason == c.reason {
            return;
        }
        if current.status == c.status {
            c.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &c.type_);
    status.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn remove_condition(status: &mut DeploymentStatus, kind: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != kind);
        if conditions.is_empty() {
            status.conditions = None;
        }
    }
}

/// The status `all` (the new ReplicaSet among them) make (`calculateStatus`): counts and the
/// `Available` condition.
pub fn calculate_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let current = d.status.clone().unwrap_or_default();
    let available: i32 = all.iter().map(|rs| rs_available(rs)).sum();
    let total: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let mut status = DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(all.iter().map(|rs| rs_actual(rs)).sum()),
        updated_replicas: Some(new.map(rs_actual).unwrap_or(0)),
        ready_replicas: Some(all.iter().map(|rs| rs_ready(rs)).sum()),
        available_replicas: Some(available),
        unavailable_replicas: Some((total - available).max(0)),
        collision_count: current.collision_count,
        conditions: current.conditions,
        terminating_replicas: None,
    };
    if available >= replicas(d) - max_unavailable(d) {
        let c = condition(
            AVAILABLE,
            "True",
            MIN_AVAILABLE,
            "Deployment has minimum availability.".into(),
            now,
        );
        set_condition(&mut status, c);
    } else {
        let c = condition(
            AVAILABLE,
            "False",
            MIN_UNAVAILABLE,
            "Deployment does not have minimum availability.".into(),
            now,
        );
        set_condition(&mut status, c);
    }
    status
}

/// Whether `d` has a progress deadline (`HasProgressDeadline`).
pub fn progress_deadline(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.progress_deadline_seconds).filter(|s| *s != i32::MAX)
}

fn n(v: Option<i32>) -> i32 {
    v.unwrap_or(0)
}

/// Whether `status` is `d` rolled out: all updated, all available, nothing old
/// (`DeploymentComplete`).
pub fn complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    let desired = replicas(d);
    n(status.updated_replicas) == desired
        && n(status.replicas) == desired
        && n(status.available_replicas) == desired
        && status.observed_generation >= d.metadata.generation
}

/// Whether `new` is progress over `d`'s status (`DeploymentProgressing`).
pub fn progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = d.status.clone().unwrap_or_default();
    let old_old = n(old.replicas) - n(old.updated_replicas);
    let new_old = n(new.replicas) - n(new.updated_replicas);
    n(new.updated_replicas) > n(old.updated_replicas)
        || new_old < old_old
        || n(new.ready_replicas) > n(old.ready_replicas)
        || n(new.available_replicas) > n(old.available_replicas)
}

/// Whether `d` has made no progress for its deadline at `now` (`DeploymentTimedOut`).
pub fn timed_out(d: &Deployment, status: &DeploymentStatus, now: DateTime<Utc>) -> bool {
    let Some(deadline) = progress_deadline(d) else { return false };
    let Some(c) = get_condition(status, PROGRESSING) else { return false };
    match c.reason.as_deref() {
        Some(NEW_RS_AVAILABLE) => false,
        Some(TIMED_OUT) => true,
        _ => {
            let Some(from) = c.last_update_time.as_ref() else { return false };
            from.0.as_second() + i64::from(deadline) < now.timestamp()
        }
    }
}

/// The status a rollout leaves (`syncRolloutStatus`): counts, `Available`, `Progressing` (with
/// the deadline) and `ReplicaFailure` copied from a ReplicaSet that has one.
pub fn rollout_status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new: Option<&ReplicaSet>,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let mut status = calculate_status(d, all, new, now);
    if progress_deadline(d).is_none() {
        remove_condition(&mut status, PROGRESSING);
    }
    let current = get_condition(&status, PROGRESSING).cloned();
    let is_complete = status.replicas == status.updated_replicas
        && current.as_ref().is_some_and(|c| c.reason.as_deref() == Some(NEW_RS_AVAILABLE));
    if progress_deadline(d).is_some() && !is_complete {
        let subject = match new.and_then(|rs| rs.metadata.name.as_deref()) {
            Some(name) => format!("ReplicaSet {name:?}"),
            None => format!("Deployment {:?}", d.metadata.name.as_deref().unwrap_or_default()),
        };
        if complete(d, &status) {
            let c = condition(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE,
                format!("{subject} has successfully progressed."),
                now,
            );
            remove_condition(&mut status, PROGRESSING);
            set_condition(&mut status, c);
        } else if progressing(d, &status) {
            let mut c = condition(
                PROGRESSING,
                "True",
                RS_UPDATED,
                format!("{subject} is progressing."),
                now,
            );
            if let Some(current) = current.as_ref().filter(|c| c.status == "True") {
                c.last_transition_time = current.last_transition_time.clone();
            }
            remove_condition(&mut status, PROGRESSING);
            set_condition(&mut status, c);
        } else if timed_out(d, &status, now) {
            let c = condition(
                PROGRESSING,
                "False",
                TIMED_OUT,
                format!("{subject} has timed out progressing."),
                now,
            );
            set_condition(&mut status, c);
        }
    }
    let failure = all.iter().find_map(|rs| {
        rs.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == REPLICA_FAILURE)
            .cloned()
    });
    match failure {
        Some(f) => {
            let c = condition(
                REPLICA_FAILURE,
                &f.status,
                f.reason.as_deref().unwrap_or_default(),
                f.message.unwrap_or_default(),
                now,
            );
            set_condition(&mut status, c);
        }
        None => remove_condition(&mut status, REPLICA_FAILURE),
    }
    status
}

/// When to look again at a rollout that may time out (`requeueStuckDeployment`): `None` when
/// time alone changes nothing.
pub fn stuck_requeue(
    d: &Deployment,
    status: &DeploymentStatus,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let deadline = progress_deadline(d)?;
    let c = get_condition(status, PROGRESSING)?;
    if matches!(c.reason.as_deref(), Some(NEW_RS_AVAILABLE | TIMED_OUT)) || complete(d, status) {
        return None;
    }
    let from = c.last_update_time.as_ref()?.0.as_second();
    let after = from + i64::from(deadline) - now.timestamp();
    // The deadline passes once a whole second is over it (times are in whole seconds).
    Some(std::time::Duration::from_secs(u64::try_from(after.max(0)).unwrap_or(0) + 1))
}

/// Whether the two statuses differ (a count of zero and an absent one are the same).
pub fn status_differs(a: &DeploymentStatus, b: &DeploymentStatus) -> bool {
    fn normal(s: &DeploymentStatus) -> Option<serde_json::Value> {
        let mut v = serde_json::to_value(s).ok()?;
        if let Some(map) = v.as_object_mut() {
            map.retain(|_, v| !v.is_null() && *v != serde_json::json!(0));
        }
        Some(v)
    }
    normal(a) != normal(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(value: serde_json::Value) -> Deployment {
        serde_json::from_value(value).unwrap()
    }

    fn rolling(
        replicas: i32,
        surge: serde_json::Value,
        unavailable: serde_json::Value,
    ) -> Deployment {
        deployment(json!({"metadata": {"name": "web"}, "spec": {
            "replicas": replicas, "selector": {},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "a"}]}}}}))
    }

    #[test]
    fn surge_rounds_up_unavailable_down_and_both_zero_is_one_unavailable() {
        assert_eq!(fenceposts(&rolling(10, json!("25%"), json!("25%")), 10), (3, 2));
        assert_eq!(fenceposts(&rolling(3, json!(1), json!(0)), 3), (1, 0));
        assert_eq!(fenceposts(&rolling(3, json!(0), json!(0)), 3), (0, 1));
        assert_eq!(fenceposts(&rolling(1, json!("10%"), json!("10%")), 1), (1, 0));
        assert_eq!(max_unavailable(&rolling(2, json!(0), json!(5))), 2, "at most the replicas");
        assert!(scaled(&IntOrString::String("x%".into()), 3, true).is_err());
    }

    #[test]
    fn the_hash_is_stable_differs_by_template_and_collision_count() {
        let a = template(&rolling(1, json!(1), json!(0)));
        let mut b = a.clone();
        b.spec.as_mut().unwrap().containers[0].image = Some("b".into());
        let h = template_hash(&a, None);
        assert_eq!(h, template_hash(&a.clone(), None));
        assert_ne!(h, template_hash(&b, None));
        assert_ne!(h, template_hash(&a, Some(1)));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)), "{h}");
        let mut hashed = a.clone();
        hashed.metadata.as_mut().unwrap().labels.as_mut().unwrap().insert(HASH_LABEL.into(), h);
        assert!(equal_ignore_hash(&a, &hashed));
        assert!(!equal_ignore_hash(&b, &hashed));
        // What a Go client drops is no difference (kubectl rollout undo sends the template so).
        let mut explicit = serde_json::to_value(&a).unwrap();
        explicit["metadata"]["generation"] = serde_json::json!(0);
        explicit["metadata"]["creationTimestamp"] = serde_json::Value::Null;
        explicit["spec"]["hostIPC"] = serde_json::json!(false);
        let explicit: PodTemplateSpec = serde_json::from_value(explicit).unwrap();
        assert!(equal_ignore_hash(&explicit, &a));
        assert_eq!(template_hash(&explicit, None), template_hash(&a, None));
    }

    #[test]
    fn the_new_replica_set_grows_within_max_surge() {
        let d = rolling(3, json!(1), json!(0));
        let old = |n: i32| -> ReplicaSet {
            serde_json::from_value(json!({"spec": {"replicas": n, "selector": {}}})).unwrap()
        };
        let (o3, n0) = (old(3), old(0));
        assert_eq!(new_rs_replicas(&d, &[&o3, &n0], 0), 1);
        let (o2, n1) = (old(2), old(1));
        assert_eq!(new_rs_replicas(&d, &[&o2, &n1], 1), 2);
        let (o3b, n1b) = (old(3), old(1));
        assert_eq!(new_rs_replicas(&d, &[&o3b, &n1b], 1), 1, "already at 4 = 3 + surge");
    }

    #[test]
    fn a_revision_above_the_old_one_moves_it_to_the_history() {
        let mut d = rolling(2, json!(1), json!(0));
        d.metadata.annotations = Some(
            [("team".to_string(), "a".to_string()), (REVISION.to_string(), "9".to_string())].into(),
        );
        let fresh = new_rs_annotations(&d, &BTreeMap::new(), 1, false);
        assert_eq!(fresh.get(REVISION).map(String::as_str), Some("1"));
        assert_eq!(fresh.get("team").map(String::as_str), Some("a"));
        assert_eq!(fresh.get(DESIRED_REPLICAS).map(String::as_str), Some("2"));
        assert_eq!(fresh.get(MAX_REPLICAS).map(String::as_str), Some("3"));
        let undone = new_rs_annotations(&d, &fresh, 3, true);
        assert_eq!(undone.get(REVISION).map(String::as_str), Some("3"));
        assert_eq!(undone.get(REVISION_HISTORY).map(String::as_str), Some("1"));
        assert_eq!(new_rs_annotations(&d, &undone, 2, true), undone, "never lowered");
    }

    #[test]
    fn a_condition_of_the_same_status_and_reason_is_kept() {
        let now = Utc::now();
        let mut status = DeploymentStatus::default();
        set_condition(&mut status, condition(PROGRESSING, "True", NEW_RS_CREATED, "a".into(), now));
        let later = now + chrono::Duration::seconds(10);
        set_condition(
            &mut status,
            condition(PROGRESSING, "True", NEW_RS_CREATED, "b".into(), later),
        );
        assert_eq!(get_condition(&status, PROGRESSING).unwrap().message.as_deref(), Some("a"));
        set_condition(&mut status, condition(PROGRESSING, "True", RS_UPDATED, "c".into(), later));
        let c = get_condition(&status, PROGRESSING).unwrap();
        assert_eq!(c.reason.as_deref(), Some(RS_UPDATED));
        assert_eq!(c.last_transition_time.as_ref().unwrap().0.as_second(), now.timestamp());
        assert_eq!(c.last_update_time.as_ref().unwrap().0.as_second(), later.timestamp());
    }
}
