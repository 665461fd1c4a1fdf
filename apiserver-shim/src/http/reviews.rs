//! The access endpoints a secured cluster answers itself: the access reviews
//! (`SelfSubjectAccessReview`, `SubjectAccessReview`, `TokenReview`, …) and the
//! `serviceaccounts/<name>/token` subresource.

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;

use crate::access;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::request::{decode_body, read_body};
use super::response::json_response;
use super::{blocking, Caller, Server};

/// What [`access_endpoint`] did with a request.
pub(super) enum Endpoint {
    /// It was an access-review or TokenRequest call, answered.
    Answered(Response),
    /// It was not: the body comes back.
    NotOurs(Body),
}

/// The access-review endpoints (`authorization.k8s.io`, `authentication.k8s.io`) and the
/// `serviceaccounts/<name>/token` subresource, on a cluster with security.
pub(super) async fn access_endpoint(
    server: &Server,
    caller: &Caller,
    method: &Method,
    segments: &[&str],
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Endpoint> {
    let (group, resource, namespace, name) = match segments {
        ["apis", group @ ("authorization.k8s.io" | "authentication.k8s.io"), "v1", resource] => {
            (*group, *resource, None, None)
        }
        ["apis", "authorization.k8s.io", "v1", "namespaces", ns, "localsubjectaccessreviews"] => {
            ("authorization.k8s.io", "localsubjectaccessreviews", Some(*ns), None)
        }
        ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] => {
            ("", "serviceaccounts", Some(*ns), Some(*name))
        }
        _ => return Ok(Endpoint::NotOurs(body)),
    };
    let known = matches!(
        resource,
        "selfsubjectaccessreviews"
            | "selfsubjectrulesreviews"
            | "subjectaccessreviews"
            | "localsubjectaccessreviews"
            | "selfsubjectreviews"
            | "tokenreviews"
            | "serviceaccounts"
    );
    if !known {
        return Err(ApiError::no_route());
    }
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!("{resource} only accept POST (create)")));
    }
    let mut attributes = Attributes::resource(caller.user.clone(), "create", group, resource);
    if let Some(ns) = namespace {
        attributes.namespace = ns.to_owned();
    }
    if let Some(name) = name {
        attributes.name = name.to_owned();
        attributes.subresource = "token".to_owned();
    }
    caller.authorize(attributes)?;
    let object = decode_body(headers, &read_body(body).await?)?;
    let api = server.api.clone();
    let caller = caller.clone();
    let resource = resource.to_owned();
    let namespace = namespace.map(str::to_owned);
    let name = name.map(str::to_owned);
    let answer = blocking(move || match name {
        Some(name) => access::token_request(
            &api,
            &caller.security,
            namespace.as_deref().unwrap_or_default(),
            &name,
            &object,
        ),
        None => access::review(
            &api,
            &caller.security,
            &caller.user,
            &resource,
            namespace.as_deref(),
            &object,
        ),
    })
    .await?;
    Ok(Endpoint::Answered(json_response(StatusCode::CREATED, &answer)))
}
