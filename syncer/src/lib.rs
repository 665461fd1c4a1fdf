//! The syncer: one tenant's pods become host pods in the tenant's host namespace, pinned to the
//! MIG devices claimed for them; status, events and deletions come back.
//!
//! A [`Syncer`] watches the tenant's pods and the host pods it made (both through kube clients,
//! so it runs the same inside `carrel up` and as `carrel-syncer` against a real host cluster).
//! Every change queues the tenant pod's key; [`Syncer::reconcile`] brings the two sides in line
//! from what both clusters hold, so a restarted syncer picks up where the last one stopped.
//!
//! The host side is watched once for every syncer of a process ([`HostWatch`]): each syncer is
//! sent the changes to its own tenant's host objects, and reads caches of its own objects.
//!
//! One module per synced kind:
//!
//! - `pods`: a tenant pod and its host pod. Tenant pod without host pod: copy what it references,
//!   claim its GPUs ([`placement`]), create the host pod ([`translate::host_pod`]); if a host pod
//!   had been made for it (the tenant pod shows it scheduled), the host pod was deleted under the
//!   tenant: the tenant pod fails. Host pod without tenant pod: delete it and release its claims.
//!   Both: the host pod's status goes to the tenant pod, the tenant pod is bound to the node's
//!   virtual node, and a finished host pod's claims are released.
//! - `copies`: the host copies of the ConfigMaps and Secrets pods reference, which follow their
//!   tenant objects and leave the host with them.
//! - `claims`: a host PersistentVolumeClaim for each tenant claim, made when the claim is (or
//!   when a pod needs it first), deleted with it; its binding and status go up to the tenant's.
//! - `class_mirrors`: the tenant's mirrors of the host's StorageClasses and IngressClasses.
//! - `network_policies`: the isolation policy of the tenant's host namespace, and a host
//!   NetworkPolicy for each of the tenant's, deleted with it.
//! - `services`: a host Service for each tenant Service (but the tenant's API and DNS), deleted
//!   with it; the tenant Service shows the host's cluster IP, node ports and load balancer.
//! - `endpoint_slices`: the hand-written EndpointSlices of a Service that selects nothing, with
//!   the addresses a tenant may point the host at.
//! - `ingresses`: a host Ingress for each tenant Ingress whose hosts the tenant holds
//!   ([`hostnames`]: first writer wins across tenants), deleted with it; its TLS Secrets are
//!   copied and the host's load balancer status comes back.
//! - `tokens`: service-account tokens in host Secrets, renewed and deleted.
//! - `events_up`: host events about host pods, copied up to the tenant.
//! - `virtual_nodes`: the tenant's view of the host nodes its pods run on.
//! - [`placement`]: GPU placement and the claims taken for it.
//!
//! Beside the syncer, not part of it: [`taken_up`] watches both APIs for the tenant pods the
//! syncer has taken up (`carrel up` gives their room in its intake window back).
//!
//! Host names come from [`host_names`] only; translations between tenant and host objects are
//! pure, in [`translate`]. What the syncer does on the host, as RBAC rules, is in [`rbac`].

mod claims;
mod class_mirrors;
mod copies;
mod endpoint_slices;
mod events_up;
pub mod host_names;
pub mod host_watch;
pub mod hostnames;
mod ingresses;
mod network_policies;
mod passes;
pub mod placement;
mod pods;
pub mod rbac;
mod services;
pub mod taken_up;
mod tokens;
pub mod translate;
mod virtual_nodes;

pub use host_watch::HostWatch;
use host_watch::{Fed, Listener, Subscription};
use pods::finished;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::scheduler::{scheduler, ScheduleRequest};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};

use carrel_events::{EventTarget, EventType, Recorder};
use carrel_gpu::requests::{gpu_requests, WHOLE_GPU};
use carrel_gpu::Holder;

/// What went wrong talking to a cluster.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Reading or writing the claim Leases failed.
    #[error(transparent)]
    Leases(#[from] carrel_gpu::leases::LeaseError),
    /// An object did not have the shape its kind promises.
    #[error("decoding a {kind}: {source}")]
    Decode {
        /// The kind.
        kind: &'static str,
        /// The decoder's complaint.
        source: serde_json::Error,
    },
    /// The host object under the name the syncer derives is someone else's: it does not record
    /// this tenant and tenant object ([`host_names::stands_for`]). It is left alone.
    #[error("host {kind} {name} exists and records another owner: left alone")]
    Taken {
        /// The kind.
        kind: std::borrow::Cow<'static, str>,
        /// The host object's name.
        name: String,
    },
}

