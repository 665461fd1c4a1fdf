//! Flow control between the clusters one listener serves, in the spirit of kube-apiserver's API
//! Priority and Fairness (APF).
//!
//! Every request belongs to a priority level — the host API's, or the tenants' — and, within it,
//! to a flow: the host, or one tenant. A [`Level`] has a bounded number of seats (requests in
//! execution at once), shared by its flows:
//!
//! - a request takes a free seat at once when its flow has nothing waiting and holds fewer than
//!   its share of seats (`seats_per_flow`);
//! - otherwise it waits in its flow's own queue (bounded; a full queue, or a wait longer than
//!   `queue_wait`, is answered 429 `TooManyRequests` with `Retry-After`, as APF answers);
//! - when a seat comes free, the flows with waiting requests are served in turn (round robin),
//!   skipping those that hold their share already.
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
//! [`FlowControlLayer`] is the `tower` layer; `server::clusters_router` composes it in front of
//! the clusters' routing, and [`Classify`] (implemented by `tenant::Clusters`) says which level
//! and flow a request belongs to.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::{oneshot, watch};
use tower::{Layer, Service, ServiceExt};

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

/// A priority level: seats shared by flows, a bounded queue per flow, and each flow's count of
/// long-running requests.
#[derive(Debug)]
pub struct Level {
    config: LevelConfig,
    queue_wait: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Seats taken, all flows together.
    in_use: usize,
    /// Flows that execute, wait or hold long-running requests (idle flows are forgotten).
    flows: HashMap<String, FlowState>,
    /// Flows with waiting requests, in the order they are served next.
    ring: VecDeque<String>,
    next_waiter: u64,
}

#[derive(Debug, Default)]
struct FlowState {
    executing: usize,
    waiting: VecDeque<Waiter>,
    long_running: usize,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    grant: oneshot::Sender<()>,
}

impl FlowState {
    fn idle(&self) -> bool {
        self.executing == 0 && self.waiting.is_empty() && self.long_running == 0
    }
}

impl State {
    fn forget_if_idle(&mut self, flow: &str) {
        if self.flows.get(flow).is_some_and(FlowState::idle) {
            self.flows.remove(flow);
        }
    }

    /// Give free seats to waiting requests, flow by flow in turn.
    fn dispatch(&mut self, config: &LevelConfig) {
        // Flows passed over in a row because they hold their share: once every flow in the
        // ring has been, nothing more can be dispatched now.
        let mut passed = 0;
        while self.in_use < config.seats && passed < self.ring.len() {
            let Some(name) = self.ring.pop_front() else { break };
            let Some(flow) = self.flows.get_mut(&name) else { continue };
            if flow.executing >= config.seats_per_flow {
                self.ring.push_back(name);
                passed += 1;
                continue;
            }
            let Some(waiter) = flow.waiting.pop_front() else { continue };
            // A waiter leaves the queue itself when it gives up (`Waiting::drop`), so its
            // receiver is still there; should it not be, the seat simply stays free.
            if waiter.grant.send(()).is_ok() {
                flow.executing += 1;
                self.in_use += 1;
                passed = 0;
            }
            if flow.waiting.is_empty() {
                self.forget_if_idle(&name);
            } else {
                self.ring.push_back(name);
            }
        }
    }

    fn release(&mut self, config: &LevelConfig, flow: &str) {
        self.in_use = self.in_use.saturating_sub(1);
        if let Some(state) = self.flows.get_mut(flow) {
            state.executing = state.executing.saturating_sub(1);
        }
        self.forget_if_idle(flow);
        self.dispatch(config);
    }
}

