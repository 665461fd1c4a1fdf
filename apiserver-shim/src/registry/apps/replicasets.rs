//! ReplicaSets (`replicasets` in `apps/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default};
use crate::registry::apps::deployments::replicated;
use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::validation::{at, immutable_selector, Errors};

/// The `replicasets` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "ReplicaSet",
    "replicasets",
    "replicaset",
    true,
    &["rs"],
    ALL,
    STATUS_SCALE,
    &ReplicaSets,
);

/// The strategy for ReplicaSets.
#[derive(Debug)]
pub struct ReplicaSets;

impl crate::registry::form::Validate for ReplicaSets {
    type Object = k8s_openapi::api::apps::v1::ReplicaSet;
}

impl Strategy for ReplicaSets {
    fn validate(&self, object: &Value, e: &mut Errors) {
        replicated(at(object, "spec"), "deployment", "ReplicaSet", e);
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
        }
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }
}
