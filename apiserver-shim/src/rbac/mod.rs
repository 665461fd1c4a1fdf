//! RBAC as kube-apiserver (v1.33) evaluates it, as a pure library: no IO, no HTTP.
//!
//! * [`Policy`] holds the RBAC objects of one cluster (as k8s-openapi types, listed by the caller
//!   out of its store) and answers [`Policy::authorize`] for a request's [`Attributes`], the way
//!   `plugin/pkg/auth/authorizer/rbac` does: ClusterRoleBindings grant everywhere, RoleBindings in
//!   their namespace (referencing a Role there or a ClusterRole), rules matched by verb, API group,
//!   resource (`pods`, `pods/log`, `*`, `*/scale`), resource name and non-resource URL.
//! * [`aggregate`] keeps the `rules` of ClusterRoles with an `aggregationRule` up to date (kube's
//!   clusterrole-aggregation controller); [`Policy::new`] aggregates its own copy, so evaluation
//!   always uses aggregated rules.
//! * [`bootstrap`] is the default policy (cluster-admin, admin/edit/view, system:discovery, …).
//! * [`check_role_write`], [`check_cluster_role_write`] and [`check_binding_write`] are kube's
//!   escalation prevention (`ConfirmNoEscalation`, the `escalate` and `bind` verbs), built on
//!   [`Policy::rules_for`] and [`covers`].
//! * [`review`] has SubjectAccessReview, SelfSubjectAccessReview, LocalSubjectAccessReview and
//!   SelfSubjectRulesReview as pure functions; [`forbidden`] builds the 403 kube-apiserver sends for
//!   a denied request.
//!
//! What the caller must do: authenticate, and put on [`UserInfo::groups`] the groups kube's
//! authenticators add: `system:authenticated` (or `system:unauthenticated` for anonymous), and for
//! a service account `system:serviceaccount:<ns>:<name>` also `system:serviceaccounts` and
//! `system:serviceaccounts:<ns>`. This module only matches names and groups. It also does not map
//! HTTP methods to verbs (`GET` on a collection is `list`, with `?watch` is `watch`, …).

mod aggregate;
pub mod bootstrap;
mod escalation;
mod forbidden;
pub mod review;
mod rules;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub(crate) use crate::object::go_quote;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

pub use aggregate::{aggregate, selector_matches};
pub use escalation::{check_binding_write, check_cluster_role_write, check_role_write};
pub use forbidden::forbidden;
pub use rules::{breakdown_rule, compact_rules, compact_string, covers, rule_allows, rules_allow};

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The group whose members may do anything and always pass escalation checks
/// (`user.SystemPrivilegedGroup`).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group of every authenticated user.
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user name prefix of service accounts: `system:serviceaccount:<ns>:<name>`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Who makes a request (`user.Info`): the authenticator's user.
pub use crate::auth::UserInfo;

/// A request as the authorizer sees it (`authorizer.Attributes`): either a resource request
/// (verb, namespace, group, resource, subresource, name) or a non-resource request (verb, path).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Who asks.
    pub user: UserInfo,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, or any
    /// other verb (`bind`, `escalate`, `impersonate`, …); for non-resource requests the lower-case
    /// HTTP method.
    pub verb: String,
    /// Whether this is a resource request; otherwise [`Attributes::path`] is what is asked for.
    pub resource_request: bool,
    /// The namespace; empty for cluster-scoped requests (and cluster-wide lists).
    pub namespace: String,
    /// The API group; empty for the core group.
    pub api_group: String,
    /// The API version (not used by RBAC).
    pub api_version: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource (`status`, `scale`, `log`, …), or empty.
    pub subresource: String,
    /// The object's name; empty for list, watch of a collection, create and deletecollection.
    pub name: String,
    /// The request path of a non-resource request (`/healthz`).
    pub path: String,
}

impl Attributes {
    /// A resource request (cluster scope, no name, no subresource until set with the `with_`
    /// methods).
    pub fn resource(
        user: UserInfo,
        verb: impl Into<String>,
        api_group: impl Into<String>,
        resource: impl Into<String>,
    ) -> Attributes {
        Attributes {
            user,
            verb: verb.into(),
            resource_request: true,
            api_group: api_group.into(),
            resource: resource.into(),
            ..Attributes::default()
        }
    }

    /// A non-resource request.
    pub fn non_resource(user: UserInfo, verb: impl Into<String>, path: impl Into<String>) -> Self {
        Attributes { user, verb: verb.into(), path: path.into(), ..Attributes::default() }
    }

    /// In a namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// About one object.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Of a subresource.
    pub fn with_subresource(mut self, subresource: impl Into<String>) -> Self {
        self.subresource = subresource.into();
        self
    }

