//! Objects walked through their schemas, as server-side apply sees them: which fields a value
//! sets ([`Typed::field_set`]), what changed between two versions ([`Typed::compare`]), an apply
//! configuration merged into a live object ([`Typed::merge`]) and fields taken out of an object
//! ([`Typed::remove`]).
//!
//! The schema decides how each part merges: struct fields one by one, maps key by key, lists by
//! their `x-kubernetes-list-type` (`map` items by their `x-kubernetes-list-map-keys`, `set` items
//! by value, `atomic` lists whole) and `x-kubernetes-map-type: atomic` structs whole. Where the
//! schema says nothing (free-form objects), objects merge key by key and lists are atomic.

use serde_json::{Map, Value};

use crate::fieldpath::{canonical, Element, Set};
use crate::openapi::{cached_schemas, kind_names, referenced, Schemas};
use crate::resource::ResourceType;

/// The schemas of one kind.
#[derive(Debug)]
pub struct Typed {
    schemas: Schemas,
    root: Option<std::sync::Arc<Value>>,
}

/// How one value merges.
enum Shape<'a> {
    /// A struct: fields merge one by one.
    Struct(&'a Map<String, Value>),
    /// A map: keys merge one by one, each value of the given schema.
    Map(Option<&'a Value>),
    /// Replaced whole: scalars, atomic lists and atomic structs or maps.
    Atomic,
    /// A list of unique scalars, each owned on its own.
    Set,
    /// A list of objects identified by their key fields.
    Associative { keys: Vec<&'a str>, items: Option<&'a Value> },
}

/// What changed from one version of an object to the next.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Paths added or given a new value.
    pub changed: Set,
    /// Paths that are gone.
    pub removed: Set,
}

impl Comparison {
    /// Whether nothing changed.
    pub fn is_same(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// The default of a list key field that a client may leave out (the ports of containers,
/// services and endpoints are keyed by `protocol`, which defaults to TCP).
fn key_default(field: &str) -> Option<Value> {
    (field == "protocol").then(|| Value::String("TCP".into()))
}

impl Typed {
    /// The schemas of `rt`'s kind; a kind without a schema is walked as free-form JSON.
    pub fn for_resource(rt: &ResourceType) -> Typed {
        if let Some(custom) = &rt.custom {
            // A custom resource's schema stands alone: no references.
            return Typed { schemas: Default::default(), root: Some(custom.openapi.clone()) };
        }
        let schemas = cached_schemas(rt.group, rt.version);
        let root = kind_names(rt)
            .map(|names| serde_json::json!({ "$ref": format!("{}{}", crate::openapi::SCHEMA_REF_PREFIX, names.kind) }))
            .map(std::sync::Arc::new);
        Typed { schemas, root }
    }

    fn shape<'a>(&'a self, schema: Option<&'a Value>, value: &Value) -> Shape<'a> {
        match value {
            Value::Array(_) => {
                let Some(schema) = schema else { return Shape::Atomic };
                match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => Shape::Set,
                    Some("map") => Shape::Associative {
                        keys: schema
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|keys| keys.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default(),
                        items: schema.get("items").map(|items| self.resolve(items)),
                    },
                    _ => Shape::Atomic,
                }
            }
            Value::Object(_) => {
                let Some(field) = schema else { return Shape::Map(None) };
                let named = self.resolve(field);
                let atomic = |s: &Value| {
                    s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
                };
                if atomic(field) || atomic(named) {
                    return Shape::Atomic;
                }
                if let Some(properties) = named.get("properties").and_then(Value::as_object) {
                    return Shape::Struct(properties);
                }
                match named.get("additionalProperties").filter(|v| v.is_object()) {
                    Some(values) => Shape::Map(Some(self.resolve(values))),
                    None => Shape::Map(None),
                }
            }
            _ => Shape::Atomic,
        }
    }

    /// A field's schema with its `$ref` (or `allOf: [$ref]`) followed, when it has one.
    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        if schema.get("items").is_some() {
            return schema;
        }
        referenced(schema).and_then(|name| self.schemas.get(name)).unwrap_or(schema)
    }

