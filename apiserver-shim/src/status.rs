//! Kubernetes `Status` errors: every failure is answered as a `Status` object with the reason and
//! code kube-apiserver would give.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use carrel_store::Error as StoreError;

/// One cause of an Invalid (422) error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, …
    pub reason: &'static str,
    /// What is wrong.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A cause at `field`.
    pub fn new(
        reason: &'static str,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Cause {
        Cause { reason, message: message.into(), field: field.into() }
    }
}

/// The object an error is about, for `details`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The resource's group.
    pub group: String,
    /// The resource (plural) or kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
}

/// An error answered as a Kubernetes `Status`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// The `reason` field (`NotFound`, `AlreadyExists`, …).
    pub reason: &'static str,
    /// A human-readable message, in kube-apiserver's words where it has them.
    pub message: String,
    /// What the error is about.
    pub subject: Option<Box<Subject>>,
    /// For Invalid: the causes.
    pub causes: Vec<Cause>,
    /// For 429/410 and the like: the `retryAfterSeconds` detail.
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            subject: None,
            causes: Vec::new(),
            retry_after: None,
        }
    }

    fn about(mut self, group: &str, kind: &str, name: &str) -> ApiError {
        self.subject =
            Some(Box::new(Subject { group: group.into(), kind: kind.into(), name: name.into() }));
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 404 NotFound for an object: `pods "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .about(group, resource, name)
    }

    /// 401 Unauthorized: no valid credentials (the reason is not told to the client).
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn no_route() -> ApiError {
        ApiError::new(404, "NotFound", "the server could not find the requested resource")
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::new(405, "MethodNotAllowed", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .about(group, resource, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .about(group, resource, name)
    }

    /// 409 Conflict for a server-side apply whose fields other managers own.
    pub fn apply_conflict(message: String, causes: Vec<Cause>) -> ApiError {
        ApiError { causes, ..ApiError::new(409, "Conflict", message) }
    }

    /// 410 Expired (Gone).
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(413, "RequestEntityTooLarge", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"),
        )
    }

    /// 415 UnsupportedMediaType for a request this server cannot carry out yet.
    pub fn unsupported(message: impl Into<String>) -> ApiError {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> ApiError {
        ApiError::new(
            406,
            "NotAcceptable",
            format!("only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (asked for {accept:?})"),
        )
    }

    /// 422 Invalid with causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let summary = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        let mut e = ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {summary}", qualified(group, kind)),
        )
        .about(group, kind, name);
        e.causes = causes;
        e
    }

    /// 403 Forbidden.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource)),
        )
        .about(group, resource, name)
    }

    /// 429 TooManyRequests, as kube-apiserver's flow control answers (the caller sets the
    /// `Retry-After` header to the same seconds).
    pub fn too_many_requests(retry_after_seconds: u32) -> ApiError {
        ApiError {
            retry_after: Some(retry_after_seconds),
            ..ApiError::new(429, "TooManyRequests", "Too many requests, please try again later.")
        }
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(503, "ServiceUnavailable", message)
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(504, "Timeout", message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        let mut details = serde_json::Map::new();
        if let Some(subject) = &self.subject {
            if !subject.name.is_empty() {
                details.insert("name".into(), subject.name.clone().into());
            }
            if !subject.group.is_empty() {
                details.insert("group".into(), subject.group.clone().into());
            }
            details.insert("kind".into(), subject.kind.clone().into());
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), causes.into());
        }
        if let Some(seconds) = self.retry_after {
            details.insert("retryAfterSeconds".into(), seconds.into());
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }

    /// Map a store error about `name` of `resource` to the API's answer.
    pub fn from_store(e: StoreError, group: &str, resource: &str, name: &str) -> ApiError {
        match e {
            StoreError::NotFound { .. } => ApiError::not_found(group, resource, name),
            StoreError::AlreadyExists { .. } => ApiError::already_exists(group, resource, name),
            StoreError::Conflict { .. } => ApiError::conflict(
                group,
                resource,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ),
            e @ (StoreError::Expired { .. } | StoreError::WatcherTooSlow { .. }) => {
                ApiError::expired(format!("too old resource version: {e}"))
            }
            StoreError::TooLarge { size, limit } => ApiError::too_large(format!(
                "the object is {size} bytes, over the limit of {limit} bytes"
            )),
            StoreError::QuotaExceeded { resource: what, requested, used, limited } => {
                ApiError::forbidden(
                    group,
                    resource,
                    name,
                    &format!(
                        "exceeded quota: {STORE_QUOTA}, requested: {what}={requested}, used: {what}={used}, limited: {what}={limited}"
                    ),
                )
            }
            StoreError::InvalidContinue { reason } => {
                ApiError::bad_request(format!("invalid continue token: {reason}"))
            }
            // A passing I/O error (no free descriptor, no memory): the store stays writable.
            e @ StoreError::Unavailable(_) => {
                tracing::warn!(error = %e, "store temporarily unavailable");
                let mut error = ApiError::unavailable(format!("storage error: {e}"));
                error.retry_after = Some(1);
                error
            }
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::internal(format!("storage error: {other}"))
            }
        }
    }
}

/// The name a refused write gives the store's quota, where kube-apiserver names the
/// ResourceQuota object: a tenant's bound on its objects (`Tenant.spec.limits`).
pub const STORE_QUOTA: &str = "tenant-objects";

/// `pods`, or `deployments.apps`, as kube-apiserver names a resource in messages.
fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_status()).unwrap_or_default();
        let mut response = (code, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// The API's result type.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_kube_apiserver() {
        let status = ApiError::not_found("apps", "deployments", "web").to_status();
        assert_eq!(status["message"], "deployments.apps \"web\" not found");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["code"], 404);
        assert_eq!(status["details"]["name"], "web");
        assert_eq!(status["details"]["group"], "apps");
        assert_eq!(status["details"]["kind"], "deployments");
    }

    #[test]
    fn invalid_lists_causes_with_field_paths() {
        let e = ApiError::invalid(
            "",
            "ConfigMap",
            "Bad_Name",
            vec![Cause::new("FieldValueInvalid", "metadata.name", "Invalid value: \"Bad_Name\"")],
        );
        let status = e.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["details"]["causes"][0]["field"], "metadata.name");
        assert!(status["message"]
            .as_str()
            .unwrap()
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name"));
    }
}
