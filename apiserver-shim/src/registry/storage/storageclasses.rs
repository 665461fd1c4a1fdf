//! StorageClasses (`storageclasses` in `storage.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{json, Value};

use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{self, age_cell, col, str_at, Column, AGE, NAME};
use crate::validation::{same, shown, Errors};

/// kube-apiserver's columns for StorageClasses.
const COLUMNS: [Column; 6] = [
    NAME,
    col("Provisioner", "string", "provisioner indicates the type of the provisioner."),
    col(
        "ReclaimPolicy",
        "string",
        "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of \
         this storage class. Defaults to Delete.",
    ),
    col(
        "VolumeBindingMode",
        "string",
        "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound. \
         When unset, VolumeBindingImmediate is used. This field is only honored by servers that \
         enable the VolumeScheduling feature.",
    ),
    col(
        "AllowVolumeExpansion",
        "string",
        "allowVolumeExpansion shows whether the storage class allow volume expand.",
    ),
    AGE,
];

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

/// The strategy for StorageClasses.
#[derive(Debug)]
pub struct StorageClasses;

impl Validate for StorageClasses {
    type Object = StorageClass;

    fn validate(&self, object: &StorageClass, e: &mut Errors) {
        storage_class(object, e);
    }

    fn validate_update(&self, old: &StorageClass, new: &StorageClass, e: &mut Errors) {
        for (key, changed) in [
            ("parameters", !same(old.parameters.as_ref(), new.parameters.as_ref())),
            ("provisioner", old.provisioner != new.provisioner),
            ("reclaimPolicy", !same(old.reclaim_policy.as_ref(), new.reclaim_policy.as_ref())),
        ] {
            if changed {
                e.forbidden(key, &format!("updates to {key} are forbidden."));
            }
        }
        if !same(old.volume_binding_mode.as_ref(), new.volume_binding_mode.as_ref()) {
            e.invalid(
                "volumeBindingMode",
                &shown(new.volume_binding_mode.as_ref()),
                "field is immutable",
            );
        }
    }
}

impl Strategy for StorageClasses {
    fn defaults(&self, object: &mut Value) {
        if let Some(root) = object.as_object_mut() {
            set_default(root, "reclaimPolicy", json!("Delete"));
            set_default(root, "volumeBindingMode", json!("Immediate"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&COLUMNS)
    }

    /// `printStorageClass`: the default class's name says so.
    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let mut name = str_at(o, "/metadata/name").to_owned();
        if crate::admission::default_storage_class::is_default(o) {
            name.push_str(" (default)");
        }
        let or = |pointer: &str, default: &str| match str_at(o, pointer) {
            "" => default.to_owned(),
            set => set.to_owned(),
        };
        vec![
            json!(name),
            json!(str_at(o, "/provisioner")),
            json!(or("/reclaimPolicy", "Delete")),
            json!(or("/volumeBindingMode", "Immediate")),
            json!(o.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false)),
            age_cell(o),
        ]
    }
}

/// `ValidateStorageClass`.
fn storage_class(object: &StorageClass, e: &mut Errors) {
    let provisioner = object.provisioner.as_str();
    if provisioner.is_empty() {
        e.required("provisioner", "");
    } else {
        e.invalid_each(
            "provisioner",
            provisioner,
            names::qualified_name(&provisioner.to_lowercase()),
        );
    }
    let reclaim = object.reclaim_policy.as_deref().unwrap_or_default();
    if !reclaim.is_empty() && !matches!(reclaim, "Delete" | "Retain") {
        e.not_supported("reclaimPolicy", &quote(reclaim), &["Delete", "Retain"]);
    }
    match object.volume_binding_mode.as_deref() {
        None => e.required("volumeBindingMode", ""),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => e.not_supported(
            "volumeBindingMode",
            &quote(other),
            &["Immediate", "WaitForFirstConsumer"],
        ),
    }
}
