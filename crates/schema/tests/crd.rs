//! Realistic CRD schemas through the whole pipeline: parse, prune, default, validate.

mod common;

use carrel_schema::{ListType, Reason};
use common::{messages, schema};
use serde_json::{json, Value};

/// The `v1` schema of a `TrainingJob.gpu.carrel.dev` CRD, as controller-gen would write it.
fn training_job_schema() -> Value {
    json!({
        "description": "TrainingJob runs a distributed training job on GPU slices.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "minLength": 1},
                    "replicas": {"type": "integer", "format": "int32", "minimum": 1, "default": 1},
                    "gpus": {
                        "type": "object",
                        "properties": {
                            "profile": {"type": "string", "enum": ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]},
                            "count": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1}
                        }
                    },
                    "ports": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name", "protocol"],
                        "items": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {
                                "name": {"type": "string"},
                                "protocol": {"type": "string", "enum": ["TCP", "UDP"], "default": "TCP"},
                                "port": {"type": "integer", "minimum": 1, "maximum": 65535}
                            }
                        }
                    },
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "deadline": {"type": "string", "format": "date-time"}
                }
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

#[test]
fn training_job_crd() {
    let s = schema(training_job_schema());
    assert_eq!(
        s.list_type(&["spec", "ports"]),
        Some(ListType::Map(vec!["name".to_string(), "protocol".to_string()]))
    );

    let mut job = json!({
        "apiVersion": "gpu.carrel.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "image": "registry.example.com/train:1.2",
            "gpus": {"profile": "3g.40gb"},
            "ports": [{"name": "nccl", "port": 29500}, {"name": "nccl", "protocol": "UDP", "port": 29501}],
            "env": {"EPOCHS": "3"},
            "deadline": "2030-01-01T00:00:00Z",
            "priority": "high"
        },
        "status": {"phase": "Pending", "conditions": [{"type": "Ready"}]}
    });
    assert_eq!(s.prune(&mut job), vec!["spec.priority"]);
    s.apply_defaults(&mut job);
    assert_eq!(job["spec"]["replicas"], json!(1));
    assert_eq!(job["spec"]["gpus"]["count"], json!(1));
    assert_eq!(job["spec"]["ports"][0]["protocol"], json!("TCP"));
    assert!(s.validate(&job, None).is_empty(), "{:?}", messages(&s.validate(&job, None)));

    let bad = json!({
        "apiVersion": "gpu.carrel.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "bad"},
        "spec": {
            "replicas": 0,
            "gpus": {"profile": "4g.40gb", "count": 9},
            "ports": [{"name": "a", "protocol": "TCP", "port": 1}, {"name": "a", "protocol": "TCP", "port": 70000}],
            "env": {"A": 1},
            "deadline": "soon"
        }
    });
    let errs = s.validate(&bad, None);
    let got = messages(&errs);
    let want = [
        "spec.deadline: Invalid value: \"soon\": spec.deadline in body must be of type date-time: \"soon\"",
        "spec.env.A: Invalid value: \"integer\": spec.env.A in body must be of type string: \"integer\"",
        "spec.gpus.count: Invalid value: 9: spec.gpus.count in body should be less than or equal to 8",
        "spec.gpus.profile: Unsupported value: \"4g.40gb\": supported values: \"1g.10gb\", \"2g.20gb\", \"3g.40gb\", \"7g.80gb\"",
        "spec.ports[1].port: Invalid value: 70000: spec.ports[1].port in body should be less than or equal to 65535",
        "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
        "spec.image: Required value",
        "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"a\", \"protocol\":\"TCP\"}",
    ];
    assert_eq!(got, want);
    let causes: Vec<&str> = errs.iter().map(|e| e.reason.as_cause()).collect();
    assert_eq!(
        causes,
        vec![
            "FieldValueTypeInvalid",
            "FieldValueTypeInvalid",
            "FieldValueInvalid",
            "FieldValueNotSupported",
            "FieldValueInvalid",
            "FieldValueInvalid",
            "FieldValueRequired",
            "FieldValueDuplicate",
        ]
    );
}

#[test]
fn autoscaler_crd_with_cel_rules() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["minReplicas", "maxReplicas"],
                "x-kubernetes-validations": [
                    {"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must be less than or equal to maxReplicas"},
                    {"rule": "!has(self.targetRef) || self.targetRef.kind in ['Deployment', 'TrainingJob']",
                     "messageExpression": "'cannot scale a ' + self.targetRef.kind", "fieldPath": ".targetRef.kind"}
                ],
                "properties": {
                    "minReplicas": {"type": "integer", "minimum": 0},
                    "maxReplicas": {"type": "integer", "minimum": 1},
                    "targetRef": {
                        "type": "object",
                        "required": ["kind", "name"],
                        "x-kubernetes-map-type": "atomic",
                        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "targetRef is immutable"}],
                        "properties": {"kind": {"type": "string"}, "name": {"type": "string"}}
                    }
                }
            }
        }
    }));
    let obj = |min: i64, max: i64, kind: &str, name: &str| {
        json!({
            "apiVersion": "gpu.carrel.dev/v1",
            "kind": "Autoscaler",
            "metadata": {"name": "a"},
            "spec": {"minReplicas": min, "maxReplicas": max, "targetRef": {"kind": kind, "name": name}}
        })
    };
    assert!(s.validate(&obj(1, 4, "TrainingJob", "llama"), None).is_empty());

    let errs = s.validate(&obj(5, 4, "StatefulSet", "db"), None);
    assert_eq!(
        messages(&errs),
        vec![
            r#"spec: Invalid value: "object": minReplicas must be less than or equal to maxReplicas"#,
            r#"spec.targetRef.kind: Invalid value: "object": cannot scale a StatefulSet"#,
        ]
    );
    assert!(errs.iter().all(|e| e.reason == Reason::Invalid));

    let old = obj(1, 4, "TrainingJob", "llama");
    let errs = s.validate(&obj(1, 4, "TrainingJob", "other"), Some(&old));
    assert_eq!(
        messages(&errs),
        vec![r#"spec.targetRef: Invalid value: "object": targetRef is immutable"#]
    );
}
