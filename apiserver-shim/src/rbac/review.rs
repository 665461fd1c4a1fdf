//! The `authorization.k8s.io` reviews as pure functions (`pkg/registry/authorization`): the server
//! decodes the request, calls one of these, and answers the review object with the status filled
//! in.
//!
//! With RBAC alone a review is never `denied` (RBAC has no deny rules): not allowed is "no
//! opinion", reported as `allowed: false`.

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, NonResourceRule, ResourceAttributes, ResourceRule,
    SelfSubjectAccessReviewSpec, SubjectAccessReviewSpec, SubjectAccessReviewStatus,
    SubjectRulesReviewStatus,
};

use crate::status::{ApiError, Cause};

use super::{aggregate_errors, go_quote, Attributes, Policy, UserInfo};

const GROUP: &str = "authorization.k8s.io";

fn text(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

/// The attributes a `resourceAttributes` asks about, for `user`.
pub fn resource_attributes(user: UserInfo, attributes: &ResourceAttributes) -> Attributes {
    Attributes {
        user,
        verb: text(&attributes.verb),
        resource_request: true,
        namespace: text(&attributes.namespace),
        api_group: text(&attributes.group),
        api_version: text(&attributes.version),
        resource: text(&attributes.resource),
        subresource: text(&attributes.subresource),
        name: text(&attributes.name),
        path: String::new(),
    }
}

/// The attributes a `nonResourceAttributes` asks about, for `user`.
pub fn non_resource_attributes(user: UserInfo, attributes: &NonResourceAttributes) -> Attributes {
    Attributes::non_resource(user, text(&attributes.verb), text(&attributes.path))
}

/// `Invalid value: authorization.NonResourceAttributes{Path:"/x", Verb:"get"}`, as Go's `%#v`.
fn describe_non_resource(a: &NonResourceAttributes) -> String {
    format!(
        "authorization.NonResourceAttributes{{Path:{}, Verb:{}}}",
        go_quote(a.path.as_deref().unwrap_or_default()),
        go_quote(a.verb.as_deref().unwrap_or_default())
    )
}

/// The checks every access review's spec gets: exactly one of the attribute kinds.
fn validate_attributes(
    resource: Option<&ResourceAttributes>,
    non_resource: Option<&NonResourceAttributes>,
) -> Vec<Cause> {
    match (resource, non_resource) {
        (Some(_), Some(n)) => vec![Cause::new(
            "FieldValueInvalid",
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                describe_non_resource(n)
            ),
        )],
        (None, None) => vec![Cause::new(
            "FieldValueInvalid",
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )],
        _ => Vec::new(),
    }
}

fn invalid(kind: &str, causes: Vec<Cause>) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, kind, "", causes))
    }
}

fn validate_spec(spec: &SubjectAccessReviewSpec, kind: &str) -> Result<(), ApiError> {
    let mut causes = validate_attributes(
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    if spec.user.as_deref().unwrap_or_default().is_empty()
        && spec.groups.as_deref().unwrap_or_default().is_empty()
    {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.user",
            format!(
                "Invalid value: {}: at least one of user or group must be specified",
                go_quote(spec.user.as_deref().unwrap_or_default())
            ),
        ));
    }
    invalid(kind, causes)
}

fn user_of(spec: &SubjectAccessReviewSpec) -> UserInfo {
    UserInfo {
        name: text(&spec.user),
        uid: text(&spec.uid),
        groups: spec.groups.clone().unwrap_or_default(),
        extra: spec.extra.clone().unwrap_or_default(),
    }
}

fn decide(policy: &Policy, attributes: &Attributes) -> SubjectAccessReviewStatus {
    let decision = policy.authorize(attributes);
    SubjectAccessReviewStatus {
        allowed: decision.allowed,
        denied: None,
        evaluation_error: None,
        reason: Some(decision.reason).filter(|r| !r.is_empty()),
    }
}

/// Attributes from a validated spec: resource ones if given, else non-resource ones.
fn spec_attributes(
    user: UserInfo,
    resource: Option<&ResourceAttributes>,
    non_resource: Option<&NonResourceAttributes>,
) -> Attributes {
    match (resource, non_resource) {
        (Some(r), _) => resource_attributes(user, r),
        (None, Some(n)) => non_resource_attributes(user, n),
        (None, None) => Attributes { user, ..Attributes::default() },
    }
}

