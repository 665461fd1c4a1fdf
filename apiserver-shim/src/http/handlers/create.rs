//! POST of a new object: decoded, pruned of unknown fields, checked against RBAC escalation, and
//! stored.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::{guard_rbac_write, requester, Call};
use crate::api::Target;
use crate::fields::{self, FieldValidation};
use crate::http::blocking;
use crate::http::pod_room::Stored;
use crate::http::request::{decode_body_checked, read_body, refuse_protobuf, write_of};
use crate::http::response::{respond_object, with_warnings};
use crate::status::ApiResult;

/// `POST <resource>`.
pub(super) async fn create(call: Call<'_>, body: Body) -> ApiResult<Response> {
    let Call { server, caller, rt, namespace, sub, query, headers } = call;
    let api = server.api.clone();
    refuse_protobuf(&rt, headers)?;
    let mut write = write_of(query, headers, "CreateOptions", sub)?;
    write.requester = requester(caller);
    let requester = write.requester.clone();
    let validation = FieldValidation::parse(query.get("fieldValidation"))?;
    let (mut object, duplicates) = decode_body_checked(headers, &read_body(body).await?)?;
    let mut warnings = fields::prune(&rt, &mut object, validation, &duplicates)?;
    guard_rbac_write(caller, &api, &rt, namespace.as_deref(), &object, None)?;
    let rt2 = rt.clone();
    let created =
        blocking(move || api.create(&Target { rt: &rt2, namespace }, object, &write)).await?;
    warnings.extend(requester.warnings());
    let stored = Stored::of(&created);
    let mut response = respond_object(StatusCode::CREATED, &rt, created, headers, query);
    response.extensions_mut().insert(stored);
    Ok(with_warnings(response, &warnings))
}
