//! ResourceQuotas (`resourcequotas` in `v1`): how the API server serves them. What they limit is
//! enforced at admission ([`crate::admission::resource_quota`]) and their `status` is kept by
//! the resourcequota controller.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ResourceQuota, ScopeSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use carrel_machinery::quantity::Quantity as Amount;
use carrel_machinery::quota as rules;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{go_strings, Errors, NEGATIVE};

/// The `resourcequotas` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "ResourceQuota",
    "resourcequotas",
    "resourcequota",
    true,
    &["quota"],
    NONE,
    STATUS,
    &ResourceQuotas,
);

/// The strategy for ResourceQuotas.
#[derive(Debug)]
pub struct ResourceQuotas;

/// A scope list as kube-apiserver prints it in an error (`[]core.ResourceQuotaScope{"A"}`).
fn shown_scopes(scopes: Option<&Vec<String>>) -> String {
    go_strings("core.ResourceQuotaScope", scopes.map(Vec::as_slice))
}

/// A `*core.ScopeSelector` as kube-apiserver prints it in an error (Go's `%#v`).
fn shown_selector(selector: &ScopeSelector) -> String {
    let requirements = match &selector.match_expressions {
        None => "[]core.ScopedResourceSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    format!(
                        "core.ScopedResourceSelectorRequirement{{ScopeName:{}, Operator:{}, \
                         Values:{}}}",
                        quote(&r.scope_name),
                        quote(&r.operator),
                        go_strings("string", r.values.as_deref())
                    )
                })
                .collect();
            format!("[]core.ScopedResourceSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("core.ScopeSelector{{MatchExpressions:{requirements}}}")
}

/// `ValidateResourceQuotaResourceName` and `ValidateResourceQuantityValue` for each of `list`.
fn resources(list: Option<&BTreeMap<String, Quantity>>, path: &str, e: &mut Errors) {
    for (name, q) in list.into_iter().flatten() {
        let path = format!("{path}[{name}]");
        let qualified = names::qualified_name(name);
        let bare = !name.contains('/');
        if !qualified.is_empty() {
            e.invalid_each(&path, name, qualified);
        } else if bare && !rules::is_standard_resource(name) {
            e.invalid(&path, &quote(name), "must be a standard resource type or fully qualified");
        }
        if bare && !rules::is_standard_quota_resource(name) {
            e.invalid(&path, &quote(name), "must be a standard resource for quota");
        }
        let Some(amount) = Amount::parse(&q.0) else { continue };
        if amount.nanos() < 0 {
            e.invalid(&path, &quote(&amount.to_string()), NEGATIVE);
        }
        if rules::is_integer_resource(name) && amount.nanos() % 1_000_000_000 != 0 {
            e.invalid(&path, &q.0, "must be an integer");
        }
    }
}

/// The scopes of a quota that conflict with each other.
const CONFLICTING: [[&str; 2]; 2] =
    [["BestEffort", "NotBestEffort"], ["Terminating", "NotTerminating"]];

/// Scopes whose selector requirement can only be `Exists`.
const EXISTS_ONLY: [&str; 5] =
    ["BestEffort", "NotBestEffort", "Terminating", "NotTerminating", "CrossNamespacePodAffinity"];

/// `validateResourceQuotaScopes` and `validateScopeSelector`.
fn scopes(quota: &ResourceQuota, e: &mut Errors) {
    let Some(spec) = &quota.spec else { return };
    let hard: BTreeSet<&str> = spec.hard.iter().flatten().map(|(k, _)| k.as_str()).collect();
    let limited_by = |scope: &str| {
        hard.iter().any(|k| rules::is_standard_quota_resource(k) && !rules::scope_allows(scope, k))
    };
    let conflicts =
        |set: &BTreeSet<&str>| CONFLICTING.iter().any(|p| p.iter().all(|s| set.contains(s)));
    if let Some(list) = spec.scopes.as_ref().filter(|s| !s.is_empty()) {
        let shown = shown_scopes(spec.scopes.as_ref());
        let path = "spec.scopes";
        for scope in list {
            if !rules::SCOPES.contains(&scope.as_str()) {
                e.invalid(path, &shown, "unsupported scope");
            }
            if limited_by(scope) {
                e.invalid(path, &shown, "unsupported scope applied to resource");
            }
        }
        if conflicts(&list.iter().map(String::as_str).collect()) {
            e.invalid(path, &shown, "conflicting scopes");
        }
    }
    let Some(selector) = &spec.scope_selector else { return };
    let path = "spec.scopeSelector.matchExpressions";
    let mut named = BTreeSet::new();
    for requirement in selector.match_expressions.iter().flatten() {
        let scope = requirement.scope_name.as_str();
        if !rules::SCOPES.contains(&scope) {
            e.invalid(&format!("{path}.scopeName"), &quote(scope), "unsupported scope");
        }
        if limited_by(scope) {
            e.invalid(path, &shown_selector(selector), "unsupported scope applied to resource");
        }
        let operator = requirement.operator.as_str();
        if EXISTS_ONLY.contains(&scope) && operator != "Exists" {
            e.invalid(
                &format!("{path}.operator"),
                &quote(operator),
                "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, \
                 ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, \
                 ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity",
            );
        }
        let values = requirement.values.as_deref().unwrap_or_default();
        match operator {
            "In" | "NotIn" if values.is_empty() => e.required(
                &format!("{path}.values"),
                "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => e.invalid(
                &format!("{path}.values"),
                &go_strings("string", Some(values)),
                "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => e.invalid(
                &format!("{path}.operator"),
                &quote(operator),
                "not a valid selector operator",
            ),
        }
        named.insert(scope);
    }
    if conflicts(&named) {
        e.invalid(path, &shown_scopes(spec.scopes.as_ref()), "conflicting scopes");
    }
}

