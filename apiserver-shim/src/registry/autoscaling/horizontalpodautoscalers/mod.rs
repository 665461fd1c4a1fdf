//! HorizontalPodAutoscalers (`horizontalpodautoscalers` in `autoscaling/v2`, and in
//! `autoscaling/v1`): how the API server serves them.
//!
//! They are stored in v2, the preferred version. v1 is a view of the same objects: every read
//! converts the stored object to v1, every write converts the v1 object back
//! ([`conversion`]), and its defaults and checks are v2's on the converted object, as
//! kube-apiserver checks its internal form whichever version was written.
//!
//! The objects are stored and checked; nothing scales on them yet (there is no metrics source).

pub mod conversion;
mod validation;

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod tests;

use k8s_openapi::api::autoscaling::{v1, v2};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::generate::SchemaGenerator;
use serde_json::{json, Value};

use crate::api::Api;
use crate::defaults::set_default;
use crate::openapi::KindNames;
use crate::registry::form::{self, DecodeError, Form};
use crate::registry::{served, Strategy, Validate, ALL, STATUS};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::table::{age_cell, col, definitions, name_cell, str_at, AGE, NAME};
use crate::validation::Errors;

/// The `horizontalpodautoscalers` resource type in `autoscaling/v2`, where they are stored.
pub const TYPE: ResourceType = served(
    "autoscaling",
    "v2",
    "HorizontalPodAutoscaler",
    "horizontalpodautoscalers",
    "horizontalpodautoscaler",
    true,
    &["hpa"],
    ALL,
    STATUS,
    &HorizontalPodAutoscalers,
);

/// The `horizontalpodautoscalers` resource type in `autoscaling/v1`: the same objects, converted.
pub const V1: ResourceType = served(
    "autoscaling",
    "v1",
    "HorizontalPodAutoscaler",
    "horizontalpodautoscalers",
    "horizontalpodautoscaler",
    true,
    &["hpa"],
    ALL,
    STATUS,
    &HorizontalPodAutoscalersV1,
);

/// The strategy for HorizontalPodAutoscalers in `autoscaling/v2`.
#[derive(Debug)]
pub struct HorizontalPodAutoscalers;

impl Validate for HorizontalPodAutoscalers {
    type Object = v2::HorizontalPodAutoscaler;

    fn validate(&self, object: &v2::HorizontalPodAutoscaler, e: &mut Errors) {
        validation::autoscaler(object, e);
    }

    fn validate_update(
        &self,
        _old: &v2::HorizontalPodAutoscaler,
        new: &v2::HorizontalPodAutoscaler,
        e: &mut Errors,
    ) {
        validation::status(new, e);
    }

    fn quantities<'a>(
        &self,
        object: &'a v2::HorizontalPodAutoscaler,
        found: &mut Vec<&'a Quantity>,
    ) {
        validation::quantities(object, found);
    }
}

