//! Endpoints (`endpoints` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `endpoints` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Endpoints", "endpoints", "endpoints", true, &["ep"], NONE, &[], &Endpoints);

/// The strategy for Endpoints.
#[derive(Debug)]
pub struct Endpoints;

impl crate::registry::form::Validate for Endpoints {
    type Object = k8s_openapi::api::core::v1::Endpoints;
}

impl Strategy for Endpoints {}
