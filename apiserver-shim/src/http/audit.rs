//! The audit layer: each answer a cluster gives is logged with its method, path and status, and
//! refusals (401, 403) as refusals.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;

/// Log the answer to `request`.
pub(super) async fn audit(request: Request, next: Next) -> Response {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return next.run(request).await;
    }
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        tracing::debug!(%method, %path, status = status.as_u16(), "request refused");
    } else {
        tracing::debug!(%method, %path, status = status.as_u16(), "request");
    }
    response
}
