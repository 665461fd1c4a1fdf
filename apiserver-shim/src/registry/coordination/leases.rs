//! Leases (`leases` in `coordination.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::validation::{at, Errors};

/// The `leases` resource type.
pub const TYPE: ResourceType =
    served("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, NONE, NONE, &[], &Leases);

/// The strategy for Leases.
#[derive(Debug)]
pub struct Leases;

impl crate::registry::form::Validate for Leases {
    type Object = k8s_openapi::api::coordination::v1::Lease;
}

impl Strategy for Leases {
    fn validate(&self, object: &Value, e: &mut Errors) {
        lease(at(object, "spec"), e);
    }
}

/// `ValidateLeaseSpec`, in part.
pub(crate) fn lease(spec: &Value, e: &mut Errors) {
    if let Some(n) = spec.get("leaseDurationSeconds").and_then(Value::as_i64).filter(|n| *n <= 0) {
        e.invalid("spec.leaseDurationSeconds", &n.to_string(), "must be greater than 0");
    }
    e.nonnegative(spec, "leaseTransitions", "spec.leaseTransitions");
}
