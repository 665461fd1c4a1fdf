//! Deployments (`deployments` in `apps/v1`): how the API server serves them.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::object::label_pairs;
use crate::registry::form::Workload;
use crate::registry::{served, Strategy, Validate, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, or_none, wide, AGE, NAME};
use crate::validation::{
    always_restarts, at_most_100_percent, go_label_selector, immutable_selector, int_or_percent,
    int_or_percent_value, int_or_string, pod_quantities, pod_template, required_selector,
    template_matches, Errors, Selector,
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

impl Validate for Deployments {
    type Object = Workload<Deployment>;

    fn validate(&self, object: &Workload<Deployment>, e: &mut Errors) {
        deployment(object.spec.as_ref(), object.selector(), e);
    }

    fn validate_update(
        &self,
        old: &Workload<Deployment>,
        new: &Workload<Deployment>,
        e: &mut Errors,
    ) {
        immutable_selector(old.selector(), new.selector(), e);
    }

    fn quantities<'a>(&self, object: &'a Workload<Deployment>, found: &mut Vec<&'a Quantity>) {
        let template = object.spec.as_ref().map(|s| &s.template);
        pod_quantities(template.and_then(|t| t.spec.as_ref()), found);
    }
}

impl Strategy for Deployments {
    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({}));
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

/// The selector and template checks `ValidateDeploymentSpec` and `ValidateReplicaSetSpec` share
/// (their empty-selector message is the same), with `ValidatePodTemplateSpecForReplicaSet`.
pub(crate) fn replicated(
    selector: Option<&LabelSelector>,
    template: Option<&PodTemplateSpec>,
    e: &mut Errors,
) {
    let given = required_selector(selector, "deployment", e);
    let selector = Selector::of(given);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector(given), "invalid label selector");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, template, e);
        }
        pod_template(template, "spec.template", e);
        // Deployments share the ReplicaSet template check, and its words.
        always_restarts(template, "ReplicaSet", e);
    }
}

/// `ValidateDeploymentSpec`.
fn deployment(spec: Option<&DeploymentSpec>, selector: Option<&LabelSelector>, e: &mut Errors) {
    let zero = DeploymentSpec::default();
    let spec = spec.unwrap_or(&zero);
    e.nonnegative(spec.replicas, "spec.replicas");
    replicated(selector, Some(&spec.template), e);
    let strategy = spec.strategy.as_ref();
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    match strategy.and_then(|s| s.type_.as_deref()).unwrap_or_default() {
        "Recreate" if rolling.is_some() => e.forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        ),
        "Recreate" => {}
        "RollingUpdate" => match rolling {
            None => e.required(
                "spec.strategy.rollingUpdate",
                "this should be defaulted and never be nil",
            ),
            Some(rolling) => {
                let path = "spec.strategy.rollingUpdate";
                let unavailable = rolling.max_unavailable.as_ref();
                let surge = rolling.max_surge.as_ref();
                int_or_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                int_or_percent(surge, &format!("{path}.maxSurge"), e);
                if int_or_percent_value(unavailable) == 0 && int_or_percent_value(surge) == 0 {
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
    e.nonnegative(spec.min_ready_seconds, "spec.minReadySeconds");
    e.nonnegative(spec.revision_history_limit, "spec.revisionHistoryLimit");
    if let Some(deadline) = spec.progress_deadline_seconds {
        e.nonnegative(Some(deadline), "spec.progressDeadlineSeconds");
        if deadline <= spec.min_ready_seconds.unwrap_or(0) {
            e.invalid(
                "spec.progressDeadlineSeconds",
                &deadline.to_string(),
                "must be greater than minReadySeconds",
            );
        }
    }
}
