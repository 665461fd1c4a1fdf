//! Who is asking, and whether they may: the authentication layer (credentials, the anonymous
//! user's public paths, impersonation) and the authorization layer (RBAC on the request info:
//! an access review's create, a resource request's verb, group, resource, namespace, name and
//! subresource, or a non-resource path). Both act only on a cluster served with security.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::access::{self, PeerCertificates, Security};
use crate::api::Api;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::request::Query;
use super::request_info::{Kind, RequestInfo, ResourcePath};
use super::{blocking, cluster_of, Caller};

/// The authentication layer: on a cluster with security, the request goes on with its
/// [`Caller`] in its extensions, or is answered 401.
pub(super) async fn authenticate(mut request: Request, next: Next) -> Response {
    let server = match cluster_of(&request) {
        Ok(server) => server,
        Err(e) => return e.into_response(),
    };
    if let Some(security) = &server.security {
        let peer = request.extensions().get::<PeerCertificates>().cloned();
        let path = request.uri().path();
        match identify(&server.api, security, request.headers(), peer, path, &server.base).await {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
            }
            Err(e) => return e.into_response(),
        }
    }
    next.run(request).await
}

/// The authorization layer: with a [`Caller`], the request goes on if RBAC allows what its
/// [`RequestInfo`] names, and is answered 403 if not. A path that names no served resource, or
/// an access review that does not exist or is not POSTed, is answered with that error first.
pub(super) async fn authorize(request: Request, next: Next) -> Response {
    if let Err(e) = authorize_request(&request) {
        return e.into_response();
    }
    next.run(request).await
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
    let relative = path.strip_prefix(base).unwrap_or(path).to_owned();
    let identify = move |api: &Api, security: Arc<Security>, headers: &HeaderMap| {
        let user = security.authenticate(api, headers, peer.as_ref())?;
        if user.name == crate::auth::ANONYMOUS_USER && !access::is_public(&relative) {
            return Err(ApiError::unauthorized());
        }
        let policy = security.policy(api)?;
        let user = security.impersonate(&policy, user, headers)?;
        Ok(Caller { user, policy, security })
    };
    // Without a bearer token (whose service account is looked up) and with the policy current,
    // nothing here reads the store: stay on the async worker.
    let token = headers.contains_key(header::AUTHORIZATION);
    if !token && security.current_policy(api).is_some() {
        return identify(api, security.clone(), headers);
    }
    let (api, security, headers) = (api.clone(), security.clone(), headers.clone());
    blocking(move || identify(&api, security, &headers)).await
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
