//! LIST of a collection: the store's JSON as it is where the client takes plain JSON, else a
//! Table or a `PartialObjectMetadataList`.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use super::Call;
use crate::api::Target;
use crate::http::blocking;
use crate::http::request::{accept, include_object, list_params, list_version, wants_plain_json};
use crate::http::response::{json_bytes_response, json_response, partial_metadata};
use crate::http::table::{self, TableOptions};
use crate::status::ApiResult;

/// `GET <resource>` without `watch`.
pub(super) async fn list(call: Call<'_>) -> ApiResult<Response> {
    let Call { server, rt, namespace, query, headers, .. } = call;
    let api = server.api.clone();
    let mut params = list_params(query)?;
    params.version = list_version(query, &params)?;
    let rt2 = rt.clone();
    if wants_plain_json(headers) && !accept(headers).contains("as=PartialObjectMetadataList") {
        let bytes = blocking(move || {
            let target = Target { rt: &rt2, namespace };
            api.list_json(&target, &params)
        })
        .await?;
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
