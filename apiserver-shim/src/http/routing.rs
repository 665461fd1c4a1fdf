//! Routing: a request, with its [`RequestInfo`], to what serves it (an access endpoint, the
//! resource metrics API, a resource handler, discovery, OpenAPI, health or metrics).

use axum::http::Method;
use axum::response::Response;

use crate::resource::Subresource;
use crate::status::{ApiError, ApiResult};

use super::request_info::{Kind, RequestInfo, ResourcePath};
use super::response::{text, with_warnings};
use super::{documents, handlers, metrics, reviews, Caller, Incoming, Server};

/// Answer a request whose caller the layers have authenticated and authorized, by what its
/// path names.
pub(super) async fn route(
    server: &Server,
    caller: Option<&Caller>,
    info: RequestInfo,
    request: Incoming<'_>,
) -> ApiResult<Response> {
    let (method, headers) = (request.method, request.headers);
    let query = &*info.query;
    let segments = info.segments();
    match &info.kind {
        Kind::Review(review) => {
            let review = review.clone()?;
            let caller = caller.ok_or_else(ApiError::unauthorized)?;
            return reviews::answer(server, caller, review, headers, request.body).await;
        }
        Kind::Metrics(request) => {
            let request = request.clone()?;
            let source = server.metrics.get().ok_or_else(ApiError::no_route)?;
            return metrics::answer(server, source, request, method, query, headers).await;
        }
        Kind::Resource(path) => {
            let path = path.clone()?;
            let deprecation = match &path.rt.custom {
                Some(custom) => custom.deprecation_warning.clone(),
                None => path.rt.strategy.deprecation_warning().map(str::to_owned),
            };
            let response = handlers::resource(server, caller, path, query, request).await?;
            return Ok(with_warnings(response, deprecation.as_slice()));
        }
        Kind::NonResource => {}
    }
    match segments.as_slice() {
        ["version"] | ["api"] | ["apis"] | ["api", "v1"] | ["apis", _] | ["apis", _, _] => {
            documents::discovery(server, method, &segments, headers)
        }
        ["readyz", rest @ ..] if rest.len() <= 1 => crate::health::readyz(
            &server.api,
            rest.first().copied(),
            query.get("verbose").is_some(),
        ),
        ["metrics"] if server.base.is_empty() && *method == Method::GET => {
            Ok(crate::health::metrics(&server.api))
        }
        [probe, ..] if matches!(*probe, "healthz" | "livez" | "readyz") => Ok(text("ok")),
        ["openapi", rest @ ..] => documents::openapi(server, method, rest, query, headers).await,
        _ => Err(ApiError::no_route()),
    }
}

/// Whether `path` (within a cluster) is a health probe or the version.
pub(crate) fn is_health(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(first, "healthz" | "livez" | "readyz" | "version")
}

pub(super) fn subresource_of(path: &ResourcePath) -> ApiResult<Option<Subresource>> {
    match path.subresource.as_deref() {
        None => Ok(None),
        Some(sub) => {
            let found = path.rt.subresources.iter().find(|s| s.name() == sub).copied();
            found.map(Some).ok_or_else(ApiError::no_route)
        }
    }
}
