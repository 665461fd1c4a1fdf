//! Conversion of custom resources between the versions of their definition by a webhook
//! (`spec.conversion.strategy: Webhook`), as apiextensions-apiserver's webhook converter makes
//! it: a `ConversionReview` (`apiextensions.k8s.io/v1`) with the objects to convert and the
//! version wanted, one review for all the objects of a read or a list that are stored in
//! another version; the converted objects keep their original metadata but for labels and
//! annotations. A call that fails, or an answer that is not a successful conversion of every
//! object, fails the request with a 500 in kube-apiserver's words (`conversion webhook for
//! <group>/<version>, Kind=<kind> failed: …`).
//!
//! The webhook is reached as admission webhooks are ([`crate::admission::webhook`]): by URL or
//! by a Service of the cluster, verified with its `caBundle`, within the cluster's egress.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use serde_json::{json, Value};

use crate::admission::webhook::{self, Endpoint, Hook};
use crate::api::Api;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

/// How long a conversion webhook has to answer (kube-apiserver's fixed 30 s).
const TIMEOUT: Duration = Duration::from_secs(30);

/// The webhook a definition converts with, if its strategy is `Webhook`.
pub fn hook_of(name: &str, conversion: Option<&ext::CustomResourceConversion>) -> Option<Hook> {
    let conversion = conversion.filter(|c| c.strategy == "Webhook")?;
    let config = conversion.webhook.as_ref()?.client_config.as_ref()?;
    let service = config
        .service
        .as_ref()
        .map(|s| (s.namespace.as_str(), s.name.as_str(), s.port, s.path.as_deref()));
    let endpoint = Endpoint::of(config.url.as_deref(), service)?;
    Some(Hook {
        name: name.to_owned(),
        endpoint,
        ca_bundle: config.ca_bundle.as_ref().map(|b| b.0.clone()),
        timeout: TIMEOUT,
    })
}

/// `objects` (each of `rt`'s kind, in any version of its definition) in version `desired`
/// (`<group>/<version>`), converted by `hook` in one call; an object already in `desired` is
/// not sent.
pub fn convert(
    api: &Api,
    rt: &ResourceType,
    hook: &Hook,
    mut objects: Vec<Value>,
    desired: &str,
) -> ApiResult<Vec<Value>> {
    let pending: Vec<usize> =
        (0..objects.len()).filter(|i| objects[*i]["apiVersion"] != desired).collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let sent: Vec<Value> = pending.iter().map(|i| objects[*i].clone()).collect();
    // Errors name the kind as the objects sent are (the first of them).
    let from = sent[0]["apiVersion"].as_str().unwrap_or_default().to_owned();
    let failed = |why: String| {
        ApiError::internal(format!(
            "Internal error occurred: conversion webhook for {from}, Kind={} failed: {why}",
            rt.kind
        ))
    };
    let uid = uuid::Uuid::new_v4().to_string();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent},
    });
    let answer =
        webhook::dispatch::send(api, hook, review).wait().map_err(|e| failed(e.cause()))?;
    let response = answer.0;
    if response.pointer("/result/status").and_then(Value::as_str) != Some("Success") {
        let message = response.pointer("/result/message").and_then(Value::as_str);
        return Err(failed(match message.filter(|m| !m.is_empty()) {
            Some(m) => m.to_owned(),
            None => format!(
                "response.result.status was '{}', not 'Success'",
                response.pointer("/result/status").and_then(Value::as_str).unwrap_or_default()
            ),
        }));
    }
    let converted = response["convertedObjects"].as_array().cloned().unwrap_or_default();
    if converted.len() != pending.len() {
        return Err(ApiError::internal(format!(
            "Internal error occurred: conversion webhook for {from}, Kind={} returned {} objects, expected {}",
            rt.kind,
            converted.len(),
            pending.len()
        )));
    }
    for (n, (i, mut object)) in pending.into_iter().zip(converted).enumerate() {
        let original = &objects[i];
        let version = object["apiVersion"].as_str().unwrap_or_default();
        if version != desired {
            return Err(failed(format!(
                "invalid converted object at index {n}: invalid apiVersion: expected {desired:?}, got {version:?}"
            )));
        }
        if object["kind"] != original["kind"] {
            return Err(failed(format!(
                "invalid converted object at index {n}: invalid kind: expected {}, got {}",
                original["kind"], object["kind"]
            )));
        }
        restore_metadata(original, &mut object);
        objects[i] = object;
    }
    Ok(objects)
}

/// A converted object's metadata is the original's, but for the labels and annotations the
/// webhook may change (apiextensions-apiserver's `restoreObjectMeta`).
fn restore_metadata(original: &Value, converted: &mut Value) {
    let mut metadata = original.get("metadata").cloned().unwrap_or_else(|| json!({}));
    for field in ["labels", "annotations"] {
        match converted.pointer(&format!("/metadata/{field}")) {
            Some(v) if !v.is_null() => metadata[field] = v.clone(),
            _ => {
                if let Some(m) = metadata.as_object_mut() {
                    m.remove(field);
                }
            }
        }
    }
    converted["metadata"] = metadata;
}
