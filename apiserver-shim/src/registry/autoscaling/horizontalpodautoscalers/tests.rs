//! Conversion between v1 and v2, defaults, validation and the table of autoscalers.

use serde_json::{json, Value};

use super::conversion::{self, to_v1, to_v2, BEHAVIOR, CONDITIONS, CURRENT_METRICS, METRICS};
use super::*;
use crate::status::Cause;

fn v1_autoscaler(spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    })
}

fn v2_autoscaler(spec: Value) -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": spec,
    })
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
}

fn annotation(object: &Value, key: &str) -> Option<Value> {
    let text = object.pointer("/metadata/annotations")?.get(key)?.as_str()?;
    Some(serde_json::from_str(text).expect("an annotation of JSON"))
}

/// A v2 object using everything v1 cannot say.
fn rich_v2() -> Value {
    json!({
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "default", "annotations": {"team": "ml"}},
        "spec": {
            "scaleTargetRef": deployment(),
            "minReplicas": 2,
            "maxReplicas": 10,
            "metrics": [
                {"type": "Resource", "resource": {"name": "memory",
                    "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                {"type": "Pods", "pods": {"metric": {"name": "requests-per-second"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}},
                {"type": "External", "external": {
                    "metric": {"name": "queue", "selector": {"matchLabels": {"q": "jobs"}}},
                    "target": {"type": "Value", "value": "30"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}},
            ],
            "behavior": {
                "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
            },
        },
        "status": {
            "currentReplicas": 3,
            "desiredReplicas": 4,
            "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageValue": "250m", "averageUtilization": 62}}},
                {"type": "Pods", "pods": {"metric": {"name": "requests-per-second"},
                    "current": {"averageValue": "12"}}},
            ],
            "conditions": [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale",
                 "lastTransitionTime": "2025-01-02T03:04:05Z",
                 "message": "recommended size matches current size"},
            ],
        },
    })
}

#[test]
fn the_v1_cpu_target_is_a_v2_cpu_utilization_metric_and_back() {
    let v1 = v1_autoscaler(json!({
        "scaleTargetRef": deployment(), "minReplicas": 1, "maxReplicas": 3,
        "targetCPUUtilizationPercentage": 50,
    }));
    let v2 = to_v2(&v1);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}])
    );
    assert_eq!(v2["spec"]["scaleTargetRef"], deployment());
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
    // Go writes v2's status as a struct: desiredReplicas and a null currentMetrics.
    assert_eq!(v2["status"], json!({"desiredReplicas": 0, "currentMetrics": null}));

    let back = to_v1(&v2);
    assert_eq!(back["apiVersion"], "autoscaling/v1");
    assert_eq!(back["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(back["spec"]["maxReplicas"], 3);
    assert_eq!(back["status"], json!({"currentReplicas": 0, "desiredReplicas": 0}));
    assert!(back["metadata"].get("annotations").is_none(), "{back}");
}

#[test]
fn a_v1_autoscaler_without_a_target_gets_cpu_at_80_percent() {
    let v1 = v1_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 3}));
    let v2 = to_v2(&v1);
    assert_eq!(v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"], 80);
    assert_eq!(to_v1(&v2)["spec"]["targetCPUUtilizationPercentage"], 80);
}

