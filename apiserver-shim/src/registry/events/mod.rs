//! The `events.k8s.io` API group.

pub mod events;
