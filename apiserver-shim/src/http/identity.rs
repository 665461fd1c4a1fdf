//! Who is asking: authentication with impersonation, and the authorization of a resource request
//! from its request info (verb, group, resource, namespace, name, subresource).

use std::sync::Arc;

use axum::http::{header, HeaderMap, Method};

use crate::access::{self, PeerCertificates, Security};
use crate::api::Api;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::request::Query;
use super::routing::ResourcePath;
use super::{blocking, Caller};

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
pub(super) fn authorize_resource(
    caller: Option<&Caller>,
    method: &Method,
    path: &ResourcePath,
    query: &Query,
) -> ApiResult<()> {
    let Some(caller) = caller else { return Ok(()) };
    let watch = path.legacy_watch || query.flag("watch");
    let verb = access::verb(method, path.name.is_some(), watch);
    let mut attributes =
        Attributes::resource(caller.user.clone(), verb, path.rt.group, path.rt.plural);
    attributes.api_version = path.rt.version.to_owned();
    if let Some(ns) = &path.namespace {
        attributes.namespace = ns.clone();
    } else if path.rt.group.is_empty() && path.rt.plural == "namespaces" {
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
