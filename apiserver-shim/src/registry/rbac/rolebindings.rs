//! RoleBindings (`rolebindings` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::access::typed;
use crate::api::Api;
use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object::meta_str;
use crate::object_names::{self as names, NameRule};
use crate::rbac::{self, Policy, UserInfo};
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::Errors;
use std::marker::PhantomData;

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, RoleRef, Subject};

/// The `rolebindings` resource type.
pub const TYPE: ResourceType = served(
    "rbac.authorization.k8s.io",
    "v1",
    "RoleBinding",
    "rolebindings",
    "rolebinding",
    true,
    NONE,
    NONE,
    &[],
    &Bindings::<RoleBinding> { namespaced: true, kind: PhantomData },
);

/// The strategy for RoleBindings and, with `namespaced` false, ClusterRoleBindings: the two
/// differ only in what their validation allows (a ClusterRoleBinding binds only ClusterRoles, and
/// its ServiceAccount subjects name their namespace).
#[derive(Debug)]
pub struct Bindings<T> {
    /// Whether the bindings are RoleBindings.
    pub namespaced: bool,
    /// The bindings' Rust type.
    pub kind: PhantomData<fn() -> T>,
}

impl Validate for Bindings<RoleBinding> {
    type Object = RoleBinding;

    fn validate(&self, object: &RoleBinding, e: &mut Errors) {
        binding(&object.role_ref, object.subjects.as_deref(), self.namespaced, e);
    }

    fn validate_update(&self, old: &RoleBinding, new: &RoleBinding, e: &mut Errors) {
        role_ref_unchanged(&old.role_ref, &new.role_ref, e);
    }
}

impl Validate for Bindings<ClusterRoleBinding> {
    type Object = ClusterRoleBinding;

    fn validate(&self, object: &ClusterRoleBinding, e: &mut Errors) {
        binding(&object.role_ref, object.subjects.as_deref(), self.namespaced, e);
    }

    fn validate_update(&self, old: &ClusterRoleBinding, new: &ClusterRoleBinding, e: &mut Errors) {
        role_ref_unchanged(&old.role_ref, &new.role_ref, e);
    }
}

impl<T: std::fmt::Debug> Strategy for Bindings<T>
where
    Bindings<T>: Validate,
{
    fn check_escalation(
        &self,
        policy: &Policy,
        user: &UserInfo,
        namespace: &str,
        object: &Value,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        check_binding_escalation(policy, user, namespace, object)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn defaults(&self, object: &mut Value) {
        rbac_defaults(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }

    /// Authorizers rebuild their policy after every write of an RBAC object.
    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        api.rbac_changed();
        Ok(())
    }
}

/// `ValidateRoleBinding` (`namespaced`) / `ValidateClusterRoleBinding`: the role reference and
/// subjects of either.
pub(crate) fn binding(
    role_ref: &RoleRef,
    subjects: Option<&[Subject]>,
    namespaced: bool,
    e: &mut Errors,
) {
    const GROUP: &str = "rbac.authorization.k8s.io";
    let group = role_ref.api_group.as_str();
    if group != GROUP {
        e.not_supported("roleRef.apiGroup", &quote(group), &[GROUP]);
    }
    let kind = role_ref.kind.as_str();
    match (namespaced, kind) {
        (true, "Role" | "ClusterRole") | (false, "ClusterRole") => {}
        (true, _) => e.not_supported("roleRef.kind", &quote(kind), &["Role", "ClusterRole"]),
        (false, _) => e.not_supported("roleRef.kind", &quote(kind), &["ClusterRole"]),
    }
    let name = role_ref.name.as_str();
    if name.is_empty() {
        e.required("roleRef.name", "");
    } else {
        e.invalid_each("roleRef.name", name, names::path_segment(name));
    }
    for (i, subject) in subjects.unwrap_or_default().iter().enumerate() {
        let path = format!("subjects[{i}]");
        let name = subject.name.as_str();
        if name.is_empty() {
            e.required(&format!("{path}.name"), "");
        }
        let group = subject.api_group.as_deref().unwrap_or_default();
        match subject.kind.as_str() {
            "ServiceAccount" => {
                if !name.is_empty() {
                    e.invalid_each(&format!("{path}.name"), name, names::dns1123_subdomain(name));
                }
                if !group.is_empty() {
                    e.not_supported(&format!("{path}.apiGroup"), &quote(group), &[""]);
                }
                if !namespaced && subject.namespace.as_deref().unwrap_or_default().is_empty() {
                    e.required(&format!("{path}.namespace"), "");
                }
            }
            "User" | "Group" => {
                if group != GROUP {
                    e.not_supported(&format!("{path}.apiGroup"), &quote(group), &[GROUP]);
                }
            }
            other => e.not_supported(
                &format!("{path}.kind"),
                &quote(other),
                &["ServiceAccount", "User", "Group"],
            ),
        }
    }
}

/// `SetDefaults_RoleBinding` and `SetDefaults_ClusterRoleBinding`: the role reference's and the
/// user and group subjects' API group.
pub(crate) fn rbac_defaults(object: &mut Value) {
    if let Some(role_ref) = object_at(object, "roleRef") {
        set_default(role_ref, "apiGroup", json!("rbac.authorization.k8s.io"));
    }
    if let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) {
        for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
            if matches!(subject.get("kind").and_then(Value::as_str), Some("User" | "Group")) {
                set_default(subject, "apiGroup", json!("rbac.authorization.k8s.io"));
            }
        }
    }
}

/// A binding's role reference may not change.
pub(crate) fn role_ref_unchanged(old: &RoleRef, new: &RoleRef, e: &mut Errors) {
    if old != new {
        let shown = format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            quote(&new.api_group),
            quote(&new.kind),
            quote(&new.name)
        );
        e.invalid("roleRef", &shown, "cannot change roleRef");
    }
}

/// A binding may only grant a role's permissions to someone by a user who holds them (or may
/// `bind` it).
pub(crate) fn check_binding_escalation(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    object: &Value,
) -> ApiResult<()> {
    let name = meta_str(object, "name").unwrap_or_default();
    let role_ref = typed::<RoleBinding>(&{
        let mut v = object.clone();
        v["kind"] = json!("RoleBinding");
        v["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        v
    })?
    .role_ref;
    let rules = policy.role_ref_rules(&role_ref, namespace).unwrap_or_default();
    rbac::check_binding_write(policy, user, namespace, name, &role_ref, &rules)
}
