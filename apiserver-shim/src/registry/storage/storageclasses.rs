//! StorageClasss (`storageclasses` in `storage.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `storageclasses` resource type.
pub const TYPE: ResourceType = served(
    "storage.k8s.io",
    "v1",
    "StorageClass",
    "storageclasses",
    "storageclass",
    false,
    &["sc"],
    NONE,
    &[],
    &StorageClasses,
);

/// The strategy for StorageClasss.
#[derive(Debug)]
pub struct StorageClasses;

impl Strategy for StorageClasses {}
