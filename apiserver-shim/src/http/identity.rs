//! Who is asking, and whether they may: the authentication layer (credentials, the anonymous
//! user's public paths, impersonation) and the authorization layer (RBAC on the request info:
//! an access review's create, a resource request's verb, group, resource, namespace, name and
//! subresource — the resource metrics API's as any other's —, or a non-resource path). Both act only on a cluster served with security.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;

use crate::access::{self, PeerCertificates, Security};
use crate::api::Api;
use crate::auth::UserInfo;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::gate::{run, Gate, Next, Step};
use super::request::Query;
use super::request_info::{Kind, RequestInfo, ResourcePath};
use super::{blocking, cluster_of, in_place, Caller, Loopback, Server};

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
        let credentials = match Credentials::of(&request, &server) {
            Ok(credentials) => credentials,
            Err(e) => return Step::Answer(e.into_response()),
        };
        let path = request.uri().path();
        match identify_now(
            &server.api,
            security,
            request.headers(),
            credentials,
            path,
            &server.base,
        ) {
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
            let credentials = match Credentials::of(&request, &server) {
                Ok(credentials) => credentials.owned(),
                Err(e) => return e.into_response(),
            };
            let path = request.uri().path();
            let headers = request.headers();
            match identify(&server.api, security, headers, credentials, path, &server.base).await {
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
        Kind::Metrics(Ok(metrics)) => {
            caller.authorize(metrics.attributes(caller.user.clone(), request.method()))
        }
        Kind::Review(Err(e)) | Kind::Metrics(Err(e)) | Kind::Resource(Err(e)) => Err(e.clone()),
        Kind::Resource(Ok(path)) => authorize_resource(caller, request.method(), path, &info.query),
        Kind::NonResource => {
            let verb = request.method().as_str().to_ascii_lowercase();
            caller.authorize(Attributes::non_resource(caller.user.clone(), verb, &*info.rest))
        }
    }
}

/// What a request proves who it is with, beside its headers.
#[derive(Clone, Debug)]
pub(super) enum Credentials<P> {
    /// The client certificates of the connection it came on (none for a request that came on
    /// none).
    Peer(Option<P>),
    /// The identity of the in-process transport it came through ([`Loopback`]).
    Loopback(UserInfo),
}

impl<'a> Credentials<&'a PeerCertificates> {
    /// Those of `request` to `server`: a [`Loopback`] identity when it came through the
    /// in-process transport of `server` (401 when it came through that of another cluster), else
    /// its connection's certificates.
    fn of(request: &'a Request, server: &Arc<Server>) -> ApiResult<Self> {
        match request.extensions().get::<Loopback>() {
            Some(loopback) => match loopback.user_for(server) {
                Some(user) => Ok(Credentials::Loopback(user.clone())),
                None => Err(ApiError::unauthorized()),
            },
            None => Ok(Credentials::Peer(request.extensions().get::<PeerCertificates>())),
        }
    }

    /// The same, owned.
    fn owned(self) -> Credentials<PeerCertificates> {
        match self {
            Credentials::Peer(peer) => Credentials::Peer(peer.cloned()),
            Credentials::Loopback(user) => Credentials::Loopback(user),
        }
    }
}

impl Credentials<PeerCertificates> {
    fn as_ref(&self) -> Credentials<&PeerCertificates> {
        match self {
            Credentials::Peer(peer) => Credentials::Peer(peer.as_ref()),
            Credentials::Loopback(user) => Credentials::Loopback(user.clone()),
        }
    }
}

/// Authenticate a request (401 for bad credentials, and for anonymous requests beyond the
/// public paths), and apply impersonation.
pub(super) async fn identify(
    api: &Arc<Api>,
    security: &Arc<Security>,
    headers: &HeaderMap,
    credentials: Credentials<PeerCertificates>,
    path: &str,
    base: &str,
) -> ApiResult<Caller> {
    if let Some(found) = identify_now(api, security, headers, credentials.as_ref(), path, base) {
        return found;
    }
    let relative = relative(path, base).to_owned();
    let (api, security, headers) = (api.clone(), security.clone(), headers.clone());
    blocking(move || identify_here(&api, &security, &headers, credentials.as_ref(), &relative))
        .await
}

/// [`identify`], when it can be done on this worker: without a bearer token (whose service
/// account is looked up) and with the policy current, nothing reads the store; else on a
/// multi-threaded runtime the worker blocks in place for the read. `None` when the reads must go
/// to the blocking pool.
fn identify_now(
    api: &Api,
    security: &Arc<Security>,
    headers: &HeaderMap,
    credentials: Credentials<&PeerCertificates>,
    path: &str,
    base: &str,
) -> Option<ApiResult<Caller>> {
    let relative = relative(path, base);
    let token =
        matches!(credentials, Credentials::Peer(_)) && headers.contains_key(header::AUTHORIZATION);
    let reads_store = token || security.current_policy(api).is_none();
    if !reads_store {
        return Some(identify_here(api, security, headers, credentials, relative));
    }
    in_place(|| identify_here(api, security, headers, credentials, relative))
}

fn relative<'a>(path: &'a str, base: &str) -> &'a str {
    path.strip_prefix(base).unwrap_or(path)
}

fn identify_here(
    api: &Api,
    security: &Arc<Security>,
    headers: &HeaderMap,
    credentials: Credentials<&PeerCertificates>,
    relative: &str,
) -> ApiResult<Caller> {
    let (user, loopback) = match credentials {
        Credentials::Loopback(user) => (user, true),
        Credentials::Peer(peer) => (security.authenticate(api, headers, peer)?, false),
    };
    if user.name == crate::auth::ANONYMOUS_USER && !access::is_public(relative) {
        return Err(ApiError::unauthorized());
    }
    let policy = security.policy(api)?;
    // A loopback client acting as someone else has that one's rights only.
    let privileged = loopback && !impersonates(headers);
    let user = security.impersonate(&policy, user, headers)?;
    Ok(Caller { user, policy, security: security.clone(), privileged })
}

/// Whether a request asks to act as another user.
fn impersonates(headers: &HeaderMap) -> bool {
    headers.contains_key("impersonate-user") || headers.contains_key("impersonate-group")
}

/// 403 unless the caller (if the cluster has security) may make this resource request.
fn authorize_resource(
    caller: &Caller,
    method: &Method,
    path: &ResourcePath,
    query: &Query,
) -> ApiResult<()> {
    let watch = path.legacy_watch || query.flag("watch");
    let verb = match path.subresource.as_deref() {
        // A pod's streams are opened with `create` whatever the verb of the upgrade request
        // (kube-apiserver's AuthorizePodWebsocketUpgradeCreatePermission).
        Some(sub) if path.rt.strategy.is_pod() && access::is_pod_stream(sub) => "create",
        _ => access::verb(method, path.name.is_some(), watch),
    };
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
