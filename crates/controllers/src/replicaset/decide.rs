//! What a ReplicaSet (or ReplicationController) should do about its pods, decided from what is
//! observed, with no I/O: which pods to delete first (`getPodsToDelete`), how many to create at
//! once (`slowStartBatch`), and the status the pods make (`calculateStatus`).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;

use crate::pods;

/// Most pods created or deleted by one reconcile (kube-controller-manager's `burstReplicas`).
pub const BURST_REPLICAS: usize = 500;

/// The annotation that makes a pod cheaper (lower) or dearer to delete.
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The sizes of the batches in which `count` pods are created: 1, 2, 4, … (`slowStartBatch`), so
/// that a template the API refuses is refused once rather than `count` times.
pub fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut size) = (count, 1usize);
    while left > 0 {
        let batch = size.min(left);
        batches.push(batch);
        left -= batch;
        size = size.saturating_mul(2);
    }
    batches
}

fn phase_ordinal(pod: &Pod) -> u8 {
    match pods::phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn node(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

fn deletion_cost(pod: &Pod) -> i64 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DELETION_COST))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn restarts(pod: &Pod) -> i32 {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses.into_iter().flatten().map(|c| c.restart_count).max().unwrap_or(0)
}

fn created(pod: &Pod) -> Option<i64> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second())
}

/// `pods` in the order they should be deleted, first the ones to delete first, as
/// `ActivePodsWithRanks` orders them: unscheduled before scheduled; pending before unknown before
/// running; not ready before ready; lower deletion cost first; more pods of the same owner on
/// their node first; ready for less time first; more restarts first; newer first.
///
/// Kubernetes ranks a pod by the pods of all the ReplicaSets of its owner's owner on its node;
/// here the rank counts the pods of this controller alone.
pub fn deletion_order(mut pods: Vec<Pod>) -> Vec<Pod> {
    let mut on_node: HashMap<String, usize> = HashMap::new();
    for p in &pods {
        *on_node.entry(node(p).to_owned()).or_default() += 1;
    }
    let rank =
        |p: &Pod| if node(p).is_empty() { 0 } else { on_node.get(node(p)).copied().unwrap_or(0) };
    pods.sort_by(|a, b| {
        let assigned = |p: &Pod| !node(p).is_empty();
        assigned(a)
            .cmp(&assigned(b))
            .then_with(|| phase_ordinal(a).cmp(&phase_ordinal(b)))
            .then_with(|| pods::is_ready(a).cmp(&pods::is_ready(b)))
            .then_with(|| deletion_cost(a).cmp(&deletion_cost(b)))
            .then_with(|| rank(b).cmp(&rank(a)))
            .then_with(|| match (pods::ready_since(a), pods::ready_since(b)) {
                // Ready more recently: deleted first.
                (Some(x), Some(y)) => y.cmp(&x),
                _ => Ordering::Equal,
            })
            .then_with(|| restarts(b).cmp(&restarts(a)))
            .then_with(|| match (created(a), created(b)) {
                (Some(x), Some(y)) => y.cmp(&x),
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            })
    });
    pods
}

/// The counts a ReplicaSet's status holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub replicas: i32,
    pub fully_labeled: i32,
    pub ready: i32,
    pub available: i32,
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The counts of `owned`, the active pods a controller holds: all of them, those carrying every
/// label of the template, the ready ones, and those ready for `min_ready_seconds` at `now`.
pub fn counts(
    owned: &[Pod],
    template_labels: Option<&BTreeMap<String, String>>,
    min_ready_seconds: i32,
    now: DateTime<Utc>,
) -> Counts {
    let labeled = |p: &Pod| {
        template_labels
            .into_iter()
            .flatten()
            .all(|(k, v)| p.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v))
    };
    Counts {
        replicas: count(owned.len()),
        fully_labeled: count(owned.iter().filter(|p| labeled(p)).count()),
        ready: count(owned.iter().filter(|p| pods::is_ready(p)).count()),
        available: count(
            owned.iter().filter(|p| pods::is_available(p, min_ready_seconds, now)).count(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, extra: serde_json::Value) -> Pod {
        let mut v =
            json!({"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"}});
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn ready(at: &str) -> serde_json::Value {
        json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": at}]}})
    }

    fn names(pods: &[Pod]) -> Vec<&str> {
        pods.iter().map(|p| p.metadata.name.as_deref().unwrap()).collect()
    }

    #[test]
    fn batches_double_until_the_count_is_made() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), vec![1]);
        assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
    }

    #[test]
    fn unscheduled_pending_unready_and_newer_pods_go_first() {
        let old_ready = pod("old-ready", ready("2026-01-01T00:00:00Z"));
        let new_ready = pod("new-ready", ready("2026-01-01T00:05:00Z"));
        let running_unready = pod(
            "running-unready",
            json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
        );
        let scheduled_pending = pod("scheduled-pending", json!({"spec": {"nodeName": "n2"}}));
        let unscheduled = pod("unscheduled", json!({}));
        let newer_unscheduled = pod(
            "newer-unscheduled",
            json!({"metadata": {"creationTimestamp": "2026-01-02T00:00:00Z"}}),
        );
        let cheap = pod(
            "cheap",
            merge_into(
                ready("2026-01-01T00:00:00Z"),
                json!({"metadata": {"annotations": {DELETION_COST: "-5"}}}),
            ),
        );
        let order = deletion_order(vec![
            old_ready,
            new_ready,
            cheap,
            running_unready,
            scheduled_pending,
            unscheduled,
            newer_unscheduled,
        ]);
        assert_eq!(
            names(&order),
            [
                "newer-unscheduled",
                "unscheduled",
                "scheduled-pending",
                "running-unready",
                "cheap",
                "new-ready",
                "old-ready"
            ]
        );
    }

    fn merge_into(mut a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
        merge(&mut a, b);
        a
    }

    #[test]
    fn counts_read_labels_readiness_and_min_ready_seconds() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let owned = vec![
            pod(
                "a",
                merge_into(
                    ready("2026-01-01T00:00:00Z"),
                    json!({"metadata": {"labels": {"app": "web"}}}),
                ),
            ),
            pod("b", ready("2026-01-01T00:00:50Z")),
            pod("c", json!({"metadata": {"labels": {"app": "web", "x": "y"}}})),
        ];
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:01:00Z").unwrap().with_timezone(&Utc);
        let c = counts(&owned, Some(&labels), 30, now);
        assert_eq!(c, Counts { replicas: 3, fully_labeled: 2, ready: 2, available: 1 });
        assert_eq!(counts(&owned, Some(&labels), 0, now).available, 2);
    }
}
