//! The syncer: one tenant's pods become host pods in the tenant's host namespace, pinned to the
//! MIG devices claimed for them; status, events and deletions come back.
//!
//! A [`Syncer`] watches the tenant's pods and the host pods it made (both through kube clients,
//! so it runs the same inside `carrel up` and as `carrel-syncer` against a real host cluster).
//! Every change queues the tenant pod's key; [`Syncer::reconcile`] brings the two sides in line
//! from what both clusters hold, so a restarted syncer picks up where the last one stopped:
//!
//! - tenant pod without host pod: copy what it references, claim its GPUs ([`placement`]), create
//!   the host pod ([`translate::host_pod`]); if a host pod had been made for it (its UID is
//!   recorded on the tenant pod), the host pod was deleted under the tenant: the tenant pod fails;
//! - host pod without tenant pod: delete it and release its claims;
//! - both: the host pod's status goes to the tenant pod, the tenant pod is bound to the node's
//!   virtual node, and a finished host pod's claims are released.
//!
//! The host copies of ConfigMaps and Secrets follow their tenant objects, and leave the host
//! with them.
//!
//! Host names come from [`host_names`] only.

pub mod host_names;
pub mod placement;
pub mod translate;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use parking_lot::{Mutex, RwLock};
use serde_json::{json, Value};
use tokio::sync::mpsc;

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
        kind: &'static str,
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
    /// How often everything is compared again, whatever the watches said.
    pub resync: Duration,
}

/// A task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How long a pod whose host object is someone else's waits before the syncer looks again.
const TAKEN_RETRY: Duration = Duration::from_secs(30);

/// Lifetime of the tokens the syncer asks for.
const TOKEN_SECONDS: i64 = 86_400;

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
    resync: Duration,
    tenant_client: kube::Client,
    /// Writes the syncer's own Events in the tenant.
    recorder: Recorder,
    host_client: kube::Client,
    tenant_pods: Store<Pod>,
    host_pods: Store<Pod>,
    stores: Mutex<Option<(reflector::store::Writer<Pod>, reflector::store::Writer<Pod>)>>,
    queue: mpsc::UnboundedSender<Key>,
    queue_rx: Mutex<Option<mpsc::UnboundedReceiver<Key>>>,
    /// The virtual nodes written, each as its tenant is shown it ([`translate::virtual_node_shown`]).
    virtual_nodes: Mutex<HashMap<String, Value>>,
    /// Told when the quota changes: the virtual nodes show it.
    quota_changed: tokio::sync::Notify,
    /// The host events copied up, so that each version is copied once.
    events_seen: Mutex<SeenEvents>,
    /// Failed reconciles in a row, per key: the retry backs off.
    failures: Mutex<HashMap<Key, u32>>,
    /// The keys being reconciled now: garbage collection leaves their claims alone, since a
    /// reconcile may be between claiming devices and creating the host pod.
    running: Mutex<HashSet<Key>>,
    /// When the token in each service account's host Secret expires, for those written here.
    tokens: Mutex<HashMap<Key, chrono::DateTime<chrono::Utc>>>,
    /// Told of each tenant pod the syncer has taken up (see [`Syncer::when_taken_up`]).
    taken_up: std::sync::OnceLock<TakenUp>,
    /// The host Secrets of the tenant (copies and token Secrets), once they are watched.
    host_secrets: std::sync::OnceLock<Store<Secret>>,
}

/// The service account (namespace, name) whose token pod `pod` is given; `None` when it opts
/// out.
fn token_key(pod: &Value) -> Option<Key> {
    account_of(
        pod.pointer("/metadata/namespace").and_then(Value::as_str),
        pod.pointer("/spec/serviceAccountName").and_then(Value::as_str),
        pod.pointer("/spec/automountServiceAccountToken").and_then(Value::as_bool),
    )
}

/// [`token_key`] of a typed pod.
fn token_key_of(pod: &Pod) -> Option<Key> {
    let spec = pod.spec.as_ref();
    account_of(
        pod.metadata.namespace.as_deref(),
        spec.and_then(|s| s.service_account_name.as_deref()),
        spec.and_then(|s| s.automount_service_account_token),
    )
}

fn account_of(
    namespace: Option<&str>,
    account: Option<&str>,
    automount: Option<bool>,
) -> Option<Key> {
    if automount == Some(false) {
        return None;
    }
    let account = account.filter(|s| !s.is_empty()).unwrap_or("default");
    Some((namespace.unwrap_or_default().to_owned(), account.to_owned()))
}

