//! Strategic merge patch for the built-in types: lists merge by their merge keys, as the
//! `x-kubernetes-patch-*` annotations of the served OpenAPI schemas say, with the `$patch`,
//! `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` directives.

use serde_json::{Map, Value};

use crate::openapi::annotations::{list_annotations, PatchStrategy};
use crate::openapi::{cached_schemas, kind_names, referenced, Schemas};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

struct Patcher {
    schemas: Schemas,
}

/// What a field's schema says about merging it.
#[derive(Clone, Copy, Default)]
struct Field<'a> {
    /// The schema of the field's value (or of its items).
    schema: Option<&'a str>,
    merge_key: Option<&'static str>,
    merge: bool,
}

impl Patcher {
    fn field<'a>(&'a self, parent: Option<&str>, name: &str) -> Field<'a> {
        let Some(parent) = parent else { return Field::default() };
        let schema = self
            .schemas
            .get(parent)
            .and_then(|s| s.get("properties")?.get(name))
            .and_then(referenced);
        let annotations = list_annotations(parent, name);
        let strategy = annotations.and_then(|a| a.patch_strategy);
        Field {
            schema,
            merge_key: annotations.and_then(|a| a.patch_merge_key),
            merge: matches!(strategy, Some(PatchStrategy::Merge | PatchStrategy::MergeRetainKeys)),
        }
    }

    /// Merge `patch` into the object `original`, whose schema is `schema`.
    fn merge_map(
        &self,
        original: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        schema: Option<&str>,
    ) -> ApiResult<()> {
        match patch.get("$patch").and_then(Value::as_str) {
            None | Some("merge") => {}
            Some("replace") => {
                *original = without_directives(patch);
                return Ok(());
            }
            Some("delete") => {
                original.clear();
                return Ok(());
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!("unknown $patch directive {other:?}")))
            }
        }
        for (key, value) in patch {
            if key == "$patch" || key == "$retainKeys" || key.starts_with(SET_ORDER) {
                continue;
            }
            if let Some(list) = key.strip_prefix(DELETE_FROM) {
                let remove = value.as_array().cloned().unwrap_or_default();
                if let Some(Value::Array(items)) = original.get_mut(list) {
                    items.retain(|item| !remove.contains(item));
                }
                continue;
            }
            if key.starts_with('$') {
                return Err(ApiError::bad_request(format!("unknown patch directive {key:?}")));
            }
            let field = self.field(schema, key);
            match value {
                Value::Null => {
                    original.remove(key);
                }
                Value::Object(sub) => match original.get_mut(key) {
                    Some(Value::Object(existing))
                        if sub.get("$patch").and_then(Value::as_str) != Some("delete") =>
                    {
                        self.merge_map(existing, sub, field.schema)?;
                    }
                    _ if sub.get("$patch").and_then(Value::as_str) == Some("delete") => {
                        original.remove(key);
                    }
                    _ => {
                        let mut fresh = Map::new();
                        self.merge_map(&mut fresh, sub, field.schema)?;
                        original.insert(key.clone(), Value::Object(fresh));
                    }
                },
                Value::Array(items) => {
                    let merged = match original.remove(key) {
                        Some(Value::Array(existing)) if field.merge => {
                            self.merge_list(existing, items, field)?
                        }
                        _ => items.iter().map(|i| strip(i.clone())).collect(),
                    };
                    original.insert(key.clone(), Value::Array(merged));
                }
                scalar => {
                    original.insert(key.clone(), scalar.clone());
                }
            }
        }
        // `$setElementOrder/<list>`: the order of the list after merging.
        for (key, order) in patch {
            if let (Some(list), Some(order)) = (key.strip_prefix(SET_ORDER), order.as_array()) {
                let merge_key = self.field(schema, list).merge_key;
                if let Some(Value::Array(items)) = original.get_mut(list) {
                    reorder(items, order, merge_key);
                }
            }
        }
        if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
            let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
            original.retain(|k, _| keep.contains(&k.as_str()));
        }
        Ok(())
    }

    /// Merge a list with a merge strategy: by merge key for objects, as a set for scalars.
    fn merge_list(
        &self,
        mut existing: Vec<Value>,
        patch: &[Value],
        field: Field<'_>,
    ) -> ApiResult<Vec<Value>> {
        if patch.iter().any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace")) {
            return Ok(patch
                .iter()
                .filter(|p| p.get("$patch").is_none())
                .map(|p| strip(p.clone()))
                .collect());
        }
        let Some(merge_key) = field.merge_key else {
            // A list of scalars merged as a set.
            for item in patch {
                if !existing.contains(item) {
                    existing.push(item.clone());
                }
            }
            return Ok(existing);
        };
        for item in patch {
            let Some(map) = item.as_object() else {
                return Err(ApiError::bad_request(format!(
                    "a strategic merge patch item of a list merged by {merge_key:?} must be an object"
                )));
            };
            let Some(id) = map.get(merge_key) else {
                return Err(ApiError::bad_request(format!(
                    "a strategic merge patch item lacks its merge key {merge_key:?}"
                )));
            };
            let position = existing.iter().position(|e| e.get(merge_key) == Some(id));
            match (map.get("$patch").and_then(Value::as_str), position) {
                (Some("delete"), Some(at)) => {
                    existing.remove(at);
                }
                (Some("delete"), None) => {}
                (Some("replace"), Some(at)) => existing[at] = strip(item.clone()),
                (_, Some(at)) => {
                    if let Some(target) = existing[at].as_object_mut() {
                        self.merge_map(target, map, field.schema)?;
                    }
                }
                (_, None) => {
                    let mut fresh = Map::new();
                    self.merge_map(&mut fresh, map, field.schema)?;
                    existing.push(Value::Object(fresh));
                }
            }
        }
        Ok(existing)
    }
}

