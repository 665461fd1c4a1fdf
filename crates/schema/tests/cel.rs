//! x-kubernetes-validations rules.

mod common;

use carrel_schema::Reason;
use common::{messages, refused, schema};
use serde_json::{json, Value};

/// A schema whose `spec` has the given properties and rules.
fn spec_schema(props: Value, rules: Value) -> carrel_schema::Schema {
    schema(json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules}
    }}))
}

fn obj(spec: Value) -> Value {
    json!({"apiVersion": "x.dev/v1", "kind": "X", "metadata": {"name": "a"}, "spec": spec})
}

fn run(s: &carrel_schema::Schema, spec: Value) -> Vec<String> {
    messages(&s.validate(&obj(spec), None))
}

#[test]
fn comparison_of_fields() {
    let s = spec_schema(
        json!({"minReplicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}}),
        json!([{"rule": "self.minReplicas <= self.maxReplicas", "message": "minReplicas must not exceed maxReplicas"}]),
    );
    assert!(run(&s, json!({"minReplicas": 1, "maxReplicas": 3})).is_empty());
    assert_eq!(
        run(&s, json!({"minReplicas": 4, "maxReplicas": 3})),
        vec![r#"spec: Invalid value: "object": minReplicas must not exceed maxReplicas"#]
    );
}

#[test]
fn default_message_is_the_rule() {
    let s =
        schema(json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= 0"}]}
        }}}}));
    assert!(run(&s, json!({"replicas": 0})).is_empty());
    let errs = s.validate(&obj(json!({"replicas": -1})), None);
    assert_eq!(
        messages(&errs),
        vec![r#"spec.replicas: Invalid value: "integer": failed rule: self >= 0"#]
    );
    assert_eq!(errs[0].reason, Reason::Invalid);
    assert_eq!(errs[0].field, "spec.replicas");
}

#[test]
fn has_macro_and_presence() {
    let s = spec_schema(
        json!({"x": {"type": "string"}, "y": {"type": "string"}}),
        json!([{"rule": "has(self.x) == has(self.y)", "message": "x and y go together"}]),
    );
    assert!(run(&s, json!({})).is_empty());
    assert!(run(&s, json!({"x": "a", "y": "b"})).is_empty());
    assert_eq!(
        run(&s, json!({"x": "a"})),
        vec![r#"spec: Invalid value: "object": x and y go together"#]
    );
}

#[test]
fn all_macro_over_map_keys() {
    let s =
        schema(json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                "x-kubernetes-validations": [{"rule": "self.all(k, k.startsWith('a'))"}]}
        }}}}));
    assert!(run(&s, json!({"labels": {"app": "x", "area": "y"}})).is_empty());
    assert_eq!(
        run(&s, json!({"labels": {"app": "x", "team": "y"}})),
        vec![
            r#"spec.labels: Invalid value: "object": failed rule: self.all(k, k.startsWith('a'))"#
        ]
    );
}

#[test]
fn size_and_exists() {
    let s = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "args": {"type": "array", "items": {"type": "string"},
                "x-kubernetes-validations": [{"rule": "self.size() <= 3"}, {"rule": "!self.exists(a, a == 'forbidden')", "reason": "FieldValueForbidden", "message": "forbidden argument"}]},
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() <= 3"}]}
        }}}}),
    );
    assert!(run(&s, json!({"args": ["a", "b"], "name": "äöü"})).is_empty());
    let errs = s.validate(&obj(json!({"args": ["a", "b", "c", "forbidden"]})), None);
    assert_eq!(
        messages(&errs),
        vec![
            r#"spec.args: Invalid value: "array": failed rule: self.size() <= 3"#.to_string(),
            "spec.args: Forbidden: forbidden argument".to_string(),
        ]
    );
    assert_eq!(errs[1].reason, Reason::Forbidden);
}

#[test]
fn matches_uses_go_regexps() {
    let s = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')", "message": "must be lowercase letters"}]}
        }}}}),
    );
    assert!(run(&s, json!({"name": "abc"})).is_empty());
    assert_eq!(
        run(&s, json!({"name": "Abc"})),
        vec![r#"spec.name: Invalid value: "string": must be lowercase letters"#]
    );
}

