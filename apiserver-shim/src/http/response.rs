//! Building a response: JSON bodies, an object as the client asked for it (itself, a Table or
//! its metadata), and `Warning` headers.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::discovery;
use crate::go_json;
use crate::http::table::{self, TableOptions};
use crate::resource::ResourceType;

use super::request::{accept, include_object, wants_partial_metadata, Query};

/// `value` as JSON, ended with a newline as Go's JSON encoder ends what kube-apiserver writes.
pub(super) fn json_response(code: StatusCode, value: &Value) -> Response {
    let mut body = go_json::to_vec(value);
    body.push(b'\n');
    json_bytes_response(code, body)
}

pub(super) fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(super) fn text(body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

pub(super) fn aggregated(value: Value) -> Response {
    let mut response = json_response(StatusCode::OK, &value);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE));
    response
}

pub(super) fn respond_object(
    code: StatusCode,
    rt: &ResourceType,
    object: Value,
    headers: &HeaderMap,
    query: &Query,
) -> Response {
    let accept = accept(headers);
    if table::wants_table(accept) {
        let options = TableOptions { include_object: include_object(query), no_headers: false };
        let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
        let t = table::table(rt, &[object], metadata, table::table_version(accept), options);
        return json_response(code, &t);
    }
    if wants_partial_metadata(accept) {
        return json_response(code, &partial_metadata(&object));
    }
    json_response(code, &object)
}

pub(super) fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// Add a `Warning: 299 - "…"` header per warning, as kube-apiserver sends them.
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}
