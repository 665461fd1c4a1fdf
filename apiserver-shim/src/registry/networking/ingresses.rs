//! Ingresss (`ingresses` in `networking.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

/// The `ingresses` resource type.
pub const TYPE: ResourceType = served(
    "networking.k8s.io",
    "v1",
    "Ingress",
    "ingresses",
    "ingress",
    true,
    &["ing"],
    NONE,
    STATUS,
    &Ingresses,
);

/// The strategy for Ingresss.
#[derive(Debug)]
pub struct Ingresses;

impl crate::registry::form::Validate for Ingresses {
    type Object = k8s_openapi::api::networking::v1::Ingress;
}

impl Strategy for Ingresses {}
