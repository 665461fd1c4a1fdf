//! `autoscaling/v1` ↔ `autoscaling/v2`, as kube-apiserver's
//! `pkg/apis/autoscaling/v1/conversion.go` converts through its internal form.
//!
//! v1 has one metric, `targetCPUUtilizationPercentage` (a v2 `Resource` metric on `cpu` with an
//! `Utilization` target), and one current value, `currentCPUUtilizationPercentage`. The rest of a
//! v2 object travels through v1 in annotations, so that a v1 client's read-modify-write keeps it:
//!
//! - `autoscaling.alpha.kubernetes.io/metrics`: the other metrics, in v1's `MetricSpec` form
//!   (`targetAverageValue`, `metricName`, …);
//! - `autoscaling.alpha.kubernetes.io/current-metrics`: every current metric, in v1's
//!   `MetricStatus` form;
//! - `autoscaling.alpha.kubernetes.io/behavior`: the behavior, as Go marshals the internal type
//!   (its Go field names: `ScaleUp`, `StabilizationWindowSeconds`, …);
//! - `autoscaling.alpha.kubernetes.io/conditions`: the conditions.
//!
//! An annotation that does not decode is ignored, as kube-apiserver ignores it; the annotations
//! are never stored (v2 drops them). A v1 object without metrics gets the v1 controller's old
//! implicit default, CPU at 80% utilization.
//!
//! Both functions are pure, over JSON: the object's metadata is kept as it is, but for these
//! annotations.

use k8s_openapi::api::autoscaling::{v1, v2};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Map, Value};

use crate::validation::parse_quantity;

/// The other metrics of a v1 object.
pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// The current metrics of a v1 object.
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// The conditions of a v1 object.
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// The behavior of a v1 object.
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The annotations a conversion writes, which are never stored.
pub const ROUND_TRIP: [&str; 4] = [METRICS, BEHAVIOR, CURRENT_METRICS, CONDITIONS];

/// The CPU utilization v1 objects without a target get (`autoscaling.DefaultCPUUtilization`).
pub const DEFAULT_CPU_UTILIZATION: i32 = 80;

const V1: &str = "autoscaling/v1";
const V2: &str = "autoscaling/v2";
const CPU: &str = "cpu";
const RESOURCE: &str = "Resource";
const UTILIZATION: &str = "Utilization";
const AVERAGE_VALUE: &str = "AverageValue";
const VALUE: &str = "Value";

/// A v2 object as v1 shows it.
pub fn to_v1(object: &Value) -> Value {
    let spec: v2::HorizontalPodAutoscalerSpec = part(object, "spec");
    let status: v2::HorizontalPodAutoscalerStatus = part(object, "status");
    let mut metadata = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    drop_round_trip(&mut metadata);

    let metrics = spec.metrics.as_deref().unwrap_or_default();
    let others: Vec<MetricSpecV1> =
        metrics.iter().filter(|m| !is_cpu_utilization(m)).map(metric_to_v1).collect();
    let current = status.current_metrics.as_deref().unwrap_or_default();
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let mut annotations = Vec::new();
    if !others.is_empty() {
        annotations.push((METRICS, encode(&others)));
    }
    if !current.is_empty() {
        let current: Vec<MetricStatusV1> = current.iter().map(status_to_v1).collect();
        annotations.push((CURRENT_METRICS, encode(&current)));
    }
    if let Some(behavior) = &spec.behavior {
        annotations.push((BEHAVIOR, encode(&InternalBehavior::from(behavior))));
    }
    if !conditions.is_empty() {
        let conditions: Vec<ConditionV1> = conditions.iter().map(ConditionV1::from).collect();
        annotations.push((CONDITIONS, encode(&conditions)));
    }
    if !annotations.is_empty() {
        let meta = as_map(&mut metadata);
        let entry = meta.entry("annotations").or_insert_with(|| json!({}));
        if !entry.is_object() {
            *entry = json!({});
        }
        if let Some(map) = entry.as_object_mut() {
            for (key, value) in annotations {
                map.insert(key.into(), value.into());
            }
        }
    }

    let mut v1_spec = Map::new();
    v1_spec.insert("scaleTargetRef".into(), reference(&spec.scale_target_ref));
    if let Some(min) = spec.min_replicas {
        v1_spec.insert("minReplicas".into(), min.into());
    }
    v1_spec.insert("maxReplicas".into(), spec.max_replicas.into());
    let target = metrics
        .iter()
        .find(|m| is_cpu_utilization(m))
        .and_then(|m| m.resource.as_ref()?.target.average_utilization);
    if let Some(target) = target {
        v1_spec.insert("targetCPUUtilizationPercentage".into(), target.into());
    }

    let mut v1_status = Map::new();
    if let Some(generation) = status.observed_generation {
        v1_status.insert("observedGeneration".into(), generation.into());
    }
    if let Some(time) = object.pointer("/status/lastScaleTime").filter(|t| !t.is_null()) {
        v1_status.insert("lastScaleTime".into(), time.clone());
    }
    v1_status.insert("currentReplicas".into(), status.current_replicas.unwrap_or(0).into());
    v1_status.insert("desiredReplicas".into(), status.desired_replicas.into());
    // The last CPU utilization wins, as the Go loop has it.
    let cpu = current
        .iter()
        .filter(|m| m.type_ == RESOURCE)
        .filter_map(|m| m.resource.as_ref().filter(|r| r.name == CPU))
        .filter_map(|r| r.current.average_utilization)
        .next_back();
    if let Some(cpu) = cpu {
        v1_status.insert("currentCPUUtilizationPercentage".into(), cpu.into());
    }

    json!({
        "apiVersion": V1,
        "kind": object.get("kind").cloned().unwrap_or_else(|| json!("HorizontalPodAutoscaler")),
        "metadata": metadata,
        "spec": v1_spec,
        "status": v1_status,
    })
}

