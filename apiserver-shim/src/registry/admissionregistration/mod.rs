//! The `admissionregistration.k8s.io` API group: ValidatingAdmissionPolicies and their bindings,
//! which [`crate::admission::policy`] enforces, and the validating and mutating webhook
//! configurations, which [`crate::admission::webhook`] calls. What the kinds share here: the
//! defaults and the checks of `MatchResources` (kube-apiserver's `SetDefaults_MatchResources`
//! and `validateMatchResources`), of rules, and of a webhook (`validateValidatingWebhook`).

pub mod mutatingwebhookconfigurations;
pub mod validatingadmissionpolicies;
pub mod validatingadmissionpolicybindings;
pub mod validatingwebhookconfigurations;

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingWebhook,
};
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
pub(crate) fn named_rule(rule: &NamedRuleWithOperations, path: &str, e: &mut Errors) {
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

/// `SetDefaults_ValidatingWebhook` (and `_MutatingWebhook`, whose `reinvocationPolicy` the
/// mutating kind defaults itself) on each of `object`'s `webhooks`, with their rules' scope and
/// their Service's port.
fn default_webhooks(object: &mut Value) {
    let hooks = object.get_mut("webhooks").and_then(Value::as_array_mut);
    for hook in hooks.into_iter().flatten().filter_map(Value::as_object_mut) {
        set_default(hook, "failurePolicy", json!("Fail"));
        set_default(hook, "matchPolicy", json!("Equivalent"));
        set_default(hook, "namespaceSelector", json!({}));
        set_default(hook, "objectSelector", json!({}));
        set_default(hook, "timeoutSeconds", json!(10));
        let rules = hook.get_mut("rules").and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten().filter_map(Value::as_object_mut) {
            set_default(rule, "scope", json!("*"));
        }
        let service = hook.get_mut("clientConfig").and_then(|c| c.get_mut("service"));
        if let Some(service) = service.and_then(Value::as_object_mut) {
            set_default(service, "port", json!(443));
        }
    }
}

/// A configuration's webhooks as the validating kind has them: a mutating webhook is one with
/// a `reinvocationPolicy` besides, checked by its own kind.
pub(crate) fn webhooks_of(object: &Value) -> Vec<ValidatingWebhook> {
    let hooks = object.get("webhooks").and_then(Value::as_array);
    hooks.into_iter().flatten().filter_map(|h| serde_json::from_value(h.clone()).ok()).collect()
}

/// The admission review versions this server sends.
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];

/// `validateValidatingWebhookConfiguration` for the webhooks of a configuration, as a create
/// checks them (no side effects but `None` and `NoneOnDryRun`, a review version this server
/// knows, names unique).
fn webhooks(hooks: &[ValidatingWebhook], e: &mut Errors) {
    let mut names = BTreeSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        webhook(hook, &path, e);
        let versions = hook.admission_review_versions.as_slice();
        review_versions(versions, &format!("{path}.admissionReviewVersions"), e);
        if !hook.name.is_empty() && !names.insert(hook.name.as_str()) {
            e.duplicate(&format!("{path}.name"), &quote(&hook.name));
        }
    }
}

/// `validateAdmissionReviewVersions` (and `validateConversionReviewVersions`, at `path`).
pub(crate) fn review_versions(versions: &[String], path: &str, e: &mut Errors) {
    if versions.is_empty() {
        e.required(path, "must specify one of v1, v1beta1");
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, v) in versions.iter().enumerate() {
        e.invalid_each(&format!("{path}[{i}]"), v, carrel_machinery::names::dns1035_label(v));
        if !seen.insert(v.as_str()) {
            e.invalid(&format!("{path}[{i}]"), &quote(v), "duplicate version");
        }
    }
    if !versions.iter().any(|v| REVIEW_VERSIONS.contains(&v.as_str())) {
        e.invalid(
            path,
            &go_strings("string", Some(versions)),
            "must include at least one of v1, v1beta1",
        );
    }
}

