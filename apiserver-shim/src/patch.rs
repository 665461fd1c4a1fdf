//! PATCH: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

use serde_json::Value;

use crate::api::{Api, Target};
use crate::fields::{self, FieldValidation};
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
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchKind::Apply),
            _ => Err(ApiError::unsupported_media_type(content_type)),
        }
    }
}

/// Apply a patch to an object (or its status or scale) and store the result.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    subresource: Option<Subresource>,
    kind: PatchKind,
    raw: &[u8],
    dry_run: bool,
    validation: FieldValidation,
) -> ApiResult<(Value, Vec<String>)> {
    let (patch, duplicates) = strict_json::parse(raw)
        .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
    let current = api.get(target, name)?;
    let base = match subresource {
        Some(Subresource::Scale) => scale_of(&current),
        _ => current.clone(),
    };
    let mut patched = base;
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut patched, &ops).map_err(|e| {
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
            return Err(ApiError::unsupported(
                "server-side apply (application/apply-patch+yaml) is not supported yet",
            ))
        }
    }
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patched object is not a JSON object"));
    }
    if subresource == Some(Subresource::Scale) {
        return Ok((update_scale(api, target, name, patched, dry_run)?, Vec::new()));
    }
    // A patch that leaves resourceVersion as it was carries no precondition of its own beyond
    // the read above; the update checks it against the store.
    if patched.pointer("/metadata/resourceVersion").is_none() {
        patched["metadata"]["resourceVersion"] =
            current.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
    }
    let warnings = fields::prune(target.rt, &mut patched, validation, &duplicates)?;
    Ok((api.update(target, name, patched, subresource, dry_run)?, warnings))
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
        assert_eq!(PatchKind::from_content_type("text/plain").unwrap_err().code, 415);
    }
}