/// A v1 object as v2 holds it: its annotations read back into metrics, behavior, current
/// metrics and conditions, and dropped. No defaults are applied but the v1 metric default.
pub fn to_v2(object: &Value) -> Value {
    let spec: v1::HorizontalPodAutoscalerSpec = part(object, "spec");
    let status: v1::HorizontalPodAutoscalerStatus = part(object, "status");
    let mut metadata = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let annotation = |key: &str| object.pointer("/metadata/annotations").and_then(|a| a.get(key));

    let mut metrics: Vec<v2::MetricSpec> =
        spec.target_cpu_utilization_percentage.map(cpu_utilization).into_iter().collect();
    if let Some(others) = annotation(METRICS).and_then(decode::<Vec<MetricSpecV1>>) {
        if others.iter().all(MetricSpecV1::quantities_parse) {
            let mut all: Vec<v2::MetricSpec> = others.iter().map(metric_to_v2).collect();
            all.append(&mut metrics);
            metrics = all;
        }
    }
    if metrics.is_empty() {
        metrics.push(cpu_utilization(DEFAULT_CPU_UTILIZATION));
    }
    let behavior = annotation(BEHAVIOR)
        .and_then(decode::<InternalBehavior>)
        .filter(|b| b.scale_up.is_some() || b.scale_down.is_some())
        .filter(InternalBehavior::quantities_parse)
        .map(v2::HorizontalPodAutoscalerBehavior::from);

    let mut current: Option<Vec<v2::MetricStatus>> =
        status.current_cpu_utilization_percentage.map(|cpu| {
            vec![v2::MetricStatus {
                type_: RESOURCE.into(),
                resource: Some(v2::ResourceMetricStatus {
                    name: CPU.into(),
                    current: v2::MetricValueStatus {
                        average_utilization: Some(cpu),
                        ..Default::default()
                    },
                }),
                ..Default::default()
            }]
        });
    if let Some(all) = annotation(CURRENT_METRICS).and_then(decode::<Vec<MetricStatusV1>>) {
        if all.iter().all(MetricStatusV1::quantities_parse) {
            current = Some(all.iter().map(status_to_v2).collect());
        }
    }
    let conditions: Option<Vec<Value>> = annotation(CONDITIONS)
        .and_then(decode::<Vec<ConditionV1>>)
        .map(|all| all.into_iter().map(ConditionV1::into_v2).collect());
    drop_round_trip(&mut metadata);

    let mut v2_spec = Map::new();
    v2_spec.insert("scaleTargetRef".into(), reference_v1(&spec.scale_target_ref));
    if let Some(min) = spec.min_replicas {
        v2_spec.insert("minReplicas".into(), min.into());
    }
    v2_spec.insert("maxReplicas".into(), spec.max_replicas.into());
    v2_spec.insert("metrics".into(), to_value(&metrics));
    if let Some(behavior) = behavior {
        v2_spec.insert("behavior".into(), to_value(&behavior));
    }

    let mut v2_status = Map::new();
    if let Some(generation) = status.observed_generation {
        v2_status.insert("observedGeneration".into(), generation.into());
    }
    if let Some(time) = object.pointer("/status/lastScaleTime").filter(|t| !t.is_null()) {
        v2_status.insert("lastScaleTime".into(), time.clone());
    }
    if status.current_replicas != 0 {
        v2_status.insert("currentReplicas".into(), status.current_replicas.into());
    }
    v2_status.insert("desiredReplicas".into(), status.desired_replicas.into());
    let current = current.filter(|c| !c.is_empty());
    v2_status.insert("currentMetrics".into(), current.map_or(Value::Null, |c| to_value(&c)));
    if let Some(conditions) = conditions.filter(|c| !c.is_empty()) {
        v2_status.insert("conditions".into(), conditions.into());
    }

    json!({
        "apiVersion": V2,
        "kind": object.get("kind").cloned().unwrap_or_else(|| json!("HorizontalPodAutoscaler")),
        "metadata": metadata,
        "spec": v2_spec,
        "status": v2_status,
    })
}

