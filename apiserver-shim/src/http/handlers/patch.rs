//! PATCH of an object (JSON, merge, strategic merge or server-side apply); an apply creates the
//! object if it does not exist.

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;

use super::{guard_rbac_write, Call};
use crate::api::Target;
use crate::http::blocking;
use crate::http::pod_room::Stored;
use crate::http::request::{patch_options, read_body};
use crate::http::response::{respond_object, with_warnings};
use crate::patch::{self, PatchKind, PatchOptions};
use crate::resource::Subresource;
use crate::scale::scale_of;
use crate::status::ApiResult;

/// `PATCH <resource>/<name>[/<subresource>]`.
pub(super) async fn patch(call: Call<'_>, name: String, body: Body) -> ApiResult<Response> {
    let Call { server, caller, rt, namespace, sub, query, headers } = call;
    let api = server.api.clone();
    let kind = PatchKind::from_content_type(
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or(""),
    )?;
    let mut options = patch_options(query, headers, kind)?;
    let raw = read_body(body).await?;
    if caller.is_some() && rt.group == crate::rbac::RBAC_GROUP {
        // What the patch would store is what must not escalate: find it without storing.
        let (api2, rt2, ns2, name2, raw2) =
            (api.clone(), rt.clone(), namespace.clone(), name.clone(), raw.clone());
        let dry = PatchOptions { dry_run: true, ..options.clone() };
        let would = blocking(move || {
            let target = Target { rt: &rt2, namespace: ns2 };
            patch::patch(&api2, &target, &name2, sub, kind, &raw2, &dry)
        })
        .await?;
        guard_rbac_write(caller, &api, &rt, namespace.as_deref(), &would.object, Some(&name))?;
    }
    // The dry run above warned on its own requester; the write warns on this one.
    options.requester = super::requester(caller);
    let policy_warnings = options.requester.clone();
    let rt2 = rt.clone();
    let patched = blocking(move || {
        let target = Target { rt: &rt2, namespace };
        patch::patch(&api, &target, &name, sub, kind, &raw, &options)
    })
    .await?;
    let stored = patched.created.then(|| Stored::of(&patched.object));
    let object = match sub {
        Some(Subresource::Scale) => scale_of(&rt, &patched.object),
        _ => patched.object,
    };
    let code = if patched.created { StatusCode::CREATED } else { StatusCode::OK };
    let mut response = respond_object(code, &rt, object, headers, query);
    if let Some(stored) = stored {
        response.extensions_mut().insert(stored);
    }
    let mut warnings = patched.warnings;
    warnings.extend(policy_warnings.warnings());
    Ok(with_warnings(response, &warnings))
}