/// A syncer's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The tenant's name.
    pub tenant: String,
    /// The host namespace of its workloads (`carrel-<tenant>`).
    pub host_namespace: String,
    /// Its GPU quota, by canonical profile name.
    pub gpu_quota: BTreeMap<String, i64>,
    /// The CA a workload trusts to reach its tenant API (put beside its token).
    pub tenant_ca_pem: Option<String>,
    /// Where workloads reach their tenant API (host, port): their `KUBERNETES_SERVICE_HOST`
    /// and the other variables the kubelet sets for the `kubernetes` Service name it
    /// ([`translate::point_api_at`]). `None` leaves the host kubelet's.
    pub tenant_api: Option<(String, u16)>,
    /// The RuntimeClass of host pods that hold MIG devices: the handler that injects the
    /// devices their CDI annotation names (the GPU Operator's `nvidia`). `None`: the node's
    /// default runtime, which must then be that one.
    pub gpu_runtime_class: Option<String>,
    /// Where host pods reach the tenant's cluster DNS.
    pub cluster_dns: ClusterDns,
    /// How often everything is compared again, whatever the watches said.
    pub resync: Duration,
}

/// A [`Config::tenant_api`] given as HOST:PORT (a host name, an IPv4 address, or an IPv6 one in
/// brackets) that does not read as one.
#[derive(Debug, thiserror::Error)]
#[error("not HOST:PORT: {0}")]
pub struct NotHostPort(String);

/// A [`Config::tenant_api`] given as HOST:PORT (`--tenant-api-address`).
pub fn host_port(text: &str) -> Result<(String, u16), NotHostPort> {
    let (host, port) = text.rsplit_once(':').ok_or_else(|| NotHostPort(text.to_owned()))?;
    let port = port.parse().map_err(|_| NotHostPort(text.to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(NotHostPort(text.to_owned()));
    }
    Ok((host.to_owned(), port))
}

/// Where a tenant's host pods reach its cluster DNS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClusterDns {
    /// At its `kube-system/kube-dns` Service's address, which leads to its DNS (`carrel up`).
    #[default]
    TenantService,
    /// At this address: one DNS Service for every tenant, which tells them apart by the asking
    /// pod's address (`carrel serve --dns-service`).
    At(String),
    /// Nowhere: host pods resolve through their node (`dnsPolicy: Default`), never through
    /// whatever the tenant's `kube-dns` address reaches on the host (on a real host, the host's
    /// own cluster DNS, which knows every tenant's host Services).
    Node,
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A tenant pod, by namespace and name.
type Key = (String, String);

/// One tenant's syncer.
#[derive(Clone)]
pub struct Syncer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer").field("tenant", &self.inner.tenant).finish()
    }
}

