//! The `scheduling.k8s.io` API group.

pub mod priorityclasses;