impl Strategy for HorizontalPodAutoscalers {
    fn defaults(&self, object: &mut Value) {
        v2_defaults(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn create_defaults(&self, object: &mut Value) {
        drop_disabled_fields(object, None);
    }

    fn prepare_update(&self, old: &Value, new: &mut Value) {
        drop_disabled_fields(new, Some(old));
    }

    fn has_generation(&self, _rt: &ResourceType) -> bool {
        false
    }

    fn before_store(
        &self,
        _api: &Api,
        _name: &str,
        _old: Option<&Value>,
        new: &mut Value,
        _status_only: bool,
    ) -> ApiResult<()> {
        // v2 carries no round-trip annotations: they are v1's.
        if let Some(metadata) = new.get_mut("metadata") {
            conversion::drop_round_trip(metadata);
        }
        go_status(new);
        Ok(())
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        columns()
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        cells(object)
    }
}

/// The strategy for HorizontalPodAutoscalers in `autoscaling/v1`: v2's on the converted object.
#[derive(Debug)]
pub struct HorizontalPodAutoscalersV1;

/// A v1 autoscaler as its checks read it: converted to v2.
#[derive(Debug)]
pub struct AsV2(pub v2::HorizontalPodAutoscaler);

impl Form for AsV2 {
    fn decode(value: &Value) -> Result<AsV2, DecodeError> {
        // What v1 cannot decode is refused in v1's words; the rest is checked converted.
        form::decode::<v1::HorizontalPodAutoscaler>(value)?;
        form::decode(&conversion::to_v2(value)).map(AsV2)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn names() -> Option<KindNames> {
        <v1::HorizontalPodAutoscaler as Form>::names()
    }

    fn add_schemas(generator: &mut SchemaGenerator) -> Option<Value> {
        <v1::HorizontalPodAutoscaler as Form>::add_schemas(generator)
    }
}

impl Validate for HorizontalPodAutoscalersV1 {
    type Object = AsV2;

    fn validate(&self, object: &AsV2, e: &mut Errors) {
        validation::autoscaler(&object.0, e);
    }

    fn validate_update(&self, _old: &AsV2, new: &AsV2, e: &mut Errors) {
        validation::status(&new.0, e);
    }

    fn quantities<'a>(&self, object: &'a AsV2, found: &mut Vec<&'a Quantity>) {
        validation::quantities(&object.0, found);
    }
}

impl Strategy for HorizontalPodAutoscalersV1 {
    fn is_storage_version(&self) -> bool {
        false
    }

    fn convert_to_storage(&self, object: &mut Value) {
        let mut stored = conversion::to_v2(object);
        v2_defaults(&mut stored);
        drop_disabled_fields(&mut stored, None);
        go_status(&mut stored);
        *object = stored;
    }

    fn convert_from_storage(&self, object: &mut Value) {
        *object = conversion::to_v1(object);
    }

    /// `SetDefaults_HorizontalPodAutoscaler` of v1 (the metric default is the conversion's).
    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
            set_default(spec, "minReplicas", json!(1));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn has_generation(&self, _rt: &ResourceType) -> bool {
        false
    }

    /// The status is the stored one, and so are the annotations that carry the rest of it.
    fn prepare_main_update(&self, _rt: &ResourceType, old: &Value, new: &mut Value) {
        if let Some(root) = new.as_object_mut() {
            match old.get("status") {
                Some(status) => root.insert("status".into(), status.clone()),
                None => root.remove("status"),
            };
        }
        copy_annotations(old, new, &[conversion::CURRENT_METRICS, conversion::CONDITIONS]);
    }

    /// The spec is the stored one, and so are the annotations that carry the rest of it.
    fn prepare_status_update(&self, old: &Value, sent: Value) -> Value {
        let mut merged = HorizontalPodAutoscalers.prepare_status_update(old, sent.clone());
        copy_annotations(
            &sent,
            &mut merged,
            &[conversion::CURRENT_METRICS, conversion::CONDITIONS],
        );
        merged
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        columns()
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        cells(&conversion::to_v2(object))
    }
}

/// Make `to`'s annotations `keys` what they are on `from` (removed where `from` has none).
fn copy_annotations(from: &Value, to: &mut Value, keys: &[&str]) {
    let source = from.pointer("/metadata/annotations").and_then(Value::as_object);
    let Some(meta) = to.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    let Some(annotations) = annotations.as_object_mut() else { return };
    for key in keys {
        match source.and_then(|s| s.get(*key)) {
            Some(value) => annotations.insert((*key).into(), value.clone()),
            None => annotations.remove(*key),
        };
    }
    if annotations.is_empty() {
        meta.remove("annotations");
    }
}

/// `SetDefaults_HorizontalPodAutoscaler` of v2: one replica at least, CPU at 80% when no metric
/// is given, and every scaling rule filled in when a behavior is.
fn v2_defaults(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else { return };
    set_default(spec, "minReplicas", json!(1));
    let no_metrics = spec.get("metrics").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if no_metrics {
        let cpu = conversion::cpu_utilization(conversion::DEFAULT_CPU_UTILIZATION);
        spec.insert("metrics".into(), json!([cpu]));
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let scale_up = json!({
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        });
        let scale_down = json!({
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        });
        for (field, defaults) in [("scaleUp", scale_up), ("scaleDown", scale_down)] {
            let rules = scaling_rules(behavior.get(field), defaults);
            behavior.insert(field.into(), rules);
        }
    }
}

/// `GenerateHPAScaleUpRules` / `GenerateHPAScaleDownRules`: the defaults, with what `given`
/// sets.
fn scaling_rules(given: Option<&Value>, mut defaults: Value) -> Value {
    if let (Some(given), Some(rules)) = (given.and_then(Value::as_object), defaults.as_object_mut())
    {
        for field in ["selectPolicy", "stabilizationWindowSeconds", "policies", "tolerance"] {
            if let Some(value) = given.get(field).filter(|v| !v.is_null()) {
                rules.insert(field.into(), value.clone());
            }
        }
    }
    defaults
}

/// `dropDisabledFields`: the scaling rules' `tolerance` goes while the
/// `HPAConfigurableTolerance` feature gate is off (as it is in Kubernetes 1.33), unless the
/// stored object already has one.
fn drop_disabled_fields(object: &mut Value, old: Option<&Value>) {
    let rules = ["/spec/behavior/scaleUp/tolerance", "/spec/behavior/scaleDown/tolerance"];
    let in_use = old.is_some_and(|old| {
        rules.iter().any(|pointer| old.pointer(pointer).is_some_and(|t| !t.is_null()))
    });
    if in_use {
        return;
    }
    for field in ["scaleUp", "scaleDown"] {
        if let Some(rules) =
            object.pointer_mut(&format!("/spec/behavior/{field}")).and_then(Value::as_object_mut)
        {
            rules.remove("tolerance");
        }
    }
}

/// The status as Go writes v2's: always one, `desiredReplicas` and `currentMetrics` (`null`
/// when there are none) always, `currentReplicas` and `conditions` only when set.
fn go_status(object: &mut Value) {
    let Some(root) = object.as_object_mut() else { return };
    let status = root.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Some(status) = status.as_object_mut() else { return };
    set_default(status, "desiredReplicas", json!(0));
    let no_metrics =
        status.get("currentMetrics").and_then(Value::as_array).is_none_or(Vec::is_empty);
    if no_metrics {
        status.insert("currentMetrics".into(), Value::Null);
    }
    if status.get("currentReplicas").is_some_and(|r| r.is_null() || r == 0) {
        status.remove("currentReplicas");
    }
    if status.get("conditions").is_some_and(|c| c.as_array().is_none_or(Vec::is_empty)) {
        status.remove("conditions");
    }
    for field in ["observedGeneration", "lastScaleTime"] {
        if status.get(field).is_some_and(Value::is_null) {
            status.remove(field);
        }
    }
}

/// kube-apiserver's columns for autoscalers (`horizontalPodAutoscalerColumnDefinitions`).
fn columns() -> Vec<Value> {
    definitions(&[
        NAME,
        col("Reference", "string", "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count."),
        col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).  The desired replica count is calculated multiplying the ratio between the target value and the current value by the current number of pods.  Ergo, metrics used must decrease as the pod count is increased, and vice-versa.  See the individual metric source types for more information about how each type of metric must respond. If not set, the default metric will be set to 80% average CPU utilization."),
        col("MinPods", "string", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be 0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object or External metric is configured.  Scaling is active as long as at least one metric value is available."),
        col("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas."),
        col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler."),
        AGE,
    ])
}

/// `printHorizontalPodAutoscaler`, of a v2 object.
fn cells(object: &Value) -> Vec<Value> {
    let reference = format!(
        "{}/{}",
        str_at(object, "/spec/scaleTargetRef/kind"),
        str_at(object, "/spec/scaleTargetRef/name")
    );
    let list = |pointer: &str| -> Vec<Value> {
        object.pointer(pointer).and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let specs: Vec<v2::MetricSpec> =
        list("/spec/metrics").into_iter().filter_map(|m| serde_json::from_value(m).ok()).collect();
    let statuses: Vec<v2::MetricStatus> = list("/status/currentMetrics")
        .into_iter()
        .filter_map(|m| serde_json::from_value(m).ok())
        .collect();
    let min = object.pointer("/spec/minReplicas").and_then(Value::as_i64);
    let max = object.pointer("/spec/maxReplicas").and_then(Value::as_i64).unwrap_or(0);
    let current = object.pointer("/status/currentReplicas").and_then(Value::as_i64).unwrap_or(0);
    vec![
        name_cell(object),
        json!(reference),
        json!(targets(&specs, &statuses)),
        json!(min.map_or_else(|| "<unset>".to_owned(), |m| m.to_string())),
        json!(max),
        json!(current),
        age_cell(object),
    ]
}

/// `formatHPAMetrics`: each metric's current value (by position) over its target, the first two
/// of them.
pub fn targets(specs: &[v2::MetricSpec], statuses: &[v2::MetricStatus]) -> String {
    if specs.is_empty() {
        return "<none>".into();
    }
    // Go's `(*Quantity)(nil).String()`.
    let q = |q: Option<&Quantity>| q.map_or_else(|| "<nil>".to_owned(), |q| q.0.clone());
    const UNKNOWN: &str = "<unknown>";
    let percent = |u: Option<i32>| u.map(|u| format!("{u}%"));
    let mut list = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let item = match spec.type_.as_str() {
            "External" => {
                let target = spec.external.as_ref().map(|s| &s.target);
                let current = status.and_then(|s| s.external.as_ref()).map(|s| &s.current);
                match target.and_then(|t| t.average_value.as_ref()) {
                    Some(average) => format!(
                        "{}/{} (avg)",
                        current
                            .and_then(|c| c.average_value.as_ref())
                            .map_or(UNKNOWN.to_owned(), |v| v.0.clone()),
                        average.0
                    ),
                    None => format!(
                        "{}/{}",
                        current.map_or(UNKNOWN.to_owned(), |c| q(c.value.as_ref())),
                        q(target.and_then(|t| t.value.as_ref()))
                    ),
                }
            }
            "Pods" => {
                let target = spec.pods.as_ref().map(|s| &s.target);
                let current = status.and_then(|s| s.pods.as_ref()).map(|s| &s.current);
                format!(
                    "{}/{}",
                    current.map_or(UNKNOWN.to_owned(), |c| q(c.average_value.as_ref())),
                    q(target.and_then(|t| t.average_value.as_ref()))
                )
            }
            "Object" => {
                let target = spec.object.as_ref().map(|s| &s.target);
                let current = status.and_then(|s| s.object.as_ref()).map(|s| &s.current);
                match target.and_then(|t| t.average_value.as_ref()) {
                    Some(average) => format!(
                        "{}/{} (avg)",
                        current
                            .and_then(|c| c.average_value.as_ref())
                            .map_or(UNKNOWN.to_owned(), |v| v.0.clone()),
                        average.0
                    ),
                    None => format!(
                        "{}/{}",
                        current.map_or(UNKNOWN.to_owned(), |c| q(c.value.as_ref())),
                        q(target.and_then(|t| t.value.as_ref()))
                    ),
                }
            }
            kind @ ("Resource" | "ContainerResource") => {
                let (name, target, current) = if kind == "Resource" {
                    let source = spec.resource.as_ref();
                    let current = status.and_then(|s| s.resource.as_ref()).map(|s| &s.current);
                    (source.map(|s| s.name.as_str()), source.map(|s| &s.target), current)
                } else {
                    let source = spec.container_resource.as_ref();
                    let current =
                        status.and_then(|s| s.container_resource.as_ref()).map(|s| &s.current);
                    (source.map(|s| s.name.as_str()), source.map(|s| &s.target), current)
                };
                let name = name.unwrap_or_default();
                match target.and_then(|t| t.average_value.as_ref()) {
                    Some(average) => format!(
                        "{name}: {}/{}",
                        current.map_or(UNKNOWN.to_owned(), |c| q(c.average_value.as_ref())),
                        average.0
                    ),
                    None => format!(
                        "{name}: {}/{}",
                        current
                            .and_then(|c| percent(c.average_utilization))
                            .unwrap_or_else(|| UNKNOWN.to_owned()),
                        target
                            .and_then(|t| percent(t.average_utilization))
                            .unwrap_or_else(|| "<auto>".to_owned())
                    ),
                }
            }
            _ => "<unknown type>".to_owned(),
        };
        list.push(item);
    }
    const SHOWN: usize = 2;
    let count = list.len();
    if count > SHOWN {
        list.truncate(SHOWN);
        return format!("{} + {} more...", list.join(", "), count - SHOWN);
    }
    list.join(", ")
}
