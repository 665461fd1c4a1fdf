//! The parsed schema tree, and the read-only view of it the crate exposes.

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

use crate::cel::{CompiledRule, RawRule};

/// `additionalProperties`: a boolean or a schema.
#[derive(Debug)]
pub(crate) enum Additional {
    Bool(bool),
    Schema(Box<Node>),
}

/// Keywords kube-apiserver refuses in CRD schemas, noted while parsing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Unsupported {
    pub(crate) reference: bool,
    pub(crate) id: bool,
    pub(crate) schema: bool,
    pub(crate) definitions: bool,
    pub(crate) dependencies: bool,
    pub(crate) additional_items: bool,
    pub(crate) pattern_properties: bool,
    pub(crate) items_array: bool,
}

impl Unsupported {
    /// Whether kube-apiserver's `NewStructural` cannot convert the node.
    pub(crate) fn any(&self) -> bool {
        self.reference
            || self.id
            || self.schema
            || self.definitions
            || self.dependencies
            || self.additional_items
            || self.pattern_properties
            || self.items_array
    }
}

/// One schema node (a JSONSchemaProps), with every keyword CRDs allow.
#[derive(Debug, Default)]
pub(crate) struct Node {
    pub(crate) type_name: String,
    pub(crate) format: String,
    pub(crate) title: bool,
    pub(crate) description: bool,
    pub(crate) external_docs: bool,
    pub(crate) nullable: bool,
    pub(crate) default: Option<Value>,

    pub(crate) maximum: Option<f64>,
    pub(crate) exclusive_maximum: bool,
    pub(crate) minimum: Option<f64>,
    pub(crate) exclusive_minimum: bool,
    pub(crate) max_length: Option<i64>,
    pub(crate) min_length: Option<i64>,
    pub(crate) pattern: Option<String>,
    pub(crate) pattern_regex: Option<Arc<Regex>>,
    pub(crate) pattern_error: Option<crate::regex_go::PatternError>,
    pub(crate) max_items: Option<i64>,
    pub(crate) min_items: Option<i64>,
    pub(crate) unique_items: bool,
    pub(crate) multiple_of: Option<f64>,
    pub(crate) max_properties: Option<i64>,
    pub(crate) min_properties: Option<i64>,
    pub(crate) required: Vec<String>,
    pub(crate) enum_values: Vec<Value>,
    pub(crate) all_of: Vec<Node>,
    pub(crate) any_of: Vec<Node>,
    pub(crate) one_of: Vec<Node>,
    pub(crate) not: Option<Box<Node>>,

    pub(crate) properties: BTreeMap<String, Node>,
    pub(crate) additional: Option<Additional>,
    pub(crate) items: Option<Box<Node>>,

    pub(crate) preserve_unknown: Option<bool>,
    pub(crate) embedded: bool,
    pub(crate) int_or_string: bool,
    pub(crate) list_type: Option<String>,
    pub(crate) list_map_keys: Vec<String>,
    pub(crate) map_type: Option<String>,
    pub(crate) raw_rules: Vec<RawRule>,
    pub(crate) rules: Vec<CompiledRule>,

    pub(crate) unsupported: Unsupported,
    /// Whether this node or one below it (properties, items, additionalProperties) has rules.
    pub(crate) has_rules: bool,
}

impl Node {
    pub(crate) fn preserves_unknown(&self) -> bool {
        self.preserve_unknown == Some(true)
    }

