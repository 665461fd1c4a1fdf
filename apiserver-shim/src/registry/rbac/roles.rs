//! Roles (`roles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::access::typed;
use crate::api::Api;
use crate::object::meta_str;
use crate::object_names::NameRule;
use crate::rbac::{self, Policy, UserInfo};
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::{go_strings, Errors};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};

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

impl Validate for Roles {
    type Object = Role;

    fn validate(&self, object: &Role, e: &mut Errors) {
        policy_rules(object.rules.as_deref().unwrap_or_default(), true, e);
    }
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

    /// Authorizers rebuild their policy after every write of an RBAC object.
    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        api.rbac_changed();
        Ok(())
    }
}

/// `ValidatePolicyRule` for each of a Role's or ClusterRole's rules.
pub(crate) fn policy_rules(rules: &[PolicyRule], namespaced: bool, e: &mut Errors) {
    let none = |list: &Option<Vec<String>>| list.as_ref().is_none_or(Vec::is_empty);
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("rules[{i}]");
        if rule.verbs.is_empty() {
            e.required(&format!("{path}.verbs"), "verbs must contain at least one value");
        }
        let urls = rule.non_resource_urls.as_deref().filter(|u| !u.is_empty());
        if let Some(urls) = urls {
            let shown = go_strings("string", Some(urls));
            if namespaced {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "namespaced rules cannot apply to non-resource URLs",
                );
            }
            let resources = [&rule.api_groups, &rule.resources, &rule.resource_names];
            if !resources.into_iter().all(none) {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if none(&rule.api_groups) {
            e.required(
                &format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            );
        }
        if none(&rule.resources) {
            e.required(
                &format!("{path}.resources"),
                "resource rules must supply at least one resource",
            );
        }
    }
}
