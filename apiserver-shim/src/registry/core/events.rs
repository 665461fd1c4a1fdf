//! Events (`events` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::Event;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::validation::Errors;

/// The `events` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Event", "events", "event", true, &["ev"], NONE, &[], &Events);

/// The strategy for Events.
#[derive(Debug)]
pub struct Events;

impl Validate for Events {
    type Object = Event;

    fn validate(&self, object: &Event, e: &mut Errors) {
        let fields = EventFields {
            namespace: text(&object.metadata.namespace),
            involved_namespace: text(&object.involved_object.namespace),
            event_time: object.event_time.is_some(),
            controller: ("reportingComponent", text(&object.reporting_component)),
            reporting_instance: text(&object.reporting_instance),
            action: text(&object.action),
            reason: text(&object.reason),
            message: ("message", text(&object.message)),
        };
        event(&fields, e);
    }
}

impl Strategy for Events {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::CoreEvent
    }
}

/// A string field, empty if unset.
pub(crate) fn text(field: &Option<String>) -> &str {
    field.as_deref().unwrap_or_default()
}

/// What `ValidateEventCreate` reads of an Event of either API (core/v1 or events.k8s.io/v1),
/// unset strings read as empty.
pub(crate) struct EventFields<'a> {
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// The namespace of the object the event is about (`involvedObject`, `regarding`).
    pub involved_namespace: &'a str,
    /// Whether `eventTime` is set.
    pub event_time: bool,
    /// The reporting controller's field (`reportingComponent`, `reportingController`) and value.
    pub controller: (&'static str, &'a str),
    /// `reportingInstance`.
    pub reporting_instance: &'a str,
    /// `action`.
    pub action: &'a str,
    /// `reason`.
    pub reason: &'a str,
    /// The message's field (`message`, `note`) and value.
    pub message: (&'static str, &'a str),
}

/// `ValidateEventCreate`: the legacy rules, which Events of both APIs follow (events.k8s.io/v1
/// ones must also be new-style). Field paths name the core fields, as kube-apiserver's do.
pub(crate) fn event(event: &EventFields<'_>, e: &mut Errors) {
    let (namespace, involved_namespace) = (event.namespace, event.involved_namespace);
    let mismatch = |e: &mut Errors| {
        e.invalid(
            "involvedObject.namespace",
            &quote(involved_namespace),
            "does not match event.namespace",
        )
    };
    if !event.event_time {
        let fine = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_namespace
        };
        if !fine {
            mismatch(e);
        }
    } else {
        if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
            mismatch(e);
        }
        let (controller, reporting) = event.controller;
        if reporting.is_empty() {
            e.required(controller, "");
        }
        e.invalid_each(controller, reporting, names::qualified_name(reporting));
        for (key, value, limit) in [
            ("reportingInstance", event.reporting_instance, 128),
            ("action", event.action, 128),
            ("reason", event.reason, 128),
        ] {
            if value.is_empty() {
                e.required(key, "");
            }
            if value.len() > limit {
                e.invalid(key, "\"\"", &format!("can have at most {limit} characters"));
            }
        }
        let (key, message) = event.message;
        if message.len() > 1024 {
            e.invalid(key, "\"\"", "can have at most 1024 characters");
        }
    }
}
