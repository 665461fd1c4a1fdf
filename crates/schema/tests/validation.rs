//! Each validation keyword accepts a good value and refuses a bad one with kube-apiserver's field
//! path, reason and message.

mod common;

use carrel_schema::Reason;
use common::{check_spec, messages, schema};
use serde_json::{json, Value};

/// `(name, spec properties, good spec, bad spec, field, reason, message)`
type Case = (&'static str, Value, Value, Value, &'static str, Reason, &'static str);

fn cases() -> Vec<Case> {
    vec![
        (
            "type integer",
            json!({"replicas": {"type": "integer"}}),
            json!({"replicas": 3}),
            json!({"replicas": "string"}),
            "spec.replicas",
            Reason::TypeInvalid,
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
        ),
        (
            "type integer refuses a fraction",
            json!({"replicas": {"type": "integer"}}),
            json!({"replicas": 3.0}),
            json!({"replicas": 3.5}),
            "spec.replicas",
            Reason::TypeInvalid,
            r#"spec.replicas: Invalid value: "number": spec.replicas in body must be of type integer: "number""#,
        ),
        (
            "type number",
            json!({"ratio": {"type": "number"}}),
            json!({"ratio": 1}),
            json!({"ratio": true}),
            "spec.ratio",
            Reason::TypeInvalid,
            r#"spec.ratio: Invalid value: "boolean": spec.ratio in body must be of type number: "boolean""#,
        ),
        (
            "type string",
            json!({"image": {"type": "string"}}),
            json!({"image": "nginx"}),
            json!({"image": 5}),
            "spec.image",
            Reason::TypeInvalid,
            r#"spec.image: Invalid value: "integer": spec.image in body must be of type string: "integer""#,
        ),
        (
            "type boolean",
            json!({"paused": {"type": "boolean"}}),
            json!({"paused": false}),
            json!({"paused": "no"}),
            "spec.paused",
            Reason::TypeInvalid,
            r#"spec.paused: Invalid value: "string": spec.paused in body must be of type boolean: "string""#,
        ),
        (
            "type array",
            json!({"args": {"type": "array", "items": {"type": "string"}}}),
            json!({"args": ["a"]}),
            json!({"args": {"a": 1}}),
            "spec.args",
            Reason::TypeInvalid,
            r#"spec.args: Invalid value: "object": spec.args in body must be of type array: "object""#,
        ),
        (
            "type object",
            json!({"env": {"type": "object", "additionalProperties": {"type": "string"}}}),
            json!({"env": {"A": "1"}}),
            json!({"env": ["A"]}),
            "spec.env",
            Reason::TypeInvalid,
            r#"spec.env: Invalid value: "array": spec.env in body must be of type object: "array""#,
        ),
        (
            "nullable",
            json!({"note": {"type": "string"}}),
            json!({"note": "x"}),
            json!({"note": null}),
            "spec.note",
            Reason::TypeInvalid,
            r#"spec.note: Invalid value: "null": spec.note in body must be of type string: "null""#,
        ),
        (
            "required",
            json!({"image": {"type": "string"}, "holder": {"type": "object", "required": ["image"], "properties": {"image": {"type": "string"}}}}),
            json!({"holder": {"image": "x"}}),
            json!({"holder": {}}),
            "spec.holder.image",
            Reason::Required,
            "spec.holder.image: Required value",
        ),
        (
            "enum",
            json!({"profile": {"type": "string", "enum": ["1g.10gb", "2g.20gb"]}}),
            json!({"profile": "2g.20gb"}),
            json!({"profile": "9g"}),
            "spec.profile",
            Reason::NotSupported,
            r#"spec.profile: Unsupported value: "9g": supported values: "1g.10gb", "2g.20gb""#,
        ),
        (
            "enum of numbers",
            json!({"size": {"type": "integer", "enum": [1, 2, 4]}}),
            json!({"size": 4}),
            json!({"size": 3}),
            "spec.size",
            Reason::NotSupported,
            r#"spec.size: Unsupported value: 3: supported values: "1", "2", "4""#,
        ),
        (
            "pattern",
            json!({"name": {"type": "string", "pattern": "^[a-z]+$"}}),
            json!({"name": "abc"}),
            json!({"name": "ABC"}),
            "spec.name",
            Reason::Invalid,
            r#"spec.name: Invalid value: "ABC": spec.name in body should match '^[a-z]+$'"#,
        ),
        (
            "pattern digits are ASCII",
            json!({"code": {"type": "string", "pattern": "^\\d+$"}}),
            json!({"code": "42"}),
            json!({"code": "٤٢"}),
            "spec.code",
            Reason::Invalid,
            r#"spec.code: Invalid value: "٤٢": spec.code in body should match '^\d+$'"#,
        ),
        (
            "minimum",
            json!({"replicas": {"type": "integer", "minimum": 1}}),
            json!({"replicas": 1}),
            json!({"replicas": 0}),
            "spec.replicas",
            Reason::Invalid,
            "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
        ),
        (
            "maximum",
            json!({"replicas": {"type": "integer", "maximum": 8}}),
            json!({"replicas": 8}),
            json!({"replicas": 9}),
            "spec.replicas",
            Reason::Invalid,
            "spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 8",
        ),
        (
            "exclusiveMinimum",
            json!({"ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true}}),
            json!({"ratio": 0.5}),
            json!({"ratio": 0.0}),
            "spec.ratio",
            Reason::Invalid,
            "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
        ),
        (
            "exclusiveMaximum",
            json!({"ratio": {"type": "number", "maximum": 1.5, "exclusiveMaximum": true}}),
            json!({"ratio": 1.25}),
            json!({"ratio": 1.5}),
            "spec.ratio",
            Reason::Invalid,
            "spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1.5",
        ),
        (
            "multipleOf",
            json!({"mem": {"type": "integer", "multipleOf": 4}}),
            json!({"mem": 8}),
            json!({"mem": 6}),
            "spec.mem",
            Reason::Invalid,
            "spec.mem: Invalid value: 6: spec.mem in body should be a multiple of 4",
        ),
        (
            "multipleOf a fraction",
            json!({"share": {"type": "number", "multipleOf": 0.25}}),
            json!({"share": 0.75}),
            json!({"share": 0.3}),
            "spec.share",
            Reason::Invalid,
            "spec.share: Invalid value: 0.3: spec.share in body should be a multiple of 0.25",
        ),
        (
            "maxLength counts characters",
            json!({"name": {"type": "string", "maxLength": 3}}),
            json!({"name": "äöü"}),
            json!({"name": "abcd"}),
            "spec.name",
            Reason::TooLong,
            "spec.name: Too long: may not be more than 3 bytes",
        ),
        (
            "minLength",
            json!({"name": {"type": "string", "minLength": 2}}),
            json!({"name": "ab"}),
            json!({"name": "a"}),
            "spec.name",
            Reason::Invalid,
            r#"spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long"#,
        ),
        (
            "maxItems",
            json!({"args": {"type": "array", "items": {"type": "string"}, "maxItems": 2}}),
            json!({"args": ["a", "b"]}),
            json!({"args": ["a", "b", "c"]}),
            "spec.args",
            Reason::TooMany,
            "spec.args: Too many: 3: must have at most 2 items",
        ),
        (
            "minItems",
            json!({"args": {"type": "array", "items": {"type": "string"}, "minItems": 1}}),
            json!({"args": ["a"]}),
            json!({"args": []}),
            "spec.args",
            Reason::Invalid,
            "spec.args: Invalid value: 0: spec.args in body should have at least 1 items",
        ),
        (
            "maxProperties",
            json!({"env": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}}),
            json!({"env": {"A": "1"}}),
            json!({"env": {"A": "1", "B": "2"}}),
            "spec.env",
            Reason::TooMany,
            "spec.env: Too many: 2: must have at most 1 item",
        ),
        (
            "minProperties",
            json!({"env": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1}}),
            json!({"env": {"A": "1"}}),
            json!({"env": {}}),
            "spec.env",
            Reason::Invalid,
            "spec.env: Invalid value: 0: spec.env in body should have at least 1 properties",
        ),
        (
            "items",
            json!({"ports": {"type": "array", "items": {"type": "integer", "maximum": 65535}}}),
            json!({"ports": [80, 443]}),
            json!({"ports": [80, 70000]}),
            "spec.ports[1]",
            Reason::Invalid,
            "spec.ports[1]: Invalid value: 70000: spec.ports[1] in body should be less than or equal to 65535",
        ),
        (
            "additionalProperties schema",
            json!({"env": {"type": "object", "additionalProperties": {"type": "string"}}}),
            json!({"env": {"A": "1"}}),
            json!({"env": {"A": 1}}),
            "spec.env.A",
            Reason::TypeInvalid,
            r#"spec.env.A: Invalid value: "integer": spec.env.A in body must be of type string: "integer""#,
        ),
        (
            "additionalProperties false",
            json!({"opts": {"type": "object", "additionalProperties": false}}),
            json!({"opts": {}}),
            json!({"opts": {"x": 1}}),
            "spec.opts",
            Reason::Invalid,
            r#"spec.opts: Invalid value: "x": spec.opts.x in body is a forbidden property"#,
        ),
        (
            "format int32 refuses a fraction",
            json!({"port": {"type": "integer", "format": "int32"}}),
            json!({"port": 8080}),
            json!({"port": 1.5}),
            "spec.port",
            Reason::TypeInvalid,
            r#"spec.port: Invalid value: "float64": spec.port in body must be of type int32: "float64""#,
        ),
        (
            "format date-time",
            json!({"at": {"type": "string", "format": "date-time"}}),
            json!({"at": "2024-05-01T10:00:00Z"}),
            json!({"at": "tomorrow"}),
            "spec.at",
            Reason::TypeInvalid,
            r#"spec.at: Invalid value: "tomorrow": spec.at in body must be of type date-time: "tomorrow""#,
        ),
        (
            "format date",
            json!({"day": {"type": "string", "format": "date"}}),
            json!({"day": "2024-05-01"}),
            json!({"day": "2024-13-01"}),
            "spec.day",
            Reason::TypeInvalid,
            r#"spec.day: Invalid value: "2024-13-01": spec.day in body must be of type date: "2024-13-01""#,
        ),
        (
            "format byte",
            json!({"blob": {"type": "string", "format": "byte"}}),
            json!({"blob": "aGVsbG8="}),
            json!({"blob": "%%%"}),
            "spec.blob",
            Reason::TypeInvalid,
            r#"spec.blob: Invalid value: "%%%": spec.blob in body must be of type byte: "%%%""#,
        ),
        (
            "format uuid",
            json!({"id": {"type": "string", "format": "uuid"}}),
            json!({"id": "123e4567-e89b-12d3-a456-426614174000"}),
            json!({"id": "nope"}),
            "spec.id",
            Reason::TypeInvalid,
            r#"spec.id: Invalid value: "nope": spec.id in body must be of type uuid: "nope""#,
        ),
        (
            "format hostname",
            json!({"host": {"type": "string", "format": "hostname"}}),
            json!({"host": "gpu-node-1.example.com"}),
            json!({"host": "bad_host!"}),
            "spec.host",
            Reason::TypeInvalid,
            r#"spec.host: Invalid value: "bad_host!": spec.host in body must be of type hostname: "bad_host!""#,
        ),
        (
            "format ipv4",
            json!({"ip": {"type": "string", "format": "ipv4"}}),
            json!({"ip": "10.1.2.3"}),
            json!({"ip": "10.1.2"}),
            "spec.ip",
            Reason::TypeInvalid,
            r#"spec.ip: Invalid value: "10.1.2": spec.ip in body must be of type ipv4: "10.1.2""#,
        ),
        (
            "format ipv6",
            json!({"ip": {"type": "string", "format": "ipv6"}}),
            json!({"ip": "fd00::1"}),
            json!({"ip": "fd00::zz"}),
            "spec.ip",
            Reason::TypeInvalid,
            r#"spec.ip: Invalid value: "fd00::zz": spec.ip in body must be of type ipv6: "fd00::zz""#,
        ),
        (
            "format cidr",
            json!({"net": {"type": "string", "format": "cidr"}}),
            json!({"net": "10.0.0.0/16"}),
            json!({"net": "10.0.0.0"}),
            "spec.net",
            Reason::TypeInvalid,
            r#"spec.net: Invalid value: "10.0.0.0": spec.net in body must be of type cidr: "10.0.0.0""#,
        ),
        (
            "format email",
            json!({"owner": {"type": "string", "format": "email"}}),
            json!({"owner": "ops@example.com"}),
            json!({"owner": "ops"}),
            "spec.owner",
            Reason::TypeInvalid,
            r#"spec.owner: Invalid value: "ops": spec.owner in body must be of type email: "ops""#,
        ),
        (
            "x-kubernetes-int-or-string",
            json!({"maxUnavailable": {"x-kubernetes-int-or-string": true}}),
            json!({"maxUnavailable": "25%"}),
            json!({"maxUnavailable": true}),
            "spec.maxUnavailable",
            Reason::TypeInvalid,
            r#"spec.maxUnavailable: Invalid value: "boolean": spec.maxUnavailable in body must be of type integer,string: "boolean""#,
        ),
        (
            "anyOf",
            json!({"port": {"type": "integer", "anyOf": [{"minimum": 80, "maximum": 80}, {"minimum": 443, "maximum": 443}]}}),
            json!({"port": 443}),
            json!({"port": 8080}),
            "<nil>",
            Reason::Invalid,
            r#"<nil>: Invalid value: "": "spec.port" must validate at least one schema (anyOf)"#,
        ),
        (
            "oneOf",
            json!({"mode": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}}),
            json!({"mode": {"a": "x"}}),
            json!({"mode": {"a": "x", "b": "y"}}),
            "<nil>",
            Reason::Invalid,
            r#"<nil>: Invalid value: "": "spec.mode" must validate one and only one schema (oneOf). Found 2 valid alternatives"#,
        ),
        (
            "allOf",
            json!({"n": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}}),
            json!({"n": 3}),
            json!({"n": 9}),
            "spec.n",
            Reason::Invalid,
            "spec.n: Invalid value: 9: spec.n in body should be less than or equal to 5",
        ),
        (
            "not",
            json!({"name": {"type": "string", "not": {"enum": ["default"]}}}),
            json!({"name": "prod"}),
            json!({"name": "default"}),
            "<nil>",
            Reason::Invalid,
            r#"<nil>: Invalid value: "": "spec.name" must not validate the schema (not)"#,
        ),
    ]
}

