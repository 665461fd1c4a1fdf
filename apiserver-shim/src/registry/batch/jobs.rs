//! Jobs (`jobs` in `batch/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, NONE, STATUS};
use crate::resource::ResourceType;

/// The `jobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "Job", "jobs", "job", true, NONE, ALL, STATUS, &Jobs);

/// The strategy for Jobs.
#[derive(Debug)]
pub struct Jobs;

impl Strategy for Jobs {}
