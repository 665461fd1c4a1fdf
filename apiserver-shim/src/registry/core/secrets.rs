//! Secrets (`secrets` in `v1`): how the API server serves them.

use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

use crate::defaults::set_default;
use crate::object_names as names;
use crate::registry::core::configmaps::{decoded_len, MAX_DATA_SIZE};
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, count, definitions, name_cell, str_at, AGE, NAME};
use crate::validation::{changed, map_of, shown, text, Errors};

/// The `secrets` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Secret", "secrets", "secret", true, NONE, NONE, &[], &Secrets);

/// The strategy for Secrets.
#[derive(Debug)]
pub struct Secrets;

impl crate::registry::form::Validate for Secrets {
    type Object = k8s_openapi::api::core::v1::Secret;
}

impl Strategy for Secrets {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Secret
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        secret(object, e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        if changed(old, new, "type") {
            e.invalid("type", &shown(new.get("type")), "field is immutable");
        }
        if old.get("immutable") == Some(&Value::Bool(true)) {
            let sealed = "field is immutable when `immutable` is set";
            if new.get("immutable") != Some(&Value::Bool(true)) {
                e.forbidden("immutable", sealed);
            }
            if changed(old, new, "data") || changed(old, new, "stringData") {
                e.forbidden("data", sealed);
            }
        }
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(root) = object.as_object_mut() {
            merge_string_data(root);
            set_default(root, "type", json!("Opaque"));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Type", "string", "The type of the secret"),
            col("Data", "string", "Number of data entries"),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        vec![name, json!(str_at(o, "/type")), json!(count(o, "data")), age]
    }
}

/// `ValidateSecret`. `stringData` counts as the `data` kube-apiserver would merge it into.
pub(crate) fn secret(object: &Value, e: &mut Errors) {
    let data = map_of(object, "data");
    let strings = map_of(object, "stringData");
    let mut size = 0;
    let mut keys = BTreeSet::new();
    for (key, value) in data.into_iter().flatten() {
        keys.insert(key.as_str());
        if !strings.is_some_and(|s| s.contains_key(key)) {
            size += value.as_str().map_or(0, decoded_len);
        }
    }
    for (key, value) in strings.into_iter().flatten() {
        keys.insert(key.as_str());
        size += value.as_str().map_or(0, str::len);
    }
    for key in &keys {
        e.invalid_each(&format!("data[{key}]"), key, names::config_map_key(key));
    }
    if size > MAX_DATA_SIZE {
        e.too_long("data", MAX_DATA_SIZE);
    }
    let has = |key: &str| keys.contains(key);
    let require = |e: &mut Errors, key: &str| {
        if !has(key) {
            e.required(&format!("data[{key}]"), "");
        }
    };
    match text(object, "type") {
        "kubernetes.io/service-account-token" => {
            let account = object
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if account.is_empty() {
                e.required("metadata.annotations[kubernetes.io/service-account.name]", "");
            }
        }
        "kubernetes.io/dockercfg" => require(e, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" => require(e, ".dockerconfigjson"),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            require(e, "username");
            require(e, "password");
        }
        "kubernetes.io/ssh-auth" => require(e, "ssh-privatekey"),
        "kubernetes.io/tls" => {
            require(e, "tls.crt");
            require(e, "tls.key");
        }
        _ => {}
    }
}

/// A Secret's `stringData` is write-only: as kube-apiserver's conversion does, its entries go
/// into `data`, base64-encoded and winning over a `data` entry of the same key, and it is not
/// kept. (A value that is not a string never gets here: the typed decoding refuses it.)
fn merge_string_data(secret: &mut Map<String, Value>) {
    use base64::Engine;
    let Some(strings) = secret.remove("stringData") else { return };
    let Value::Object(strings) = strings else { return };
    if strings.is_empty() {
        return;
    }
    let data = secret.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            if let Value::String(text) = value {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, Value::String(encoded));
            }
        }
    }
}