#[test]
fn what_v1_cannot_say_travels_in_annotations_and_comes_back() {
    let v2 = rich_v2();
    let v1 = to_v1(&v2);
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["spec"]["minReplicas"], 2);
    assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 62);
    assert_eq!(v1["status"]["currentReplicas"], 3);
    assert_eq!(v1["metadata"]["annotations"]["team"], "ml");
    // The other metrics, in v1's MetricSpec form, as Go marshals them (field order too).
    let metrics = v1["metadata"]["annotations"][METRICS].as_str().expect("metrics annotation");
    assert_eq!(
        metrics,
        r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"500Mi"}},{"type":"Pods","pods":{"metricName":"requests-per-second","targetAverageValue":"10"}},{"type":"External","external":{"metricName":"queue","metricSelector":{"matchLabels":{"q":"jobs"}},"targetValue":"30"}}]"#
    );
    // The behavior as the internal Go type marshals: Go's field names, nil as null.
    assert_eq!(
        v1["metadata"]["annotations"][BEHAVIOR].as_str().expect("behavior annotation"),
        r#"{"ScaleUp":null,"ScaleDown":{"StabilizationWindowSeconds":300,"SelectPolicy":"Min","Policies":[{"Type":"Pods","Value":1,"PeriodSeconds":60}],"Tolerance":null}}"#
    );
    assert_eq!(
        annotation(&v1, CURRENT_METRICS).expect("current metrics"),
        json!([
            {"type": "Resource", "resource": {"name": "cpu", "currentAverageUtilization": 62,
                "currentAverageValue": "250m"}},
            {"type": "Pods", "pods": {"metricName": "requests-per-second",
                "currentAverageValue": "12"}},
        ])
    );
    assert_eq!(annotation(&v1, CONDITIONS).expect("conditions")[0]["reason"], "ReadyForNewScale");

    let back = to_v2(&v1);
    assert_eq!(back["spec"], v2["spec"], "the spec comes back");
    assert_eq!(back["status"]["currentMetrics"], v2["status"]["currentMetrics"]);
    assert_eq!(back["status"]["conditions"], v2["status"]["conditions"]);
    assert_eq!(back["status"]["currentReplicas"], 3);
    assert_eq!(back["metadata"]["annotations"], json!({"team": "ml"}), "no annotation is stored");
}

#[test]
fn the_cpu_target_goes_last_when_metrics_come_back_from_v1() {
    // As kube-apiserver's conversion appends it after the annotation's metrics.
    let mut v2 = rich_v2();
    let metrics = v2["spec"]["metrics"].as_array_mut().expect("metrics");
    let cpu = metrics.pop().expect("cpu");
    metrics.insert(0, cpu);
    let back = to_v2(&to_v1(&v2));
    let types: Vec<&str> = back["spec"]["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| m["resource"]["name"].as_str().or(m["type"].as_str()).unwrap_or_default())
        .collect();
    assert_eq!(types, ["memory", "Pods", "External", "cpu"]);
}

#[test]
fn a_v1_write_may_carry_metrics_and_behavior_in_annotations() {
    let mut v1 = v1_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 5, "targetCPUUtilizationPercentage": 70,
    }));
    v1["metadata"]["annotations"] = json!({
        METRICS: r#"[{"type":"Object","object":{"target":{"kind":"Ingress","name":"main"},"metricName":"hits","targetValue":"2k"}}]"#,
        BEHAVIOR: r#"{"scaleUp":{"policies":[{"type":"Percent","value":50,"periodSeconds":30}]}}"#,
    });
    let v2 = to_v2(&v1);
    assert_eq!(
        v2["spec"]["metrics"][0],
        json!({"type": "Object", "object": {
            "describedObject": {"kind": "Ingress", "name": "main"},
            "metric": {"name": "hits"},
            "target": {"type": "Value", "value": "2k"}}})
    );
    assert_eq!(v2["spec"]["metrics"][1]["resource"]["target"]["averageUtilization"], 70);
    assert_eq!(
        v2["spec"]["behavior"],
        json!({"scaleUp": {"policies": [{"type": "Percent", "value": 50, "periodSeconds": 30}]}})
    );
}

#[test]
fn annotations_that_do_not_decode_are_ignored_and_never_stored() {
    let mut v1 = v1_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 5}));
    v1["metadata"]["annotations"] = json!({
        METRICS: "not json",
        BEHAVIOR: r#"{"ScaleUp":null,"ScaleDown":null}"#,
        CURRENT_METRICS: r#"[{"type":"Pods","pods":{"metricName":"x","currentAverageValue":"bad"}}]"#,
        CONDITIONS: r#"{"not":"a list"}"#,
    });
    let v2 = to_v2(&v1);
    assert_eq!(v2["spec"]["metrics"].as_array().map(Vec::len), Some(1), "only the default");
    assert!(v2["spec"].get("behavior").is_none(), "an empty behavior is none");
    assert_eq!(v2["status"]["currentMetrics"], Value::Null);
    assert!(v2["status"].get("conditions").is_none());
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
}

