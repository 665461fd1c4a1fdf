//! Every cluster one listener serves: the host API at the root, and each tenant's API under
//! `/tenants/<name>`. It also tells flow control which flow a request belongs to, and ends a
//! tenant's long-running requests when the tenant stops being served.
//!
//! A tenant may be mounted *dormant*: served, with nothing of its cluster open. With
//! [`Clusters::set_idle`], a tenant that no request has reached for the idle time and that
//! holds no request open (a watch, a log stream) is closed: its `Server` is let go, so its
//! store and everything over it close, and [`Wake::closed`] stops what runs beside it. The next
//! request for it opens it again through [`Wake::open`] before going on; concurrent requests
//! share one opening. Only requests that come through the listener count as use: the
//! in-process controllers beside a tenant (its syncer) never keep it open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::{Mutex, RwLock};

use axum::extract::Request;
use axum::response::Response;

use super::Server;
use crate::flowcontrol::{Classified, Classify, Flow, ObjectCount, Serving};
use crate::status::ApiError;
use crate::tls::TENANT_DOMAIN;

/// The path prefix of tenants' APIs.
pub const TENANTS_PREFIX: &str = "/tenants/";

/// Opens a dormant tenant's cluster, and hears when one is closed: given by whoever mounts
/// tenants (the tenant manager).
pub trait Wake: Send + Sync + std::fmt::Debug {
    /// Open tenant `name`'s cluster (closed while idle, or mounted dormant). Its last cluster
    /// may still be closing, held by a request under way: the opening waits for its store (as
    /// `carrel_store::Options::lock_wait` does).
    fn open(&self, name: &str) -> BoxFuture<'static, Result<Arc<Server>, ApiError>>;
    /// Tenant `name`'s cluster was closed while idle: stop what runs beside it.
    fn closed(&self, name: &str);
}

/// Where requests for tenants this listener does not serve go, where several API replicas
/// serve tenants between them: given by whoever knows which replica serves which tenant.
pub trait Forward: Send + Sync + std::fmt::Debug {
    /// Answer `request`, for tenant `name`, which is not served here: forwarded to the replica
    /// that serves it, or answered for it (a tenant being moved, or one whose replica has not
    /// taken it up yet); given back when no replica serves the tenant, to be answered as for a
    /// tenant that does not exist. A request another replica forwarded (marked
    /// [`crate::peer::FromReplica`]) is never forwarded again.
    fn forward(&self, name: &str, request: Request) -> Forwarded;
}

/// What [`Forward::forward`] did with a request.
pub enum Forwarded {
    /// It is answered by this future.
    Answered(BoxFuture<'static, Response>),
    /// No replica serves its tenant: here it is back.
    NotServed(Box<Request>),
}

impl std::fmt::Debug for Forwarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Forwarded::Answered(_) => f.write_str("Answered"),
            Forwarded::NotServed(request) => f.debug_tuple("NotServed").field(request).finish(),
        }
    }
}

/// How a listener's replica recognises the others, and where it sends their tenants' requests.
#[derive(Clone, Debug)]
pub struct Replicas {
    /// The CA of every replica's certificates: a client certificate from it in
    /// [`crate::peer::REPLICAS_GROUP`] is another replica's.
    pub ca: rustls::pki_types::CertificateDer<'static>,
    /// Where requests for tenants served elsewhere go.
    pub forward: Arc<dyn Forward>,
}

/// When idle tenants are closed, and what opens them again.
#[derive(Clone, Debug)]
pub struct Idle {
    /// How long a tenant goes without requests before it is closed.
    pub after: Duration,
    /// What opens it again.
    pub wake: Arc<dyn Wake>,
}

/// The host API and the tenants' APIs, by tenant name.
#[derive(Debug)]
pub struct Clusters {
    host: Arc<Server>,
    tenants: RwLock<HashMap<String, Arc<Tenant>>>,
    /// The tenants whose cluster is open, so that going over them costs nothing per dormant one.
    open: Arc<OpenSet>,
    idle: OnceLock<Idle>,
    /// The domain tenants are served under by TLS server name; [`TENANT_DOMAIN`] unless set.
    tenant_domain: OnceLock<String>,
    /// The other replicas, where there are any.
    replicas: OnceLock<Replicas>,
}