/// Order `items` as `order` lists them (by merge key, or by value for scalars); items the order
/// does not name keep their relative order after those it does.
fn reorder(items: &mut [Value], order: &[Value], merge_key: Option<&str>) {
    let rank = |item: &Value| {
        let id = match merge_key {
            Some(k) => item.get(k),
            None => Some(item),
        };
        order
            .iter()
            .position(|o| match merge_key {
                Some(k) => o.get(k) == id,
                None => Some(o) == id,
            })
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(|item| rank(item));
}

fn without_directives(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), strip(v.clone())))
        .collect()
}

/// A patch value with its directives removed, for where it is taken whole.
fn strip(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(without_directives(&map)),
        Value::Array(items) => Value::Array(items.into_iter().map(strip).collect()),
        other => other,
    }
}

/// Apply a strategic merge patch to an object of a built-in type.
pub fn apply(rt: &ResourceType, original: &Value, patch: &Value) -> ApiResult<Value> {
    let Some(names) = kind_names(rt) else {
        return Err(ApiError::unsupported(format!(
            "strategic merge patch is not supported for {}; use a JSON merge patch",
            rt.kind
        )));
    };
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request("a strategic merge patch must be a JSON object"));
    };
    let patcher = Patcher { schemas: cached_schemas(rt.group, rt.version) };
    let mut merged = original.as_object().cloned().unwrap_or_default();
    patcher.merge_map(&mut merged, patch, Some(&names.kind))?;
    Ok(Value::Object(merged))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resource::BUILT_IN;

    fn rt(plural: &str) -> &'static ResourceType {
        BUILT_IN.iter().find(|t| t.plural == plural).unwrap()
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"a": "1"}, "finalizers": ["x"]},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]},
                {"name": "side", "image": "side:1"},
            ]}}},
        })
    }

    #[test]
    fn containers_merge_by_name() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]},
        ]}}}});
        let out = apply(rt("deployments"), &deployment(), &patch).unwrap();
        let containers = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers.as_array().unwrap().len(), 2, "the sidecar stays");
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(containers[0]["ports"][0]["containerPort"], 80, "untouched fields stay");
        let env: Vec<_> =
            containers[0]["env"].as_array().unwrap().iter().map(|e| e["name"].clone()).collect();
        assert_eq!(env, [json!("A"), json!("B")], "env merges by name");
    }

    #[test]
    fn directives_delete_replace_and_order() {
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["x"], "labels": {"a": null, "b": "2"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                "containers": [{"name": "app", "$patch": "delete"}, {"name": "side", "image": "side:2"}],
            }}},
        });
        let out = apply(rt("deployments"), &deployment(), &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        let containers = out["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["image"], "side:2");

        let replace = json!({"spec": {"template": {"spec": {"containers": [
            {"$patch": "replace"}, {"name": "only", "image": "only:1"},
        ]}}}});
        let out = apply(rt("deployments"), &deployment(), &replace).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "only:1"}])
        );
    }

    #[test]
    fn lists_without_a_strategy_are_replaced() {
        let role = json!({"kind": "Role", "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        let out = apply(rt("roles"), &role, &json!({"rules": [{"verbs": ["watch"]}]})).unwrap();
        assert_eq!(out["rules"], json!([{"verbs": ["watch"]}]));
    }

    #[test]
    fn service_ports_merge_by_port() {
        let svc = json!({"kind": "Service", "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
        let out = apply(
            rt("services"),
            &svc,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"][0],
            json!({"port": 80, "name": "http", "targetPort": 8080})
        );
        assert_eq!(out["spec"]["ports"][1]["port"], 443);
    }
}
