//! The access endpoints a secured cluster answers itself: the access reviews
//! (`SelfSubjectAccessReview`, `SubjectAccessReview`, `TokenReview`, …) and the
//! `serviceaccounts/<name>/token` subresource. Request info finds them ([`Review::of`]), the
//! authorization layer checks that the caller may create them ([`Review::attributes`]), and
//! [`answer`] answers them.

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;

use crate::access;
use crate::auth::UserInfo;
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::request::{decode_body, read_body};
use super::response::json_response;
use super::{blocking, Caller, Server};

/// An access-review or TokenRequest call.
#[derive(Clone, Debug)]
pub(super) struct Review {
    group: String,
    resource: String,
    namespace: Option<String>,
    /// The service account, for a TokenRequest.
    name: Option<String>,
}

impl Review {
    /// The call `segments` name, if they name one: `Err` for an unknown review (404) or a method
    /// other than POST (405).
    pub(super) fn of(method: &Method, segments: &[&str]) -> Option<ApiResult<Review>> {
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
            _ => return None,
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
            return Some(Err(ApiError::no_route()));
        }
        if method != Method::POST {
            return Some(Err(ApiError::method_not_allowed(format!(
                "{resource} only accept POST (create)"
            ))));
        }
        Some(Ok(Review {
            group: group.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
        }))
    }

    /// What `user` must be allowed: to create the review (or the account's token).
    pub(super) fn attributes(&self, user: UserInfo) -> Attributes {
        let mut attributes = Attributes::resource(user, "create", &self.group, &self.resource);
        if let Some(ns) = &self.namespace {
            attributes.namespace = ns.clone();
        }
        if let Some(name) = &self.name {
            attributes.name = name.clone();
            attributes.subresource = "token".to_owned();
        }
        attributes
    }
}

/// Answer an authorized `review` with the object the body asks about.
pub(super) async fn answer(
    server: &Server,
    caller: &Caller,
    review: Review,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let object = decode_body(headers, &read_body(body).await?)?;
    let api = server.api.clone();
    let caller = caller.clone();
    let Review { resource, namespace, name, .. } = review;
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
    Ok(json_response(StatusCode::CREATED, &answer))
}