/// The variables a webhook's match condition may read (`authorizer` aside, see
/// [`crate::admission::policy::cel`]).
pub(crate) const MATCH_CONDITION_VARIABLES: &[&str] = &["object", "oldObject", "request"];

/// The most match conditions a webhook may have.
const MAX_MATCH_CONDITIONS: usize = 64;

/// `validateValidatingWebhook`: its name, rules, policies, timeout, selectors, client
/// configuration and match conditions.
fn webhook(hook: &ValidatingWebhook, path: &str, e: &mut Errors) {
    let name_path = format!("{path}.name");
    if hook.name.is_empty() {
        e.required(&name_path, "");
    } else {
        let mut problems = carrel_machinery::names::dns1123_subdomain(&hook.name);
        if hook.name.split('.').count() < 3 {
            problems
                .push("should be a domain with at least three segments separated by dots".into());
        }
        e.invalid_each(&name_path, &hook.name, problems);
    }
    for (i, rule) in hook.rules.iter().flatten().enumerate() {
        let named = NamedRuleWithOperations {
            api_groups: rule.api_groups.clone(),
            api_versions: rule.api_versions.clone(),
            operations: rule.operations.clone(),
            resources: rule.resources.clone(),
            scope: rule.scope.clone(),
            resource_names: None,
        };
        named_rule(&named, &format!("{path}.rules[{i}]"), e);
    }
    let one_of = |field: &str, value: Option<&str>, supported: &[&str], e: &mut Errors| {
        if let Some(v) = value.filter(|v| !supported.contains(v)) {
            e.not_supported(&format!("{path}.{field}"), &quote(v), supported);
        }
    };
    one_of("failurePolicy", hook.failure_policy.as_deref(), &["Fail", "Ignore"], e);
    one_of("matchPolicy", hook.match_policy.as_deref(), &["Equivalent", "Exact"], e);
    if hook.side_effects.is_empty() {
        e.required(&format!("{path}.sideEffects"), "must specify one of None, NoneOnDryRun");
    } else {
        one_of("sideEffects", Some(&hook.side_effects), &["None", "NoneOnDryRun"], e);
    }
    if let Some(t) = hook.timeout_seconds.filter(|t| !(1..=30).contains(t)) {
        e.invalid(
            &format!("{path}.timeoutSeconds"),
            &t.to_string(),
            "the timeout value must be between 1 and 30 seconds",
        );
    }
    label_selector(hook.namespace_selector.as_ref(), &format!("{path}.namespaceSelector"), e);
    label_selector(hook.object_selector.as_ref(), &format!("{path}.objectSelector"), e);
    let config = &hook.client_config;
    let service = config.service.as_ref().map(|s| ServiceRef {
        name: &s.name,
        namespace: &s.namespace,
        path: s.path.as_deref(),
        port: s.port,
    });
    client_config(config.url.as_deref(), service, &format!("{path}.clientConfig"), e);
    let conditions = hook.match_conditions.as_deref().unwrap_or_default();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        e.push(
            "FieldValueTooMany",
            &format!("{path}.matchConditions"),
            format!(
                "Too many: {}: must have at most {MAX_MATCH_CONDITIONS} items",
                conditions.len()
            ),
        );
    }
    match_conditions(
        conditions,
        path,
        &|src| {
            crate::admission::webhook::compile_condition(src).map(drop).map_err(|e| e.to_string())
        },
        e,
    );
}

/// A webhook's `clientConfig.service`, of either API that has one.
pub(crate) struct ServiceRef<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub path: Option<&'a str>,
    pub port: Option<i32>,
}

