//! ReplicaSets (`replicasets` in `apps/v1`): how the API server serves them.

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::registry::apps::deployments::replicated;
use crate::registry::form::Workload;
use crate::registry::{served, Strategy, Validate, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::validation::{immutable_selector, pod_quantities, Errors};

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

impl Validate for ReplicaSets {
    type Object = Workload<ReplicaSet>;

    /// `ValidateReplicaSetSpec`.
    fn validate(&self, object: &Workload<ReplicaSet>, e: &mut Errors) {
        let zero = ReplicaSetSpec::default();
        let spec = object.spec.as_ref().unwrap_or(&zero);
        e.nonnegative(spec.replicas, "spec.replicas");
        e.nonnegative(spec.min_ready_seconds, "spec.minReadySeconds");
        replicated(object.selector(), spec.template.as_ref(), e);
    }

    fn validate_update(
        &self,
        old: &Workload<ReplicaSet>,
        new: &Workload<ReplicaSet>,
        e: &mut Errors,
    ) {
        immutable_selector(old.selector(), new.selector(), e);
    }

    fn quantities<'a>(&self, object: &'a Workload<ReplicaSet>, found: &mut Vec<&'a Quantity>) {
        let template = object.spec.as_ref().and_then(|s| s.template.as_ref());
        pod_quantities(template.and_then(|t| t.spec.as_ref()), found);
    }
}

impl Strategy for ReplicaSets {
    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({"replicas": 0}));
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "replicas", json!(1));
        }
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }
}