    fn field_schema<'a>(shape: &Shape<'a>, key: &str) -> Option<&'a Value> {
        match shape {
            Shape::Struct(properties) => properties.get(key),
            Shape::Map(values) => *values,
            _ => None,
        }
    }

    /// The key element of an associative list's item.
    fn key_of(keys: &[&str], item: &Value) -> Element {
        let mut fields = Map::new();
        for key in keys {
            let value = item.get(*key).cloned().or_else(|| key_default(key));
            if let Some(value) = value {
                fields.insert((*key).to_owned(), value);
            }
        }
        Element::Key(canonical(&Value::Object(fields)))
    }

    /// The set of fields `object` sets: its scalars, atomic parts, list items and map entries.
    pub fn field_set(&self, object: &Value) -> Set {
        let mut set = Set::new();
        self.collect(self.root.as_deref(), object, &mut Vec::new(), &mut set);
        set
    }

    fn collect(
        &self,
        schema: Option<&Value>,
        value: &Value,
        path: &mut Vec<Element>,
        set: &mut Set,
    ) {
        let shape = self.shape(schema, value);
        match (&shape, value) {
            (Shape::Struct(_) | Shape::Map(_), Value::Object(map)) => {
                for (key, child) in map {
                    path.push(Element::Field(key.clone()));
                    let field = Self::field_schema(&shape, key);
                    self.collect(field, child, path, set);
                    let empty = child.is_null() || child.as_object().is_some_and(Map::is_empty);
                    let declared = matches!(shape, Shape::Struct(p) if p.contains_key(key));
                    if empty || !declared {
                        set.insert(path);
                    }
                    path.pop();
                }
            }
            (Shape::Set, Value::Array(items)) => {
                for item in items {
                    path.push(Element::Value(canonical(item)));
                    set.insert(path);
                    path.pop();
                }
            }
            (Shape::Associative { keys, items: item_schema }, Value::Array(items)) => {
                for item in items {
                    path.push(Self::key_of(keys, item));
                    self.collect(*item_schema, item, path, set);
                    set.insert(path);
                    path.pop();
                }
            }
            _ => set.insert(path),
        }
    }

    /// What changed from `old` to `new` (either may be absent).
    pub fn compare(&self, old: Option<&Value>, new: Option<&Value>) -> Comparison {
        let mut out = Comparison::default();
        self.diff(self.root.as_deref(), old, new, &mut Vec::new(), &mut out);
        out
    }

    fn diff(
        &self,
        schema: Option<&Value>,
        old: Option<&Value>,
        new: Option<&Value>,
        path: &mut Vec<Element>,
        out: &mut Comparison,
    ) {
        let (old, new) = match (old, new) {
            (None, None) => return,
            (None, Some(new)) => {
                self.collect(schema, new, path, &mut out.changed);
                return;
            }
            (Some(old), None) => {
                self.collect(schema, old, path, &mut out.removed);
                return;
            }
            (Some(old), Some(new)) => (old, new),
        };
        let shape = self.shape(schema, new);
        let same_kind =
            std::mem::discriminant(&shape) == std::mem::discriminant(&self.shape(schema, old));
        match (&shape, old, new) {
            (Shape::Struct(_) | Shape::Map(_), Value::Object(a), Value::Object(b)) if same_kind => {
                for (key, child) in b {
                    path.push(Element::Field(key.clone()));
                    let field = Self::field_schema(&shape, key);
                    self.diff(field, a.get(key), Some(child), path, out);
                    path.pop();
                }
                for (key, child) in a {
                    if !b.contains_key(key) {
                        path.push(Element::Field(key.clone()));
                        let field = Self::field_schema(&shape, key);
                        self.diff(field, Some(child), None, path, out);
                        path.pop();
                    }
                }
            }
            (Shape::Set, Value::Array(a), Value::Array(b)) if same_kind => {
                let before: Vec<String> = a.iter().map(canonical).collect();
                let after: Vec<String> = b.iter().map(canonical).collect();
                for item in &after {
                    if !before.contains(item) {
                        path.push(Element::Value(item.clone()));
                        out.changed.insert(path);
                        path.pop();
                    }
                }
                for item in &before {
                    if !after.contains(item) {
                        path.push(Element::Value(item.clone()));
                        out.removed.insert(path);
                        path.pop();
                    }
                }
            }
            (Shape::Associative { keys, items: item_schema }, Value::Array(a), Value::Array(b))
                if same_kind =>
            {
                let before: Vec<(Element, &Value)> =
                    a.iter().map(|i| (Self::key_of(keys, i), i)).collect();
                let after: Vec<(Element, &Value)> =
                    b.iter().map(|i| (Self::key_of(keys, i), i)).collect();
                for (key, item) in &after {
                    let previous = before.iter().find(|(k, _)| k == key).map(|(_, i)| *i);
                    path.push(key.clone());
                    if previous.is_none() {
                        out.changed.insert(path);
                    }
                    self.diff(*item_schema, previous, Some(item), path, out);
                    path.pop();
                }
                for (key, item) in &before {
                    if !after.iter().any(|(k, _)| k == key) {
                        path.push(key.clone());
                        out.removed.insert(path);
                        self.diff(*item_schema, Some(item), None, path, out);
                        path.pop();
                    }
                }
            }
            _ => {
                if old != new {
                    out.changed.insert(path);
                }
            }
        }
    }

    /// `config` merged into `live`: the configuration's values win, struct fields and map keys
    /// merge one by one, associative list items by key and set items by value, anything atomic is
    /// replaced. A null in the configuration removes the field.
    pub fn merge(&self, live: &Value, config: &Value) -> Value {
        self.merge_value(self.root.as_deref(), live, config)
    }

    fn merge_value(&self, schema: Option<&Value>, live: &Value, config: &Value) -> Value {
        let shape = self.shape(schema, config);
        match (&shape, live, config) {
            (Shape::Struct(_) | Shape::Map(_), Value::Object(a), Value::Object(b)) => {
                let mut out = a.clone();
                for (key, value) in b {
                    if value.is_null() {
                        out.remove(key);
                        continue;
                    }
                    let field = Self::field_schema(&shape, key);
                    let merged = match a.get(key) {
                        Some(existing) => self.merge_value(field, existing, value),
                        None => value.clone(),
                    };
                    out.insert(key.clone(), merged);
                }
                Value::Object(out)
            }
            (Shape::Set, Value::Array(a), Value::Array(b)) => {
                let mut out = a.clone();
                for item in b {
                    if !out.contains(item) {
                        out.push(item.clone());
                    }
                }
                Value::Array(out)
            }
            (Shape::Associative { keys, items: item_schema }, Value::Array(a), Value::Array(b)) => {
                let mut out = a.clone();
                for item in b {
                    let key = Self::key_of(keys, item);
                    match out.iter().position(|i| Self::key_of(keys, i) == key) {
                        Some(at) => out[at] = self.merge_value(*item_schema, &out[at], item),
                        None => out.push(item.clone()),
                    }
                }
                Value::Array(out)
            }
            _ => config.clone(),
        }
    }

    /// Take `path` out of `object`: a field, a map key, or a list item by key or value. A list
    /// or map left empty goes too, as Go's `omitempty` drops it.
    pub fn remove(&self, object: &mut Value, path: &[Element]) {
        self.remove_in(self.root.as_deref(), object, path);
    }

    fn remove_in(&self, schema: Option<&Value>, node: &mut Value, path: &[Element]) {
        let Some((first, rest)) = path.split_first() else { return };
        let shape = self.shape(schema, node);
        if rest.is_empty() {
            match (first, node) {
                (Element::Field(name), Value::Object(map)) => {
                    map.remove(name);
                }
                (Element::Key(_), Value::Array(items)) => {
                    let fields = first.key_fields().unwrap_or_default();
                    items.retain(|i| !key_matches(&fields, i));
                }
                (Element::Value(json), Value::Array(items)) => {
                    items.retain(|i| &canonical(i) != json);
                }
                (Element::Index(i), Value::Array(items)) if *i < items.len() => {
                    items.remove(*i);
                }
                _ => {}
            }
            return;
        }
        let (child_schema, child) = match (first, &shape, &mut *node) {
            (Element::Field(name), _, Value::Object(map)) => {
                (Self::field_schema(&shape, name), map.get_mut(name))
            }
            (Element::Key(_), Shape::Associative { items: s, .. }, Value::Array(items)) => {
                let fields = first.key_fields().unwrap_or_default();
                (*s, items.iter_mut().find(|i| key_matches(&fields, i)))
            }
            (Element::Index(i), _, Value::Array(items)) => (None, items.get_mut(*i)),
            _ => (None, None),
        };
        let Some(child) = child else { return };
        self.remove_in(child_schema, child, rest);
        let emptied = match child {
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => {
                map.is_empty() && matches!(self.shape(child_schema, child), Shape::Map(_))
            }
            _ => false,
        };
        if emptied {
            self.remove_in(schema, node, std::slice::from_ref(first));
        }
    }
}

