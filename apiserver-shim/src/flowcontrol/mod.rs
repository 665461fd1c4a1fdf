//! Flow control between the clusters one listener serves, in the spirit of kube-apiserver's API
//! Priority and Fairness (APF).
//!
//! Every request belongs to a priority level — the host API's, or the tenants' — and, within it,
//! to a flow: the host, or one tenant. A [`Level`] has a bounded number of seats (the work in
//! execution at once), shared by its flows. A request takes one seat, or, as APF estimates its
//! work, more: a LIST one for every hundred objects it may read ([`width`]).
//!
//! - a request takes its seats at once when its flow has nothing waiting and stays within its
//!   share of seats (`seats_per_flow`);
//! - otherwise it waits in its flow's own queue (bounded; a full queue, or a wait longer than
//!   `queue_wait`, is answered 429 `TooManyRequests` with `Retry-After`, as APF answers);
//! - when seats come free, the flows with waiting requests are served in turn (round robin),
//!   skipping those that hold their share already; a turn whose request needs more seats than
//!   are free keeps them as they come free, so wide requests are not starved.
//!
//! So one tenant's flood waits in its own queue, and another tenant's request finds a seat that
//! the flood could not take. The host API has a level of its own, so no tenant can starve the
//! admin, the syncers or the node agents. The host's health probes are exempt, as APF exempts
//! probes.
//!
//! Long-running requests (watches, pod logs) hold a seat only while they are set up (until their
//! response starts), as APF seats a watch's initialization only. They are counted apart, per flow,
//! against `long_running_per_flow` (beyond it, 429 as kube-apiserver's max-requests-inflight
//! answers), and their response ends as soon as their cluster stops being served ([`Serving`]).
//!
//! [`FlowControlLayer`] is the `tower` layer; `http::clusters_router` composes it in front of
//! the clusters' routing, and [`Classify`] (implemented by `http::Clusters`) says which level
//! and flow a request belongs to.

mod level;
mod work;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::watch;
use tower::{Layer, Service, ServiceExt};

pub use self::level::{Level, LongRunning, Seat};
pub use self::work::{is_long_running, is_pod_create, width, OBJECTS_PER_SEAT};
use crate::status::ApiError;

/// The seconds a refused client is told to wait (`Retry-After`), as APF tells.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The flow of the host API in its level.
const HOST_FLOW: &str = "host";

/// The flow of requests for tenants that are not served (no tenant name contains `/`).
const UNSERVED_FLOW: &str = "/unserved";

/// The limits of one priority level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelConfig {
    /// Requests in execution at once, all flows together.
    pub seats: usize,
    /// The most seats one flow holds at once (at most `seats`).
    pub seats_per_flow: usize,
    /// Requests one flow may have waiting for a seat; more are refused.
    pub queue_length: usize,
    /// Long-running requests (watches, pod logs) one flow may have open; more are refused.
    pub long_running_per_flow: usize,
}

/// The limits of flow control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowConfig {
    /// The host API's level (one flow).
    pub host: LevelConfig,
    /// The tenants' level (a flow per tenant).
    pub tenants: LevelConfig,
    /// How long a request may wait for a seat before it is refused (APF waits a quarter of the
    /// 60 s request timeout).
    pub queue_wait: Duration,
}

impl FlowConfig {
    /// Limits for a machine of `cores` cores: 4 seats a core for the tenants, each tenant at most
    /// half of them, so that a second tenant always finds seats the first could not take; as many
    /// for the host. A tenant may queue 128 requests and hold 200 watches; the host, which
    /// serves every tenant's syncer and every node agent, 1,024 and 10,000.
    pub fn for_cores(cores: usize) -> FlowConfig {
        let seats = 4 * cores.max(1);
        FlowConfig {
            host: LevelConfig {
                seats,
                seats_per_flow: seats,
                queue_length: 1024,
                long_running_per_flow: 10_000,
            },
            tenants: LevelConfig {
                seats,
                seats_per_flow: (seats / 2).max(1),
                queue_length: 128,
                long_running_per_flow: 200,
            },
            queue_wait: Duration::from_secs(15),
        }
    }
}