struct Inner {
    tenant: String,
    host_namespace: String,
    quota: RwLock<BTreeMap<String, i64>>,
    /// The tolerations the tenant's admin allows its pods to carry to the host.
    allowed_tolerations: RwLock<Vec<carrel_gpu::fit::Toleration>>,
    tenant_ca_pem: Option<String>,
    tenant_api: Option<(String, u16)>,
    gpu_runtime_class: Option<String>,
    cluster_dns: ClusterDns,
    resync: Duration,
    tenant_client: kube::Client,
    /// Writes the syncer's own Events in the tenant.
    recorder: Recorder,
    /// The host side, shared with the other syncers of the process.
    host: HostWatch,
    host_client: kube::Client,
    tenant_pods: Store<Pod>,
    /// The writer of the tenant pods' cache, until [`Syncer::run`] starts the watches.
    tenant_writer: Mutex<Option<reflector::store::Writer<Pod>>>,
    /// The host pods of the tenant, once the syncer runs (kept by [`HostWatch`]).
    host_pods: std::sync::OnceLock<Store<Pod>>,
    /// The host's nodes: virtual nodes follow them, and GPU placement reads their inventories.
    host_nodes: Store<Node>,
    /// Every claim Lease: GPU placement reads the fleet's holders from it, and a change to one
    /// of the tenant's claims (the node agent made its device) triggers its pod's reconcile.
    claim_leases: Store<Lease>,
    /// Requests to reconcile a tenant pod, now or later: the scheduler's input.
    queue: UnboundedSender<ScheduleRequest<Key>>,
    /// An instant before the scheduler's queue was made: what a request due now is dated.
    due: tokio::time::Instant,
    queue_rx: Mutex<Option<UnboundedReceiver<ScheduleRequest<Key>>>>,
    /// The virtual nodes written, each as its tenant is shown it ([`translate::virtual_node_shown`]).
    virtual_nodes: Mutex<HashMap<String, Value>>,
    /// The virtual nodes the tenant cordoned itself ([`translate::tenant_cordoned`]): its pods
    /// are placed elsewhere unless they tolerate a cordon, and the node stays cordoned whatever
    /// its host node does.
    tenant_cordons: Mutex<BTreeSet<String>>,
    /// Told when the quota changes: the virtual nodes show it.
    quota_changed: tokio::sync::Notify,
    /// The host events copied up, so that each version is copied once.
    events_seen: Mutex<events_up::SeenEvents>,
    /// Failed reconciles in a row, per key: the retry backs off.
    failures: Mutex<HashMap<Key, u32>>,
    /// The keys being reconciled now: garbage collection leaves their claims alone, since a
    /// reconcile may be between claiming devices and creating the host pod.
    running: Mutex<HashSet<Key>>,
    /// When the token in each service account's host Secret expires, for those written here.
    tokens: Mutex<HashMap<Key, chrono::DateTime<chrono::Utc>>>,
    /// The host Secrets of the tenant (copies and token Secrets), once they are watched.
    host_secrets: std::sync::OnceLock<Store<Secret>>,
    /// The host claims of the tenant, once they are watched.
    host_claims: std::sync::OnceLock<Store<PersistentVolumeClaim>>,
    /// The host's StorageClasses: host claims are given their classes from them.
    storage_classes: Store<StorageClass>,
    /// True once `storage_classes` holds the host's first list ([`HostWatch::storage_classes_ready`]).
    storage_classes_ready: tokio::sync::watch::Receiver<bool>,
    /// Tenant claims whose last reconcile failed, looked at again shortly.
    claims_to_retry: Mutex<BTreeSet<Key>>,
    /// Whether the tenant may hold host-name claims: unknown (true) until an Ingress pass has
    /// listed them.
    may_hold_hosts: std::sync::atomic::AtomicBool,
}

/// The keys of the objects a relist of a watch has shown so far, between its `Init` and its
/// `InitDone`: what a complete relist did not show was deleted while the watch was away.
#[derive(Debug)]
struct Relist<T>(Option<HashSet<T>>);

impl<T> Default for Relist<T> {
    fn default() -> Self {
        Relist(None)
    }
}

impl<T: Eq + std::hash::Hash> Relist<T> {
    /// The watch lists every object again.
    fn begin(&mut self) {
        self.0 = Some(HashSet::new());
    }

    /// The watch shows the object `key`; remembered only during a relist.
    fn saw<Q: ?Sized + ToOwned<Owned = T>>(&mut self, key: &Q) {
        if let Some(shown) = &mut self.0 {
            shown.insert(key.to_owned());
        }
    }

    /// The keys a relist showed, once it is complete; `None` outside a relist.
    fn end(&mut self) -> Option<HashSet<T>> {
        self.0.take()
    }
}

/// `source.component` and `reportingComponent` of the syncer's own Events in the tenant.
pub const COMPONENT: &str = "carrel-syncer";

