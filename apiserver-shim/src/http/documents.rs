//! The documents a cluster serves about itself: the version, discovery (legacy and aggregated)
//! and the OpenAPI v2 and v3 documents.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::discovery;
use crate::openapi;
use crate::status::{ApiError, ApiResult};

use super::request::{accept, Query};
use super::response::{aggregated, json_response};
use super::{blocking, Server};
use crate::version::KUBERNETES_VERSION;

/// `/openapi/v3…` and `/openapi/v2`; a redirect to the current hash keeps the base path.
pub(super) async fn openapi(
    server: &Server,
    method: &Method,
    segments: &[&str],
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("the OpenAPI documents are read-only"));
    }
    // The documents are built on first use, off the async workers.
    let host = server.api.registry().is_host();
    if segments.first() == Some(&"v2") {
        blocking(move || {
            openapi::v2(host);
            Ok(())
        })
        .await?;
    } else {
        blocking(move || {
            openapi::v3(host);
            Ok(())
        })
        .await?;
    }
    let custom = match segments.first() {
        Some(&"v3") => server.custom_openapi(),
        _ => None,
    };
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok());
    let header =
        |value: &str| HeaderValue::from_str(value).map_err(|e| ApiError::internal(e.to_string()));
    let hash = query.get("hash");
    match openapi::answer_with(
        host,
        custom.as_deref(),
        segments,
        hash,
        accept(headers),
        if_none_match,
    ) {
        openapi::Answer::Body { body, content_type, etag, immutable } => {
            let mut response = (StatusCode::OK, body.to_vec()).into_response();
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            if let Some(etag) = etag {
                h.insert(header::ETAG, header(&format!("\"{etag}\""))?);
            }
            if immutable {
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
                let expires = chrono::Utc::now() + chrono::Duration::days(365);
                h.insert(
                    header::EXPIRES,
                    header(&expires.format("%a, %d %b %Y %H:%M:%S GMT").to_string())?,
                );
                h.insert(header::VARY, HeaderValue::from_static("Accept"));
            }
            Ok(response)
        }
        openapi::Answer::Redirect(to) => {
            let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
            response
                .headers_mut()
                .insert(header::LOCATION, header(&format!("{}{to}", server.base))?);
            Ok(response)
        }
        openapi::Answer::NotModified => Ok(StatusCode::NOT_MODIFIED.into_response()),
        openapi::Answer::NotFound => Err(ApiError::no_route()),
    }
}

/// `/version` and the discovery documents: `/api`, `/apis`, `/api/v1`, `/apis/<group>` and
/// `/apis/<group>/<version>`, legacy or aggregated as the client accepts.
pub(super) fn discovery(
    server: &Server,
    method: &Method,
    segments: &[&str],
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let discovery_get = |value: Option<Value>| -> ApiResult<Response> {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed("discovery is read-only"));
        }
        value.map(|v| json_response(StatusCode::OK, &v)).ok_or_else(ApiError::no_route)
    };
    match segments {
        ["version"] => {
            let (major, minor, git) = KUBERNETES_VERSION;
            discovery_get(Some(json!({
                "major": major,
                "minor": minor,
                "gitVersion": git,
                "gitCommit": "carrel",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            })))
        }
        ["api"] => {
            if discovery::wants_aggregated(accept(headers)) {
                Ok(aggregated(discovery::aggregated(&server.discovered(), true)))
            } else {
                discovery_get(Some(discovery::api_versions("127.0.0.1")))
            }
        }
        ["apis"] => {
            if discovery::wants_aggregated(accept(headers)) {
                Ok(aggregated(discovery::aggregated(&server.discovered(), false)))
            } else {
                discovery_get(Some(discovery::api_group_list(&server.discovered())))
            }
        }
        ["api", "v1"] => {
            discovery_get(discovery::api_resource_list(&server.discovered(), "", "v1"))
        }
        ["apis", group] => discovery_get(discovery::api_group(&server.discovered(), group)),
        ["apis", group, version] => {
            discovery_get(discovery::api_resource_list(&server.discovered(), group, version))
        }
        _ => Err(ApiError::no_route()),
    }
}
