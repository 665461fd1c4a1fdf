//! ReplicaSets (`replicasets` in `apps/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;

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

impl Strategy for ReplicaSets {}
