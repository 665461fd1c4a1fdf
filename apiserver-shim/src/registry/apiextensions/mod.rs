//! The `apiextensions.k8s.io` API group.

pub mod customresourcedefinitions;
