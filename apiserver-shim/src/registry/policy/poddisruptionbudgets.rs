//! PodDisruptionBudgets (`poddisruptionbudgets` in `policy/v1`): how the API server serves them.
//!
//! As kube-apiserver's `pkg/registry/policy/poddisruptionbudget`: the spec is checked by
//! `ValidatePodDisruptionBudgetSpec` (at most one of `minAvailable` and `maxUnavailable`, each a
//! non-negative integer or a percent of at most 100%, a valid selector, a known
//! `unhealthyPodEvictionPolicy`), the status by `ValidatePodDisruptionBudgetStatusUpdate`
//! (non-negative counts, well-formed conditions). The status is a struct in Go, so every
//! PodDisruptionBudget shows its four counts, zero until the disruption controller writes them.
//! The spec may change after creation (policy/v1), which moves `metadata.generation`.

use std::collections::HashSet;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::{json, Value};

use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{at_most_100_percent, compact, int_or_percent, label_selector, Errors};

/// The `poddisruptionbudgets` resource type.
pub const TYPE: ResourceType = served(
    "policy",
    "v1",
    "PodDisruptionBudget",
    "poddisruptionbudgets",
    "poddisruptionbudget",
    true,
    &["pdb"],
    NONE,
    STATUS,
    &PodDisruptionBudgets,
);

/// The eviction policies for pods that are running but not ready.
pub const UNHEALTHY_POD_EVICTION_POLICIES: &[&str] = &["AlwaysAllow", "IfHealthyBudget"];

/// The counts of a status, which Go writes even when zero.
const COUNTS: &[&str] = &["disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"];

/// The strategy for PodDisruptionBudgets.
#[derive(Debug)]
pub struct PodDisruptionBudgets;

impl Validate for PodDisruptionBudgets {
    type Object = PodDisruptionBudget;

    fn validate(&self, object: &PodDisruptionBudget, e: &mut Errors) {
        spec(object.spec.as_ref(), e);
        if let Some(status) = &object.status {
            let path = "status";
            conditions(status.conditions.as_deref().unwrap_or_default(), "status.conditions", e);
            e.nonnegative(Some(status.disruptions_allowed), &format!("{path}.disruptionsAllowed"));
            e.nonnegative(Some(status.current_healthy), &format!("{path}.currentHealthy"));
            e.nonnegative(Some(status.desired_healthy), &format!("{path}.desiredHealthy"));
            e.nonnegative(Some(status.expected_pods), &format!("{path}.expectedPods"));
        }
    }
}

/// `ValidatePodDisruptionBudgetSpec`.
fn spec(spec: Option<&PodDisruptionBudgetSpec>, e: &mut Errors) {
    let empty = PodDisruptionBudgetSpec::default();
    let spec = spec.unwrap_or(&empty);
    if spec.min_available.is_some() && spec.max_unavailable.is_some() {
        e.invalid("spec", &compact(spec), "minAvailable and maxUnavailable cannot be both set");
    }
    for (value, path) in [
        (spec.min_available.as_ref(), "spec.minAvailable"),
        (spec.max_unavailable.as_ref(), "spec.maxUnavailable"),
    ] {
        if value.is_some() {
            int_or_percent(value, path, e);
            at_most_100_percent(value, path, e);
        }
    }
    label_selector(spec.selector.as_ref(), "spec.selector", e);
    if let Some(policy) = &spec.unhealthy_pod_eviction_policy {
        if !UNHEALTHY_POD_EVICTION_POLICIES.contains(&policy.as_str()) {
            e.not_supported(
                "spec.unhealthyPodEvictionPolicy",
                &quote(policy),
                UNHEALTHY_POD_EVICTION_POLICIES,
            );
        }
    }
}

/// `metav1validation.ValidateConditions`.
fn conditions(conditions: &[Condition], path: &str, e: &mut Errors) {
    let mut seen = HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if !seen.insert(c.type_.as_str()) {
            e.duplicate(&format!("{at}.type"), &quote(&c.type_));
        }
        e.invalid_each(&format!("{at}.type"), &c.type_, names::qualified_name(&c.type_));
        if !["False", "True", "Unknown"].contains(&c.status.as_str()) {
            e.not_supported(
                &format!("{at}.status"),
                &quote(&c.status),
                &["False", "True", "Unknown"],
            );
        }
        if c.observed_generation.is_some_and(|g| g < 0) {
            e.invalid(
                &format!("{at}.observedGeneration"),
                &c.observed_generation.unwrap_or_default().to_string(),
                "must be greater than or equal to zero",
            );
        }
        if c.reason.is_empty() {
            e.required(&format!("{at}.reason"), "must be set");
        } else {
            if !is_condition_reason(&c.reason) {
                e.invalid(
                    &format!("{at}.reason"),
                    &quote(&c.reason),
                    &names::regex_error(
                        "a condition reason must start with alphabetic character, optionally \
                         followed by a string of alphanumeric characters or '_,:', and must end \
                         with an alphanumeric character or '_'",
                        "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?",
                        &["my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"],
                    ),
                );
            }
            if c.reason.len() > 1024 {
                e.too_long(&format!("{at}.reason"), 1024);
            }
        }
        if c.message.len() > 32768 {
            e.too_long(&format!("{at}.message"), 32768);
        }
    }
}

