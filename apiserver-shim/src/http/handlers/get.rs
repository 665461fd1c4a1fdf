//! GET of one object (or its `scale` or `status`): the stored JSON as it is where the client takes
//! plain JSON, else the object as a Table or metadata.

use axum::http::StatusCode;
use axum::response::Response;

use super::Call;
use crate::api::Target;
use crate::http::request::wants_plain_json;
use crate::http::response::{json_bytes_response, respond_object};
use crate::resource::Subresource;
use crate::scale::scale_of;
use crate::status::ApiResult;

/// `GET <resource>/<name>[/<subresource>]`.
///
/// The read runs on the worker itself, not through `http::blocking`: one object from the store is a
/// lookup in memory that takes microseconds, while handing the worker's other tasks to a new
/// thread (`block_in_place`) and back took longer than the rest of the request (the request-path
/// benchmark: a GET at 1 client, p50 77 µs with it, 40 µs without).
pub(super) async fn get(call: Call<'_>, name: String) -> ApiResult<Response> {
    let Call { server, rt, namespace, sub, query, headers, .. } = call;
    let api = &server.api;
    if sub.is_none() && wants_plain_json(headers) {
        let bytes = api.get_json(&Target { rt: &rt, namespace }, &name)?;
        return Ok(json_bytes_response(StatusCode::OK, bytes));
    }
    let object = api.get(&Target { rt: &rt, namespace }, &name)?;
    let object = match sub {
        Some(Subresource::Scale) => scale_of(&rt, &object),
        _ => object,
    };
    Ok(respond_object(StatusCode::OK, &rt, object, headers, query))
}
