//! A Job's `podFailurePolicy`: which rule a failed pod matches, and what that rule does, as
//! kube-controller-manager's `matchPodFailurePolicy` decides it.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a matching rule does with a failed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The Job fails; the message says why (the Job's `PodFailurePolicy` condition message).
    FailJob(String),
    /// The pod's index fails (Indexed Jobs with `backoffLimitPerIndex`).
    FailIndex,
    /// The failure is not counted.
    Ignore,
    /// The failure is counted as any other (also what happens when no rule matches).
    Count,
}

/// The action of the first rule of `policy` that the failed `pod` matches (`Count` when none).
pub fn action(policy: &PodFailurePolicy, pod: &Pod) -> Action {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (index, rule) in policy.rules.iter().enumerate() {
        let matched = if let Some(codes) = rule.on_exit_codes.as_ref() {
            failed_container(pod, codes).map(|c| {
                let code = c.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code);
                format!(
                    "Container {} for pod {namespace}/{name} failed with exit code {} matching {} rule at index {index}",
                    c.name,
                    code.unwrap_or_default(),
                    rule.action
                )
            })
        } else {
            rule.on_pod_conditions.as_ref().and_then(|wanted| {
                let conditions = pod.status.as_ref()?.conditions.as_deref()?;
                wanted.iter().find_map(|w| {
                    let status = if w.status.is_empty() { "True" } else { w.status.as_str() };
                    conditions.iter().any(|c| c.type_ == w.type_ && c.status == status).then(|| {
                        format!(
                            "Pod {namespace}/{name} has condition {} matching {} rule at index {index}",
                            w.type_, rule.action
                        )
                    })
                })
            })
        };
        let Some(message) = matched else { continue };
        return match rule.action.as_str() {
            "FailJob" => Action::FailJob(message),
            "FailIndex" => Action::FailIndex,
            "Ignore" => Action::Ignore,
            _ => Action::Count,
        };
    }
    Action::Count
}

/// The first container (then init container) of `pod` that terminated with a non-zero exit code
/// that `codes` matches.
fn failed_container<'a>(
    pod: &'a Pod,
    codes: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let lists = [status.container_statuses.as_deref(), status.init_container_statuses.as_deref()];
    lists.into_iter().flatten().flatten().find(|c| {
        if codes.container_name.as_ref().is_some_and(|n| *n != c.name) {
            return false;
        }
        let code = c.state.as_ref().and_then(|s| s.terminated.as_ref()).map(|t| t.exit_code);
        match code {
            None | Some(0) => false,
            Some(code) => match codes.operator.as_str() {
                "In" => codes.values.contains(&code),
                "NotIn" => !codes.values.contains(&code),
                _ => false,
            },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(exit_codes: &[(&str, i32)], conditions: serde_json::Value) -> Pod {
        let statuses: Vec<_> = exit_codes
            .iter()
            .map(|(name, code)| {
                json!({"name": name, "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": code}}})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "containerStatuses": statuses, "conditions": conditions},
        }))
        .unwrap()
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": rules })).unwrap()
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]));
        let pod = failed(&[("side", 0), ("main", 42)], json!([]));
        assert_eq!(
            action(&p, &pod),
            Action::FailJob(
                "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1".into()
            )
        );
        let disrupted =
            failed(&[("main", 42)], json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert_eq!(action(&p, &disrupted), Action::Ignore);
        assert_eq!(action(&p, &failed(&[("main", 1)], json!([]))), Action::Count);
        let only_zero = policy(
            json!([{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [5]}}]),
        );
        assert_eq!(action(&only_zero, &failed(&[("main", 0)], json!([]))), Action::Count);
        assert!(matches!(
            action(&only_zero, &failed(&[("main", 3)], json!([]))),
            Action::FailJob(_)
        ));
    }
}
