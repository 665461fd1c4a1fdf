//! kube-apiserver's `pkg/apis/autoscaling/validation`: the checks of an autoscaler's spec, on
//! its v2 form (kube-apiserver checks its internal form, which v2 mirrors, whichever version was
//! written; an `autoscaling/v1` object's causes name v2's fields).

use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricSource, CrossVersionObjectReference, ExternalMetricSource,
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscaler, HorizontalPodAutoscalerBehavior,
    HorizontalPodAutoscalerSpec, MetricIdentifier, MetricSpec, MetricTarget, ObjectMetricSource,
    PodsMetricSource, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::object::go_quote as quote;
use crate::object_names::path_segment;
use crate::validation::{container_resource_name, parse_quantity, Errors};

/// `MaxPeriodSeconds`: the longest period of a scaling policy.
const MAX_PERIOD_SECONDS: i32 = 1800;
/// `MaxStabilizationWindowSeconds`: the longest stabilization window.
const MAX_STABILIZATION_WINDOW_SECONDS: i32 = 3600;
/// The lowest `minReplicas`: 0 only with the `HPAScaleToZero` feature gate, which is off.
const MIN_REPLICAS_LOWER_BOUND: i32 = 1;

const METRIC_SOURCE_TYPES: &[&str] =
    &["ContainerResource", "External", "Object", "Pods", "Resource"];
const SELECT_POLICIES: &[&str] = &["Disabled", "Max", "Min"];
const POLICY_TYPES: &[&str] = &["Percent", "Pods"];

/// `ValidateHorizontalPodAutoscaler` (beyond the metadata, which every kind's checks cover).
pub(super) fn autoscaler(object: &HorizontalPodAutoscaler, e: &mut Errors) {
    let zero = HorizontalPodAutoscalerSpec::default();
    spec(object.spec.as_ref().unwrap_or(&zero), e);
}

/// `ValidateHorizontalPodAutoscalerStatusUpdate`: the counts are not negative.
pub(super) fn status(object: &HorizontalPodAutoscaler, e: &mut Errors) {
    let Some(status) = object.status.as_ref() else { return };
    e.nonnegative(Some(status.current_replicas.unwrap_or(0)), "status.currentReplicas");
    e.nonnegative(Some(status.desired_replicas), "status.desiredReplicas");
}

/// `validateHorizontalPodAutoscalerSpec`.
fn spec(spec: &HorizontalPodAutoscalerSpec, e: &mut Errors) {
    if let Some(min) = spec.min_replicas.filter(|m| *m < MIN_REPLICAS_LOWER_BOUND) {
        e.invalid(
            "spec.minReplicas",
            &min.to_string(),
            &format!("must be greater than or equal to {MIN_REPLICAS_LOWER_BOUND}"),
        );
    }
    let max = spec.max_replicas;
    if max < 1 {
        e.invalid("spec.maxReplicas", &max.to_string(), "must be greater than 0");
    }
    if spec.min_replicas.is_some_and(|min| max < min) {
        e.invalid(
            "spec.maxReplicas",
            &max.to_string(),
            "must be greater than or equal to `minReplicas`",
        );
    }
    reference(&spec.scale_target_ref, "spec.scaleTargetRef", e);
    metrics(spec.metrics.as_deref().unwrap_or_default(), spec.min_replicas, e);
    if let Some(behavior) = &spec.behavior {
        self::behavior(behavior, e);
    }
}

/// `ValidateCrossVersionObjectReference`.
fn reference(r: &CrossVersionObjectReference, path: &str, e: &mut Errors) {
    for (field, value) in [("kind", &r.kind), ("name", &r.name)] {
        let field = format!("{path}.{field}");
        if value.is_empty() {
            e.required(&field, "");
        } else {
            e.invalid_each(&field, value, path_segment(value));
        }
    }
}

/// `validateMetrics`.
fn metrics(metrics: &[MetricSpec], min_replicas: Option<i32>, e: &mut Errors) {
    for (i, metric) in metrics.iter().enumerate() {
        metric_spec(metric, &format!("spec.metrics[{i}]"), e);
    }
    let scales_on_objects = metrics.iter().any(|m| m.type_ == "Object" || m.type_ == "External");
    if min_replicas == Some(0) && !scales_on_objects {
        e.forbidden(
            "spec.metrics",
            "must specify at least one Object or External metric to support scaling to zero replicas",
        );
    }
}