/// A webhook's `clientConfig` (admission or conversion): exactly one of a URL
/// (`ValidateWebhookURL`) and a Service (`ValidateWebhookService`).
pub(crate) fn client_config(
    url: Option<&str>,
    service: Option<ServiceRef<'_>>,
    config_path: &str,
    e: &mut Errors,
) {
    match (url, service) {
        (Some(url), None) => webhook_url(url, &format!("{config_path}.url"), e),
        (None, Some(service)) => {
            let path = format!("{config_path}.service");
            for (field, value) in [("name", service.name), ("namespace", service.namespace)] {
                if value.is_empty() {
                    e.required(&format!("{path}.{field}"), &format!("service {field} is required"));
                } else {
                    e.invalid_each(
                        &format!("{path}.{field}"),
                        value,
                        carrel_machinery::names::dns1123_label(value),
                    );
                }
            }
            if let Some(p) = service.path {
                webhook_path(p, &format!("{path}.path"), e);
            }
            if let Some(port) = service.port.filter(|p| !(1..=65535).contains(p)) {
                e.invalid(
                    &format!("{path}.port"),
                    &port.to_string(),
                    "port is not valid: must be between 1 and 65535, inclusive",
                );
            }
        }
        _ => e.required(config_path, "exactly one of url or service is required"),
    }
}

/// `ValidateWebhookURL`, for a URL that must be `https`.
fn webhook_url(url: &str, path: &str, e: &mut Errors) {
    let parsed = match url::Url::parse(url) {
        Ok(u) => u,
        Err(why) => {
            e.invalid(path, &quote(url), &format!("url must be a valid URL: {why}"));
            return;
        }
    };
    if parsed.scheme() != "https" {
        e.invalid(path, &quote(parsed.scheme()), "'https' is the only allowed URL scheme");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        e.invalid(path, &quote(url), "host must be specified");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        e.invalid(path, &quote(url), "user information is not permitted in the URL");
    }
    if parsed.fragment().is_some() {
        e.invalid(path, &quote(url), "fragments are not permitted in the URL");
    }
    if parsed.query().is_some() {
        e.invalid(path, &quote(url), "query parameters are not permitted in the URL");
    }
}

/// `ValidateWebhookService`'s checks of a Service's path.
fn webhook_path(p: &str, path: &str, e: &mut Errors) {
    if p == "/" {
        return;
    }
    if !p.starts_with('/') {
        e.invalid(path, &quote(p), "must start with a '/'");
        return;
    }
    for (i, segment) in p[1..].split('/').enumerate() {
        if segment.is_empty() {
            e.invalid(path, &quote(p), &format!("segment[{i}] may not be empty"));
        } else if !carrel_machinery::names::dns1123_subdomain(segment).is_empty() {
            e.invalid(
                path,
                &quote(p),
                &format!("segment[{i}]: {:?} must be a valid DNS-1123 subdomain", segment),
            );
        }
    }
}

/// The columns `kubectl get` shows of a webhook configuration of either kind.
fn webhook_columns() -> Vec<Value> {
    crate::table::definitions(&[
        crate::table::NAME,
        crate::table::col("Webhooks", "integer", "The number of webhooks"),
        crate::table::AGE,
    ])
}

/// The cells of a webhook configuration of either kind: its name, how many webhooks, its age.
fn webhook_cells(object: &Value) -> Vec<Value> {
    vec![
        crate::table::name_cell(object),
        webhooks_of(object).len().into(),
        crate::table::age_cell(object),
    ]
}

/// The `matchConditions` of a policy or a webhook at `path`: names required, qualified and
/// unique; each expression required and compiled by `compile`.
fn match_conditions(
    conditions: &[k8s_openapi::api::admissionregistration::v1::MatchCondition],
    path: &str,
    compile: &dyn Fn(&str) -> Result<(), String>,
    e: &mut Errors,
) {
    let mut names = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let path = format!("{path}.matchConditions[{i}]");
        if condition.name.is_empty() {
            e.required(&format!("{path}.name"), "");
        } else {
            e.invalid_each(
                &format!("{path}.name"),
                &condition.name,
                carrel_machinery::names::qualified_name(&condition.name),
            );
            if !names.insert(condition.name.as_str()) {
                e.duplicate(&format!("{path}.name"), &quote(&condition.name));
            }
        }
        let src = &condition.expression;
        let path = format!("{path}.expression");
        if src.trim().is_empty() {
            e.required(&path, "");
        } else if let Err(why) = compile(src) {
            e.invalid(&path, &quote(src), &format!("compilation failed: {why}"));
        }
    }
}
