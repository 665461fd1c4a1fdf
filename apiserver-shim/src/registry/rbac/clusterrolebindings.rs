//! ClusterRoleBindings (`clusterrolebindings` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::api::Api;
use crate::object_names::NameRule;
use crate::rbac::{Policy, UserInfo};
use crate::registry::rbac::rolebindings::{
    check_binding_escalation, rbac_defaults, role_binding, role_ref_unchanged,
};
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::Errors;

/// The `clusterrolebindings` resource type.
pub const TYPE: ResourceType = served(
    "rbac.authorization.k8s.io",
    "v1",
    "ClusterRoleBinding",
    "clusterrolebindings",
    "clusterrolebinding",
    false,
    NONE,
    NONE,
    &[],
    &ClusterRoleBindings,
);

/// The strategy for ClusterRoleBindings.
#[derive(Debug)]
pub struct ClusterRoleBindings;

impl Strategy for ClusterRoleBindings {
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
        role_binding(object, false, e);
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
