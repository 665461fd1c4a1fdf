//! ValidatingAdmissionPolicies, as kube-apiserver's `ValidatingAdmissionPolicy` admission plugin
//! enforces them: every create, update and delete of a cluster (its subresources included) is
//! checked against each binding whose policy and `matchResources` select it, after the object
//! was defaulted and validated and before the cluster's own admission ([`super::Admission`]:
//! a tenant's pod security and GPU quota, which no policy can switch off). Dry runs are checked
//! too.
//!
//! A binding selects its policy by `policyName`; the policy's `matchConstraints` and the
//! binding's `matchResources` select the request (`matching`); the binding's `paramRef` gives
//! the parameters (each matched one evaluated in turn); the policy's `matchConditions` must all
//! be true; then its `validations` and `auditAnnotations` are evaluated, `variables` evaluated
//! once each and only when read. A failed validation is denied (`Deny`: the request is refused
//! with the validation's reason), warned of (`Warn`: a `Warning` header) or logged (`Audit`), as
//! the binding's `validationActions` say; an expression that fails to evaluate, or a binding
//! whose parameters cannot be found, follows the policy's `failurePolicy`. There is no audit log:
//! `Audit` failures and audit annotations are written with `tracing` (target
//! `carrel::admission::audit`).
//!
//! Policies and bindings are read from the cluster's own store and compiled once per change:
//! every write of either bumps [`changed`]'s generation, and the next request reads them again.
//!
//! Left out, as kube-apiserver has them:
//! - `authorizer`: not declared, so an expression reading it is refused when the policy is
//!   written ([`cel`]);
//! - type checking: expressions are parsed and their variables checked when written, but not
//!   type-checked (a comparison of a string with an int fails when evaluated, following
//!   `failurePolicy`), and the policy's `status.typeChecking` and `status.observedGeneration`
//!   are never written; objects are bound as JSON, so timestamps and quantities are strings;
//! - requests that do not go through `Api::create`, `Api::update` or `Api::delete`: `CONNECT`
//!   (exec, attach, port forward) and `pods/eviction` are not evaluated (an eviction's delete is
//!   evaluated as a `DELETE` of the pod), and a pod's `binding` is evaluated as an `UPDATE` of the
//!   pod; `matchPolicy: Equivalent` reaches the other served versions of the same resource only
//!   (no other group serves an equivalent one here);
//! - a namespace that does not exist matches a non-empty namespace selector as one without
//!   labels, where kube-apiserver answers 404.

pub mod cel;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use carrel_schema::{Activation, Bound, Expression};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec,
};
use serde_json::Value;

use super::matching;
use super::reloaded::{stored, Reloaded};
use super::request::{in_version, namespace_object, request_value};
pub use super::request::{Attributes, Operation, Requester};
use crate::api::{Api, ListParams, Target};
use crate::registry::admissionregistration::{
    validatingadmissionpolicies, validatingadmissionpolicybindings, GROUP,
};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, DeniedReason};
use crate::validation::Selector;

/// The policies and bindings of a cluster, compiled, as of a generation of their writes.
pub type Cache = Reloaded<Loaded>;

/// Note a write of a policy or a binding: the next request reads them again.
pub fn changed(api: &Api) {
    api.policies.changed();
}

#[derive(Debug, Default)]
pub struct Loaded {
    policies: HashMap<String, Policy>,
    /// By name, in name order.
    bindings: Vec<Binding>,
}

#[derive(Debug)]
struct Policy {
    name: String,
    spec: ValidatingAdmissionPolicySpec,
    /// `failurePolicy: Ignore`.
    ignore_failures: bool,
    match_conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expression)>,
    /// Why the policy cannot be used (an expression stored that no longer compiles).
    broken: Option<String>,
}

#[derive(Debug)]
struct Validation {
    source: String,
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: DeniedReason,
}

#[derive(Debug)]
struct Binding {
    name: String,
    spec: ValidatingAdmissionPolicyBindingSpec,
}

