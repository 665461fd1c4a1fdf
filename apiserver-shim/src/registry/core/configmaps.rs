//! ConfigMaps (`configmaps` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{json, Value};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, count, definitions, name_cell, AGE, NAME};
use crate::validation::{same, Errors};

/// The `configmaps` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "ConfigMap", "configmaps", "configmap", true, &["cm"], NONE, &[], &ConfigMaps);

/// The strategy for ConfigMaps.
#[derive(Debug)]
pub struct ConfigMaps;

impl Validate for ConfigMaps {
    type Object = ConfigMap;

    fn validate(&self, object: &ConfigMap, e: &mut Errors) {
        config_map(object, e);
    }

    fn validate_update(&self, old: &ConfigMap, new: &ConfigMap, e: &mut Errors) {
        if old.immutable == Some(true) {
            let sealed = "field is immutable when `immutable` is set";
            if new.immutable != Some(true) {
                e.forbidden("immutable", sealed);
            }
            if !same(old.data.as_ref(), new.data.as_ref()) {
                e.forbidden("data", sealed);
            }
            if !same(old.binary_data.as_ref(), new.binary_data.as_ref()) {
                e.forbidden("binaryData", sealed);
            }
        }
    }
}

impl Strategy for ConfigMaps {
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

/// `ValidateConfigMap`.
pub(crate) fn config_map(object: &ConfigMap, e: &mut Errors) {
    let binary = object.binary_data.as_ref();
    let mut size = 0;
    for (key, value) in object.data.iter().flatten() {
        let path = format!("data[{key}]");
        e.invalid_each(&path, key, names::config_map_key(key));
        if binary.is_some_and(|b| b.contains_key(key)) {
            e.invalid(&path, &quote(key), "duplicate of key present in binaryData");
        }
        size += value.len();
    }
    for (key, value) in binary.into_iter().flatten() {
        e.invalid_each(&format!("binaryData[{key}]"), key, names::config_map_key(key));
        size += value.0.len();
    }
    if size > MAX_DATA_SIZE {
        e.too_long("[]", MAX_DATA_SIZE);
    }
}
