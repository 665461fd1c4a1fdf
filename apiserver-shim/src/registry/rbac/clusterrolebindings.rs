//! ClusterRoleBindings (`clusterrolebindings` in `rbac.authorization.k8s.io/v1`): served as RoleBindings
//! are, cluster-wide ([`Bindings`]).

use crate::registry::rbac::rolebindings::Bindings;
use crate::registry::{served, NONE};
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
    &Bindings { namespaced: false },
);
