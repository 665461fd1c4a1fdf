//! Events (`events` in `events.k8s.io/v1`): how the API server serves them.

use k8s_openapi::api::events::v1::Event;

use crate::registry::core::events::{event, text, EventFields};
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::validation::Errors;

/// The `events` resource type.
pub const TYPE: ResourceType =
    served("events.k8s.io", "v1", "Event", "events", "event", true, &["ev"], NONE, &[], &Events);

/// The strategy for Events.
#[derive(Debug)]
pub struct Events;

impl Validate for Events {
    type Object = Event;

    /// `ValidateEventCreate` of a new-style Event: the legacy rules, then those of the new API.
    fn validate(&self, object: &Event, e: &mut Errors) {
        let regarding = object.regarding.as_ref().and_then(|r| r.namespace.as_ref());
        let fields = EventFields {
            namespace: text(&object.metadata.namespace),
            involved_namespace: regarding.map_or("", String::as_str),
            event_time: object.event_time.is_some(),
            controller: ("reportingController", text(&object.reporting_controller)),
            reporting_instance: text(&object.reporting_instance),
            action: text(&object.action),
            reason: text(&object.reason),
            message: ("note", text(&object.note)),
        };
        event(&fields, e);
        if !fields.event_time {
            e.required("eventTime", "");
        }
        let kind = text(&object.type_);
        if kind != "Normal" && kind != "Warning" {
            e.invalid("type", "\"\"", &format!("has invalid value: {kind}"));
        }
        for (set, core) in [
            (object.deprecated_first_timestamp.is_some(), "firstTimestamp"),
            (object.deprecated_last_timestamp.is_some(), "lastTimestamp"),
        ] {
            if set {
                e.invalid(core, "\"\"", "needs to be unset");
            }
        }
        if object.deprecated_count.unwrap_or(0) != 0 {
            e.invalid("count", "\"\"", "needs to be unset");
        }
        let source = object.deprecated_source.as_ref();
        let component = source.and_then(|s| s.component.as_deref()).unwrap_or_default();
        let host = source.and_then(|s| s.host.as_deref()).unwrap_or_default();
        if !component.is_empty() || !host.is_empty() {
            e.invalid("source", "\"\"", "needs to be unset");
        }
    }
}

impl Strategy for Events {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::EventsV1Event
    }
}
