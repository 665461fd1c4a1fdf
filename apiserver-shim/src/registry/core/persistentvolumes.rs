//! PersistentVolumes (`persistentvolumes` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::registry::{served, Strategy, Validate, NONE, STATUS};
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

impl Validate for PersistentVolumes {
    type Object = PersistentVolume;

    fn quantities<'a>(&self, object: &'a PersistentVolume, found: &mut Vec<&'a Quantity>) {
        let capacity = object.spec.as_ref().and_then(|s| s.capacity.as_ref());
        found.extend(capacity.into_iter().flat_map(|c| c.values()));
    }
}

impl Strategy for PersistentVolumes {}
