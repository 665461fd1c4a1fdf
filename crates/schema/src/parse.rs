//! Reading a CRD version's `openAPIV3Schema` and checking it as kube-apiserver does when a CRD is
//! created: the structural-schema rules (`pkg/apiserver/schema/validation.go`, `complete.go`),
//! the defaults (`pkg/apiserver/schema/defaulting/validation.go`), the CRD API checks
//! (`pkg/apis/apiextensions/validation`) and the compilation of the CEL rules.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cel::{self, RawRule};
use crate::error::{child, go_quote, index, key, Bad, FieldError};
use crate::node::{Additional, Node};
use crate::regex_go;
use crate::validate::{embedded_walk, FPath, OpenApi};

/// Parses and checks a schema; `path` is the field path of the schema
/// (`spec.versions[0].schema.openAPIV3Schema`). `limit_costs`: refuse rules over the static
/// estimated cost limits.
pub(crate) fn parse(value: &Value, path: &str, limit_costs: bool) -> Result<Node, Vec<FieldError>> {
    let mut decode = Vec::new();
    let mut root = build(value, path, &mut decode);

    let convertible = !not_convertible(&root);
    let mut structural = Vec::new();
    if convertible && decode.is_empty() {
        invariants(&root, Level::Root, path, &mut structural);
        completeness(&root, path, &mut structural);
        structural.sort_by(|a, b| a.message.cmp(&b.message));
    }

    let mut defaults = Vec::new();
    if convertible && decode.is_empty() && structural.is_empty() {
        validate_defaults(&root, path, false, true, &mut defaults);
    }

    let mut api = Vec::new();
    if root.nullable {
        api.push(FieldError::forbidden(
            child(path, "nullable"),
            "nullable cannot be true at the root",
        ));
    }
    api_checks(&root, path, &ApiCtx::root(), true, &mut api);

    let mut errors = decode;
    errors.extend(structural);
    errors.extend(defaults);
    errors.extend(api);
    if errors.is_empty() {
        compile_all_rules(&mut root, path, limit_costs, &mut errors);
    }
    mark_rules(&mut root);
    if errors.is_empty() {
        Ok(root)
    } else {
        Err(errors)
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// The value read by `get`, or an error saying it must be `what` (a string, a boolean, …).
fn expect<T>(
    v: &Value,
    path: &str,
    errs: &mut Vec<FieldError>,
    get: impl FnOnce(&Value) -> Option<T>,
    what: &str,
) -> Option<T> {
    let found = get(v);
    if found.is_none() {
        errs.push(FieldError::invalid(path, Bad::Json(v.clone()), format!("must be {what}")));
    }
    found
}

fn expect_str(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> String {
    expect(v, path, errs, |v| v.as_str().map(str::to_owned), "a string").unwrap_or_default()
}

fn expect_bool(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> bool {
    expect(v, path, errs, Value::as_bool, "a boolean").unwrap_or(false)
}

fn expect_f64(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> Option<f64> {
    expect(v, path, errs, Value::as_f64, "a number")
}

fn expect_i64(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> Option<i64> {
    expect(v, path, errs, Value::as_i64, "an integer")
}

fn expect_strings(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| expect_str(item, &index(path, i), errs))
            .collect(),
        other => {
            errs.push(FieldError::invalid(
                path,
                Bad::Json(other.clone()),
                "must be a list of strings",
            ));
            Vec::new()
        }
    }
}

fn build_list(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> Vec<Node> {
    match v {
        Value::Array(items) => {
            items.iter().enumerate().map(|(i, item)| build(item, &index(path, i), errs)).collect()
        }
        other => {
            errs.push(FieldError::invalid(
                path,
                Bad::Json(other.clone()),
                "must be a list of schemas",
            ));
            Vec::new()
        }
    }
}

/// Reads one JSONSchemaProps. Keys with a null value count as unset, as in Go.
fn build(value: &Value, path: &str, errs: &mut Vec<FieldError>) -> Node {
    let mut n = Node::default();
    let Some(obj) = value.as_object() else {
        errs.push(FieldError::invalid(path, Bad::Json(value.clone()), "must be a JSON object"));
        return n;
    };
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        let p = child(path, k);
        match k.as_str() {
            "type" => n.type_name = expect_str(v, &p, errs),
            "format" => n.format = expect_str(v, &p, errs),
            "title" => n.title = !expect_str(v, &p, errs).is_empty(),
            "description" => n.description = !expect_str(v, &p, errs).is_empty(),
            "externalDocs" => n.external_docs = true,
            "example" => {}
            "default" => n.default = Some(v.clone()),
            "nullable" => n.nullable = expect_bool(v, &p, errs),
            "maximum" => n.maximum = expect_f64(v, &p, errs),
            "exclusiveMaximum" => n.exclusive_maximum = expect_bool(v, &p, errs),
            "minimum" => n.minimum = expect_f64(v, &p, errs),
            "exclusiveMinimum" => n.exclusive_minimum = expect_bool(v, &p, errs),
            "multipleOf" => n.multiple_of = expect_f64(v, &p, errs),
            "maxLength" => n.max_length = expect_i64(v, &p, errs),
            "minLength" => n.min_length = expect_i64(v, &p, errs),
            "maxItems" => n.max_items = expect_i64(v, &p, errs),
            "minItems" => n.min_items = expect_i64(v, &p, errs),
            "maxProperties" => n.max_properties = expect_i64(v, &p, errs),
            "minProperties" => n.min_properties = expect_i64(v, &p, errs),
            "uniqueItems" => n.unique_items = expect_bool(v, &p, errs),
            "pattern" => {
                let pattern = expect_str(v, &p, errs);
                if !pattern.is_empty() {
                    match regex_go::compile(&pattern) {
                        Ok(re) => n.pattern_regex = Some(re),
                        Err(e) => n.pattern_error = Some(e),
                    }
                    n.pattern = Some(pattern);
                }
            }
            "required" => n.required = expect_strings(v, &p, errs),
            "enum" => match v {
                Value::Array(items) => n.enum_values = items.clone(),
                other => {
                    errs.push(FieldError::invalid(&p, Bad::Json(other.clone()), "must be a list"))
                }
            },
            "allOf" => n.all_of = build_list(v, &p, errs),
            "anyOf" => n.any_of = build_list(v, &p, errs),
            "oneOf" => n.one_of = build_list(v, &p, errs),
            "not" => n.not = Some(Box::new(build(v, &p, errs))),
            "properties" => match v {
                Value::Object(props) => {
                    let mut out = BTreeMap::new();
                    for (name, schema) in props {
                        out.insert(name.clone(), build(schema, &key(&p, name), errs));
                    }
                    n.properties = out;
                }
                other => errs.push(FieldError::invalid(
                    &p,
                    Bad::Json(other.clone()),
                    "must be a map of schemas",
                )),
            },
            "additionalProperties" => match v {
                Value::Bool(b) => n.additional = Some(Additional::Bool(*b)),
                other => n.additional = Some(Additional::Schema(Box::new(build(other, &p, errs)))),
            },
            "items" => match v {
                Value::Array(_) => n.unsupported.items_array = true,
                other => n.items = Some(Box::new(build(other, &p, errs))),
            },
            "x-kubernetes-preserve-unknown-fields" => {
                n.preserve_unknown = Some(expect_bool(v, &p, errs))
            }
            "x-kubernetes-embedded-resource" => n.embedded = expect_bool(v, &p, errs),
            "x-kubernetes-int-or-string" => n.int_or_string = expect_bool(v, &p, errs),
            "x-kubernetes-list-type" => n.list_type = Some(expect_str(v, &p, errs)),
            "x-kubernetes-list-map-keys" => n.list_map_keys = expect_strings(v, &p, errs),
            "x-kubernetes-map-type" => n.map_type = Some(expect_str(v, &p, errs)),
            "x-kubernetes-validations" => match v {
                Value::Array(rules) => {
                    for (i, r) in rules.iter().enumerate() {
                        n.raw_rules.push(build_rule(r, &index(&p, i), errs));
                    }
                }
                other => errs.push(FieldError::invalid(
                    &p,
                    Bad::Json(other.clone()),
                    "must be a list of rules",
                )),
            },
            "$ref" => n.unsupported.reference = true,
            "$schema" => n.unsupported.schema = !expect_str(v, &p, errs).is_empty(),
            "id" => n.unsupported.id = !expect_str(v, &p, errs).is_empty(),
            "definitions" => {
                n.unsupported.definitions = v.as_object().is_none_or(|m| !m.is_empty())
            }
            "dependencies" => n.unsupported.dependencies = true,
            "additionalItems" => n.unsupported.additional_items = true,
            "patternProperties" => {
                n.unsupported.pattern_properties = v.as_object().is_none_or(|m| !m.is_empty())
            }
            _ => {}
        }
    }
    n
}

fn build_rule(v: &Value, path: &str, errs: &mut Vec<FieldError>) -> RawRule {
    let mut r = RawRule::default();
    let Some(obj) = v.as_object() else {
        errs.push(FieldError::invalid(path, Bad::Json(v.clone()), "must be a JSON object"));
        return r;
    };
    let get = |m: &Map<String, Value>, k: &str, errs: &mut Vec<FieldError>| -> Option<String> {
        m.get(k).filter(|v| !v.is_null()).map(|v| expect_str(v, &child(path, k), errs))
    };
    r.rule = get(obj, "rule", errs).unwrap_or_default();
    r.message = get(obj, "message", errs).unwrap_or_default();
    r.message_expression = get(obj, "messageExpression", errs).unwrap_or_default();
    r.reason = get(obj, "reason", errs);
    r.field_path = get(obj, "fieldPath", errs).unwrap_or_default();
    r.optional_old_self = obj
        .get("optionalOldSelf")
        .filter(|v| !v.is_null())
        .map(|v| expect_bool(v, &child(path, "optionalOldSelf"), errs));
    r
}

/// Whether kube-apiserver's `NewStructural` refuses the tree (then only the API checks report).
fn not_convertible(n: &Node) -> bool {
    n.unsupported.any()
        || n.preserve_unknown == Some(false)
        || children(n).any(not_convertible)
        || n.all_of.iter().chain(&n.any_of).chain(&n.one_of).any(not_convertible)
        || n.not.as_deref().is_some_and(not_convertible)
}

/// The structural children of a node: items, properties, additionalProperties.
fn children(n: &Node) -> impl Iterator<Item = &Node> {
    n.items.as_deref().into_iter().chain(n.properties.values()).chain(n.additional_schema())
}

// ---------------------------------------------------------------------------------------------
// Structural invariants (validation.go)

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Whether a nested schema is exactly `{type: <t>}`.
fn is_bare_type(n: &Node, t: &str) -> bool {
    n.type_name == t && is_empty_besides_type(n)
}

fn is_empty_besides_type(n: &Node) -> bool {
    !n.external_docs
        && !n.unsupported.any()
        && n.default.is_none()
        && n.properties.is_empty()
        && has_only_type_and_properties(n)
}

/// Whether a schema sets nothing but its type and properties (and the keywords the callers check
/// themselves: defaults, external docs, unsupported ones).
fn has_only_type_and_properties(n: &Node) -> bool {
    !n.title
        && !n.description
        && !n.nullable
        && n.format.is_empty()
        && has_no_value_validation(n)
        && n.additional.is_none()
        && n.items.is_none()
        && n.preserve_unknown.is_none()
        && !n.embedded
        && !n.int_or_string
        && n.list_type.is_none()
        && n.list_map_keys.is_empty()
        && n.map_type.is_none()
        && n.raw_rules.is_empty()
}

fn has_no_value_validation(n: &Node) -> bool {
    n.maximum.is_none()
        && !n.exclusive_maximum
        && n.minimum.is_none()
        && !n.exclusive_minimum
        && n.max_length.is_none()
        && n.min_length.is_none()
        && n.pattern.is_none()
        && n.max_items.is_none()
        && n.min_items.is_none()
        && !n.unique_items
        && n.multiple_of.is_none()
        && n.max_properties.is_none()
        && n.min_properties.is_none()
        && n.required.is_empty()
        && n.enum_values.is_empty()
        && n.all_of.is_empty()
        && n.any_of.is_empty()
        && n.one_of.is_empty()
        && n.not.is_none()
}

fn is_int_or_string_any_of(any_of: &[Node]) -> bool {
    any_of.len() == 2 && is_bare_type(&any_of[0], "integer") && is_bare_type(&any_of[1], "string")
}

fn invariants(s: &Node, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
    if s.type_name == "array" && s.items.is_none() {
        errs.push(FieldError::required(child(path, "items"), "must be specified"));
    }
    if let Some(items) = &s.items {
        invariants(items, Level::Item, &child(path, "items"), errs);
    }
    for (k, p) in &s.properties {
        invariants(p, Level::Field, &key(&child(path, "properties"), k), errs);
    }
    if let Some(additional) = &s.additional {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Additional::Schema(sub) = additional {
            invariants(sub, Level::Field, &child(path, "additionalProperties"), errs);
        }
    }

    if s.int_or_string && s.preserves_unknown() {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            Bad::Raw("true".into()),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if s.int_or_string && s.embedded {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-embedded-resource"),
            Bad::Raw("true".into()),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }

    let skip_any_of = is_int_or_string_any_of(&s.any_of);
    let skip_first_all_of_any_of =
        s.all_of.first().is_some_and(|a| is_int_or_string_any_of(&a.any_of));
    value_validation(s, skip_any_of, skip_first_all_of_any_of, lvl, path, errs);

    let check_metadata = lvl == Level::Root || s.embedded;
    let type_path = child(path, "type");
    if s.embedded && s.type_name != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if s.type_name.is_empty() {
            errs.push(FieldError::required(type_path.clone(), detail));
        } else {
            errs.push(FieldError::invalid(
                type_path.clone(),
                Bad::Str(s.type_name.clone()),
                detail,
            ));
        }
    } else if s.type_name.is_empty() && !s.int_or_string && !s.preserves_unknown() {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(type_path.clone(), detail));
    }
    if s.embedded && s.additional.is_some() {
        errs.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !s.type_name.is_empty() && s.type_name != "object" {
        errs.push(FieldError::invalid(
            type_path,
            Bad::Str(s.type_name.clone()),
            "must be object at the root",
        ));
    }

    let props = child(path, "properties");
    if check_metadata {
        for meta in ["kind", "apiVersion"] {
            if let Some(p) = s.properties.get(meta) {
                if p.type_name != "string" {
                    errs.push(FieldError::invalid(
                        child(&key(&props, meta), "type"),
                        Bad::Str(p.type_name.clone()),
                        "must be string",
                    ));
                }
            }
        }
    }
    if let Some(metadata) = s.properties.get("metadata") {
        metadata_invariants(metadata, check_metadata, lvl, &key(&props, "metadata"), errs);
    }
    if s.embedded && !s.preserves_unknown() && s.properties.is_empty() {
        errs.push(FieldError::required(
            props,
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

fn metadata_invariants(
    m: &Node,
    check_metadata: bool,
    lvl: Level,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    if check_metadata && m.type_name != "object" {
        errs.push(FieldError::invalid(
            child(path, "type"),
            Bad::Str(m.type_name.clone()),
            "must be object",
        ));
    }
    if lvl == Level::Root {
        let has_name = m.properties.contains_key("name");
        let has_generate_name = m.properties.contains_key("generateName");
        let props_ok = m.properties.is_empty()
            || (has_name && has_generate_name && m.properties.len() == 2)
            || ((has_name || has_generate_name) && m.properties.len() == 1);
        let rest_empty = has_only_type_and_properties(m);
        if !(props_ok && rest_empty) {
            errs.push(FieldError::forbidden(
                path,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
}

fn value_validation(
    v: &Node,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: Level,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, a) in v.any_of.iter().enumerate() {
            nested(a, false, false, lvl, &index(&child(path, "anyOf"), i), errs);
        }
    }
    for (i, a) in v.all_of.iter().enumerate() {
        nested(
            a,
            skip_first_all_of_any_of && i == 0,
            false,
            lvl,
            &index(&child(path, "allOf"), i),
            errs,
        );
    }
    for (i, a) in v.one_of.iter().enumerate() {
        nested(a, false, false, lvl, &index(&child(path, "oneOf"), i), errs);
    }
    if let Some(not) = &v.not {
        nested(not, false, false, lvl, &child(path, "not"), errs);
    }
    if let (Some(pattern), Some(err)) = (&v.pattern, &v.pattern_error) {
        errs.push(FieldError::invalid(
            child(path, "pattern"),
            Bad::Str(pattern.clone()),
            format!("must be a valid regular expression, but isn't: {err}"),
        ));
    }
}

/// A schema under allOf/anyOf/oneOf/not: value validations only.
fn nested(
    v: &Node,
    skip_any_of: bool,
    skip_all_of_any_of: bool,
    lvl: Level,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    value_validation(v, skip_any_of, skip_all_of_any_of, lvl, path, errs);
    if let Some(items) = &v.items {
        nested(items, false, false, lvl, &child(path, "items"), errs);
    }
    for (k, p) in &v.properties {
        nested(p, false, false, Level::Field, &key(&child(path, "properties"), k), errs);
    }
    let forbid = |errs: &mut Vec<FieldError>, name: &str, detail: &str| {
        errs.push(FieldError::forbidden(child(path, name), detail));
    };
    if !v.type_name.is_empty() {
        forbid(errs, "type", "must be empty to be structural");
    }
    if v.additional.is_some() {
        forbid(errs, "additionalProperties", "must be undefined to be structural");
    }
    if v.default.is_some() {
        forbid(errs, "default", "must be undefined to be structural");
    }
    if v.title {
        forbid(errs, "title", "must be empty to be structural");
    }
    if v.description {
        forbid(errs, "description", "must be empty to be structural");
    }
    if v.nullable {
        forbid(errs, "nullable", "must be false to be structural");
    }
    if v.external_docs {
        forbid(errs, "externalDocs", "must be undefined to be structural");
    }
    if v.preserves_unknown() {
        forbid(errs, "x-kubernetes-preserve-unknown-fields", "must be false to be structural");
    }
    if v.embedded {
        forbid(errs, "x-kubernetes-embedded-resource", "must be false to be structural");
    }
    if v.int_or_string {
        forbid(errs, "x-kubernetes-int-or-string", "must be false to be structural");
    }
    if !v.list_map_keys.is_empty() {
        forbid(errs, "x-kubernetes-list-map-keys", "must be empty to be structural");
    }
    if v.list_type.is_some() {
        forbid(errs, "x-kubernetes-list-type", "must be undefined to be structural");
    }
    if v.map_type.is_some() {
        forbid(errs, "x-kubernetes-map-type", "must be undefined to be structural");
    }
    if !v.raw_rules.is_empty() {
        forbid(errs, "x-kubernetes-validations", "must be empty to be structural");
    }
    if v.properties.contains_key("metadata") {
        errs.push(FieldError::forbidden(
            key(&child(path, "properties"), "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

// Completeness (complete.go): what allOf/anyOf/oneOf/not of the root name must be specified.

fn completeness(s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    vv_completeness(s, Some(s), path, path, errs);
}

fn vv_completeness(
    v: &Node,
    s: Option<&Node>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(s_path, format!("because it is defined in {v_path}")));
        return;
    };
    if let Some(not) = &v.not {
        nested_completeness(not, Some(s), s_path, &child(v_path, "not"), errs);
    }
    for (name, list) in [("allOf", &v.all_of), ("anyOf", &v.any_of), ("oneOf", &v.one_of)] {
        for (i, a) in list.iter().enumerate() {
            nested_completeness(a, Some(s), s_path, &index(&child(v_path, name), i), errs);
        }
    }
}

fn nested_completeness(
    v: &Node,
    s: Option<&Node>,
    s_path: &str,
    v_path: &str,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(s_path, format!("because it is defined in {v_path}")));
        return;
    };
    vv_completeness(v, Some(s), s_path, v_path, errs);
    if let Some(items) = &v.items {
        nested_completeness(
            items,
            s.items.as_deref(),
            &child(s_path, "items"),
            &child(v_path, "items"),
            errs,
        );
    }
    for (k, vf) in &v.properties {
        let sp = key(&child(s_path, "properties"), k);
        let vp = key(&child(v_path, "properties"), k);
        match s.properties.get(k) {
            Some(sf) => nested_completeness(vf, Some(sf), &sp, &vp, errs),
            None => errs.push(FieldError::required(sp, format!("because it is defined in {vp}"))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Defaults (defaulting/validation.go): a default must be pruned and valid.

fn validate_defaults(
    s: &Node,
    path: &str,
    inside_meta: bool,
    is_root: bool,
    errs: &mut Vec<FieldError>,
) {
    let embedded = s.embedded || is_root;
    let inside_meta = inside_meta && !s.embedded;
    if let Some(default) = &s.default {
        if !inside_meta {
            let default_path = child(path, "default");
            let mut pruned = default.clone();
            crate::prune::prune(&mut pruned, Some(s), s.embedded, &mut Vec::new());
            if &pruned != default {
                errs.push(FieldError::invalid(
                    default_path.clone(),
                    Bad::Json(default.clone()),
                    "must not have unknown fields",
                ));
            }
            let mut meta = Vec::new();
            embedded_walk(&FPath::named(&default_path), default, Some(s), &mut meta);
            if meta.is_empty() {
                OpenApi { prefix: Some(&default_path) }.check(s, default, "", errs);
            } else {
                errs.extend(meta);
            }
        }
    }
    if let Some(items) = &s.items {
        validate_defaults(items, &child(path, "items"), inside_meta, false, errs);
    }
    for (k, p) in &s.properties {
        let sub_inside =
            inside_meta || (embedded && matches!(k.as_str(), "metadata" | "apiVersion" | "kind"));
        validate_defaults(p, &key(&child(path, "properties"), k), sub_inside, false, errs);
    }
}

// ---------------------------------------------------------------------------------------------
// CRD API checks (ValidateCustomResourceDefinitionOpenAPISchema)

#[derive(Debug, Clone)]
struct ApiCtx {
    allow_defaults: bool,
    disallow_reason: String,
    inside_meta: bool,
}

impl ApiCtx {
    fn root() -> ApiCtx {
        ApiCtx { allow_defaults: true, disallow_reason: String::new(), inside_meta: false }
    }

    fn forbid_defaults(&self, reason: String) -> ApiCtx {
        ApiCtx { allow_defaults: false, disallow_reason: reason, ..self.clone() }
    }
}

const OPENAPI_TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];
const RULE_REASONS: [&str; 4] =
    ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];

fn go_string_slice(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

fn has_newlines(s: &str) -> bool {
    s.contains('\n') || s.contains('\r')
}

fn api_checks(s: &Node, path: &str, ctx: &ApiCtx, is_root: bool, errs: &mut Vec<FieldError>) {
    let p = |name: &str| child(path, name);
    // specStandardValidatorV3.validate
    if !s.type_name.is_empty() && !OPENAPI_TYPES.contains(&s.type_name.as_str()) {
        let valid: Vec<String> = OPENAPI_TYPES.iter().map(|t| t.to_string()).collect();
        errs.push(FieldError::not_supported(p("type"), Bad::Str(s.type_name.clone()), &valid));
    }
    if s.default.is_some() && !ctx.allow_defaults {
        let mut detail = "must not be set".to_string();
        if !ctx.disallow_reason.is_empty() {
            detail.push(' ');
            detail.push_str(&ctx.disallow_reason);
        }
        errs.push(FieldError::forbidden(p("default"), detail));
    }
    let u = &s.unsupported;
    if u.id {
        errs.push(FieldError::forbidden(p("id"), "id is not supported"));
    }
    if u.additional_items {
        errs.push(FieldError::forbidden(p("additionalItems"), "additionalItems is not supported"));
    }
    if u.pattern_properties {
        errs.push(FieldError::forbidden(
            p("patternProperties"),
            "patternProperties is not supported",
        ));
    }
    if u.definitions {
        errs.push(FieldError::forbidden(p("definitions"), "definitions is not supported"));
    }
    if u.dependencies {
        errs.push(FieldError::forbidden(p("dependencies"), "dependencies is not supported"));
    }
    if u.reference {
        errs.push(FieldError::forbidden(p("$ref"), "$ref is not supported"));
    }
    if s.type_name == "null" {
        errs.push(FieldError::forbidden(
            p("type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if u.items_array {
        errs.push(FieldError::forbidden(
            p("items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_meta && s.embedded {
        errs.push(FieldError::forbidden(
            p("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }

    if s.unique_items {
        errs.push(FieldError::forbidden(
            p("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }

    if let Some(additional) = &s.additional {
        if !s.properties.is_empty() && !matches!(additional, Additional::Bool(true)) {
            errs.push(FieldError::forbidden(
                p("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ctx.inside_meta {
            ctx.forbid_defaults("inside additionalProperties applying to object metadata".into())
        } else {
            ctx.clone()
        };
        if let Additional::Schema(a) = additional {
            api_checks(a, &p("additionalProperties"), &sub, false, errs);
        }
    }

    for (k, prop) in &s.properties {
        let mut sub = ctx.clone();
        if (is_root || s.embedded) && matches!(k.as_str(), "metadata" | "kind" | "apiVersion") {
            sub.inside_meta = true;
            if is_root {
                sub = sub.forbid_defaults(format!("in top-level {k}"));
            }
        }
        api_checks(prop, &key(&p("properties"), k), &sub, false, errs);
    }
    if let Some(not) = &s.not {
        api_checks(not, &p("not"), ctx, false, errs);
    }
    for (name, list) in [("allOf", &s.all_of), ("oneOf", &s.one_of), ("anyOf", &s.any_of)] {
        for (i, a) in list.iter().enumerate() {
            api_checks(a, &index(&p(name), i), ctx, false, errs);
        }
    }
    if let Some(items) = &s.items {
        api_checks(items, &p("items"), ctx, false, errs);
    }

    if s.preserve_unknown == Some(false) {
        errs.push(FieldError::invalid(
            p("x-kubernetes-preserve-unknown-fields"),
            Bad::Raw("false".into()),
            "must be true or undefined",
        ));
    }

    if s.map_type.is_some() && s.type_name != "object" {
        let detail = "must be object if x-kubernetes-map-type is specified";
        if s.type_name.is_empty() {
            errs.push(FieldError::required(p("type"), detail));
        } else {
            errs.push(FieldError::invalid(p("type"), Bad::Str(s.type_name.clone()), detail));
        }
    }
    if let Some(mt) = &s.map_type {
        if mt != "atomic" && mt != "granular" {
            errs.push(FieldError::not_supported(
                p("x-kubernetes-map-type"),
                Bad::Str(mt.clone()),
                &["atomic".to_string(), "granular".to_string()],
            ));
        }
    }

    if s.list_type.is_some() && s.type_name != "array" {
        let detail = "must be array if x-kubernetes-list-type is specified";
        if s.type_name.is_empty() {
            errs.push(FieldError::required(p("type"), detail));
        } else {
            errs.push(FieldError::invalid(p("type"), Bad::Str(s.type_name.clone()), detail));
        }
    } else if s.list_type.as_deref() == Some("set") {
        if let Some(items) = &s.items {
            let detail = "must be atomic as item of a list with x-kubernetes-list-type=set";
            match items.type_name.as_str() {
                "array" => {
                    if let Some(lt) = items.list_type.as_ref().filter(|lt| lt.as_str() != "atomic")
                    {
                        errs.push(FieldError::invalid(
                            child(&p("items"), "x-kubernetes-list-type"),
                            Bad::Str(lt.clone()),
                            detail,
                        ));
                    }
                }
                "object" if items.map_type.as_deref() != Some("atomic") => {
                    let bad = match &items.list_type {
                        Some(lt) => Bad::Str(lt.clone()),
                        None => Bad::Str("null".into()),
                    };
                    errs.push(FieldError::invalid(
                        child(&p("items"), "x-kubernetes-map-type"),
                        bad,
                        detail,
                    ));
                }
                _ => {}
            }
        }
    }
    if let Some(lt) = &s.list_type {
        if !matches!(lt.as_str(), "atomic" | "set" | "map") {
            errs.push(FieldError::not_supported(
                p("x-kubernetes-list-type"),
                Bad::Str(lt.clone()),
                &["atomic".to_string(), "set".to_string(), "map".to_string()],
            ));
        }
    }
    if !s.list_map_keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match &s.list_type {
            None => errs.push(FieldError::required(p("x-kubernetes-list-type"), detail)),
            Some(lt) if lt != "map" => errs.push(FieldError::invalid(
                p("x-kubernetes-list-type"),
                Bad::Str(lt.clone()),
                detail,
            )),
            _ => {}
        }
    }
    if s.list_type.as_deref() == Some("map") {
        if s.list_map_keys.is_empty() {
            errs.push(FieldError::required(
                p("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match &s.items {
            None if !u.items_array => errs.push(FieldError::required(
                p("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            None => errs.push(FieldError::invalid(
                p("items"),
                Bad::Raw("[]".into()),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            Some(items) if items.type_name != "object" => errs.push(FieldError::invalid(
                child(&p("items"), "type"),
                Bad::Str(items.type_name.clone()),
                "must be object if parent array's x-kubernetes-list-type is map",
            )),
            Some(items) => {
                let keys_bad = Bad::Raw(go_string_slice(&s.list_map_keys));
                let mut seen: Vec<&str> = Vec::new();
                for k in &s.list_map_keys {
                    match items.properties.get(k) {
                        Some(prop) if prop.type_name == "array" || prop.type_name == "object" => {
                            errs.push(FieldError::invalid(
                                child(&key(&child(&p("items"), "properties"), k), "type"),
                                Bad::Str(items.type_name.clone()),
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ))
                        }
                        Some(_) => {}
                        None => errs.push(FieldError::invalid(
                            p("x-kubernetes-list-map-keys"),
                            keys_bad.clone(),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(&k.as_str()) {
                        errs.push(FieldError::invalid(
                            p("x-kubernetes-list-map-keys"),
                            keys_bad.clone(),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }

    // validateMapListKeysMapSet
    if let (Some(items), Some(lt)) = (&s.items, &s.list_type) {
        if lt == "set" || lt == "map" {
            if items.nullable {
                errs.push(FieldError::forbidden(
                    child(&p("items"), "nullable"),
                    format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
                ));
            }
            if lt == "map" {
                for k in &s.list_map_keys {
                    let Some(prop) = items.properties.get(k) else { continue };
                    let prop_path = key(&child(&p("items"), "properties"), k);
                    if !items.required.contains(k) && prop.default.is_none() {
                        errs.push(FieldError::required(
                            child(&prop_path, "default"),
                            "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                        ));
                    }
                    if prop.nullable {
                        errs.push(FieldError::forbidden(
                            child(&prop_path, "nullable"),
                            "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                        ));
                    }
                }
            }
        }
    }

    for (i, r) in s.raw_rules.iter().enumerate() {
        let rp = index(&p("x-kubernetes-validations"), i);
        let rule = r.rule.trim();
        let msg = r.message.trim();
        if rule.is_empty() {
            errs.push(FieldError::required(child(&rp, "rule"), "rule is not specified"));
        } else if !r.message.is_empty() && msg.is_empty() {
            errs.push(FieldError::invalid(
                child(&rp, "message"),
                Bad::Str(r.message.clone()),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(msg) {
            errs.push(FieldError::invalid(
                child(&rp, "message"),
                Bad::Str(r.message.clone()),
                "message must not contain line breaks",
            ));
        } else if has_newlines(rule) && msg.is_empty() {
            errs.push(FieldError::required(
                child(&rp, "message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !r.message_expression.is_empty() && r.message_expression.trim().is_empty() {
            errs.push(FieldError::required(
                child(&rp, "messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = &r.reason {
            if !RULE_REASONS.contains(&reason.as_str()) {
                let valid: Vec<String> = RULE_REASONS.iter().map(|s| s.to_string()).collect();
                errs.push(FieldError::not_supported(
                    child(&rp, "reason"),
                    Bad::Str(reason.clone()),
                    &valid,
                ));
            }
        }
        if !r.field_path.is_empty() {
            let fp = child(&rp, "fieldPath");
            if r.field_path.trim().is_empty() {
                errs.push(FieldError::invalid(
                    fp.clone(),
                    Bad::Str(r.field_path.clone()),
                    "fieldPath must be non-empty if specified",
                ));
            }
            if has_newlines(&r.field_path) {
                errs.push(FieldError::invalid(
                    fp.clone(),
                    Bad::Str(r.field_path.clone()),
                    "fieldPath must not contain line breaks",
                ));
            }
            if cel::valid_field_path(&r.field_path, s).is_err() {
                errs.push(FieldError::invalid(
                    fp,
                    Bad::Str(r.field_path.clone()),
                    "fieldPath must be a valid path",
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// CEL

/// The estimated costs of a schema's rules, summed as kube-apiserver sums them.
#[derive(Default)]
struct Costs {
    total: u64,
    /// Whether rules over the limits are refused.
    limit: bool,
    /// Each rule's path and estimated cost (times how often it runs).
    rules: Vec<(String, u64)>,
}

impl Costs {
    /// Count the expression at `at` (a rule or a message expression; `what` names its cost in
    /// kube-apiserver's words), refusing it when it alone is over the per-expression limit.
    fn charge(&mut self, at: String, what: &str, cost: u64, errs: &mut Vec<FieldError>) {
        if self.limit && cost > cel::STATIC_ESTIMATED_COST_LIMIT {
            let message = cel::cost_error_message(what, cost, cel::STATIC_ESTIMATED_COST_LIMIT);
            errs.push(FieldError::forbidden(&at, message));
        }
        self.total = self.total.saturating_add(cost);
        self.rules.push((at, cost));
    }
}

/// Compiles every node's rules and estimates their cost, as kube-apiserver does when a
/// definition is written: a rule whose estimated cost (one evaluation's, times how many times it
/// runs in the largest object: the product of the sizes of the lists and maps above it) exceeds
/// `StaticEstimatedCostLimit` is refused at its `rule`, and so is a schema whose rules together
/// exceed `StaticEstimatedCRDCostLimit`.
fn compile_all_rules(root: &mut Node, path: &str, limit_costs: bool, errs: &mut Vec<FieldError>) {
    let mut costs = Costs { limit: limit_costs, ..Costs::default() };
    compile_rules(root, path, None, 1, &mut costs, errs);
    if limit_costs && costs.total > cel::STATIC_ESTIMATED_CRD_COST_LIMIT {
        // The most expensive rules first, as kube-apiserver names them.
        costs.rules.sort_by_key(|rule| std::cmp::Reverse(rule.1));
        for (rule, _) in costs.rules.iter().take(4) {
            errs.push(FieldError::forbidden(
                rule,
                "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errs.push(FieldError::forbidden(
            path,
            cel::cost_error_message(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                costs.total,
                cel::STATIC_ESTIMATED_CRD_COST_LIMIT,
            ),
        ));
    }
}

/// Compiles the rules of `s` and below. `uncorrelatable` is the path of the highest list (not of
/// type map) above the node: transition rules cannot compare old and new values under it.
/// `cardinality` is how many values of `s` the largest object can hold.
fn compile_rules(
    s: &mut Node,
    path: &str,
    uncorrelatable: Option<&str>,
    cardinality: u64,
    costs: &mut Costs,
    errs: &mut Vec<FieldError>,
) {
    let raw = std::mem::take(&mut s.raw_rules);
    for (i, r) in raw.iter().enumerate() {
        let rp = index(&child(path, "x-kubernetes-validations"), i);
        match cel::compile_rule(r, s, &rp, uncorrelatable) {
            Ok(Some(compiled)) => {
                let cost = cel::estimated_cost(&r.rule, s).saturating_mul(cardinality);
                costs.charge(child(&rp, "rule"), "estimated rule cost", cost, errs);
                // A message expression runs once per failure, so its cost is not multiplied.
                if !r.message_expression.trim().is_empty() {
                    let cost = cel::estimated_cost(&r.message_expression, s);
                    let what = "estimated messageExpression cost";
                    costs.charge(child(&rp, "messageExpression"), what, cost, errs);
                }
                s.rules.push(compiled);
            }
            Ok(None) => {}
            Err(mut e) => errs.append(&mut e),
        }
    }
    s.raw_rules = raw;
    let items_uncorrelatable = if s.list_type.as_deref() == Some("map") {
        uncorrelatable.map(str::to_string)
    } else {
        Some(uncorrelatable.map(str::to_string).unwrap_or_else(|| path.to_string()))
    };
    let elements = cardinality.saturating_mul(cel::max_elements(s));
    if let Some(items) = s.items.as_deref_mut() {
        let p = child(path, "items");
        compile_rules(items, &p, items_uncorrelatable.as_deref(), elements, costs, errs);
    }
    for (k, p) in s.properties.iter_mut() {
        let at = key(&child(path, "properties"), k);
        compile_rules(p, &at, uncorrelatable, cardinality, costs, errs);
    }
    if let Some(Additional::Schema(a)) = s.additional.as_mut() {
        let p = child(path, "additionalProperties");
        compile_rules(a, &p, uncorrelatable, elements, costs, errs);
    }
}

fn mark_rules(s: &mut Node) -> bool {
    let mut has = !s.rules.is_empty();
    if let Some(items) = s.items.as_deref_mut() {
        has |= mark_rules(items);
    }
    for p in s.properties.values_mut() {
        has |= mark_rules(p);
    }
    if let Some(Additional::Schema(a)) = s.additional.as_mut() {
        has |= mark_rules(a);
    }
    s.has_rules = has;
    has
}
