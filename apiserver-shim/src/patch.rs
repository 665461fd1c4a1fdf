//! PATCH: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

use serde_json::Value;

use serde_json::json;

use crate::api::{check_type, Api, Target, Write};
use crate::fields::{self, FieldValidation};
use crate::managed::{self, Owner};
use crate::object::{meta_str, metadata_mut};
use crate::resource::Subresource;
use crate::scale::{scale_of, update_scale};
use crate::status::{ApiError, ApiResult};
use crate::strategic;
use crate::strict_json;

/// The patch types Kubernetes defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// The patch type of a Content-Type; anything else is 415.
    pub fn from_content_type(content_type: &str) -> ApiResult<PatchKind> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" => Ok(PatchKind::Apply),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// The options of a PATCH request.
#[derive(Clone, Debug)]
pub struct PatchOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub validation: FieldValidation,
    /// The field manager (required for server-side apply).
    pub manager: String,
    /// `force`: server-side apply takes conflicting fields over.
    pub force: bool,
    /// Who patches, for admission policies, and where their warnings go.
    pub requester: crate::admission::policy::Requester,
}

/// What a PATCH did.
#[derive(Debug)]
pub struct Patched {
    /// The object (or scale) as stored.
    pub object: Value,
    /// Warnings for the client (unknown or duplicate fields).
    pub warnings: Vec<String>,
    /// Whether a server-side apply created the object.
    pub created: bool,
}

/// How many times a patch is re-applied to a fresh read when a concurrent write got in between
/// (the patch itself carried no resourceVersion precondition that failed).
const ATTEMPTS: usize = 5;

/// Apply a patch to an object (or its status or scale) and store the result.
pub fn patch(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    subresource: Option<Subresource>,
    kind: PatchKind,
    raw: &[u8],
    options: &PatchOptions,
) -> ApiResult<Patched> {
    if kind == PatchKind::Strategic
        && target.rt.is_custom()
        && subresource != Some(Subresource::Scale)
    {
        // Custom resources have no patch strategies: kube-apiserver takes no strategic merge
        // patch for them.
        return Err(ApiError::unsupported(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, \
             application/apply-patch+yaml",
        ));
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = match kind {
            PatchKind::Apply => server_side_apply(api, target, name, subresource, raw, options),
            _ => merge_patch(api, target, name, subresource, kind, raw, options),
        };
        match result {
            Err(e) if attempt < ATTEMPTS && is_write_race(&e) => continue,
            other => return other,
        }
    }
}

/// A 409 from the store's revision check (not an apply conflict between managers).
fn is_write_race(e: &ApiError) -> bool {
    matches!(e, ApiError::Conflict { causes, .. } if causes.is_empty())
}

fn write_of(options: &PatchOptions, subresource: Option<Subresource>) -> Write {
    Write {
        dry_run: options.dry_run,
        owner: Owner::Update {
            manager: options.manager.clone(),
            subresource: subresource.map(Subresource::name),
        },
        requester: options.requester.clone(),
    }
}

/// One attempt at a patch: read, patch, write.
fn merge_patch(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    subresource: Option<Subresource>,
    kind: PatchKind,
    raw: &[u8],
    options: &PatchOptions,
) -> ApiResult<Patched> {
    let (patch, duplicates) = strict_json::parse(raw)
        .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
    let current = api.get(target, name)?;
    let base = match subresource {
        Some(Subresource::Scale) => scale_of(target.rt, &current),
        _ => current.clone(),
    };
    let mut patched = base;
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            // `patched` is a copy, dropped when an operation fails, so the operations are applied
            // without json-patch's undo log: undoing panics on some sequences a client can send
            // (a `move` of a value to its parent, then an operation that fails).
            json_patch::patch_unsafe(&mut patched, &ops).map_err(|e| {
                ApiError::invalid(
                    target.rt.group,
                    target.rt.kind,
                    name,
                    vec![crate::status::Cause::new("FieldValueInvalid", "", e.to_string())],
                )
            })?;
        }
        PatchKind::Merge => json_patch::merge(&mut patched, &patch),
        PatchKind::Strategic if subresource == Some(Subresource::Scale) => {
            // A Scale has no lists: a strategic merge patch of it is a merge patch.
            json_patch::merge(&mut patched, &patch)
        }
        PatchKind::Strategic => patched = strategic::apply(target.rt, &patched, &patch)?,
        PatchKind::Apply => {
            return Err(ApiError::internal("server-side apply reached the merge-patch path"))
        }
    }
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patched object is not a JSON object"));
    }
    if let Some(json_type) = patched.get("metadata").and_then(non_object_type) {
        // kube-apiserver's decoding of the patched object refuses it the same way.
        let kind = if subresource == Some(Subresource::Scale) { "Scale" } else { target.rt.kind };
        return Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {json_type} into Go struct field {kind}.metadata of type v1.ObjectMeta"
        )));
    }
    let write = write_of(options, subresource);
    if subresource == Some(Subresource::Scale) {
        let object = update_scale(api, target, name, patched, &write)?;
        return Ok(Patched { object, warnings: Vec::new(), created: false });
    }
    // A patch that leaves resourceVersion as it was carries no precondition of its own beyond
    // the read above; the update checks it against the store.
    if patched.pointer("/metadata/resourceVersion").is_none() {
        patched["metadata"]["resourceVersion"] =
            current.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
    }
    let warnings = fields::prune(target.rt, &mut patched, options.validation, &duplicates)?;
    let object = api.update(target, name, patched, subresource, &write)?;
    Ok(Patched { object, warnings, created: false })
}