impl Policy {
    fn compile(policy: ValidatingAdmissionPolicy) -> Policy {
        let name = policy.metadata.name.unwrap_or_default();
        let spec = policy.spec.unwrap_or_default();
        let names: Vec<&str> = spec.variables.iter().flatten().map(|v| v.name.as_str()).collect();
        let mut broken = None;
        let mut compile = |src: &str, declared: &[&str]| match cel::compile(src, declared) {
            Ok(e) => Some(e),
            Err(e) => {
                broken.get_or_insert_with(|| format!("compilation failed: {e}"));
                None
            }
        };
        let match_conditions = spec
            .match_conditions
            .iter()
            .flatten()
            .filter_map(|c| Some((c.name.clone(), compile(&c.expression, &names)?)))
            .collect();
        let variables = spec
            .variables
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, v)| Some((v.name.clone(), compile(&v.expression, &names[..i])?)))
            .collect();
        let validations = spec
            .validations
            .iter()
            .flatten()
            .filter_map(|v| {
                Some(Validation {
                    source: v.expression.clone(),
                    expression: compile(&v.expression, &names)?,
                    message: v.message.clone().filter(|m| !m.trim().is_empty()),
                    message_expression: v
                        .message_expression
                        .as_deref()
                        .filter(|m| !m.trim().is_empty())
                        .and_then(|m| compile(m, &names)),
                    reason: v
                        .reason
                        .as_deref()
                        .and_then(DeniedReason::parse)
                        .unwrap_or(DeniedReason::Invalid),
                })
            })
            .collect();
        let audit_annotations = spec
            .audit_annotations
            .iter()
            .flatten()
            .filter_map(|a| Some((a.key.clone(), compile(&a.value_expression, &names)?)))
            .collect();
        Policy {
            name,
            ignore_failures: spec.failure_policy.as_deref() == Some("Ignore"),
            spec,
            match_conditions,
            variables,
            validations,
            audit_annotations,
            broken,
        }
    }
}

/// The cluster's policies and bindings as of now: read and compiled again after a write of
/// either.
fn load(api: &Api) -> ApiResult<Arc<Loaded>> {
    api.policies.get(|| load_from(api))
}

fn load_from(api: &Api) -> ApiResult<Loaded> {
    let mut loaded = Loaded::default();
    for item in stored(api, &validatingadmissionpolicies::TYPE)? {
        // What is stored was validated: it decodes.
        if let Ok(policy) = serde_json::from_value::<ValidatingAdmissionPolicy>(item) {
            let policy = Policy::compile(policy);
            loaded.policies.insert(policy.name.clone(), policy);
        }
    }
    for item in stored(api, &validatingadmissionpolicybindings::TYPE)? {
        if let Ok(binding) = serde_json::from_value::<ValidatingAdmissionPolicyBinding>(item) {
            loaded.bindings.push(Binding {
                name: binding.metadata.name.unwrap_or_default(),
                spec: binding.spec.unwrap_or_default(),
            });
        }
    }
    Ok(loaded)
}

/// What one validation, or a failure, decided.
#[derive(Debug)]
struct Decision {
    message: String,
    reason: DeniedReason,
}

/// Check a request against every binding of the cluster: `Ok` when admitted (warnings added to
/// the requester's), else the first denial.
pub fn admit(api: &Api, attributes: &Attributes<'_>) -> ApiResult<()> {
    // As kube-apiserver, the policies do not apply to admission's own configuration.
    if attributes.rt.group == GROUP {
        return Ok(());
    }
    let loaded = load(api)?;
    if loaded.bindings.is_empty() {
        return Ok(());
    }
    let namespace_object = namespace_object(api, attributes)?;
    let a = Attributes { namespace_object: namespace_object.as_ref(), ..*attributes };
    let registry = api.registry();
    let served = registry.all();
    let mut denied: Option<(String, DeniedReason)> = None;
    for binding in &loaded.bindings {
        let Some(policy) = binding.spec.policy_name.as_deref().and_then(|p| loaded.policies.get(p))
        else {
            continue;
        };
        let Some(constraints) = &policy.spec.match_constraints else { continue };
        let Some(matched) = matching::matches(constraints, true, &a, served) else { continue };
        if let Some(m) = &binding.spec.match_resources {
            if matching::matches(m, false, &a, served).is_none() {
                continue;
            }
        }
        let decisions = match configuration(api, policy, binding, &a) {
            Ok(params) => params
                .iter()
                .flat_map(|param| evaluate(policy, &a, matched, param.as_ref()))
                .collect(),
            Err(why) if policy.ignore_failures => {
                tracing::debug!(
                    policy = policy.name,
                    binding = binding.name,
                    why,
                    "admission policy not configured; ignored"
                );
                Vec::new()
            }
            Err(why) => vec![Decision {
                message: format!("failed to configure binding: {why}"),
                reason: DeniedReason::Invalid,
            }],
        };
        for decision in decisions {
            for action in binding.spec.validation_actions.iter().flatten() {
                match action.as_str() {
                    "Deny" => {
                        denied.get_or_insert_with(|| {
                            (
                                format!(
                                    "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                                    policy.name, binding.name, decision.message
                                ),
                                decision.reason,
                            )
                        });
                    }
                    "Warn" => a.requester.warn(format!(
                        "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                        policy.name, binding.name, decision.message
                    )),
                    _ => tracing::info!(
                        target: "carrel::admission::audit",
                        policy = policy.name,
                        binding = binding.name,
                        resource = a.rt.plural,
                        namespace = a.namespace,
                        name = a.name,
                        operation = a.operation.name(),
                        message = decision.message,
                        "validation.policy.admission.k8s.io/validation_failure"
                    ),
                }
            }
        }
    }
    match denied {
        Some((why, reason)) => {
            Err(ApiError::policy_denied(a.rt.group, a.rt.plural, a.name, &why, reason))
        }
        None => Ok(()),
    }
}

