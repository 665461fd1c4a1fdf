//! The `networking.k8s.io` API group.

pub mod ingressclasses;
pub mod ingresses;
pub mod networkpolicies;