impl Syncer {
    /// A syncer between a tenant API (`tenant`, as the tenant's admin) and the host, whose side
    /// it shares with the other syncers on `host`.
    pub fn new(tenant: kube::Client, host: &HostWatch, config: Config) -> Syncer {
        let (tenant_pods, tenant_writer) = reflector::store();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        Syncer {
            inner: Arc::new(Inner {
                tenant: config.tenant,
                host_namespace: config.host_namespace,
                quota: RwLock::new(config.gpu_quota),
                allowed_tolerations: RwLock::default(),
                tenant_ca_pem: config.tenant_ca_pem,
                tenant_api: config.tenant_api,
                gpu_runtime_class: config.gpu_runtime_class,
                cluster_dns: config.cluster_dns,
                resync: config.resync,
                recorder: Recorder::for_component(tenant.clone(), COMPONENT, ""),
                tenant_client: tenant,
                host_client: host.client().clone(),
                host_nodes: host.nodes(),
                claim_leases: host.claim_leases(),
                storage_classes: host.storage_classes().store(),
                storage_classes_ready: host.storage_classes().ready(),
                host: host.clone(),
                tenant_pods,
                tenant_writer: Mutex::new(Some(tenant_writer)),
                host_pods: std::sync::OnceLock::new(),
                queue: tx,
                due: tokio::time::Instant::now(),
                queue_rx: Mutex::new(Some(rx)),
                virtual_nodes: Mutex::default(),
                tenant_cordons: Mutex::default(),
                quota_changed: tokio::sync::Notify::new(),
                events_seen: Mutex::default(),
                failures: Mutex::default(),
                running: Mutex::default(),
                tokens: Mutex::default(),
                host_secrets: std::sync::OnceLock::new(),
                host_claims: std::sync::OnceLock::new(),
                claims_to_retry: Mutex::default(),
                may_hold_hosts: std::sync::atomic::AtomicBool::new(true),
            }),
        }
    }

    /// A syncer with a host side of its own, watching its host namespace only (as
    /// `carrel-syncer` runs one tenant's).
    pub fn standalone(tenant: kube::Client, host: kube::Client, config: Config) -> Syncer {
        let host = HostWatch::in_namespace(host, &config.host_namespace);
        Syncer::new(tenant, &host, config)
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.inner.tenant
    }

    /// Use a new GPU quota from now on (the tenant object changed).
    pub fn set_quota(&self, quota: BTreeMap<String, i64>) {
        *self.inner.quota.write() = quota;
        self.inner.quota_changed.notify_one();
    }

    /// Let tenant pods carry to the host the tolerations `allowed` covers (the tenant's
    /// `spec.allowedTolerations`); until this is called, none. Host pods made from now on follow.
    pub fn set_allowed_tolerations(&self, allowed: Vec<carrel_gpu::fit::Toleration>) {
        *self.inner.allowed_tolerations.write() = allowed;
    }

    fn allowed_tolerations(&self) -> Vec<carrel_gpu::fit::Toleration> {
        self.inner.allowed_tolerations.read().clone()
    }