#[test]
fn transition_rule_with_old_self() {
    let s = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "storageClass": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "is immutable"}]}
        }}}}),
    );
    let new = obj(json!({"storageClass": "fast"}));
    // On create the transition rule is skipped.
    assert!(s.validate(&new, None).is_empty());
    let same = obj(json!({"storageClass": "fast"}));
    assert!(s.validate(&new, Some(&same)).is_empty());
    let old = obj(json!({"storageClass": "slow"}));
    assert_eq!(
        messages(&s.validate(&new, Some(&old))),
        vec![r#"spec.storageClass: Invalid value: "string": is immutable"#]
    );
    // The old object has no value there: skipped.
    let old_without = obj(json!({}));
    assert!(s.validate(&new, Some(&old_without)).is_empty());
}

#[test]
fn transition_rules_correlate_map_list_items() {
    let s = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "volumes": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not shrink"}]}
                }}}
        }}}}),
    );
    let old = obj(json!({"volumes": [{"name": "a", "size": 10}, {"name": "b", "size": 5}]}));
    let new = obj(
        json!({"volumes": [{"name": "b", "size": 4}, {"name": "a", "size": 12}, {"name": "c", "size": 1}]}),
    );
    assert_eq!(
        messages(&s.validate(&new, Some(&old))),
        vec![r#"spec.volumes[0].size: Invalid value: "integer": may not shrink"#]
    );
}

#[test]
fn transition_rules_under_atomic_lists_are_refused() {
    let errs = refused(
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}
        }}}}),
    );
    assert_eq!(
        errs,
        vec![
            r#"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[items]"#
        ]
    );
}

#[test]
fn compile_errors_refuse_the_schema() {
    let errs = refused(json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.a =="}]
    }}}));
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(
        errs[0],
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \
         apiextensions.ValidationRule{Rule:\"self.a ==\", Message:\"\", MessageExpression:\"\", \
         Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: \
         compilation failed: ERROR: <input>:1:10: Syntax error: mismatched input '<EOF>'\n| self.a ==\n| .........^"
    );
    let errs = refused(json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.a == == 1", "messageExpression": "'a' +"}]
    }}}));
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(
        errs[0].contains("].rule: Invalid value: apiextensions.ValidationRule{"),
        "{}",
        errs[0]
    );
    assert!(
        errs[0].contains("compilation failed: ERROR: <input>:1:11: Syntax error: extraneous input '==' expecting"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("].messageExpression: Invalid value: apiextensions.ValidationRule{"),
        "{}",
        errs[1]
    );
    assert!(
        errs[1].contains("messageExpression compilation failed: ERROR: <input>:1:6:"),
        "{}",
        errs[1]
    );
}

#[test]
fn rule_checks_at_parse() {
    let errs = refused(json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": " "}, {"rule": "true", "reason": "Nope"}, {"rule": "true", "fieldPath": ".missing"}]
    }}}));
    let p = "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations";
    assert_eq!(
        errs,
        vec![
            format!("{p}[0].rule: Required value: rule is not specified"),
            format!(
                r#"{p}[1].reason: Unsupported value: "Nope": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired""#
            ),
            format!(
                r#"{p}[2].fieldPath: Invalid value: ".missing": fieldPath must be a valid path"#
            ),
        ]
    );
}

#[test]
fn evaluation_errors_are_invalid_not_panics() {
    let s = spec_schema(
        json!({"a": {"type": "integer"}, "b": {"type": "integer"}, "s": {"type": "string"}}),
        json!([
            {"rule": "self.a / self.b > 0"},
            {"rule": "self.missing == 1"},
            {"rule": "self.s.all(c, c == 'x')"},
            {"rule": "self.a + 'x' == 'y'"}
        ]),
    );
    let errs = s.validate(&obj(json!({"a": 1, "b": 0, "s": "xy"})), None);
    assert_eq!(
        messages(&errs),
        vec![
            r#"spec: Invalid value: "object": division by zero evaluating rule: self.a / self.b > 0"#.to_string(),
            r#"spec: Invalid value: "object": no such key: missing evaluating rule: self.missing == 1"#.to_string(),
            r#"spec: Invalid value: "object": unsupported expression evaluating rule: self.s.all(c, c == 'x')"#.to_string(),
            r#"spec: Invalid value: "object": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.a + 'x' == 'y'"#.to_string(),
        ]
    );
    assert!(errs.iter().all(|e| e.reason == Reason::Invalid));
}