/// The parameters a binding gives its policy for this request: one `None` for a policy without
/// `paramKind`, else each object the `paramRef` selects; `Err` for a binding that cannot be used
/// (kube-apiserver's configuration errors).
fn configuration(
    api: &Api,
    policy: &Policy,
    binding: &Binding,
    a: &Attributes<'_>,
) -> Result<Vec<Option<Value>>, String> {
    if let Some(why) = &policy.broken {
        return Err(why.clone());
    }
    let Some(kind) = &policy.spec.param_kind else { return Ok(vec![None]) };
    let api_version = kind.api_version.as_deref().unwrap_or_default();
    let kind_name = kind.kind.as_deref().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let registry = api.registry();
    let Some(rt) = registry
        .all()
        .iter()
        .find(|t| t.group == group && t.version == version && t.kind == kind_name)
    else {
        return Err(format!(
            "failed to find resource referenced by paramKind: '{api_version}, Kind={kind_name}'"
        ));
    };
    let Some(param_ref) = &binding.spec.param_ref else {
        return Err(format!(
            "paramKind kind `{api_version}, Kind={kind_name}` is configured but paramRef is unset"
        ));
    };
    let namespace = if rt.namespaced {
        match param_ref.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => Some(ns.to_owned()),
            None if !a.namespace.is_empty() && !a.rt.strategy.is_namespace() => {
                Some(a.namespace.to_owned())
            }
            None => {
                return Err("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources".to_owned());
            }
        }
    } else {
        None
    };
    let target = Target { rt, namespace: namespace.clone() };
    let found: Vec<Value> = match param_ref.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => match api.get(&target, name) {
            Ok(param) => vec![param],
            Err(ApiError::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e.message().to_owned()),
        },
        None => {
            let list =
                api.list(&target, &ListParams::default()).map_err(|e| e.message().to_owned())?;
            let selector = Selector::of(param_ref.selector.as_ref());
            list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| {
                    let labels = o
                        .pointer("/metadata/labels")
                        .cloned()
                        .and_then(|l| serde_json::from_value(l).ok());
                    selector.matches(labels.as_ref())
                })
                .cloned()
                .collect()
        }
    };
    if found.is_empty() {
        return match param_ref.parameter_not_found_action.as_deref() {
            Some("Allow") => Ok(Vec::new()),
            _ => {
                Err("no params found for policy binding with `Deny` parameterNotFoundAction"
                    .to_owned())
            }
        };
    }
    Ok(found.into_iter().map(Some).collect())
}

/// The variables of one evaluation, each evaluated once, when first read.
struct Variables<'p> {
    policy: &'p Policy,
    values: HashMap<String, Result<Bound, String>>,
}

impl Variables<'_> {
    /// The activation `expression` runs with: the base values, and `variables` with what it
    /// reads (and what those read) evaluated.
    fn activation(
        &mut self,
        base: &Activation,
        expression: &Expression,
    ) -> Result<Activation, String> {
        let mut wanted: Vec<&str> =
            expression.variables_used().iter().map(String::as_str).collect();
        // Variables read only earlier ones: resolve the closure in declaration order, backwards.
        for (name, e) in self.policy.variables.iter().rev() {
            if wanted.contains(&name.as_str()) {
                wanted.extend(e.variables_used().iter().map(String::as_str));
            }
        }
        for (name, e) in &self.policy.variables {
            if !wanted.contains(&name.as_str()) || self.values.contains_key(name) {
                continue;
            }
            let mut activation = base.clone();
            activation.bind("variables", self.bound());
            let value = e.eval(&activation).map_err(|why| why.0);
            self.values.insert(name.clone(), value);
        }
        for name in &wanted {
            if let Some(Err(why)) = self.values.get(*name) {
                return Err(why.clone());
            }
        }
        let mut activation = base.clone();
        activation.bind("variables", self.bound());
        Ok(activation)
    }

    fn bound(&self) -> Bound {
        Bound::map(
            self.values.iter().filter_map(|(k, v)| Some((k.clone(), v.as_ref().ok()?.clone()))),
        )
    }
}