/// Remove the round-trip annotations (kube-apiserver's
/// `DropRoundTripHorizontalPodAutoscalerAnnotations`), and the annotations if none is left.
pub fn drop_round_trip(metadata: &mut Value) {
    let Some(meta) = metadata.as_object_mut() else { return };
    let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) else {
        return;
    };
    for key in ROUND_TRIP {
        annotations.remove(key);
    }
    if annotations.is_empty() {
        meta.remove("annotations");
    }
}

/// A v2 metric on CPU at `utilization` percent.
pub fn cpu_utilization(utilization: i32) -> v2::MetricSpec {
    v2::MetricSpec {
        type_: RESOURCE.into(),
        resource: Some(v2::ResourceMetricSource {
            name: CPU.into(),
            target: v2::MetricTarget {
                type_: UTILIZATION.into(),
                average_utilization: Some(utilization),
                ..Default::default()
            },
        }),
        ..Default::default()
    }
}

/// A metric v1 shows as `targetCPUUtilizationPercentage` (and leaves out of the annotation).
fn is_cpu_utilization(metric: &v2::MetricSpec) -> bool {
    metric.type_ == RESOURCE
        && metric
            .resource
            .as_ref()
            .is_some_and(|r| r.name == CPU && r.target.average_utilization.is_some())
}

/// A part of an object as its Go type; the type's zero value where it does not decode.
fn part<T: serde::de::DeserializeOwned + Default>(object: &Value, field: &str) -> T {
    object
        .get(field)
        .filter(|v| !v.is_null())
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default()
}

fn as_map(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

/// An annotation's value decoded, as Go's `json.Unmarshal` would; `None` where it would fail.
fn decode<T: serde::de::DeserializeOwned>(value: &Value) -> Option<T> {
    serde_json::from_str(value.as_str()?).ok()
}

/// A value as Go's `json.Marshal` writes it: compact, the fields in their declared order.
fn encode<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn reference(r: &v2::CrossVersionObjectReference) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), r.kind.clone().into());
    out.insert("name".into(), r.name.clone().into());
    if let Some(api_version) = r.api_version.as_deref().filter(|v| !v.is_empty()) {
        out.insert("apiVersion".into(), api_version.into());
    }
    Value::Object(out)
}

fn reference_v1(r: &v1::CrossVersionObjectReference) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), r.kind.clone().into());
    out.insert("name".into(), r.name.clone().into());
    if let Some(api_version) = r.api_version.as_deref().filter(|v| !v.is_empty()) {
        out.insert("apiVersion".into(), api_version.into());
    }
    Value::Object(out)
}

