//! Unknown fields, as kube-apiserver's decoder treats them: a typed object has no place for a
//! field its schema does not name, so it is dropped — with an error under
//! `fieldValidation=Strict`, a warning under `Warn` (the default), silently under `Ignore`.

use serde_json::{Map, Value};

use crate::openapi::{cached_schemas, kind_names, referenced, Schemas};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

/// The `fieldValidation` query parameter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Unknown fields are an error.
    Strict,
    /// Unknown fields are dropped with a warning.
    #[default]
    Warn,
    /// Unknown fields are dropped.
    Ignore,
}

impl FieldValidation {
    /// Parse the parameter; absent means Warn, as in kube-apiserver.
    pub fn parse(value: Option<&str>) -> ApiResult<FieldValidation> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, not {other:?}"
            ))),
        }
    }
}

/// Drop the fields of `object` that its kind's schema does not know, and answer by `mode` for
/// them and for the `duplicates` found while decoding: the warnings to send
/// (`unknown field "spec.foo"`, `duplicate field "metadata.name"`), or a 400 under Strict.
pub fn prune(
    rt: &ResourceType,
    object: &mut Value,
    mode: FieldValidation,
    duplicates: &[String],
) -> ApiResult<Vec<String>> {
    let mut unknown = Vec::new();
    if let (Some(names), Value::Object(map)) = (kind_names(rt.group, rt.version, rt.kind), object) {
        let schemas = cached_schemas(rt.group, rt.version);
        prune_object(&schemas, &names.kind, map, "", &mut unknown);
    }
    let messages: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .chain(duplicates.iter().map(|f| format!("duplicate field \"{f}\"")))
        .collect();
    match mode {
        FieldValidation::Strict if !messages.is_empty() => Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            rt.kind,
            rt.version,
            rt.kind,
            messages.join(", ")
        ))),
        FieldValidation::Warn => Ok(messages),
        _ => Ok(Vec::new()),
    }
}

fn prune_object(
    schemas: &Schemas,
    name: &str,
    object: &mut Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let Some(schema) = schemas.get(name) else { return };
    prune_with(schemas, schema, object, path, unknown);
}

fn prune_with(
    schemas: &Schemas,
    schema: &Value,
    object: &mut Map<String, Value>,
    path: &str,
    unknown: &mut Vec<String>,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        // A map (additionalProperties) or a free-form object (RawExtension and the like).
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            for (key, value) in object.iter_mut() {
                descend(schemas, values, value, &format!("{path}{key}"), unknown);
            }
        }
        return;
    };
    object.retain(|key, _| {
        let known = properties.contains_key(key);
        if !known {
            unknown.push(format!("{path}{key}"));
        }
        known
    });
    for (key, value) in object.iter_mut() {
        descend(schemas, &properties[key], value, &format!("{path}{key}"), unknown);
    }
}

fn descend(
    schemas: &Schemas,
    schema: &Value,
    value: &mut Value,
    path: &str,
    unknown: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => match referenced(schema) {
            Some(name) => prune_object(schemas, name, map, &format!("{path}."), unknown),
            None => prune_with(schemas, schema, map, &format!("{path}."), unknown),
        },
        Value::Array(items) => {
            let item_schema = schema.get("items").cloned().unwrap_or(Value::Null);
            for (i, item) in items.iter_mut().enumerate() {
                descend(schemas, &item_schema, item, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resource::BUILT_IN;

    fn deployments() -> &'static ResourceType {
        BUILT_IN.iter().find(|t| t.plural == "deployments").unwrap()
    }

    fn manifest() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"any-label": "ok"}, "colour": "red"},
            "spec": {"replicass": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolcy": "Never"}]}}},
        })
    }

    #[test]
    fn strict_refuses_unknown_fields_with_their_paths() {
        let e = prune(deployments(), &mut manifest(), FieldValidation::Strict, &[]).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("unknown field \"metadata.colour\""), "{}", e.message);
        assert!(e.message.contains("unknown field \"spec.replicass\""), "{}", e.message);
        assert!(
            e.message.contains("unknown field \"spec.template.spec.containers[0].imagePullPolcy\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn warn_and_ignore_drop_them() {
        let mut object = manifest();
        let warnings =
            prune(deployments(), &mut object, FieldValidation::Warn, &["kind".into()]).unwrap();
        assert_eq!(warnings.len(), 4);
        assert!(warnings.contains(&"duplicate field \"kind\"".to_string()), "{warnings:?}");
        assert!(object["spec"].get("replicass").is_none());
        assert_eq!(object["metadata"]["labels"]["any-label"], "ok", "map keys are not fields");
        let mut object = manifest();
        assert!(prune(deployments(), &mut object, FieldValidation::Ignore, &[])
            .unwrap()
            .is_empty());
        assert!(object["metadata"].get("colour").is_none());
    }
}
