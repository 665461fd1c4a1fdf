//! The `scale` subresource: an autoscaling/v1 `Scale` view of `spec.replicas`, or of the paths a
//! custom resource's definition names.

use serde_json::{json, Value};

use crate::api::{Api, Target, Write};
use crate::crd::ScalePaths;
use crate::object::label_pairs;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

/// The paths of `rt`'s scale: its definition's, or `spec.replicas` and `status.replicas`.
fn paths(rt: &ResourceType) -> ScalePaths {
    rt.custom.as_ref().and_then(|c| c.scale.clone()).unwrap_or_else(|| ScalePaths {
        spec_replicas: "/spec/replicas".into(),
        status_replicas: "/status/replicas".into(),
        label_selector: None,
    })
}

/// The autoscaling/v1 Scale view of an object of `rt`.
pub fn scale_of(rt: &ResourceType, object: &Value) -> Value {
    let paths = paths(rt);
    let selector = match (&rt.custom, &paths.label_selector) {
        // A custom resource keeps its selector as a string, in label-selector syntax.
        (Some(_), Some(path)) => {
            object.pointer(path).and_then(Value::as_str).unwrap_or_default().to_owned()
        }
        (Some(_), None) => String::new(),
        (None, _) => label_pairs(
            object
                .pointer("/spec/selector/matchLabels")
                .or_else(|| object.pointer("/spec/selector")),
        ),
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": object.pointer("/metadata/name"),
            "namespace": object.pointer("/metadata/namespace"),
            "uid": object.pointer("/metadata/uid"),
            "resourceVersion": object.pointer("/metadata/resourceVersion"),
            "creationTimestamp": object.pointer("/metadata/creationTimestamp"),
        },
        "spec": {"replicas": object.pointer(&paths.spec_replicas).cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": object.pointer(&paths.status_replicas).cloned().unwrap_or(json!(0)),
            "selector": selector,
        },
    })
}

/// PUT on /scale: set `spec.replicas` of the object.
pub fn update_scale(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    scale: Value,
    write: &Write,
) -> ApiResult<Value> {
    let replicas = scale.pointer("/spec/replicas").and_then(Value::as_i64).ok_or_else(|| {
        ApiError::invalid(
            "autoscaling",
            "Scale",
            name,
            vec![Cause::new("FieldValueRequired", "spec.replicas", "Required value")],
        )
    })?;
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.replicas",
                format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            )],
        ));
    }
    let mut object = api.get(target, name)?;
    if let Some(rv) = scale.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
        if !rv.is_empty() {
            object["metadata"]["resourceVersion"] = json!(rv);
        }
    }
    set_at(&mut object, &paths(target.rt).spec_replicas, json!(replicas));
    api.update(target, name, object, None, write)
}

/// Set the value at a JSON pointer, making the objects on the way.
fn set_at(object: &mut Value, pointer: &str, value: Value) {
    let mut node = object;
    let segments: Vec<String> =
        pointer.split('/').skip(1).map(|s| s.replace("~1", "/").replace("~0", "~")).collect();
    let Some((last, parents)) = segments.split_last() else { return };
    for segment in parents {
        if !node.get(segment.as_str()).is_some_and(Value::is_object) {
            node[segment.as_str()] = json!({});
        }
        node = &mut node[segment.as_str()];
    }
    node[last.as_str()] = value;
}
