//! The `admissionregistration.k8s.io` API group: ValidatingAdmissionPolicies and their bindings,
//! which [`crate::admission::policy`] enforces. What both kinds share here: the defaults and the
//! checks of `MatchResources` (kube-apiserver's `SetDefaults_MatchResources` and
//! `validateMatchResources`).

pub mod validatingadmissionpolicies;
pub mod validatingadmissionpolicybindings;

use k8s_openapi::api::admissionregistration::v1::{MatchResources, NamedRuleWithOperations};
use serde_json::{json, Map, Value};

use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::validation::{go_strings, label_selector, Errors};

/// The group's name.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// `SetDefaults_MatchResources` and `SetDefaults_NamedRuleWithOperations` on a `matchResources`
/// object.
fn default_match_resources(m: &mut Map<String, Value>) {
    set_default(m, "matchPolicy", json!("Equivalent"));
    set_default(m, "namespaceSelector", json!({}));
    set_default(m, "objectSelector", json!({}));
    for field in ["resourceRules", "excludeResourceRules"] {
        for rule in m.get_mut(field).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(rule) = rule.as_object_mut() {
                set_default(rule, "scope", json!("*"));
            }
        }
    }
}

/// The operations a rule may name.
const OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

/// `validateMatchResources`: `rules_required` for a policy's `matchConstraints`, which must name
/// resource rules.
fn match_resources(m: &MatchResources, path: &str, rules_required: bool, e: &mut Errors) {
    match m.match_policy.as_deref() {
        None | Some("Exact" | "Equivalent") => {}
        Some(other) => {
            e.not_supported(&format!("{path}.matchPolicy"), &quote(other), &["Equivalent", "Exact"])
        }
    }
    label_selector(m.namespace_selector.as_ref(), &format!("{path}.namespaceSelector"), e);
    label_selector(m.object_selector.as_ref(), &format!("{path}.objectSelector"), e);
    let rules = m.resource_rules.as_deref().unwrap_or_default();
    if rules_required && rules.is_empty() {
        e.required(&format!("{path}.resourceRules"), "");
    }
    for (i, rule) in rules.iter().enumerate() {
        named_rule(rule, &format!("{path}.resourceRules[{i}]"), e);
    }
    for (i, rule) in m.exclude_resource_rules.iter().flatten().enumerate() {
        named_rule(rule, &format!("{path}.excludeResourceRules[{i}]"), e);
    }
}

/// `validateNamedRuleWithOperations` (`validateRuleWithOperations` and the resource names).
fn named_rule(rule: &NamedRuleWithOperations, path: &str, e: &mut Errors) {
    let operations = rule.operations.as_deref().unwrap_or_default();
    if operations.is_empty() {
        e.required(&format!("{path}.operations"), "");
    }
    if operations.len() > 1 && operations.iter().any(|o| o == "*") {
        e.invalid(
            &format!("{path}.operations"),
            &go_strings("v1.OperationType", Some(operations)),
            "if '*' is present, must not specify other operations",
        );
    }
    for (i, op) in operations.iter().enumerate() {
        if !OPERATIONS.contains(&op.as_str()) {
            e.not_supported(&format!("{path}.operations[{i}]"), &quote(op), OPERATIONS);
        }
    }
    let star_alone = |list: &[String], field: &str, e: &mut Errors| {
        if list.len() > 1 && list.iter().any(|s| s == "*") {
            e.invalid(
                &format!("{path}.{field}"),
                &go_strings("string", Some(list)),
                "if '*' is present, must not specify other API groups",
            );
        }
    };
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    if groups.is_empty() {
        e.required(&format!("{path}.apiGroups"), "");
    }
    star_alone(groups, "apiGroups", e);
    let versions = rule.api_versions.as_deref().unwrap_or_default();
    if versions.is_empty() {
        e.required(&format!("{path}.apiVersions"), "");
    }
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            e.required(&format!("{path}.apiVersions[{i}]"), "");
        }
    }
    let resources = rule.resources.as_deref().unwrap_or_default();
    if resources.is_empty() {
        e.required(&format!("{path}.resources"), "");
    }
    for (i, r) in resources.iter().enumerate() {
        if r.is_empty() {
            e.required(&format!("{path}.resources[{i}]"), "");
        }
        let mut parts = r.splitn(2, '/');
        let (res, sub) = (parts.next().unwrap_or_default(), parts.next());
        if res.is_empty() || sub.is_some_and(str::is_empty) {
            e.invalid(
                &format!("{path}.resources[{i}]"),
                &quote(r),
                "resource or subresource is empty",
            );
        }
    }
    match rule.scope.as_deref() {
        None | Some("*" | "Cluster" | "Namespaced") => {}
        Some(other) => e.not_supported(
            &format!("{path}.scope"),
            &quote(other),
            &["*", "Cluster", "Namespaced"],
        ),
    }
    for (i, name) in rule.resource_names.iter().flatten().enumerate() {
        e.invalid_each(
            &format!("{path}.resourceNames[{i}]"),
            name,
            carrel_machinery::names::dns1123_subdomain(name),
        );
    }
}
