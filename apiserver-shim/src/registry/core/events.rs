//! Events (`events` in `v1`): how the API server serves them.

use serde_json::Value;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::validation::{at, field, text, Errors};

/// The `events` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Event", "events", "event", true, &["ev"], NONE, &[], &Events);

/// The strategy for Events.
#[derive(Debug)]
pub struct Events;

impl crate::registry::form::Validate for Events {
    type Object = k8s_openapi::api::core::v1::Event;
}

impl Strategy for Events {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::CoreEvent
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        event(object, false, e);
    }
}

/// `ValidateEventCreate`: the legacy rules for core/v1 Events; events.k8s.io/v1 ones must also
/// be new-style. Field paths name the core fields, as kube-apiserver's do.
pub(crate) fn event(object: &Value, new_api: bool, e: &mut Errors) {
    let namespace =
        object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let (involved, controller, message) = if new_api {
        (at(object, "regarding"), "reportingController", text(object, "note"))
    } else {
        (at(object, "involvedObject"), "reportingComponent", text(object, "message"))
    };
    let involved_namespace = text(involved, "namespace");
    let mismatch = |e: &mut Errors| {
        e.invalid(
            "involvedObject.namespace",
            &quote(involved_namespace),
            "does not match event.namespace",
        )
    };
    let event_time = field(object, "eventTime").is_some_and(|t| t.as_str() != Some(""));
    if !event_time {
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
        let reporting = text(object, controller);
        if reporting.is_empty() {
            e.required(controller, "");
        }
        e.invalid_each(controller, reporting, names::qualified_name(reporting));
        for (key, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = text(object, key);
            if value.is_empty() {
                e.required(key, "");
            }
            if value.len() > limit {
                e.invalid(key, "\"\"", &format!("can have at most {limit} characters"));
            }
        }
        if message.len() > 1024 {
            e.invalid(
                if new_api { "note" } else { "message" },
                "\"\"",
                "can have at most 1024 characters",
            );
        }
    }
    if new_api {
        if !event_time {
            e.required("eventTime", "");
        }
        let kind = text(object, "type");
        if kind != "Normal" && kind != "Warning" {
            e.invalid("type", "\"\"", &format!("has invalid value: {kind}"));
        }
        for (key, core) in [
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
        ] {
            if field(object, key).is_some() {
                e.invalid(core, "\"\"", "needs to be unset");
            }
        }
        if object.get("deprecatedCount").and_then(Value::as_i64).unwrap_or(0) != 0 {
            e.invalid("count", "\"\"", "needs to be unset");
        }
        let source = at(object, "deprecatedSource");
        if !text(source, "component").is_empty() || !text(source, "host").is_empty() {
            e.invalid("source", "\"\"", "needs to be unset");
        }
    }
}
