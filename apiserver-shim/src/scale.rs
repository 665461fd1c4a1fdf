//! The `scale` subresource: an autoscaling/v1 `Scale` view of `spec.replicas`.

use serde_json::{json, Value};

use crate::api::{Api, Target, Write};
use crate::object::label_pairs;
use crate::status::{ApiError, ApiResult, Cause};

/// The autoscaling/v1 Scale view of an object with `spec.replicas`.
pub fn scale_of(object: &Value) -> Value {
    let selector = label_pairs(
        object.pointer("/spec/selector/matchLabels").or_else(|| object.pointer("/spec/selector")),
    );
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
        "spec": {"replicas": object.pointer("/spec/replicas").cloned().unwrap_or(json!(0))},
        "status": {
            "replicas": object.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
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
    object["spec"]["replicas"] = json!(replicas);
    api.update(target, name, object, None, write)
}