    /// Watch and reconcile until `stop` turns true. Only the first call runs.
    ///
    /// The syncer subscribes to its tenant's part of the host side as it starts, and is
    /// unsubscribed from all of it when this returns.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let writer = self.inner.tenant_writer.lock().take();
        let rx = self.inner.queue_rx.lock().take();
        let (Some(writer), Some(rx)) = (writer, rx) else {
            return;
        };
        let host = self.inner.host.subscribe(&self.inner.tenant, &self.inner.host_namespace);
        let _ = self.inner.host_pods.set(host.pods.store());
        let _ = self.inner.host_secrets.set(host.secrets.store());
        let _ = self.inner.host_claims.set(host.volume_claims.store());
        let tasks = vec![
            tokio::spawn(self.clone().watch_tenant_pods(writer)),
            tokio::spawn(self.clone().watch_host_pods(host.pods)),
            tokio::spawn(self.clone().watch_claims(host.claims)),
            tokio::spawn(self.clone().watch_host_events(host.events)),
            tokio::spawn(self.clone().watch_host_nodes(host.nodes)),
            tokio::spawn(self.clone().watch_tenant_cordons()),
            tokio::spawn(self.clone().mirror::<ConfigMap>(host.config_maps)),
            tokio::spawn(self.clone().mirror::<Secret>(host.secrets)),
            tokio::spawn(self.clone().sync_claims(host.volume_claims)),
            tokio::spawn(self.clone().mirror_classes(
                self.inner.storage_classes.clone(),
                self.inner.storage_classes_ready.clone(),
                host.storage_classes,
            )),
            tokio::spawn(self.clone().mirror_classes(
                self.inner.host.ingress_classes().store(),
                self.inner.host.ingress_classes().ready(),
                host.ingress_classes,
            )),
            tokio::spawn(self.clone().sync_network_policies(host.network_policies)),
            tokio::spawn(self.clone().sync_services(host.services)),
            tokio::spawn(self.clone().sync_endpoint_slices(host.endpoint_slices)),
            tokio::spawn(self.clone().sync_ingresses(host.ingresses, host.host_releases)),
            tokio::spawn(self.clone().resync_loop()),
            tokio::spawn(self.clone().work(rx)),
        ];
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        for t in &tasks {
            t.abort();
        }
        // The subscriptions end with the tasks that hold them: once these are done, nothing of
        // the tenant is left subscribed.
        for t in tasks {
            let _ = t.await;
        }
    }

    /// The host pods of the tenant cached now (none before [`Syncer::run`]).
    fn cached_host_pods(&self) -> Vec<Arc<Pod>> {
        self.inner.host_pods.get().map(Store::state).unwrap_or_default()
    }

    /// Host pod `name` of the tenant, from the cache.
    fn cached_host_pod(&self, name: &str) -> Option<Arc<Pod>> {
        let key = ObjectRef::new(name).within(&self.inner.host_namespace);
        self.inner.host_pods.get()?.get(&key)
    }

    /// Reconcile tenant pod `key` as soon as it is not being reconciled.
    ///
    /// Dated [`Inner::due`], not now: the scheduler's `DelayQueue` rounds a deadline up to its next
    /// millisecond tick, so a request dated now waits for a timer wake-up (about a millisecond),
    /// while one dated before the queue began is already expired and is handed out at once.
    fn enqueue(&self, key: Key) {
        self.enqueue_at(key, self.inner.due);
    }

    /// Reconcile tenant pod `key` after `after` (or sooner, if asked).
    fn enqueue_later(&self, key: Key, after: Duration) {
        self.enqueue_at(key, tokio::time::Instant::now() + after);
    }

    fn enqueue_at(&self, key: Key, run_at: tokio::time::Instant) {
        let _ = self.inner.queue.unbounded_send(ScheduleRequest { message: key, run_at });
    }

    async fn watch_tenant_pods(self, writer: reflector::store::Writer<Pod>) {
        let api: Api<Pod> = Api::all(self.inner.tenant_client.clone());
        let key_of = |p: &Pod| Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?));
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        self.queue_changes(stream, key_of, "the tenant's pods").await;
    }

    /// A change to one of this tenant's claims (the shared host side sends only those) queues
    /// the pod holding it: the node agent writes the device it made on the claim, so the pod
    /// waiting for it can now run.
    async fn watch_claims(self, mut claims: Listener<Key>) {
        while let Some(key) = claims.next().await {
            self.enqueue(key);
        }
    }

    /// What the caches hold of the host's nodes and claims, once both are filled; `None` before.
    fn cached_fleet(&self) -> Option<placement::Cached> {
        let ready =
            |r: Option<Result<(), reflector::store::WriterDropped>>| matches!(r, Some(Ok(())));
        let nodes_ready = ready(self.inner.host_nodes.wait_until_ready().now_or_never());
        let leases_ready = ready(self.inner.claim_leases.wait_until_ready().now_or_never());
        (nodes_ready && leases_ready).then(|| placement::Cached {
            nodes: self.inner.host_nodes.state(),
            leases: self.inner.claim_leases.state(),
        })
    }

    /// The tenant's host pods, as the shared host side shows them.
    async fn watch_host_pods(self, pods: Subscription<Pod>) {
        let stream = pods.map(Ok::<_, watcher::Error>);
        self.queue_changes(stream, tenant_key, "the host pods").await;
    }

    /// Queue the tenant pod each change to a pod is about.
    async fn queue_changes(
        &self,
        stream: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
        key_of: impl Fn(&Pod) -> Option<Key>,
        what: &str,
    ) {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    watcher::Event::Apply(p)
                    | watcher::Event::Delete(p)
                    | watcher::Event::InitApply(p),
                ) => {
                    if let Some(key) = key_of(&p) {
                        self.enqueue(key);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(tenant = %self.inner.tenant, error = %e, "watching {what}")
                }
            }
        }
    }

    async fn resync_loop(self) {
        // Garbage is what neither side wants: that can only be told once both caches are full.
        let ready = async {
            let _ = self.inner.tenant_pods.wait_until_ready().await;
            if let Some(host_pods) = self.inner.host_pods.get() {
                let _ = host_pods.wait_until_ready().await;
            }
        };
        ready.await;
        let mut tick = tokio::time::interval(self.inner.resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let mut keys: HashSet<Key> = HashSet::new();
            for p in self.inner.tenant_pods.state() {
                if let (Some(ns), Some(name)) =
                    (p.metadata.namespace.clone(), p.metadata.name.clone())
                {
                    keys.insert((ns, name));
                }
            }
            for p in self.cached_host_pods() {
                if let Some(key) = tenant_key(&p) {
                    keys.insert(key);
                }
            }
            for key in keys {
                self.enqueue(key);
            }
            if let Err(e) = self.collect_garbage().await {
                tracing::warn!(tenant = %self.inner.tenant, error = %e, "resync");
            }
            if let Err(e) = self.tend_tokens().await {
                tracing::warn!(tenant = %self.inner.tenant, error = %e, "renewing tokens");
            }
        }
    }

    /// Runs reconciles, one at a time per key, many keys at once. The queue is
    /// `kube_runtime`'s scheduler: requests for one key are merged (the earliest time wins), and
    /// a key being reconciled is held until that reconcile is done.
    async fn work(self, requests: UnboundedReceiver<ScheduleRequest<Key>>) {
        let mut queue = std::pin::pin!(scheduler(requests));
        let mut reconciles = FuturesUnordered::new();
        loop {
            let running = &self.inner.running;
            let mut ready = queue.as_mut().hold_unless(|k| !running.lock().contains(k));
            tokio::select! {
                Some(key) = ready.next() => {
                    self.inner.running.lock().insert(key.clone());
                    // On a task of its own, so reconciles of many keys run in parallel.
                    reconciles.push(tokio::spawn(self.clone().reconcile_once(key)));
                }
                Some(done) = reconciles.next(), if !reconciles.is_empty() => {
                    if let Ok(key) = done {
                        self.inner.running.lock().remove(&key);
                    }
                }
                else => return,
            }
        }
    }

    /// Reconcile tenant pod `key`, and ask for the next reconcile it wants: later when it asks,
    /// backed off after a failure. `key`, for the caller.
    async fn reconcile_once(self, key: Key) -> Key {
        let outcome = self.reconcile(&key).await;
        let mut failures = self.inner.failures.lock();
        match outcome {
            Ok(later) => {
                failures.remove(&key);
                if let Some(after) = later {
                    self.enqueue_later(key.clone(), after);
                }
            }
            Err(e) => {
                let n = failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                let delay = retry_delay(*n);
                tracing::warn!(tenant = %self.inner.tenant, pod = %format!("{}/{}", key.0, key.1), error = %e, retry_in = ?delay, "sync failed");
                self.enqueue_later(key.clone(), delay);
            }
        }
        drop(failures);
        key
    }

    /// Claims whose pod is gone, and virtual nodes no pod of the tenant runs on (unless the
    /// tenant cordoned them).
    async fn collect_garbage(&self) -> Result<(), SyncError> {
        let mut live_hosts: HashSet<String> = HashSet::new();
        let mut used_nodes: HashSet<String> = HashSet::new();
        for p in self.cached_host_pods() {
            if finished(&p) {
                continue;
            }
            if let Some(n) = p.metadata.name.clone() {
                live_hosts.insert(n);
            }
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                used_nodes.insert(node);
            }
        }
        let wanted: HashSet<String> = self
            .inner
            .tenant_pods
            .state()
            .iter()
            .filter(|p| !finished(p))
            .filter_map(|p| {
                Some(host_names::host_pod(
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ))
            })
            .collect();
        for claim in placement::all_claims(&self.inner.host_client).await? {
            if claim.holder.tenant != self.inner.tenant {
                continue;
            }
            let key = (claim.holder.namespace.clone(), claim.holder.pod.clone());
            let busy = self.inner.running.lock().contains(&key);
            if !busy && !live_hosts.contains(&claim.host_pod) && !wanted.contains(&claim.host_pod) {
                placement::release(&self.inner.host_client, &self.inner.tenant, &claim.host_pod)
                    .await?;
            }
        }
        let nodes: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let list = nodes
            .list(
                &ListParams::default().labels(&format!("{}=true", host_names::LABEL_VIRTUAL_NODE)),
            )
            .await?;
        for n in list.items {
            // A node the tenant cordoned stays, its pods gone or not, until it is uncordoned:
            // the cordon is the tenant's to lift.
            let cordoned = serde_json::to_value(&n).is_ok_and(|v| translate::tenant_cordoned(&v));
            let Some(name) = n.metadata.name else { continue };
            if !used_nodes.contains(&name) && !cordoned {
                match nodes.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                self.inner.virtual_nodes.lock().remove(&name);
            }
        }
        Ok(())
    }
}

