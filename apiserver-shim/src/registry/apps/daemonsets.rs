//! DaemonSets (`daemonsets` in `apps/v1`): how the API server serves them.

use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;

/// The `daemonsets` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "DaemonSet",
    "daemonsets",
    "daemonset",
    true,
    &["ds"],
    ALL,
    STATUS,
    &DaemonSets,
);

/// The strategy for DaemonSets.
#[derive(Debug)]
pub struct DaemonSets;

impl Strategy for DaemonSets {}