/// A mounted tenant: its cluster, what ends its long-running requests when it is dropped (and
/// counts the requests under way), and when a request last reached it.
#[derive(Debug)]
struct Tenant {
    state: Mutex<State>,
    serving: Serving,
    /// Milliseconds since [`epoch`].
    last_used: AtomicU64,
}

/// The opening of a dormant tenant, shared by the requests that wait for it.
type Opening = Shared<BoxFuture<'static, Result<Arc<Server>, ApiError>>>;

enum State {
    /// Its cluster is open.
    Open(Arc<Server>),
    /// Nothing of it is open (its last cluster may still be closing: see [`Wake::open`]).
    Dormant,
    /// Being opened.
    Opening(Opening),
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Open(_) => "Open",
            State::Dormant => "Dormant",
            State::Opening(_) => "Opening",
        })
    }
}

/// Where a request path goes.
pub(crate) enum Route {
    /// To this open cluster.
    Open(Arc<Server>),
    /// To tenant `0`, mounted dormant: open it first ([`Clusters::wake`]).
    Dormant(String),
    /// To a tenant that is not served.
    Unknown,
}

/// The time [`Tenant::last_used`] counts from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Tenant {
    fn new(state: State) -> Arc<Tenant> {
        Arc::new(Tenant {
            state: Mutex::new(state),
            serving: Serving::new(),
            last_used: AtomicU64::new(now_ms()),
        })
    }

    fn touch(&self) {
        self.last_used.store(now_ms(), Ordering::Relaxed);
    }

    /// How long since a request last reached it.
    fn unused_for(&self) -> Duration {
        Duration::from_millis(now_ms().saturating_sub(self.last_used.load(Ordering::Relaxed)))
    }

    fn open_server(&self) -> Option<Arc<Server>> {
        match &*self.state.lock() {
            State::Open(server) => Some(server.clone()),
            _ => None,
        }
    }
}

impl Clusters {
    /// Serve `host` at the root, and no tenant yet.
    pub fn new(host: Arc<Server>) -> Clusters {
        Clusters {
            host,
            tenants: RwLock::default(),
            open: Arc::default(),
            idle: OnceLock::new(),
            tenant_domain: OnceLock::new(),
            replicas: OnceLock::new(),
        }
    }

    /// Serve tenant `t` to requests whose TLS server name is `t.<domain>` (by default
    /// `t.`[`TENANT_DOMAIN`]). Only the first call has an effect.
    pub fn set_tenant_domain(&self, domain: &str) {
        let _ = self.tenant_domain.set(domain.trim_matches('.').to_ascii_lowercase());
    }

    /// The domain tenants are served under by TLS server name.
    pub fn tenant_domain(&self) -> &str {
        self.tenant_domain.get().map_or(TENANT_DOMAIN, String::as_str)
    }

    /// Close tenants idle for `idle.after` and open them again with `idle.wake` (see the
    /// [module](self)); without this, tenants stay open while they are served, and none may be
    /// mounted dormant. Only the first call has an effect; tenants already open are closed once
    /// idle from their next request on.
    pub fn set_idle(&self, idle: Idle) {
        let _ = self.idle.set(idle);
    }

    /// Serve beside other replicas: requests they forward are believed as theirs, and requests
    /// for tenants not served here go where `replicas` says. Only the first call has an effect.
    pub fn set_replicas(&self, replicas: Replicas) {
        let _ = self.replicas.set(replicas);
    }

    /// The other replicas, where there are any.
    pub(crate) fn replicas(&self) -> Option<&Replicas> {
        self.replicas.get()
    }

    /// The host API.
    pub fn host(&self) -> &Arc<Server> {
        &self.host
    }

