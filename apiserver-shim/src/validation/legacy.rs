//! The JSON-walking forms of the shared checks, for the kinds whose checks still read JSON.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::validation::Errors;

fn typed<T: serde::de::DeserializeOwned>(value: Option<&Value>) -> Option<T> {
    value.filter(|v| !v.is_null()).and_then(|v| serde_json::from_value(v.clone()).ok())
}

pub(crate) fn labels_value(map: Option<&Value>, path: &str, e: &mut Errors) {
    let map: Option<BTreeMap<String, String>> = typed(map);
    super::labels(map.as_ref(), path, e)
}

pub(crate) fn go_strings_value(type_name: &str, list: Option<&Value>) -> String {
    let list: Option<Vec<String>> = typed(list);
    super::go_strings(type_name, list.as_deref())
}
