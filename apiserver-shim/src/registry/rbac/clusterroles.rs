//! ClusterRoles (`clusterroles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::access::typed;
use crate::api::Api;
use crate::object_names::NameRule;
use crate::rbac::{self, Policy, UserInfo};
use crate::registry::rbac::roles::policy_rules;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::Errors;
use k8s_openapi::api::rbac::v1::ClusterRole;

/// The `clusterroles` resource type.
pub const TYPE: ResourceType = served(
    "rbac.authorization.k8s.io",
    "v1",
    "ClusterRole",
    "clusterroles",
    "clusterrole",
    false,
    NONE,
    NONE,
    &[],
    &ClusterRoles,
);

/// The strategy for ClusterRoles.
#[derive(Debug)]
pub struct ClusterRoles;

impl Validate for ClusterRoles {
    type Object = ClusterRole;

    fn validate(&self, object: &ClusterRole, e: &mut Errors) {
        policy_rules(object.rules.as_deref().unwrap_or_default(), false, e);
    }
}

impl Strategy for ClusterRoles {
    fn check_escalation(
        &self,
        policy: &Policy,
        user: &UserInfo,
        _namespace: &str,
        object: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let role: ClusterRole = typed(object)?;
        let old: Option<ClusterRole> = old.map(typed).transpose()?;
        rbac::check_cluster_role_write(policy, user, &role, old.as_ref())
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    /// Authorizers rebuild their policy after every write of an RBAC object, and a ClusterRole
    /// write re-aggregates the aggregated ClusterRoles (unless the server wrote it), as
    /// kube-controller-manager's aggregation controller does. The bootstrap aggregates once
    /// when it is done, and the aggregation's own updates need no second pass.
    fn after_write(&self, api: &Api, _rt: &ResourceType, aggregate: bool) -> ApiResult<()> {
        api.rbac_changed();
        if aggregate {
            api.aggregate_cluster_roles()?;
        }
        Ok(())
    }
}