    /// A tenant's API, if it is served and open.
    pub fn tenant(&self, name: &str) -> Option<Arc<Server>> {
        self.tenants.read().get(name)?.open_server()
    }

    /// Whether a tenant is served, open or dormant.
    pub fn contains(&self, name: &str) -> bool {
        self.tenants.read().contains_key(name)
    }

    /// Serve a tenant's API, open (replacing any it had, whose watches and log streams end).
    /// Within a Tokio runtime and with [`Clusters::set_idle`], it is closed once idle.
    pub fn insert(&self, name: &str, server: Arc<Server>) {
        let tenant = Tenant::new(State::Open(server));
        let replaced = self.tenants.write().insert(name.to_owned(), tenant.clone());
        drop(replaced);
        self.open.add(name, &tenant);
        self.close_when_idle(name, &tenant);
    }

    /// Serve a tenant dormant: its cluster is opened by the first request for it. Without
    /// [`Clusters::set_idle`] there is nothing to open it with, and it is not mounted: false.
    pub fn insert_dormant(&self, name: &str) -> bool {
        if self.idle.get().is_none() {
            return false;
        }
        let tenant = Tenant::new(State::Dormant);
        let replaced = self.tenants.write().insert(name.to_owned(), tenant);
        if let Some(replaced) = replaced {
            self.open.remove(name, &replaced);
        }
        true
    }

    /// Stop serving a tenant's API: its watches and log streams end now. Its cluster, if open,
    /// is returned so that its store can be closed.
    pub fn remove(&self, name: &str) -> Option<Arc<Server>> {
        let removed = self.tenants.write().remove(name)?;
        self.open.remove(name, &removed);
        let server = removed.open_server();
        // An opening under way finds the tenant gone and lets its cluster go.
        *removed.state.lock() = State::Dormant;
        server
    }

    /// How many tenants are served, open or dormant.
    pub fn count(&self) -> usize {
        self.tenants.read().len()
    }

    /// How many tenants' clusters are open.
    pub fn open_count(&self) -> usize {
        self.open.0.lock().len()
    }

    /// The names of the tenants served, open or dormant.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tenants.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// The tenants whose cluster is open, with it.
    pub fn open(&self) -> Vec<(String, Arc<Server>)> {
        let mut open: Vec<(String, Arc<Server>)> = self
            .open
            .0
            .lock()
            .iter()
            .filter_map(|(name, tenant)| Some((name.clone(), tenant.upgrade()?.open_server()?)))
            .collect();
        open.sort_by(|a, b| a.0.cmp(&b.0));
        open
    }

    /// Where a request path goes; a tenant's use is counted from here.
    pub(crate) fn route(&self, path: &str) -> Route {
        let Some(rest) = path.strip_prefix(TENANTS_PREFIX) else {
            return Route::Open(self.host.clone());
        };
        let name = rest.split('/').next().unwrap_or_default();
        let tenants = self.tenants.read();
        let Some(tenant) = tenants.get(name) else { return Route::Unknown };
        tenant.touch();
        match tenant.open_server() {
            Some(server) => Route::Open(server),
            None => Route::Dormant(name.to_owned()),
        }
    }

