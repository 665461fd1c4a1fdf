//! Events (`events` in `events.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `events` resource type.
pub const TYPE: ResourceType =
    served("events.k8s.io", "v1", "Event", "events", "event", true, &["ev"], NONE, &[], &Events);

/// The strategy for Events.
#[derive(Debug)]
pub struct Events;

impl Strategy for Events {}
