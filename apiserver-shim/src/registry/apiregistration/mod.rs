//! The `apiregistration.k8s.io` API group: APIServices, served as objects (see
//! [`apiservices`] for what Carrel does with them).

pub mod apiservices;

/// The group's name.
pub const GROUP: &str = "apiregistration.k8s.io";
