//! Routing: a path under the cluster's base to what serves it (health, discovery, OpenAPI, the
//! access endpoints, or a resource path with its type, namespace, name and subresource).

use axum::body::Body;
use axum::http::{HeaderMap, Method};
use axum::response::Response;

use crate::rbac::Attributes;
use crate::resource::{ResourceType, Subresource};
use crate::status::{ApiError, ApiResult};

use super::documents;
use super::handlers;
use super::identity::authorize_resource;
use super::request::Query;
use super::response::{text, with_warnings};
use super::reviews::{access_endpoint, Endpoint};
use super::{Caller, Server};

/// What a resource path names.
#[derive(Debug)]
pub(super) struct ResourcePath {
    pub(super) rt: ResourceType,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    pub(super) legacy_watch: bool,
}

pub(super) fn strip_base<'a>(server: &Server, path: &'a str) -> Option<&'a str> {
    if server.base.is_empty() {
        return Some(path);
    }
    let rest = path.strip_prefix(&server.base)?;
    if rest.is_empty() || rest.starts_with('/') {
        Some(rest)
    } else {
        None
    }
}

pub(super) async fn route(
    server: &Server,
    caller: Option<&Caller>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let rest = match strip_base(server, path) {
        Some(rest) => rest,
        // Health probes answer without the prefix too (`kubectl get --raw /healthz`).
        None if is_health(path) => path,
        None => return Err(ApiError::no_route()),
    };
    let rest = if rest.is_empty() { "/" } else { rest };
    let segments: Vec<&str> = rest.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let body = match caller {
        None => body,
        Some(caller) => {
            let body =
                match access_endpoint(server, caller, method, &segments, headers, body).await? {
                    Endpoint::Answered(response) => return Ok(response),
                    Endpoint::NotOurs(body) => body,
                };
            let resource_request =
                matches!(segments.as_slice(), ["api", "v1", _, ..] | ["apis", _, _, _, ..]);
            if !resource_request {
                let verb = method.as_str().to_ascii_lowercase();
                caller.authorize(Attributes::non_resource(caller.user.clone(), verb, rest))?;
            }
            body
        }
    };
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
        ["api", "v1", rest @ ..] => {
            let path = resource_path(server, "", "v1", rest)?;
            authorize_resource(caller, method, &path, query)?;
            handlers::resource(server, caller, method, path, query, headers, body).await
        }
        ["apis", group, version, rest @ ..] => {
            let path = resource_path(server, group, version, rest)?;
            authorize_resource(caller, method, &path, query)?;
            let deprecation = path.rt.custom.as_ref().and_then(|c| c.deprecation_warning.clone());
            let response =
                handlers::resource(server, caller, method, path, query, headers, body).await?;
            Ok(with_warnings(response, deprecation.as_slice()))
        }
        ["openapi", rest @ ..] => documents::openapi(server, method, rest, query, headers).await,
        _ => Err(ApiError::no_route()),
    }
}

/// Whether `path` (within a cluster) is a health probe or the version.
pub(crate) fn is_health(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(first, "healthz" | "livez" | "readyz" | "version")
}

pub(super) fn resource_path(
    server: &Server,
    group: &str,
    version: &str,
    segments: &[&str],
) -> ApiResult<ResourcePath> {
    let registry = server.api.registry();
    let (legacy_watch, segments) = match segments {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, segments),
    };
    let lookup =
        |plural: &str| registry.get(group, version, plural).cloned().ok_or_else(ApiError::no_route);
    let owned = |s: &&str| s.to_string();
    let path = match segments {
        // /namespaces/<ns>/status and /finalize are the namespace's own subresources.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => ResourcePath {
            rt: lookup("namespaces")?,
            namespace: None,
            name: Some(name.to_string()),
            subresource: Some(sub.to_string()),
            legacy_watch,
        },
        ["namespaces", ns, plural, rest @ ..] => {
            let rt = lookup(plural)?;
            if !rt.namespaced {
                return Err(ApiError::no_route());
            }
            if rest.len() > 2 {
                return Err(ApiError::no_route());
            }
            ResourcePath {
                rt,
                namespace: Some(ns.to_string()),
                name: rest.first().map(owned),
                subresource: rest.get(1).map(owned),
                legacy_watch,
            }
        }
        [plural, rest @ ..] if rest.len() <= 2 => {
            let rt = lookup(plural)?;
            if rt.namespaced && !rest.is_empty() {
                // A namespaced object must be named with its namespace.
                return Err(ApiError::no_route());
            }
            ResourcePath {
                rt,
                namespace: None,
                name: rest.first().map(owned),
                subresource: rest.get(1).map(owned),
                legacy_watch,
            }
        }
        _ => return Err(ApiError::no_route()),
    };
    Ok(path)
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
