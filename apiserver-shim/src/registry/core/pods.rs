//! Pods (`pods` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;

/// The `pods` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Pod", "pods", "pod", true, &["po"], ALL, STATUS, &Pods);

/// The strategy for Pods.
#[derive(Debug)]
pub struct Pods;

impl Strategy for Pods {}