#[test]
fn every_keyword_accepts_and_refuses() {
    for (name, props, good, bad, field, reason, message) in cases() {
        let ok = check_spec(props.clone(), good);
        assert!(ok.is_empty(), "{name}: good value refused: {:?}", messages(&ok));
        let errs = check_spec(props, bad);
        let hit = errs.iter().find(|e| e.message == message);
        assert!(hit.is_some(), "{name}: expected {message:?} in {:#?}", messages(&errs));
        if let Some(hit) = hit {
            assert_eq!(hit.field, field, "{name}");
            assert_eq!(hit.reason, reason, "{name}");
        }
    }
}

#[test]
fn allof_reports_its_summary_too() {
    let errs = check_spec(
        json!({"n": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 5}]}}),
        json!({"n": 9}),
    );
    assert_eq!(
        messages(&errs),
        vec![
            "spec.n: Invalid value: 9: spec.n in body should be less than or equal to 5"
                .to_string(),
            r#"<nil>: Invalid value: "": "spec.n" must validate all the schemas (allOf)"#
                .to_string(),
        ]
    );
}

#[test]
fn nullable_accepts_null() {
    let errs =
        check_spec(json!({"note": {"type": "string", "nullable": true}}), json!({"note": null}));
    assert!(errs.is_empty(), "{:?}", messages(&errs));
}