impl Level {
    /// A level with `config`'s limits, whose requests wait at most `queue_wait` for a seat.
    pub fn new(config: LevelConfig, queue_wait: Duration) -> Arc<Level> {
        let config = LevelConfig {
            seats: config.seats.max(1),
            seats_per_flow: config.seats_per_flow.clamp(1, config.seats.max(1)),
            ..config
        };
        Arc::new(Level { config, queue_wait, state: Mutex::default() })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A seat for a request of `flow`: at once if one is free to it, else after waiting in the
    /// flow's queue. Dropping the future gives up its place in the queue (or the seat granted).
    pub async fn seat(self: &Arc<Self>, flow: &str) -> Result<Seat, Refusal> {
        let (id, granted) = {
            let mut guard = self.lock();
            let state = &mut *guard;
            if !state.flows.contains_key(flow) {
                state.flows.insert(flow.to_owned(), FlowState::default());
            }
            let Some(queue) = state.flows.get_mut(flow) else { unreachable!("inserted above") };
            if queue.waiting.is_empty()
                && queue.executing < self.config.seats_per_flow
                && state.in_use < self.config.seats
            {
                queue.executing += 1;
                state.in_use += 1;
                return Ok(Seat { level: self.clone(), flow: flow.to_owned() });
            }
            if queue.waiting.len() >= self.config.queue_length {
                state.forget_if_idle(flow);
                return Err(Refusal::QueueFull);
            }
            let id = state.next_waiter;
            state.next_waiter += 1;
            let (grant, granted) = oneshot::channel();
            queue.waiting.push_back(Waiter { id, grant });
            if queue.waiting.len() == 1 {
                state.ring.push_back(flow.to_owned());
            }
            (id, granted)
        };
        let mut waiting = Waiting { level: self, flow, id, granted, seated: false };
        match tokio::time::timeout(self.queue_wait, &mut waiting.granted).await {
            Ok(Ok(())) => {
                waiting.seated = true;
                Ok(Seat { level: self.clone(), flow: flow.to_owned() })
            }
            // The grant was dropped unsent: only a level torn down does that.
            Ok(Err(_)) => Err(Refusal::TimedOut),
            Err(_) => Err(Refusal::TimedOut),
        }
    }

    /// Count a long-running request of `flow`, if the flow may open another.
    pub fn long_running(self: &Arc<Self>, flow: &str) -> Result<LongRunning, Refusal> {
        let mut state = self.lock();
        let open = state.flows.get(flow).map_or(0, |f| f.long_running);
        if open >= self.config.long_running_per_flow {
            return Err(Refusal::TooManyLongRunning);
        }
        state.flows.entry(flow.to_owned()).or_default().long_running += 1;
        Ok(LongRunning { level: self.clone(), flow: flow.to_owned() })
    }

    /// Seats taken now, all flows together.
    pub fn seats_in_use(&self) -> usize {
        self.lock().in_use
    }

    /// Requests of `flow` waiting for a seat now.
    pub fn waiting(&self, flow: &str) -> usize {
        self.lock().flows.get(flow).map_or(0, |f| f.waiting.len())
    }

    /// Long-running requests of `flow` open now.
    pub fn long_running_open(&self, flow: &str) -> usize {
        self.lock().flows.get(flow).map_or(0, |f| f.long_running)
    }

    /// Flows the level keeps state for (executing, waiting or holding long-running requests).
    pub fn flows(&self) -> usize {
        self.lock().flows.len()
    }
}

/// A request's place in its flow's queue, while it waits for a seat.
struct Waiting<'a> {
    level: &'a Arc<Level>,
    flow: &'a str,
    id: u64,
    granted: oneshot::Receiver<()>,
    seated: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.seated {
            return;
        }
        let mut state = self.level.lock();
        if let Some(queue) = state.flows.get_mut(self.flow) {
            if let Some(at) = queue.waiting.iter().position(|w| w.id == self.id) {
                queue.waiting.remove(at);
                if queue.waiting.is_empty() {
                    state.ring.retain(|f| f != self.flow);
                }
                state.forget_if_idle(self.flow);
                return;
            }
        }
        // Not in the queue: a seat was granted (under the same lock) that nobody will use.
        self.granted.close();
        if self.granted.try_recv().is_ok() {
            state.release(&self.level.config, self.flow);
        }
    }
}

/// A seat, held while a request executes; dropping it gives the seat to the next waiter.
#[derive(Debug)]
pub struct Seat {
    level: Arc<Level>,
    flow: String,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.level.lock().release(&self.level.config, &self.flow);
    }
}

/// A long-running request counted against its flow's bound while it is open.
#[derive(Debug)]
pub struct LongRunning {
    level: Arc<Level>,
    flow: String,
}

impl Drop for LongRunning {
    fn drop(&mut self) {
        let mut state = self.level.lock();
        if let Some(flow) = state.flows.get_mut(&self.flow) {
            flow.long_running = flow.long_running.saturating_sub(1);
        }
        state.forget_if_idle(&self.flow);
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
    /// Whether the cluster's pod creates wait in a `PodIntake` (`intake.rs`), which is their
    /// flow control: they take no seat then, since what ends their wait (the syncer taking up
    /// stored pods, through the same cluster's API) needs seats of the same flow.
    pub pod_intake: bool,
}

/// Says which flow a request path belongs to.
pub trait Classify: Send + Sync + std::fmt::Debug + 'static {
    /// The flow of a request for `path`.
    fn classify<'a>(&self, path: &'a str) -> Classified<'a>;
}

