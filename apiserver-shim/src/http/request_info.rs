//! Request info: what a request asks for, found once, before authorization, as
//! kube-apiserver's `RequestInfoResolver` does — the path within the cluster, the query, and
//! whether it is an access review, a request for the resource metrics API, a resource request
//! (with its type, namespace, name and subresource) or a non-resource request.

use std::sync::Arc;

use axum::extract::Request;
use axum::response::IntoResponse;

use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

use super::gate::{Gate, Step};
use super::metrics::MetricsRequest;
use super::request::Query;
use super::reviews::Review;
use super::routing::is_health;
use super::{cluster_of, Server};

/// What a request asks for, in its extensions from the request-info layer on.
#[derive(Clone, Debug)]
pub(super) struct RequestInfo {
    /// The path within the cluster (`/` at its root).
    pub(super) rest: String,
    /// The query parameters.
    pub(super) query: Arc<Query>,
    /// What the path names.
    pub(super) kind: Kind,
}

/// What a path names.
#[derive(Clone, Debug)]
pub(super) enum Kind {
    /// An access review or TokenRequest, on a cluster with security (or why it is refused).
    Review(ApiResult<Review>),
    /// A request for the resource metrics API, on a cluster given a source of metrics (or why
    /// none is served there).
    Metrics(ApiResult<MetricsRequest>),
    /// A resource path under `/api/v1/…` or `/apis/<group>/<version>/…` (or why none is served
    /// there).
    Resource(ApiResult<ResourcePath>),
    /// Anything else: discovery, OpenAPI, health, metrics, or nothing.
    NonResource,
}

impl RequestInfo {
    /// The path's segments.
    pub(super) fn segments(&self) -> Vec<&str> {
        self.rest.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect()
    }
}

/// The request-info layer: a path outside the cluster's base is 404 (health probes aside);
/// anything else goes on with its [`RequestInfo`].
#[derive(Clone, Debug)]
pub(super) struct Resolve;

impl Gate for Resolve {
    fn check(&self, mut request: Request) -> Step {
        match resolve(&request) {
            Ok(info) => {
                request.extensions_mut().insert(info);
                Step::Go(request)
            }
            Err(e) => Step::Answer(e.into_response()),
        }
    }
}

/// The request info of `request`.
fn resolve(request: &Request) -> ApiResult<RequestInfo> {
    let server = cluster_of(request)?;
    let path = request.uri().path();
    let rest = match strip_base(&server, path) {
        Some(rest) => rest,
        // Health probes answer without the prefix too (`kubectl get --raw /healthz`).
        None if is_health(path) => path,
        None => return Err(ApiError::no_route()),
    };
    let rest = if rest.is_empty() { "/" } else { rest }.to_owned();
    let query = Arc::new(Query::parse(request.uri().query()));
    let mut info = RequestInfo { rest, query, kind: Kind::NonResource };
    let segments = info.segments();
    let review = match server.security {
        Some(_) => Review::of(request.method(), &segments),
        None => None,
    };
    let metrics = server.metrics.get().is_some();
    let kind = match (review, segments.as_slice()) {
        (Some(review), _) => Kind::Review(review),
        (None, ["apis", group, version, rest @ ..])
            if !rest.is_empty() && metrics && MetricsRequest::serves(group, version) =>
        {
            Kind::Metrics(MetricsRequest::of(rest, &info.query))
        }
        (None, ["api", "v1", rest @ ..]) if !rest.is_empty() => {
            Kind::Resource(resource_path(&server, "", "v1", rest))
        }
        (None, ["apis", group, version, rest @ ..]) if !rest.is_empty() => {
            Kind::Resource(resource_path(&server, group, version, rest))
        }
        _ => Kind::NonResource,
    };
    info.kind = kind;
    Ok(info)
}

/// What a resource path names.
#[derive(Clone, Debug)]
pub(super) struct ResourcePath {
    pub(super) rt: ResourceType,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
    pub(super) subresource: Option<String>,
    pub(super) legacy_watch: bool,
}

/// `path` within the cluster served under `server`'s base, if it is under it.
fn strip_base<'a>(server: &Server, path: &'a str) -> Option<&'a str> {
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

/// The resource path `segments` name after `/api/v1` or `/apis/<group>/<version>`.
fn resource_path(
    server: &Server,
    group: &str,
    version: &str,
    segments: &[&str],
) -> ApiResult<ResourcePath> {
    let registry = server.api.registry();
    path_of(group, segments, |plural| registry.get(group, version, plural).cloned()).map_err(|e| {
        match crate::registry::apiregistration::apiservices::unproxied(&server.api, group, version)
        {
            Some(refused) => refused,
            None => e,
        }
    })
}

/// The resource path `segments` name after the path of `group` and a version, with the types
/// `lookup` finds there by plural.
pub(super) fn path_of(
    group: &str,
    segments: &[&str],
    lookup: impl Fn(&str) -> Option<ResourceType>,
) -> ApiResult<ResourcePath> {
    let (legacy_watch, segments) = match segments {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, segments),
    };
    let lookup = |plural: &str| lookup(plural).ok_or_else(ApiError::no_route);
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