#[test]
fn v2_defaults_fill_in_replicas_metrics_and_every_scaling_rule() {
    let mut object = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
    }));
    HorizontalPodAutoscalers.defaults(&mut object);
    let spec = &object["spec"];
    assert_eq!(spec["minReplicas"], 1);
    assert_eq!(
        spec["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );
    assert_eq!(
        spec["behavior"]["scaleUp"],
        json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15},
            {"type": "Percent", "value": 100, "periodSeconds": 15}]})
    );
    assert_eq!(
        spec["behavior"]["scaleDown"],
        json!({"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]})
    );

    // No behavior given, none defaulted; given metrics are kept.
    let mut plain = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "minReplicas": 2, "maxReplicas": 3,
        "metrics": [{"type": "Resource", "resource": {"name": "memory",
            "target": {"type": "Utilization", "averageUtilization": 60}}}],
    }));
    HorizontalPodAutoscalers.defaults(&mut plain);
    assert!(plain["spec"].get("behavior").is_none());
    assert_eq!(plain["spec"]["minReplicas"], 2);
    assert_eq!(plain["spec"]["metrics"][0]["resource"]["name"], "memory");
}

fn causes(rt: &ResourceType, object: &Value) -> Vec<(String, String)> {
    let mut object = object.clone();
    rt.strategy.defaults(&mut object);
    match crate::validation::validate(rt, &object, None) {
        Ok(()) => Vec::new(),
        Err(e) => {
            assert_eq!(e.code(), 422, "{}", e.message());
            e.causes().iter().map(|c: &Cause| (c.field.clone(), c.message.clone())).collect()
        }
    }
}

fn cause(field: &str, message: &str) -> (String, String) {
    (field.to_owned(), message.to_owned())
}

#[test]
fn replicas_and_the_target_reference_are_checked_in_kubes_words() {
    let zero_max = v2_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 0}));
    assert_eq!(
        causes(&TYPE, &zero_max),
        [
            cause("spec.maxReplicas", "Invalid value: 0: must be greater than 0"),
            cause(
                "spec.maxReplicas",
                "Invalid value: 0: must be greater than or equal to `minReplicas`"
            ),
        ]
    );
    let zero_min =
        v2_autoscaler(json!({"scaleTargetRef": deployment(), "minReplicas": 0, "maxReplicas": 3}));
    assert_eq!(
        causes(&TYPE, &zero_min),
        [
            cause("spec.minReplicas", "Invalid value: 0: must be greater than or equal to 1"),
            cause(
                "spec.metrics",
                "Forbidden: must specify at least one Object or External metric to support \
                 scaling to zero replicas"
            ),
        ]
    );
    let no_ref = v2_autoscaler(json!({"scaleTargetRef": {"name": "a/b"}, "maxReplicas": 3}));
    assert_eq!(
        causes(&TYPE, &no_ref),
        [
            cause("spec.scaleTargetRef.kind", "Required value"),
            cause("spec.scaleTargetRef.name", "Invalid value: \"a/b\": may not contain '/'"),
        ]
    );
    let fine = v2_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 3}));
    assert_eq!(causes(&TYPE, &fine), []);
}

