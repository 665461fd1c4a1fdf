//! Label selectors (`ValidateLabelSelector`) and their match of a pod template's labels.

use serde_json::{Map, Value};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{
    at, changed, field, go_label_selector_value, go_string_map_value, items, labels_value, map_of,
    text, Errors,
};

/// A workload's `spec.selector` (Deployments, ReplicaSets, StatefulSets): required, valid, and
/// not empty (`empty selector is invalid for {word}`). The selector as written, for the checks
/// that follow.
pub(crate) fn required_selector<'a>(
    spec: &'a Value,
    word: &str,
    e: &mut Errors,
) -> Option<&'a Value> {
    let raw = field(spec, "selector");
    match raw {
        None => e.required("spec.selector", ""),
        Some(sel) => {
            label_selector(Some(sel), "spec.selector", e);
            if Selector::of(Some(sel)).is_empty() {
                e.invalid(
                    "spec.selector",
                    &go_label_selector_value(Some(sel)),
                    &format!("empty selector is invalid for {word}"),
                );
            }
        }
    }
    raw
}

/// `ValidateLabelSelector` (strict: label values must be valid).
pub(crate) fn label_selector(selector: Option<&Value>, path: &str, e: &mut Errors) {
    let Some(selector) = selector.filter(|s| !s.is_null()) else { return };
    labels_value(selector.get("matchLabels"), &format!("{path}.matchLabels"), e);
    for (i, r) in items(selector, "matchExpressions").iter().enumerate() {
        let rpath = format!("{path}.matchExpressions[{i}]");
        let values = items(r, "values");
        match text(r, "operator") {
            "In" | "NotIn" if values.is_empty() => e.required(
                &format!("{rpath}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => e.forbidden(
                &format!("{rpath}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => {
                e.invalid(&format!("{rpath}.operator"), &quote(op), "not a valid selector operator")
            }
        }
        let key = text(r, "key");
        e.invalid_each(&format!("{rpath}.key"), key, names::qualified_name(key));
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or_default();
            e.invalid_each(&format!("{rpath}.values[{j}]"), v, names::label_value(v));
        }
    }
}

/// What `metav1.LabelSelectorAsSelector` makes of a selector.
pub(crate) enum Selector<'a> {
    /// No selector: matches nothing.
    Nothing,
    /// An empty selector: matches everything.
    Everything,
    /// A selector with requirements.
    Some(&'a Value),
    /// A selector that does not convert (a bad operator, key or value).
    Invalid,
}

impl<'a> Selector<'a> {
    pub(crate) fn of(selector: Option<&'a Value>) -> Selector<'a> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else { return Selector::Nothing };
        let match_labels = map_of(selector, "matchLabels");
        let expressions = items(selector, "matchExpressions");
        if match_labels.is_none_or(Map::is_empty) && expressions.is_empty() {
            return Selector::Everything;
        }
        let label_ok = |k: &str, v: &str| {
            names::qualified_name(k).is_empty() && names::label_value(v).is_empty()
        };
        let labels_ok = match_labels
            .into_iter()
            .flatten()
            .all(|(k, v)| label_ok(k, v.as_str().unwrap_or_default()));
        let expressions_ok = expressions.iter().all(|r| {
            let values = items(r, "values");
            let values_ok = values
                .iter()
                .all(|v| names::label_value(v.as_str().unwrap_or_default()).is_empty());
            let shape = match text(r, "operator") {
                "In" | "NotIn" => !values.is_empty(),
                "Exists" | "DoesNotExist" => values.is_empty(),
                _ => false,
            };
            shape && values_ok && names::qualified_name(text(r, "key")).is_empty()
        });
        if labels_ok && expressions_ok {
            Selector::Some(selector)
        } else {
            Selector::Invalid
        }
    }

    /// `selector.Empty()`.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    pub(crate) fn matches(&self, labels: Option<&Value>) -> bool {
        let labels = labels.and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        match self {
            Selector::Nothing | Selector::Invalid => false,
            Selector::Everything => true,
            Selector::Some(selector) => {
                let by_label = map_of(selector, "matchLabels")
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| get(k) == v.as_str());
                let by_expression = items(selector, "matchExpressions").iter().all(|r| {
                    let value = get(text(r, "key"));
                    let listed = |v: &str| items(r, "values").iter().any(|x| x.as_str() == Some(v));
                    match text(r, "operator") {
                        "In" => value.is_some_and(listed),
                        "NotIn" => !value.is_some_and(listed),
                        "Exists" => value.is_some(),
                        _ => value.is_none(),
                    }
                });
                by_label && by_expression
            }
        }
    }
}

/// The template labels check of the workload kinds.
pub(crate) fn template_matches(selector: &Selector<'_>, spec: &Value, e: &mut Errors) {
    let labels = at(at(spec, "template"), "metadata").get("labels").filter(|v| !v.is_null());
    if !selector.matches(labels) {
        e.invalid(
            "spec.template.metadata.labels",
            &go_string_map_value(labels),
            "`selector` does not match template `labels`",
        );
    }
}

/// A workload's selector may not change (`ValidateDeploymentUpdate` and its kin).
pub(crate) fn immutable_selector(old_spec: &Value, new_spec: &Value, e: &mut Errors) {
    if changed(old_spec, new_spec, "selector") {
        e.invalid(
            "spec.selector",
            &go_label_selector_value(field(new_spec, "selector")),
            "field is immutable",
        );
    }
}
