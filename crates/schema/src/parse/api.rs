//! The CRD API checks of a schema (`pkg/apis/apiextensions/validation`,
//! `ValidateCustomResourceDefinitionOpenAPISchema`): keywords, formats, list types and rules as
//! the CRD API accepts them.

use crate::cel;
use crate::error::{child, go_quote, index, key, Bad, FieldError};
use crate::node::{Additional, Node};

#[derive(Debug, Clone)]
pub(super) struct ApiCtx {
    allow_defaults: bool,
    disallow_reason: String,
    inside_meta: bool,
}

impl ApiCtx {
    pub(super) fn root() -> ApiCtx {
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

pub(super) fn api_checks(
    s: &Node,
    path: &str,
    ctx: &ApiCtx,
    is_root: bool,
    errs: &mut Vec<FieldError>,
) {
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
