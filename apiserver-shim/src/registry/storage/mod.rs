//! The `storage.k8s.io` API group.

pub mod storageclasses;
