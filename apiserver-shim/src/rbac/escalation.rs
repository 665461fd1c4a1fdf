//! Escalation prevention on writes of roles and bindings (`pkg/registry/rbac/escalation_check.go`,
//! the `policybased` storages and `validation.ConfirmNoEscalation`): a user may only grant
//! permissions they hold, unless they may `escalate` (roles) or `bind` (bindings), or are in
//! `system:masters`.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, RoleRef};

use crate::status::ApiError;

use super::forbidden::new_forbidden;
use super::{
    aggregate_errors, compact_rules, compact_string, covers, go_quote, go_quote_list, Attributes,
    Policy, UserInfo, RBAC_GROUP, SYSTEM_MASTERS,
};

/// `EscalationAllowed`: `system:masters` may always escalate.
fn escalation_allowed(user: &UserInfo) -> bool {
    user.in_group(SYSTEM_MASTERS)
}

/// Whether `user` may `verb` the `resource` (`roles`, `clusterroles`) object `name`.
fn may(
    policy: &Policy,
    user: &UserInfo,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let attributes = Attributes::resource(user.clone(), verb, group, resource)
        .with_namespace(namespace)
        .with_name(name);
    policy.authorize(&attributes).allowed
}

/// A grant of rules the user does not hold, in `ConfirmNoEscalation`'s words.
#[derive(Debug, thiserror::Error)]
#[error(
    "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}{}",
    go_quote(.user),
    go_quote_list(.groups),
    .missing.join("\n"),
    resolution_errors(.errors)
)]
struct EscalationError {
    /// The user's name.
    user: String,
    /// The user's groups.
    groups: Vec<String>,
    /// The rules not held, compacted, sorted and deduplicated.
    missing: Vec<String>,
    /// Why some of the user's rules could not be resolved.
    errors: Vec<String>,
}

/// `; resolution errors: [...]` after the missing rules, when some of the user's rules did not
/// resolve.
fn resolution_errors(errors: &[String]) -> String {
    if errors.is_empty() {
        String::new()
    } else {
        format!("; resolution errors: [{}]", aggregate_errors(errors))
    }
}

/// `ConfirmNoEscalation`: the user's rules in `namespace` must cover `rules`; otherwise what is
/// missing.
fn confirm_no_escalation(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), EscalationError> {
    let (owner, errors) = policy.rules_for_with_errors(user, namespace);
    let (covered, missing) = covers(&owner, rules);
    if covered {
        return Ok(());
    }
    let mut missing: Vec<String> = compact_rules(&missing).iter().map(compact_string).collect();
    missing.sort();
    missing.dedup();
    Err(EscalationError { user: user.name.clone(), groups: user.groups.clone(), missing, errors })
}

/// `roles` in a namespace, `clusterroles` at cluster scope.
fn role_resource(namespace: &str) -> &'static str {
    if namespace.is_empty() {
        "clusterroles"
    } else {
        "roles"
    }
}

/// May `user` create or update the Role `name` in `namespace` (a ClusterRole when `namespace` is
/// empty) with `rules`? Yes if they are in `system:masters`, may `escalate` it, or already hold
/// every rule (in that namespace, cluster-wide rules included); otherwise 403 Forbidden naming the
/// rules they lack:
/// `roles.rbac.authorization.k8s.io "x" is forbidden: user "u" (groups=["a" "b"]) is attempting
/// to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["secrets"],
/// Verbs:["get"]}`.
pub fn check_role_write(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    name: &str,
    rules: &[PolicyRule],
) -> Result<(), ApiError> {
    let resource = role_resource(namespace);
    if escalation_allowed(user)
        || may(policy, user, "escalate", RBAC_GROUP, resource, namespace, name)
    {
        return Ok(());
    }
    confirm_no_escalation(policy, user, namespace, rules)
        .map_err(|why| new_forbidden(RBAC_GROUP, resource, name, &why.to_string()))
}

fn has_aggregation_rule(role: &ClusterRole) -> bool {
    role.aggregation_rule
        .as_ref()
        .and_then(|a| a.cluster_role_selectors.as_ref())
        .is_some_and(|s| !s.is_empty())
}

/// [`check_role_write`] for a ClusterRole (`role`, replacing `old` on an update), and as kube
/// does, setting or keeping an `aggregationRule` (which can gather anything) needs `*` on
/// everything: `must have cluster-admin privileges to use the aggregationRule`.
pub fn check_cluster_role_write(
    policy: &Policy,
    user: &UserInfo,
    role: &ClusterRole,
    old: Option<&ClusterRole>,
) -> Result<(), ApiError> {
    let name = role.metadata.name.as_deref().unwrap_or_default();
    let resource = role_resource("");
    if escalation_allowed(user) || may(policy, user, "escalate", RBAC_GROUP, resource, "", name) {
        return Ok(());
    }
    let rules = role.rules.as_deref().unwrap_or(&[]);
    confirm_no_escalation(policy, user, "", rules)
        .map_err(|why| new_forbidden(RBAC_GROUP, resource, name, &why.to_string()))?;
    if has_aggregation_rule(role) || old.is_some_and(has_aggregation_rule) {
        let full_authority = [
            PolicyRule {
                api_groups: Some(vec!["*".into()]),
                resources: Some(vec!["*".into()]),
                verbs: vec!["*".into()],
                ..PolicyRule::default()
            },
            PolicyRule {
                non_resource_urls: Some(vec!["*".into()]),
                verbs: vec!["*".into()],
                ..PolicyRule::default()
            },
        ];
        confirm_no_escalation(policy, user, "", &full_authority).map_err(|_| {
            new_forbidden(
                RBAC_GROUP,
                resource,
                name,
                "must have cluster-admin privileges to use the aggregationRule",
            )
        })?;
    }
    Ok(())
}

/// May `user` create or update the RoleBinding `name` in `namespace` (a ClusterRoleBinding when
/// `namespace` is empty) referencing `role_ref`, whose rules are `role_rules` (see
/// [`Policy::role_ref_rules`])? Yes if they are in `system:masters`, may `bind` the referenced
/// role (verb `bind` on `roles`/`clusterroles` named `role_ref.name`, in `namespace`), or already
/// hold every rule of the role there; otherwise 403 Forbidden in kube's words
/// (`rolebindings.rbac.authorization.k8s.io "x" is forbidden: user … is attempting to grant RBAC
/// permissions not currently held:…`).
pub fn check_binding_write(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    name: &str,
    role_ref: &RoleRef,
    role_rules: &[PolicyRule],
) -> Result<(), ApiError> {
    if escalation_allowed(user) {
        return Ok(());
    }
    let bound_resource = match role_ref.kind.as_str() {
        "ClusterRole" => Some("clusterroles"),
        "Role" => Some("roles"),
        _ => None,
    };
    if let Some(bound) = bound_resource {
        if may(policy, user, "bind", &role_ref.api_group, bound, namespace, &role_ref.name) {
            return Ok(());
        }
    }
    let resource = if namespace.is_empty() { "clusterrolebindings" } else { "rolebindings" };
    confirm_no_escalation(policy, user, namespace, role_rules)
        .map_err(|why| new_forbidden(RBAC_GROUP, resource, name, &why.to_string()))
}