#[test]
fn unknown_formats_are_ignored() {
    let errs = check_spec(
        json!({"x": {"type": "string", "format": "k8s-short-name"}}),
        json!({"x": "Not A Name"}),
    );
    assert!(errs.is_empty(), "{:?}", messages(&errs));
}

#[test]
fn integer_accepts_whole_floats_and_int_or_string_accepts_both() {
    let props = json!({"n": {"type": "integer"}, "p": {"x-kubernetes-int-or-string": true}});
    assert!(check_spec(props.clone(), json!({"n": 2.0, "p": 80})).is_empty());
    assert!(check_spec(props, json!({"n": 2, "p": "http"})).is_empty());
}

#[test]
fn causes_match_kube() {
    let errs = check_spec(json!({"replicas": {"type": "integer"}}), json!({"replicas": "x"}));
    assert_eq!(errs[0].reason.as_cause(), "FieldValueTypeInvalid");
    assert_eq!(errs[0].detail, r#"spec.replicas in body must be of type integer: "string""#);
}

#[test]
fn root_type_errors_are_at_nil() {
    let s = schema(json!({"type": "object"}));
    let errs = s.validate(&json!([1]), None);
    assert_eq!(
        messages(&errs),
        vec![r#"<nil>: Invalid value: "array":  in body must be of type object: "array""#]
    );
}

#[test]
fn list_type_set_refuses_duplicates() {
    let props = json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}});
    assert!(check_spec(props.clone(), json!({"tags": ["a", "b"]})).is_empty());
    let errs = check_spec(props, json!({"tags": ["a", "b", "a"]}));
    assert_eq!(messages(&errs), vec![r#"spec.tags[2]: Duplicate value: "a""#]);
    assert_eq!(errs[0].reason, Reason::Duplicate);
}

#[test]
fn list_type_map_refuses_duplicate_keys() {
    let props = json!({"ports": {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
    }});
    assert!(check_spec(
        props.clone(),
        json!({"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 1}]})
    )
    .is_empty());
    let errs =
        check_spec(props, json!({"ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}));
    assert_eq!(
        messages(&errs),
        vec![r#"spec.ports[1]: Duplicate value: map[string]interface {}{"name":"a"}"#]
    );
}

#[test]
fn embedded_resources_need_api_version_and_kind() {
    let props = json!({"template": {
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true
    }});
    assert!(check_spec(
        props.clone(),
        json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}})
    )
    .is_empty());
    let errs = check_spec(props.clone(), json!({"template": {"metadata": {}}}));
    assert_eq!(
        messages(&errs),
        vec![
            "spec.template.apiVersion: Required value".to_string(),
            "spec.template.kind: Required value".to_string()
        ]
    );
    let errs = check_spec(props, json!({"template": {"apiVersion": "a/b/c", "kind": "Pod_X"}}));
    assert_eq!(errs.len(), 2, "{:?}", messages(&errs));
    assert_eq!(
        errs[0].message,
        r#"spec.template.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#
    );
    assert!(errs[1].message.starts_with(r#"spec.template.kind: Invalid value: "Pod_X": may have mixed case, but should otherwise match: a DNS-1035 label"#));
}
