//! The structural-schema rules of kube-apiserver's `pkg/apiserver/schema/validation.go` (the
//! invariants every node must keep) and `complete.go` (what allOf/anyOf/oneOf/not may name).

use crate::error::{child, index, key, Bad, FieldError};
use crate::node::{Additional, Node};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
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

pub(super) fn invariants(s: &Node, lvl: Level, path: &str, errs: &mut Vec<FieldError>) {
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

pub(super) fn completeness(s: &Node, path: &str, errs: &mut Vec<FieldError>) {
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
