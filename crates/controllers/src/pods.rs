//! What the workload controllers read of pods and make of pod templates, as
//! kube-controller-manager's `controller_utils.go` and `podutil` do.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// Whether `pod` still counts toward its controller's replicas: not finished, not deleting.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !is_finished(pod)
}

/// Whether `pod` has finished: phase `Succeeded` or `Failed`.
pub fn is_finished(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// The pod's phase (`Pending` when it has none yet).
pub fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending")
}

/// When the pod's `Ready` condition last became `True`, if it is `True`.
pub fn ready_since(pod: &Pod) -> Option<DateTime<Utc>> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    let since = ready.last_transition_time.as_ref().map(|t| t.0.as_second());
    Some(since.and_then(|s| DateTime::from_timestamp(s, 0)).unwrap_or(DateTime::UNIX_EPOCH))
}

/// Whether the pod is ready.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Whether the pod has been ready for `min_ready_seconds` at `now` (`IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: DateTime<Utc>) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(since) => since + chrono::Duration::seconds(min_ready_seconds.into()) <= now,
    }
}

/// A new pod of `template` in `namespace`, controlled by `owner`, named `<prefix>-<random>` by
/// the API server (`generateName`), as `GetPodFromTemplate` makes it.
pub fn from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    prefix: &str,
    owner: OwnerReference,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            namespace: Some(namespace.to_owned()),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn active_ready_and_available_read_phase_deletion_and_the_ready_condition() {
        let pending = pod(json!({"metadata": {"name": "p"}}));
        assert!(is_active(&pending) && !is_ready(&pending) && phase(&pending) == "Pending");
        let done = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}}));
        assert!(!is_active(&done) && is_finished(&done));
        let deleting =
            pod(json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert!(!is_active(&deleting));
        let ready = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}));
        assert!(is_ready(&ready));
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert!(is_available(&ready, 0, at("2026-01-01T00:00:00Z")));
        assert!(!is_available(&ready, 10, at("2026-01-01T00:00:09Z")));
        assert!(is_available(&ready, 10, at("2026-01-01T00:00:10Z")));
        let not_ready = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}]}}));
        assert!(!is_ready(&not_ready) && !is_available(&not_ready, 0, Utc::now()));
    }

    #[test]
    fn a_pod_from_a_template_carries_its_labels_spec_and_controller() {
        let template: PodTemplateSpec = serde_json::from_value(json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }))
        .unwrap();
        let owner = OwnerReference {
            name: "web-1".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        };
        let made = from_template(&template, "default", "web-1", owner.clone());
        assert_eq!(made.metadata.generate_name.as_deref(), Some("web-1-"));
        assert_eq!(made.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(made.metadata.labels, template.metadata.as_ref().unwrap().labels);
        assert_eq!(made.metadata.owner_references, Some(vec![owner]));
        assert_eq!(made.spec, template.spec);
    }
}
