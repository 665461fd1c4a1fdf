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
    let unknown = match (kind_names(rt), object) {
        (_, object) if rt.is_custom() => custom_unknown(rt, object),
        (Some(names), Value::Object(map)) => {
            let schemas = cached_schemas(rt.group, rt.version);
            let mut walker = Walker { schemas: &schemas, path: String::new(), unknown: Vec::new() };
            walker.named(&names.kind, map);
            walker.unknown
        }
        _ => Vec::new(),
    };
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

/// The fields of a custom resource that its schema does not know, pruned: those of its
/// version's structural schema, and those of its metadata (an `ObjectMeta`, as for every kind).
fn custom_unknown(rt: &ResourceType, object: &mut Value) -> Vec<String> {
    let Some(custom) = &rt.custom else { return Vec::new() };
    let mut unknown: Vec<String> = custom
        .schema
        .prune(object)
        .into_iter()
        .map(|f| f.trim_start_matches('.').to_owned())
        .collect();
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        let schemas = cached_schemas("", "v1");
        let mut walker =
            Walker { schemas: &schemas, path: "metadata.".into(), unknown: Vec::new() };
        walker.named(OBJECT_META, metadata);
        unknown.extend(walker.unknown);
    }
    unknown
}

/// The schema name of `ObjectMeta`.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// Walks an object against its schemas. `path` is the path of the object being walked, kept in
/// one buffer (segments pushed and popped) so that known fields cost no allocation.
struct Walker<'a> {
    schemas: &'a Schemas,
    path: String,
    unknown: Vec<String>,
}

impl Walker<'_> {
    fn named(&mut self, name: &str, object: &mut Map<String, Value>) {
        let schemas = self.schemas;
        if let Some(schema) = schemas.get(name) {
            self.object(schema, object);
        }
    }

    fn object(&mut self, schema: &Value, object: &mut Map<String, Value>) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            // A map (additionalProperties) or a free-form object (RawExtension and the like).
            if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                for (key, value) in object.iter_mut() {
                    self.field(key, values, value);
                }
            }
            return;
        };
        object.retain(|key, _| {
            let known = properties.contains_key(key);
            if !known {
                self.unknown.push(format!("{}{key}", self.path));
            }
            known
        });
        for (key, value) in object.iter_mut() {
            self.field(key, &properties[key], value);
        }
    }

    fn field(&mut self, key: &str, schema: &Value, value: &mut Value) {
        if !(value.is_object() || value.is_array()) {
            return;
        }
        let len = self.path.len();
        self.path.push_str(key);
        self.value(schema, value);
        self.path.truncate(len);
    }

    fn value(&mut self, schema: &Value, value: &mut Value) {
        match value {
            Value::Object(map) => {
                self.path.push('.');
                match referenced(schema) {
                    Some(name) => self.named(name, map),
                    None => self.object(schema, map),
                }
            }
            Value::Array(items) => {
                let item_schema = schema.get("items").unwrap_or(&Value::Null);
                for (i, item) in items.iter_mut().enumerate() {
                    if item.is_object() || item.is_array() {
                        let len = self.path.len();
                        self.path.push_str(&format!("[{i}]"));
                        self.value(item_schema, item);
                        self.path.truncate(len);
                    }
                }
            }
            _ => {}
        }
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
        assert_eq!(e.code(), 400);
        assert!(e.message().contains("unknown field \"metadata.colour\""), "{}", e.message());
        assert!(e.message().contains("unknown field \"spec.replicass\""), "{}", e.message());
        assert!(
            e.message()
                .contains("unknown field \"spec.template.spec.containers[0].imagePullPolcy\""),
            "{}",
            e.message()
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
