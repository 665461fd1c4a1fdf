//! GET of one object (or its `scale` or `status`): the stored JSON as it is where the client takes
//! plain JSON, else the object as a Table or metadata.

use axum::http::StatusCode;
use axum::response::Response;

use super::Call;
use crate::api::Target;
use crate::http::blocking;
use crate::http::request::wants_plain_json;
use crate::http::response::{json_bytes_response, respond_object};
use crate::resource::Subresource;
use crate::scale::scale_of;
use crate::status::ApiResult;

/// `GET <resource>/<name>[/<subresource>]`.
pub(super) async fn get(call: Call<'_>, name: String) -> ApiResult<Response> {
    let Call { server, rt, namespace, sub, query, headers, .. } = call;
    let api = server.api.clone();
    if sub.is_none() && wants_plain_json(headers) {
        let rt2 = rt.clone();
        let bytes = blocking(move || api.get_json(&Target { rt: &rt2, namespace }, &name)).await?;
        return Ok(json_bytes_response(StatusCode::OK, bytes));
    }
    let rt2 = rt.clone();
    let object = blocking(move || api.get(&Target { rt: &rt2, namespace }, &name)).await?;
    let object = match sub {
        Some(Subresource::Scale) => scale_of(&rt, &object),
        _ => object,
    };
    Ok(respond_object(StatusCode::OK, &rt, object, headers, query))
}