/// `validateMetricSpec`.
fn metric_spec(metric: &MetricSpec, path: &str, e: &mut Errors) {
    let kind = metric.type_.as_str();
    if kind.is_empty() {
        e.required(&format!("{path}.type"), "must specify a metric source type");
    }
    if !METRIC_SOURCE_TYPES.contains(&kind) {
        e.not_supported(&format!("{path}.type"), &quote(kind), METRIC_SOURCE_TYPES);
    }
    // Only the first source given is checked; the others are refused below.
    let present: Vec<&str> = [
        ("object", metric.object.is_some()),
        ("external", metric.external.is_some()),
        ("pods", metric.pods.is_some()),
        ("resource", metric.resource.is_some()),
        ("containerResource", metric.container_resource.is_some()),
    ]
    .into_iter()
    .filter(|(_, given)| *given)
    .map(|(name, _)| name)
    .collect();
    match present.first().copied() {
        Some("object") => object_source(metric.object.as_ref(), &format!("{path}.object"), e),
        Some("external") => {
            external_source(metric.external.as_ref(), &format!("{path}.external"), e)
        }
        Some("pods") => pods_source(metric.pods.as_ref(), &format!("{path}.pods"), e),
        Some("resource") => {
            resource_source(metric.resource.as_ref(), &format!("{path}.resource"), e)
        }
        Some("containerResource") => container_resource_source(
            metric.container_resource.as_ref(),
            &format!("{path}.containerResource"),
            e,
        ),
        _ => {}
    }
    let expected = match kind {
        "Object" => Some(("object", metric.object.is_some())),
        "Pods" => Some(("pods", metric.pods.is_some())),
        "Resource" => Some(("resource", metric.resource.is_some())),
        "External" => Some(("external", metric.external.is_some())),
        "ContainerResource" => Some(("containerResource", metric.container_resource.is_some())),
        _ => {
            e.not_supported(&format!("{path}.type"), &quote(kind), METRIC_SOURCE_TYPES);
            None
        }
    };
    if let Some((field, false)) = expected {
        e.required(
            &format!("{path}.{field}"),
            "must populate information for the given metric source",
        );
    }
    if present.len() != 1 {
        let expected = expected.map(|(field, _)| field);
        for other in present.into_iter().filter(|p| Some(*p) != expected) {
            e.forbidden(&format!("{path}.{other}"), "must populate the given metric source only");
        }
    }
}

/// `validateObjectSource`.
fn object_source(source: Option<&ObjectMetricSource>, path: &str, e: &mut Errors) {
    let Some(source) = source else { return };
    reference(&source.described_object, &format!("{path}.describedObject"), e);
    metric_identifier(&source.metric, &format!("{path}.metric"), e);
    metric_target(&source.target, &format!("{path}.target"), e);
    if source.target.value.is_none() && source.target.average_value.is_none() {
        e.required(
            &format!("{path}.target.averageValue"),
            "must set either a target value or averageValue",
        );
    }
}

/// `validateExternalSource`.
fn external_source(source: Option<&ExternalMetricSource>, path: &str, e: &mut Errors) {
    let Some(source) = source else { return };
    metric_identifier(&source.metric, &format!("{path}.metric"), e);
    metric_target(&source.target, &format!("{path}.target"), e);
    let (value, average) = (&source.target.value, &source.target.average_value);
    if value.is_none() && average.is_none() {
        e.required(
            &format!("{path}.target.averageValue"),
            "must set either a target value for metric or a per-pod target",
        );
    }
    if value.is_some() && average.is_some() {
        e.forbidden(
            &format!("{path}.target.value"),
            "may not set both a target value for metric and a per-pod target",
        );
    }
}

/// `validatePodsSource`.
fn pods_source(source: Option<&PodsMetricSource>, path: &str, e: &mut Errors) {
    let Some(source) = source else { return };
    metric_identifier(&source.metric, &format!("{path}.metric"), e);
    metric_target(&source.target, &format!("{path}.target"), e);
    if source.target.average_value.is_none() {
        e.required(
            &format!("{path}.target.averageValue"),
            "must specify a positive target averageValue",
        );
    }
}

/// `validateContainerResourceSource`.
fn container_resource_source(
    source: Option<&ContainerResourceMetricSource>,
    path: &str,
    e: &mut Errors,
) {
    let Some(source) = source else { return };
    let name = format!("{path}.name");
    if source.name.is_empty() {
        e.required(&name, "must specify a resource name");
    } else {
        container_resource_name(&source.name, &name, e);
    }
    let container = format!("{path}.container");
    if source.container.is_empty() {
        e.required(&container, "must specify a container");
    } else {
        e.invalid_each(
            &container,
            &source.container,
            carrel_machinery::names::dns1123_label(&source.container),
        );
    }
    utilization_or_value(&source.target, &format!("{path}.target"), e);
}

/// `validateResourceSource`.
fn resource_source(source: Option<&ResourceMetricSource>, path: &str, e: &mut Errors) {
    let Some(source) = source else { return };
    if source.name.is_empty() {
        e.required(&format!("{path}.name"), "must specify a resource name");
    }
    utilization_or_value(&source.target, &format!("{path}.target"), e);
}

/// The target of a resource metric: a utilization or a raw value, not both.
fn utilization_or_value(target: &MetricTarget, path: &str, e: &mut Errors) {
    metric_target(target, path, e);
    let (utilization, value) = (target.average_utilization, &target.average_value);
    if utilization.is_none() && value.is_none() {
        e.required(
            &format!("{path}.averageUtilization"),
            "must set either a target raw value or a target utilization",
        );
    }
    if utilization.is_some() && value.is_some() {
        e.forbidden(
            &format!("{path}.averageValue"),
            "may not set both a target raw value and a target utilization",
        );
    }
}

