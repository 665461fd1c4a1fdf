//! Label selectors (`ValidateLabelSelector`) and their match of a pod template's labels.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{go_label_selector, go_string_map, labels, same, Errors};

/// A workload's `spec.selector` (Deployments, ReplicaSets, StatefulSets): required, valid, and
/// not empty (`empty selector is invalid for {word}`). The selector if given, for the checks
/// that follow.
pub(crate) fn required_selector<'a>(
    selector: Option<&'a LabelSelector>,
    word: &str,
    e: &mut Errors,
) -> Option<&'a LabelSelector> {
    match selector {
        None => e.required("spec.selector", ""),
        Some(sel) => {
            label_selector(Some(sel), "spec.selector", e);
            if Selector::of(Some(sel)).is_empty() {
                e.invalid(
                    "spec.selector",
                    &go_label_selector(Some(sel)),
                    &format!("empty selector is invalid for {word}"),
                );
            }
        }
    }
    selector
}

/// The values of a selector requirement (none if unset).
fn values(r: &LabelSelectorRequirement) -> &[String] {
    r.values.as_deref().unwrap_or_default()
}

/// `ValidateLabelSelector` (strict: label values must be valid).
pub(crate) fn label_selector(selector: Option<&LabelSelector>, path: &str, e: &mut Errors) {
    let Some(selector) = selector else { return };
    labels(selector.match_labels.as_ref(), &format!("{path}.matchLabels"), e);
    for (i, r) in selector.match_expressions.iter().flatten().enumerate() {
        let rpath = format!("{path}.matchExpressions[{i}]");
        let values = values(r);
        match r.operator.as_str() {
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
        e.invalid_each(&format!("{rpath}.key"), &r.key, names::qualified_name(&r.key));
        for (j, v) in values.iter().enumerate() {
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
    Some(&'a LabelSelector),
    /// A selector that does not convert (a bad operator, key or value).
    Invalid,
}

impl<'a> Selector<'a> {
    pub(crate) fn of(selector: Option<&'a LabelSelector>) -> Selector<'a> {
        let Some(selector) = selector else { return Selector::Nothing };
        let match_labels = selector.match_labels.as_ref();
        let expressions = selector.match_expressions.as_deref().unwrap_or_default();
        if match_labels.is_none_or(BTreeMap::is_empty) && expressions.is_empty() {
            return Selector::Everything;
        }
        let label_ok = |k: &str, v: &str| {
            names::qualified_name(k).is_empty() && names::label_value(v).is_empty()
        };
        let labels_ok = match_labels.into_iter().flatten().all(|(k, v)| label_ok(k, v));
        let expressions_ok = expressions.iter().all(|r| {
            let values = values(r);
            let values_ok = values.iter().all(|v| names::label_value(v).is_empty());
            let shape = match r.operator.as_str() {
                "In" | "NotIn" => !values.is_empty(),
                "Exists" | "DoesNotExist" => values.is_empty(),
                _ => false,
            };
            shape && values_ok && names::qualified_name(&r.key).is_empty()
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

    pub(crate) fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        match self {
            Selector::Nothing | Selector::Invalid => false,
            Selector::Everything => true,
            Selector::Some(selector) => {
                let by_label =
                    selector.match_labels.iter().flatten().all(|(k, v)| get(k) == Some(v));
                let by_expression = selector.match_expressions.iter().flatten().all(|r| {
                    let value = get(&r.key);
                    let listed = |v: &String| values(r).contains(v);
                    match r.operator.as_str() {
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

/// The labels of a pod template (none if unset).
pub(crate) fn template_labels(
    template: Option<&PodTemplateSpec>,
) -> Option<&BTreeMap<String, String>> {
    template.and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.as_ref())
}

/// The template labels check of the workload kinds.
pub(crate) fn template_matches(
    selector: &Selector<'_>,
    template: Option<&PodTemplateSpec>,
    e: &mut Errors,
) {
    let labels = template_labels(template);
    if !selector.matches(labels) {
        e.invalid(
            "spec.template.metadata.labels",
            &go_string_map(labels),
            "`selector` does not match template `labels`",
        );
    }
}

/// Whether two selectors are equal as Go's `equality.Semantic` sees them: unset and empty
/// labels, requirements and values are the same.
pub(crate) fn same_selector(a: Option<&LabelSelector>, b: Option<&LabelSelector>) -> bool {
    let zero = LabelSelector::default();
    let (a, b) = (a.unwrap_or(&zero), b.unwrap_or(&zero));
    let x = a.match_expressions.as_deref().unwrap_or_default();
    let y = b.match_expressions.as_deref().unwrap_or_default();
    same(a.match_labels.as_ref(), b.match_labels.as_ref())
        && x.len() == y.len()
        && x.iter()
            .zip(y)
            .all(|(p, q)| p.key == q.key && p.operator == q.operator && values(p) == values(q))
}

/// A workload's selector may not change (`ValidateDeploymentUpdate` and its kin).
pub(crate) fn immutable_selector(
    old: Option<&LabelSelector>,
    new: Option<&LabelSelector>,
    e: &mut Errors,
) {
    if !same_selector(old, new) {
        e.invalid("spec.selector", &go_label_selector(new), "field is immutable");
    }
}
