//! Deployments (`deployments` in `apps/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default};
use crate::object::go_quote as quote;
use crate::object::label_pairs;
use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, or_none, wide, AGE, NAME};
use crate::validation::{
    always_restarts, at, at_most_100_percent, field, go_label_selector_value, immutable_selector,
    int_or_percent, int_or_percent_value, int_or_string, pod_template, required_selector,
    template_matches, text, Errors, Selector,
};

/// The `deployments` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "Deployment",
    "deployments",
    "deployment",
    true,
    &["deploy"],
    ALL,
    STATUS_SCALE,
    &Deployments,
);

/// The strategy for Deployments.
#[derive(Debug)]
pub struct Deployments;

impl crate::registry::form::Validate for Deployments {
    type Object = k8s_openapi::api::apps::v1::Deployment;
}

impl Strategy for Deployments {
    fn validate(&self, object: &Value, e: &mut Errors) {
        replicated(at(object, "spec"), "deployment", "Deployment", e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        immutable_selector(at(old, "spec"), at(new, "spec"), e);
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            if spec.get("strategy").is_none_or(Value::is_null) {
                spec.insert("strategy".into(), json!({}));
            }
            if let Some(strategy) = spec.get_mut("strategy").and_then(Value::as_object_mut) {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy.get("type") == Some(&json!("RollingUpdate")) {
                    set_default(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) =
                        strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                    {
                        set_default(rolling, "maxUnavailable", json!("25%"));
                        set_default(rolling, "maxSurge", json!("25%"));
                    }
                }
            }
        }
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
                    NAME,
                    col("Ready", "string", "Number of the pod with ready state"),
                    col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                    col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
                    AGE,
                    wide("Containers", "Names of each container in the template."),
                    wide("Images", "Images referenced by each container in the template."),
                    wide("Selector", "Label selector for pods."),
                ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        let desired = o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
        let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
        let containers = o.pointer("/spec/template/spec/containers").and_then(Value::as_array);
        let join = |field: &str| {
            containers
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c.get(field).and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
        };
        let selector = label_pairs(o.pointer("/spec/selector/matchLabels"));
        vec![
            name,
            json!(format!("{}/{desired}", n("/status/readyReplicas"))),
            json!(n("/status/updatedReplicas")),
            json!(n("/status/availableReplicas")),
            age,
            json!(join("name")),
            json!(join("image")),
            json!(or_none(selector)),
        ]
    }
}

/// `ValidateDeploymentSpec` / `ValidateReplicaSetSpec` (their empty-selector message is the
/// same), with `ValidatePodTemplateSpecForReplicaSet`.
pub(crate) fn replicated(spec: &Value, word: &str, kind: &str, e: &mut Errors) {
    e.nonnegative(spec, "replicas", "spec.replicas");
    if kind == "ReplicaSet" {
        e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    }
    let raw = required_selector(spec, word, e);
    let selector = Selector::of(raw);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector_value(raw), "invalid label selector");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, spec, e);
        }
        pod_template(at(spec, "template"), "spec.template", e);
        // Deployments share the ReplicaSet template check, and its words.
        always_restarts(spec, "ReplicaSet", e);
    }
    if kind == "Deployment" {
        let strategy = at(spec, "strategy");
        match text(strategy, "type") {
            "Recreate" if field(strategy, "rollingUpdate").is_some() => e.forbidden(
                "spec.strategy.rollingUpdate",
                "may not be specified when strategy `type` is 'Recreate'",
            ),
            "Recreate" => {}
            "RollingUpdate" => match field(strategy, "rollingUpdate") {
                None => e.required(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                ),
                Some(rolling) => {
                    let path = "spec.strategy.rollingUpdate";
                    let unavailable = rolling.get("maxUnavailable");
                    int_or_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                    int_or_percent(rolling.get("maxSurge"), &format!("{path}.maxSurge"), e);
                    if int_or_percent_value(unavailable) == 0
                        && int_or_percent_value(rolling.get("maxSurge")) == 0
                    {
                        e.invalid(
                            &format!("{path}.maxUnavailable"),
                            &int_or_string(unavailable),
                            "may not be 0 when `maxSurge` is 0",
                        );
                    }
                    at_most_100_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                }
            },
            other => e.not_supported(
                "spec.strategy",
                &format!(
                    "apps.DeploymentStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}}",
                    quote(other)
                ),
                &["Recreate", "RollingUpdate"],
            ),
        }
        e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
        e.nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit");
        if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
            e.nonnegative(spec, "progressDeadlineSeconds", "spec.progressDeadlineSeconds");
            let ready = spec.get("minReadySeconds").and_then(Value::as_i64).unwrap_or(0);
            if deadline <= ready {
                e.invalid(
                    "spec.progressDeadlineSeconds",
                    &deadline.to_string(),
                    "must be greater than minReadySeconds",
                );
            }
        }
    }
}