    /// Tenant `name`'s cluster, opened if it is dormant; `None` if the tenant is not served.
    /// Requests that come while it is being opened wait for the same opening. Opening may fail
    /// (a store that cannot be opened now, no room for its files): the tenant stays dormant, and
    /// the next request tries again.
    pub async fn wake(self: &Arc<Self>, name: &str) -> Option<Result<Arc<Server>, ApiError>> {
        let tenant = self.tenants.read().get(name)?.clone();
        let opening = {
            let mut state = tenant.state.lock();
            match &mut *state {
                State::Open(server) => return Some(Ok(server.clone())),
                State::Opening(opening) => opening.clone(),
                State::Dormant => {
                    let Some(idle) = self.idle.get() else {
                        return Some(Err(ApiError::unavailable(format!(
                            "the cluster of tenant {name} is not open"
                        ))));
                    };
                    let opening = open(idle.wake.clone(), name.to_owned());
                    *state = State::Opening(opening.clone());
                    opening
                }
            }
        };
        let opened = opening.await;
        let mounted = self.tenants.read().get(name).is_some_and(|t| Arc::ptr_eq(t, &tenant));
        let mut state = tenant.state.lock();
        if let State::Opening(_) = &*state {
            *state = match &opened {
                Ok(server) if mounted => State::Open(server.clone()),
                _ => State::Dormant,
            };
            drop(state);
            match &opened {
                Ok(_) if mounted => {
                    tracing::debug!(tenant = %name, "opened the idle tenant's cluster");
                    // Opened for a reason (a request, a host change, its controllers due): what
                    // runs for it gets the idle time from now, not from its last request.
                    tenant.touch();
                    self.open.add(name, &tenant);
                    self.close_when_idle(name, &tenant);
                }
                Ok(_) => {
                    // Removed while it opened: what it started stops.
                    if let Some(idle) = self.idle.get() {
                        idle.wake.closed(name);
                    }
                    return None;
                }
                Err(e) => tracing::warn!(tenant = %name, error = %e, "opening the tenant failed"),
            }
        } else if !mounted {
            return None;
        }
        Some(opened)
    }

    /// Close `tenant`'s cluster once it has been idle for the idle time: a timer that ends
    /// when it is closed (or removed), so dormant tenants cost no task.
    fn close_when_idle(&self, name: &str, tenant: &Arc<Tenant>) {
        let (Some(idle), Ok(runtime)) = (self.idle.get(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let (idle, name, tenant) = (idle.clone(), name.to_owned(), Arc::downgrade(tenant));
        let open = self.open.clone();
        runtime.spawn(async move {
            loop {
                let Some(wait) =
                    tenant.upgrade().map(|t| idle.after.saturating_sub(t.unused_for()))
                else {
                    return;
                };
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                    continue;
                }
                let Some(tenant) = tenant.upgrade() else { return };
                match close_if_idle(&tenant) {
                    Closed::Yes(server) => {
                        open.remove(&name, &tenant);
                        idle.wake.closed(&name);
                        tracing::debug!(tenant = %name, "closed the idle tenant's cluster");
                        // The store checkpoints as it closes: not on an async worker.
                        drop(tokio::task::spawn_blocking(move || drop(server)));
                        return;
                    }
                    Closed::NotOpen => return,
                    // A watch or a log stream is open: look again an idle time later.
                    Closed::InUse => {
                        tenant.touch();
                    }
                }
            }
        });
    }
}

/// The tenants whose cluster is open, by name.
#[derive(Debug, Default)]
struct OpenSet(Mutex<HashMap<String, Weak<Tenant>>>);

impl OpenSet {
    fn add(&self, name: &str, tenant: &Arc<Tenant>) {
        self.0.lock().insert(name.to_owned(), Arc::downgrade(tenant));
    }

