//! DaemonSets (`daemonsets` in `apps/v1`): how the API server serves them.

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::registry::form::Workload;
use crate::registry::{served, Strategy, Validate, ALL, STATUS};
use crate::resource::ResourceType;
use crate::validation::{
    always_restarts, at_most_100_percent, go_label_selector, immutable_selector, int_or_percent,
    int_or_percent_value, int_or_string, label_selector, pod_quantities, pod_template,
    template_matches, Errors, Selector,
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

impl Validate for DaemonSets {
    type Object = Workload<DaemonSet>;

    fn validate(&self, object: &Workload<DaemonSet>, e: &mut Errors) {
        daemon_set(object.spec.as_ref(), object.selector(), e);
    }

    fn validate_update(
        &self,
        old: &Workload<DaemonSet>,
        new: &Workload<DaemonSet>,
        e: &mut Errors,
    ) {
        immutable_selector(old.selector(), new.selector(), e);
    }

    fn quantities<'a>(&self, object: &'a Workload<DaemonSet>, found: &mut Vec<&'a Quantity>) {
        let template = object.spec.as_ref().map(|s| &s.template);
        pod_quantities(template.and_then(|t| t.spec.as_ref()), found);
    }
}

impl Strategy for DaemonSets {
    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(
            object,
            json!({"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0}),
        );
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
fn daemon_set(spec: Option<&DaemonSetSpec>, raw: Option<&LabelSelector>, e: &mut Errors) {
    let zero = DaemonSetSpec::default();
    let spec = spec.unwrap_or(&zero);
    label_selector(raw, "spec.selector", e);
    let selector = Selector::of(raw);
    let template = Some(&spec.template);
    if !matches!(selector, Selector::Invalid) {
        template_matches(&selector, template, e);
    }
    if raw.is_some() && selector.is_empty() {
        e.invalid(
            "spec.selector",
            &go_label_selector(raw),
            "empty selector is invalid for daemonset",
        );
    }
    pod_template(template, "spec.template", e);
    always_restarts(template, "DaemonSet", e);
    e.nonnegative(spec.min_ready_seconds, "spec.minReadySeconds");
    let strategy = spec.update_strategy.as_ref();
    match strategy.and_then(|s| s.type_.as_deref()).unwrap_or_default() {
        "OnDelete" => {}
        "RollingUpdate" => match strategy.and_then(|s| s.rolling_update.as_ref()) {
            None => e.required("spec.updateStrategy.rollingUpdate", ""),
            Some(rolling) => {
                let path = "spec.updateStrategy.rollingUpdate";
                let unavailable = rolling.max_unavailable.as_ref();
                let surge = rolling.max_surge.as_ref();
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
    e.nonnegative(spec.revision_history_limit, "spec.revisionHistoryLimit");
}
