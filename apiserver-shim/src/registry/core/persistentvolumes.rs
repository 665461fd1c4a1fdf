//! PersistentVolumes (`persistentvolumes` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

/// The `persistentvolumes` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "PersistentVolume",
    "persistentvolumes",
    "persistentvolume",
    false,
    &["pv"],
    NONE,
    STATUS,
    &PersistentVolumes,
);

/// The strategy for PersistentVolumes.
#[derive(Debug)]
pub struct PersistentVolumes;

impl Strategy for PersistentVolumes {}
