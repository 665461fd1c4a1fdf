//! Events (`events` in `events.k8s.io/v1`): how the API server serves them.

use serde_json::Value;

use crate::registry::core::events::event;
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::validation::Errors;

/// The `events` resource type.
pub const TYPE: ResourceType =
    served("events.k8s.io", "v1", "Event", "events", "event", true, &["ev"], NONE, &[], &Events);

/// The strategy for Events.
#[derive(Debug)]
pub struct Events;

impl crate::registry::form::Validate for Events {
    type Object = k8s_openapi::api::events::v1::Event;
}

impl Strategy for Events {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::EventsV1Event
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        event(object, true, e);
    }
}
