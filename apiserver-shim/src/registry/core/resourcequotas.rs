//! ResourceQuotas (`resourcequotas` in `v1`): how the API server serves them.

use serde_json::Value;

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;
use crate::validation::at;

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

impl crate::registry::form::Validate for ResourceQuotas {
    type Object = k8s_openapi::api::core::v1::ResourceQuota;
}

impl Strategy for ResourceQuotas {
    fn quantities<'a>(&self, object: &'a Value, lists: &mut Vec<&'a Value>) {
        lists.push(at(at(object, "spec"), "hard"));
    }
}
