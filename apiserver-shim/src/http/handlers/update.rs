//! PUT of an object, or of its `status` or `scale`.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::{guard_rbac_write, requester, Call};
use crate::api::Target;
use crate::fields::{self, FieldValidation};
use crate::http::blocking;
use crate::http::request::{decode_body_checked, read_body, refuse_protobuf, write_of};
use crate::http::response::{respond_object, with_warnings};
use crate::resource::Subresource;
use crate::scale::{scale_of, update_scale};
use crate::status::ApiResult;

/// `PUT <resource>/<name>[/<subresource>]`.
pub(super) async fn update(call: Call<'_>, name: String, body: Body) -> ApiResult<Response> {
    let Call { server, caller, rt, namespace, sub, query, headers } = call;
    let api = server.api.clone();
    refuse_protobuf(&rt, headers)?;
    let mut write = write_of(query, headers, "UpdateOptions", sub)?;
    write.requester = requester(caller);
    let requester = write.requester.clone();
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let (mut object, duplicates) = decode_body_checked(headers, &read_body(body).await?)?;
    let mut warnings = match sub {
        Some(Subresource::Scale) => Vec::new(),
        _ => fields::prune(&rt, &mut object, validation, &duplicates)?,
    };
    guard_rbac_write(caller, &api, &rt, namespace.as_deref(), &object, Some(&name))?;
    let rt2 = rt.clone();
    let updated = blocking(move || {
        let target = Target { rt: &rt2, namespace };
        match sub {
            Some(Subresource::Scale) => update_scale(&api, &target, &name, object, &write),
            _ => api.update(&target, &name, object, sub, &write),
        }
    })
    .await?;
    warnings.extend(requester.warnings());
    let updated = match sub {
        Some(Subresource::Scale) => scale_of(&rt, &updated),
        _ => updated,
    };
    let response = respond_object(StatusCode::OK, &rt, updated, headers, query);
    Ok(with_warnings(response, &warnings))
}
