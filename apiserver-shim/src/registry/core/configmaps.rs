//! ConfigMaps (`configmaps` in `v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, count, definitions, name_cell, AGE, NAME};
use crate::validation::{changed, map_of, shown, Errors};

/// The `configmaps` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "ConfigMap", "configmaps", "configmap", true, &["cm"], NONE, &[], &ConfigMaps);

/// The strategy for ConfigMaps.
#[derive(Debug)]
pub struct ConfigMaps;

impl crate::registry::form::Validate for ConfigMaps {
    type Object = k8s_openapi::api::core::v1::ConfigMap;
}

impl Strategy for ConfigMaps {
    fn validate(&self, object: &Value, e: &mut Errors) {
        config_map(object, e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        if old.get("immutable") == Some(&Value::Bool(true)) {
            let sealed = "field is immutable when `immutable` is set";
            if new.get("immutable") != Some(&Value::Bool(true)) {
                e.forbidden("immutable", sealed);
            }
            if changed(old, new, "data") {
                e.forbidden("data", sealed);
            }
            if changed(old, new, "binaryData") {
                e.forbidden("binaryData", sealed);
            }
        }
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[NAME, col("Data", "string", "Number of data entries"), AGE])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        vec![name, json!(count(o, "data") + count(o, "binaryData")), age]
    }
}

/// The largest ConfigMap or Secret payload (`core.MaxSecretSize`).
pub(crate) const MAX_DATA_SIZE: usize = 1024 * 1024;

/// The length of base64 data once decoded.
pub(crate) fn decoded_len(encoded: &str) -> usize {
    let trimmed = encoded.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

/// `ValidateConfigMap`.
pub(crate) fn config_map(object: &Value, e: &mut Errors) {
    for key in ["data", "binaryData"] {
        if object.get(key).is_some_and(|v| !v.is_object() && !v.is_null()) {
            e.invalid(key, &shown(object.get(key)), "must be a map of strings");
        }
    }
    let binary = map_of(object, "binaryData");
    let mut size = 0;
    for (key, value) in map_of(object, "data").into_iter().flatten() {
        let path = format!("data[{key}]");
        e.invalid_each(&path, key, names::config_map_key(key));
        if binary.is_some_and(|b| b.contains_key(key)) {
            e.invalid(&path, &quote(key), "duplicate of key present in binaryData");
        }
        size += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        e.invalid_each(&format!("binaryData[{key}]"), key, names::config_map_key(key));
        size += value.as_str().map_or(0, decoded_len);
    }
    if size > MAX_DATA_SIZE {
        e.too_long("[]", MAX_DATA_SIZE);
    }
}
