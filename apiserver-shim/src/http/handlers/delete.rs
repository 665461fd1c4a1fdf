//! DELETE of one object, and the `DeleteOptions` a delete reads from its body and query.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;

use super::Call;
use crate::api::{DeleteParams, Target};
use crate::http::blocking;
use crate::http::request::{delete_params, dry_run, read_body};
use crate::http::response::{respond_object, with_warnings};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

/// `DELETE <resource>/<name>`.
pub(super) async fn delete(call: Call<'_>, name: String, body: Body) -> ApiResult<Response> {
    let mut params = options(&call, body).await?;
    let Call { server, caller, rt, namespace, query, headers, .. } = call;
    params.requester = super::requester(caller);
    let requester = params.requester.clone();
    let mut warnings = default_propagation_warning(&rt, &params);
    let api = server.api.clone();
    let rt2 = rt.clone();
    let deleted =
        blocking(move || api.delete(&Target { rt: &rt2, namespace }, &name, &params)).await?;
    warnings.extend(requester.warnings());
    Ok(with_warnings(respond_object(StatusCode::OK, &rt, deleted, headers, query), &warnings))
}

/// The warning of a delete that leaves the propagation to a kind that orphans by default.
pub(super) fn default_propagation_warning(rt: &ResourceType, params: &DeleteParams) -> Vec<String> {
    match rt.strategy.orphans_by_default() {
        Some(warning)
            if params.propagation_policy.is_none() && params.orphan_dependents.is_none() =>
        {
            vec![warning.to_owned()]
        }
        _ => Vec::new(),
    }
}

/// The delete's options: `DeleteOptions` in the body, then `dryRun`, `gracePeriodSeconds`,
/// `propagationPolicy` and `orphanDependents` from the query.
pub(super) async fn options(call: &Call<'_>, body: Body) -> ApiResult<DeleteParams> {
    let query = call.query;
    let raw = read_body(body).await?;
    let mut params = delete_params(call.headers, &raw)?;
    params.dry_run |= dry_run(query)?;
    if let Some(g) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
        params.grace_period_seconds = Some(g.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}: must be an integer"))
        })?);
    }
    if let Some(p) = query.get("propagationPolicy") {
        params.propagation_policy = Some(p.to_owned());
    }
    if let Some(o) = query.get("orphanDependents").filter(|o| !o.is_empty()) {
        params.orphan_dependents = Some(o.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid orphanDependents {o:?}: must be a boolean"))
        })?);
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{header, Request};
    use serde_json::{json, Value};
    use tower::ServiceExt;

    use crate::registry::batch::jobs::ORPHANS_PODS;

    /// batch/v1 Jobs orphan their pods unless a delete says otherwise, and a delete that leaves
    /// it unset is warned; one that sets it is not.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_job_orphans_by_default_and_the_delete_is_warned() {
        let dir = tempfile::tempdir().expect("dir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Arc::new(crate::api::Api::new(Arc::new(store)).expect("api"));
        let router = crate::http::router(Arc::new(crate::Server::new(api, "")));
        let jobs = "/apis/batch/v1/namespaces/default/jobs";
        let send = |method: &str, path: String, body: Value| {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .expect("request");
            router.clone().oneshot(request)
        };
        let job = |name: &str| {
            json!({"metadata": {"name": name}, "spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
        };
        for name in ["by-default", "in-background"] {
            let created = send("POST", jobs.to_owned(), job(name)).await.expect("answer");
            assert_eq!(created.status().as_u16(), 201);
        }
        let warnings = |response: &axum::response::Response| -> Vec<String> {
            response
                .headers()
                .get_all(header::WARNING)
                .iter()
                .map(|v| v.to_str().unwrap_or_default().to_owned())
                .collect()
        };

        let deleted =
            send("DELETE", format!("{jobs}/by-default"), json!({})).await.expect("answer");
        assert_eq!(deleted.status().as_u16(), 200);
        assert_eq!(warnings(&deleted), vec![format!("299 - \"{ORPHANS_PODS}\"")]);
        let body = axum::body::to_bytes(deleted.into_body(), usize::MAX).await.expect("body");
        let job: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(job["metadata"]["finalizers"], json!(["orphan"]), "{job}");
        assert!(job["metadata"]["deletionTimestamp"].is_string(), "{job}");

        let deleted = send(
            "DELETE",
            format!("{jobs}/in-background"),
            json!({"propagationPolicy": "Background"}),
        )
        .await
        .expect("answer");
        assert_eq!(deleted.status().as_u16(), 200);
        assert!(warnings(&deleted).is_empty());
        let gone = send("GET", format!("{jobs}/in-background"), Value::Null).await.expect("answer");
        assert_eq!(gone.status().as_u16(), 404, "no finalizer held it");
    }
}
