//! Pruning and defaulting.

mod common;

use common::schema;
use serde_json::json;

fn job_schema() -> carrel_schema::Schema {
    schema(json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "default": 1},
                    "resources": {
                        "type": "object",
                        "properties": {
                            "gpu": {"type": "object", "properties": {"count": {"type": "integer", "default": 1}, "profile": {"type": "string"}}}
                        }
                    },
                    "containers": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "pullPolicy": {"type": "string", "default": "IfNotPresent"},
                                "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}}}
                            }
                        }
                    },
                    "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"value": {"type": "string", "default": "none"}}}},
                    "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "properties": {"image": {"type": "string"}}}}
                    },
                    "note": {"type": "string", "nullable": true, "default": "n"},
                    "strict": {"type": "string"},
                    "mode": {"type": "string", "default": "fast"}
                }
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    }))
}

#[test]
fn pruning_removes_unknown_fields_at_every_depth() {
    let s = job_schema();
    let mut obj = json!({
        "apiVersion": "gpu.carrel.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "anything": "kept"},
        "extra": 1,
        "spec": {
            "replicas": 2,
            "bogus": true,
            "resources": {"gpu": {"count": 1, "vendor": "x"}},
            "containers": [{"name": "a", "unknown": 1, "ports": [{"port": 80, "foo": 1}]}],
            "labels": {"team": {"value": "ml", "junk": 2}},
            "config": {"anything": {"deep": [1, 2]}, "known": {"a": "x", "b": "pruned"}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"image": "x", "extra": 1}, "other": 1}
        },
        "status": {"free": {"form": true}}
    });
    let pruned = s.prune(&mut obj);
    assert_eq!(
        pruned,
        vec![
            "extra",
            "spec.bogus",
            "spec.config.known.b",
            "spec.containers[0].ports[0].foo",
            "spec.containers[0].unknown",
            "spec.labels.team.junk",
            "spec.resources.gpu.vendor",
            "spec.template.other",
            "spec.template.spec.extra",
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "gpu.carrel.dev/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "j", "anything": "kept"},
            "spec": {
                "replicas": 2,
                "resources": {"gpu": {"count": 1}},
                "containers": [{"name": "a", "ports": [{"port": 80}]}],
                "labels": {"team": {"value": "ml"}},
                "config": {"anything": {"deep": [1, 2]}, "known": {"a": "x"}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"image": "x"}}
            },
            "status": {"free": {"form": true}}
        })
    );
}

#[test]
fn defaults_apply_at_depth_in_arrays_and_maps() {
    let s = job_schema();
    let mut obj = json!({
        "apiVersion": "gpu.carrel.dev/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "j"},
        "spec": {
            "resources": {"gpu": {}},
            "containers": [{"name": "a", "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}, {"name": "b", "pullPolicy": "Always"}],
            "labels": {"team": {}, "tier": {"value": "gold"}},
            "note": null,
            "strict": null,
            "mode": null
        }
    });
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({
            "replicas": 1,
            "resources": {"gpu": {"count": 1}},
            "containers": [
                {"name": "a", "pullPolicy": "IfNotPresent", "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
                {"name": "b", "pullPolicy": "Always"}
            ],
            "labels": {"team": {"value": "none"}, "tier": {"value": "gold"}},
            "note": null,
            "mode": "fast"
        })
    );
}

#[test]
fn defaults_are_defaulted_further() {
    let s = schema(json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "default": {},
        "properties": {"a": {"type": "string", "default": "x"}}
    }}}));
    let mut obj = json!({});
    s.apply_defaults(&mut obj);
    assert_eq!(obj, json!({"spec": {"a": "x"}}));
}

#[test]
fn list_and_map_types_for_apply() {
    let s = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
                "items": {"type": "object", "required": ["name", "protocol"], "properties": {"name": {"type": "string"}, "protocol": {"type": "string"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "args": {"type": "array", "items": {"type": "string"}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
            "matrix": {"type": "array", "items": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}
        }}}}),
    );
    use carrel_schema::{ListType, MapType};
    assert_eq!(
        s.list_type(&["spec", "ports"]),
        Some(ListType::Map(vec!["name".to_string(), "protocol".to_string()]))
    );
    assert_eq!(s.list_type(&["spec", "tags"]), Some(ListType::Set));
    assert_eq!(s.list_type(&["spec", "args"]), Some(ListType::Atomic));
    assert_eq!(s.list_type(&["spec", "matrix", "[]"]), Some(ListType::Set));
    assert_eq!(s.list_type(&["spec", "selector"]), None);
    assert_eq!(s.map_type(&["spec", "selector"]), Some(MapType::Atomic));
    assert_eq!(s.map_type(&["spec"]), Some(MapType::Granular));
    assert_eq!(s.node(&["spec", "ports", "0", "name"]).and_then(|n| n.type_name()), Some("string"));
    assert!(s.node(&["spec", "nope"]).is_none());
}
