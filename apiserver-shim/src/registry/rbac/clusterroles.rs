//! ClusterRoles (`clusterroles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

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

impl Strategy for ClusterRoles {}
