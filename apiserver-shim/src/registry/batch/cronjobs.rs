//! CronJobs (`cronjobs` in `batch/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;

/// The `cronjobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "CronJob", "cronjobs", "cronjob", true, &["cj"], ALL, STATUS, &CronJobs);

/// The strategy for CronJobs.
#[derive(Debug)]
pub struct CronJobs;

impl Strategy for CronJobs {}