    /// `pods`, or `pods/log` for a subresource: what rules' `resources` are matched against.
    pub fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The answer of [`Policy::authorize`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Whether some rule allows the request. RBAC never denies outright: not allowed means "no
    /// opinion", which the server answers with 403.
    pub allowed: bool,
    /// Why, in kube's words: `RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to User
    /// "z"`; when not allowed, empty, or the bindings whose roles could not be found.
    pub reason: String,
}

/// The RBAC objects of one cluster, indexed for evaluation. Building one aggregates ClusterRoles,
/// so build it when RBAC objects change and share it, rather than once per request. Objects
/// without a name (and Roles or RoleBindings without a namespace) are ignored.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Role rules by (namespace, name).
    roles: HashMap<(String, String), Vec<PolicyRule>>,
    /// RoleBindings by namespace, in the order given.
    role_bindings: HashMap<String, Vec<RoleBinding>>,
    /// ClusterRoles by name, aggregated.
    cluster_roles: HashMap<String, ClusterRole>,
    /// ClusterRoleBindings, in the order given.
    cluster_role_bindings: Vec<ClusterRoleBinding>,
}

/// Where a rule came from, for the allowed reason.
enum Source<'a> {
    Cluster(&'a ClusterRoleBinding, &'a Subject),
    Namespaced(&'a RoleBinding, &'a Subject),
}

impl Source<'_> {
    /// `ClusterRoleBinding "x" of ClusterRole "y" to User "z"` (the `fmt.Stringer`s of
    /// `pkg/registry/rbac/validation/rule.go`).
    fn describe(&self) -> String {
        match self {
            Source::Cluster(binding, subject) => format!(
                "ClusterRoleBinding {} of {} {} to {}",
                go_quote(binding.metadata.name.as_deref().unwrap_or_default()),
                binding.role_ref.kind,
                go_quote(&binding.role_ref.name),
                describe_subject(subject, ""),
            ),
            Source::Namespaced(binding, subject) => {
                let namespace = binding.metadata.namespace.as_deref().unwrap_or_default();
                format!(
                    "RoleBinding {} of {} {} to {}",
                    go_quote(&format!(
                        "{}/{namespace}",
                        binding.metadata.name.as_deref().unwrap_or_default()
                    )),
                    binding.role_ref.kind,
                    go_quote(&binding.role_ref.name),
                    describe_subject(subject, namespace),
                )
            }
        }
    }
}

/// `describeSubject`: kube writes a service account as `name/namespace`.
fn describe_subject(subject: &Subject, binding_namespace: &str) -> String {
    if subject.kind == "ServiceAccount" {
        let namespace = match subject.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => binding_namespace,
        };
        format!("{} {}", subject.kind, go_quote(&format!("{}/{namespace}", subject.name)))
    } else {
        format!("{} {}", subject.kind, go_quote(&subject.name))
    }
}

impl Policy {
    /// A policy from the listed objects. ClusterRoles with an aggregation rule get their aggregated
    /// rules here (whatever their stored `rules` say), so evaluation never waits for [`aggregate`]
    /// to have been written back.
    pub fn new(
        roles: impl IntoIterator<Item = Role>,
        role_bindings: impl IntoIterator<Item = RoleBinding>,
        cluster_roles: impl IntoIterator<Item = ClusterRole>,
        cluster_role_bindings: impl IntoIterator<Item = ClusterRoleBinding>,
    ) -> Policy {
        let mut cluster_roles: Vec<ClusterRole> = cluster_roles.into_iter().collect();
        aggregate::aggregate_in_place(&mut cluster_roles);
        let mut policy = Policy {
            cluster_roles: cluster_roles
                .into_iter()
                .filter_map(|r| Some((r.metadata.name.clone()?, r)))
                .collect(),
            cluster_role_bindings: cluster_role_bindings.into_iter().collect(),
            ..Policy::default()
        };
        for role in roles {
            let (Some(namespace), Some(name)) = (role.metadata.namespace, role.metadata.name)
            else {
                continue;
            };
            policy.roles.insert((namespace, name), role.rules.unwrap_or_default());
        }
        for binding in role_bindings {
            let Some(namespace) = binding.metadata.namespace.clone() else { continue };
            policy.role_bindings.entry(namespace).or_default().push(binding);
        }
        policy
    }

    /// The bootstrap policy alone ([`bootstrap::cluster_roles`] and
    /// [`bootstrap::cluster_role_bindings`]).
    pub fn bootstrap() -> Policy {
        Policy::new([], [], bootstrap::cluster_roles(), bootstrap::cluster_role_bindings())
    }

