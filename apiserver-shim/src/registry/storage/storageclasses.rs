//! StorageClasss (`storageclasses` in `storage.k8s.io/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::validation::{changed, field, shown, text, Errors};

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

impl crate::registry::form::Validate for StorageClasses {
    type Object = k8s_openapi::api::storage::v1::StorageClass;
}

impl Strategy for StorageClasses {
    fn validate(&self, object: &Value, e: &mut Errors) {
        storage_class(object, e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        for key in ["parameters", "provisioner", "reclaimPolicy"] {
            if changed(old, new, key) {
                e.forbidden(key, &format!("updates to {key} are forbidden."));
            }
        }
        if changed(old, new, "volumeBindingMode") {
            e.invalid(
                "volumeBindingMode",
                &shown(new.get("volumeBindingMode")),
                "field is immutable",
            );
        }
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(root) = object.as_object_mut() {
            set_default(root, "reclaimPolicy", json!("Delete"));
            set_default(root, "volumeBindingMode", json!("Immediate"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }
}

/// `ValidateStorageClass`.
fn storage_class(object: &Value, e: &mut Errors) {
    let provisioner = text(object, "provisioner");
    if provisioner.is_empty() {
        e.required("provisioner", "");
    } else {
        e.invalid_each(
            "provisioner",
            provisioner,
            names::qualified_name(&provisioner.to_lowercase()),
        );
    }
    let reclaim = text(object, "reclaimPolicy");
    if !reclaim.is_empty() && !matches!(reclaim, "Delete" | "Retain") {
        e.not_supported("reclaimPolicy", &quote(reclaim), &["Delete", "Retain"]);
    }
    match field(object, "volumeBindingMode").and_then(Value::as_str) {
        None => e.required("volumeBindingMode", ""),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => e.not_supported(
            "volumeBindingMode",
            &quote(other),
            &["Immediate", "WaitForFirstConsumer"],
        ),
    }
}