impl Default for FlowConfig {
    /// [`FlowConfig::for_cores`] of this machine.
    fn default() -> FlowConfig {
        FlowConfig::for_cores(std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// Why a request was refused (answered 429).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The flow's queue was full.
    #[error("the flow's queue is full")]
    QueueFull,
    /// No seat came free within the queue wait.
    #[error("no seat came free within the queue wait")]
    TimedOut,
    /// The flow had as many long-running requests open as it may.
    #[error("the flow has as many long-running requests open as it may")]
    TooManyLongRunning,
}

impl IntoResponse for Refusal {
    /// 429 with `Retry-After` and a `Status`, in the words of kube-apiserver's APF and
    /// max-requests-inflight filters.
    fn into_response(self) -> Response {
        let mut response = ApiError::too_many_requests(RETRY_AFTER_SECONDS).into_response();
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        response
    }
}

/// Held by whoever serves a cluster: when it is dropped, every [`Served`] made from it ends.
#[derive(Debug)]
pub struct Serving(watch::Sender<()>);

impl Serving {
    /// A cluster served from now until this is dropped.
    pub fn new() -> Serving {
        Serving(watch::channel(()).0)
    }

    /// A handle that ends when this is dropped.
    pub fn served(&self) -> Served {
        Served(self.0.subscribe())
    }

    /// How many [`Served`] handles are held: the cluster's requests under way, from their
    /// classification to the end of their response (of its body, for a long-running one).
    pub fn in_use(&self) -> usize {
        self.0.receiver_count()
    }
}

impl Default for Serving {
    fn default() -> Serving {
        Serving::new()
    }
}

/// Whether a cluster is still served.
#[derive(Clone, Debug)]
pub struct Served(watch::Receiver<()>);

impl Served {
    /// Resolves once the cluster is no longer served.
    pub async fn ended(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// Which level and flow a request belongs to.
#[derive(Clone, Debug)]
pub enum Flow {
    /// Not flow-controlled (the host's health probes).
    Exempt,
    /// The host API.
    Host,
    /// A served tenant's API.
    Tenant {
        /// The tenant's name.
        name: String,
        /// Ends when the tenant stops being served.
        served: Served,
    },
    /// A path under the tenants' prefix that names no served tenant.
    Unserved,
}

/// A request's flow, and its path within its cluster (without the base path).
#[derive(Clone, Debug)]
pub struct Classified<'a> {
    /// The flow.
    pub flow: Flow,
    /// The path within the cluster, e.g. `/api/v1/pods`.
    pub path: &'a str,
    /// What counts the objects the cluster stores, all kinds together: the most one LIST can
    /// read, from which its [`width`] is reckoned. Asked only for a LIST.
    pub objects: Option<Arc<dyn ObjectCount>>,
    /// Whether the cluster's pod creates wait in a `PodIntake` (`intake.rs`), which is their
    /// flow control: they take no seat then, since what ends their wait (the syncer taking up
    /// stored pods, through the same cluster's API) needs seats of the same flow.
    pub pod_intake: bool,
}

/// Counts the objects a cluster stores (for a LIST's [`width`]).
pub trait ObjectCount: Send + Sync + std::fmt::Debug {
    /// The objects stored now, all kinds together.
    fn objects(&self) -> u64;
}

/// Says which flow a request path belongs to.
pub trait Classify: Send + Sync + std::fmt::Debug + 'static {
    /// The flow of a request for `path`.
    fn classify<'a>(&self, path: &'a str) -> Classified<'a>;
}

/// The levels of a listener and how its requests are classified.
#[derive(Debug)]
struct FlowControl {
    host: Arc<Level>,
    tenants: Arc<Level>,
    classify: Arc<dyn Classify>,
}

/// The `tower` layer of flow control.
#[derive(Clone, Debug)]
pub struct FlowControlLayer {
    control: Arc<FlowControl>,
}

impl FlowControlLayer {
    /// Flow control with `config`'s limits, over flows as `classify` tells them.
    pub fn new(classify: Arc<dyn Classify>, config: &FlowConfig) -> FlowControlLayer {
        FlowControlLayer {
            control: Arc::new(FlowControl {
                host: Level::new(config.host, config.queue_wait),
                tenants: Level::new(config.tenants, config.queue_wait),
                classify,
            }),
        }
    }

    /// The host API's level.
    pub fn host(&self) -> &Arc<Level> {
        &self.control.host
    }

    /// The tenants' level.
    pub fn tenants(&self) -> &Arc<Level> {
        &self.control.tenants
    }
}

impl<S> Layer<S> for FlowControlLayer {
    type Service = FlowControlService<S>;

