//! `/readyz` and `/metrics`: what an operator watches for the health of a cluster's store.
//!
//! `/readyz` answers as kube-apiserver's does: `ok` while every check passes; otherwise HTTP 500
//! with one line per check (`[+]ping ok`, `[-]store failed: <reason>`) and `readyz check
//! failed`. `?verbose` lists the checks when all pass too, and `/readyz/<check>` runs one. The
//! `store` check fails while the cluster's store refuses writes after an uncertain I/O error
//! (it reopens itself once the cause is gone, see `carrel_store::SledStore::reopen`).
//!
//! `/metrics` (the host API only: the counts are the whole process's) serves the store I/O
//! counters in the Prometheus text format.

use std::fmt::Write as _;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use carrel_store::Health;

use crate::api::Api;
use crate::status::{ApiError, ApiResult};

/// The content type of the Prometheus text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The readiness checks of `api`'s cluster, by name, each with its outcome.
fn checks(api: &Api) -> Vec<(&'static str, Health)> {
    vec![("ping", Health::Ok), ("store", api.store_health())]
}

/// `/readyz`, or `/readyz/<check>` with `only`.
pub(crate) fn readyz(api: &Api, only: Option<&str>, verbose: bool) -> ApiResult<Response> {
    let mut checks = checks(api);
    if let Some(only) = only {
        checks.retain(|(name, _)| *name == only);
        if checks.is_empty() {
            return Err(ApiError::no_route());
        }
    }
    let failed = checks.iter().any(|(_, health)| *health != Health::Ok);
    let body = if failed || verbose {
        let mut body = String::new();
        for (name, health) in &checks {
            match health {
                Health::Ok => writeln!(body, "[+]{name} ok"),
                Health::Failed { reason } => writeln!(body, "[-]{name} failed: {reason}"),
            }
            .expect("writing to a String");
        }
        body.push_str(if failed { "readyz check failed\n" } else { "readyz check passed\n" });
        body
    } else {
        "ok".to_owned()
    };
    if failed {
        tracing::warn!(checks = %body.trim_end(), "readyz check failed");
    }
    let code = if failed { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::OK };
    Ok(plain(code, body, "text/plain; charset=utf-8"))
}

/// `/metrics`: the store I/O counters of this process.
pub(crate) fn metrics(api: &Api) -> Response {
    let stats = carrel_store::io_stats();
    let failed = u64::from(matches!(api.store_health(), Health::Failed { .. }));
    let mut body = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        writeln!(body, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}")
            .expect("writing to a String");
    };
    metric(
        "carrel_store_failures_total",
        "counter",
        "Stores that stopped accepting writes after an I/O error left their disk state uncertain.",
        stats.failures,
    );
    metric(
        "carrel_store_reopens_total",
        "counter",
        "Failed stores reopened in place.",
        stats.reopened,
    );
    metric(
        "carrel_store_passing_io_errors_total",
        "counter",
        "I/O errors that changed nothing on disk (EMFILE, ENOMEM, ...), each retried.",
        stats.passing_errors,
    );
    metric(
        "carrel_store_unavailable_total",
        "counter",
        "Syncs and checkpoints given up after their retries, the store staying writable.",
        stats.gave_up,
    );
    metric(
        "carrel_host_store_failed",
        "gauge",
        "1 while the host store refuses writes, else 0.",
        failed,
    );
    plain(StatusCode::OK, body, METRICS_CONTENT_TYPE)
}

fn plain(code: StatusCode, body: String, content_type: &'static str) -> Response {
    let mut response = (code, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
