//! The JSON-walking forms of the shared checks, for the kinds whose checks still read JSON.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use crate::validation::Errors;

fn typed<T: serde::de::DeserializeOwned>(value: Option<&Value>) -> Option<T> {
    value.filter(|v| !v.is_null()).and_then(|v| serde_json::from_value(v.clone()).ok())
}

pub(crate) fn labels_value(map: Option<&Value>, path: &str, e: &mut Errors) {
    let map: Option<BTreeMap<String, String>> = typed(map);
    super::labels(map.as_ref(), path, e)
}

pub(crate) fn annotations_value(map: Option<&Value>, path: &str, e: &mut Errors) {
    let map: Option<BTreeMap<String, String>> = typed(map);
    super::annotations(map.as_ref(), path, e)
}

pub(crate) fn go_string_map_value(map: Option<&Value>) -> String {
    let map: Option<BTreeMap<String, String>> = typed(map);
    super::go_string_map(map.as_ref())
}

pub(crate) fn go_label_selector_value(selector: Option<&Value>) -> String {
    let selector: Option<LabelSelector> = typed(selector);
    super::go_label_selector(selector.as_ref())
}