/// Evaluate `policy` for one request and parameter: the decisions of the validations that did
/// not pass, and of the failures that its failure policy makes refusals.
fn evaluate(
    policy: &Policy,
    a: &Attributes<'_>,
    matched: &ResourceType,
    param: Option<&Value>,
) -> Vec<Decision> {
    let mut base = Activation::default();
    base.bind_json("object", &in_version(a, matched, a.object));
    base.bind_json("oldObject", &in_version(a, matched, a.old));
    base.bind_json("request", &request_value(a, matched));
    base.bind_json("params", param.unwrap_or(&Value::Null));
    base.bind_json("namespaceObject", a.namespace_object.unwrap_or(&Value::Null));
    let mut variables = Variables { policy, values: HashMap::new() };
    let failure = |message: String| -> Vec<Decision> {
        if policy.ignore_failures {
            tracing::debug!(policy = policy.name, message, "admission policy failure ignored");
            Vec::new()
        } else {
            vec![Decision { message, reason: DeniedReason::Invalid }]
        }
    };
    let mut run = |src: &str, e: &Expression| -> Result<Bound, String> {
        let failed = |why: String| format!("expression '{src}' resulted in error: {why}");
        let activation = variables.activation(&base, e).map_err(failed)?;
        e.eval(&activation).map_err(|why| failed(why.0))
    };
    // Match conditions: any false skips the policy; errors without a false one are failures.
    let mut errors = Vec::new();
    let sources: HashMap<&str, &str> = policy
        .spec
        .match_conditions
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.expression.as_str()))
        .collect();
    for (name, e) in &policy.match_conditions {
        match run(sources.get(name.as_str()).copied().unwrap_or_default(), e) {
            Ok(v) if v.as_bool() == Some(false) => return Vec::new(),
            Ok(v) if v.as_bool() == Some(true) => {}
            Ok(_) => errors.push(format!("matchCondition '{name}' must evaluate to bool")),
            Err(why) => errors.push(why),
        }
    }
    if !errors.is_empty() {
        return failure(errors.join(", "));
    }
    let mut decisions = Vec::new();
    for v in &policy.validations {
        match run(&v.source, &v.expression) {
            Ok(result) if result.as_bool() == Some(true) => {}
            Ok(_) => {
                let from_expression = v.message_expression.as_ref().and_then(|m| {
                    let value = run("messageExpression", m).ok()?;
                    let message = value.as_str()?.trim().to_owned();
                    (!message.is_empty() && message.len() <= 5 * 1024 && !message.contains('\n'))
                        .then_some(message)
                });
                let message = from_expression
                    .or_else(|| v.message.as_ref().map(|m| m.trim().to_owned()))
                    .unwrap_or_else(|| format!("failed expression: {}", v.source.trim()));
                decisions.push(Decision { message, reason: v.reason });
            }
            Err(why) => decisions.extend(failure(why)),
        }
    }
    let sources: HashMap<&str, &str> = policy
        .spec
        .audit_annotations
        .iter()
        .flatten()
        .map(|x| (x.key.as_str(), x.value_expression.as_str()))
        .collect();
    for (key, e) in &policy.audit_annotations {
        let src = sources.get(key.as_str()).copied().unwrap_or_default();
        match run(src, e) {
            Ok(value) if value.is_null() => {}
            Ok(value) => match value.as_str() {
                Some(text) => tracing::info!(
                    target: "carrel::admission::audit",
                    annotation = format!("{}/{key}", policy.name),
                    value = text,
                    resource = a.rt.plural,
                    namespace = a.namespace,
                    name = a.name,
                    operation = a.operation.name(),
                    "audit annotation"
                ),
                None => decisions.extend(failure(format!(
                    "valueExpression '{src}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    value.type_name()
                ))),
            },
            Err(why) => decisions.extend(failure(why)),
        }
    }
    decisions
}