/// Whether a list item has the key fields of a path element.
fn key_matches(fields: &Map<String, Value>, item: &Value) -> bool {
    fields.iter().all(|(name, value)| {
        item.get(name).cloned().or_else(|| key_default(name)).as_ref() == Some(value)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fieldpath::display;
    use crate::resource::BUILT_IN;

    fn typed(plural: &str) -> Typed {
        Typed::for_resource(BUILT_IN.iter().find(|t| t.plural == plural).unwrap())
    }

    fn displayed(set: &Set) -> Vec<String> {
        set.paths().iter().map(|p| display(p)).collect()
    }

    #[test]
    fn field_sets_follow_the_schema() {
        let deployment = json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "web", "image": "nginx", "ports": [{"containerPort": 80}], "args": ["a", "b"]},
                ]}},
            },
        });
        let paths = displayed(&typed("deployments").field_set(&deployment));
        assert_eq!(
            paths,
            vec![
                ".metadata.labels.app",
                ".spec.replicas",
                // LabelSelector is an atomic struct.
                ".spec.selector",
                r#".spec.template.spec.containers[name="web"]"#,
                r#".spec.template.spec.containers[name="web"].args"#,
                r#".spec.template.spec.containers[name="web"].image"#,
                r#".spec.template.spec.containers[name="web"].name"#,
                r#".spec.template.spec.containers[name="web"].ports[containerPort=80,protocol="TCP"]"#,
                r#".spec.template.spec.containers[name="web"].ports[containerPort=80,protocol="TCP"].containerPort"#,
            ]
        );
    }

    #[test]
    fn compare_reports_changed_and_removed_leaves() {
        let t = typed("configmaps");
        let old = json!({"data": {"a": "1", "b": "2"}, "metadata": {"finalizers": ["x", "y"]}});
        let new =
            json!({"data": {"a": "1", "b": "3", "c": "4"}, "metadata": {"finalizers": ["y", "z"]}});
        let c = t.compare(Some(&old), Some(&new));
        assert_eq!(
            displayed(&c.changed),
            vec![".data.b", ".data.c", r#".metadata.finalizers[="z"]"#]
        );
        assert_eq!(displayed(&c.removed), vec![r#".metadata.finalizers[="x"]"#]);
        assert!(t.compare(Some(&old), Some(&old)).is_same());
    }

    #[test]
    fn merge_by_keys_and_values_and_replace_atomic_parts() {
        let t = typed("services");
        let live = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}, "spec": {
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}, {"port": 443, "protocol": "TCP"}],
            "selector": {"app": "web", "tier": "front"},
            "externalIPs": ["1.1.1.1"],
        }});
        let config = json!({"metadata": {"labels": {"app": "api"}}, "spec": {
            "ports": [{"port": 80, "targetPort": 9090}, {"port": 53, "protocol": "UDP"}],
            "selector": {"app": "api"},
            "externalIPs": ["2.2.2.2"],
        }});
        let merged = t.merge(&live, &config);
        assert_eq!(
            merged["spec"]["ports"],
            json!([
                {"port": 80, "protocol": "TCP", "targetPort": 9090},
                {"port": 443, "protocol": "TCP"},
                {"port": 53, "protocol": "UDP"},
            ])
        );
        // A map merges key by key; an atomic map (a Service's selector) or list is replaced.
        assert_eq!(merged["metadata"]["labels"], json!({"app": "api", "tier": "front"}));
        assert_eq!(merged["spec"]["selector"], json!({"app": "api"}));
        assert_eq!(merged["spec"]["externalIPs"], json!(["2.2.2.2"]));
    }

    #[test]
    fn remove_takes_out_fields_and_items() {
        let t = typed("services");
        let mut object = json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 443}]}, "metadata": {"finalizers": ["a", "b"]}});
        let f = |s: &str| Element::Field(s.into());
        t.remove(
            &mut object,
            &[f("spec"), f("ports"), Element::Key(r#"{"port":443,"protocol":"TCP"}"#.into())],
        );
        t.remove(&mut object, &[f("metadata"), f("finalizers"), Element::Value("\"a\"".into())]);
        t.remove(
            &mut object,
            &[
                f("spec"),
                f("ports"),
                Element::Key(r#"{"port":80,"protocol":"TCP"}"#.into()),
                f("protocol"),
            ],
        );
        assert_eq!(
            object,
            json!({"spec": {"ports": [{"port": 80}]}, "metadata": {"finalizers": ["b"]}})
        );
    }
}
