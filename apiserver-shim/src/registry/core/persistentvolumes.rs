//! PersistentVolumes (`persistentvolumes` in `v1`): how the API server serves them.

use serde_json::Value;

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;
use crate::validation::at;

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

impl crate::registry::form::Validate for PersistentVolumes {
    type Object = k8s_openapi::api::core::v1::PersistentVolume;
}

impl Strategy for PersistentVolumes {
    fn quantities<'a>(&self, object: &'a Value, lists: &mut Vec<&'a Value>) {
        lists.push(at(at(object, "spec"), "capacity"));
    }
}
