//! RoleBindings (`rolebindings` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::access::typed;
use crate::api::Api;
use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object::meta_str;
use crate::object_names::{self as names, NameRule};
use crate::rbac::{self, Policy, UserInfo};
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::{at, changed, items, text, Errors};
use std::marker::PhantomData;

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};

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

impl crate::registry::form::Validate for Bindings<RoleBinding> {
    type Object = RoleBinding;
}

impl crate::registry::form::Validate for Bindings<ClusterRoleBinding> {
    type Object = ClusterRoleBinding;
}

impl<T: std::fmt::Debug> Strategy for Bindings<T>
where
    Bindings<T>: crate::registry::form::Validate,
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

    fn validate(&self, object: &Value, e: &mut Errors) {
        role_binding(object, self.namespaced, e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        role_ref_unchanged(old, new, e);
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

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding`.
pub(crate) fn role_binding(object: &Value, namespaced: bool, e: &mut Errors) {
    const GROUP: &str = "rbac.authorization.k8s.io";
    let role_ref = at(object, "roleRef");
    let group = text(role_ref, "apiGroup");
    if group != GROUP {
        e.not_supported("roleRef.apiGroup", &quote(group), &[GROUP]);
    }
    let kind = text(role_ref, "kind");
    match (namespaced, kind) {
        (true, "Role" | "ClusterRole") | (false, "ClusterRole") => {}
        (true, _) => e.not_supported("roleRef.kind", &quote(kind), &["Role", "ClusterRole"]),
        (false, _) => e.not_supported("roleRef.kind", &quote(kind), &["ClusterRole"]),
    }
    let name = text(role_ref, "name");
    if name.is_empty() {
        e.required("roleRef.name", "");
    } else {
        e.invalid_each("roleRef.name", name, names::path_segment(name));
    }
    for (i, subject) in items(object, "subjects").iter().enumerate() {
        let path = format!("subjects[{i}]");
        let name = text(subject, "name");
        if name.is_empty() {
            e.required(&format!("{path}.name"), "");
        }
        let group = text(subject, "apiGroup");
        match text(subject, "kind") {
            "ServiceAccount" => {
                if !name.is_empty() {
                    e.invalid_each(&format!("{path}.name"), name, names::dns1123_subdomain(name));
                }
                if !group.is_empty() {
                    e.not_supported(&format!("{path}.apiGroup"), &quote(group), &[""]);
                }
                if !namespaced && text(subject, "namespace").is_empty() {
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
pub(crate) fn role_ref_unchanged(old: &Value, new: &Value, e: &mut Errors) {
    if changed(old, new, "roleRef") {
        let role_ref = at(new, "roleRef");
        let shown = format!(
            "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
            quote(text(role_ref, "apiGroup")),
            quote(text(role_ref, "kind")),
            quote(text(role_ref, "name"))
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
