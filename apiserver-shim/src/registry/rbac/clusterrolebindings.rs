//! ClusterRoleBindings (`clusterrolebindings` in `rbac.authorization.k8s.io/v1`): served as RoleBindings
//! are, cluster-wide ([`Bindings`]).

use std::marker::PhantomData;

use k8s_openapi::api::rbac::v1::ClusterRoleBinding;

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
    &Bindings::<ClusterRoleBinding> { namespaced: false, kind: PhantomData },
);
