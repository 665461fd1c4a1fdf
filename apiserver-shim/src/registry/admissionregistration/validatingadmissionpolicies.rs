//! ValidatingAdmissionPolicies (`validatingadmissionpolicies` in `admissionregistration.k8s.io/v1`):
//! how the API server serves them. Enforced by [`crate::admission::policy`], which reads them
//! again after every write of one.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicySpec,
};
use serde_json::{json, Value};

use super::{default_match_resources, match_resources, GROUP};
use crate::admission::policy::{self as enforced, cel};
use crate::api::Api;
use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::table::{self, col, AGE, NAME};
use crate::validation::Errors;

/// The `validatingadmissionpolicies` resource type.
pub const TYPE: ResourceType = served(
    GROUP,
    "v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
    "validatingadmissionpolicy",
    false,
    NONE,
    &["api-extensions"],
    STATUS,
    &ValidatingAdmissionPolicies,
);

/// The strategy for ValidatingAdmissionPolicies.
#[derive(Debug)]
pub struct ValidatingAdmissionPolicies;

impl Validate for ValidatingAdmissionPolicies {
    type Object = ValidatingAdmissionPolicy;

    fn validate(&self, object: &ValidatingAdmissionPolicy, e: &mut Errors) {
        match &object.spec {
            Some(spec) => policy_spec(spec, e),
            None => e.required("spec.matchConstraints", ""),
        }
    }

    fn validate_update(
        &self,
        _old: &ValidatingAdmissionPolicy,
        new: &ValidatingAdmissionPolicy,
        e: &mut Errors,
    ) {
        self.validate(new, e);
    }
}

impl Strategy for ValidatingAdmissionPolicies {
    /// `SetDefaults_ValidatingAdmissionPolicySpec`: `failurePolicy: Fail`, and the defaults of
    /// `matchConstraints`.
    fn defaults(&self, object: &mut Value) {
        let Some(root) = object.as_object_mut() else { return };
        let spec = root.entry("spec").or_insert_with(|| json!({}));
        let Some(spec) = spec.as_object_mut() else { return };
        set_default(spec, "failurePolicy", json!("Fail"));
        if let Some(m) = spec.get_mut("matchConstraints").and_then(Value::as_object_mut) {
            default_match_resources(m);
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&[
            NAME,
            col("Validations", "integer", "The number of validations"),
            col("ParamKind", "string", "The kind of the parameter resources"),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        let param_kind = match object.pointer("/spec/paramKind") {
            Some(p) => format!("{}/{}", table::str_at(p, "/apiVersion"), table::str_at(p, "/kind")),
            None => "<unset>".to_owned(),
        };
        vec![
            table::name_cell(object),
            json!(object
                .pointer("/spec/validations")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)),
            json!(param_kind),
            table::age_cell(object),
        ]
    }

    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        enforced::changed(api);
        Ok(())
    }
}

/// `validateValidatingAdmissionPolicySpec`, each expression compiled as it will run.
fn policy_spec(spec: &ValidatingAdmissionPolicySpec, e: &mut Errors) {
    match spec.failure_policy.as_deref() {
        Some("Fail" | "Ignore") => {}
        None => e.required("spec.failurePolicy", ""),
        Some(other) => e.not_supported("spec.failurePolicy", &quote(other), &["Fail", "Ignore"]),
    }
    if let Some(kind) = &spec.param_kind {
        match kind.kind.as_deref() {
            None | Some("") => e.required("spec.paramKind.kind", ""),
            Some(_) => {}
        }
        match kind.api_version.as_deref() {
            None | Some("") => e.required("spec.paramKind.apiVersion", ""),
            Some(v) => {
                let parts: Vec<&str> = v.split('/').collect();
                if parts.len() > 2 || parts.iter().any(|p| p.is_empty()) {
                    e.invalid(
                        "spec.paramKind.apiVersion",
                        &quote(v),
                        "must be a valid group/version",
                    );
                }
            }
        }
    }
    match &spec.match_constraints {
        None => e.required("spec.matchConstraints", ""),
        Some(m) => match_resources(m, "spec.matchConstraints", true, e),
    }
    let validations = spec.validations.as_deref().unwrap_or_default();
    let audits = spec.audit_annotations.as_deref().unwrap_or_default();
    if validations.is_empty() && audits.is_empty() {
        e.required(
            "spec.validations",
            "validations or auditAnnotations must contain at least one item",
        );
    }
    let all_variables: Vec<&str> =
        spec.variables.iter().flatten().map(|v| v.name.as_str()).collect();
    let conditions = spec.match_conditions.as_deref().unwrap_or_default();
    super::match_conditions(
        conditions,
        "spec",
        &|src| cel::compile(src, &all_variables).map(drop).map_err(|e| e.to_string()),
        e,
    );
    let mut variables: Vec<&str> = Vec::new();
    for (i, variable) in spec.variables.iter().flatten().enumerate() {
        let path = format!("spec.variables[{i}]");
        if variable.name.is_empty() {
            e.required(&format!("{path}.name"), "");
        } else if !cel::is_identifier(&variable.name) {
            e.invalid(
                &format!("{path}.name"),
                &quote(&variable.name),
                "name is not a valid CEL identifier",
            );
        }
        expression(&variable.expression, &format!("{path}.expression"), &variables, e);
        variables.push(&variable.name);
    }
    let variables = all_variables;
    for (i, v) in validations.iter().enumerate() {
        let path = format!("spec.validations[{i}]");
        expression(&v.expression, &format!("{path}.expression"), &variables, e);
        if let Some(m) = v.message_expression.as_deref().filter(|m| !m.trim().is_empty()) {
            expression(m, &format!("{path}.messageExpression"), &variables, e);
        }
        if let Some(message) = v.message.as_deref() {
            if message.trim().is_empty() && !message.is_empty() {
                e.invalid(
                    &format!("{path}.message"),
                    &quote(message),
                    "message must be non-empty if specified",
                );
            } else if message.contains('\n') {
                e.invalid(
                    &format!("{path}.message"),
                    &quote(message),
                    "message must not contain line breaks",
                );
            }
        }
        if let Some(reason) = v.reason.as_deref() {
            let supported = ["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"];
            if !supported.contains(&reason) {
                e.not_supported(&format!("{path}.reason"), &quote(reason), &supported);
            }
        }
    }
    let mut keys = BTreeSet::new();
    for (i, a) in audits.iter().enumerate() {
        let path = format!("spec.auditAnnotations[{i}]");
        if a.key.is_empty() {
            e.required(&format!("{path}.key"), "");
        } else {
            e.invalid_each(
                &format!("{path}.key"),
                &a.key,
                carrel_machinery::names::qualified_name(&a.key),
            );
            if !keys.insert(a.key.clone()) {
                e.duplicate(&format!("{path}.key"), &quote(&a.key));
            }
        }
        expression(&a.value_expression, &format!("{path}.valueExpression"), &variables, e);
    }
}

/// An expression that must compile where `variables` are declared: required, and refused with
/// the compiler's error.
fn expression(src: &str, path: &str, variables: &[&str], e: &mut Errors) {
    if src.trim().is_empty() {
        e.required(path, "");
        return;
    }
    if let Err(why) = cel::compile(src, variables) {
        e.invalid(path, &quote(src), &format!("compilation failed: {why}"));
    }
}
