//! The `rbac.authorization.k8s.io` API group.

pub mod clusterrolebindings;
pub mod clusterroles;
pub mod rolebindings;
pub mod roles;
