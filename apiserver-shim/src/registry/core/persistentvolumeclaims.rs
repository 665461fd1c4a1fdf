//! PersistentVolumeClaims (`persistentvolumeclaims` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

/// The `persistentvolumeclaims` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    "persistentvolumeclaim",
    true,
    &["pvc"],
    NONE,
    STATUS,
    &PersistentVolumeClaims,
);

/// The strategy for PersistentVolumeClaims.
#[derive(Debug)]
pub struct PersistentVolumeClaims;

impl Strategy for PersistentVolumeClaims {}