/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
fn is_condition_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let Some((first, rest)) = bytes.split_first() else { return false };
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    first.is_ascii_alphabetic()
        && rest.iter().all(inner)
        && rest.last().is_none_or(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

impl Strategy for PodDisruptionBudgets {
    fn defaults(&self, object: &mut Value) {
        // Its status is a struct whose counts have no `omitempty` in Go.
        if let Some(status) = object_at(object, "status") {
            for count in COUNTS {
                set_default(status, count, json!(0));
            }
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Min Available", "string", "The minimum number of pods that must be available."),
            col("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
            col(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let shown = |field: &str| match o.pointer(&format!("/spec/{field}")) {
            Some(Value::String(s)) => json!(s),
            Some(Value::Number(n)) => json!(n.to_string()),
            _ => json!("N/A"),
        };
        let allowed = o.pointer("/status/disruptionsAllowed").and_then(Value::as_i64).unwrap_or(0);
        vec![
            name_cell(o),
            shown("minAvailable"),
            shown("maxUnavailable"),
            json!(allowed),
            age_cell(o),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Decode;

    fn causes(object: Value) -> Vec<(String, String)> {
        let mut object = object;
        PodDisruptionBudgets.defaults(&mut object);
        let found = PodDisruptionBudgets.check(&TYPE, &object, None).expect("decodes");
        found.into_iter().map(|c| (c.field, c.message)).collect()
    }

    fn pdb(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn a_budget_is_one_of_min_available_and_max_unavailable_each_a_count_or_percent() {
        let selector = json!({"matchLabels": {"app": "web"}});
        assert!(causes(pdb(json!({"minAvailable": 1, "selector": selector}))).is_empty());
        assert!(causes(pdb(json!({"maxUnavailable": "25%", "selector": selector}))).is_empty());
        assert!(causes(pdb(json!({"selector": selector}))).is_empty(), "neither is allowed");

        let both = causes(pdb(json!({"minAvailable": 1, "maxUnavailable": 1})));
        assert_eq!(both.len(), 1, "{both:?}");
        assert_eq!(both[0].0, "spec");
        assert!(both[0].1.ends_with("minAvailable and maxUnavailable cannot be both set"));

        let negative = causes(pdb(json!({"minAvailable": -1})));
        assert_eq!(
            negative,
            [(
                "spec.minAvailable".to_owned(),
                "Invalid value: -1: must be greater than or equal to 0".to_owned()
            )]
        );
        let over = causes(pdb(json!({"maxUnavailable": "150%"})));
        assert_eq!(
            over,
            [(
                "spec.maxUnavailable".to_owned(),
                "Invalid value: 150%: must not be greater than 100%".to_owned()
            )]
        );
        let word = causes(pdb(json!({"minAvailable": "half"})));
        assert_eq!(word.len(), 1);
        assert!(word[0].1.starts_with("Invalid value: half: a valid percent string"), "{word:?}");
    }

    #[test]
    fn the_selector_and_eviction_policy_are_checked() {
        let bad = causes(pdb(json!({
            "minAvailable": 1,
            "selector": {"matchExpressions": [{"key": "app", "operator": "In"}]},
            "unhealthyPodEvictionPolicy": "Sometimes",
        })));
        let fields: Vec<&str> = bad.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.selector.matchExpressions[0].values", "spec.unhealthyPodEvictionPolicy"]
        );
        assert_eq!(
            bad[1].1,
            "Unsupported value: \"Sometimes\": supported values: \"AlwaysAllow\", \"IfHealthyBudget\""
        );
    }

    #[test]
    fn the_status_shows_its_counts_and_they_may_not_be_negative() {
        let mut object = pdb(json!({"minAvailable": 1}));
        PodDisruptionBudgets.defaults(&mut object);
        assert_eq!(
            object["status"],
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
        );
        object["status"]["disruptionsAllowed"] = json!(-1);
        object["status"]["conditions"] = json!([{
            "type": "DisruptionAllowed", "status": "Maybe", "reason": "not:valid:",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]);
        let found = PodDisruptionBudgets.check(&TYPE, &object, None).expect("decodes");
        let fields: Vec<&str> = found.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "status.conditions[0].status",
                "status.conditions[0].reason",
                "status.disruptionsAllowed"
            ]
        );
        assert!(is_condition_reason("SufficientPods") && is_condition_reason("A_b,c:d"));
        assert!(
            !is_condition_reason("1a") && !is_condition_reason("a:") && !is_condition_reason("")
        );
    }

    #[test]
    fn kubectl_get_shows_the_budget_and_the_disruptions_allowed() {
        let object = json!({
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 1},
            "status": {"disruptionsAllowed": 1},
        });
        let cells = PodDisruptionBudgets.cells(&TYPE, &object);
        assert_eq!(cells[..4], [json!("web"), json!("1"), json!("N/A"), json!(1)]);
        let names: Vec<Value> =
            PodDisruptionBudgets.columns(&TYPE).iter().map(|c| c["name"].clone()).collect();
        assert_eq!(
            names,
            [
                json!("Name"),
                json!("Min Available"),
                json!("Max Unavailable"),
                json!("Allowed Disruptions"),
                json!("Age")
            ]
        );
    }
}
