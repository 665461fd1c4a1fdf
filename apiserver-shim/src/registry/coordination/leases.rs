//! Leases (`leases` in `coordination.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};

use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::validation::{Errors, NEGATIVE};

/// The `leases` resource type.
pub const TYPE: ResourceType =
    served("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, NONE, NONE, &[], &Leases);

/// The strategy for Leases.
#[derive(Debug)]
pub struct Leases;

impl Validate for Leases {
    type Object = Lease;

    fn validate(&self, object: &Lease, e: &mut Errors) {
        if let Some(spec) = &object.spec {
            lease(spec, e);
        }
    }
}

impl Strategy for Leases {}

/// `ValidateLeaseSpec`, in part.
pub(crate) fn lease(spec: &LeaseSpec, e: &mut Errors) {
    if let Some(n) = spec.lease_duration_seconds.filter(|n| *n <= 0) {
        e.invalid("spec.leaseDurationSeconds", &n.to_string(), "must be greater than 0");
    }
    if let Some(n) = spec.lease_transitions.filter(|n| *n < 0) {
        e.invalid("spec.leaseTransitions", &n.to_string(), NEGATIVE);
    }
}
