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

/// An error answered as a Kubernetes `Status`: one variant per `reason` this server gives. The
/// constructors below word the messages as kube-apiserver does; [`ApiError::to_status`] is the one
/// place an error becomes a `Status` object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 400 BadRequest.
    #[error("400 BadRequest: {message}")]
    BadRequest {
        /// What is wrong with the request.
        message: String,
    },
    /// 401 Unauthorized: no valid credentials (the reason is not told to the client).
    #[error("401 Unauthorized: Unauthorized")]
    Unauthorized,
    /// 403 Forbidden.
    #[error("403 Forbidden: {message}")]
    Forbidden {
        /// Why the request is refused.
        message: String,
        /// What the refusal is about, if it is about a resource.
        subject: Option<Box<Subject>>,
    },
    /// 404 NotFound, for an object (with its subject) or for a path that serves nothing.
    #[error("404 NotFound: {message}")]
    NotFound {
        /// What was not found.
        message: String,
        /// The object that was not found.
        subject: Option<Box<Subject>>,
    },
    /// 405 MethodNotAllowed.
    #[error("405 MethodNotAllowed: {message}")]
    MethodNotAllowed {
        /// What the resource does not allow.
        message: String,
    },
    /// 406 NotAcceptable.
    #[error("406 NotAcceptable: {message}")]
    NotAcceptable {
        /// The media types that are served.
        message: String,
    },
    /// 409 AlreadyExists.
    #[error("409 AlreadyExists: {message}")]
    AlreadyExists {
        /// What already exists.
        message: String,
        /// The object that already exists.
        subject: Box<Subject>,
    },
    /// 409 Conflict: a stale resourceVersion, or fields of a server-side apply that other
    /// managers own (with causes).
    #[error("409 Conflict: {message}")]
    Conflict {
        /// What conflicts.
        message: String,
        /// The object the conflict is about.
        subject: Option<Box<Subject>>,
        /// For an apply: the conflicting fields.
        causes: Vec<Cause>,
    },
    /// 410 Expired (Gone): a resourceVersion too old to list or watch from.
    #[error("410 Expired: {message}")]
    Expired {
        /// What expired.
        message: String,
    },
    /// 413 RequestEntityTooLarge.
    #[error("413 RequestEntityTooLarge: {message}")]
    RequestEntityTooLarge {
        /// What is too large.
        message: String,
    },
    /// 414 RequestURITooLong, answered by the listener in place of hyper's bare answer.
    #[error("414 RequestURITooLong: {message}")]
    RequestUriTooLong {
        /// What is too long.
        message: String,
    },
    /// 415 UnsupportedMediaType.
    #[error("415 UnsupportedMediaType: {message}")]
    UnsupportedMediaType {
        /// The media type that is not served.
        message: String,
    },
    /// 422 Invalid, with its causes.
    #[error("422 Invalid: {message}")]
    Invalid {
        /// The object and a summary of its causes.
        message: String,
        /// The invalid object.
        subject: Box<Subject>,
        /// What is invalid, field by field.
        causes: Vec<Cause>,
    },
    /// A request an admission policy denied: 401, 403, 413 or 422 as its validation's reason
    /// says.
    #[error("{} {}: {message}", reason.code(), reason.name())]
    PolicyDenied {
        /// `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '…' …`.
        message: String,
        /// The object the request was about.
        subject: Box<Subject>,
        /// The reason the validation names.
        reason: DeniedReason,
        /// The message again, as a cause without a field (what kubectl prints of a 422).
        causes: Vec<Cause>,
    },
    /// A request an admission webhook refused, with the code and reason it answered (403
    /// Forbidden when it gave none), as kube-apiserver's `ToStatusErr` reports it.
    #[error("{code} {reason}: {message}")]
    WebhookDenied {
        /// `<resource> "<name>" is forbidden: admission webhook "…" denied the request: …`.
        message: String,
        /// The HTTP status code.
        code: u16,
        /// The `reason` of the Status.
        reason: String,
        /// The object the request was about (none for a 500, which carries a cause instead).
        subject: Option<Box<Subject>>,
        /// For a 500: the message again, as a cause.
        causes: Vec<Cause>,
    },
    /// 429 TooManyRequests.
    #[error("429 TooManyRequests: {message}")]
    TooManyRequests {
        /// Why the request is to be tried again later.
        message: String,
        /// The `retryAfterSeconds` detail and `Retry-After` header; none when 0.
        retry_after: u32,
        /// What holds the request back (an eviction's `DisruptionBudget`).
        causes: Vec<Cause>,
    },
    /// 431 RequestHeaderFieldsTooLarge, answered by the listener in place of hyper's bare answer.
    #[error("431 RequestHeaderFieldsTooLarge: {message}")]
    RequestHeaderFieldsTooLarge {
        /// What is too large.
        message: String,
    },
    /// 500 InternalError.
    #[error("500 InternalError: {message}")]
    InternalError {
        /// What failed.
        message: String,
    },
    /// 503 ServiceUnavailable.
    #[error("503 ServiceUnavailable: {message}")]
    ServiceUnavailable {
        /// What is unavailable.
        message: String,
        /// The `retryAfterSeconds` detail, when a retry soon is expected to succeed.
        retry_after: Option<u32>,
    },
    /// 504 Timeout.
    #[error("504 Timeout: {message}")]
    Timeout {
        /// What timed out.
        message: String,
        /// For a resourceVersion the store has not reached: `ResourceVersionTooLarge`.
        causes: Vec<Cause>,
        /// The `retryAfterSeconds` detail, when a retry soon is expected to succeed.
        retry_after: Option<u32>,
    },
}

