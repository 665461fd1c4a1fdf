//! PriorityClasss (`priorityclasses` in `scheduling.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `priorityclasses` resource type.
pub const TYPE: ResourceType = served(
    "scheduling.k8s.io",
    "v1",
    "PriorityClass",
    "priorityclasses",
    "priorityclass",
    false,
    &["pc"],
    NONE,
    &[],
    &PriorityClasses,
);

/// The strategy for PriorityClasss.
#[derive(Debug)]
pub struct PriorityClasses;

impl Strategy for PriorityClasses {}
