//! Schemas kube-apiserver refuses, refused with its field paths and wording.

mod common;

use carrel_schema::{Reason, Schema};
use common::{refused, schema, ROOT};
use serde_json::json;

fn assert_refused(v: serde_json::Value, expected: &str) {
    let errs = refused(v);
    assert!(errs.iter().any(|e| e == expected), "expected {expected:?} in {errs:#?}");
}

fn spec_with(prop: serde_json::Value) -> serde_json::Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"x": prop}}}})
}

const X: &str = "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x]";

#[test]
fn missing_types() {
    assert_refused(
        json!({"type": "object", "properties": {"spec": {"properties": {}}}}),
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
    );
    assert_refused(
        spec_with(json!({"type": "array", "items": {}})),
        &format!("{X}.items.type: Required value: must not be empty for specified array items"),
    );
    assert_refused(
        json!({"properties": {}}),
        "spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
    );
    assert_refused(
        json!({"type": "string"}),
        r#"spec.versions[0].schema.openAPIV3Schema.type: Invalid value: "string": must be object at the root"#,
    );
}

#[test]
fn arrays_need_items() {
    assert_refused(
        spec_with(json!({"type": "array"})),
        &format!("{X}.items: Required value: must be specified"),
    );
}

#[test]
fn junctions_must_not_carry_types_or_generics() {
    let errs = refused(spec_with(json!({
        "type": "string",
        "anyOf": [{"type": "string", "description": "d", "default": "a", "nullable": true}],
        "allOf": [{"x-kubernetes-preserve-unknown-fields": true}],
        "oneOf": [{"x-kubernetes-list-type": "set"}],
        "not": {"title": "t"}
    })));
    for expected in [
        format!("{X}.anyOf[0].type: Forbidden: must be empty to be structural"),
        format!("{X}.anyOf[0].description: Forbidden: must be empty to be structural"),
        format!("{X}.anyOf[0].default: Forbidden: must be undefined to be structural"),
        format!("{X}.anyOf[0].nullable: Forbidden: must be false to be structural"),
        format!("{X}.allOf[0].x-kubernetes-preserve-unknown-fields: Forbidden: must be false to be structural"),
        format!("{X}.oneOf[0].x-kubernetes-list-type: Forbidden: must be undefined to be structural"),
        format!("{X}.not.title: Forbidden: must be empty to be structural"),
    ] {
        assert!(errs.contains(&expected), "expected {expected:?} in {errs:#?}");
    }
}

#[test]
fn int_or_string_patterns_are_allowed() {
    schema(spec_with(
        json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
    ));
    schema(spec_with(json!({
        "x-kubernetes-int-or-string": true,
        "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+%?$"}]
    })));
    assert_refused(
        spec_with(json!({"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true})),
        &format!("{X}.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"),
    );
}

#[test]
fn junction_properties_must_be_specified_outside() {
    assert_refused(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "anyOf": [{"properties": {"b": {}}}]}),
        "spec.versions[0].schema.openAPIV3Schema.properties[b]: Required value: because it is defined in spec.versions[0].schema.openAPIV3Schema.anyOf[0].properties[b]",
    );
}

#[test]
fn properties_and_additional_properties_are_exclusive() {
    assert_refused(
        spec_with(json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}})),
        &format!("{X}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"),
    );
    assert_refused(
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        "spec.versions[0].schema.openAPIV3Schema.additionalProperties: Forbidden: must not be used at the root",
    );
}

#[test]
fn preserve_unknown_fields_false() {
    assert_refused(
        spec_with(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false})),
        &format!("{X}.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"),
    );
}

#[test]
fn forbidden_keywords() {
    for (keyword, value, expected) in [
        ("$ref", json!("#/definitions/a"), "$ref: Forbidden: $ref is not supported"),
        ("definitions", json!({"a": {"type": "string"}}), "definitions: Forbidden: definitions is not supported"),
        ("dependencies", json!({"a": ["b"]}), "dependencies: Forbidden: dependencies is not supported"),
        ("additionalItems", json!(false), "additionalItems: Forbidden: additionalItems is not supported"),
        ("patternProperties", json!({"^a": {"type": "string"}}), "patternProperties: Forbidden: patternProperties is not supported"),
        ("uniqueItems", json!(true), "uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"),
    ] {
        let mut prop = json!({"type": "object"});
        if keyword == "uniqueItems" || keyword == "additionalItems" {
            prop = json!({"type": "array", "items": {"type": "string"}});
        }
        prop[keyword] = value;
        assert_refused(spec_with(prop), &format!("{X}.{expected}"));
    }
    assert_refused(
        spec_with(json!({"type": "array", "items": [{"type": "string"}]})),
        &format!("{X}.items: Forbidden: items must be a schema object and not an array"),
    );
    assert_refused(
        spec_with(json!({"type": "null"})),
        &format!("{X}.type: Forbidden: type cannot be set to null, use nullable as an alternative"),
    );
    assert_refused(
        spec_with(json!({"type": "strng"})),
        &format!(
            r#"{X}.type: Unsupported value: "strng": supported values: "array", "boolean", "integer", "number", "object", "string""#
        ),
    );
}