/// The reasons an admission policy's validation may refuse a request with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeniedReason {
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 422, the default.
    Invalid,
    /// 413.
    RequestEntityTooLarge,
}

impl DeniedReason {
    /// The reason a validation names (`None` for a name that is not one of the four).
    pub fn parse(name: &str) -> Option<DeniedReason> {
        Some(match name {
            "Unauthorized" => DeniedReason::Unauthorized,
            "Forbidden" => DeniedReason::Forbidden,
            "Invalid" => DeniedReason::Invalid,
            "RequestEntityTooLarge" => DeniedReason::RequestEntityTooLarge,
            _ => return None,
        })
    }

    /// The `reason` of the Status.
    pub fn name(self) -> &'static str {
        match self {
            DeniedReason::Unauthorized => "Unauthorized",
            DeniedReason::Forbidden => "Forbidden",
            DeniedReason::Invalid => "Invalid",
            DeniedReason::RequestEntityTooLarge => "RequestEntityTooLarge",
        }
    }

    /// The HTTP status code (kube-apiserver's `reasonToCode`).
    pub fn code(self) -> u16 {
        match self {
            DeniedReason::Unauthorized => 401,
            DeniedReason::Forbidden => 403,
            DeniedReason::Invalid => 422,
            DeniedReason::RequestEntityTooLarge => 413,
        }
    }
}

/// kube-apiserver's message for a request refused by flow control.
const TOO_MANY_REQUESTS: &str = "Too many requests, please try again later.";

fn about(group: &str, kind: &str, name: &str) -> Box<Subject> {
    Box::new(Subject { group: group.into(), kind: kind.into(), name: name.into() })
}