    /// A ClusterRole, with its aggregated rules.
    pub fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles.get(name)
    }

    /// The rules a binding's `roleRef` grants (`GetRoleReferenceRules`): a Role is looked up in
    /// `binding_namespace`, a ClusterRole by name. `None` when the role does not exist or the kind
    /// is neither `Role` nor `ClusterRole`.
    pub fn role_ref_rules(
        &self,
        role_ref: &RoleRef,
        binding_namespace: &str,
    ) -> Option<Vec<PolicyRule>> {
        self.rules_of(role_ref, binding_namespace).map(<[PolicyRule]>::to_vec)
    }

    fn rules_of(&self, role_ref: &RoleRef, binding_namespace: &str) -> Option<&[PolicyRule]> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(binding_namespace.to_owned(), role_ref.name.clone()))
                .map(Vec::as_slice),
            "ClusterRole" => {
                self.cluster_roles.get(&role_ref.name).map(|r| r.rules.as_deref().unwrap_or(&[]))
            }
            _ => None,
        }
    }

    /// Calls `visit` with each rule that applies to `user` in `namespace` (ClusterRoleBindings'
    /// first, then the namespace's RoleBindings'), until it returns false (`VisitRulesFor`).
    /// Returns the resolution errors met on the way (bindings whose role is missing), in kube's
    /// words.
    fn visit_rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&Source<'_>, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for binding in &self.cluster_role_bindings {
            let Some(subject) = applies_to(user, binding.subjects.as_deref(), "") else {
                continue;
            };
            let Some(rules) = self.rules_of(&binding.role_ref, "") else {
                errors.push(missing_role(&binding.role_ref));
                continue;
            };
            let source = Source::Cluster(binding, subject);
            for rule in rules {
                if !visit(&source, rule) {
                    return errors;
                }
            }
        }
        if namespace.is_empty() {
            return errors;
        }
        for binding in self.role_bindings.get(namespace).map(Vec::as_slice).unwrap_or(&[]) {
            let Some(subject) = applies_to(user, binding.subjects.as_deref(), namespace) else {
                continue;
            };
            let Some(rules) = self.rules_of(&binding.role_ref, namespace) else {
                errors.push(missing_role(&binding.role_ref));
                continue;
            };
            let source = Source::Namespaced(binding, subject);
            for rule in rules {
                if !visit(&source, rule) {
                    return errors;
                }
            }
        }
        errors
    }

    /// Whether the request is allowed, and why (`RBACAuthorizer.Authorize`).
    pub fn authorize(&self, attributes: &Attributes) -> Decision {
        let mut reason = None;
        let errors =
            self.visit_rules_for(&attributes.user, &attributes.namespace, |source, rule| {
                if rule_allows(attributes, rule) {
                    reason = Some(format!("RBAC: allowed by {}", source.describe()));
                    false
                } else {
                    true
                }
            });
        match reason {
            Some(reason) => Decision { allowed: true, reason },
            None if errors.is_empty() => Decision::default(),
            None => {
                Decision { allowed: false, reason: format!("RBAC: {}", aggregate_errors(&errors)) }
            }
        }
    }

    /// Every rule that applies to `user` in `namespace`: those of the ClusterRoleBindings, and for
    /// a non-empty namespace those of its RoleBindings (`RulesFor`).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
        self.rules_for_with_errors(user, namespace).0
    }

    /// [`Policy::rules_for`], with the resolution errors (missing roles) in kube's words.
    pub fn rules_for_with_errors(
        &self,
        user: &UserInfo,
        namespace: &str,
    ) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let errors = self.visit_rules_for(user, namespace, |_, rule| {
            rules.push(rule.clone());
            true
        });
        (rules, errors)
    }
}

/// The first subject of a binding that is `user` (`appliesTo`). A ServiceAccount subject without a
/// namespace means one in the binding's namespace (and none for a ClusterRoleBinding).
fn applies_to<'a>(
    user: &UserInfo,
    subjects: Option<&'a [Subject]>,
    namespace: &str,
) -> Option<&'a Subject> {
    subjects?.iter().find(|subject| match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.in_group(&subject.name),
        "ServiceAccount" => {
            let sa_namespace = match subject.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => ns,
                _ => namespace,
            };
            !sa_namespace.is_empty()
                && user
                    .name
                    .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                    .and_then(|rest| rest.strip_prefix(sa_namespace))
                    .and_then(|rest| rest.strip_prefix(':'))
                    == Some(subject.name.as_str())
        }
        _ => false,
    })
}

/// The lister's NotFound for a missing role: `clusterrole.rbac.authorization.k8s.io "x" not
/// found`.
fn missing_role(role_ref: &RoleRef) -> String {
    match role_ref.kind.as_str() {
        "Role" | "ClusterRole" => format!(
            "{}.{RBAC_GROUP} {} not found",
            role_ref.kind.to_ascii_lowercase(),
            go_quote(&role_ref.name)
        ),
        other => format!("unsupported role reference kind: {}", go_quote(other)),
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one error alone, several as `[a, b]`.
fn aggregate_errors(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// A string list as Go's `%q` writes a `[]string`: `["a" "b"]`.
pub(crate) fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}
