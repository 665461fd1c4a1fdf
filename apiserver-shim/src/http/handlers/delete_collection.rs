//! DELETE of a collection: every object the list options select.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::Call;
use crate::api::Target;
use crate::http::blocking;
use crate::http::request::list_params;
use crate::http::response::{json_response, with_warnings};
use crate::status::ApiResult;

/// `DELETE <resource>`.
pub(super) async fn delete_collection(call: Call<'_>, body: Body) -> ApiResult<Response> {
    let mut params = super::delete::options(&call, body).await?;
    let Call { server, caller, rt, namespace, query, .. } = call;
    params.requester = super::requester(caller);
    let requester = params.requester.clone();
    let mut warnings = super::delete::default_propagation_warning(&rt, &params);
    let api = server.api.clone();
    let list = list_params(query)?;
    let deleted =
        blocking(move || api.delete_collection(&Target { rt: &rt, namespace }, &list, &params))
            .await?;
    warnings.extend(requester.warnings());
    Ok(with_warnings(json_response(StatusCode::OK, &deleted), &warnings))
}
