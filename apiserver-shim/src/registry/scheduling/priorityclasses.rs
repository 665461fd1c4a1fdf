//! PriorityClasss (`priorityclasses` in `scheduling.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{json, Value};

use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::validation::{same, shown, Errors};

/// The `priorityclasses` resource type.
pub const TYPE: ResourceType = served(
    "scheduling.k8s.io",
    "v1",
    "PriorityClass",
    "priorityclasses",
    "priorityclass",
    false,
    &["pc"],
    NONE,
    &[],
    &PriorityClasses,
);

/// The strategy for PriorityClasss.
#[derive(Debug)]
pub struct PriorityClasses;

impl Validate for PriorityClasses {
    type Object = PriorityClass;

    fn validate(&self, object: &PriorityClass, e: &mut Errors) {
        priority_class(object, e);
    }

    fn validate_update(&self, old: &PriorityClass, new: &PriorityClass, e: &mut Errors) {
        if old.value != new.value {
            e.forbidden("value", "may not be changed in an update.");
        }
        if !same(old.preemption_policy.as_ref(), new.preemption_policy.as_ref()) {
            e.invalid(
                "preemptionPolicy",
                &shown(new.preemption_policy.as_ref()),
                "field is immutable",
            );
        }
    }
}

impl Strategy for PriorityClasses {
    fn defaults(&self, object: &mut Value) {
        if let Some(root) = object.as_object_mut() {
            set_default(root, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }
}

/// The largest priority a user-defined PriorityClass may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// `ValidatePriorityClass`.
fn priority_class(object: &PriorityClass, e: &mut Errors) {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    let value = i64::from(object.value);
    if let Some(system) = name.strip_prefix("system-").map(|_| name) {
        let known = match system {
            "system-node-critical" => Some(2_000_001_000),
            "system-cluster-critical" => Some(2_000_000_000),
            _ => None,
        };
        let problem = match known {
            None => Some(format!("{system} is not a known system priority class")),
            Some(v) if v != value => Some(format!("value of {system} PriorityClass must be {v}")),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            e.forbidden(
                "metadata.name",
                &format!(
                    "priority class names with 'system-' prefix are reserved for system use \
                     only. error: {problem}"
                ),
            );
        }
    } else if value > HIGHEST_USER_PRIORITY {
        e.forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        );
    }
    if let Some(policy) = object.preemption_policy.as_deref() {
        match policy {
            "PreemptLowerPriority" | "Never" => {}
            "" => e.required("preemptionPolicy", ""),
            other => e.not_supported(
                "preemptionPolicy",
                &quote(other),
                &["PreemptLowerPriority", "Never"],
            ),
        }
    }
}
