//! Field paths and sets of them: what server-side apply records as a field manager's ownership,
//! in the `FieldsV1` form of `metadata.managedFields`.
//!
//! A path steps through struct fields and map keys (`f:name`), items of associative lists by
//! their key fields (`k:{"name":"web"}`), items of set lists by value (`v:"a"`) and, for
//! completeness of decoding, list indices (`i:0`). A [`Set`] is a tree of such steps in which a
//! node is a *member* when the path leading to it is itself in the set; in `FieldsV1` a member
//! with children carries a `"."` entry, a member without children is `{}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One step of a path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Element {
    /// A field of a struct or a key of a map.
    Field(String),
    /// An item of a set list, by its value (kept as canonical JSON text).
    Value(String),
    /// An item of an associative list, by its key fields (canonical JSON text of an object with
    /// the key fields in name order).
    Key(String),
    /// An item of a list by position.
    Index(usize),
}

impl Element {
    /// The `FieldsV1` spelling: `f:name`, `v:"a"`, `k:{"name":"a"}`, `i:0`.
    pub fn encode(&self) -> String {
        match self {
            Element::Field(name) => format!("f:{name}"),
            Element::Value(json) => format!("v:{json}"),
            Element::Key(json) => format!("k:{json}"),
            Element::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(text: &str) -> Result<Element, FieldsError> {
        let bad = |why: String| FieldsError::Element { text: text.to_owned(), why };
        let (kind, rest) =
            text.split_once(':').ok_or_else(|| bad("is not a path element (no prefix)".into()))?;
        match kind {
            "f" => Ok(Element::Field(rest.to_owned())),
            "v" => {
                let value: Value = serde_json::from_str(rest)
                    .map_err(|e| bad(format!("has an invalid value: {e}")))?;
                Ok(Element::Value(canonical(&value)))
            }
            "k" => {
                let value: Value = serde_json::from_str(rest)
                    .map_err(|e| bad(format!("has an invalid key: {e}")))?;
                if !value.is_object() {
                    return Err(FieldsError::KeyNotObject(text.to_owned()));
                }
                Ok(Element::Key(canonical(&value)))
            }
            "i" => rest.parse().map(Element::Index).map_err(|_| bad("has an invalid index".into())),
            _ => Err(bad(format!("has an unknown prefix {kind:?}"))),
        }
    }

    /// The key fields of a [`Element::Key`], name → value.
    pub fn key_fields(&self) -> Option<Map<String, Value>> {
        match self {
            Element::Key(json) => serde_json::from_str(json).ok(),
            _ => None,
        }
    }
}

/// Why a `FieldsV1` value does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    /// Not a JSON object.
    #[error("fieldsV1 must be a JSON object")]
    NotObject,
    /// A path element that does not read.
    #[error("{text:?} {why}")]
    Element {
        /// The element as written.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `k:` element whose key is not a JSON object.
    #[error("{0:?}: a key must be a JSON object")]
    KeyNotObject(String),
}

/// JSON text with object keys in name order (serde_json's map is ordered by name).
pub fn canonical(value: &Value) -> String {
    value.to_string()
}

/// A path as kube-apiserver prints it in conflict messages:
/// `.spec.containers[name="web"].image`, `.metadata.finalizers[="a"]`.
pub fn display(path: &[Element]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            Element::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Element::Value(json) => {
                let _ = write!(out, "[={json}]");
            }
            Element::Key(_) => {
                let fields = element.key_fields().unwrap_or_default();
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = write!(out, "[{}]", parts.join(","));
            }
            Element::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

/// A set of paths, as a tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    member: bool,
    children: BTreeMap<Element, Set>,
}

impl Set {
    /// The empty set.
    pub fn new() -> Set {
        Set::default()
    }

    /// Whether the set holds no path.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Add `path`.
    pub fn insert(&mut self, path: &[Element]) {
        let mut node = self;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.member = true;
    }

    /// Whether `path` itself is in the set.
    pub fn contains(&self, path: &[Element]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    /// Whether `path` or any path below it is in the set.
    pub fn touches(&self, path: &[Element]) -> bool {
        self.node(path).is_some_and(|n| !n.is_empty())
    }

    fn node(&self, path: &[Element]) -> Option<&Set> {
        let mut node = self;
        for element in path {
            node = node.children.get(element)?;
        }
        Some(node)
    }

    /// Drop `path` and everything below it.
    pub fn remove_subtree(&mut self, path: &[Element]) {
        let Some((last, parents)) = path.split_last() else {
            *self = Set::new();
            return;
        };
        fn walk(node: &mut Set, parents: &[Element], last: &Element) {
            match parents.split_first() {
                None => {
                    node.children.remove(last);
                }
                Some((first, rest)) => {
                    if let Some(child) = node.children.get_mut(first) {
                        walk(child, rest, last);
                        if child.is_empty() {
                            node.children.remove(first);
                        }
                    }
                }
            }
        }
        walk(self, parents, last);
    }

    /// Add every path of `other`.
    pub fn union_with(&mut self, other: &Set) {
        self.member |= other.member;
        for (element, child) in &other.children {
            self.children.entry(element.clone()).or_default().union_with(child);
        }
    }

    /// The paths of `self` that are not in `other`.
    pub fn difference(&self, other: &Set) -> Set {
        let mut out = Set { member: self.member && !other.member, children: BTreeMap::new() };
        for (element, child) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(element.clone(), rest);
            }
        }
        out
    }

    /// The paths in both `self` and `other`.
    pub fn intersection(&self, other: &Set) -> Set {
        let mut out = Set { member: self.member && other.member, children: BTreeMap::new() };
        for (element, child) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(element.clone(), both);
                }
            }
        }
        out
    }

    /// Every path in the set, parents before children.
    pub fn paths(&self) -> Vec<Vec<Element>> {
        fn walk(node: &Set, path: &mut Vec<Element>, out: &mut Vec<Vec<Element>>) {
            if node.member {
                out.push(path.clone());
            }
            for (element, child) in &node.children {
                path.push(element.clone());
                walk(child, path, out);
                path.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    /// The set as `FieldsV1` JSON.
    pub fn to_fields_v1(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            map.insert(element.encode(), child.to_fields_v1());
        }
        Value::Object(map)
    }

    /// A set from `FieldsV1` JSON.
    pub fn from_fields_v1(value: &Value) -> Result<Set, FieldsError> {
        let Value::Object(map) = value else {
            return Err(FieldsError::NotObject);
        };
        let mut set = Set::new();
        for (key, child) in map {
            if key == "." {
                set.member = true;
                continue;
            }
            let element = Element::decode(key)?;
            let mut sub = Set::from_fields_v1(child)?;
            if child.as_object().is_some_and(Map::is_empty) {
                sub.member = true;
            }
            set.children.insert(element, sub);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn f(name: &str) -> Element {
        Element::Field(name.into())
    }

    #[test]
    fn fields_v1_round_trips_with_members_marked() {
        let text = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}},
            "f:finalizers": {"v:\"a\"": {}},
        });
        let set = Set::from_fields_v1(&text).unwrap();
        assert!(set.contains(&[f("metadata"), f("labels")]));
        assert!(set.contains(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.contains(&[f("metadata")]));
        let key = Element::Key(r#"{"name":"web"}"#.into());
        assert!(set.contains(&[f("spec"), f("containers"), key.clone()]));
        assert!(set.contains(&[f("spec"), f("containers"), key, f("image")]));
        assert_eq!(set.to_fields_v1(), text);
    }

    #[test]
    fn keys_are_canonical_whatever_their_order() {
        let a = Set::from_fields_v1(&json!({"k:{\"protocol\":\"TCP\",\"port\":80}": {}})).unwrap();
        let b = Set::from_fields_v1(&json!({"k:{\"port\":80,\"protocol\":\"TCP\"}": {}})).unwrap();
        assert_eq!(a, b);
        assert!(Set::from_fields_v1(&json!({"x:1": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(Set::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::new();
        a.insert(&[f("spec"), f("replicas")]);
        a.insert(&[f("spec"), f("paused")]);
        let mut b = Set::new();
        b.insert(&[f("spec"), f("replicas")]);
        assert_eq!(a.intersection(&b), b);
        let rest = a.difference(&b);
        assert_eq!(rest.paths(), vec![vec![f("spec"), f("paused")]]);
        assert!(b.difference(&a).is_empty());
        let mut c = b.clone();
        c.union_with(&rest);
        assert_eq!(c, a);
        assert!(a.touches(&[f("spec")]) && !a.contains(&[f("spec")]));
        a.remove_subtree(&[f("spec"), f("paused")]);
        assert_eq!(a, b);
        a.remove_subtree(&[f("spec"), f("replicas")]);
        assert!(a.is_empty());
    }

    #[test]
    fn paths_print_as_kube_apiserver_prints_them() {
        let path = [
            f("spec"),
            f("ports"),
            Element::Key(r#"{"port":80,"protocol":"TCP"}"#.into()),
            f("targetPort"),
        ];
        assert_eq!(display(&path), r#".spec.ports[port=80,protocol="TCP"].targetPort"#);
        assert_eq!(display(&[f("a"), Element::Value("\"x\"".into())]), r#".a[="x"]"#);
    }
}
