//! StatefulSets (`statefulsets` in `apps/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;

/// The `statefulsets` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "StatefulSet",
    "statefulsets",
    "statefulset",
    true,
    &["sts"],
    ALL,
    STATUS_SCALE,
    &StatefulSets,
);

/// The strategy for StatefulSets.
#[derive(Debug)]
pub struct StatefulSets;

impl Strategy for StatefulSets {}