/// A Go `resource.Quantity` that is not a pointer: written as `"0"` when zero.
fn quantity_or_zero<S: Serializer>(q: &Option<Quantity>, s: S) -> Result<S::Ok, S::Error> {
    match q {
        Some(q) => s.serialize_str(&q.0),
        None => s.serialize_str("0"),
    }
}

fn parses(q: &Option<Quantity>) -> bool {
    q.as_ref().is_none_or(|q| parse_quantity(&q.0).is_some())
}

fn zero() -> Quantity {
    Quantity("0".into())
}

/// `autoscalingv1.CrossVersionObjectReference`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReferenceV1 {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    api_version: String,
}

impl From<&v2::CrossVersionObjectReference> for ReferenceV1 {
    fn from(r: &v2::CrossVersionObjectReference) -> Self {
        ReferenceV1 {
            kind: r.kind.clone(),
            name: r.name.clone(),
            api_version: r.api_version.clone().unwrap_or_default(),
        }
    }
}

impl From<&ReferenceV1> for v2::CrossVersionObjectReference {
    fn from(r: &ReferenceV1) -> Self {
        v2::CrossVersionObjectReference {
            kind: r.kind.clone(),
            name: r.name.clone(),
            api_version: Some(r.api_version.clone()).filter(|v| !v.is_empty()),
        }
    }
}

