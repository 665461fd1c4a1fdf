//! The `apps` API group.

pub mod controllerrevisions;
pub mod daemonsets;
pub mod deployments;
pub mod replicasets;
pub mod statefulsets;
