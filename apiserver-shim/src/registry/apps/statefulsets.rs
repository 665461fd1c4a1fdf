//! StatefulSets (`statefulsets` in `apps/v1`): how the API server serves them.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::object_names::NameRule;
use crate::registry::form::Workload;
use crate::registry::{served, Strategy, Validate, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::validation::{
    always_restarts, annotations, compact, go_label_selector, labels, pod_quantities,
    required_selector, same, same_selector, template_matches, Errors, Selector,
};

/// The `statefulsets` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "StatefulSet",
    "statefulsets",
    "statefulset",
    true,
    &["sts"],
    ALL,
    STATUS_SCALE,
    &StatefulSets,
);

/// The strategy for StatefulSets.
#[derive(Debug)]
pub struct StatefulSets;

impl Validate for StatefulSets {
    type Object = Workload<StatefulSet>;

    fn validate(&self, object: &Workload<StatefulSet>, e: &mut Errors) {
        stateful_set(object.spec.as_ref(), object.selector(), e);
    }

    fn validate_update(
        &self,
        old: &Workload<StatefulSet>,
        new: &Workload<StatefulSet>,
        e: &mut Errors,
    ) {
        let selectors_differ = !same_selector(old.selector(), new.selector());
        let zero = StatefulSetSpec::default();
        let old = old.spec.as_ref().unwrap_or(&zero);
        let new = new.spec.as_ref().unwrap_or(&zero);
        // What may change: replicas, ordinals, template, updateStrategy,
        // persistentVolumeClaimRetentionPolicy and minReadySeconds.
        let changed = !same(old.pod_management_policy.as_ref(), new.pod_management_policy.as_ref())
            || old.revision_history_limit != new.revision_history_limit
            || selectors_differ
            || !same(old.service_name.as_ref(), new.service_name.as_ref())
            || !same(old.volume_claim_templates.as_ref(), new.volume_claim_templates.as_ref());
        if changed {
            e.forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
                 'minReadySeconds' are forbidden",
            );
        }
    }

    fn quantities<'a>(&self, object: &'a Workload<StatefulSet>, found: &mut Vec<&'a Quantity>) {
        let Some(spec) = object.spec.as_ref() else { return };
        pod_quantities(spec.template.spec.as_ref(), found);
        let claims = spec.volume_claim_templates.iter().flatten();
        for resources in claims.filter_map(|c| c.spec.as_ref()?.resources.as_ref()) {
            found.extend(resources.requests.iter().flat_map(BTreeMap::values));
            found.extend(resources.limits.iter().flat_map(BTreeMap::values));
        }
    }
}

impl Strategy for StatefulSets {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({"availableReplicas": 0, "replicas": 0}));
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
            if spec.get("updateStrategy").is_none_or(Value::is_null) {
                spec.insert("updateStrategy".into(), json!({}));
            }
            if let Some(strategy) = spec.get_mut("updateStrategy").and_then(Value::as_object_mut) {
                if strategy.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
                    strategy.insert("type".into(), json!("RollingUpdate"));
                    set_default(strategy, "rollingUpdate", json!({}));
                }
                if strategy.get("type") == Some(&json!("RollingUpdate")) {
                    if let Some(rolling) =
                        strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                    {
                        set_default(rolling, "partition", json!(0));
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

/// `ValidateStatefulSetSpec`. (kube-apiserver does not validate a StatefulSet's pod spec, only
/// its template's labels and annotations.)
fn stateful_set(spec: Option<&StatefulSetSpec>, selector: Option<&LabelSelector>, e: &mut Errors) {
    let zero = StatefulSetSpec::default();
    let spec = spec.unwrap_or(&zero);
    match spec.pod_management_policy.as_deref().unwrap_or_default() {
        "OrderedReady" | "Parallel" => {}
        "" => e.required("spec.podManagementPolicy", ""),
        other => e.invalid(
            "spec.podManagementPolicy",
            &quote(other),
            "must be 'OrderedReady' or 'Parallel'",
        ),
    }
    let strategy = spec.update_strategy.as_ref();
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    match strategy.and_then(|s| s.type_.as_deref()).unwrap_or_default() {
        "" => e.required("spec.updateStrategy", ""),
        "OnDelete" => {
            if let Some(rolling) = rolling {
                e.invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &compact(rolling),
                    "only allowed for updateStrategy 'RollingUpdate'",
                );
            }
        }
        "RollingUpdate" => e.nonnegative(rolling.and_then(|r| r.partition), "spec.updateStrategy.rollingUpdate.partition"),
        other => e.invalid(
            "spec.updateStrategy",
            &format!(
                "apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateStatefulSetStrategy)(nil)}}",
                quote(other)
            ),
            "must be 'RollingUpdate' or 'OnDelete'",
        ),
    }
    if let Some(retention) = spec.persistent_volume_claim_retention_policy.as_ref() {
        let policies =
            [("whenDeleted", &retention.when_deleted), ("whenScaled", &retention.when_scaled)];
        for (key, policy) in policies {
            let policy = policy.as_deref().unwrap_or_default();
            if !matches!(policy, "Retain" | "Delete") {
                e.not_supported(
                    &format!("spec.persistentVolumeClaimRetentionPolicy.{key}"),
                    &quote(policy),
                    &["Retain", "Delete"],
                );
            }
        }
    }
    e.nonnegative(spec.replicas, "spec.replicas");
    e.nonnegative(spec.min_ready_seconds, "spec.minReadySeconds");
    e.nonnegative(spec.ordinals.as_ref().and_then(|o| o.start), "spec.ordinals.start");
    let given = required_selector(selector, "statefulset", e);
    let selector = Selector::of(given);
    let template = Some(&spec.template);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector(given), "");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, template, e);
        }
        let meta = spec.template.metadata.as_ref();
        labels(meta.and_then(|m| m.labels.as_ref()), "spec.template.labels", e);
        annotations(meta.and_then(|m| m.annotations.as_ref()), "spec.template.annotations", e);
    }
    always_restarts(template, "StatefulSet", e);
}
