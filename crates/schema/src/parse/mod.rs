//! Reading a CRD version's `openAPIV3Schema` and checking it as kube-apiserver does when a CRD is
//! created: the structural-schema rules (`pkg/apiserver/schema/validation.go`, `complete.go`),
//! the defaults (`pkg/apiserver/schema/defaulting/validation.go`), the CRD API checks
//! (`pkg/apis/apiextensions/validation`) and the compilation of the CEL rules.
//!
//! This module decodes the JSON into [`Node`]s and runs the steps in kube-apiserver's order;
//! each step is a module of its own: `structural`, `default_check`, `api` and `rules`.

mod api;
mod default_check;
mod rules;
mod structural;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cel::RawRule;
use crate::error::{child, index, key, Bad, FieldError};
use crate::node::{Additional, Node};
use crate::regex_go;

use api::{api_checks, ApiCtx};
use default_check::validate_defaults;
use rules::{compile_all_rules, mark_rules};
use structural::{completeness, invariants, Level};

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
