//! The 403 kube-apiserver answers a request its authorizers do not allow
//! (`responsewriters.Forbidden`), and `apierrors.NewForbidden`.

use crate::status::{ApiError, Subject};

use super::{go_quote, Attributes};

/// `apierrors.NewForbidden(groupResource, name, err)`: `pods "x" is forbidden: why`, or `pods is
/// forbidden: why` without a name, or `forbidden: why` without a resource.
pub(crate) fn new_forbidden(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
    let qualified =
        if group.is_empty() { resource.to_owned() } else { format!("{resource}.{group}") };
    let (message, subject) = if resource.is_empty() {
        (format!("forbidden: {why}"), None)
    } else if name.is_empty() {
        (
            format!("{qualified} is forbidden: {why}"),
            Some(Box::new(Subject {
                group: group.to_owned(),
                kind: resource.to_owned(),
                name: String::new(),
            })),
        )
    } else {
        (
            format!("{qualified} {} is forbidden: {why}", go_quote(name)),
            Some(Box::new(Subject {
                group: group.to_owned(),
                kind: resource.to_owned(),
                name: name.to_owned(),
            })),
        )
    };
    ApiError::Forbidden { message, subject }
}

/// `User "alice" cannot list resource "pods" in API group "" in the namespace "default"`
/// (`forbiddenMessage`).
fn forbidden_message(a: &Attributes) -> String {
    let user = go_quote(&a.user.name);
    let verb = &a.verb;
    if !a.resource_request {
        return format!("User {user} cannot {verb} path {}", go_quote(&a.path));
    }
    let resource = go_quote(&a.combined_resource());
    let group = go_quote(&a.api_group);
    if a.namespace.is_empty() {
        format!("User {user} cannot {verb} resource {resource} in API group {group} at the cluster scope")
    } else {
        format!(
            "User {user} cannot {verb} resource {resource} in API group {group} in the namespace {}",
            go_quote(&a.namespace)
        )
    }
}

/// The 403 Forbidden for a request that was not allowed, in kube-apiserver's words:
/// `pods "x" is forbidden: User "alice" cannot get resource "pods" in API group "" in the
/// namespace "default"`, `forbidden: User "alice" cannot get path "/metrics"`. A non-empty
/// `reason` (the [`super::Decision`]'s) is appended after `: `. The details name the object, the
/// group and, as `kind`, the resource (without the subresource).
pub fn forbidden(attributes: &Attributes, reason: &str) -> ApiError {
    // Avoid emitting errors that look like valid HTML; quotes are fine.
    let message = forbidden_message(attributes)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let why = if reason.is_empty() { message } else { format!("{message}: {reason}") };
    if attributes.resource_request {
        new_forbidden(&attributes.api_group, &attributes.resource, &attributes.name, &why)
    } else {
        new_forbidden("", "", "", &why)
    }
}