#[test]
fn metric_sources_are_checked_in_kubes_words() {
    let with = |metric: Value| {
        v2_autoscaler(
            json!({"scaleTargetRef": deployment(), "maxReplicas": 3, "metrics": [metric]}),
        )
    };
    assert_eq!(
        causes(
            &TYPE,
            &with(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 0}}}))
        ),
        [cause(
            "spec.metrics[0].resource.target.averageUtilization",
            "Invalid value: 0: must be greater than 0"
        )]
    );
    assert_eq!(
        causes(
            &TYPE,
            &with(json!({"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 50, "averageValue": "1"}}}))
        ),
        [cause(
            "spec.metrics[0].resource.target.averageValue",
            "Forbidden: may not set both a target raw value and a target utilization"
        )]
    );
    let cpu = json!({"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}});
    assert_eq!(
        causes(&TYPE, &with(json!({"type": "Pods", "resource": cpu}))),
        [cause(
            "spec.metrics[0].pods",
            "Required value: must populate information for the given metric source"
        )]
    );
    let rps =
        json!({"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1"}});
    assert_eq!(
        causes(&TYPE, &with(json!({"type": "Resource", "resource": cpu, "pods": rps}))),
        [cause("spec.metrics[0].pods", "Forbidden: must populate the given metric source only")]
    );
    assert_eq!(
        causes(&TYPE, &with(json!({"type": "Cpu"}))),
        [cause(
            "spec.metrics[0].type",
            "Unsupported value: \"Cpu\": supported values: \"ContainerResource\", \"External\", \
             \"Object\", \"Pods\", \"Resource\""
        )]
    );
    assert_eq!(
        causes(
            &TYPE,
            &with(json!({"type": "Pods", "pods": {"metric": {"name": ""},
                "target": {"type": "Average", "averageValue": "-1"}}}))
        ),
        [
            cause("spec.metrics[0].pods.metric.name", "Required value: must specify a metric name"),
            cause(
                "spec.metrics[0].pods.target.type",
                "Invalid value: \"Average\": must be either Utilization, Value, or AverageValue"
            ),
            cause(
                "spec.metrics[0].pods.target.averageValue",
                "Invalid value: \"-1\": must be positive"
            ),
        ]
    );
}

#[test]
fn scaling_rules_are_checked_in_kubes_words() {
    let object = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3,
        "behavior": {"scaleUp": {"selectPolicy": "Most", "stabilizationWindowSeconds": 4000,
            "policies": [{"type": "Nodes", "value": 0, "periodSeconds": 2000}]}},
    }));
    assert_eq!(
        causes(&TYPE, &object),
        [
            cause(
                "spec.behavior.scaleUp.stabilizationWindowSeconds",
                "Invalid value: 4000: must be less than or equal to 3600"
            ),
            cause(
                "spec.behavior.scaleUp.selectPolicy",
                "Unsupported value: \"Most\": supported values: \"Disabled\", \"Max\", \"Min\""
            ),
            cause(
                "spec.behavior.scaleUp.policies[0].type",
                "Unsupported value: \"Nodes\": supported values: \"Percent\", \"Pods\""
            ),
            cause(
                "spec.behavior.scaleUp.policies[0].value",
                "Invalid value: 0: must be greater than zero"
            ),
            cause(
                "spec.behavior.scaleUp.policies[0].periodSeconds",
                "Invalid value: 2000: must be less than or equal to 1800"
            ),
        ]
    );
    let no_policies = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3,
        "behavior": {"scaleDown": {"policies": []}},
    }));
    assert_eq!(
        causes(&TYPE, &no_policies),
        [cause(
            "spec.behavior.scaleDown.policies",
            "Required value: must specify at least one Policy"
        )]
    );
}

#[test]
fn v1_objects_are_checked_converted_with_v2_field_paths() {
    let zero_target = v1_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3, "targetCPUUtilizationPercentage": 0,
    }));
    assert_eq!(
        causes(&V1, &zero_target),
        [cause(
            "spec.metrics[0].resource.target.averageUtilization",
            "Invalid value: 0: must be greater than 0"
        )]
    );
    let zero_max =
        v1_autoscaler(json!({"scaleTargetRef": {"kind": "Deployment"}, "maxReplicas": 0}));
    assert_eq!(
        causes(&V1, &zero_max),
        [
            cause("spec.maxReplicas", "Invalid value: 0: must be greater than 0"),
            cause(
                "spec.maxReplicas",
                "Invalid value: 0: must be greater than or equal to `minReplicas`"
            ),
            cause("spec.scaleTargetRef.name", "Required value"),
        ]
    );
    // A value v1's type cannot hold is refused in v1's words.
    let bad = v1_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": "three"}));
    let e = crate::validation::validate(&V1, &bad, None).expect_err("refused");
    assert_eq!(e.code(), 400);
    assert!(e.message().starts_with("HorizontalPodAutoscaler in version \"v1\" cannot be handled"));
}

#[test]
fn a_bad_quantity_in_a_target_is_a_bad_request() {
    let object = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3,
        "metrics": [{"type": "Pods", "pods": {"metric": {"name": "rps"},
            "target": {"type": "AverageValue", "averageValue": "lots"}}}],
    }));
    let e = crate::validation::validate(&TYPE, &object, None).expect_err("refused");
    assert_eq!(e.code(), 400);
}

