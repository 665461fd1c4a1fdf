//! The audit layer: each answer a cluster gives is logged with its method, path and status, and
//! refusals (401, 403) as refusals.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use futures::future::BoxFuture;

use super::gate::{run, Gate, Next, Step};

/// The audit layer: requests take its slow way, around the rest of the stack, only while debug
/// logging is on.
#[derive(Clone, Debug)]
pub(super) struct Audit;

impl Gate for Audit {
    fn check(&self, request: Request) -> Step {
        match tracing::enabled!(tracing::Level::DEBUG) {
            true => Step::Slow(request),
            false => Step::Go(request),
        }
    }

    /// Log the answer to `request`.
    fn slow<S: Next>(&self, request: Request, next: S) -> BoxFuture<'static, Response> {
        let (method, path) = (request.method().clone(), request.uri().path().to_owned());
        Box::pin(async move {
            let response = run(next, request).await;
            let status = response.status();
            if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                tracing::debug!(%method, %path, status = status.as_u16(), "request refused");
            } else {
                tracing::debug!(%method, %path, status = status.as_u16(), "request");
            }
            response
        })
    }
}
