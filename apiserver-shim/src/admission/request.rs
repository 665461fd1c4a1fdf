//! What admission is shown of one request, whichever check runs: who asks
//! ([`Requester`]), the operation, the objects and the namespace ([`Attributes`]), and the
//! `request` as policies read it and webhooks are sent it (`request_value`).

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::api::{Api, Target};
use crate::auth::UserInfo;
use crate::resource::{built_in, ResourceType};
use crate::status::{ApiError, ApiResult};

/// Who makes a write, and where the warnings of its admission go: what a policy sees of the
/// request beyond the object.
#[derive(Clone, Debug, Default)]
pub struct Requester {
    /// The authenticated user; `None` for the server's own writes and clusters without
    /// authentication.
    pub user: Option<UserInfo>,
    warnings: Arc<Mutex<Vec<String>>>,
}

impl Requester {
    /// A request by `user`.
    pub fn new(user: Option<UserInfo>) -> Requester {
        Requester { user, warnings: Arc::default() }
    }

    /// The warnings admission gave the request so far, for its `Warning` headers.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().clone()
    }

    pub(crate) fn warn(&self, warning: String) {
        let mut warnings = self.warnings.lock();
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
}

/// The operation a request makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (a patch, an apply, a write through a subresource).
    Update,
    /// A delete.
    Delete,
}

impl Operation {
    /// The name rules give it.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    pub(crate) fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// What a policy is shown of one request.
#[derive(Debug)]
pub struct Attributes<'a> {
    /// The type of the request.
    pub rt: &'a ResourceType,
    /// The subresource written through (`status`), if any.
    pub subresource: Option<&'a str>,
    /// The operation.
    pub operation: Operation,
    /// The object's name.
    pub name: &'a str,
    /// The object's namespace; for a namespace, its own name; empty for cluster-scoped objects.
    pub namespace: &'a str,
    /// The object to be stored (none for a delete).
    pub object: Option<&'a Value>,
    /// The object stored before (none for a create).
    pub old: Option<&'a Value>,
    /// Whether the request is a dry run.
    pub dry_run: bool,
    /// Who asks.
    pub requester: &'a Requester,
    /// The request's namespace object, read by [`admit`].
    pub(crate) namespace_object: Option<&'a Value>,
}

impl<'a> Attributes<'a> {
    /// A request's attributes.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rt: &'a ResourceType,
        subresource: Option<&'a str>,
        operation: Operation,
        name: &'a str,
        namespace: &'a str,
        object: Option<&'a Value>,
        old: Option<&'a Value>,
        dry_run: bool,
        requester: &'a Requester,
    ) -> Attributes<'a> {
        Attributes {
            rt,
            subresource,
            operation,
            name,
            namespace,
            object,
            old,
            dry_run,
            requester,
            namespace_object: None,
        }
    }
}

/// The namespace a request is in, as stored (a namespace's own object for a namespace).
pub(crate) fn namespace_object(api: &Api, a: &Attributes<'_>) -> ApiResult<Option<Value>> {
    if a.rt.strategy.is_namespace() {
        return Ok(a.object.or(a.old).cloned());
    }
    if a.namespace.is_empty() {
        return Ok(None);
    }
    let rt = built_in("", "namespaces").expect("namespaces are served");
    match api.get(&Target { rt, namespace: None }, a.namespace) {
        Ok(ns) => Ok(Some(ns)),
        Err(ApiError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `request` as policies read it (an `AdmissionRequest` without its uid and objects).
pub(crate) fn request_value(a: &Attributes<'_>, matched: &ResourceType) -> Value {
    let user = a.requester.user.as_ref();
    let kind =
        |rt: &ResourceType| json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = |rt: &ResourceType| json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": a.operation.options_kind()});
    if a.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    json!({
        "kind": kind(matched),
        "resource": resource(matched),
        "subResource": a.subresource.unwrap_or(""),
        "requestKind": kind(a.rt),
        "requestResource": resource(a.rt),
        "requestSubResource": a.subresource.unwrap_or(""),
        "name": a.name,
        "namespace": if a.rt.strategy.is_namespace() { "" } else { a.namespace },
        "operation": a.operation.name(),
        "userInfo": {
            "username": user.map_or("", |u| u.name.as_str()),
            "uid": user.map_or("", |u| u.uid.as_str()),
            "groups": user.map(|u| u.groups.clone()).unwrap_or_default(),
            "extra": user.map(|u| json!(u.extra)).unwrap_or(json!({})),
        },
        "dryRun": a.dry_run,
        "options": options,
    })
}

/// An object as the matched type's version shows it.
pub(crate) fn in_version(
    a: &Attributes<'_>,
    matched: &ResourceType,
    object: Option<&Value>,
) -> Value {
    let Some(object) = object else { return Value::Null };
    if std::ptr::eq(matched, a.rt) || matched.version == a.rt.version {
        return object.clone();
    }
    let mut object = object.clone();
    a.rt.strategy.convert_to_storage(&mut object);
    matched.strategy.convert_from_storage(&mut object);
    object
}
