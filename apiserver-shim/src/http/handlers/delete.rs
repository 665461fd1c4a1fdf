//! DELETE of one object, and the `DeleteOptions` a delete reads from its body and query.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::Call;
use crate::api::{DeleteParams, Target};
use crate::http::blocking;
use crate::http::request::{delete_params, dry_run, read_body};
use crate::http::response::respond_object;
use crate::status::{ApiError, ApiResult};

/// `DELETE <resource>/<name>`.
pub(super) async fn delete(call: Call<'_>, name: String, body: Body) -> ApiResult<Response> {
    let params = options(&call, body).await?;
    let Call { server, rt, namespace, query, headers, .. } = call;
    let api = server.api.clone();
    let rt2 = rt.clone();
    let deleted =
        blocking(move || api.delete(&Target { rt: &rt2, namespace }, &name, &params)).await?;
    Ok(respond_object(StatusCode::OK, &rt, deleted, headers, query))
}

/// The delete's options: `DeleteOptions` in the body, then `dryRun`, `gracePeriodSeconds`,
/// `propagationPolicy` and `orphanDependents` from the query.
pub(super) async fn options(call: &Call<'_>, body: Body) -> ApiResult<DeleteParams> {
    let query = call.query;
    let raw = read_body(body).await?;
    let mut params = delete_params(call.headers, &raw)?;
    params.dry_run |= dry_run(query)?;
    if let Some(g) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        params.grace_period_seconds = Some(g.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}: must be an integer"))
        })?);
    }
    if let Some(p) = query.get("propagationPolicy") {
        params.propagation_policy = Some(p.to_owned());
    }
    if let Some(o) = query.get("orphanDependents").filter(|o| !o.is_empty()) {
        params.orphan_dependents = Some(o.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid orphanDependents {o:?}: must be a boolean"))
        })?);
    }
    Ok(params)
}