/// The tenant objects (namespace, name) that the host copies in `copies` stand for; token
/// Secrets, which stand for none, are left out.
fn copied_objects<K: Copied>(copies: &Store<K>) -> Vec<Key> {
    copies
        .state()
        .iter()
        .filter_map(|copy| {
            let a = copy.meta().annotations.as_ref()?;
            Some((
                a.get(host_names::ANNOTATION_NAMESPACE)?.clone(),
                a.get(host_names::ANNOTATION_NAME)?.clone(),
            ))
        })
        .collect()
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

/// The version of each host event last copied up, by the event's uid. An event leaves it when
/// the host deletes it (events expire), or when a relist of the watch no longer shows it (it
/// was deleted while the watch was away), so that it holds no more than the host does.
#[derive(Debug, Default)]
struct SeenEvents {
    versions: HashMap<String, String>,
    relist: Relist<String>,
}

impl SeenEvents {
    /// Whether `version` of event `uid` is new here; it is remembered.
    fn first(&mut self, uid: &str, version: String) -> bool {
        if self.versions.get(uid) == Some(&version) {
            return false;
        }
        self.versions.insert(uid.to_owned(), version);
        true
    }

    fn forget(&mut self, uid: &str) {
        self.versions.remove(uid);
    }

    /// The watch lists every event again.
    fn relisting(&mut self) {
        self.relist.begin();
    }

    /// The watch shows event `uid`.
    fn listed(&mut self, uid: &str) {
        self.relist.saw(uid);
    }

    /// The relist is complete: what it did not show is gone.
    fn relisted(&mut self) {
        if let Some(shown) = self.relist.end() {
            self.versions.retain(|uid, _| shown.contains(uid));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.versions.len()
    }
}

/// A namespaced kind whose objects the syncer copies to the host (ConfigMaps, Secrets).
trait Copied:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<K> Copied for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// What [`Syncer::when_taken_up`] calls, with a pod's namespace and name.
type TakenUp = Box<dyn Fn(&str, &str) + Send + Sync>;

/// `source.component` and `reportingComponent` of the syncer's own Events in the tenant.
pub const COMPONENT: &str = "carrel-syncer";

impl Syncer {
    /// A syncer between a tenant API (`tenant`, as the tenant's admin) and the host (`host`).
    pub fn new(tenant: kube::Client, host: kube::Client, config: Config) -> Syncer {
        let (tenant_pods, tenant_writer) = reflector::store();
        let (host_pods, host_writer) = reflector::store();
        let (tx, rx) = mpsc::unbounded_channel();
        Syncer {
            inner: Arc::new(Inner {
                tenant: config.tenant,
                host_namespace: config.host_namespace,
                quota: RwLock::new(config.gpu_quota),
                allowed_tolerations: RwLock::default(),
                tenant_ca_pem: config.tenant_ca_pem,
                resync: config.resync,
                recorder: Recorder::for_component(tenant.clone(), COMPONENT, ""),
                tenant_client: tenant,
                host_client: host,
                tenant_pods,
                host_pods,
                stores: Mutex::new(Some((tenant_writer, host_writer))),
                queue: tx,
                queue_rx: Mutex::new(Some(rx)),
                virtual_nodes: Mutex::default(),
                quota_changed: tokio::sync::Notify::new(),
                events_seen: Mutex::default(),
                failures: Mutex::default(),
                running: Mutex::default(),
                tokens: Mutex::default(),
                taken_up: std::sync::OnceLock::new(),
                host_secrets: std::sync::OnceLock::new(),
            }),
        }
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

    /// Call `f` with a tenant pod's namespace and name once a reconcile has taken it up: made its
    /// host pod, or found it needs none (gone, finished, not placeable), or failed trying (the
    /// retry is queued). Pods already on the host are not reported again. Only the first call
    /// has an effect.
    pub fn when_taken_up(&self, f: impl Fn(&str, &str) + Send + Sync + 'static) {
        let _ = self.inner.taken_up.set(Box::new(f));
    }

    /// Watch and reconcile until `stop` turns true. Only the first call runs.
    pub async fn run(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let stores = self.inner.stores.lock().take();
        let rx = self.inner.queue_rx.lock().take();
        let (Some((tenant_writer, host_writer)), Some(rx)) = (stores, rx) else {
            return;
        };
        let tasks = vec![
            tokio::spawn(self.clone().watch_tenant_pods(tenant_writer)),
            tokio::spawn(self.clone().watch_host_pods(host_writer)),
            tokio::spawn(self.clone().watch_host_events()),
            tokio::spawn(self.clone().watch_host_nodes()),
            tokio::spawn(self.clone().mirror::<ConfigMap>(reflector::store())),
            tokio::spawn(self.clone().mirror::<Secret>({
                let (secrets, writer) = reflector::store();
                let _ = self.inner.host_secrets.set(secrets.clone());
                (secrets, writer)
            })),
            tokio::spawn(self.clone().resync_loop()),
            tokio::spawn(self.clone().work(rx)),
        ];
        while !*stop.borrow() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        for t in tasks {
            t.abort();
        }
    }

    fn enqueue(&self, key: Key) {
        let _ = self.inner.queue.send(key);
    }

    fn enqueue_later(&self, key: Key, after: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            this.enqueue(key);
        });
    }

    async fn watch_tenant_pods(self, writer: reflector::store::Writer<Pod>) {
        let api: Api<Pod> = Api::all(self.inner.tenant_client.clone());
        let key_of = |p: &Pod| Some((p.metadata.namespace.clone()?, p.metadata.name.clone()?));
        self.watch_pods(api, watcher::Config::default(), writer, key_of, "the tenant's pods").await;
    }

    async fn watch_host_pods(self, writer: reflector::store::Writer<Pod>) {
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let config =
            watcher::Config::default().labels(&host_names::host_selector(&self.inner.tenant));
        self.watch_pods(api, config, writer, tenant_key, "the host pods").await;
    }

    /// Keep `writer`'s cache of `api`'s pods, queueing the tenant pod each change is about.
    async fn watch_pods(
        &self,
        api: Api<Pod>,
        config: watcher::Config,
        writer: reflector::store::Writer<Pod>,
        key_of: impl Fn(&Pod) -> Option<Key>,
        what: &str,
    ) {
        let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
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

    async fn watch_host_events(self) {
        let api: Api<Event> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            let seen = || self.inner.events_seen.lock();
            match event {
                Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => {
                    if let Some(uid) = e.metadata.uid.as_deref() {
                        seen().listed(uid);
                    }
                    if let Err(err) = self.event_up(&e).await {
                        tracing::debug!(tenant = %self.inner.tenant, error = %err, "copying a host event");
                    }
                }
                Ok(watcher::Event::Delete(e)) => {
                    if let Some(uid) = e.metadata.uid.as_deref() {
                        seen().forget(uid);
                    }
                }
                Ok(watcher::Event::Init) => seen().relisting(),
                Ok(watcher::Event::InitDone) => seen().relisted(),
                Err(e) => {
                    tracing::warn!(tenant = %self.inner.tenant, error = %e, "watching host events")
                }
            }
        }
    }

    /// Keep the host copies of ConfigMaps or Secrets (the ones pods referenced) in line with
    /// the tenant's objects as these change. Both sides are watched: a tenant change seen before
    /// the host watch shows the copy it concerns is looked at again when the copy shows up.
    /// `(copies, writer)` is the store the host watch fills.
    async fn mirror<K>(self, (copies, writer): (Store<K>, reflector::store::Writer<K>))
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let host: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let config =
            watcher::Config::default().labels(&host_names::host_selector(&self.inner.tenant));
        let host_stream = reflector::reflector(writer, watcher(host, config)).default_backoff();
        // The tenant object each copy the host watch shows stands for.
        let (copied_tx, mut copied) = mpsc::unbounded_channel::<Key>();
        let _host_watch = AbortOnDrop(tokio::spawn(async move {
            futures::pin_mut!(host_stream);
            while let Some(event) = host_stream.next().await {
                if let Ok(watcher::Event::Apply(copy) | watcher::Event::InitApply(copy)) = event {
                    // Token Secrets carry no tenant object's name: they are not copies.
                    let Some(a) = copy.meta().annotations.as_ref() else { continue };
                    if let (Some(ns), Some(name)) = (
                        a.get(host_names::ANNOTATION_NAMESPACE),
                        a.get(host_names::ANNOTATION_NAME),
                    ) {
                        let _ = copied_tx.send((ns.clone(), name.clone()));
                    }
                }
            }
        }));
        let _ = copies.wait_until_ready().await;
        let tenant: Api<K> = Api::all(self.inner.tenant_client.clone());
        let stream = watcher(tenant, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut relist = Relist::<Key>::default();
        loop {
            let object = tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::Apply(o))) => o,
                    Some(Ok(watcher::Event::InitApply(o))) => {
                        if let (Some(ns), Some(name)) = (&o.meta().namespace, &o.meta().name) {
                            relist.saw(&(ns.clone(), name.clone()));
                        }
                        o
                    }
                    Some(Ok(watcher::Event::Delete(o))) => {
                        if let (Some(ns), Some(name)) = (&o.meta().namespace, &o.meta().name) {
                            self.drop_copy_if_gone::<K>(&copies, ns, name).await;
                        }
                        continue;
                    }
                    Some(Ok(watcher::Event::Init)) => {
                        relist.begin();
                        continue;
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        // Objects deleted while the watch was away have copies the relist did
                        // not show.
                        let shown = relist.end().unwrap_or_default();
                        for (ns, name) in copied_objects(&copies) {
                            if !shown.contains(&(ns.clone(), name.clone())) {
                                self.drop_copy_if_gone::<K>(&copies, &ns, &name).await;
                            }
                        }
                        continue;
                    }
                    Some(Err(_)) => continue,
                    None => return,
                },
                Some((ns, name)) = copied.recv() => {
                    // Read the tenant object afresh: the tenant watch may not have shown its
                    // latest version yet, and an older one must not overwrite the copy.
                    let api: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), &ns);
                    match api.get_opt(&name).await {
                        Ok(Some(o)) => o,
                        Ok(None) => continue,
                        Err(e) => {
                            tracing::debug!(tenant = %self.inner.tenant, object = %format!("{ns}/{name}"), error = %e, "reading a copied object");
                            continue;
                        }
                    }
                }
            };
            self.keep_copy(&copies, &object).await;
        }
    }

    /// Update the host copy of tenant object `object`, if a pod referenced it (it has a copy)
    /// and the copy differs.
    async fn keep_copy<K>(&self, copies: &Store<K>, object: &K)
    where
        K: Copied,
    {
        let (Some(ns), Some(name)) =
            (object.meta().namespace.as_deref(), object.meta().name.as_deref())
        else {
            return;
        };
        let host_name = host_names::host_name(ns, name);
        let Some(copy) = copies.get(&ObjectRef::new(&host_name).within(&self.inner.host_namespace))
        else {
            return; // No pod has referenced it: nothing to keep in line.
        };
        let wanted = match to_value(object) {
            Ok(v) => translate::host_copy(&self.inner.tenant, &self.inner.host_namespace, &v),
            Err(_) => return,
        };
        let current = to_value(&*copy).unwrap_or_default();
        if ["data", "binaryData", "type"].iter().all(|f| current.get(*f) == wanted.get(*f)) {
            return;
        }
        if let Err(e) = self.put_host::<K>(wanted).await {
            tracing::warn!(tenant = %self.inner.tenant, object = %host_name, error = %e, "updating a host copy");
        }
    }

    /// Delete the host copy of tenant object `namespace/name` once the tenant no longer has the
    /// object: a deleted Secret or ConfigMap leaves the host too. The tenant is asked first, so
    /// that an object created again since the watch saw it go keeps its copy.
    async fn drop_copy_if_gone<K>(&self, copies: &Store<K>, namespace: &str, name: &str)
    where
        K: Copied,
    {
        let host_name = host_names::host_name(namespace, name);
        if copies.get(&ObjectRef::new(&host_name).within(&self.inner.host_namespace)).is_none() {
            return;
        }
        let tenant: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        match tenant.get_opt(name).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => {
                tracing::debug!(tenant = %self.inner.tenant, object = %format!("{namespace}/{name}"), error = %e, "reading a copied object");
                return;
            }
        }
        let host: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match host.delete(&host_name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::debug!(tenant = %self.inner.tenant, object = %host_name, "deleted a copy")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(tenant = %self.inner.tenant, object = %host_name, error = %e, "deleting a host copy")
            }
        }
    }

    async fn resync_loop(self) {
        // Garbage is what neither side wants: that can only be told once both caches are full.
        let ready = async {
            let _ = self.inner.tenant_pods.wait_until_ready().await;
            let _ = self.inner.host_pods.wait_until_ready().await;
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
            for p in self.inner.host_pods.state() {
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

    /// Runs reconciles, one at a time per key, many keys at once.
    async fn work(self, mut rx: mpsc::UnboundedReceiver<Key>) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Key>();
        let mut dirty: HashSet<Key> = HashSet::new();
        loop {
            tokio::select! {
                Some(key) = rx.recv() => {
                    if self.inner.running.lock().contains(&key) {
                        dirty.insert(key);
                        continue;
                    }
                    self.inner.running.lock().insert(key.clone());
                    self.spawn_reconcile(key, done_tx.clone());
                }
                Some(key) = done_rx.recv() => {
                    if dirty.remove(&key) {
                        self.spawn_reconcile(key, done_tx.clone());
                    } else {
                        self.inner.running.lock().remove(&key);
                    }
                }
                else => return,
            }
        }
    }

    fn spawn_reconcile(&self, key: Key, done: mpsc::UnboundedSender<Key>) {
        let this = self.clone();
        tokio::spawn(async move {
            let outcome = this.reconcile(&key).await;
            let mut failures = this.inner.failures.lock();
            match outcome {
                Ok(later) => {
                    failures.remove(&key);
                    if let Some(after) = later {
                        this.enqueue_later(key.clone(), after);
                    }
                }
                Err(e) => {
                    let n = failures.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    let delay = retry_delay(*n);
                    tracing::warn!(tenant = %this.inner.tenant, pod = %format!("{}/{}", key.0, key.1), error = %e, retry_in = ?delay, "sync failed");
                    this.enqueue_later(key.clone(), delay);
                }
            }
            drop(failures);
            let _ = done.send(key);
        });
    }

    /// Bring one tenant pod and its host pod in line. `Some(delay)` asks to look again later.
    pub async fn reconcile(&self, key: &Key) -> Result<Option<Duration>, SyncError> {
        let (namespace, name) = key;
        let host_name = host_names::host_pod(namespace, name);
        let pair = async {
            let tenant_pod = self.tenant_pod(namespace, name).await?;
            // A new pod's host pod is made by this reconcile: when the cache has none, there is
            // none to ask the host for (a create that finds one answers 409, handled there).
            // Anything else must know for sure that its host pod is gone.
            let fresh =
                tenant_pod.as_ref().is_some_and(|t| !was_scheduled(t) && !translate_terminal(t));
            let host_pod = self.host_pod(&host_name, !fresh).await?;
            Ok::<_, SyncError>((tenant_pod, host_pod))
        };
        let (tenant_pod, host_pod) = match pair.await {
            Ok(pair) => pair,
            Err(e) => {
                self.taken_up(key);
                return Err(e);
            }
        };
        // A host pod that records another tenant pod is not this pod's.
        let on_host = tenant_pod.is_some()
            && host_pod
                .as_ref()
                .is_some_and(|h| stands_for_pod(h, &self.inner.tenant, namespace, name));
        let outcome = self.line_up(key, &host_name, tenant_pod, host_pod).await;
        if !on_host {
            self.taken_up(key);
        }
        outcome
    }

    fn taken_up(&self, (namespace, name): &Key) {
        if let Some(f) = self.inner.taken_up.get() {
            f(namespace, name);
        }
    }

    async fn line_up(
        &self,
        (namespace, name): &Key,
        host_name: &str,
        tenant_pod: Option<Value>,
        host_pod: Option<Value>,
    ) -> Result<Option<Duration>, SyncError> {
        let theirs = host_pod
            .as_ref()
            .is_some_and(|h| !stands_for_pod(h, &self.inner.tenant, namespace, name));
        match (tenant_pod, host_pod) {
            (tenant, Some(_)) if theirs => {
                // Not this pod's host pod: neither adopted nor deleted.
                let taken = SyncError::Taken { kind: "Pod", name: host_name.to_owned() };
                tracing::warn!(tenant = %self.inner.tenant, pod = %format!("{namespace}/{name}"), "{taken}");
                match tenant {
                    Some(tenant) => self.host_name_taken(&tenant, taken).await,
                    None => Ok(None),
                }
            }
            (None, Some(host)) => {
                self.delete_host_pod(&host).await?;
                placement::release(&self.inner.host_client, &self.inner.tenant, host_name).await?;
                Ok(None)
            }
            (None, None) => {
                placement::release(&self.inner.host_client, &self.inner.tenant, host_name).await?;
                Ok(None)
            }
            (Some(tenant), None) => {
                if translate_terminal(&tenant) {
                    placement::release(&self.inner.host_client, &self.inner.tenant, host_name)
                        .await?;
                    return Ok(None);
                }
                if was_scheduled(&tenant) {
                    // Its host pod was scheduled (the tenant saw it) and is gone: deleted under
                    // the tenant. (One deleted before it was scheduled is simply made again.)
                    placement::release(&self.inner.host_client, &self.inner.tenant, host_name)
                        .await?;
                    self.fail_tenant_pod(&tenant, "the pod's host pod was deleted").await?;
                    return Ok(None);
                }
                self.create_host_pod(&tenant, host_name).await
            }
            (Some(tenant), Some(host)) => {
                let tenant_uid = tenant.pointer("/metadata/uid").and_then(Value::as_str);
                let recorded = host
                    .pointer(&format!(
                        "/metadata/annotations/{}",
                        escape(host_names::ANNOTATION_UID)
                    ))
                    .and_then(Value::as_str);
                if tenant_uid != recorded {
                    // Left from an earlier pod of the same name.
                    self.delete_host_pod(&host).await?;
                    placement::release(&self.inner.host_client, &self.inner.tenant, host_name)
                        .await?;
                    return Ok(Some(Duration::from_millis(50)));
                }
                self.status_up(&tenant, &host).await?;
                if translate_terminal(&host) {
                    placement::release(&self.inner.host_client, &self.inner.tenant, host_name)
                        .await?;
                }
                Ok(None)
            }
        }
    }

    async fn tenant_pod(&self, namespace: &str, name: &str) -> Result<Option<Value>, SyncError> {
        let cached = self.inner.tenant_pods.get(&ObjectRef::new(name).within(namespace));
        match cached {
            Some(p) => Ok(Some(to_value(&*p)?)),
            None => {
                // The cache may lag behind a create; ask.
                let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
                match api.get_opt(name).await? {
                    Some(p) => Ok(Some(to_value(&p)?)),
                    None => Ok(None),
                }
            }
        }
    }

    /// The host pod `host_name` from the cache; on a miss, from the host when `confirm`.
    async fn host_pod(&self, host_name: &str, confirm: bool) -> Result<Option<Value>, SyncError> {
        let cached =
            self.inner.host_pods.get(&ObjectRef::new(host_name).within(&self.inner.host_namespace));
        match cached {
            Some(p) => Ok(Some(to_value(&*p)?)),
            None if !confirm => Ok(None),
            None => {
                let api: Api<Pod> =
                    Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
                match api.get_opt(host_name).await? {
                    Some(p) if is_ours(&p, &self.inner.tenant) => Ok(Some(to_value(&p)?)),
                    _ => Ok(None),
                }
            }
        }
    }

    async fn delete_host_pod(&self, host: &Value) -> Result<(), SyncError> {
        let name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let uid = host.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid, resource_version: None }),
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// The profiles and counts a pod's GPU resources stand for; `nvidia.com/gpu` becomes the
    /// tenant's first `7g` profile with quota.
    fn pod_request(&self, pod: &Value) -> Result<placement::PodRequest, String> {
        let quota = self.inner.quota.read().clone();
        let mut request = placement::PodRequest::new();
        for (resource, n) in gpu_requests(pod)? {
            let profile = if resource == WHOLE_GPU {
                quota
                    .iter()
                    .find(|(p, n)| p.starts_with("7g.") && **n > 0)
                    .map(|(p, _)| p.clone())
                    .ok_or_else(|| "nvidia.com/gpu needs a 7g quota".to_owned())?
            } else {
                carrel_gpu::canonical_profile_name(&resource)
                    .ok_or_else(|| format!("{resource} is not a MIG profile"))?
            };
            *request.entry(profile).or_default() += u32::try_from(n).unwrap_or(u32::MAX);
        }
        Ok(request)
    }

    async fn create_host_pod(
        &self,
        tenant: &Value,
        host_name: &str,
    ) -> Result<Option<Duration>, SyncError> {
        let (namespace, name) = namespace_and_name(tenant);
        let unsynced = translate::unsynced_references(tenant);
        if !unsynced.is_empty() {
            // The tenant API refuses these; a pod stored before that rule gets no host pod that
            // would name the host's objects.
            let why = format!(
                "{}: not carried to the host cluster, which would resolve them in its own namespace",
                unsynced.join(", ")
            );
            self.fail_tenant_pod(tenant, &why).await?;
            return Ok(None);
        }
        let request = match self.pod_request(tenant) {
            Ok(r) => r,
            Err(why) => {
                self.unschedulable(tenant, &why).await?;
                return Ok(None);
            }
        };
        let mut held = Vec::new();
        if !request.is_empty() {
            let holder = Holder {
                tenant: self.inner.tenant.clone(),
                namespace: namespace.to_owned(),
                pod: name.to_owned(),
            };
            let quota = self.inner.quota.read().clone();
            let needs = match gpu_pod_needs(tenant, &self.allowed_tolerations()) {
                Ok(n) => n,
                Err(why) => {
                    self.unschedulable(tenant, &why).await?;
                    return Ok(None);
                }
            };
            match placement::acquire(
                &self.inner.host_client,
                &quota,
                &needs,
                &holder,
                &self.inner.host_namespace,
                host_name,
                &request,
            )
            .await
            {
                Ok(c) => held = c,
                Err(placement::ClaimFailure::Host(e)) => return Err(e),
                Err(e) => {
                    self.unschedulable(tenant, &e.to_string()).await?;
                    return Ok(Some(Duration::from_secs(2)));
                }
            }
            if held.iter().any(|c| c.instance_uuid.is_empty()) {
                // The node agent is creating the instances; it writes their UUIDs on the claims.
                return Ok(Some(Duration::from_millis(20)));
            }
        }
        let env_sources = match self.copy_references(tenant).await {
            Ok(sources) => sources,
            Err(e) => return self.host_name_taken(tenant, e).await,
        };
        let missing = translate::missing_env_sources(tenant, &env_sources);
        if !missing.is_empty() {
            // As the kubelet would, the pod waits for the sources of its `envFrom`.
            let why = format!("waiting for envFrom {} to exist", missing.join(", "));
            self.unschedulable(tenant, &why).await?;
            return Ok(Some(Duration::from_secs(2)));
        }
        let token = match self.token_secret(tenant).await {
            Ok(token) => token,
            Err(e) => return self.host_name_taken(tenant, e).await,
        };
        let host = translate::host_pod(
            &self.inner.tenant,
            &self.inner.host_namespace,
            tenant,
            &held,
            token.as_deref(),
            &env_sources,
            &self.allowed_tolerations(),
        );
        let pod: Pod = serde_json::from_value(host)
            .map_err(|source| SyncError::Decode { kind: "Pod", source })?;
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api.get(host_name).await?;
                let identity = host_names::host_annotations(namespace, name, "");
                let (labels, annotations) =
                    (existing.metadata.labels.as_ref(), existing.metadata.annotations.as_ref());
                if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
                    let taken = SyncError::Taken { kind: "Pod", name: host_name.to_owned() };
                    return self.host_name_taken(tenant, taken).await;
                }
                let uid = tenant.pointer("/metadata/uid").and_then(Value::as_str);
                let recorded = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(host_names::ANNOTATION_UID))
                    .map(String::as_str);
                if !is_ours(&existing, &self.inner.tenant) || recorded != uid {
                    // Another pod's host pod under this name (an earlier pod of the same name):
                    // the next pass, from the host watch, replaces it.
                    return Ok(Some(Duration::from_millis(50)));
                }
                // Made by an earlier pass, which also said what it left out.
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        let trimmed = translate::tenant_only_fields(tenant);
        if !trimmed.is_empty() {
            let why = format!(
                "the host pod runs without {}: they name what only this cluster has",
                trimmed.join(", ")
            );
            self.tenant_event(tenant, "Warning", "FieldsNotSynced", &why).await?;
        }
        tracing::debug!(tenant = %self.inner.tenant, pod = %format!("{namespace}/{name}"), host = %host_name, "host pod created");
        Ok(None)
    }

    /// Copy the ConfigMaps and Secrets the pod references to the host (created or replaced);
    /// the keys each holds, for the pod's `envFrom`.
    async fn copy_references(&self, pod: &Value) -> Result<translate::EnvSources, SyncError> {
        let (namespace, _) = namespace_and_name(pod);
        let refs = translate::references(pod);
        let mut sources = translate::EnvSources::default();
        for name in &refs.config_maps {
            if let Some(object) = self.copy_one::<ConfigMap>(namespace, name).await? {
                sources.insert(&object);
            }
        }
        for name in &refs.secrets {
            if let Some(object) = self.copy_one::<Secret>(namespace, name).await? {
                sources.insert(&object);
            }
        }
        Ok(sources)
    }

    /// Copy one tenant object to the host, if it exists; the tenant object.
    async fn copy_one<K>(&self, namespace: &str, name: &str) -> Result<Option<Value>, SyncError>
    where
        K: Copied,
    {
        let api: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let Some(object) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let object = to_value(&object)?;
        let copy = translate::host_copy(&self.inner.tenant, &self.inner.host_namespace, &object);
        self.put_host::<K>(copy).await?;
        Ok(Some(object))
    }

    async fn put_host<K>(&self, object: Value) -> Result<(), SyncError>
    where
        K: Copied,
    {
        let name =
            object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let typed: K = serde_json::from_value(object)
            .map_err(|source| SyncError::Decode { kind: "ConfigMap or Secret", source })?;
        let api: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match api.create(&PostParams::default(), &typed).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&name).await?;
                let (labels, annotations) =
                    (current.meta().labels.as_ref(), current.meta().annotations.as_ref());
                let identity = typed.meta().annotations.clone().unwrap_or_default();
                if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
                    let kind = if K::kind(&()) == "Secret" { "Secret" } else { "ConfigMap" };
                    return Err(SyncError::Taken { kind, name });
                }
                let mut replacement = typed;
                replacement.meta_mut().resource_version = current.meta().resource_version.clone();
                api.replace(&name, &PostParams::default(), &replacement).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Say on tenant pod `tenant` that a host object it needs is someone else's ([`SyncError::
    /// Taken`]), and look again later; any other error is passed on.
    async fn host_name_taken(
        &self,
        tenant: &Value,
        error: SyncError,
    ) -> Result<Option<Duration>, SyncError> {
        let SyncError::Taken { .. } = &error else { return Err(error) };
        let why = format!("{error}; the pod waits until it is gone");
        self.tenant_event(tenant, "Warning", "HostNameTaken", &why).await?;
        Ok(Some(TAKEN_RETRY))
    }

    /// The host Secret with a token the tenant API issued for the pod's service account, its CA
    /// and namespace, shared by the account's pods and renewed when half its life is gone;
    /// `None` when the pod opts out of a token or the account does not exist.
    async fn token_secret(&self, pod: &Value) -> Result<Option<String>, SyncError> {
        let Some((namespace, account)) = token_key(pod) else {
            return Ok(None);
        };
        let secret_name = host_names::token_secret(&namespace, &account);
        let key = (namespace, account);
        let fresh = chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS / 2);
        if self.inner.tokens.lock().get(&key).is_some_and(|e| *e > fresh) {
            return Ok(Some(secret_name));
        }
        Ok(self.write_token(&key.0, &key.1).await?.then_some(secret_name))
    }

    /// Ask the tenant API for a new token of service account `namespace/account` and write it
    /// to the account's host Secret; false when the account does not exist.
    async fn write_token(&self, namespace: &str, account: &str) -> Result<bool, SyncError> {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        });
        let answer: Value = match accounts
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
        {
            Ok(a) => a,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                // No such service account (or no token service): the pod runs without a token.
                tracing::debug!(tenant = %self.inner.tenant, %account, "no token for the pod: {}", e.message);
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        };
        let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap_or_default();
        let expires = answer
            .pointer("/status/expirationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(|| chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS));
        let mut data = json!({"token": token, "namespace": namespace});
        if let Some(ca) = &self.inner.tenant_ca_pem {
            data["ca.crt"] = json!(ca);
        }
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": host_names::token_secret(namespace, account),
                "namespace": self.inner.host_namespace,
                "labels": host_names::host_labels(&self.inner.tenant),
                "annotations": {
                    host_names::ANNOTATION_NAMESPACE: namespace,
                    host_names::ANNOTATION_SERVICE_ACCOUNT: account,
                    host_names::ANNOTATION_TOKEN_EXPIRES: expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                },
            },
            "type": "Opaque",
            "stringData": data,
        });
        self.put_host::<Secret>(secret).await?;
        let key = (namespace.to_owned(), account.to_owned());
        self.inner.tokens.lock().insert(key, expires);
        Ok(true)
    }

    /// Renew the tokens of host token Secrets that running pods use once half their life is
    /// gone, as the kubelet refreshes a projected token, and delete those no pod uses any more.
    /// What the Secrets record (their expiry annotation) decides, so a restarted syncer renews
    /// only what is due.
    async fn tend_tokens(&self) -> Result<(), SyncError> {
        let Some(secrets) = self.inner.host_secrets.get() else { return Ok(()) };
        let used: HashSet<Key> = self
            .inner
            .tenant_pods
            .state()
            .iter()
            .filter(|p| !finished(p))
            .filter_map(|p| token_key_of(p))
            .collect();
        let due = chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS / 2);
        let api: Api<Secret> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        for secret in secrets.state() {
            let Some(a) = secret.metadata.annotations.as_ref() else { continue };
            let (Some(namespace), Some(account)) = (
                a.get(host_names::ANNOTATION_NAMESPACE),
                a.get(host_names::ANNOTATION_SERVICE_ACCOUNT),
            ) else {
                continue;
            };
            let key = (namespace.clone(), account.clone());
            if !used.contains(&key) {
                let name = host_names::token_secret(namespace, account);
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                self.inner.tokens.lock().remove(&key);
                continue;
            }
            let expires = a
                .get(host_names::ANNOTATION_TOKEN_EXPIRES)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc));
            if expires.is_none_or(|t| t < due) {
                self.write_token(namespace, account).await?;
            }
        }
        Ok(())
    }

    async fn status_up(&self, tenant: &Value, host: &Value) -> Result<(), SyncError> {
        let (namespace, name) = namespace_and_name(tenant);
        let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let node = host.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty());
        if let Some(node) = node {
            self.ensure_virtual_node(node).await?;
            let bound = tenant
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !bound {
                let binding = json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                match api
                    .create_subresource::<_, Value>(
                        "binding",
                        name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    // A pod the syncer placed itself (on its GPU slices) has no host scheduler's
                    // event to copy: the syncer says where it went.
                    Ok(_) if gpu_requests(tenant).is_ok_and(|r| !r.is_empty()) => {
                        let message = format!("Successfully assigned {namespace}/{name} to {node}");
                        self.tenant_event(tenant, "Normal", "Scheduled", &message).await?;
                    }
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut wanted = translate::tenant_status(host);
        let host_name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let host_uid = host.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        let uid = tenant.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        translate::in_tenant_words(
            &mut wanted,
            (&self.inner.host_namespace, host_name, host_uid),
            (namespace, name, uid),
        );
        let current = tenant.get("status").cloned().unwrap_or_else(|| json!({}));
        if covers(&current, &wanted) {
            return Ok(());
        }
        let mut status = current;
        for (k, v) in wanted.as_object().into_iter().flatten() {
            status[k] = v.clone();
        }
        self.patch_tenant_status(tenant, status).await.map(drop)
    }

    /// Merge `status` into the tenant pod's status; `false` when the pod is gone.
    async fn patch_tenant_status(&self, pod: &Value, status: Value) -> Result<bool, SyncError> {
        let (namespace, name) = namespace_and_name(pod);
        let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let patch = json!({"status": status});
        let params = kube::api::PatchParams::default();
        match api.patch_status(name, &params, &kube::api::Patch::Merge(&patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn fail_tenant_pod(&self, tenant: &Value, why: &str) -> Result<(), SyncError> {
        if !self.patch_tenant_status(tenant, translate::failed_status(tenant, why)).await? {
            return Ok(());
        }
        self.tenant_event(tenant, "Warning", "HostPodDeleted", why).await
    }

    /// Record why a pod cannot run yet: a `PodScheduled=False` condition and an event.
    async fn unschedulable(&self, tenant: &Value, why: &str) -> Result<(), SyncError> {
        let already = tenant
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "PodScheduled" && c["message"] == why);
        if already {
            return Ok(());
        }
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": why,
            "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        let status = json!({"phase": "Pending", "conditions": [condition]});
        if !self.patch_tenant_status(tenant, status).await? {
            return Ok(());
        }
        self.tenant_event(tenant, "Warning", "FailedScheduling", why).await
    }

    /// An Event about a tenant pod, written by the syncer's recorder (repeats aggregated).
    async fn tenant_event(
        &self,
        pod: &Value,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), SyncError> {
        let (namespace, name) = namespace_and_name(pod);
        let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
        let target = EventTarget::pod(namespace, name, uid);
        let kind = if kind == "Warning" { EventType::Warning } else { EventType::Normal };
        self.inner.recorder.record(&target, kind, reason, message).await?;
        Ok(())
    }

    /// A host event about one of our host pods, as an event about the tenant pod.
    async fn event_up(&self, event: &Event) -> Result<(), SyncError> {
        let involved = &event.involved_object;
        if involved.kind.as_deref() != Some("Pod") {
            return Ok(());
        }
        let Some(host_name) = involved.name.as_deref() else { return Ok(()) };
        let Some(host) =
            self.inner.host_pods.get(&ObjectRef::new(host_name).within(&self.inner.host_namespace))
        else {
            return Ok(());
        };
        let Some((namespace, name)) = tenant_key(&host) else { return Ok(()) };
        let uid = host
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(host_names::ANNOTATION_UID))
            .cloned()
            .unwrap_or_default();
        let host_uid = event.metadata.uid.clone().unwrap_or_default();
        let version = event.metadata.resource_version.clone().unwrap_or_default();
        if !self.inner.events_seen.lock().first(&host_uid, version) {
            return Ok(());
        }
        let suffix: String =
            host_uid.chars().filter(char::is_ascii_alphanumeric).take(16).collect();
        let event_name = format!("{name}.{suffix}");
        let mut copy = to_value(event)?;
        let host_pod_uid = host.metadata.uid.clone().unwrap_or_default();
        if let Some(message) = copy.get_mut("message") {
            translate::in_tenant_words(
                message,
                (&self.inner.host_namespace, host_name, &host_pod_uid),
                (&namespace, &name, &uid),
            );
        }
        copy["metadata"] = json!({"name": event_name, "namespace": namespace});
        copy["involvedObject"] = json!({"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid});
        let typed: Event = serde_json::from_value(copy)
            .map_err(|source| SyncError::Decode { kind: "Event", source })?;
        let api: Api<Event> = Api::namespaced(self.inner.tenant_client.clone(), &namespace);
        match api.create(&PostParams::default(), &typed).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&event_name).await?;
                let mut replacement = typed;
                replacement.metadata.resource_version = current.metadata.resource_version;
                api.replace(&event_name, &PostParams::default(), &replacement).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn ensure_virtual_node(&self, node: &str) -> Result<(), SyncError> {
        if self.inner.virtual_nodes.lock().contains_key(node) {
            return Ok(());
        }
        let host_nodes: Api<Node> = Api::all(self.inner.host_client.clone());
        let host_node = match host_nodes.get_opt(node).await? {
            Some(n) => to_value(&n)?,
            None => json!({"metadata": {"name": node}}),
        };
        let quota = self.inner.quota.read().clone();
        let wanted = translate::virtual_node(&host_node, &quota);
        let typed: Node = serde_json::from_value(wanted.clone())
            .map_err(|source| SyncError::Decode { kind: "Node", source })?;
        let nodes: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let old = match nodes.create(&PostParams::default(), &typed).await {
            // A create writes labels and spec; the status is still to write.
            Ok(_) => json!({"metadata": wanted["metadata"], "spec": wanted["spec"]}),
            // Written before a restart: brought in line with the host node from what it shows.
            Err(kube::Error::Api(e)) if e.code == 409 => match nodes.get_opt(node).await? {
                Some(n) => to_value(&n)?,
                None => json!({"metadata": {"name": node}}),
            },
            Err(e) => return Err(e.into()),
        };
        self.write_virtual_node(node, &old, &wanted).await
    }

    /// Bring virtual node `node` from what it shows (`old`) to `wanted`: its labels, cordon and
    /// taints, then its status, each by a merge patch of what differs.
    async fn write_virtual_node(
        &self,
        node: &str,
        old: &Value,
        wanted: &Value,
    ) -> Result<(), SyncError> {
        let nodes: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let part = |v: &Value, path: &str| v.pointer(path).cloned().unwrap_or_else(|| json!({}));
        let meta = translate::merge_patch(
            &json!({"metadata": {"labels": part(old, "/metadata/labels")}, "spec": part(old, "/spec")}),
            &json!({"metadata": {"labels": part(wanted, "/metadata/labels")}, "spec": part(wanted, "/spec")}),
        );
        let params = kube::api::PatchParams::default();
        if meta.as_object().is_some_and(|m| !m.is_empty()) {
            nodes.patch(node, &params, &kube::api::Patch::Merge(&meta)).await?;
        }
        let status = translate::merge_patch(&part(old, "/status"), &part(wanted, "/status"));
        if status.as_object().is_some_and(|m| !m.is_empty()) {
            let patch = json!({"status": status});
            nodes.patch_status(node, &params, &kube::api::Patch::Merge(&patch)).await?;
        }
        self.inner
            .virtual_nodes
            .lock()
            .insert(node.to_owned(), translate::virtual_node_shown(wanted));
        Ok(())
    }

    /// Keep the virtual nodes in line with their host nodes (readiness, cordon, taints, labels,
    /// addresses) and with the quota, writing only when what the tenant is shown changes.
    async fn watch_host_nodes(self) {
        // No cache of the host's nodes: a tenant uses few of them, and a large host has many.
        let api: Api<Node> = Api::all(self.inner.host_client.clone());
        let stream = watcher(api.clone(), watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        loop {
            let changed: Vec<Node> = tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n))) => vec![n],
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        tracing::warn!(tenant = %self.inner.tenant, error = %e, "watching host nodes");
                        continue;
                    }
                    None => return,
                },
                () = self.inner.quota_changed.notified() => {
                    let names: Vec<String> = self
                        .inner
                        .virtual_nodes
                        .lock()
                        .keys()
                        .cloned()
                        .collect();
                    let mut nodes = Vec::new();
                    for name in names {
                        match api.get_opt(&name).await {
                            Ok(Some(n)) => nodes.push(n),
                            Ok(None) => {}
                            Err(e) => tracing::debug!(tenant = %self.inner.tenant, node = %name, error = %e, "reading a host node"),
                        }
                    }
                    nodes
                }
            };
            for host in changed {
                let Some(name) = host.metadata.name.clone() else { continue };
                if let Err(e) = self.refresh_virtual_node(&name, &host).await {
                    tracing::debug!(tenant = %self.inner.tenant, node = %name, error = %e, "refreshing a virtual node");
                }
            }
        }
    }

    /// Virtual node `name`, if this tenant has one, brought in line with host node `host`.
    async fn refresh_virtual_node(&self, name: &str, host: &Node) -> Result<(), SyncError> {
        let Some(shown) = self.inner.virtual_nodes.lock().get(name).cloned() else {
            return Ok(());
        };
        let quota = self.inner.quota.read().clone();
        let wanted = translate::virtual_node(&to_value(host)?, &quota);
        if translate::virtual_node_shown(&wanted) == shown {
            return Ok(());
        }
        match self.write_virtual_node(name, &shown, &wanted).await {
            // Deleted in the tenant: made again when a pod next needs it.
            Err(SyncError::Kube(kube::Error::Api(e))) if e.code == 404 => {
                self.inner.virtual_nodes.lock().remove(name);
                Ok(())
            }
            other => other,
        }
    }

    /// Claims whose pod is gone, and virtual nodes no pod of the tenant runs on.
    async fn collect_garbage(&self) -> Result<(), SyncError> {
        let mut live_hosts: HashSet<String> = HashSet::new();
        let mut used_nodes: HashSet<String> = HashSet::new();
        for p in self.inner.host_pods.state() {
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
            let Some(name) = n.metadata.name else { continue };
            if !used_nodes.contains(&name) {
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

/// Where a GPU pod may run, read from its spec (its tolerations as far as the tenant's admin
/// allows them). As Kubernetes' `ExtendedResourceToleration`
/// admission plugin would, it tolerates `NoSchedule` taints named after the GPU resources it asks
/// for, and `nvidia.com/gpu`, the taint GPU nodes commonly carry, since every slice is part of a
/// GPU.
fn gpu_pod_needs(
    pod: &Value,
    allowed: &[carrel_gpu::fit::Toleration],
) -> Result<carrel_gpu::fit::PodNeeds, String> {
    use carrel_gpu::fit::{PodNeeds, Toleration};
    // Only the tolerations the tenant's admin allows count, as on the host pod.
    let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(o) = spec.as_object_mut() {
        o.insert("tolerations".into(), Value::Array(translate::tenant_tolerations(pod, allowed)));
    }
    let mut needs = PodNeeds::of_spec(&spec).map_err(|e| e.to_string())?;
    let mut resources: BTreeSet<String> = gpu_requests(pod)?.into_keys().collect();
    resources.insert(WHOLE_GPU.to_owned());
    for resource in resources {
        needs = needs.tolerating(Toleration::exists(&resource, "NoSchedule"));
    }
    Ok(needs)
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

/// `a/b` in a JSON pointer.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether the pod's status says it was scheduled: the syncer copied that from its host pod.
fn was_scheduled(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "True")
}

/// Whether a pod has finished (Succeeded or Failed).
fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn translate_terminal(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

/// Whether every field of `wanted` is already in `current` with that value.
fn covers(current: &Value, wanted: &Value) -> bool {
    wanted.as_object().into_iter().flatten().all(|(k, v)| current.get(k) == Some(v))
}

fn is_ours(pod: &Pod, tenant: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(host_names::LABEL_TENANT).map(String::as_str) == Some(tenant))
}

/// Whether host pod `host` was written by the syncer of `tenant` for tenant pod
/// `namespace/name` ([`host_names::stands_for`]).
fn stands_for_pod(host: &Value, tenant: &str, namespace: &str, name: &str) -> bool {
    let map = |pointer: &str| {
        host.pointer(pointer)
            .and_then(|m| serde_json::from_value::<BTreeMap<String, String>>(m.clone()).ok())
    };
    let identity = host_names::host_annotations(namespace, name, "");
    host_names::stands_for(
        map("/metadata/labels").as_ref(),
        map("/metadata/annotations").as_ref(),
        tenant,
        &identity,
    )
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
    use super::*;

    #[test]
    fn retries_back_off_to_ten_seconds() {
        assert_eq!(retry_delay(1), Duration::from_millis(50));
        assert_eq!(retry_delay(2), Duration::from_millis(100));
        assert_eq!(retry_delay(8), Duration::from_millis(6400));
        assert_eq!(retry_delay(9), Duration::from_secs(10));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn seen_events_hold_what_the_host_still_has() {
        let mut seen = SeenEvents::default();
        assert!(seen.first("a", "1".into()));
        assert!(!seen.first("a", "1".into()));
        assert!(seen.first("a", "2".into()), "a new version is copied again");
        assert!(seen.first("b", "1".into()));
        seen.forget("b");
        assert_eq!(seen.len(), 1);
        // A relist that shows only "c": "a" was deleted while the watch was away.
        seen.relisting();
        seen.listed("c");
        assert!(seen.first("c", "1".into()));
        assert_eq!(seen.len(), 2, "nothing is dropped before the relist is complete");
        seen.relisted();
        assert_eq!(seen.len(), 1);
        assert!(!seen.first("c", "1".into()));
        // Outside a relist, a listed event is just remembered by `first`.
        seen.listed("d");
        seen.relisted();
        assert_eq!(seen.len(), 1);
    }
}
