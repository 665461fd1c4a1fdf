//! ReplicationControllers (`replicationcontrollers` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::{ReplicationController, ReplicationControllerSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Map, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::registry::{served, Strategy, Validate, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::validation::{
    always_restarts, go_string_map, pod_quantities, pod_template, template_labels, Errors,
};

/// The `replicationcontrollers` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "ReplicationController",
    "replicationcontrollers",
    "replicationcontroller",
    true,
    &["rc"],
    ALL,
    STATUS_SCALE,
    &ReplicationControllers,
);

/// The strategy for ReplicationControllers.
#[derive(Debug)]
pub struct ReplicationControllers;

impl Validate for ReplicationControllers {
    type Object = ReplicationController;

    fn validate(&self, object: &ReplicationController, e: &mut Errors) {
        replication_controller(object.spec.as_ref(), e);
    }

    fn quantities<'a>(&self, object: &'a ReplicationController, found: &mut Vec<&'a Quantity>) {
        let template = object.spec.as_ref().and_then(|s| s.template.as_ref());
        pod_quantities(template.and_then(|t| t.spec.as_ref()), found);
    }
}

impl Strategy for ReplicationControllers {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::ReplicationController
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({"replicas": 0}));
        // The selector and the labels default to the template's labels.
        let labels = object.pointer("/spec/template/metadata/labels").cloned();
        if let Some(labels) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
            if let Some(spec) = object_at(object, "spec") {
                if spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty) {
                    spec.insert("selector".into(), labels.clone());
                }
            }
            if let Some(meta) = object_at(object, "metadata") {
                if meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty) {
                    meta.insert("labels".into(), labels);
                }
            }
        }
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "replicas", json!(1));
        }
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }
}

/// `ValidateReplicationControllerSpec`.
fn replication_controller(spec: Option<&ReplicationControllerSpec>, e: &mut Errors) {
    let zero = ReplicationControllerSpec::default();
    let spec = spec.unwrap_or(&zero);
    e.nonnegative(spec.min_ready_seconds, "spec.minReadySeconds");
    let selector = spec.selector.as_ref().filter(|s| !s.is_empty());
    if selector.is_none() {
        e.required("spec.selector", "");
    }
    e.nonnegative(spec.replicas, "spec.replicas");
    let Some(template) = spec.template.as_ref() else {
        e.required("spec.template", "");
        return;
    };
    if let Some(selector) = selector {
        let labels = template_labels(Some(template));
        let matched = selector.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !matched {
            e.invalid(
                "spec.template.metadata.labels",
                &go_string_map(labels),
                "`selector` does not match template `labels`",
            );
        }
    }
    pod_template(Some(template), "spec.template", e);
    always_restarts(Some(template), "ReplicationController", e);
}