    fn layer(&self, inner: S) -> FlowControlService<S> {
        FlowControlService { inner, control: self.control.clone() }
    }
}

/// The service [`FlowControlLayer`] makes.
#[derive(Clone, Debug)]
pub struct FlowControlService<S> {
    inner: S,
    control: Arc<FlowControl>,
}

impl<S> Service<Request> for FlowControlService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The inner service is made ready when the request has its seat.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let control = self.control.clone();
        Box::pin(async move { Ok(control.serve(inner, request).await) })
    }
}

impl FlowControl {
    async fn serve<S>(&self, inner: S, request: Request) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible> + Send,
        S::Future: Send,
    {
        let classified = self.classify.classify(request.uri().path());
        let long_running =
            is_long_running(request.method(), classified.path, request.uri().query());
        if classified.pod_intake && is_pod_create(request.method(), classified.path) {
            return respond(inner, request).await;
        }
        let (level, flow, served) = match classified.flow {
            Flow::Exempt => return respond(inner, request).await,
            Flow::Host => (&self.host, HOST_FLOW.to_owned(), None),
            Flow::Tenant { name, served } => (&self.tenants, name, Some(served)),
            Flow::Unserved => (&self.tenants, UNSERVED_FLOW.to_owned(), None),
        };
        let open = match long_running.then(|| level.long_running(&flow)).transpose() {
            Ok(open) => open,
            Err(refusal) => return refused(&flow, refusal),
        };
        let width = width(request.method(), classified.path, request.uri().query(), || {
            classified.objects.as_ref().map_or(0, |count| count.objects())
        });
        let seat = match level.seat(&flow, width).await {
            Ok(seat) => seat,
            Err(refusal) => return refused(&flow, refusal),
        };
        let upgrade = request.headers().contains_key(header::UPGRADE);
        let mut request = request;
        let open = match open {
            // An upgraded connection outlives its response: its handler keeps it counted.
            Some(open) if upgrade => {
                request.extensions_mut().insert(Held::new(open, served.clone()));
                None
            }
            open => open,
        };
        let response = respond(inner, request).await;
        drop(seat);
        match open {
            None => response,
            Some(open) => response.map(|body| long_running_body(body, open, served)),
        }
    }
}

/// A long-running request whose connection is upgraded (a pod's streams), in its extensions:
/// whoever serves the upgraded connection takes it, keeps it while the connection lasts (it is
/// counted as long-running, and its cluster as in use), and ends the connection when
/// [`Held::ended`] resolves.
#[derive(Clone, Debug)]
pub struct Held(Arc<parking_lot::Mutex<Option<Counted>>>);

/// What a [`Held`] keeps: its count as long-running, and its cluster's serving.
type Counted = (LongRunning, Option<Served>);

impl Held {
    fn new(open: LongRunning, served: Option<Served>) -> Held {
        Held(Arc::new(parking_lot::Mutex::new(Some((open, served)))))
    }

    /// Resolves when the cluster stops being served; the count is kept until then or until
    /// this is dropped.
    pub async fn ended(self) {
        let taken = self.0.lock().take();
        let Some((_open, served)) = taken else { return };
        match served {
            Some(served) => served.ended().await,
            None => futures::future::pending().await,
        }
    }
}

