//! Reading fields of objects as Go reads its zero values.

use serde_json::{Map, Value};

pub(crate) static NULL: Value = Value::Null;

/// A field that is set (not missing, not null).
pub(crate) fn field<'a>(parent: &'a Value, key: &str) -> Option<&'a Value> {
    parent.get(key).filter(|v| !v.is_null())
}

/// A field, or null.
pub(crate) fn at<'a>(parent: &'a Value, key: &str) -> &'a Value {
    parent.get(key).unwrap_or(&NULL)
}

/// A string field; empty if unset (Go's zero value).
pub(crate) fn text<'a>(parent: &'a Value, key: &str) -> &'a str {
    parent.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A list field; empty if unset.
pub(crate) fn items<'a>(parent: &'a Value, key: &str) -> &'a [Value] {
    parent.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// A map field; `None` if unset.
pub(crate) fn map_of<'a>(parent: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    parent.get(key).and_then(Value::as_object)
}

/// Whether two values are equal as Go's `equality.Semantic` sees them: unset, null, empty maps,
/// lists and strings are all the zero value.
pub fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn zero(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        }
    }
    if zero(a) && zero(b) {
        return true;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| semantic_eq(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Whether `key` differs between `a` and `b`, as [`semantic_eq`] compares.
pub(crate) fn changed(a: &Value, b: &Value, key: &str) -> bool {
    !semantic_eq(a.get(key), b.get(key))
}

/// Whether two optional fields of a typed object are equal as Go's `equality.Semantic` sees
/// them: unset and the zero value (an empty string, map or list) are the same.
pub(crate) fn same<T: Default + PartialEq>(a: Option<&T>, b: Option<&T>) -> bool {
    let zero = T::default();
    a.unwrap_or(&zero) == b.unwrap_or(&zero)
}
