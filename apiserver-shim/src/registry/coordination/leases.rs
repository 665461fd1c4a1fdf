//! Leases (`leases` in `coordination.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `leases` resource type.
pub const TYPE: ResourceType =
    served("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, NONE, NONE, &[], &Leases);

/// The strategy for Leases.
#[derive(Debug)]
pub struct Leases;

impl Strategy for Leases {}