impl Validate for ResourceQuotas {
    type Object = ResourceQuota;

    /// `ValidateResourceQuota`: the limits' names and amounts, the scopes and the selector,
    /// and the status's names and amounts.
    fn validate(&self, quota: &ResourceQuota, e: &mut Errors) {
        let spec = quota.spec.as_ref();
        resources(spec.and_then(|s| s.hard.as_ref()), "spec.hard", e);
        scopes(quota, e);
        let status = quota.status.as_ref();
        resources(status.and_then(|s| s.hard.as_ref()), "status.hard", e);
        resources(status.and_then(|s| s.used.as_ref()), "status.used", e);
    }

    /// `ValidateResourceQuotaUpdate`: the scopes cannot change.
    fn validate_update(&self, old: &ResourceQuota, new: &ResourceQuota, e: &mut Errors) {
        let set = |q: &ResourceQuota| -> BTreeSet<String> {
            q.spec.as_ref().and_then(|s| s.scopes.clone()).into_iter().flatten().collect()
        };
        if set(old) != set(new) {
            let shown = shown_scopes(new.spec.as_ref().and_then(|s| s.scopes.as_ref()));
            e.invalid("spec.scopes", &shown, "field is immutable");
        }
    }

    fn quantities<'a>(&self, object: &'a ResourceQuota, found: &mut Vec<&'a Quantity>) {
        let hard = object.spec.as_ref().and_then(|s| s.hard.as_ref());
        let status = object.status.as_ref();
        let status_lists = status.into_iter().flat_map(|s| [s.hard.as_ref(), s.used.as_ref()]);
        for list in std::iter::once(hard).chain(status_lists).flatten() {
            found.extend(list.values());
        }
    }
}

impl Strategy for ResourceQuotas {
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            AGE,
            col(
                "Request",
                "string",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            col(
                "Limit",
                "string",
                "Limits control the maximum amount of cpu/memory that a container may use \
                 independent of contention on the node.",
            ),
        ])
    }

    /// `used/hard` of each resource of `status.hard`, the `limits.*` ones in the Limit column.
    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let hard = rules::resource_list(o.pointer("/status/hard"));
        let used = rules::resource_list(o.pointer("/status/used"));
        let (mut request, mut limit) = (Vec::new(), Vec::new());
        for (name, q) in &hard {
            let shown = format!("{name}: {}/{q}", used.get(name).copied().unwrap_or(Amount::ZERO));
            if name.split('.').next() == Some("limits") && name.contains('.') {
                limit.push(shown);
            } else {
                request.push(shown);
            }
        }
        vec![name_cell(o), age_cell(o), json!(request.join(", ")), json!(limit.join(", "))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_used_over_hard_with_limits_apart() {
        let quota = json!({"metadata": {"name": "q", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"hard": {"pods": "2", "limits.cpu": "2", "requests.memory": "1.5Gi",
                                "limits": "1"},
                       "used": {"pods": "1", "limits.cpu": "500m"}}});
        let cells = ResourceQuotas.cells(&TYPE, &quota);
        assert_eq!(cells[2], "limits: 0/1, pods: 1/2, requests.memory: 0/1536Mi");
        assert_eq!(cells[3], "limits.cpu: 500m/2");
        assert_eq!(ResourceQuotas.columns(&TYPE).len(), cells.len());
    }
}
