//! Bad values as kube-apiserver prints them: strings quoted as Go's `%q`, numbers bare, label
//! maps and selectors as Go's `%#v`, other structured values as compact JSON.

use serde_json::Value;

use crate::object::go_quote as quote;
use crate::validation::{field, text};

/// A JSON value as a bad value: strings quoted, numbers and booleans bare, nothing as `"null"`,
/// anything else as compact JSON.
pub(crate) fn shown(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => quote("null"),
        Some(Value::String(s)) => quote(s),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

/// A `map[string]string` as Go's `%#v` prints it (keys sorted).
pub(crate) fn go_string_map(map: Option<&Value>) -> String {
    match map.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), quote(v.as_str().unwrap_or_default())))
                .collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
    }
}

/// A list of strings as Go's `%#v` prints a `[]T` of string type `T`.
pub(crate) fn go_strings(type_name: &str, list: Option<&Value>) -> String {
    match list.and_then(Value::as_array) {
        None => format!("[]{type_name}(nil)"),
        Some(items) => {
            let items: Vec<String> =
                items.iter().map(|v| quote(v.as_str().unwrap_or_default())).collect();
            format!("[]{type_name}{{{}}}", items.join(", "))
        }
    }
}

/// A `*metav1.LabelSelector` as a bad value.
pub(crate) fn go_label_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return quote("null");
    };
    let labels = go_string_map(field(selector, "matchLabels"));
    let expressions = match field(selector, "matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        quote(text(r, "key")),
                        quote(text(r, "operator")),
                        go_strings("string", field(r, "values"))
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}
