//! Services (`services` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;

/// The `services` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Service", "services", "service", true, &["svc"], ALL, STATUS, &Services);

/// The strategy for Services.
#[derive(Debug)]
pub struct Services;

impl Strategy for Services {}
