//! LIST of a collection: the store's JSON as it is where the client takes plain JSON, else a
//! Table or a `PartialObjectMetadataList`.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::Call;
use crate::api::Target;
use crate::flowcontrol::ObjectCount;
use crate::http::blocking;
use crate::http::request::{accept, include_object, list_params, list_version, wants_plain_json};
use crate::http::response::{json_bytes_response, json_response, partial_metadata};
use crate::http::table::{self, TableOptions};
use crate::status::ApiResult;

/// The most objects a store holds for its plain JSON lists to be read on the worker.
const INLINE_LIST_OBJECTS: u64 = 5_000;

/// `GET <resource>` without `watch`.
pub(super) async fn list(call: Call<'_>) -> ApiResult<Response> {
    let Call { server, rt, namespace, query, headers, .. } = call;
    let api = server.api.clone();
    let mut params = list_params(query)?;
    params.version = list_version(query, &params)?;
    let rt2 = rt.clone();
    if wants_plain_json(headers) && !accept(headers).contains("as=PartialObjectMetadataList") {
        // A small store's list is read on the worker itself, as a GET is (see `get`): handing
        // the worker's other tasks to another thread costs more than the read. A larger one
        // may take milliseconds, and goes to a thread of its own.
        let bytes = if api.objects() <= INLINE_LIST_OBJECTS {
            api.list_json(&Target { rt: &rt2, namespace }, &params)?
        } else {
            blocking(move || api.list_json(&Target { rt: &rt2, namespace }, &params)).await?
        };
        return Ok(json_bytes_response(StatusCode::OK, bytes));
    }
    let list = blocking(move || {
        let target = Target { rt: &rt2, namespace };
        api.list(&target, &params)
    })
    .await?;
    let accept = accept(headers);
    if table::wants_table(accept) {
        let items = list["items"].as_array().map(Vec::as_slice).unwrap_or_default();
        let options = TableOptions { include_object: include_object(query), no_headers: false };
        let t = table::table(
            &rt,
            items,
            list["metadata"].clone(),
            table::table_version(accept),
            options,
        );
        return Ok(json_response(StatusCode::OK, &t));
    }
    if accept.contains("as=PartialObjectMetadataList") {
        let items: Vec<Value> = list["items"]
            .as_array()
            .map(|a| a.iter().map(partial_metadata).collect())
            .unwrap_or_default();
        return Ok(json_response(
            StatusCode::OK,
            &json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": list["metadata"],
                "items": items,
            }),
        ));
    }
    Ok(json_response(StatusCode::OK, &list))
}
