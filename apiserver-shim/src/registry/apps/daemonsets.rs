//! DaemonSets (`daemonsets` in `apps/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default};
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;
use crate::validation::{
    always_restarts, at, at_most_100_percent, field, go_label_selector_value, immutable_selector,
    int_or_percent, int_or_percent_value, int_or_string, label_selector, pod_template,
    template_matches, text, Errors, Selector,
};

/// The `daemonsets` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "DaemonSet",
    "daemonsets",
    "daemonset",
    true,
    &["ds"],
    ALL,
    STATUS,
    &DaemonSets,
);

/// The strategy for DaemonSets.
#[derive(Debug)]
pub struct DaemonSets;

impl crate::registry::form::Validate for DaemonSets {
    type Object = k8s_openapi::api::apps::v1::DaemonSet;
}

impl Strategy for DaemonSets {
    fn validate(&self, object: &Value, e: &mut Errors) {
        daemon_set(at(object, "spec"), e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        immutable_selector(at(old, "spec"), at(new, "spec"), e);
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "revisionHistoryLimit", json!(10));
            if spec.get("updateStrategy").is_none_or(Value::is_null) {
                spec.insert("updateStrategy".into(), json!({}));
            }
            if let Some(strategy) = spec.get_mut("updateStrategy").and_then(Value::as_object_mut) {
                set_default(strategy, "type", json!("RollingUpdate"));
                if strategy.get("type") == Some(&json!("RollingUpdate")) {
                    set_default(strategy, "rollingUpdate", json!({}));
                    if let Some(rolling) =
                        strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                    {
                        set_default(rolling, "maxUnavailable", json!(1));
                        set_default(rolling, "maxSurge", json!(0));
                    }
                }
            }
        }
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }
}

/// `ValidateDaemonSetSpec`.
fn daemon_set(spec: &Value, e: &mut Errors) {
    let raw = field(spec, "selector");
    label_selector(raw, "spec.selector", e);
    let selector = Selector::of(raw);
    if !matches!(selector, Selector::Invalid) {
        template_matches(&selector, spec, e);
    }
    if raw.is_some() && selector.is_empty() {
        e.invalid(
            "spec.selector",
            &go_label_selector_value(raw),
            "empty selector is invalid for daemonset",
        );
    }
    pod_template(at(spec, "template"), "spec.template", e);
    always_restarts(spec, "DaemonSet", e);
    e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    let strategy = at(spec, "updateStrategy");
    match text(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match field(strategy, "rollingUpdate") {
            None => e.required("spec.updateStrategy.rollingUpdate", ""),
            Some(rolling) => {
                let path = "spec.updateStrategy.rollingUpdate";
                let (unavailable, surge) = (rolling.get("maxUnavailable"), rolling.get("maxSurge"));
                int_or_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                int_or_percent(surge, &format!("{path}.maxSurge"), e);
                at_most_100_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                at_most_100_percent(surge, &format!("{path}.maxSurge"), e);
                match (int_or_percent_value(unavailable) != 0, int_or_percent_value(surge) != 0) {
                    (true, true) => e.invalid(
                        &format!("{path}.maxSurge"),
                        &int_or_string(surge),
                        "may not be set when maxUnavailable is non-zero",
                    ),
                    (false, false) => e.required(
                        &format!("{path}.maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ),
                    _ => {}
                }
            }
        },
        other => e.not_supported(
            "spec.updateStrategy",
            &format!(
                "apps.DaemonSetUpdateStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}}",
                quote(other)
            ),
            &["RollingUpdate", "OnDelete"],
        ),
    }
    e.nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit");
}
