//! Secrets (`secrets` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::Secret;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

use crate::defaults::set_default;
use crate::object_names as names;
use crate::registry::core::configmaps::MAX_DATA_SIZE;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, count, definitions, name_cell, str_at, AGE, NAME};
use crate::validation::{same, shown, Errors};

/// The `secrets` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Secret", "secrets", "secret", true, NONE, NONE, &[], &Secrets);

/// The strategy for Secrets.
#[derive(Debug)]
pub struct Secrets;

impl Validate for Secrets {
    type Object = Secret;

    fn validate(&self, object: &Secret, e: &mut Errors) {
        secret(object, e);
    }

    fn validate_update(&self, old: &Secret, new: &Secret, e: &mut Errors) {
        if !same(old.type_.as_ref(), new.type_.as_ref()) {
            e.invalid("type", &shown(new.type_.as_ref()), "field is immutable");
        }
        if old.immutable == Some(true) {
            let sealed = "field is immutable when `immutable` is set";
            if new.immutable != Some(true) {
                e.forbidden("immutable", sealed);
            }
            if !same(old.data.as_ref(), new.data.as_ref())
                || !same(old.string_data.as_ref(), new.string_data.as_ref())
            {
                e.forbidden("data", sealed);
            }
        }
    }
}

impl Strategy for Secrets {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Secret
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
pub(crate) fn secret(object: &Secret, e: &mut Errors) {
    let strings = object.string_data.as_ref();
    let mut size = 0;
    let mut keys = BTreeSet::new();
    for (key, value) in object.data.iter().flatten() {
        keys.insert(key.as_str());
        if !strings.is_some_and(|s| s.contains_key(key)) {
            size += value.0.len();
        }
    }
    for (key, value) in strings.into_iter().flatten() {
        keys.insert(key.as_str());
        size += value.len();
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
    match object.type_.as_deref().unwrap_or_default() {
        "kubernetes.io/service-account-token" => {
            let annotations = object.metadata.annotations.as_ref();
            let account = annotations
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .map_or("", String::as_str);
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
