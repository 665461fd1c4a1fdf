//! ReplicationControllers (`replicationcontrollers` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;

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

impl Strategy for ReplicationControllers {}
