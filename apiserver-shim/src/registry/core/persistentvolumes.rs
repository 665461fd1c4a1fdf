//! PersistentVolumes (`persistentvolumes` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use crate::registry::core::persistentvolumeclaims::access_modes;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::table::{self, age_cell, col, name_cell, str_at, wide, Column, AGE, NAME};

/// kube-apiserver's columns for PersistentVolumes.
const COLUMNS: [Column; 11] = [
    NAME,
    col(
        "Capacity",
        "string",
        "capacity is the description of the persistent volume's resources and capacity.",
    ),
    col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
    col(
        "Reclaim Policy",
        "string",
        "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released \
         from its claim.",
    ),
    col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
    col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
    col("StorageClass", "string", "StorageClass of the pv"),
    col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
    col("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
    AGE,
    wide("VolumeMode", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec."),
];

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

impl Strategy for PersistentVolumes {
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&COLUMNS)
    }

    /// `printPersistentVolume`.
    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let claim = match (str_at(o, "/spec/claimRef/namespace"), str_at(o, "/spec/claimRef/name"))
        {
            _ if o.pointer("/spec/claimRef").is_none_or(Value::is_null) => String::new(),
            (namespace, name) => format!("{namespace}/{name}"),
        };
        let phase = if o.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
            "Terminating"
        } else {
            str_at(o, "/status/phase")
        };
        let set_or_unset = |pointer: &str| match o.pointer(pointer).and_then(Value::as_str) {
            Some(v) => v.to_owned(),
            None => "<unset>".to_owned(),
        };
        vec![
            name_cell(o),
            json!(str_at(o, "/spec/capacity/storage")),
            json!(access_modes(o.pointer("/spec/accessModes"))),
            json!(str_at(o, "/spec/persistentVolumeReclaimPolicy")),
            json!(phase),
            json!(claim),
            json!(str_at(o, "/spec/storageClassName")),
            json!(set_or_unset("/spec/volumeAttributesClassName")),
            json!(str_at(o, "/status/reason")),
            age_cell(o),
            json!(set_or_unset("/spec/volumeMode")),
        ]
    }
}
