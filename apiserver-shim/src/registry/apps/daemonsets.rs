//! DaemonSets (`daemonsets` in `apps/v1`): how the API server serves them.

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::object::metadata_mut;
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

/// The annotation in which `apps/v1` shows a DaemonSet's template generation (the internal
/// `spec.templateGeneration`): 1 on create, one more whenever the template changes. The
/// DaemonSet controller labels its pods with it (`pod-template-generation`).
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

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

    /// `PrepareForCreate`: the template generation is at least 1.
    fn create_defaults(&self, object: &mut Value) {
        let given = template_generation(object).filter(|g| *g >= 1).unwrap_or(1);
        set_template_generation(object, given);
    }

    /// `PrepareForUpdate`: an update may not set the template generation; a new template moves
    /// it on by one.
    fn prepare_update(&self, old: &Value, new: &mut Value) {
        let kept = template_generation(old).unwrap_or(0);
        let template = |o: &Value| o.pointer("/spec/template").cloned();
        let generation = if template(old) == template(new) { kept } else { kept + 1 };
        set_template_generation(new, generation);
    }
}

/// The template generation `object` shows, if its annotation parses.
fn template_generation(object: &Value) -> Option<i64> {
    object.pointer("/metadata/annotations")?.get(TEMPLATE_GENERATION)?.as_str()?.parse().ok()
}

/// Show `generation` in `object`'s annotation (none for 0, as Kubernetes' conversion writes it).
fn set_template_generation(object: &mut Value, generation: i64) {
    let meta = metadata_mut(object);
    if generation == 0 {
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(TEMPLATE_GENERATION);
        }
        return;
    }
    if !meta.get("annotations").is_some_and(Value::is_object) {
        meta.insert("annotations".into(), json!({}));
    }
    if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.insert(TEMPLATE_GENERATION.into(), generation.to_string().into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::{on_create, on_update};

    fn generation(object: &Value) -> &Value {
        &object["metadata"]["annotations"][TEMPLATE_GENERATION]
    }

    #[test]
    fn the_template_generation_starts_at_one_and_follows_template_changes_only() {
        let mut ds = json!({"metadata": {"name": "d", "namespace": "n"}, "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        on_create(&TYPE, &mut ds);
        assert_eq!(*generation(&ds), "1");

        let mut same = ds.clone();
        same["spec"]["minReadySeconds"] = json!(5);
        same["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("7");
        on_update(&TYPE, &ds, &mut same);
        assert_eq!(*generation(&same), "1", "an update may not set it");

        let mut changed = same.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        on_update(&TYPE, &same, &mut changed);
        assert_eq!(*generation(&changed), "2");

        let mut given = ds.clone();
        given["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("4");
        on_create(&TYPE, &mut given);
        assert_eq!(*generation(&given), "4", "a create keeps a generation of 1 or more");
    }
}