async fn respond<S>(inner: S, request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match inner.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn refused(flow: &str, refusal: Refusal) -> Response {
    tracing::debug!(%flow, %refusal, "request refused by flow control");
    refusal.into_response()
}

/// A long-running response's body: it keeps `open` counted while it lasts, and ends when the
/// cluster stops being served (the handler's stream then sees its receiver gone and stops).
fn long_running_body(body: Body, open: LongRunning, served: Option<Served>) -> Body {
    let ended: Pin<Box<dyn Future<Output = ()> + Send>> = match served {
        Some(served) => Box::pin(served.ended()),
        None => Box::pin(futures::future::pending()),
    };
    let stream = body.into_data_stream().take_until(ended).map(move |chunk| {
        let _counted = &open;
        chunk
    });
    Body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    use axum::http::StatusCode;
    use http_body_util::BodyExt;
    use serde_json::Value;
    use tokio::sync::Notify;

    use super::level::tests::until;
    use super::*;

    /// A count of stored objects the tests set.
    #[derive(Debug, Default)]
    struct Stored(AtomicU64);

    impl ObjectCount for Stored {
        fn objects(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Flows by path for the layer's tests: `/tenants/<name>/…` is the tenant's (served while
    /// `serving` holds it; pod creates through an intake where `pod_intake` names it),
    /// `/healthz` is exempt, the rest the host's.
    #[derive(Debug, Default)]
    struct Paths {
        serving: Mutex<HashMap<String, Serving>>,
        /// Tenants whose pod creates wait in a pod intake.
        pod_intake: Mutex<Vec<String>>,
        /// The objects every tenant stores.
        objects: Arc<Stored>,
    }

    impl Classify for Paths {
        fn classify<'a>(&self, path: &'a str) -> Classified<'a> {
            if path == "/healthz" {
                return Classified { flow: Flow::Exempt, path, pod_intake: false, objects: None };
            }
            let Some(rest) = path.strip_prefix("/tenants/") else {
                return Classified { flow: Flow::Host, path, pod_intake: false, objects: None };
            };
            let name = rest.split('/').next().unwrap_or_default();
            let serving = self.serving.lock();
            let flow = match serving.get(name) {
                Some(s) => Flow::Tenant { name: name.to_owned(), served: s.served() },
                None => Flow::Unserved,
            };
            let pod_intake = self.pod_intake.lock().iter().any(|t| t == name);
            let objects: Arc<dyn ObjectCount> = self.objects.clone();
            Classified { flow, path: &rest[name.len()..], pod_intake, objects: Some(objects) }
        }
    }

    /// An inner service whose requests to paths ending `/hold` wait until `release` is notified;
    /// the rest answer 200 at once. `started` counts the requests that reached it.
    #[derive(Clone, Debug, Default)]
    struct Held {
        release: Arc<Notify>,
        started: Arc<AtomicUsize>,
    }

    impl Held {
        fn service(
            &self,
        ) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send>
               + Clone
               + Send
               + 'static {
            let held = self.clone();
            tower::service_fn(move |request: Request| {
                let held = held.clone();
                async move {
                    held.started.fetch_add(1, Ordering::SeqCst);
                    if request.uri().path().ends_with("/hold") {
                        held.release.notified().await;
                    }
                    Ok::<_, Infallible>(Response::new(Body::from("ok")))
                }
            })
        }
    }

    fn tenants_config(seats: usize, queue_length: usize, long_running: usize) -> FlowConfig {
        let level = LevelConfig {
            seats,
            seats_per_flow: seats,
            queue_length,
            long_running_per_flow: long_running,
        };
        FlowConfig { host: level, tenants: level, queue_wait: Duration::from_secs(30) }
    }

    fn get(path: &str) -> Request {
        Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn the_layer_answers_429_with_retry_after_and_a_status_when_the_queue_is_full() {
        let paths = Arc::new(Paths::default());
        paths.serving.lock().insert("a".into(), Serving::new());
        let layer = FlowControlLayer::new(paths, &tenants_config(1, 0, 1));
        let held = Held::default();
        let service = layer.layer(held.service());
        let busy = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/hold")));
        until(|| layer.tenants().seats_in_use() == 1).await;
        let refused = service.clone().oneshot(get("/tenants/a/api/v1/pods")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        assert_eq!(refused.headers()[header::CONTENT_TYPE], "application/json");
        let body = refused.into_body().collect().await.unwrap().to_bytes();
        let status: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], "TooManyRequests");
        assert_eq!(status["code"], 429);
        assert_eq!(status["message"], "Too many requests, please try again later.");
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        // The host has a level of its own, and its probes are exempt.
        let host = service.clone().oneshot(get("/api/v1/pods")).await.unwrap();
        assert_eq!(host.status(), StatusCode::OK);
        let probe = service.clone().oneshot(get("/healthz")).await.unwrap();
        assert_eq!(probe.status(), StatusCode::OK);
        held.release.notify_one();
        assert_eq!(busy.await.unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(layer.tenants().seats_in_use(), 0);
    }

    #[tokio::test]
    async fn a_list_takes_a_seat_for_every_hundred_objects_its_tenant_stores() {
        let paths = Arc::new(Paths::default());
        paths.serving.lock().insert("a".into(), Serving::new());
        paths.objects.0.store(250, Ordering::SeqCst);
        let layer = FlowControlLayer::new(paths, &tenants_config(4, 4, 1));
        let held = Held::default();
        let service = layer.layer(held.service());
        // A LIST (of the collection `hold`) of up to 250 objects: three seats.
        let list = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/hold")));
        until(|| layer.tenants().seats_in_use() == 3).await;
        // A GET of one object takes one; a second LIST must wait for three.
        let one = service.clone().oneshot(get("/tenants/a/api/v1/pods/p")).await.unwrap();
        assert_eq!(one.status(), StatusCode::OK);
        let second = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/hold")));
        until(|| layer.tenants().waiting("a") == 1).await;
        held.release.notify_one();
        assert_eq!(list.await.unwrap().unwrap().status(), StatusCode::OK);
        until(|| layer.tenants().seats_in_use() == 3 && layer.tenants().waiting("a") == 0).await;
        held.release.notify_one();
        assert_eq!(second.await.unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(layer.tenants().seats_in_use(), 0);
    }

    #[tokio::test]
    async fn a_client_gone_mid_request_gives_its_seat_back() {
        let paths = Arc::new(Paths::default());
        paths.serving.lock().insert("a".into(), Serving::new());
        let layer = FlowControlLayer::new(paths, &tenants_config(1, 4, 1));
        let held = Held::default();
        let service = layer.layer(held.service());
        // One request executes (and never finishes), one waits behind it.
        let executing = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/hold")));
        until(|| held.started.load(Ordering::SeqCst) == 1).await;
        let waiting = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/pods")));
        until(|| layer.tenants().waiting("a") == 1).await;
        // The client of the executing request goes: the waiting one gets the seat and answers.
        executing.abort();
        let answered = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        assert_eq!(answered.unwrap().unwrap().unwrap().status(), StatusCode::OK);
        assert_eq!(layer.tenants().seats_in_use(), 0);
        assert_eq!(layer.tenants().flows(), 0);
    }

    #[tokio::test]
    async fn a_long_running_request_holds_no_seat_and_ends_when_its_cluster_goes() {
        let paths = Arc::new(Paths::default());
        paths.serving.lock().insert("a".into(), Serving::new());
        let layer = FlowControlLayer::new(paths.clone(), &tenants_config(1, 0, 1));
        // A watch whose body never ends by itself.
        let endless = tower::service_fn(|_: Request| async {
            let stream = futures::stream::pending::<Result<bytes::Bytes, Infallible>>();
            Ok::<_, Infallible>(Response::new(Body::from_stream(stream)))
        });
        let service = layer.layer(endless);
        let watch = "/tenants/a/api/v1/configmaps?watch=true";
        let response = service.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(layer.tenants().seats_in_use(), 0, "the open watch holds no seat");
        let second = service.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(second.headers()[header::RETRY_AFTER], "1");
        // The tenant stops being served: the body ends and the count goes.
        paths.serving.lock().remove("a");
        let mut body = response.into_body();
        let end = tokio::time::timeout(Duration::from_secs(10), body.frame()).await;
        assert!(end.expect("the watch ends").is_none());
        drop(body);
        assert_eq!(layer.tenants().long_running_open("a"), 0);
        assert_eq!(layer.tenants().flows(), 0);
    }

    #[tokio::test]
    async fn pod_creates_through_a_pod_intake_take_no_seat() {
        let paths = Arc::new(Paths::default());
        for name in ["a", "b"] {
            paths.serving.lock().insert(name.into(), Serving::new());
        }
        paths.pod_intake.lock().push("a".into());
        let layer = FlowControlLayer::new(paths, &tenants_config(1, 0, 1));
        let held = Held::default();
        let service = layer.layer(held.service());
        // Both tenants' seats are taken (one seat for all).
        let busy = tokio::spawn(service.clone().oneshot(get("/tenants/a/api/v1/hold")));
        until(|| layer.tenants().seats_in_use() == 1).await;
        let create = |tenant: &str| {
            let path = format!("/tenants/{tenant}/api/v1/namespaces/d/pods");
            Request::post(path).body(Body::from("{}")).unwrap()
        };
        // a's pod creates wait in its intake, not for a seat; b has no intake.
        let a = service.clone().oneshot(create("a")).await.unwrap();
        assert_eq!(a.status(), StatusCode::OK);
        let b = service.clone().oneshot(create("b")).await.unwrap();
        assert_eq!(b.status(), StatusCode::TOO_MANY_REQUESTS);
        // Other writes of a still take seats.
        let other = Request::post("/tenants/a/api/v1/namespaces/d/configmaps")
            .body(Body::from("{}"))
            .unwrap();
        let other = service.clone().oneshot(other).await.unwrap();
        assert_eq!(other.status(), StatusCode::TOO_MANY_REQUESTS);
        held.release.notify_one();
        assert_eq!(busy.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}