    /// The schema of `additionalProperties`, if it is a schema.
    pub(crate) fn additional_schema(&self) -> Option<&Node> {
        match &self.additional {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// The schema of a field of an object: its property, else `additionalProperties`. The outer
    /// `None` means the field is unknown; `Some(None)` means additionalProperties is a boolean.
    pub(crate) fn field_schema(&self, name: &str) -> Option<Option<&Node>> {
        if let Some(p) = self.properties.get(name) {
            return Some(Some(p));
        }
        match &self.additional {
            Some(Additional::Schema(s)) => Some(Some(s)),
            Some(Additional::Bool(_)) => Some(None),
            None => None,
        }
    }

    /// The types a value may have, as kube-openapi's validator sees them.
    pub(crate) fn types(&self) -> Vec<&'static str> {
        if self.int_or_string {
            return vec!["integer", "string"];
        }
        match self.type_name.as_str() {
            "object" => vec!["object"],
            "array" => vec!["array"],
            "string" => vec!["string"],
            "integer" => vec!["integer"],
            "number" => vec!["number"],
            "boolean" => vec!["boolean"],
            "" => vec![],
            _ => vec!["?"],
        }
    }

    /// The format kube-apiserver validates: formats it does not support are dropped.
    pub(crate) fn effective_format(&self) -> &str {
        if self.format.is_empty() {
            return "";
        }
        let ty = if self.int_or_string { "" } else { self.type_name.as_str() };
        match ty {
            "" | "string" if crate::formats::is_supported(&self.format) => &self.format,
            "integer" if self.format == "int32" || self.format == "int64" => &self.format,
            "number" if self.format == "float" || self.format == "double" => &self.format,
            _ => "",
        }
    }

    pub(crate) fn list_type_value(&self) -> Option<ListType> {
        if self.type_name != "array" {
            return None;
        }
        Some(match self.list_type.as_deref() {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(self.list_map_keys.clone()),
            _ => ListType::Atomic,
        })
    }

    pub(crate) fn map_type_value(&self) -> Option<MapType> {
        if self.type_name != "object" {
            return None;
        }
        Some(match self.map_type.as_deref() {
            Some("atomic") => MapType::Atomic,
            _ => MapType::Granular,
        })
    }
}

/// How server-side apply merges a list (`x-kubernetes-list-type`; `atomic` when unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// The list is replaced as a whole.
    Atomic,
    /// Items are scalars, unique, merged as a set.
    Set,
    /// Items are objects identified by these keys (`x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

/// How server-side apply merges an object (`x-kubernetes-map-type`; `granular` when unset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// Fields are merged one by one.
    Granular,
    /// The object is replaced as a whole.
    Atomic,
}

/// A read-only view of one node of a parsed [`crate::Schema`].
#[derive(Debug, Clone, Copy)]
pub struct SchemaNode<'a> {
    pub(crate) node: &'a Node,
}

impl<'a> SchemaNode<'a> {
    /// The node's `type` (`"object"`, `"array"`, `"string"`, …), or `None` when unset
    /// (x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields).
    pub fn type_name(&self) -> Option<&'a str> {
        if self.node.type_name.is_empty() {
            None
        } else {
            Some(self.node.type_name.as_str())
        }
    }

    /// The list type of an array node; `None` for other nodes.
    pub fn list_type(&self) -> Option<ListType> {
        self.node.list_type_value()
    }

    /// The map type of an object node; `None` for other nodes.
    pub fn map_type(&self) -> Option<MapType> {
        self.node.map_type_value()
    }

    /// The schema of a field of this object: its property, else its `additionalProperties`
    /// schema.
    pub fn field(&self, name: &str) -> Option<SchemaNode<'a>> {
        self.node.field_schema(name).flatten().map(|node| SchemaNode { node })
    }

    /// The declared properties of this object, by name.
    pub fn properties(&self) -> impl Iterator<Item = (&'a str, SchemaNode<'a>)> + 'a {
        self.node.properties.iter().map(|(k, node)| (k.as_str(), SchemaNode { node }))
    }

    /// The `additionalProperties` schema of this object, if it has one.
    pub fn additional_properties(&self) -> Option<SchemaNode<'a>> {
        self.node.additional_schema().map(|node| SchemaNode { node })
    }

    /// The schema of this array's items.
    pub fn items(&self) -> Option<SchemaNode<'a>> {
        self.node.items.as_deref().map(|node| SchemaNode { node })
    }

    /// Whether unknown fields are kept here (`x-kubernetes-preserve-unknown-fields: true`).
    pub fn preserves_unknown_fields(&self) -> bool {
        self.node.preserves_unknown()
    }

    /// Whether this node is an embedded resource (`x-kubernetes-embedded-resource: true`).
    pub fn is_embedded_resource(&self) -> bool {
        self.node.embedded
    }

    /// Whether this node accepts an integer or a string (`x-kubernetes-int-or-string: true`).
    pub fn is_int_or_string(&self) -> bool {
        self.node.int_or_string
    }

    /// Whether `null` is a valid value here.
    pub fn nullable(&self) -> bool {
        self.node.nullable
    }

    /// The node's `default`, if any.
    pub fn default_value(&self) -> Option<&'a Value> {
        self.node.default.as_ref()
    }
}
