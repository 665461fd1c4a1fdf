//! CustomResourceDefinition structural schemas, as kube-apiserver's apiextensions-apiserver
//! handles them. Pure code: no IO, no store.
//!
//! A [`Schema`] is parsed from a CRD version's `schema.openAPIV3Schema` ([`Schema::parse`]),
//! which refuses a schema kube-apiserver would refuse (not structural, forbidden keywords,
//! invalid defaults, list-type errors, CEL rules that do not compile), with kube-apiserver's
//! field paths and wording. Objects then go through the steps kube-apiserver applies to custom
//! resources:
//!
//! 1. [`Schema::prune`] drops the fields the schema does not know;
//! 2. [`Schema::apply_defaults`] sets `default`s;
//! 3. [`Schema::validate`] checks the object against the schema (types, formats, bounds, enums,
//!    required fields, allOf/anyOf/oneOf/not, embedded resources, list-type sets and maps) and
//!    evaluates the `x-kubernetes-validations` CEL rules.
//!
//! [`Schema::node`], [`Schema::list_type`] and [`Schema::map_type`] describe how server-side
//! apply merges a field.
//!
//! Errors are [`FieldError`]s whose `message` is the line kube-apiserver prints, for instance
//! `spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`.

mod cel;
mod defaulting;
mod error;
mod formats;
mod node;
mod parse;
mod prune;
mod regex_go;
mod validator;

use std::collections::HashSet;

use serde_json::Value;

pub use cel::expression::{Activation, Bound, CompileError, EvalError, Expression};
pub use error::{go_quote, FieldError, Reason};
pub use node::{ListType, MapType, SchemaNode};

use node::Node;

/// A parsed, structural CRD schema with its compiled CEL rules.
#[derive(Debug)]
pub struct Schema {
    root: Node,
}

/// What a schema makes the server hold once compiled, counted from its JSON before it is
/// compiled: the schema nodes (each a compiled [`Schema`] node) and the distinct `pattern`s (each
/// a compiled regular expression; copies of a pattern share one).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// Schema nodes (JSONSchemaProps objects), the root included.
    pub nodes: usize,
    /// The distinct `pattern`s.
    pub patterns: HashSet<String>,
}

impl Footprint {
    /// Counts the nodes and patterns of a schema's JSON and adds them to this footprint.
    pub fn add(&mut self, schema: &Value) {
        let mut stack = vec![schema];
        while let Some(node) = stack.pop() {
            let Value::Object(map) = node else { continue };
            self.nodes += 1;
            if let Some(Value::String(pattern)) = map.get("pattern") {
                if !self.patterns.contains(pattern) {
                    self.patterns.insert(pattern.clone());
                }
            }
            for (keyword, value) in map {
                match (keyword.as_str(), value) {
                    ("properties", Value::Object(props)) => stack.extend(props.values()),
                    ("allOf" | "anyOf" | "oneOf", Value::Array(items)) => stack.extend(items),
                    ("items" | "not" | "additionalProperties", v) if v.is_object() => stack.push(v),
                    _ => {}
                }
            }
        }
    }

    /// The footprint of one schema's JSON.
    pub fn of(schema: &Value) -> Footprint {
        let mut footprint = Footprint::default();
        footprint.add(schema);
        footprint
    }
}

impl Schema {
    /// Parses and checks a CRD version's `openAPIV3Schema`.
    ///
    /// `path` is the field path of the schema, used as the prefix of every error, e.g.
    /// `spec.versions[0].schema.openAPIV3Schema`. A schema kube-apiserver would refuse is refused
    /// with every reason, e.g.
    /// `spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields`.
    pub fn parse(schema: &Value, path: &str) -> Result<Schema, Vec<FieldError>> {
        parse::parse(schema, path, true).map(|root| Schema { root })
    }

    /// [`Schema::parse`] for a schema accepted before: its CEL rules' estimated costs are not
    /// held against it (kube-apiserver does not re-check the costs of an unchanged schema), so
    /// a stored definition stays served when the estimate changes.
    pub fn parse_accepted(schema: &Value, path: &str) -> Result<Schema, Vec<FieldError>> {
        parse::parse(schema, path, false).map(|root| Schema { root })
    }

    /// Removes the fields the schema does not specify, except under
    /// `x-kubernetes-preserve-unknown-fields`. `apiVersion`, `kind` and `metadata` are kept at the
    /// root and in `x-kubernetes-embedded-resource` objects (the root's metadata is left to the
    /// caller). Returns the removed fields' paths, sorted, as kube-apiserver reports them in
    /// `unknown field "spec.foo"` warnings: `spec.foo`, `spec.ports[0].bar`.
    pub fn prune(&self, object: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        prune::prune(object, Some(&self.root), true, &mut pruned);
        pruned
    }

