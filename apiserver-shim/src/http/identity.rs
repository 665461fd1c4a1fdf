//! Who is asking, and whether they may: the authentication layer (credentials, the anonymous
//! user's public paths, impersonation) and the authorization layer (RBAC on the request info:
//! an access review's create, a resource request's verb, group, resource, namespace, name and
//! subresource, or a non-resource path). Both act only on a cluster served with security.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;

use crate::access::{self, PeerCertificates, Security};
use crate::api::Api;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::gate::{run, Gate, Next, Step};
use super::request::Query;
use super::request_info::{Kind, RequestInfo, ResourcePath};
use super::{blocking, cluster_of, in_place, Caller};

/// The authentication layer: on a cluster with security, the request goes on with its
/// [`Caller`] in its extensions, or is answered 401.
#[derive(Clone, Debug)]
pub(super) struct Authenticate;

impl Gate for Authenticate {
    fn check(&self, mut request: Request) -> Step {
        let server = match cluster_of(&request) {
            Ok(server) => server,
            Err(e) => return Step::Answer(e.into_response()),
        };
        let Some(security) = &server.security else { return Step::Go(request) };
        let peer = request.extensions().get::<PeerCertificates>();
        let path = request.uri().path();
        match identify_now(&server.api, security, request.headers(), peer, path, &server.base) {
            Some(Ok(caller)) => {
                request.extensions_mut().insert(caller);
                Step::Go(request)
            }
            Some(Err(e)) => Step::Answer(e.into_response()),
            None => Step::Slow(request),
        }
    }

    /// A caller found off this worker, on a runtime whose worker may not block.
    fn slow<S: Next>(&self, mut request: Request, next: S) -> BoxFuture<'static, Response> {
        Box::pin(async move {
            let server = match cluster_of(&request) {
                Ok(server) => server,
                Err(e) => return e.into_response(),
            };
            let Some(security) = &server.security else { return run(next, request).await };
            let peer = request.extensions().get::<PeerCertificates>().cloned();
            let path = request.uri().path();
            match identify(&server.api, security, request.headers(), peer, path, &server.base).await
            {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                    run(next, request).await
                }
                Err(e) => e.into_response(),
            }
        })
    }
}

/// The authorization layer: with a [`Caller`], the request goes on if RBAC allows what its
/// [`RequestInfo`] names, and is answered 403 if not. A path that names no served resource, or
/// an access review that does not exist or is not POSTed, is answered with that error first.
#[derive(Clone, Debug)]
pub(super) struct Authorize;

impl Gate for Authorize {
    fn check(&self, request: Request) -> Step {
        match authorize_request(&request) {
            Ok(()) => Step::Go(request),
            Err(e) => Step::Answer(e.into_response()),
        }
    }
}

/// Whether the caller of `request`, if it has one, may make it.
fn authorize_request(request: &Request) -> ApiResult<()> {
    let (Some(caller), Some(info)) =
        (request.extensions().get::<Caller>(), request.extensions().get::<RequestInfo>())
    else {
        return Ok(());
    };
    match &info.kind {
        Kind::Review(Ok(review)) => caller.authorize(review.attributes(caller.user.clone())),
        Kind::Review(Err(e)) | Kind::Resource(Err(e)) => Err(e.clone()),
        Kind::Resource(Ok(path)) => authorize_resource(caller, request.method(), path, &info.query),
        Kind::NonResource => {
            let verb = request.method().as_str().to_ascii_lowercase();
            caller.authorize(Attributes::non_resource(caller.user.clone(), verb, &*info.rest))
        }
    }
}

/// Authenticate a request (401 for bad credentials, and for anonymous requests beyond the
/// public paths), and apply impersonation.
pub(super) async fn identify(
    api: &Arc<Api>,
    security: &Arc<Security>,
    headers: &HeaderMap,
    peer: Option<PeerCertificates>,
    path: &str,
    base: &str,
) -> ApiResult<Caller> {
    if let Some(found) = identify_now(api, security, headers, peer.as_ref(), path, base) {
        return found;
    }
    let relative = relative(path, base).to_owned();
    let (api, security, headers) = (api.clone(), security.clone(), headers.clone());
    blocking(move || identify_here(&api, &security, &headers, peer.as_ref(), &relative)).await
}

/// [`identify`], when it can be done on this worker: without a bearer token (whose service
/// account is looked up) and with the policy current, nothing reads the store; else on a
/// multi-threaded runtime the worker blocks in place for the read. `None` when the reads must go
/// to the blocking pool.
fn identify_now(
    api: &Api,
    security: &Arc<Security>,
    headers: &HeaderMap,
    peer: Option<&PeerCertificates>,
    path: &str,
    base: &str,
) -> Option<ApiResult<Caller>> {
    let relative = relative(path, base);
    let reads_store =
        headers.contains_key(header::AUTHORIZATION) || security.current_policy(api).is_none();
    if !reads_store {
        return Some(identify_here(api, security, headers, peer, relative));
    }
    in_place(|| identify_here(api, security, headers, peer, relative))
}

fn relative<'a>(path: &'a str, base: &str) -> &'a str {
    path.strip_prefix(base).unwrap_or(path)
}

fn identify_here(
    api: &Api,
    security: &Arc<Security>,
    headers: &HeaderMap,
    peer: Option<&PeerCertificates>,
    relative: &str,
) -> ApiResult<Caller> {
    let user = security.authenticate(api, headers, peer)?;
    if user.name == crate::auth::ANONYMOUS_USER && !access::is_public(relative) {
        return Err(ApiError::unauthorized());
    }
    let policy = security.policy(api)?;
    let user = security.impersonate(&policy, user, headers)?;
    Ok(Caller { user, policy, security: security.clone() })
}

/// 403 unless the caller (if the cluster has security) may make this resource request.
fn authorize_resource(
    caller: &Caller,
    method: &Method,
    path: &ResourcePath,
    query: &Query,
) -> ApiResult<()> {
    let watch = path.legacy_watch || query.flag("watch");
    let verb = access::verb(method, path.name.is_some(), watch);
    let mut attributes =
        Attributes::resource(caller.user.clone(), verb, path.rt.group, path.rt.plural);
    attributes.api_version = path.rt.version.to_owned();
    if let Some(ns) = &path.namespace {
        attributes.namespace = ns.clone();
    } else if path.rt.strategy.is_namespace() {
        // A namespace is in itself, as kube-apiserver's request info has it.
        attributes.namespace = path.name.clone().unwrap_or_default();
    }
    if let Some(name) = &path.name {
        attributes.name = name.clone();
    }
    if let Some(sub) = &path.subresource {
        attributes.subresource = sub.clone();
    }
    caller.authorize(attributes)
}