impl ApiError {
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { message: message.into() }
    }

    /// A refusal by an admission policy: `<resource> "<name>" is forbidden: <why>`, with the code
    /// and reason of `reason`.
    pub fn policy_denied(
        group: &str,
        resource: &str,
        name: &str,
        why: &str,
        reason: DeniedReason,
    ) -> ApiError {
        let message = format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource));
        ApiError::PolicyDenied {
            causes: vec![Cause::new("", "", message.clone())],
            message,
            subject: about(group, resource, name),
            reason,
        }
    }

    /// 404 NotFound for an object: `pods "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::NotFound {
            message: format!("{} \"{name}\" not found", qualified(group, resource)),
            subject: Some(about(group, resource, name)),
        }
    }

    /// 401 Unauthorized: no valid credentials (the reason is not told to the client).
    pub fn unauthorized() -> ApiError {
        ApiError::Unauthorized
    }

    /// 404 NotFound for a path that serves nothing.
    pub fn no_route() -> ApiError {
        ApiError::NotFound {
            message: "the server could not find the requested resource".into(),
            subject: None,
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> ApiError {
        ApiError::MethodNotAllowed { message: message.into() }
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::AlreadyExists {
            message: format!("{} \"{name}\" already exists", qualified(group, resource)),
            subject: about(group, resource, name),
        }
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            subject: Some(about(group, resource, name)),
            causes: Vec::new(),
        }
    }

    /// 409 Conflict for a server-side apply whose fields other managers own.
    pub fn apply_conflict(message: String, causes: Vec<Cause>) -> ApiError {
        ApiError::Conflict { message, subject: None, causes }
    }

    /// 410 Expired (Gone).
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::Expired { message: message.into() }
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::RequestEntityTooLarge { message: message.into() }
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError::UnsupportedMediaType {
            message: format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"),
        }
    }

    /// 415 UnsupportedMediaType for a request this server cannot carry out yet.
    pub fn unsupported(message: impl Into<String>) -> ApiError {
        ApiError::UnsupportedMediaType { message: message.into() }
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(accept: &str) -> ApiError {
        ApiError::NotAcceptable {
            message: format!("only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io (asked for {accept:?})"),
        }
    }

    /// 422 Invalid with causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> ApiError {
        let summary = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        ApiError::Invalid {
            message: format!("{} \"{name}\" is invalid: {summary}", qualified(group, kind)),
            subject: about(group, kind, name),
            causes,
        }
    }

    /// 403 Forbidden.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        ApiError::Forbidden {
            message: format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource)),
            subject: Some(about(group, resource, name)),
        }
    }

    /// A refusal by admission webhook `hook` with the `result` Status it answered, in
    /// kube-apiserver's words (`ToStatusErr`): its code (403 without one), its reason (by the
    /// code without one), and its message or reason after `admission webhook "…" denied the
    /// request`.
    pub fn webhook_denied(
        group: &str,
        resource: &str,
        name: &str,
        hook: &str,
        result: Option<&Value>,
    ) -> ApiError {
        let text = |field: &str| {
            result.and_then(|r| r.get(field)).and_then(Value::as_str).filter(|s| !s.is_empty())
        };
        let code = result
            .and_then(|r| r.get("code"))
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(403);
        let denied = format!("admission webhook \"{hook}\" denied the request");
        let why = match text("message").or(text("reason")) {
            Some(why) => format!("{denied}: {why}"),
            None => format!("{denied} without explanation"),
        };
        let name = if name.is_empty() { "Unknown" } else { name };
        let internal = code == 500;
        let message = if internal {
            format!("Internal error occurred: {why}")
        } else {
            format!("{} \"{name}\" is forbidden: {why}", qualified(group, resource))
        };
        let reason = match text("reason") {
            Some(reason) => reason.to_owned(),
            None if internal => "InternalError".to_owned(),
            None => "Forbidden".to_owned(),
        };
        ApiError::WebhookDenied {
            causes: if internal { vec![Cause::new("", "", why)] } else { Vec::new() },
            message,
            code,
            reason,
            subject: (!internal).then(|| about(group, resource, name)),
        }
    }

    /// 429 TooManyRequests, as kube-apiserver's flow control answers.
    pub fn too_many_requests(retry_after_seconds: u32) -> ApiError {
        ApiError::too_many_requests_because(TOO_MANY_REQUESTS, retry_after_seconds, Vec::new())
    }

    /// 429 TooManyRequests with a message and causes of its own (`NewTooManyRequests`).
    pub fn too_many_requests_because(
        message: impl Into<String>,
        retry_after_seconds: u32,
        causes: Vec<Cause>,
    ) -> ApiError {
        ApiError::TooManyRequests {
            message: message.into(),
            retry_after: retry_after_seconds,
            causes,
        }
    }

    /// 414 RequestURITooLong.
    pub fn uri_too_long(message: impl Into<String>) -> ApiError {
        ApiError::RequestUriTooLong { message: message.into() }
    }

    /// 431 RequestHeaderFieldsTooLarge.
    pub fn headers_too_large(message: impl Into<String>) -> ApiError {
        ApiError::RequestHeaderFieldsTooLarge { message: message.into() }
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::InternalError { message: message.into() }
    }

    /// 503 ServiceUnavailable.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::ServiceUnavailable { message: message.into(), retry_after: None }
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::Timeout { message: message.into(), causes: Vec::new(), retry_after: None }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::BadRequest { .. } => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden { .. } => 403,
            ApiError::NotFound { .. } => 404,
            ApiError::MethodNotAllowed { .. } => 405,
            ApiError::NotAcceptable { .. } => 406,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::Expired { .. } => 410,
            ApiError::RequestEntityTooLarge { .. } => 413,
            ApiError::RequestUriTooLong { .. } => 414,
            ApiError::UnsupportedMediaType { .. } => 415,
            ApiError::Invalid { .. } => 422,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::RequestHeaderFieldsTooLarge { .. } => 431,
            ApiError::InternalError { .. } => 500,
            ApiError::ServiceUnavailable { .. } => 503,
            ApiError::Timeout { .. } => 504,
            ApiError::PolicyDenied { reason, .. } => reason.code(),
            ApiError::WebhookDenied { code, .. } => *code,
        }
    }

    /// The `reason` field (`NotFound`, `AlreadyExists`, …).
    pub fn reason(&self) -> &str {
        match self {
            ApiError::BadRequest { .. } => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::NotFound { .. } => "NotFound",
            ApiError::MethodNotAllowed { .. } => "MethodNotAllowed",
            ApiError::NotAcceptable { .. } => "NotAcceptable",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Expired { .. } => "Expired",
            ApiError::RequestEntityTooLarge { .. } => "RequestEntityTooLarge",
            ApiError::RequestUriTooLong { .. } => "RequestURITooLong",
            ApiError::UnsupportedMediaType { .. } => "UnsupportedMediaType",
            ApiError::Invalid { .. } => "Invalid",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::RequestHeaderFieldsTooLarge { .. } => "RequestHeaderFieldsTooLarge",
            ApiError::InternalError { .. } => "InternalError",
            ApiError::ServiceUnavailable { .. } => "ServiceUnavailable",
            ApiError::Timeout { .. } => "Timeout",
            ApiError::PolicyDenied { reason, .. } => reason.name(),
            ApiError::WebhookDenied { reason, .. } => reason,
        }
    }

    /// A human-readable message, in kube-apiserver's words where it has them.
    pub fn message(&self) -> &str {
        match self {
            ApiError::Unauthorized => "Unauthorized",
            ApiError::BadRequest { message }
            | ApiError::Forbidden { message, .. }
            | ApiError::NotFound { message, .. }
            | ApiError::MethodNotAllowed { message }
            | ApiError::NotAcceptable { message }
            | ApiError::AlreadyExists { message, .. }
            | ApiError::Conflict { message, .. }
            | ApiError::Expired { message }
            | ApiError::RequestEntityTooLarge { message }
            | ApiError::RequestUriTooLong { message }
            | ApiError::UnsupportedMediaType { message }
            | ApiError::Invalid { message, .. }
            | ApiError::TooManyRequests { message, .. }
            | ApiError::RequestHeaderFieldsTooLarge { message }
            | ApiError::InternalError { message }
            | ApiError::ServiceUnavailable { message, .. }
            | ApiError::Timeout { message, .. }
            | ApiError::PolicyDenied { message, .. }
            | ApiError::WebhookDenied { message, .. } => message,
        }
    }

    /// What the error is about, where it names an object or resource.
    pub fn subject(&self) -> Option<&Subject> {
        match self {
            ApiError::Forbidden { subject, .. }
            | ApiError::NotFound { subject, .. }
            | ApiError::Conflict { subject, .. }
            | ApiError::WebhookDenied { subject, .. } => subject.as_deref(),
            ApiError::AlreadyExists { subject, .. }
            | ApiError::Invalid { subject, .. }
            | ApiError::PolicyDenied { subject, .. } => Some(subject),
            _ => None,
        }
    }

    /// The causes of an Invalid error, of an apply's Conflict, of a Timeout waiting for a
    /// resourceVersion or of a refused eviction; empty otherwise.
    pub fn causes(&self) -> &[Cause] {
        match self {
            ApiError::Conflict { causes, .. }
            | ApiError::Invalid { causes, .. }
            | ApiError::TooManyRequests { causes, .. }
            | ApiError::Timeout { causes, .. }
            | ApiError::PolicyDenied { causes, .. }
            | ApiError::WebhookDenied { causes, .. } => causes,
            _ => &[],
        }
    }

    /// The causes, taken out of the error.
    pub fn into_causes(self) -> Vec<Cause> {
        match self {
            ApiError::Conflict { causes, .. }
            | ApiError::Invalid { causes, .. }
            | ApiError::TooManyRequests { causes, .. }
            | ApiError::Timeout { causes, .. }
            | ApiError::PolicyDenied { causes, .. }
            | ApiError::WebhookDenied { causes, .. } => causes,
            _ => Vec::new(),
        }
    }

    /// The `retryAfterSeconds` detail, for a 429, a passing 503 and a Timeout worth retrying
    /// (none when 0, as Go's `omitempty` leaves it out).
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            ApiError::TooManyRequests { retry_after, .. } => Some(*retry_after).filter(|s| *s > 0),
            ApiError::ServiceUnavailable { retry_after, .. }
            | ApiError::Timeout { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The `Status` object: the one place an error takes its wire form.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let mut details = serde_json::Map::new();
        if let Some(subject) = self.subject() {
            if !subject.name.is_empty() {
                details.insert("name".into(), subject.name.clone().into());
            }
            if !subject.group.is_empty() {
                details.insert("group".into(), subject.group.clone().into());
            }
            details.insert("kind".into(), subject.kind.clone().into());
        }
        let causes = self.causes();
        if !causes.is_empty() {
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"message": c.message});
                    if !c.reason.is_empty() {
                        cause["reason"] = c.reason.into();
                    }
                    if !c.field.is_empty() {
                        cause["field"] = c.field.clone().into();
                    }
                    cause
                })
                .collect();
            details.insert("causes".into(), causes.into());
        }
        if let Some(seconds) = self.retry_after() {
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
                ApiError::ServiceUnavailable {
                    message: format!("storage error: {e}"),
                    retry_after: Some(1),
                }
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
    /// The `Status` as JSON, with `Retry-After` when it says when to try again (as
    /// kube-apiserver's `ErrorNegotiated`).
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = encode_status(&self.to_status());
        let mut response = (code, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The API's result type.
pub type ApiResult<T> = Result<T, ApiError>;

/// A `Status` as kube-apiserver writes it ([`crate::go_json`]): its fields in the order of Go's
/// `metav1.Status` (`kind`, `apiVersion`, `metadata`, `status`, `message`, `reason`, `details`,
/// `code`; details and causes likewise), compact, with the newline Go's JSON encoder ends a value
/// with.
pub fn encode_status(status: &Value) -> Vec<u8> {
    let mut out = crate::go_json::to_vec(status);
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_is_written_byte_for_byte_as_kube_apiserver_writes_it() {
        let e = ApiError::invalid(
            "apps",
            "Deployment",
            "web",
            vec![Cause::new("FieldValueRequired", "spec.selector", "Required value")],
        );
        let body = String::from_utf8(encode_status(&e.to_status())).unwrap();
        assert_eq!(
            body,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Deployment.apps \\\"web\\\" is invalid: spec.selector: Required value\",\
             \"reason\":\"Invalid\",\"details\":{\"name\":\"web\",\"group\":\"apps\",\
             \"kind\":\"Deployment\",\"causes\":[{\"reason\":\"FieldValueRequired\",\
             \"message\":\"Required value\",\"field\":\"spec.selector\"}]},\"code\":422}\n"
        );
        let gone = String::from_utf8(encode_status(&ApiError::unauthorized().to_status())).unwrap();
        assert_eq!(
            gone,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}\n"
        );
    }

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