    /// `tenant`, mounted as `name`, is closed or no longer served (a tenant mounted under the
    /// name since stays).
    fn remove(&self, name: &str, tenant: &Arc<Tenant>) {
        let mut open = self.0.lock();
        if open.get(name).is_some_and(|t| std::ptr::eq(t.as_ptr(), Arc::as_ptr(tenant))) {
            open.remove(name);
        }
    }
}

enum Closed {
    Yes(Arc<Server>),
    NotOpen,
    InUse,
}

/// Make `tenant` dormant if no request is under way; its cluster, to be let go.
fn close_if_idle(tenant: &Tenant) -> Closed {
    let mut state = tenant.state.lock();
    // A request counts from flow control's classification, before it reaches `route`: one
    // counted now finds the tenant dormant and opens it again.
    if tenant.serving.in_use() > 0 {
        return Closed::InUse;
    }
    let State::Open(server) = &*state else { return Closed::NotOpen };
    let server = server.clone();
    *state = State::Dormant;
    Closed::Yes(server)
}

/// Open tenant `name` with `wake`, as one future the requests that wait for it share.
fn open(wake: Arc<dyn Wake>, name: String) -> Opening {
    async move { wake.open(&name).await }.boxed().shared()
}

impl Classify for Clusters {
    /// The host's health probes are exempt; everything else at the root is the host's flow; a
    /// served tenant's paths are its own flow, which lasts while it is served; paths under the
    /// tenants' prefix that name no served tenant share one flow.
    fn classify<'a>(&self, path: &'a str) -> Classified<'a> {
        let Some(rest) = path.strip_prefix(TENANTS_PREFIX) else {
            let flow = if super::is_health(path) { Flow::Exempt } else { Flow::Host };
            let objects: Arc<dyn ObjectCount> = self.host.api().clone();
            let pod_intake = self.host.has_pod_intake();
            return Classified { flow, path, pod_intake, objects: Some(objects) };
        };
        let name = rest.split('/').next().unwrap_or_default();
        let within = &rest[name.len()..];
        let tenants = self.tenants.read();
        let (flow, pod_intake, objects) = match tenants.get(name) {
            Some(tenant) => {
                // Counted as under way from here (see `close_if_idle`).
                let served = tenant.serving.served();
                tenant.touch();
                let server = tenant.open_server();
                (
                    Flow::Tenant { name: name.to_owned(), served },
                    server.as_ref().is_some_and(|s| s.has_pod_intake()),
                    server.map(|s| s.api().clone() as Arc<dyn ObjectCount>),
                )
            }
            None => (Flow::Unserved, false, None),
        };
        Classified { flow, path: within, pod_intake, objects }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use std::sync::atomic::{AtomicBool, AtomicUsize};

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use carrel_store::{Options, SledStore};
    use http_body_util::BodyExt;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::flowcontrol::FlowConfig;
    use crate::http::clusters_router_with;
    use crate::Api;

    /// Waits for the tenant's last store, which a request may still hold, as the manager does.
    fn closing_waited() -> Options {
        Options { lock_wait: Duration::from_secs(5), ..Options::create() }
    }

    fn api(dir: &tempfile::TempDir, name: &str) -> Arc<Api> {
        let store = SledStore::open(dir.path().join(name), Options::create()).unwrap();
        Arc::new(Api::new(Arc::new(store)).unwrap())
    }

