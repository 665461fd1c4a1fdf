//! StatefulSets (`statefulsets` in `apps/v1`): how the API server serves them.

use serde_json::{json, Value};
use std::collections::BTreeSet;

use crate::defaults::{default_template, object_at, set_default};
use crate::object::go_quote as quote;
use crate::object_names::NameRule;
use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;
use crate::validation::{
    always_restarts, annotations_value, at, changed, field, go_label_selector_value, items,
    labels_value, object_keys, required_selector, template_matches, text, Errors, Selector,
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

impl crate::registry::form::Validate for StatefulSets {
    type Object = k8s_openapi::api::apps::v1::StatefulSet;
}

impl Strategy for StatefulSets {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        stateful_set(at(object, "spec"), e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        let (old_spec, new_spec) = (at(old, "spec"), at(new, "spec"));
        let mutable = [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ];
        let keys: BTreeSet<&String> = object_keys(old_spec).chain(object_keys(new_spec)).collect();
        if keys
            .iter()
            .any(|k| !mutable.contains(&k.as_str()) && changed(old_spec, new_spec, k.as_str()))
        {
            e.forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
                 'minReadySeconds' are forbidden",
            );
        }
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn quantities<'a>(&self, object: &'a Value, lists: &mut Vec<&'a Value>) {
        let spec = at(object, "spec");
        for claim in items(spec, "volumeClaimTemplates") {
            lists.push(at(at(at(claim, "spec"), "resources"), "requests"));
            lists.push(at(at(at(claim, "spec"), "resources"), "limits"));
        }
    }

    fn defaults(&self, object: &mut Value) {
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
fn stateful_set(spec: &Value, e: &mut Errors) {
    match text(spec, "podManagementPolicy") {
        "OrderedReady" | "Parallel" => {}
        "" => e.required("spec.podManagementPolicy", ""),
        other => e.invalid(
            "spec.podManagementPolicy",
            &quote(other),
            "must be 'OrderedReady' or 'Parallel'",
        ),
    }
    let strategy = at(spec, "updateStrategy");
    match text(strategy, "type") {
        "" => e.required("spec.updateStrategy", ""),
        "OnDelete" => {
            if let Some(rolling) = field(strategy, "rollingUpdate") {
                e.invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &rolling.to_string(),
                    "only allowed for updateStrategy 'RollingUpdate'",
                );
            }
        }
        "RollingUpdate" => e.nonnegative(
            at(strategy, "rollingUpdate"),
            "partition",
            "spec.updateStrategy.rollingUpdate.partition",
        ),
        other => e.invalid(
            "spec.updateStrategy",
            &format!(
                "apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateStatefulSetStrategy)(nil)}}",
                quote(other)
            ),
            "must be 'RollingUpdate' or 'OnDelete'",
        ),
    }
    let retention = at(spec, "persistentVolumeClaimRetentionPolicy");
    if !retention.is_null() {
        for key in ["whenDeleted", "whenScaled"] {
            let policy = text(retention, key);
            if !matches!(policy, "Retain" | "Delete") {
                e.not_supported(
                    &format!("spec.persistentVolumeClaimRetentionPolicy.{key}"),
                    &quote(policy),
                    &["Retain", "Delete"],
                );
            }
        }
    }
    e.nonnegative(spec, "replicas", "spec.replicas");
    e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    e.nonnegative(at(spec, "ordinals"), "start", "spec.ordinals.start");
    let raw = required_selector(spec, "statefulset", e);
    let selector = Selector::of(raw);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector_value(raw), "");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, spec, e);
        }
        let meta = at(at(spec, "template"), "metadata");
        labels_value(meta.get("labels"), "spec.template.labels", e);
        annotations_value(meta.get("annotations"), "spec.template.annotations", e);
    }
    always_restarts(spec, "StatefulSet", e);
}
