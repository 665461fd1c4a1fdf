//! Reading a request: query parameters, bodies by their media type, the options of each verb
//! (`dryRun`, field manager and validation, list and delete options), and the client's `Accept`.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::Bytes;
use serde_json::Value;

use crate::api::{parse_resource_version, DeleteParams, ListParams, Write};
use crate::fields::FieldValidation;
use crate::http::table::{self, IncludeObject};
use crate::managed::{self, Owner};
use crate::patch;
use crate::resource::{ResourceType, Subresource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, Cause};
use crate::strict_json;

use crate::listener::MAX_BODY_BYTES;

/// Query parameters, in order.
#[derive(Debug, Default)]
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    /// The parameters of a query string, decoded.
    pub(super) fn parse(raw: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    /// The last value of `key`.
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    /// Every parameter, in order (a key may come more than once).
    pub(super) fn pairs(&self) -> &[(String, String)] {
        &self.0
    }
    /// Whether `key` is `true` or `1`.
    pub(super) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

pub(super) fn accept(headers: &HeaderMap) -> &str {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("")
}

/// Whether the client takes the object itself as JSON (not a Table, not metadata only).
pub(super) fn wants_plain_json(headers: &HeaderMap) -> bool {
    let accept = accept(headers);
    !table::wants_table(accept) && !wants_partial_metadata(accept)
}

pub(super) fn wants_partial_metadata(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=PartialObjectMetadata") && first.contains("g=meta.k8s.io")
    })
}

pub(super) fn include_object(query: &Query) -> IncludeObject {
    match query.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

pub(super) async fn read_body(body: Body) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        if let Some(timeout) = crate::listener::BodyTimeout::find(&e) {
            return ApiError::timeout(timeout.to_string());
        }
        ApiError::too_large(format!(
            "the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
        ))
    })
}

/// Decode a request body by its Content-Type.
pub(super) fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    decode_body_checked(headers, body).map(|(value, _)| value)
}

/// Decode a request body by its Content-Type, with the paths of any duplicate JSON fields (YAML
/// refuses duplicate keys itself; protobuf cannot carry them).
pub(super) fn decode_body_checked(
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<(Value, Vec<String>)> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "" => strict_json::parse(body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            crate::decode::yaml(body, "the request body").map(|v| (v, Vec::new()))
        }
        crate::protobuf::MEDIA_TYPE => {
            crate::protobuf::decode_request(body).map(|v| (v, Vec::new()))
        }
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

pub(super) fn dry_run(query: &Query) -> ApiResult<bool> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid dryRun value {other:?}: only \"All\" is supported"
        ))),
    }
}

/// The field manager of a write: `fieldManager`, else from the User-Agent; `options` names the
/// request's options kind for errors.
pub(super) fn field_manager(
    query: &Query,
    headers: &HeaderMap,
    options: &str,
) -> ApiResult<String> {
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    let manager = managed::manager_of(query.get("fieldManager"), agent);
    managed::validate_manager(options, &manager)?;
    Ok(manager)
}

/// How a create or update is made: dry run or not, and by which field manager.
pub(super) fn write_of(
    query: &Query,
    headers: &HeaderMap,
    options: &str,
    sub: Option<Subresource>,
) -> ApiResult<Write> {
    Ok(Write {
        dry_run: dry_run(query)?,
        owner: Owner::Update {
            manager: field_manager(query, headers, options)?,
            subresource: sub.map(Subresource::name),
        },
        requester: Default::default(),
    })
}

/// `PatchOptions`: server-side apply needs a field manager and alone may force.
pub(super) fn patch_options(
    query: &Query,
    headers: &HeaderMap,
    kind: patch::PatchKind,
) -> ApiResult<patch::PatchOptions> {
    let apply = kind == patch::PatchKind::Apply;
    let invalid = |field: &str, reason: &'static str, message: &str| {
        ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::new(reason, field, message)],
        )
    };
    let force = match query.get("force") {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid force value {other:?}: must be true or false"
            )))
        }
    };
    if force && !apply {
        return Err(invalid(
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    if apply && query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(invalid(
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    Ok(patch::PatchOptions {
        dry_run: dry_run(query)?,
        validation: FieldValidation::parse(query.get("fieldValidation"))?,
        manager: field_manager(query, headers, "PatchOptions")?,
        force,
        requester: Default::default(),
    })
}

pub(super) fn list_params(query: &Query) -> ApiResult<ListParams> {
    let limit = match query.get("limit") {
        None | Some("") | Some("0") => None,
        Some(l) => Some(l.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!("invalid limit {l:?}: must be a non-negative integer"))
        })?),
    };
    Ok(ListParams {
        labels: query.get("labelSelector").map(LabelSelector::parse).transpose()?,
        fields: query.get("fieldSelector").map(FieldSelector::parse).transpose()?,
        limit,
        continue_token: query.get("continue").filter(|c| !c.is_empty()).map(str::to_owned),
        // Only a list reads `resourceVersion` this way (see `list_version`); a watch reads it
        // itself, and its initial list shows the most recent state.
        version: crate::api::ListVersion::MostRecent,
    })
}

/// Which state a list shows: `resourceVersion` and `resourceVersionMatch`, checked as
/// kube-apiserver checks `ListOptions` (422 Invalid) and read as its storage reads them.
pub(super) fn list_version(
    query: &Query,
    params: &ListParams,
) -> ApiResult<crate::api::ListVersion> {
    use crate::api::ListVersion;
    use crate::status::Cause;
    let rv = query.get("resourceVersion").unwrap_or_default();
    let matching = query.get("resourceVersionMatch").unwrap_or_default();
    let continuing = params.continue_token.is_some();
    if !matching.is_empty() {
        let field = "resourceVersionMatch";
        let forbidden =
            |why: &str| Cause::new("FieldValueForbidden", field, format!("Forbidden: {why}"));
        let mut causes = Vec::new();
        if rv.is_empty() {
            causes.push(forbidden(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if continuing {
            causes.push(forbidden("resourceVersionMatch is forbidden when continue is provided"));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                field,
                format!("Unsupported value: \"{matching}\": supported values: \"Exact\", \"NotOlderThan\", \"\""),
            ));
        }
        if matching == "Exact" && rv == "0" {
            causes.push(forbidden(
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
        }
    }
    if rv.is_empty() {
        return Ok(ListVersion::MostRecent);
    }
    if continuing {
        // The token carries its list's revision; "0" is tolerated, as kube-apiserver does.
        if rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(ListVersion::MostRecent);
    }
    let revision = parse_resource_version(rv)?;
    Ok(match matching {
        "Exact" => ListVersion::Exact(revision),
        _ if revision == 0 => ListVersion::Any,
        "NotOlderThan" => ListVersion::NotOlderThan(revision),
        // Unset: kube-apiserver's legacy reading, exact for a paginated list.
        _ if params.limit.is_some() => ListVersion::Exact(revision),
        _ => ListVersion::NotOlderThan(revision),
    })
}

pub(super) fn delete_params(headers: &HeaderMap, raw: &[u8]) -> ApiResult<DeleteParams> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(DeleteParams::default());
    }
    Ok(DeleteParams::from_options(&decode_body(headers, raw)?))
}

/// Custom resources are JSON (or YAML): kube-apiserver has no protobuf for them.
pub(super) fn refuse_protobuf(rt: &ResourceType, headers: &HeaderMap) -> ApiResult<()> {
    let content_type =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if rt.is_custom() && content_type.starts_with(crate::protobuf::MEDIA_TYPE) {
        return Err(ApiError::unsupported(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml (got {content_type:?})"
        )));
    }
    Ok(())
}
