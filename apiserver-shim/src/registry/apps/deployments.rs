//! Deployments (`deployments` in `apps/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS_SCALE};
use crate::resource::ResourceType;

/// The `deployments` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "Deployment",
    "deployments",
    "deployment",
    true,
    &["deploy"],
    ALL,
    STATUS_SCALE,
    &Deployments,
);

/// The strategy for Deployments.
#[derive(Debug)]
pub struct Deployments;

impl Strategy for Deployments {}