    /// The host and tenants `a` and `b`, each over its own store.
    fn clusters(dir: &tempfile::TempDir) -> Arc<Clusters> {
        let host = api(dir, "host");
        let clusters = Arc::new(Clusters::new(Arc::new(Server::new(host, ""))));
        for name in ["a", "b"] {
            let server = Server::new(api(dir, name), &format!("/tenants/{name}"));
            clusters.insert(name, Arc::new(server));
        }
        clusters
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).unwrap()
    }

    /// Opens tenants' stores under a directory, counting openings and closings; fails the next
    /// opening when told to.
    #[derive(Debug)]
    struct Reopen {
        dir: std::path::PathBuf,
        opened: AtomicUsize,
        closed: AtomicUsize,
        fail_next: AtomicBool,
    }

    impl Reopen {
        fn new(dir: &tempfile::TempDir) -> Arc<Reopen> {
            Arc::new(Reopen {
                dir: dir.path().to_owned(),
                opened: AtomicUsize::new(0),
                closed: AtomicUsize::new(0),
                fail_next: AtomicBool::new(false),
            })
        }
    }

    impl Wake for Reopen {
        fn open(&self, name: &str) -> BoxFuture<'static, Result<Arc<Server>, ApiError>> {
            self.opened.fetch_add(1, Ordering::SeqCst);
            let fail = self.fail_next.swap(false, Ordering::SeqCst);
            let (path, name) = (self.dir.join(name), name.to_owned());
            Box::pin(async move {
                if fail {
                    return Err(ApiError::unavailable("no room to open it"));
                }
                let store =
                    tokio::task::spawn_blocking(move || SledStore::open(&path, closing_waited()))
                        .await
                        .unwrap()
                        .map_err(|e| ApiError::internal(e.to_string()))?;
                let api = Arc::new(Api::new(Arc::new(store))?);
                Ok(Arc::new(Server::new(api, &format!("/tenants/{name}"))))
            })
        }

        fn closed(&self, _name: &str) {
            self.closed.fetch_add(1, Ordering::SeqCst);
        }
    }

    const IDLE: Duration = Duration::from_millis(200);

    /// The host, and tenant `a` opened by `reopen`, closed after [`IDLE`].
    async fn idle_clusters(dir: &tempfile::TempDir, reopen: &Arc<Reopen>) -> Arc<Clusters> {
        let host = api(dir, "host");
        let clusters = Arc::new(Clusters::new(Arc::new(Server::new(host, ""))));
        clusters.set_idle(Idle { after: IDLE, wake: reopen.clone() });
        let server = reopen.open("a").await.unwrap();
        clusters.insert("a", server);
        clusters
    }

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..500 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what} did not happen within 5 s");
    }

    async fn status_and_body(router: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn create_config_map(name: &str) -> Request<Body> {
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"kept": "yes"}});
        Request::post("/tenants/a/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_idle_tenant_is_closed_and_its_next_requests_open_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let reopen = Reopen::new(&dir);
        let clusters = idle_clusters(&dir, &reopen).await;
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        let (status, _) = status_and_body(&router, create_config_map("before")).await;
        assert_eq!(status, StatusCode::CREATED);
        let store = Arc::downgrade(clusters.tenant("a").unwrap().api().store());
        until("the idle tenant closed", || clusters.tenant("a").is_none()).await;
        assert!(clusters.contains("a"), "a closed tenant is still served");
        assert_eq!(clusters.names(), vec!["a".to_owned()]);
        assert!(clusters.open().is_empty());
        assert_eq!(clusters.open_count(), 0);
        until("its store let go", || store.strong_count() == 0).await;
        assert_eq!(reopen.closed.load(Ordering::SeqCst), 1);

        // Eight requests at once: one opening, every one answered from the same store.
        let path = "/tenants/a/api/v1/namespaces/default/configmaps/before";
        let reads = (0..8).map(|_| status_and_body(&router, get(path)));
        for (status, body) in futures::future::join_all(reads).await {
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["data"]["kept"], "yes");
        }
        assert_eq!(reopen.opened.load(Ordering::SeqCst), 2);
        assert!(clusters.tenant("a").is_some());
        assert_eq!(clusters.open_count(), 1);
        assert_eq!(clusters.open().len(), 1);
        // Open again, it writes, and is closed again once idle.
        let (status, _) = status_and_body(&router, create_config_map("after")).await;
        assert_eq!(status, StatusCode::CREATED);
        until("the tenant closed again", || clusters.tenant("a").is_none()).await;
        assert_eq!(reopen.closed.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_open_watch_keeps_its_tenant_open() {
        let dir = tempfile::tempdir().unwrap();
        let reopen = Reopen::new(&dir);
        let clusters = idle_clusters(&dir, &reopen).await;
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        let watch = "/tenants/a/api/v1/namespaces/default/configmaps?watch=true";
        let response = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        tokio::time::sleep(IDLE * 4).await;
        assert!(clusters.tenant("a").is_some(), "closed under an open watch");
        // The watch still sees writes.
        let mut body = response.into_body();
        let (status, _) = status_and_body(&router, create_config_map("seen")).await;
        assert_eq!(status, StatusCode::CREATED);
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame()).await.unwrap();
        let text = frame.unwrap().unwrap().into_data().unwrap();
        assert!(String::from_utf8_lossy(&text).contains("\"seen\""));
        drop(body);
        until("the tenant closed once its watch ended", || clusters.tenant("a").is_none()).await;
        assert_eq!(reopen.opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_opening_is_a_503_and_the_next_request_tries_again() {
        let dir = tempfile::tempdir().unwrap();
        let reopen = Reopen::new(&dir);
        let clusters = idle_clusters(&dir, &reopen).await;
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        until("the idle tenant closed", || clusters.tenant("a").is_none()).await;
        reopen.fail_next.store(true, Ordering::SeqCst);
        let namespaces = "/tenants/a/api/v1/namespaces";
        let (status, body) = status_and_body(&router, get(namespaces)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["reason"], "ServiceUnavailable");
        assert!(clusters.tenant("a").is_none());
        let (status, _) = status_and_body(&router, get(namespaces)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(reopen.opened.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_tenant_mounted_dormant_is_opened_by_its_first_request_and_removing_it_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let reopen = Reopen::new(&dir);
        let clusters = idle_clusters(&dir, &reopen).await;
        assert!(clusters.insert_dormant("b"));
        assert!(clusters.tenant("b").is_none());
        assert_eq!(reopen.opened.load(Ordering::SeqCst), 1, "mounting opened nothing");
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        let (status, _) = status_and_body(&router, get("/tenants/b/api/v1/namespaces")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(clusters.tenant("b").is_some());
        let open_b = |clusters: &Clusters| clusters.open().iter().any(|(name, _)| name == "b");
        assert!(open_b(&clusters));
        assert!(clusters.remove("b").is_some());
        assert!(!clusters.contains("b"));
        assert!(!open_b(&clusters));
        let (status, _) = status_and_body(&router, get("/tenants/b/api/v1/namespaces")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        // Without an idle time, nothing is mounted dormant.
        let plain = Clusters::new(clusters.host().clone());
        assert!(!plain.insert_dormant("c"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_tenants_watches_are_bounded_and_another_tenant_is_still_served() {
        let dir = tempfile::tempdir().unwrap();
        let config = FlowConfig::for_cores(2);
        let limit = config.tenants.long_running_per_flow;
        let router = clusters_router_with(clusters(&dir), &config);
        let watch = "/tenants/a/api/v1/namespaces/default/configmaps?watch=true";
        let mut open = Vec::new();
        let mut refused = 0;
        for _ in 0..1_000 {
            let response = router.clone().oneshot(get(watch)).await.unwrap();
            match response.status() {
                StatusCode::OK => open.push(response),
                StatusCode::TOO_MANY_REQUESTS => {
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(status["reason"], "TooManyRequests");
                    refused += 1;
                }
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!(open.len(), limit);
        assert_eq!(refused, 1_000 - limit);
        // Tenant b reads and watches; tenant a still reads.
        let b = router.clone().oneshot(get("/tenants/b/api/v1/namespaces")).await.unwrap();
        assert_eq!(b.status(), StatusCode::OK);
        let b_watch = "/tenants/b/api/v1/namespaces/default/configmaps?watch=true";
        let b_watch = router.clone().oneshot(get(b_watch)).await.unwrap();
        assert_eq!(b_watch.status(), StatusCode::OK);
        let a = router.clone().oneshot(get("/tenants/a/api/v1/namespaces")).await.unwrap();
        assert_eq!(a.status(), StatusCode::OK);
        // A watch closed makes room for another.
        open.pop();
        let again = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_watch_ends_when_its_tenant_is_no_longer_served() {
        let dir = tempfile::tempdir().unwrap();
        let clusters = clusters(&dir);
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        let api = clusters.tenant("a").unwrap().api().clone();
        let before = Arc::strong_count(&api);
        let watch = "/tenants/a/api/v1/namespaces/default/configmaps?watch=true";
        let response = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        // Open while the tenant is served (no events: nothing is written).
        let early = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
        assert!(early.is_err(), "the watch ended while its tenant was served");
        assert!(Arc::strong_count(&api) > before, "the watch holds the tenant's API");
        let removed = clusters.remove("a").unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(frame) = body.frame().await {
                frame.unwrap();
            }
        })
        .await;
        assert!(end.is_ok(), "the watch did not end when its tenant went");
        drop(body);
        // The watch's task lets go of the tenant's API.
        for _ in 0..500 {
            if Arc::strong_count(&api) == before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(Arc::strong_count(&api), before);
        drop(removed);
        // Requests for the tenant are now 404.
        let gone = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    }
}
