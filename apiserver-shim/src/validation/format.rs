//! Bad values as kube-apiserver prints them: strings quoted as Go's `%q`, numbers bare, label
//! maps and selectors as Go's `%#v`, other structured values as compact JSON.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use serde_json::Value;

use crate::object::go_quote as quote;

/// A value as a bad value: strings quoted, numbers and booleans bare, nothing as `"null"`,
/// anything else as compact JSON.
pub(crate) fn shown<T: Serialize + ?Sized>(value: Option<&T>) -> String {
    let value = value.and_then(|v| serde_json::to_value(v).ok());
    match value.as_ref() {
        None | Some(Value::Null) => quote("null"),
        Some(Value::String(s)) => quote(s),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

/// A structured value as a bad value: compact JSON (where kube-apiserver prints a Go struct).
pub(crate) fn compact<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A `map[string]string` as Go's `%#v` prints it (keys sorted).
pub(crate) fn go_string_map(map: Option<&BTreeMap<String, String>>) -> String {
    match map {
        None => "map[string]string(nil)".into(),
        Some(map) => {
            let items: Vec<String> =
                map.iter().map(|(k, v)| format!("{}:{}", quote(k), quote(v))).collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
    }
}

/// A list of strings as Go's `%#v` prints a `[]T` of string type `T`.
pub(crate) fn go_strings<S: AsRef<str>>(type_name: &str, list: Option<&[S]>) -> String {
    match list {
        None => format!("[]{type_name}(nil)"),
        Some(items) => {
            let items: Vec<String> = items.iter().map(|v| quote(v.as_ref())).collect();
            format!("[]{type_name}{{{}}}", items.join(", "))
        }
    }
}

/// A `*metav1.LabelSelector` as a bad value.
pub(crate) fn go_label_selector(selector: Option<&LabelSelector>) -> String {
    let Some(selector) = selector else {
        return quote("null");
    };
    let labels = go_string_map(selector.match_labels.as_ref());
    let expressions = match &selector.match_expressions {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        quote(&r.key),
                        quote(&r.operator),
                        go_strings("string", r.values.as_deref())
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}
