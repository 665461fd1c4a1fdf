//! The handlers of resource requests, one module per verb: each takes a [`Call`] (the resource
//! type, namespace and subresource the path names, the query and the headers) and answers it
//! from the cluster's [`Api`].

mod create;
mod delete;
mod delete_collection;
mod get;
mod list;
mod patch;
mod pods;
mod update;

pub(super) use pods::is_pod;

use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde_json::{json, Value};

use super::request::Query;
use super::request_info::ResourcePath;
use super::routing::subresource_of;
use super::{watch, Caller, Incoming, Server};
use crate::access;
use crate::api::{Api, Target};
use crate::resource::{ResourceType, Subresource};
use crate::status::{ApiError, ApiResult};

/// A request for objects of one resource type, as the verb handlers take it.
pub(super) struct Call<'a> {
    server: &'a Server,
    caller: Option<&'a Caller>,
    rt: ResourceType,
    namespace: Option<String>,
    sub: Option<Subresource>,
    query: &'a Query,
    headers: &'a HeaderMap,
}

/// Answer a request for the resource `path` names, by its verb.
pub(super) async fn resource(
    server: &Server,
    caller: Option<&Caller>,
    path: ResourcePath,
    query: &Query,
    request: Incoming<'_>,
) -> ApiResult<Response> {
    let Incoming { method, headers, body, upgrade } = request;
    if pods::is_pod(&path.rt) {
        if let (Some(sub), Some(name), Some(namespace)) =
            (path.subresource.as_deref(), &path.name, &path.namespace)
        {
            match (sub, method) {
                ("binding", &Method::POST) => {
                    return pods::binding(server, &path.rt, namespace, name, headers, body).await
                }
                ("eviction", &Method::POST) => {
                    return pods::eviction(server, namespace, name, query, headers, body).await
                }
                ("log", &Method::GET) => return pods::log(server, namespace, name, query).await,
                ("exec" | "attach" | "portforward", &Method::GET | &Method::POST) => {
                    let pod = pods::Connect { namespace, name, sub };
                    return pods::connect(server, pod, query, headers, upgrade).await;
                }
                _ => {
                    if let Some(refused) = pods::refused(sub, method) {
                        return Err(refused);
                    }
                }
            }
        }
    }
    let sub = subresource_of(&path)?;
    if sub.is_none() && path.subresource.is_some() {
        return Err(ApiError::no_route());
    }
    let rt = path.rt;
    if rt.namespaced && path.namespace.is_none() && method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{} must be written through a namespace",
            rt.plural
        )));
    }
    let watch = path.legacy_watch || query.flag("watch");
    let call = Call { server, caller, rt, namespace: path.namespace, sub, query, headers };
    match (method.clone(), path.name) {
        (Method::GET, None) if watch => {
            watch::watch_stream(server, call.rt, call.namespace, query, headers).await
        }
        (Method::GET, None) => list::list(call).await,
        (Method::GET, Some(name)) => get::get(call, name).await,
        (Method::POST, None) => create::create(call, body).await,
        (Method::PUT, Some(name)) => update::update(call, name, body).await,
        (Method::PATCH, Some(name)) => patch::patch(call, name, body).await,
        (Method::DELETE, Some(name)) => delete::delete(call, name, body).await,
        (Method::DELETE, None) => delete_collection::delete_collection(call, body).await,
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not supported on this path"))),
    }
}

/// Who makes a request, as admission policies see it.
fn requester(caller: Option<&Caller>) -> crate::admission::policy::Requester {
    crate::admission::policy::Requester::new(caller.map(|c| c.user.clone()))
}

/// On a cluster with security, refuse an RBAC write that would grant more than the caller holds
/// (`name` is the object replaced, for an update).
fn guard_rbac_write(
    caller: Option<&Caller>,
    api: &Api,
    rt: &ResourceType,
    namespace: Option<&str>,
    object: &Value,
    name: Option<&str>,
) -> ApiResult<()> {
    let Some(caller) = caller else { return Ok(()) };
    if rt.group != crate::rbac::RBAC_GROUP {
        return Ok(());
    }
    let old = match name {
        Some(name) => {
            match api.get(&Target { rt, namespace: namespace.map(str::to_owned) }, name) {
                Ok(old) => Some(old),
                Err(ApiError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    let mut object = object.clone();
    if object.pointer("/metadata/name").is_none() {
        if let Some(name) = name {
            object["metadata"]["name"] = json!(name);
        }
    }
    access::check_rbac_write(
        &caller.policy,
        &caller.user,
        rt,
        namespace.unwrap_or_default(),
        &object,
        old.as_ref(),
    )
}
