//! Roles (`roles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::access::typed;
use crate::api::Api;
use crate::object::meta_str;
use crate::object_names::NameRule;
use crate::rbac::{self, Policy, UserInfo};
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::{field, go_strings_value, items, Errors};
use k8s_openapi::api::rbac::v1::Role;

/// The `roles` resource type.
pub const TYPE: ResourceType = served(
    "rbac.authorization.k8s.io",
    "v1",
    "Role",
    "roles",
    "role",
    true,
    NONE,
    NONE,
    &[],
    &Roles,
);

/// The strategy for Roles.
#[derive(Debug)]
pub struct Roles;

impl crate::registry::form::Validate for Roles {
    type Object = Role;
}

impl Strategy for Roles {
    fn check_escalation(
        &self,
        policy: &Policy,
        user: &UserInfo,
        namespace: &str,
        object: &Value,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let name = meta_str(object, "name").unwrap_or_default();
        let role: Role = typed(object)?;
        rbac::check_role_write(policy, user, namespace, name, &role.rules.unwrap_or_default())
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        policy_rules(items(object, "rules"), true, e);
    }

    /// Authorizers rebuild their policy after every write of an RBAC object.
    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        api.rbac_changed();
        Ok(())
    }
}

/// `ValidatePolicyRule` for each of a Role's or ClusterRole's rules.
pub(crate) fn policy_rules(rules: &[Value], namespaced: bool, e: &mut Errors) {
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("rules[{i}]");
        if items(rule, "verbs").is_empty() {
            e.required(&format!("{path}.verbs"), "verbs must contain at least one value");
        }
        let urls =
            field(rule, "nonResourceURLs").filter(|u| u.as_array().is_some_and(|a| !a.is_empty()));
        if let Some(urls) = urls {
            let shown = go_strings_value("string", Some(urls));
            if namespaced {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "namespaced rules cannot apply to non-resource URLs",
                );
            }
            let resources = ["apiGroups", "resources", "resourceNames"];
            if resources.iter().any(|k| !items(rule, k).is_empty()) {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if items(rule, "apiGroups").is_empty() {
            e.required(
                &format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            );
        }
        if items(rule, "resources").is_empty() {
            e.required(
                &format!("{path}.resources"),
                "resource rules must supply at least one resource",
            );
        }
    }
}
