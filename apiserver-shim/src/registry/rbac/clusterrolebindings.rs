//! ClusterRoleBindings (`clusterrolebindings` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

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

impl Strategy for ClusterRoleBindings {}