/// A SubjectAccessReview: may the user (and groups) of the spec do what it asks? 422 Invalid
/// for a spec without exactly one of `resourceAttributes` / `nonResourceAttributes`, or with
/// neither user nor groups.
pub fn subject_access_review(
    policy: &Policy,
    spec: &SubjectAccessReviewSpec,
) -> Result<SubjectAccessReviewStatus, ApiError> {
    validate_spec(spec, "SubjectAccessReview")?;
    let attributes = spec_attributes(
        user_of(spec),
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    Ok(decide(policy, &attributes))
}

/// A LocalSubjectAccessReview in `namespace` (the request path's, which must also be the
/// object's): a [`subject_access_review`] whose `resourceAttributes.namespace` must be
/// `namespace`, and that may not ask about non-resource URLs.
pub fn local_subject_access_review(
    policy: &Policy,
    namespace: &str,
    spec: &SubjectAccessReviewSpec,
) -> Result<SubjectAccessReviewStatus, ApiError> {
    const KIND: &str = "LocalSubjectAccessReview";
    validate_spec(spec, KIND)?;
    let mut causes = Vec::new();
    if let Some(r) = &spec.resource_attributes {
        let asked = r.namespace.as_deref().unwrap_or_default();
        if asked != namespace {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.resourceAttributes.namespace",
                format!("Invalid value: {}: must match metadata.namespace", go_quote(asked)),
            ));
        }
    }
    if let Some(n) = &spec.non_resource_attributes {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: disallowed on this kind of request",
                describe_non_resource(n)
            ),
        ));
    }
    invalid(KIND, causes)?;
    subject_access_review(policy, spec)
}

/// A SelfSubjectAccessReview: may `user` (the requester) do what the spec asks? 422 Invalid
/// without exactly one of `resourceAttributes` / `nonResourceAttributes`.
pub fn self_subject_access_review(
    policy: &Policy,
    user: &UserInfo,
    spec: &SelfSubjectAccessReviewSpec,
) -> Result<SubjectAccessReviewStatus, ApiError> {
    let causes = validate_attributes(
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    invalid("SelfSubjectAccessReview", causes)?;
    let attributes = spec_attributes(
        user.clone(),
        spec.resource_attributes.as_ref(),
        spec.non_resource_attributes.as_ref(),
    );
    Ok(decide(policy, &attributes))
}

fn non_empty(v: &Option<Vec<String>>) -> Option<Vec<String>> {
    v.clone().filter(|v| !v.is_empty())
}

/// A SelfSubjectRulesReview: every rule that applies to `user` in `namespace` (cluster-wide rules
/// first), split into resource and non-resource rules, as `kubectl auth can-i --list` reads them.
/// `incomplete` is false (RBAC knows all its rules); `evaluationError` names bindings whose role is
/// missing. 400 BadRequest `no namespace on request` for an empty namespace.
pub fn self_subject_rules_review(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
) -> Result<SubjectRulesReviewStatus, ApiError> {
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let (rules, errors) = policy.rules_for_with_errors(user, namespace);
    let mut status = SubjectRulesReviewStatus {
        evaluation_error: (!errors.is_empty()).then(|| aggregate_errors(&errors)),
        incomplete: false,
        non_resource_rules: Vec::new(),
        resource_rules: Vec::new(),
    };
    for rule in rules {
        if rule.resources.as_ref().is_some_and(|r| !r.is_empty()) {
            status.resource_rules.push(ResourceRule {
                api_groups: non_empty(&rule.api_groups),
                resource_names: non_empty(&rule.resource_names),
                resources: non_empty(&rule.resources),
                verbs: rule.verbs.clone(),
            });
        }
        if rule.non_resource_urls.as_ref().is_some_and(|u| !u.is_empty()) {
            status.non_resource_rules.push(NonResourceRule {
                non_resource_urls: non_empty(&rule.non_resource_urls),
                verbs: rule.verbs,
            });
        }
    }
    Ok(status)
}
