//! Roles (`roles` in `rbac.authorization.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `roles` resource type.
pub const TYPE: ResourceType = served(
    "rbac.authorization.k8s.io",
    "v1",
    "Role",
    "roles",
    "role",
    true,
    NONE,
    NONE,
    &[],
    &Roles,
);

/// The strategy for Roles.
#[derive(Debug)]
pub struct Roles;

impl Strategy for Roles {}
