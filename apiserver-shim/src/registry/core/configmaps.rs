//! ConfigMaps (`configmaps` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `configmaps` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "ConfigMap", "configmaps", "configmap", true, &["cm"], NONE, &[], &ConfigMaps);

/// The strategy for ConfigMaps.
#[derive(Debug)]
pub struct ConfigMaps;

impl Strategy for ConfigMaps {}