    /// Applies the schema's `default`s, as the defaulting step of kube-apiserver does: first a
    /// `null` is removed where the schema is neither nullable nor has a default, then every
    /// missing property with a default (and every `null` where a default exists and `null` is not
    /// allowed) gets the default, in objects, in list items and in additionalProperties maps, at
    /// any depth (defaults are defaulted further).
    pub fn apply_defaults(&self, object: &mut Value) {
        defaulting::prune_nulls(object, Some(&self.root));
        defaulting::apply(object, &self.root);
    }

    /// Validates an object against the schema and evaluates its `x-kubernetes-validations`
    /// rules; returns every failure.
    ///
    /// `old` is the stored object on an update: transition rules (those using `oldSelf`) run
    /// where the old object has a value at the same place (map-type list items correlate by
    /// their keys) and are skipped on create. As in kube-apiserver, the rules are not evaluated
    /// when the schema validation already found a type, required, enum, length or count error;
    /// a single `<nil>: Invalid value: "null": some validation rules were not checked …` error
    /// says so.
    pub fn validate(&self, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validator::OpenApi { prefix: None }.check(&self.root, object, "", &mut errs);
        validator::embedded_walk(&validator::FPath::nil(), object, Some(&self.root), &mut errs);
        if let Value::Object(m) = object {
            validator::list_walk_map(&validator::FPath::nil(), &self.root, m, &mut errs);
        }
        if self.root.has_rules {
            let blocking = errs.iter().any(|e| {
                matches!(
                    e.reason,
                    Reason::NotSupported
                        | Reason::Required
                        | Reason::TooLong
                        | Reason::TooMany
                        | Reason::TypeInvalid
                )
            });
            if blocking {
                errs.push(FieldError::new(
                    "<nil>",
                    Reason::Invalid,
                    error::Bad::Str("null".into()),
                    "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                ));
            } else {
                cel::validate(&self.root, object, old, &mut errs);
            }
        }
        errs
    }

    /// The root of the schema.
    pub fn root(&self) -> SchemaNode<'_> {
        SchemaNode { node: &self.root }
    }

    /// The schema at a field path: object fields by name (a property, else the
    /// additionalProperties schema), list items by `"[]"` or an index (`"0"`). `None` where the
    /// schema does not specify the path.
    pub fn node(&self, path: &[&str]) -> Option<SchemaNode<'_>> {
        let mut node = &self.root;
        for seg in path {
            node = if node.type_name == "array" && (*seg == "[]" || seg.parse::<usize>().is_ok()) {
                node.items.as_deref()?
            } else {
                node.field_schema(seg).flatten()?
            };
        }
        Some(SchemaNode { node })
    }

    /// The list type of the array at `path` (`atomic` when unset); `None` if `path` is not an
    /// array of the schema.
    pub fn list_type(&self, path: &[&str]) -> Option<ListType> {
        self.node(path)?.list_type()
    }

    /// The map type of the object at `path` (`granular` when unset); `None` if `path` is not an
    /// object of the schema.
    pub fn map_type(&self, path: &[&str]) -> Option<MapType> {
        self.node(path)?.map_type()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprints_count_nodes_and_distinct_patterns() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "string", "pattern": "^a$"},
            "b": {"type": "array", "items": {"type": "string", "pattern": "^a$"}},
            "c": {"type": "object", "additionalProperties": {"type": "string", "pattern": "^c$"}},
            "d": {"anyOf": [{"type": "integer"}, {"type": "string"}], "not": {}},
            "e": {"type": "object", "additionalProperties": true},
        }});
        let footprint = Footprint::of(&schema);
        assert_eq!(footprint.nodes, 11);
        assert_eq!(footprint.patterns.len(), 2);
    }

    #[test]
    fn patterns_from_objects_leave_nothing_shared_behind() {
        let schema = serde_json::json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "properties": {"a": {"type": "string", "maxLength": 10, "pattern": "^[a-z]+$"},
                           "b": {"type": "string", "maxLength": 20}},
            "x-kubernetes-validations": [{"rule": "self.a.matches(self.b)"}]}}});
        let schema = Schema::parse(&schema, "").unwrap_or_else(|e| panic!("{e:?}"));
        assert!(regex_go::is_shared("^[a-z]+$"), "the schema's own pattern is shared");
        let object = serde_json::json!({"spec": {"a": "abc", "b": "^from-data-1$"}});
        assert_eq!(schema.validate(&object, None).len(), 1);
        assert!(!regex_go::is_shared("^from-data-1$"));
    }

    #[test]
    fn schema_is_shareable_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Schema>();
    }
}