/// `validateMetricTarget`.
fn metric_target(target: &MetricTarget, path: &str, e: &mut Errors) {
    let kind = target.type_.as_str();
    if kind.is_empty() {
        e.required(&format!("{path}.type"), "must specify a metric target type");
    }
    if !matches!(kind, "Utilization" | "Value" | "AverageValue") {
        e.invalid(
            &format!("{path}.type"),
            &quote(kind),
            "must be either Utilization, Value, or AverageValue",
        );
    }
    for (field, q) in [("value", &target.value), ("averageValue", &target.average_value)] {
        if q.as_ref().is_some_and(|q| !positive(q)) {
            let shown = q.as_ref().map(|q| quote(&q.0)).unwrap_or_default();
            e.invalid(&format!("{path}.{field}"), &shown, "must be positive");
        }
    }
    if let Some(utilization) = target.average_utilization.filter(|u| *u < 1) {
        e.invalid(
            &format!("{path}.averageUtilization"),
            &utilization.to_string(),
            "must be greater than 0",
        );
    }
}

/// Whether a quantity is above zero (`Sign() == 1`); one that does not parse was refused before.
fn positive(q: &Quantity) -> bool {
    parse_quantity(&q.0).is_some_and(|n| n > 0)
}

/// `validateMetricIdentifier`.
fn metric_identifier(id: &MetricIdentifier, path: &str, e: &mut Errors) {
    let name = format!("{path}.name");
    if id.name.is_empty() {
        e.required(&name, "must specify a metric name");
    } else {
        e.invalid_each(&name, &id.name, path_segment(&id.name));
    }
}

/// `validateBehavior`.
fn behavior(behavior: &HorizontalPodAutoscalerBehavior, e: &mut Errors) {
    if let Some(rules) = &behavior.scale_up {
        scaling_rules(rules, "spec.behavior.scaleUp", e);
    }
    if let Some(rules) = &behavior.scale_down {
        scaling_rules(rules, "spec.behavior.scaleDown", e);
    }
}

/// `validateScalingRules`.
fn scaling_rules(rules: &HPAScalingRules, path: &str, e: &mut Errors) {
    let window = format!("{path}.stabilizationWindowSeconds");
    if let Some(seconds) = rules.stabilization_window_seconds {
        if seconds < 0 {
            e.invalid(&window, &seconds.to_string(), "must be greater than or equal to zero");
        }
        if seconds > MAX_STABILIZATION_WINDOW_SECONDS {
            e.invalid(
                &window,
                &seconds.to_string(),
                &format!("must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}"),
            );
        }
    }
    if let Some(select) = rules.select_policy.as_deref().filter(|s| !SELECT_POLICIES.contains(s)) {
        e.not_supported(&format!("{path}.selectPolicy"), &quote(select), SELECT_POLICIES);
    }
    let policies = rules.policies.as_deref().unwrap_or_default();
    if policies.is_empty() {
        e.required(&format!("{path}.policies"), "must specify at least one Policy");
    }
    for (i, policy) in policies.iter().enumerate() {
        scaling_policy(policy, &format!("{path}.policies[{i}]"), e);
    }
}

/// `validateScalingPolicy`.
fn scaling_policy(policy: &HPAScalingPolicy, path: &str, e: &mut Errors) {
    if !POLICY_TYPES.contains(&policy.type_.as_str()) {
        e.not_supported(&format!("{path}.type"), &quote(&policy.type_), POLICY_TYPES);
    }
    if policy.value <= 0 {
        e.invalid(&format!("{path}.value"), &policy.value.to_string(), "must be greater than zero");
    }
    let period = format!("{path}.periodSeconds");
    if policy.period_seconds <= 0 {
        e.invalid(&period, &policy.period_seconds.to_string(), "must be greater than zero");
    }
    if policy.period_seconds > MAX_PERIOD_SECONDS {
        e.invalid(
            &period,
            &policy.period_seconds.to_string(),
            &format!("must be less than or equal to {MAX_PERIOD_SECONDS}"),
        );
    }
}

/// The quantities of an autoscaler, which must parse for it to decode.
pub(super) fn quantities<'a>(object: &'a HorizontalPodAutoscaler, found: &mut Vec<&'a Quantity>) {
    let Some(spec) = object.spec.as_ref() else { return };
    for metric in spec.metrics.iter().flatten() {
        let targets = [
            metric.object.as_ref().map(|s| &s.target),
            metric.pods.as_ref().map(|s| &s.target),
            metric.resource.as_ref().map(|s| &s.target),
            metric.container_resource.as_ref().map(|s| &s.target),
            metric.external.as_ref().map(|s| &s.target),
        ];
        for target in targets.into_iter().flatten() {
            found.extend(target.value.iter().chain(&target.average_value));
        }
    }
    if let Some(behavior) = &spec.behavior {
        for rules in [&behavior.scale_up, &behavior.scale_down].into_iter().flatten() {
            found.extend(rules.tolerance.iter());
        }
    }
}