#[test]
fn root_metadata_may_only_restrict_name() {
    schema(json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}
    }}}}));
    assert_refused(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
        "spec.versions[0].schema.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
    );
    assert_refused(
        json!({"type": "object", "properties": {"metadata": {"type": "string"}}}),
        r#"spec.versions[0].schema.openAPIV3Schema.properties[metadata].type: Invalid value: "string": must be object"#,
    );
    assert_refused(
        json!({"type": "object", "properties": {"kind": {"type": "integer"}}}),
        r#"spec.versions[0].schema.openAPIV3Schema.properties[kind].type: Invalid value: "integer": must be string"#,
    );
    assert_refused(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "default": {}}}}),
        "spec.versions[0].schema.openAPIV3Schema.properties[metadata].default: Forbidden: must not be set in top-level metadata",
    );
}

#[test]
fn list_types() {
    assert_refused(
        spec_with(json!({"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}, "x-kubernetes-list-map-keys": ["name"]})),
        &format!("{X}.x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty"),
    );
    assert_refused(
        spec_with(json!({"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "map"})),
        &format!("{X}.x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"),
    );
    assert_refused(
        spec_with(
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
        ),
        &format!(
            r#"{X}.items.type: Invalid value: "string": must be object if parent array's x-kubernetes-list-type is map"#
        ),
    );
    assert_refused(
        spec_with(json!({"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})),
        &format!("{X}.items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"),
    );
    assert_refused(
        spec_with(
            json!({"type": "array", "items": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}},
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}),
        ),
        &format!(
            r#"{X}.x-kubernetes-list-map-keys: Invalid value: []string{{"name"}}: entries must all be names of item properties"#
        ),
    );
    assert_refused(
        spec_with(
            json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"}),
        ),
        &format!(
            r#"{X}.x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#
        ),
    );
    assert_refused(
        spec_with(json!({"type": "string", "x-kubernetes-list-type": "set"})),
        &format!(
            r#"{X}.type: Invalid value: "string": must be array if x-kubernetes-list-type is specified"#
        ),
    );
    assert_refused(
        spec_with(
            json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object"}}),
        ),
        &format!(
            r#"{X}.items.x-kubernetes-map-type: Invalid value: "null": must be atomic as item of a list with x-kubernetes-list-type=set"#
        ),
    );
    assert_refused(
        spec_with(json!({"type": "string", "x-kubernetes-map-type": "atomic"})),
        &format!(
            r#"{X}.type: Invalid value: "string": must be object if x-kubernetes-map-type is specified"#
        ),
    );
}

#[test]
fn embedded_resources_must_be_objects() {
    let errs = refused(spec_with(json!({"x-kubernetes-embedded-resource": true})));
    assert!(
        errs.contains(&format!(
            "{X}.type: Required value: must be object if x-kubernetes-embedded-resource is true"
        )),
        "{errs:#?}"
    );
    assert!(
        errs.contains(&format!(
            "{X}.properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
        )),
        "{errs:#?}"
    );
}

#[test]
fn defaults_must_be_valid_and_pruned() {
    assert_refused(
        spec_with(json!({"type": "integer", "default": "three"})),
        &format!(
            r#"{X}.default: Invalid value: "string":  in body must be of type integer: "string""#
        ),
    );
    assert_refused(
        spec_with(
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}}),
        ),
        &format!(
            r#"{X}.default: Invalid value: map[string]interface {{}}{{"a":"x", "b":1}}: must not have unknown fields"#
        ),
    );
    schema(spec_with(json!({"type": "integer", "minimum": 1, "default": 1})));
    assert_refused(
        spec_with(json!({"type": "integer", "minimum": 1, "default": 0})),
        &format!("{X}.default: Invalid value: 0:  in body should be greater than or equal to 1"),
    );
    assert_refused(
        spec_with(json!({"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true, "default": {"apiVersion": "v1"}})),
        &format!("{X}.default.kind: Required value"),
    );
    assert_refused(
        spec_with(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "default": {"n": "x"}}),
        ),
        &format!(
            r#"{X}.default.n: Invalid value: "string": n in body must be of type integer: "string""#
        ),
    );
}

#[test]
fn invalid_patterns() {
    let errs = refused(spec_with(json!({"type": "string", "pattern": "(unclosed"})));
    assert!(
        errs.iter().any(|e| e.starts_with(&format!(
            r#"{X}.pattern: Invalid value: "(unclosed": must be a valid regular expression, but isn't: error parsing regexp: "#
        ))),
        "{errs:#?}"
    );
}

#[test]
fn nullable_root_is_forbidden() {
    assert_refused(
        json!({"type": "object", "nullable": true}),
        "spec.versions[0].schema.openAPIV3Schema.nullable: Forbidden: nullable cannot be true at the root",
    );
}

#[test]
fn every_reason_is_reported_at_once() {
    let errs = Schema::parse(
        &json!({"type": "object", "properties": {"a": {}, "b": {"type": "array"}}}),
        ROOT,
    )
    .err()
    .unwrap_or_default();
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs.iter().all(|e| e.reason == Reason::Required));
}
