//! ResourceQuotas (`resourcequotas` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
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

impl Strategy for ResourceQuotas {}