#[test]
fn message_expression_field_path_and_reason() {
    let s = spec_schema(
        json!({"replicas": {"type": "integer"}, "ports": {"type": "array", "items": {"type": "integer"}}}),
        json!([
            {"rule": "self.replicas <= 8", "messageExpression": "'replicas ' + string(self.replicas) + ' exceeds 8'", "fieldPath": ".replicas"},
            {"rule": "self.ports.size() > 0", "reason": "FieldValueRequired", "message": "at least one port", "fieldPath": ".ports"}
        ]),
    );
    let errs = s.validate(&obj(json!({"replicas": 9, "ports": []})), None);
    assert_eq!(
        messages(&errs),
        vec![
            r#"spec.replicas: Invalid value: "object": replicas 9 exceeds 8"#.to_string(),
            "spec.ports: Required value: at least one port".to_string(),
        ]
    );
    assert_eq!(errs[1].reason, Reason::Required);
}

#[test]
fn root_rules_see_metadata_and_report_at_nil() {
    let s = schema(json!({"type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.size() <= 5", "message": "name too long"}],
        "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}}}));
    assert!(s.validate(&json!({"metadata": {"name": "abc"}}), None).is_empty());
    assert_eq!(
        messages(&s.validate(&json!({"metadata": {"name": "abcdefg"}}), None)),
        vec![r#"<nil>: Invalid value: "object": name too long"#]
    );
}

#[test]
fn schema_errors_block_rules() {
    let s = spec_schema(
        json!({"replicas": {"type": "integer"}}),
        json!([{"rule": "self.replicas > 0"}]),
    );
    assert_eq!(
        run(&s, json!({"replicas": "many"})),
        vec![
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            r#"<nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"#,
        ]
    );
}

#[test]
fn typed_values_and_escaped_names() {
    let s = spec_schema(
        json!({
            "start": {"type": "string", "format": "date-time"},
            "end": {"type": "string", "format": "date-time"},
            "timeout": {"type": "string", "format": "duration"},
            "ratio": {"type": "number"},
            "gpu-count": {"type": "integer"}
        }),
        json!([
            {"rule": "self.start < self.end", "message": "start before end"},
            {"rule": "self.timeout <= duration('1h')", "message": "timeout at most 1h"},
            {"rule": "self.ratio < 1.0"},
            {"rule": "self.gpu__dash__count <= 8"}
        ]),
    );
    assert!(run(
        &s,
        json!({"start": "2024-01-01T00:00:00Z", "end": "2024-01-02T00:00:00Z", "timeout": "30m", "ratio": 0, "gpu-count": 8})
    )
    .is_empty());
    assert_eq!(
        run(
            &s,
            json!({"start": "2024-01-03T00:00:00Z", "end": "2024-01-02T00:00:00Z", "timeout": "2h", "ratio": 0, "gpu-count": 9})
        ),
        vec![
            r#"spec: Invalid value: "object": start before end"#,
            r#"spec: Invalid value: "object": timeout at most 1h"#,
            r#"spec: Invalid value: "object": failed rule: self.gpu__dash__count <= 8"#,
        ]
    );
}

#[test]
fn string_extensions() {
    let s = spec_schema(
        json!({"name": {"type": "string"}, "parts": {"type": "array", "items": {"type": "string"}}}),
        json!([
            {"rule": "self.name.lowerAscii() == self.name"},
            {"rule": "self.parts.join('-') == self.name"},
            {"rule": "self.name.split('-').size() == self.parts.size()"},
            {"rule": "self.name.indexOf('-') >= 0"}
        ]),
    );
    assert!(run(&s, json!({"name": "a-b", "parts": ["a", "b"]})).is_empty());
    assert_eq!(run(&s, json!({"name": "A-B", "parts": ["a", "b"]})).len(), 2);
}

#[test]
fn rules_too_costly_for_their_input_are_refused_without_running() {
    // Every list is bounded, so the rule's estimated cost is within kube-apiserver's static
    // limit when the schema is written (an unbounded `a` is refused then); what the rule is
    // given at run time can still be too much for one call.
    let s = spec_schema(
        json!({"a": {"type": "array", "maxItems": 20, "items": {"type": "integer"}},
               "b": {"type": "array", "maxItems": 20,
                     "items": {"type": "array", "maxItems": 20, "items": {"type": "integer"}}}}),
        json!([
            {"rule": "self.a.all(x, self.a.all(y, self.a.all(z, x + y + z > 0)))"},
            {"rule": "self.a.all(x, x > 0)", "message": "positive"},
        ]),
    );
    let small: Vec<i64> = (1..=20).collect();
    assert!(run(&s, json!({"a": small})).is_empty());
    // 420 values: the nested rule would take 74 million steps; the flat one runs.
    let mut a: Vec<i64> = (1..=20).collect();
    a[19] = -1;
    let b = vec![vec![1; 20]; 20];
    assert_eq!(
        run(&s, json!({"a": a, "b": b})),
        vec![
            r#"spec: Invalid value: "object": call cost exceeds limit for rule: self.a.all(x, self.a.all(y, self.a.all(z, x + y + z > 0)))"#,
            r#"spec: Invalid value: "object": positive"#,
        ]
    );
}

#[test]
fn rules_estimated_over_the_static_cost_limits_are_refused_when_the_schema_is_written() {
    let refused = |props: Value, rules: Value| {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules}}});
        carrel_schema::Schema::parse(&schema, "s").err().unwrap_or_default()
    };
    // An unbounded list walked three deep: kube-apiserver's words, on the rule.
    let errs = refused(
        json!({"a": {"type": "array", "items": {"type": "integer"}}}),
        json!([{"rule": "self.a.all(x, self.a.all(y, x + y > 0))"}]),
    );
    let all = messages(&errs);
    assert_eq!(
        all[0],
        "s.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost \
         exceeds budget by factor of more than 100x (try simplifying the rule, or adding \
         maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    );
    // It alone also passes the limit for the entire schema, which is said too.
    assert_eq!(all.len(), 3, "{all:?}");
    // A message expression is estimated too, on its own path.
    let errs = refused(
        json!({"a": {"type": "array", "items": {"type": "integer"}}}),
        json!([{"rule": "self.a.size() < 10",
                "messageExpression": "self.a.all(x, self.a.all(y, x != y)) ? 'unique' : 'not'"}]),
    );
    assert!(
        messages(&errs)[0].starts_with(
            "s.properties[spec].x-kubernetes-validations[0].messageExpression: Forbidden: \
             estimated messageExpression cost exceeds budget by factor of more than 100x"
        ),
        "{:?}",
        messages(&errs)
    );
    // A string function over unbounded strings in a list.
    let errs = refused(
        json!({"names": {"type": "array", "maxItems": 100, "items": {"type": "string"}}}),
        json!([{"rule": "self.names.all(n, n.matches('^a'))"}]),
    );
    assert!(
        messages(&errs)[0].contains("estimated rule cost exceeds budget"),
        "{:?}",
        messages(&errs)
    );
    // Each rule is cheap, but a rule on the items of a list of lists runs for every item: the
    // rules together pass the limit for the entire schema.
    let item_rules: Vec<Value> =
        (0..30).map(|i| json!({"rule": format!("self.size() > {i}")})).collect();
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "grid": {"type": "array", "maxItems": 1000, "items": {"type": "array", "maxItems": 1000,
            "items": {"type": "string", "maxLength": 100, "x-kubernetes-validations": item_rules}}}}}}});
    let errs = carrel_schema::Schema::parse(&schema, "s").err().unwrap_or_default();
    let all = messages(&errs);
    assert!(
        all.last().is_some_and(|m| {
            m.starts_with(
            "s: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 \
             schema exceeds budget by factor of "
        )
        }),
        "{all:?}"
    );
    assert!(
        all.iter().any(|m| m.ends_with(
            "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire \
         OpenAPIv3 schema"
        )),
        "{all:?}"
    );
    // Bounded, as controller-gen users write them, rules pass.
    let ok = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"names": {"type": "array", "maxItems": 64,
            "items": {"type": "string", "maxLength": 253}}},
        "x-kubernetes-validations": [{"rule": "self.names.all(n, n.matches('^[a-z.-]+$'))"},
                                     {"rule": "self.names.size() > 0"}]}}});
    assert!(carrel_schema::Schema::parse(&ok, "s").is_ok());
}