#[test]
fn the_tolerance_of_a_scaling_rule_is_dropped_while_its_gate_is_off() {
    let mut object = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "maxReplicas": 3,
        "behavior": {"scaleUp": {"tolerance": "0.05"}},
    }));
    HorizontalPodAutoscalers.create_defaults(&mut object);
    assert!(object.pointer("/spec/behavior/scaleUp/tolerance").is_none(), "{object}");
}

#[test]
fn the_table_prints_kubes_columns_and_targets() {
    let names: Vec<Value> = columns().iter().map(|c| c["name"].clone()).collect();
    assert_eq!(
        names,
        ["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"].map(Value::from)
    );
    let mut object = v2_autoscaler(json!({
        "scaleTargetRef": deployment(), "minReplicas": 1, "maxReplicas": 3,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}],
    }));
    object["status"] = json!({"desiredReplicas": 0, "currentMetrics": null});
    let row = cells(&object);
    assert_eq!(
        row[..6],
        [
            json!("web"),
            json!("Deployment/web"),
            json!("cpu: <unknown>/50%"),
            json!("1"),
            json!(3),
            json!(0)
        ]
    );
    // v1 prints the same, from the converted object.
    let v1 = to_v1(&object);
    assert_eq!(HorizontalPodAutoscalersV1.cells(&V1, &v1)[..6], row[..6]);

    let rich = rich_v2();
    assert_eq!(
        cells(&rich)[2],
        json!("memory: 250m/500Mi, 12/10 + 2 more..."),
        "the first two, each against the status at its position"
    );
    assert_eq!(cells(&rich)[3], json!("2"));
    let unset = v2_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 3}));
    assert_eq!(cells(&unset)[2..4], [json!("<none>"), json!("<unset>")]);
}

#[test]
fn v2_status_is_written_as_go_writes_it() {
    let mut object = v2_autoscaler(json!({"scaleTargetRef": deployment(), "maxReplicas": 3}));
    go_status(&mut object);
    assert_eq!(object["status"], json!({"desiredReplicas": 0, "currentMetrics": null}));
    object["status"] = json!({"currentReplicas": 0, "desiredReplicas": 2, "currentMetrics": [],
        "conditions": []});
    go_status(&mut object);
    assert_eq!(object["status"], json!({"desiredReplicas": 2, "currentMetrics": null}));
}

#[test]
fn a_v1_update_keeps_the_stored_status_and_a_status_update_the_stored_spec() {
    let stored = to_v1(&rich_v2());
    // A v1 client sends the spec without the annotations that carry the status.
    let mut sent = stored.clone();
    sent["metadata"]["annotations"] =
        json!({"team": "ml", METRICS: stored["metadata"]["annotations"][METRICS]});
    sent["status"] = json!({});
    HorizontalPodAutoscalersV1.prepare_main_update(&V1, &stored, &mut sent);
    assert_eq!(sent["status"], stored["status"]);
    let back = to_v2(&sent);
    assert_eq!(back["status"]["conditions"], rich_v2()["status"]["conditions"]);
    assert_eq!(back["status"]["currentMetrics"], rich_v2()["status"]["currentMetrics"]);

    let mut status = stored.clone();
    status["spec"]["maxReplicas"] = json!(99);
    status["status"]["desiredReplicas"] = json!(7);
    if let Some(annotations) = status["metadata"]["annotations"].as_object_mut() {
        annotations.remove(CONDITIONS);
    }
    let merged = HorizontalPodAutoscalersV1.prepare_status_update(&stored, status);
    assert_eq!(merged["spec"]["maxReplicas"], 10, "the spec is the stored one");
    assert_eq!(merged["status"]["desiredReplicas"], 7);
    assert!(to_v2(&merged)["status"].get("conditions").is_none(), "the status is the one sent");
    assert!(annotation(&merged, METRICS).is_some(), "the spec's annotations are kept");
}

#[test]
fn every_round_trip_annotation_is_dropped() {
    let mut metadata = json!({"annotations": {METRICS: "[]", BEHAVIOR: "{}", CURRENT_METRICS: "[]",
        CONDITIONS: "[]", "other": "kept"}});
    conversion::drop_round_trip(&mut metadata);
    assert_eq!(metadata, json!({"annotations": {"other": "kept"}}));
}
