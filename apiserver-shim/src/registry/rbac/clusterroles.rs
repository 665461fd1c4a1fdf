//! ClusterRoles (`clusterroles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::api::Api;
use crate::object_names::NameRule;
use crate::registry::rbac::roles::policy_rules;
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::{items, Errors};

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

impl Strategy for ClusterRoles {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        policy_rules(items(object, "rules"), false, e);
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