/// `autoscalingv1.MetricSpec`, the form of the metrics annotation.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricSpecV1 {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    object: Option<ObjectSourceV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pods: Option<PodsSourceV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource: Option<ResourceSourceV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_resource: Option<ContainerResourceSourceV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    external: Option<ExternalSourceV1>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectSourceV1 {
    #[serde(default)]
    target: ReferenceV1,
    #[serde(default)]
    metric_name: String,
    #[serde(default, serialize_with = "quantity_or_zero")]
    target_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodsSourceV1 {
    #[serde(default)]
    metric_name: String,
    #[serde(default, serialize_with = "quantity_or_zero")]
    target_average_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSourceV1 {
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerResourceSourceV1 {
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_average_utilization: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
    #[serde(default)]
    container: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExternalSourceV1 {
    #[serde(default)]
    metric_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metric_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_average_value: Option<Quantity>,
}

impl MetricSpecV1 {
    /// Whether every quantity parses (Go's decoding of the annotation fails otherwise).
    fn quantities_parse(&self) -> bool {
        self.object.as_ref().is_none_or(|o| parses(&o.target_value) && parses(&o.average_value))
            && self.pods.as_ref().is_none_or(|p| parses(&p.target_average_value))
            && self.resource.as_ref().is_none_or(|r| parses(&r.target_average_value))
            && self.container_resource.as_ref().is_none_or(|r| parses(&r.target_average_value))
            && self
                .external
                .as_ref()
                .is_none_or(|x| parses(&x.target_value) && parses(&x.target_average_value))
    }
}

/// `Convert_autoscaling_MetricSpec_To_v1_MetricSpec`.
fn metric_to_v1(m: &v2::MetricSpec) -> MetricSpecV1 {
    MetricSpecV1 {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| ObjectSourceV1 {
            target: ReferenceV1::from(&o.described_object),
            metric_name: o.metric.name.clone(),
            target_value: o.target.value.clone(),
            selector: o.metric.selector.clone(),
            average_value: o.target.average_value.clone(),
        }),
        pods: m.pods.as_ref().map(|p| PodsSourceV1 {
            metric_name: p.metric.name.clone(),
            target_average_value: p.target.average_value.clone(),
            selector: p.metric.selector.clone(),
        }),
        resource: m.resource.as_ref().map(|r| ResourceSourceV1 {
            name: r.name.clone(),
            target_average_utilization: r.target.average_utilization,
            target_average_value: r.target.average_value.clone(),
        }),
        container_resource: m.container_resource.as_ref().map(|r| ContainerResourceSourceV1 {
            name: r.name.clone(),
            target_average_utilization: r.target.average_utilization,
            target_average_value: r.target.average_value.clone(),
            container: r.container.clone(),
        }),
        external: m.external.as_ref().map(|x| ExternalSourceV1 {
            metric_name: x.metric.name.clone(),
            metric_selector: x.metric.selector.clone(),
            target_value: x.target.value.clone(),
            target_average_value: x.target.average_value.clone(),
        }),
    }
}

/// `Convert_v1_MetricSpec_To_autoscaling_MetricSpec`.
fn metric_to_v2(m: &MetricSpecV1) -> v2::MetricSpec {
    // A utilization makes a Utilization target; a raw value an AverageValue one.
    let utilization_or_value =
        |utilization: Option<i32>, value: &Option<Quantity>| v2::MetricTarget {
            type_: if utilization.is_some() { UTILIZATION } else { AVERAGE_VALUE }.into(),
            average_utilization: utilization,
            average_value: value.clone(),
            value: None,
        };
    v2::MetricSpec {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| v2::ObjectMetricSource {
            described_object: (&o.target).into(),
            metric: v2::MetricIdentifier {
                name: o.metric_name.clone(),
                selector: o.selector.clone(),
            },
            target: v2::MetricTarget {
                type_: if o.average_value.is_none() { VALUE } else { AVERAGE_VALUE }.into(),
                value: Some(o.target_value.clone().unwrap_or_else(zero)),
                average_value: o.average_value.clone(),
                average_utilization: None,
            },
        }),
        pods: m.pods.as_ref().map(|p| v2::PodsMetricSource {
            metric: v2::MetricIdentifier {
                name: p.metric_name.clone(),
                selector: p.selector.clone(),
            },
            target: v2::MetricTarget {
                type_: AVERAGE_VALUE.into(),
                average_value: Some(p.target_average_value.clone().unwrap_or_else(zero)),
                ..Default::default()
            },
        }),
        resource: m.resource.as_ref().map(|r| v2::ResourceMetricSource {
            name: r.name.clone(),
            target: utilization_or_value(r.target_average_utilization, &r.target_average_value),
        }),
        container_resource: m.container_resource.as_ref().map(|r| {
            v2::ContainerResourceMetricSource {
                name: r.name.clone(),
                container: r.container.clone(),
                target: utilization_or_value(r.target_average_utilization, &r.target_average_value),
            }
        }),
        external: m.external.as_ref().map(|x| v2::ExternalMetricSource {
            metric: v2::MetricIdentifier {
                name: x.metric_name.clone(),
                selector: x.metric_selector.clone(),
            },
            target: v2::MetricTarget {
                type_: if x.target_value.is_none() { AVERAGE_VALUE } else { VALUE }.into(),
                value: x.target_value.clone(),
                average_value: x.target_average_value.clone(),
                average_utilization: None,
            },
        }),
    }
}

/// `autoscalingv1.MetricStatus`, the form of the current-metrics annotation.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetricStatusV1 {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    object: Option<ObjectStatusV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pods: Option<PodsStatusV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource: Option<ResourceStatusV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    container_resource: Option<ContainerResourceStatusV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    external: Option<ExternalStatusV1>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectStatusV1 {
    #[serde(default)]
    target: ReferenceV1,
    #[serde(default)]
    metric_name: String,
    #[serde(default, serialize_with = "quantity_or_zero")]
    current_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    average_value: Option<Quantity>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodsStatusV1 {
    #[serde(default)]
    metric_name: String,
    #[serde(default, serialize_with = "quantity_or_zero")]
    current_average_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    selector: Option<LabelSelector>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceStatusV1 {
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    #[serde(default, serialize_with = "quantity_or_zero")]
    current_average_value: Option<Quantity>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerResourceStatusV1 {
    #[serde(default)]
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current_average_utilization: Option<i32>,
    #[serde(default, serialize_with = "quantity_or_zero")]
    current_average_value: Option<Quantity>,
    #[serde(default)]
    container: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExternalStatusV1 {
    #[serde(default)]
    metric_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metric_selector: Option<LabelSelector>,
    #[serde(default, serialize_with = "quantity_or_zero")]
    current_value: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current_average_value: Option<Quantity>,
}

impl MetricStatusV1 {
    fn quantities_parse(&self) -> bool {
        self.object.as_ref().is_none_or(|o| parses(&o.current_value) && parses(&o.average_value))
            && self.pods.as_ref().is_none_or(|p| parses(&p.current_average_value))
            && self.resource.as_ref().is_none_or(|r| parses(&r.current_average_value))
            && self.container_resource.as_ref().is_none_or(|r| parses(&r.current_average_value))
            && self
                .external
                .as_ref()
                .is_none_or(|x| parses(&x.current_value) && parses(&x.current_average_value))
    }
}

/// `Convert_autoscaling_MetricStatus_To_v1_MetricStatus`.
fn status_to_v1(m: &v2::MetricStatus) -> MetricStatusV1 {
    MetricStatusV1 {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| ObjectStatusV1 {
            target: ReferenceV1::from(&o.described_object),
            metric_name: o.metric.name.clone(),
            current_value: o.current.value.clone(),
            selector: o.metric.selector.clone(),
            average_value: o.current.average_value.clone(),
        }),
        pods: m.pods.as_ref().map(|p| PodsStatusV1 {
            metric_name: p.metric.name.clone(),
            current_average_value: p.current.average_value.clone(),
            selector: p.metric.selector.clone(),
        }),
        resource: m.resource.as_ref().map(|r| ResourceStatusV1 {
            name: r.name.clone(),
            current_average_utilization: r.current.average_utilization,
            current_average_value: r.current.average_value.clone(),
        }),
        container_resource: m.container_resource.as_ref().map(|r| ContainerResourceStatusV1 {
            name: r.name.clone(),
            current_average_utilization: r.current.average_utilization,
            current_average_value: r.current.average_value.clone(),
            container: r.container.clone(),
        }),
        external: m.external.as_ref().map(|x| ExternalStatusV1 {
            metric_name: x.metric.name.clone(),
            metric_selector: x.metric.selector.clone(),
            current_value: x.current.value.clone(),
            current_average_value: x.current.average_value.clone(),
        }),
    }
}

/// `Convert_v1_MetricStatus_To_autoscaling_MetricStatus`.
fn status_to_v2(m: &MetricStatusV1) -> v2::MetricStatus {
    v2::MetricStatus {
        type_: m.type_.clone(),
        object: m.object.as_ref().map(|o| v2::ObjectMetricStatus {
            described_object: (&o.target).into(),
            metric: v2::MetricIdentifier {
                name: o.metric_name.clone(),
                selector: o.selector.clone(),
            },
            current: v2::MetricValueStatus {
                value: Some(o.current_value.clone().unwrap_or_else(zero)),
                average_value: o.average_value.clone(),
                average_utilization: None,
            },
        }),
        pods: m.pods.as_ref().map(|p| v2::PodsMetricStatus {
            metric: v2::MetricIdentifier {
                name: p.metric_name.clone(),
                selector: p.selector.clone(),
            },
            current: v2::MetricValueStatus {
                average_value: Some(p.current_average_value.clone().unwrap_or_else(zero)),
                ..Default::default()
            },
        }),
        resource: m.resource.as_ref().map(|r| v2::ResourceMetricStatus {
            name: r.name.clone(),
            current: v2::MetricValueStatus {
                average_value: Some(r.current_average_value.clone().unwrap_or_else(zero)),
                average_utilization: r.current_average_utilization,
                value: None,
            },
        }),
        container_resource: m.container_resource.as_ref().map(|r| {
            v2::ContainerResourceMetricStatus {
                name: r.name.clone(),
                container: r.container.clone(),
                current: v2::MetricValueStatus {
                    average_value: Some(r.current_average_value.clone().unwrap_or_else(zero)),
                    average_utilization: r.current_average_utilization,
                    value: None,
                },
            }
        }),
        external: m.external.as_ref().map(|x| v2::ExternalMetricStatus {
            metric: v2::MetricIdentifier {
                name: x.metric_name.clone(),
                selector: x.metric_selector.clone(),
            },
            current: v2::MetricValueStatus {
                value: Some(x.current_value.clone().unwrap_or_else(zero)),
                average_value: x.current_average_value.clone(),
                average_utilization: None,
            },
        }),
    }
}

/// `autoscalingv1.HorizontalPodAutoscalerCondition`: as v2's, but a zero transition time is
/// written (`null`).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionV1 {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    message: String,
}

impl From<&v2::HorizontalPodAutoscalerCondition> for ConditionV1 {
    fn from(c: &v2::HorizontalPodAutoscalerCondition) -> Self {
        ConditionV1 {
            type_: c.type_.clone(),
            status: c.status.clone(),
            last_transition_time: c.last_transition_time.clone(),
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        }
    }
}

impl ConditionV1 {
    fn into_v2(self) -> Value {
        to_value(&v2::HorizontalPodAutoscalerCondition {
            type_: self.type_,
            status: self.status,
            last_transition_time: self.last_transition_time,
            reason: Some(self.reason).filter(|r| !r.is_empty()),
            message: Some(self.message).filter(|m| !m.is_empty()),
        })
    }
}

/// The internal `autoscaling.HorizontalPodAutoscalerBehavior`, which kube-apiserver marshals
/// into the behavior annotation: Go's field names (it has no JSON tags), every field written
/// (`null` when unset). Go reads field names case-insensitively, so the JSON names are accepted
/// too.
#[derive(Debug, Serialize, Deserialize)]
struct InternalBehavior {
    #[serde(rename = "ScaleUp", alias = "scaleUp", default)]
    scale_up: Option<InternalRules>,
    #[serde(rename = "ScaleDown", alias = "scaleDown", default)]
    scale_down: Option<InternalRules>,
}

/// The internal `autoscaling.HPAScalingRules`.
#[derive(Debug, Serialize, Deserialize)]
struct InternalRules {
    #[serde(rename = "StabilizationWindowSeconds", alias = "stabilizationWindowSeconds", default)]
    stabilization_window_seconds: Option<i32>,
    #[serde(rename = "SelectPolicy", alias = "selectPolicy", default)]
    select_policy: Option<String>,
    #[serde(rename = "Policies", alias = "policies", default)]
    policies: Option<Vec<InternalPolicy>>,
    #[serde(rename = "Tolerance", alias = "tolerance", default)]
    tolerance: Option<Quantity>,
}

/// The internal `autoscaling.HPAScalingPolicy`.
#[derive(Debug, Serialize, Deserialize)]
struct InternalPolicy {
    #[serde(rename = "Type", alias = "type", default)]
    type_: String,
    #[serde(rename = "Value", alias = "value", default)]
    value: i32,
    #[serde(rename = "PeriodSeconds", alias = "periodSeconds", default)]
    period_seconds: i32,
}

impl InternalBehavior {
    fn quantities_parse(&self) -> bool {
        [&self.scale_up, &self.scale_down]
            .into_iter()
            .flatten()
            .all(|rules| parses(&rules.tolerance))
    }
}

impl From<&v2::HorizontalPodAutoscalerBehavior> for InternalBehavior {
    fn from(b: &v2::HorizontalPodAutoscalerBehavior) -> Self {
        let rules = |r: &v2::HPAScalingRules| InternalRules {
            stabilization_window_seconds: r.stabilization_window_seconds,
            select_policy: r.select_policy.clone(),
            policies: r.policies.as_ref().map(|all| {
                all.iter()
                    .map(|p| InternalPolicy {
                        type_: p.type_.clone(),
                        value: p.value,
                        period_seconds: p.period_seconds,
                    })
                    .collect()
            }),
            tolerance: r.tolerance.clone(),
        };
        InternalBehavior {
            scale_up: b.scale_up.as_ref().map(rules),
            scale_down: b.scale_down.as_ref().map(rules),
        }
    }
}

impl From<InternalBehavior> for v2::HorizontalPodAutoscalerBehavior {
    fn from(b: InternalBehavior) -> Self {
        let rules = |r: InternalRules| v2::HPAScalingRules {
            stabilization_window_seconds: r.stabilization_window_seconds,
            select_policy: r.select_policy,
            policies: r.policies.map(|all| {
                all.into_iter()
                    .map(|p| v2::HPAScalingPolicy {
                        type_: p.type_,
                        value: p.value,
                        period_seconds: p.period_seconds,
                    })
                    .collect()
            }),
            tolerance: r.tolerance,
        };
        v2::HorizontalPodAutoscalerBehavior {
            scale_up: b.scale_up.map(rules),
            scale_down: b.scale_down.map(rules),
        }
    }
}
