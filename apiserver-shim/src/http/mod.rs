//! The HTTP side of a cluster: paths, query parameters, bodies and media types in; objects,
//! lists, tables, watch streams and `Status` errors out. Served under a base path, so the same
//! router answers at `/` and at `/tenants/<name>/`.
//!
//! `routing` maps a path to what serves it; `request` reads queries, bodies and options and
//! `response` writes answers; `handlers` holds one module per verb, `watch` the watch
//! stream, `documents` discovery and OpenAPI, `reviews` the access endpoints, `metrics` the
//! resource metrics API; `identity` authenticates and authorizes; `tenants` answers for a
//! tenant that is not served; `pod_room` is the pod intake window.

mod audit;
pub mod clusters;
mod documents;
mod gate;
mod handlers;
mod identity;
mod metrics;
mod pod_room;
mod request;
mod request_info;
mod response;
mod reviews;
mod routing;
pub mod table;
mod tenants;
mod watch;

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use tower::ServiceBuilder;

use crate::access::{self, Security};
use crate::api::Api;
use crate::auth::UserInfo;
use crate::flowcontrol::{FlowConfig, FlowControlLayer};
use crate::intake::PodIntake;
use crate::metrics::Metrics;
use crate::openapi;
use crate::rbac::{Attributes, Policy};
use crate::registry::core::pods::subresources::PodLogs;
use crate::resource::{Registry, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::streams::PodStreams;

use gate::GateLayer;
use request_info::RequestInfo;

pub use clusters::{Clusters, Forward, Forwarded, Idle, Replicas, Wake};
pub(crate) use routing::is_health;

/// What the router serves.
#[derive(Debug)]
pub struct Server {
    api: Arc<Api>,
    base: String,
    security: Option<Arc<Security>>,
    /// What discovery lists beside the API's types: the access reviews on a secured cluster.
    discovered_extra: &'static [ResourceType],
    /// Where `pods/<name>/log` reads from.
    pod_logs: std::sync::OnceLock<Arc<dyn PodLogs>>,
    /// Where `pods/<name>/exec`, `attach` and `portforward` connect to.
    pod_streams: std::sync::OnceLock<Arc<dyn PodStreams>>,
    /// Where the resource metrics API (`metrics.k8s.io`) reads usage from; without one it is
    /// not served.
    metrics: std::sync::OnceLock<Arc<dyn Metrics>>,
    /// The OpenAPI v3 documents of the custom resources, for the registry they were built from.
    custom_openapi: parking_lot::Mutex<Option<CustomOpenApi>>,
    /// The window new pods wait for before they are stored, and the tenant this server serves.
    pod_intake: std::sync::OnceLock<(Arc<PodIntake>, String)>,
}

/// The registry custom OpenAPI documents were built from, and the documents (none when it
/// serves no custom resources).
type CustomOpenApi = (Arc<Registry>, Option<Arc<openapi::V3>>);

impl Server {
    /// Serve `api` under `base` (empty, or a path such as `/tenants/a` without a trailing slash)
    /// to anyone: no authentication, no authorization.
    pub fn new(api: Arc<Api>, base: &str) -> Server {
        Server {
            api,
            base: base.trim_end_matches('/').to_owned(),
            security: None,
            discovered_extra: &[],
            pod_logs: Default::default(),
            pod_streams: Default::default(),
            metrics: Default::default(),
            custom_openapi: Default::default(),
            pod_intake: Default::default(),
        }
    }

    /// Serve `api` under `base` to the clients `security` authenticates, as RBAC allows.
    pub fn secured(api: Arc<Api>, base: &str, security: Arc<Security>) -> Server {
        Server {
            security: Some(security),
            discovered_extra: access::ACCESS_TYPES,
            ..Server::new(api, base)
        }
    }

    /// What discovery lists now: the API's types, the access reviews on a secured cluster, and
    /// the resource metrics API on a cluster given a source. Built for discovery requests only.
    fn discovered(&self) -> Registry {
        let registry = self.api.registry().with_extra(self.discovered_extra);
        match self.metrics.get() {
            Some(_) => registry.with_extra(crate::metrics::TYPES),
            None => registry,
        }
    }

    /// The v3 documents of the custom resources served now, built once per registry.
    fn custom_openapi(&self) -> Option<Arc<openapi::V3>> {
        let registry = self.api.registry();
        let mut cached = self.custom_openapi.lock();
        if let Some((built_for, documents)) = cached.as_ref() {
            if Arc::ptr_eq(built_for, &registry) {
                return documents.clone();
            }
        }
        let documents = openapi::build_custom_v3(registry.is_host(), &registry).map(Arc::new);
        *cached = Some((registry, documents.clone()));
        documents
    }

    /// The API served.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// Serve pod logs from `logs`. Only the first call has an effect; without one, a log
    /// request is 503.
    pub fn set_pod_logs(&self, logs: Arc<dyn PodLogs>) {
        let _ = self.pod_logs.set(logs);
    }

    /// Connect pod streams (`exec`, `attach`, `portforward`) through `streams`. Only the first
    /// call has an effect; without one, such a request is 503.
    pub fn set_pod_streams(&self, streams: Arc<dyn PodStreams>) {
        let _ = self.pod_streams.set(streams);
    }

    /// Serve the resource metrics API (`metrics.k8s.io/v1beta1`: `kubectl top`) from `metrics`.
    /// Only the first call has an effect; without one, the API is not served (discovery does
    /// not list it and its paths are 404), as on a cluster without metrics-server.
    pub fn set_metrics(&self, metrics: Arc<dyn Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Make new pods of tenant `tenant` wait for room in `intake` before they are stored. Only
    /// the first call has an effect.
    pub fn set_pod_intake(&self, intake: Arc<PodIntake>, tenant: &str) {
        let _ = self.pod_intake.set((intake, tenant.to_owned()));
    }

    /// Whether new pods wait for room in a [`PodIntake`] before they are stored.
    pub fn has_pod_intake(&self) -> bool {
        self.pod_intake.get().is_some()
    }

    /// The path it is served under: empty, or `/tenants/<name>`.
    pub fn base(&self) -> &str {
        &self.base
    }
}

/// The identity of a client of one cluster in this process, put in its requests' extensions by
/// its in-process transport ([`crate::local_client::loopback`]) and by nothing else: a request
/// read from a socket starts with no extensions but those the listener adds (its connection's
/// [`PeerCertificates`](crate::access::PeerCertificates)), so no header, certificate or token
/// gets one. The authentication layer takes the request to be from `user`, for `cluster` only
/// (any other cluster answers 401), and the authorization layer allows it everything, as
/// kube-apiserver allows its privileged loopback client: no RBAC object grants it, so none can
/// take it away.
#[derive(Clone, Debug)]
pub(crate) struct Loopback {
    cluster: Arc<Server>,
    user: UserInfo,
}

impl Loopback {
    /// The identity `user` for requests to `cluster`.
    pub(crate) fn new(cluster: Arc<Server>, user: UserInfo) -> Loopback {
        Loopback { cluster, user }
    }

    /// Its user, if `cluster` is the one it was made for.
    fn user_for(&self, cluster: &Arc<Server>) -> Option<&UserInfo> {
        Arc::ptr_eq(&self.cluster, cluster).then_some(&self.user)
    }
}

/// Who is asking, on a cluster served with security: in a request's extensions from the
/// authentication layer on.
#[derive(Clone, Debug)]
struct Caller {
    user: UserInfo,
    policy: Arc<Policy>,
    security: Arc<Security>,
    /// Whether it is a [`Loopback`] client acting as itself: allowed everything, whatever RBAC
    /// says.
    privileged: bool,
}

impl Caller {
    fn authorize(&self, attributes: Attributes) -> ApiResult<()> {
        if self.privileged {
            return Ok(());
        }
        self.security.authorize(&self.policy, &attributes)
    }
}

/// A request's cluster, in its extensions from the outermost layer on.
#[derive(Clone, Debug)]
struct Cluster(Arc<Server>);

/// The cluster a request is for.
fn cluster_of(request: &Request) -> ApiResult<Arc<Server>> {
    request
        .extensions()
        .get::<Cluster>()
        .map(|cluster| cluster.0.clone())
        .ok_or_else(|| ApiError::internal("the request reached no cluster"))
}

/// The axum router for a server.
pub fn router(server: Arc<Server>) -> Router {
    let stack = ServiceBuilder::new().layer(Extension(Cluster(server))).service(cluster_stack());
    Router::new().fallback_service(stack)
}

/// The axum router for every cluster of a listener: `/tenants/<name>/…` goes to that tenant's
/// API (when there is no such tenant, 404 only for host users who may read tenants; 401 for
/// anyone else, as a tenant answers those without its credentials), everything else to the host
/// API; behind flow control with this machine's default limits.
pub fn clusters_router(clusters: Arc<Clusters>) -> Router {
    clusters_router_with(clusters, &FlowConfig::default())
}

/// [`clusters_router`] with flow control's limits from `flow`.
pub fn clusters_router_with(clusters: Arc<Clusters>, flow: &FlowConfig) -> Router {
    let stack = ServiceBuilder::new()
        .layer(FlowControlLayer::new(clusters.clone(), flow))
        .layer(GateLayer(tenants::SelectCluster(clusters)))
        .service(cluster_stack());
    Router::new().fallback_service(stack)
}

/// What every request to a cluster passes through, outermost first, before [`routing`] hands
/// it to its handler:
///
/// 1. audit: each answer is logged, refusals (401, 403) as such;
/// 2. authentication, with impersonation (a cluster with security only);
/// 3. request info: the path within the cluster, the query, and what the path names;
/// 4. authorization of what the request info names (a cluster with security only);
/// 5. the pod intake window (only where the embedding program set one, see
///    [`Server::set_pod_intake`]).
///
/// The request's [`Cluster`] is set in front of these: by [`router`] for one cluster, by the
/// tenant selection of [`clusters_router_with`] for a listener's clusters.
fn cluster_stack() -> impl gate::Next + Clone + Sync {
    ServiceBuilder::new()
        .layer(GateLayer(audit::Audit))
        .layer(GateLayer(identity::Authenticate))
        .layer(GateLayer(request_info::Resolve))
        .layer(GateLayer(identity::Authorize))
        .layer(GateLayer(pod_room::Window))
        .service_fn(|request| async { Ok::<_, Infallible>(handle(request).await) })
}

/// The innermost service: the request, past the layers, to its handler.
async fn handle(request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let (Some(Cluster(server)), Some(info)) =
        (parts.extensions.remove::<Cluster>(), parts.extensions.remove::<RequestInfo>())
    else {
        return ApiError::internal("the request passed no request-info layer").into_response();
    };
    let caller = parts.extensions.remove::<Caller>();
    let upgrade = Upgrade {
        on: parts.extensions.remove::<hyper::upgrade::OnUpgrade>(),
        held: parts.extensions.remove::<crate::flowcontrol::Held>(),
    };
    let request = Incoming { method: &parts.method, headers: &parts.headers, body, upgrade };
    routing::route(&server, caller.as_ref(), info, request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// What a handler has of a request besides its path: its method, headers and body, and, for
/// one that asks to be upgraded, the connection to come.
pub(super) struct Incoming<'a> {
    method: &'a Method,
    headers: &'a HeaderMap,
    body: Body,
    upgrade: Upgrade,
}

/// A request's upgrade: its connection once the 101 answer is sent (absent for a request that
/// came with no connection to upgrade), and its count as long-running ([`crate::flowcontrol::Held`],
/// absent where no flow control counts it).
#[derive(Default)]
pub(super) struct Upgrade {
    on: Option<hyper::upgrade::OnUpgrade>,
    held: Option<crate::flowcontrol::Held>,
}

/// `f`'s result, when this worker may block for it: in place on a multi-threaded runtime (its
/// other tasks go to a fresh worker); `None` on a current-thread runtime, whose one worker may
/// not block.
fn in_place<T>(f: impl FnOnce() -> T) -> Option<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let flavor = Handle::try_current().ok().map(|h| h.runtime_flavor());
    (flavor == Some(RuntimeFlavor::MultiThread)).then(|| tokio::task::block_in_place(f))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    use crate::admission::webhook::dispatch::on_request_thread;
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        // The worker thread becomes a blocking thread for the call and hands its other tasks
        // to a fresh worker: no round trip through the blocking pool for the common case of a
        // store call that does not wait long.
        return tokio::task::block_in_place(|| on_request_thread(f));
    }
    tokio::task::spawn_blocking(|| on_request_thread(f))
        .await
        .map_err(|e| ApiError::internal(format!("request task failed: {e}")))?
}
