//! RoleBindings (`rolebindings` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

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
    &RoleBindings,
);

/// The strategy for RoleBindings.
#[derive(Debug)]
pub struct RoleBindings;

impl Strategy for RoleBindings {}
