//! The `discovery.k8s.io` API group.

pub mod endpointslices;
