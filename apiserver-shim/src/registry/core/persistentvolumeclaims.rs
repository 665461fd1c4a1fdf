//! PersistentVolumeClaims (`persistentvolumeclaims` in `v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;
use crate::validation::{at, field, items, quantity_of, quantity_text, semantic_eq, text, Errors};

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

impl crate::registry::form::Validate for PersistentVolumeClaims {
    type Object = k8s_openapi::api::core::v1::PersistentVolumeClaim;
}

impl Strategy for PersistentVolumeClaims {
    fn validate(&self, object: &Value, e: &mut Errors) {
        claim_spec(at(object, "spec"), "spec", e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        claim_update(old, new, e);
    }

    fn quantities<'a>(&self, object: &'a Value, lists: &mut Vec<&'a Value>) {
        let spec = at(object, "spec");
        lists.push(at(at(spec, "resources"), "requests"));
        lists.push(at(at(spec, "resources"), "limits"));
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "volumeMode", json!("Filesystem"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn create_defaults(&self, object: &mut Value) {
        if let Some(status) = object_at(object, "status") {
            set_default(status, "phase", json!("Pending"));
        }
    }
}

/// `ValidatePersistentVolumeClaimSpec`, in part.
fn claim_spec(spec: &Value, path: &str, e: &mut Errors) {
    let modes: Vec<&str> = items(spec, "accessModes").iter().filter_map(Value::as_str).collect();
    if modes.is_empty() {
        e.required(&format!("{path}.accessModes"), "at least 1 access mode is required");
    }
    if modes.contains(&"ReadWriteOncePod") && modes.len() > 1 {
        e.forbidden(
            &format!("{path}.accessModes"),
            "may not use ReadWriteOncePod with other access modes",
        );
    }
    let supported = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];
    for mode in &modes {
        if !supported.contains(mode) {
            e.not_supported(&format!("{path}.accessModes"), &quote(mode), &supported);
        }
    }
    let storage_path = format!("{path}.resources[storage]");
    match at(at(spec, "resources"), "requests").get("storage") {
        None | Some(Value::Null) => e.required(&storage_path, ""),
        Some(q) => {
            if let (Some(value), Some(raw)) = (quantity_of(q), quantity_text(q)) {
                if value <= 0 {
                    e.invalid(&storage_path, &quote(&raw), "must be greater than zero");
                }
            }
        }
    }
    if let Some(mode) = field(spec, "volumeMode").and_then(Value::as_str) {
        if !matches!(mode, "Block" | "Filesystem") {
            e.not_supported(&format!("{path}.volumeMode"), &quote(mode), &["Block", "Filesystem"]);
        }
    }
    let class = text(spec, "storageClassName");
    if !class.is_empty() {
        e.invalid_each(&format!("{path}.storageClassName"), class, names::dns1123_subdomain(class));
    }
}

/// `ValidatePersistentVolumeClaimUpdate`: the spec is immutable but for `resources.requests`
/// (of a bound claim; never below its capacity), `volumeAttributesClassName`, and a
/// `volumeName` not yet set.
fn claim_update(old: &Value, new: &Value, e: &mut Errors) {
    let (before, after) = (at(old, "spec"), at(new, "spec"));
    let bound = text(at(new, "status"), "phase") == "Bound";
    let strip = |spec: &Value, requests_from: &Value| {
        let mut spec = spec.clone();
        if let Some(map) = spec.as_object_mut() {
            map.remove("volumeAttributesClassName");
            if text(before, "volumeName").is_empty() {
                map.remove("volumeName");
            }
        }
        if bound {
            // A bound claim's storage request may change: compare it as the old one.
            let storage = at(at(requests_from, "resources"), "requests").get("storage").cloned();
            if let Some(requests) =
                spec.pointer_mut("/resources/requests").and_then(Value::as_object_mut)
            {
                match storage {
                    Some(s) => requests.insert("storage".into(), s),
                    None => requests.remove("storage"),
                };
            }
        }
        spec
    };
    if !semantic_eq(Some(&strip(before, before)), Some(&strip(after, before))) {
        e.forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and \
             volumeAttributesClassName for bound claims",
        );
    }
    let storage = |spec: &Value| {
        at(at(spec, "resources"), "requests").get("storage").and_then(quantity_of).unwrap_or(0)
    };
    if storage(after) < storage(before) {
        let capacity =
            at(at(old, "status"), "capacity").get("storage").and_then(quantity_of).unwrap_or(0);
        if storage(after) <= capacity {
            e.forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            );
        }
    }
}