/// Whether a request is long-running, by kube-apiserver's rules for the verbs and subresources
/// served here: a watch (`GET …/watch/…`, or `GET` with `watch=true` or `watch=1`), or a pod's
/// log. `path` is within the cluster.
pub fn is_long_running(method: &Method, path: &str, query: Option<&str>) -> bool {
    if method != Method::GET {
        return false;
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resource = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    if resource.first() == Some(&"watch") {
        return true;
    }
    let log = matches!(resource, ["namespaces", _, "pods", _, "log"]);
    let watch = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "watch")
        .last()
        .is_some_and(|(_, v)| v == "true" || v == "1");
    log || watch
}

/// Whether a request creates a pod (`POST …/namespaces/<ns>/pods`); `path` is within the
/// cluster.
pub fn is_pod_create(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    method == Method::POST && matches!(segments.as_slice(), ["api", "v1", "namespaces", _, "pods"])
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
        let seat = match level.seat(&flow).await {
            Ok(seat) => seat,
            Err(refusal) => return refused(&flow, refusal),
        };
        let response = respond(inner, request).await;
        drop(seat);
        match open {
            None => response,
            Some(open) => response.map(|body| long_running_body(body, open, served)),
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
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::StatusCode;
    use http_body_util::BodyExt;
    use serde_json::Value;
    use tokio::sync::Notify;

    use super::*;

    fn level(seats: usize, seats_per_flow: usize, queue_length: usize) -> Arc<Level> {
        let config = LevelConfig { seats, seats_per_flow, queue_length, long_running_per_flow: 2 };
        Level::new(config, Duration::from_secs(30))
    }

    /// Yield until `done` holds (the tasks it waits for run on this test's runtime).
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the condition never held");
    }

    fn waiter(
        level: &Arc<Level>,
        flow: &'static str,
    ) -> tokio::task::JoinHandle<Result<Seat, Refusal>> {
        let level = level.clone();
        tokio::spawn(async move { level.seat(flow).await })
    }

    #[tokio::test]
    async fn a_free_seat_is_taken_at_once_and_given_back() {
        let level = level(2, 2, 4);
        let a = level.seat("a").await.unwrap();
        let b = level.seat("a").await.unwrap();
        assert_eq!(level.seats_in_use(), 2);
        drop(a);
        drop(b);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0, "idle flows are forgotten");
    }

    #[tokio::test]
    async fn flows_with_waiting_requests_are_served_in_turn() {
        let level = level(1, 1, 8);
        let first = level.seat("a").await.unwrap();
        // Three of a's requests queue before two of b's.
        let mut queued = Vec::new();
        for (flow, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)] {
            queued.push((format!("{flow}{n}"), waiter(&level, flow)));
            until(|| level.waiting("a") + level.waiting("b") == queued.len()).await;
        }
        drop(first);
        let mut order = Vec::new();
        while !queued.is_empty() {
            // Exactly one waiter has the seat: take it, note it, give the seat back.
            let at = loop {
                if let Some(at) = queued.iter().position(|(_, h)| h.is_finished()) {
                    break at;
                }
                tokio::task::yield_now().await;
            };
            let (name, handle) = queued.remove(at);
            let seat = handle.await.unwrap().unwrap();
            assert_eq!(level.seats_in_use(), 1);
            order.push(name);
            drop(seat);
        }
        assert_eq!(order, ["a1", "b1", "a2", "b2", "a3"]);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_flow_holds_at_most_its_share_and_another_flow_finds_a_seat() {
        let level = level(4, 2, 8);
        let a1 = level.seat("a").await.unwrap();
        let _a2 = level.seat("a").await.unwrap();
        let a3 = waiter(&level, "a");
        until(|| level.waiting("a") == 1).await;
        // b is seated at once although a waits: a holds its share.
        let b = tokio::time::timeout(Duration::from_secs(5), level.seat("b")).await;
        let _b = b.expect("b is seated at once").unwrap();
        assert_eq!(level.seats_in_use(), 3);
        assert!(!a3.is_finished());
        drop(a1);
        assert!(a3.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_other_flows_still_queue() {
        let level = level(1, 1, 2);
        let seat = level.seat("a").await.unwrap();
        let [a1, a2] = [waiter(&level, "a"), waiter(&level, "a")];
        until(|| level.waiting("a") == 2).await;
        assert_eq!(level.seat("a").await.unwrap_err(), Refusal::QueueFull);
        let b = waiter(&level, "b");
        until(|| level.waiting("b") == 1).await;
        // Served in turn: a, b, a.
        drop(seat);
        for handle in [a1, b, a2] {
            drop(handle.await.unwrap().unwrap());
        }
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_request_that_waits_too_long_is_refused_and_leaves_the_queue() {
        let config =
            LevelConfig { seats: 1, seats_per_flow: 1, queue_length: 4, long_running_per_flow: 1 };
        let level = Level::new(config, Duration::from_millis(50));
        let seat = level.seat("a").await.unwrap();
        assert_eq!(level.seat("b").await.unwrap_err(), Refusal::TimedOut);
        assert_eq!(level.waiting("b"), 0);
        drop(seat);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_queue() {
        let level = level(1, 1, 4);
        let seat = level.seat("a").await.unwrap();
        let gone = waiter(&level, "b");
        let stays = waiter(&level, "c");
        until(|| level.waiting("b") == 1 && level.waiting("c") == 1).await;
        gone.abort();
        until(|| level.waiting("b") == 0).await;
        drop(seat);
        // The seat goes to the waiter still there, not to the one gone.
        let seat = stays.await.unwrap().unwrap();
        assert_eq!(level.seats_in_use(), 1);
        drop(seat);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_seat_granted_to_a_waiter_that_gave_up_is_given_back() {
        let level = level(1, 1, 4);
        let seat = level.seat("a").await.unwrap();
        let gone = waiter(&level, "b");
        until(|| level.waiting("b") == 1).await;
        // The seat is granted to the waiter, which is cancelled before it runs again.
        drop(seat);
        assert_eq!(level.seats_in_use(), 1);
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn long_running_requests_are_bounded_per_flow() {
        let level = level(1, 1, 1);
        let one = level.long_running("a").unwrap();
        let _two = level.long_running("a").unwrap();
        assert_eq!(level.long_running("a").unwrap_err(), Refusal::TooManyLongRunning);
        assert!(level.long_running("b").is_ok(), "another flow has its own bound");
        // They take no seat.
        assert_eq!(level.seats_in_use(), 0);
        drop(one);
        assert_eq!(level.long_running_open("a"), 1);
        assert!(level.long_running("a").is_ok());
    }

    #[test]
    fn long_running_requests_are_watches_and_logs() {
        let get = Method::GET;
        let cases = [
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=true"), true),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=1"), true),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=false"), false),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=true&watch=false"), false),
            (&get, "/api/v1/watch/namespaces/d/configmaps", None, true),
            (&get, "/apis/apps/v1/watch/deployments", None, true),
            (&get, "/apis/apps/v1/deployments", Some("limit=5"), false),
            (&get, "/api/v1/namespaces/d/pods/p/log", Some("follow=true"), true),
            (&get, "/api/v1/namespaces/d/pods/p/log", None, true),
            (&get, "/api/v1/namespaces/d/pods/p", None, false),
            (&Method::POST, "/api/v1/namespaces/d/configmaps", Some("watch=true"), false),
            (&get, "/healthz", Some("watch=true"), false),
            (&get, "/version", None, false),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(is_long_running(method, path, query), want, "{method} {path}?{query:?}");
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
    }

    impl Classify for Paths {
        fn classify<'a>(&self, path: &'a str) -> Classified<'a> {
            if path == "/healthz" {
                return Classified { flow: Flow::Exempt, path, pod_intake: false };
            }
            let Some(rest) = path.strip_prefix("/tenants/") else {
                return Classified { flow: Flow::Host, path, pod_intake: false };
            };
            let name = rest.split('/').next().unwrap_or_default();
            let serving = self.serving.lock().unwrap();
            let flow = match serving.get(name) {
                Some(s) => Flow::Tenant { name: name.to_owned(), served: s.served() },
                None => Flow::Unserved,
            };
            let pod_intake = self.pod_intake.lock().unwrap().iter().any(|t| t == name);
            Classified { flow, path: &rest[name.len()..], pod_intake }
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
        paths.serving.lock().unwrap().insert("a".into(), Serving::new());
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
    async fn a_client_gone_mid_request_gives_its_seat_back() {
        let paths = Arc::new(Paths::default());
        paths.serving.lock().unwrap().insert("a".into(), Serving::new());
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
        paths.serving.lock().unwrap().insert("a".into(), Serving::new());
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
        paths.serving.lock().unwrap().remove("a");
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
            paths.serving.lock().unwrap().insert(name.into(), Serving::new());
        }
        paths.pod_intake.lock().unwrap().push("a".into());
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

    #[test]
    fn pod_creates_are_posts_to_a_namespaces_pods() {
        assert!(is_pod_create(&Method::POST, "/api/v1/namespaces/d/pods"));
        assert!(!is_pod_create(&Method::GET, "/api/v1/namespaces/d/pods"));
        assert!(!is_pod_create(&Method::POST, "/api/v1/namespaces/d/pods/p/binding"));
        assert!(!is_pod_create(&Method::POST, "/api/v1/namespaces/d/configmaps"));
        assert!(!is_pod_create(&Method::POST, "/apis/apps/v1/namespaces/d/deployments"));
    }
}