/// The Go JSON name of a value's type when it is neither an object nor null (which decode as
/// a struct).
fn non_object_type(value: &Value) -> Option<&'static str> {
    match value {
        Value::Object(_) | Value::Null => None,
        Value::String(_) => Some("string"),
        Value::Number(_) => Some("number"),
        Value::Bool(_) => Some("bool"),
        Value::Array(_) => Some("array"),
    }
}

/// Server-side apply: merge the configuration into the live object (creating it when there is
/// none) and record the manager's ownership.
fn server_side_apply(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    subresource: Option<Subresource>,
    raw: &[u8],
    options: &PatchOptions,
) -> ApiResult<Patched> {
    let rt = target.rt;
    if subresource == Some(Subresource::Scale) {
        return Err(ApiError::unsupported(
            "server-side apply to the scale subresource is not supported; patch or update /scale",
        ));
    }
    let mut config: Value = crate::decode::yaml(raw, "the apply configuration")?;
    if !config.is_object() {
        return Err(ApiError::bad_request("the apply configuration must be an object"));
    }
    if config.get("apiVersion").is_none() || config.get("kind").is_none() {
        return Err(ApiError::bad_request("an apply configuration must set apiVersion and kind"));
    }
    check_type(rt, &config)?;
    match meta_str(&config, "name") {
        Some(body_name) if body_name != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )))
        }
        _ => {}
    }
    if config.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApiError::bad_request(
            "metadata.managedFields must be nil in an apply configuration",
        ));
    }
    let precondition = meta_str(&config, "resourceVersion").filter(|rv| !rv.is_empty());
    let precondition = precondition.map(str::to_owned);
    let warnings = fields::prune(rt, &mut config, options.validation, &[])?;
    let how = managed::Apply {
        manager: &options.manager,
        subresource: subresource.map(Subresource::name),
        force: options.force,
    };
    let write = Write {
        dry_run: options.dry_run,
        owner: Owner::Applied,
        requester: options.requester.clone(),
    };
    match api.get(target, name) {
        Ok(live) => {
            let live_rv = meta_str(&live, "resourceVersion").unwrap_or_default().to_owned();
            if let Some(rv) = &precondition {
                if *rv != live_rv {
                    return Err(ApiError::conflict(
                        rt.group,
                        rt.plural,
                        name,
                        "the object has been modified; please apply your changes to the latest version and try again",
                    ));
                }
            }
            let mut merged = managed::apply(rt, &live, &config, &how)?;
            metadata_mut(&mut merged).insert("resourceVersion".into(), live_rv.into());
            let object = api.update(target, name, merged, subresource, &write)?;
            Ok(Patched { object, warnings, created: false })
        }
        Err(e @ ApiError::NotFound { .. }) if subresource.is_none() => {
            if precondition.is_some() {
                return Err(e);
            }
            let mut empty = json!({
                "apiVersion": rt.group_version(),
                "kind": rt.kind,
                "metadata": {"name": name},
            });
            if let Some(ns) = &target.namespace {
                empty["metadata"]["namespace"] = json!(ns);
            }
            let merged = managed::apply(rt, &empty, &config, &how)?;
            let object = match api.create(target, merged, &write) {
                // Created by someone else in the meantime: apply again, to what they made.
                Err(ApiError::AlreadyExists { .. }) => {
                    return Err(ApiError::conflict(
                        rt.group,
                        rt.plural,
                        name,
                        "created concurrently",
                    ))
                }
                other => other?,
            };
            Ok(Patched { object, warnings, created: true })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_map_to_patch_kinds() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json").unwrap(),
            PatchKind::Merge
        );
        assert_eq!(PatchKind::from_content_type("text/plain").unwrap_err().code(), 415);
    }
}
