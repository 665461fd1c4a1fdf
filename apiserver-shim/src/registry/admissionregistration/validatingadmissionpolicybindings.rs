//! ValidatingAdmissionPolicyBindings (`validatingadmissionpolicybindings` in
//! `admissionregistration.k8s.io/v1`): how the API server serves them. Enforced by
//! [`crate::admission::policy`], which reads them again after every write of one.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
};
use serde_json::{json, Value};

use super::{default_match_resources, match_resources, GROUP};
use crate::admission::policy as enforced;
use crate::api::Api;
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::table::{self, col, AGE, NAME};
use crate::validation::{go_strings, label_selector, Errors};

/// The `validatingadmissionpolicybindings` resource type.
pub const TYPE: ResourceType = served(
    GROUP,
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
    "validatingadmissionpolicybinding",
    false,
    NONE,
    &["api-extensions"],
    &[],
    &ValidatingAdmissionPolicyBindings,
);

/// The strategy for ValidatingAdmissionPolicyBindings.
#[derive(Debug)]
pub struct ValidatingAdmissionPolicyBindings;

impl Validate for ValidatingAdmissionPolicyBindings {
    type Object = ValidatingAdmissionPolicyBinding;

    fn validate(&self, object: &ValidatingAdmissionPolicyBinding, e: &mut Errors) {
        match &object.spec {
            Some(spec) => binding_spec(spec, e),
            None => {
                e.required("spec.policyName", "");
                e.required("spec.validationActions", "");
            }
        }
    }

    fn validate_update(
        &self,
        _old: &ValidatingAdmissionPolicyBinding,
        new: &ValidatingAdmissionPolicyBinding,
        e: &mut Errors,
    ) {
        self.validate(new, e);
    }
}

impl Strategy for ValidatingAdmissionPolicyBindings {
    /// The defaults of `matchResources` (`SetDefaults_MatchResources`).
    fn defaults(&self, object: &mut Value) {
        if let Some(m) = object.pointer_mut("/spec/matchResources").and_then(Value::as_object_mut) {
            default_match_resources(m);
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn has_generation(&self, _rt: &ResourceType) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&[
            NAME,
            col("PolicyName", "string", "The name of the policy bound"),
            col("ParamRef", "string", "The parameter resource referenced"),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        let param_ref = match object.pointer("/spec/paramRef") {
            Some(p) => {
                let ns = table::str_at(p, "/namespace");
                let name = table::str_at(p, "/name");
                let name = if name.is_empty() { "*" } else { name };
                if ns.is_empty() {
                    name.to_owned()
                } else {
                    format!("{ns}/{name}")
                }
            }
            None => "<unset>".to_owned(),
        };
        vec![
            table::name_cell(object),
            json!(table::str_at(object, "/spec/policyName")),
            json!(param_ref),
            table::age_cell(object),
        ]
    }

    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        enforced::changed(api);
        Ok(())
    }
}

/// The actions a binding may take on a failed validation.
const ACTIONS: &[&str] = &["Audit", "Deny", "Warn"];

/// `validateValidatingAdmissionPolicyBindingSpec`.
fn binding_spec(spec: &ValidatingAdmissionPolicyBindingSpec, e: &mut Errors) {
    match spec.policy_name.as_deref() {
        None | Some("") => e.required("spec.policyName", ""),
        Some(name) => e.invalid_each(
            "spec.policyName",
            name,
            carrel_machinery::names::dns1123_subdomain(name),
        ),
    }
    if let Some(p) = &spec.param_ref {
        let name = p.name.as_deref().filter(|n| !n.is_empty());
        if name.is_some() && p.selector.is_some() {
            e.forbidden("spec.paramRef.name", "name and selector are mutually exclusive");
        }
        if name.is_none() && p.selector.is_none() {
            e.required("spec.paramRef", "one of name or selector must be specified");
        }
        if let Some(name) = name {
            e.invalid_each(
                "spec.paramRef.name",
                name,
                carrel_machinery::names::dns1123_subdomain(name),
            );
        }
        if let Some(ns) = p.namespace.as_deref().filter(|n| !n.is_empty()) {
            e.invalid_each(
                "spec.paramRef.namespace",
                ns,
                carrel_machinery::names::dns1123_label(ns),
            );
        }
        label_selector(p.selector.as_ref(), "spec.paramRef.selector", e);
        match p.parameter_not_found_action.as_deref() {
            None | Some("") => e.required("spec.paramRef.parameterNotFoundAction", ""),
            Some("Allow" | "Deny") => {}
            Some(other) => e.not_supported(
                "spec.paramRef.parameterNotFoundAction",
                &quote(other),
                &["Allow", "Deny"],
            ),
        }
    }
    if let Some(m) = &spec.match_resources {
        match_resources(m, "spec.matchResources", false, e);
    }
    let actions = spec.validation_actions.as_deref().unwrap_or_default();
    if actions.is_empty() {
        e.required("spec.validationActions", "at least one validation action is required");
    }
    let mut seen = BTreeSet::new();
    for (i, action) in actions.iter().enumerate() {
        let path = format!("spec.validationActions[{i}]");
        if !ACTIONS.contains(&action.as_str()) {
            e.not_supported(&path, &quote(action), ACTIONS);
        } else if !seen.insert(action.as_str()) {
            e.duplicate(&path, &quote(action));
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        e.invalid(
            "spec.validationActions",
            &go_strings("string", Some(actions)),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        );
    }
}
