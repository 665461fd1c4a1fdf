//! The pod intake layer: on a cluster whose embedding program set a pod intake
//! ([`Server::set_pod_intake`], `carrel up`), a request that would store a new pod waits for room
//! in the window before it goes on, and the room is held by the stored pod until the syncer takes
//! it up. A cluster without an intake passes every request straight on.

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::response::Response;
use futures::future::BoxFuture;

use crate::api::Target;
use crate::patch::PatchKind;

use super::gate::{run, Gate, Next, Step};
use super::handlers::is_pod;
use super::request::{dry_run, patch_options};
use super::request_info::{Kind, RequestInfo};
use super::{blocking, Server};

/// The object a create (or an apply that created) stored, in its response's extensions.
#[derive(Clone, Debug)]
pub(super) struct Stored {
    /// Its namespace (empty for a cluster-scoped object).
    pub(super) namespace: String,
    /// Its name.
    pub(super) name: String,
}

impl Stored {
    /// The namespace and name of `object`.
    pub(super) fn of(object: &serde_json::Value) -> Stored {
        let at = |p: &str| object.pointer(p).and_then(|v| v.as_str()).unwrap_or_default();
        Stored { namespace: at("/metadata/namespace").into(), name: at("/metadata/name").into() }
    }
}

/// The pod intake layer: requests to a cluster with an intake take its slow way.
#[derive(Clone, Debug)]
pub(super) struct Window;

impl Gate for Window {
    fn check(&self, request: Request) -> Step {
        let intake = request.extensions().get::<super::Cluster>().map(|c| c.0.pod_intake.get());
        match intake {
            Some(Some(_)) => Step::Slow(request),
            _ => Step::Go(request),
        }
    }

    fn slow<S: Next>(&self, request: Request, next: S) -> BoxFuture<'static, Response> {
        Box::pin(window(request, next))
    }
}

/// A request to a cluster with an intake: one that stores a new pod waits for room first.
async fn window<S: Next>(request: Request, next: S) -> Response {
    let Some(server) = request.extensions().get::<super::Cluster>().map(|c| c.0.clone()) else {
        return run(next, request).await;
    };
    let Some((intake, tenant)) = server.pod_intake.get() else {
        return run(next, request).await;
    };
    let room = match stores_new_pod(&server, &request) {
        NewPod::No => None,
        NewPod::Yes => Some(intake.enter(tenant).await),
        NewPod::IfAbsent(target) => match blocking(target).await {
            Ok(_) => None,
            Err(_) => Some(intake.enter(tenant).await),
        },
    };
    let response = run(next, request).await;
    if let Some(room) = room {
        if response.status() == StatusCode::CREATED {
            if let Some(stored) = response.extensions().get::<Stored>() {
                intake.hold(tenant, &stored.namespace, &stored.name, room);
            }
        }
    }
    response
}

/// Whether a request stores a new pod, or a lookup that tells.
enum NewPod {
    No,
    Yes,
    /// If the object this reads does not exist.
    IfAbsent(Box<dyn FnOnce() -> crate::status::ApiResult<serde_json::Value> + Send>),
}

/// Whether `request` would store a new pod: a create of a pod (not a dry run), or a server-side
/// apply (not a dry run) of a pod that does not exist yet.
fn stores_new_pod(server: &Server, request: &Request) -> NewPod {
    let Some(info) = request.extensions().get::<RequestInfo>() else { return NewPod::No };
    let Kind::Resource(Ok(path)) = &info.kind else { return NewPod::No };
    if !is_pod(&path.rt) || path.subresource.is_some() || path.namespace.is_none() {
        return NewPod::No;
    }
    match (request.method(), &path.name) {
        (&Method::POST, None) if matches!(dry_run(&info.query), Ok(false)) => NewPod::Yes,
        (&Method::PATCH, Some(name)) => {
            let content_type =
                request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            let kind = PatchKind::from_content_type(content_type.unwrap_or(""));
            if !matches!(kind, Ok(PatchKind::Apply)) {
                return NewPod::No;
            }
            let options = patch_options(&info.query, request.headers(), PatchKind::Apply);
            if !options.is_ok_and(|o| !o.dry_run) {
                return NewPod::No;
            }
            let (api, rt, namespace, name) =
                (server.api.clone(), path.rt.clone(), path.namespace.clone(), name.clone());
            NewPod::IfAbsent(Box::new(move || api.get(&Target { rt: &rt, namespace }, &name)))
        }
        _ => NewPod::No,
    }
}
