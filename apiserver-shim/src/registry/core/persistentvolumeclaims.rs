//! PersistentVolumeClaims (`persistentvolumeclaims` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::table::{self, age_cell, col, name_cell, str_at, wide, Column, AGE, NAME};
use crate::validation::{parse_quantity, Errors};

/// kube-apiserver's columns for claims.
const COLUMNS: [Column; 9] = [
    NAME,
    col("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
    col(
        "Volume",
        "string",
        "volumeName is the binding reference to the PersistentVolume backing this claim.",
    ),
    col("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
    col(
        "Access Modes",
        "string",
        "accessModes contains the actual access modes the volume backing the PVC has. More info: \
         https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1",
    ),
    col("StorageClass", "string", "StorageClass of the pvc"),
    col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
    AGE,
    wide(
        "VolumeMode",
        "volumeMode defines what type of volume is required by the claim. Value of Filesystem is \
         implied when not included in claim spec.",
    ),
];

/// Access modes as kubectl abbreviates them (`GetAccessModesAsString`): `RWO,ROX,RWX,RWOP`, in
/// that order, each once.
pub fn access_modes(modes: Option<&Value>) -> String {
    let modes: Vec<&str> =
        modes.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| modes.contains(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// A claim's class (`GetPersistentVolumeClaimClass`): the beta annotation, else
/// `spec.storageClassName`, else `""`.
fn claim_class(o: &Value) -> &str {
    let beta = crate::admission::default_storage_class::BETA_STORAGE_CLASS;
    o.pointer("/metadata/annotations")
        .and_then(|a| a.get(beta))
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(o, "/spec/storageClassName"))
}

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

impl Validate for PersistentVolumeClaims {
    type Object = PersistentVolumeClaim;

    fn validate(&self, object: &PersistentVolumeClaim, e: &mut Errors) {
        claim_spec(
            object.spec.as_ref().unwrap_or(&PersistentVolumeClaimSpec::default()),
            "spec",
            e,
        );
    }

    fn validate_update(
        &self,
        old: &PersistentVolumeClaim,
        new: &PersistentVolumeClaim,
        e: &mut Errors,
    ) {
        claim_update(old, new, e);
    }

    fn quantities<'a>(&self, object: &'a PersistentVolumeClaim, found: &mut Vec<&'a Quantity>) {
        if let Some(resources) = object.spec.as_ref().and_then(|s| s.resources.as_ref()) {
            found.extend(resources.requests.iter().flat_map(|m| m.values()));
            found.extend(resources.limits.iter().flat_map(|m| m.values()));
        }
    }
}

impl Strategy for PersistentVolumeClaims {
    fn mutate_create(&self, api: &crate::Api, object: &mut Value) -> crate::ApiResult<()> {
        crate::admission::default_storage_class::admit_claim(api, object)?;
        crate::admission::limit_ranges::admit_claim(api, object)
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&COLUMNS)
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let phase = if o.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
            "Terminating"
        } else {
            str_at(o, "/status/phase")
        };
        let volume = str_at(o, "/spec/volumeName");
        // Capacity and access modes are the bound volume's: shown once the claim names one.
        let (capacity, modes) = if volume.is_empty() {
            ("", String::new())
        } else {
            (str_at(o, "/status/capacity/storage"), access_modes(o.pointer("/status/accessModes")))
        };
        let set_or_unset = |pointer: &str| match o.pointer(pointer).and_then(Value::as_str) {
            Some(v) => v.to_owned(),
            None => "<unset>".to_owned(),
        };
        vec![
            name_cell(o),
            json!(phase),
            json!(volume),
            json!(capacity),
            json!(modes),
            json!(claim_class(o)),
            json!(set_or_unset("/spec/volumeAttributesClassName")),
            age_cell(o),
            json!(set_or_unset("/spec/volumeMode")),
        ]
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
fn claim_spec(spec: &PersistentVolumeClaimSpec, path: &str, e: &mut Errors) {
    let modes: Vec<&str> = spec.access_modes.iter().flatten().map(String::as_str).collect();
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
    match storage_request(spec) {
        None => e.required(&storage_path, ""),
        Some(q) => {
            if parse_quantity(&q.0).is_some_and(|value| value <= 0) {
                e.invalid(&storage_path, &quote(&q.0), "must be greater than zero");
            }
        }
    }
    if let Some(mode) = spec.volume_mode.as_deref() {
        if !matches!(mode, "Block" | "Filesystem") {
            e.not_supported(&format!("{path}.volumeMode"), &quote(mode), &["Block", "Filesystem"]);
        }
    }
    let class = spec.storage_class_name.as_deref().unwrap_or_default();
    if !class.is_empty() {
        e.invalid_each(&format!("{path}.storageClassName"), class, names::dns1123_subdomain(class));
    }
}

/// A claim's `resources.requests[storage]`, if set.
fn storage_request(spec: &PersistentVolumeClaimSpec) -> Option<&Quantity> {
    spec.resources.as_ref()?.requests.as_ref()?.get("storage")
}

/// `ValidatePersistentVolumeClaimUpdate`: the spec is immutable but for `resources.requests`
/// (of a bound claim; never below its capacity), `volumeAttributesClassName`, a `volumeName`
/// not yet set, and a `storageClassName` not yet set (`validateStorageClassUpgradeFromNil`: the
/// default class written into a claim made before there was one), once.
fn claim_update(old: &PersistentVolumeClaim, new: &PersistentVolumeClaim, e: &mut Errors) {
    let zero = PersistentVolumeClaimSpec::default();
    let before = old.spec.as_ref().unwrap_or(&zero);
    let after = new.spec.as_ref().unwrap_or(&zero);
    let bound = new.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let unnamed = before.volume_name.as_deref().unwrap_or_default().is_empty();
    let beta = old
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::admission::default_storage_class::BETA_STORAGE_CLASS));
    let class_from_nil = before.storage_class_name.is_none()
        && after.storage_class_name.as_ref().is_some_and(|c| beta.is_none_or(|b| b == c));
    let strip = |spec: &PersistentVolumeClaimSpec| {
        let mut spec = spec.clone();
        spec.volume_attributes_class_name = None;
        if unnamed {
            spec.volume_name = None;
        }
        if class_from_nil {
            spec.storage_class_name = None;
        }
        if bound {
            // A bound claim's storage request may change: compare it as the old one.
            let requests = spec.resources.as_mut().and_then(|r| r.requests.as_mut());
            if let Some(requests) = requests {
                match storage_request(before) {
                    Some(s) => requests.insert("storage".into(), s.clone()),
                    None => requests.remove("storage"),
                };
            }
        }
        go_zero(spec)
    };
    if strip(before) != strip(after) {
        e.forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and \
             volumeAttributesClassName for bound claims",
        );
    }
    let storage = |spec| storage_request(spec).and_then(|q| parse_quantity(&q.0)).unwrap_or(0);
    if storage(after) < storage(before) {
        let capacity = old
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| parse_quantity(&q.0))
            .unwrap_or(0);
        if storage(after) <= capacity {
            e.forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            );
        }
    }
}

/// A claim spec with every field that holds its zero value (an empty string, list or map, an
/// empty `resources`) unset, so that `==` compares two as [`crate::validation::same`] compares
/// one field: unset and the zero value are the same.
fn go_zero(spec: PersistentVolumeClaimSpec) -> PersistentVolumeClaimSpec {
    let resources = spec.resources.map(|r| VolumeResourceRequirements {
        limits: unset_zero(r.limits),
        requests: unset_zero(r.requests),
    });
    PersistentVolumeClaimSpec {
        access_modes: unset_zero(spec.access_modes),
        data_source: unset_zero(spec.data_source),
        data_source_ref: unset_zero(spec.data_source_ref),
        resources: unset_zero(resources),
        selector: unset_zero(spec.selector),
        storage_class_name: unset_zero(spec.storage_class_name),
        volume_attributes_class_name: unset_zero(spec.volume_attributes_class_name),
        volume_mode: unset_zero(spec.volume_mode),
        volume_name: unset_zero(spec.volume_name),
    }
}

/// `None` for a value that is its type's zero value.
fn unset_zero<T: Default + PartialEq>(value: Option<T>) -> Option<T> {
    value.filter(|v| *v != T::default())
}
