//! The `networking.k8s.io` API group.

pub mod ingresses;
pub mod networkpolicies;
