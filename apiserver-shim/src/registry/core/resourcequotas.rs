//! ResourceQuotas (`resourcequotas` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;

/// The `resourcequotas` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "ResourceQuota",
    "resourcequotas",
    "resourcequota",
    true,
    &["quota"],
    NONE,
    STATUS,
    &ResourceQuotas,
);

/// The strategy for ResourceQuotas.
#[derive(Debug)]
pub struct ResourceQuotas;

impl Validate for ResourceQuotas {
    type Object = ResourceQuota;

    fn quantities<'a>(&self, object: &'a ResourceQuota, found: &mut Vec<&'a Quantity>) {
        let hard = object.spec.as_ref().and_then(|s| s.hard.as_ref());
        found.extend(hard.into_iter().flat_map(|h| h.values()));
    }
}

impl Strategy for ResourceQuotas {}