/// 50 ms after the first failure, doubling up to 10 s.
fn retry_delay(failures: u32) -> Duration {
    let ms = 50u64.saturating_mul(1u64 << failures.saturating_sub(1).min(16));
    Duration::from_millis(ms.min(10_000))
}

/// An object's namespace and name ("" when missing).
fn namespace_and_name(object: &Value) -> (&str, &str) {
    let field = |f: &str| object.pointer(f).and_then(Value::as_str).unwrap_or_default();
    (field("/metadata/namespace"), field("/metadata/name"))
}

fn to_value<T: serde::Serialize>(object: &T) -> Result<Value, SyncError> {
    serde_json::to_value(object).map_err(|source| SyncError::Decode { kind: "object", source })
}

fn is_ours(pod: &Pod, tenant: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(host_names::LABEL_TENANT).map(String::as_str) == Some(tenant))
}

/// The tenant pod a host pod stands for.
fn tenant_key(host: &Pod) -> Option<Key> {
    let a = host.metadata.annotations.as_ref()?;
    Some((
        a.get(host_names::ANNOTATION_NAMESPACE)?.clone(),
        a.get(host_names::ANNOTATION_NAME)?.clone(),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tenant_api_address_is_host_and_port() {
        assert_eq!(host_port("10.0.0.7:6443").unwrap(), ("10.0.0.7".to_owned(), 6443));
        assert_eq!(host_port("10.96.0.1:443").unwrap(), ("10.96.0.1".to_owned(), 443));
        assert_eq!(host_port("[fd00::1]:443").unwrap(), ("fd00::1".to_owned(), 443));
        assert_eq!(host_port("api.carrel:443").unwrap(), ("api.carrel".to_owned(), 443));
        for bad in ["10.0.0.7", "10.96.0.1", ":443", "h:99999", "h:x"] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn retries_back_off_to_ten_seconds() {
        assert_eq!(retry_delay(1), Duration::from_millis(50));
        assert_eq!(retry_delay(2), Duration::from_millis(100));
        assert_eq!(retry_delay(8), Duration::from_millis(6400));
        assert_eq!(retry_delay(9), Duration::from_secs(10));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(10));
    }

    /// What [`Syncer::enqueue`] relies on: a request dated before the queue began is handed
    /// out at once, while one dated now waits for the queue's next timer tick.
    #[tokio::test(start_paused = true)]
    async fn a_request_dated_before_the_queue_is_handed_out_without_a_timer() {
        use std::task::Poll;
        let due = tokio::time::Instant::now();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut queue = std::pin::pin!(scheduler(rx));
        let later = ScheduleRequest { message: 1u8, run_at: due + Duration::from_secs(60) };
        tx.unbounded_send(later).unwrap();
        assert!(futures::poll!(queue.next()).is_pending());
        // Between two of the queue's millisecond ticks, as real time almost always is.
        tokio::time::advance(Duration::from_micros(1_500_500)).await;
        tx.unbounded_send(ScheduleRequest { message: 2u8, run_at: due }).unwrap();
        assert_eq!(futures::poll!(queue.next()), Poll::Ready(Some(2)));
        let now = tokio::time::Instant::now();
        tx.unbounded_send(ScheduleRequest { message: 3u8, run_at: now }).unwrap();
        assert!(futures::poll!(queue.next()).is_pending(), "dated now, it waits for a tick");
    }
}
