//! The host side shared by every syncer of a process: one watch per host kind, whatever the
//! number of tenants, each change routed to the syncer of the tenant it belongs to.
//!
//! - Host pods, ConfigMaps, Secrets, PersistentVolumeClaims, NetworkPolicies, Services,
//!   EndpointSlices and Ingresses: those the syncers wrote (their `managed-by` label), in every namespace; each goes
//!   to the partition its namespace and tenant label name.
//! - Host Events about pods: each goes to the partition of its namespace (a tenant's host
//!   namespace).
//! - Nodes: one cache; every change goes to every syncer (virtual nodes follow them).
//! - StorageClasses and IngressClasses: one cache each ([`Classes`]); every change goes to every
//!   syncer (the tenants' mirrors follow them, and host claims are given their classes from the
//!   StorageClasses).
//! - Claim Leases: one cache (placement reads the whole fleet); a change goes to the syncer of
//!   the tenant whose pod holds the claim.
//! - Host-name claims ([`crate::hostnames`]): not cached; a release is told to every syncer (an
//!   Ingress refused for a host another tenant held is looked at again at once).
//!
//! A syncer subscribes to its tenant's partitions when it starts and unsubscribes when it stops;
//! a change for a tenant with no syncer is dropped (its partition's cache still follows it, so a
//! syncer that starts later is shown it), but a change to one of its host pods or claims is told
//! to [`HostWatch::on_unheard`]'s callback, which can start that syncer (`carrel up` opens the
//! idle tenant, whose syncer starts with it). The watches start with the first subscription (or
//! that callback) and end with the last [`HostWatch`] handle.

mod fanout;
mod feed;

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Node, PersistentVolumeClaim, Pod, Secret, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use parking_lot::Mutex;

use carrel_gpu::leases::Selection;
use carrel_machinery::tenancy::HOST_NAMESPACE_PREFIX;

use fanout::Fanout;
pub use fanout::Listener;
use feed::Feed;
pub use feed::{Fed, Partition, Subscription};

use crate::{host_names, AbortOnDrop, Key};

/// The host side of every syncer of a process: see the [module](self).
#[derive(Clone)]
pub struct HostWatch {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    /// The one namespace watched, for a syncer whose host credentials reach only its own;
    /// `None`: every namespace.
    namespace: Option<String>,
    pods: Arc<Feed<Pod>>,
    config_maps: Arc<Feed<ConfigMap>>,
    secrets: Arc<Feed<Secret>>,
    volume_claims: Arc<Feed<PersistentVolumeClaim>>,
    network_policies: Arc<Feed<NetworkPolicy>>,
    services: Arc<Feed<Service>>,
    endpoint_slices: Arc<Feed<EndpointSlice>>,
    ingresses: Arc<Feed<Ingress>>,
    events: Arc<Feed<Event>>,
    nodes: Store<Node>,
    claim_leases: Store<Lease>,
    storage_classes: Classes<StorageClass>,
    ingress_classes: Classes<IngressClass>,
    node_changes: Arc<Fanout<Arc<Node>>>,
    /// Told of every host-name claim released.
    host_releases: Arc<Fanout<()>>,
    claim_changes: Arc<Fanout<Key>>,
    /// Told of a change to the host pods or claims of a tenant with no syncer.
    unheard: Unheard,
    /// The writers of the node and Lease caches until the watches start, then the watches.
    started: Mutex<Started>,
}

/// Who is told of a change for a tenant whose syncer is not running: set once.
#[derive(Clone, Default)]
pub(crate) struct Unheard(Arc<OnceLock<Tell>>);

/// What is told the tenant of an unheard change.
type Tell = Box<dyn Fn(&str) + Send + Sync>;

impl Unheard {
    /// Tell of a change for `tenant`, which no syncer heard.
    pub(crate) fn tell(&self, tenant: &str) {
        if let Some(tell) = self.0.get() {
            tell(tenant);
        }
    }
}

/// The writers of the caches kept for every syncer, until the watches that fill them start.
struct Writers {
    nodes: reflector::store::Writer<Node>,
    leases: reflector::store::Writer<Lease>,
    storage_classes: reflector::store::Writer<StorageClass>,
    ingress_classes: reflector::store::Writer<IngressClass>,
}

/// One kind of the host's cluster-wide classes: its cache, and every change told to every
/// syncer.
pub struct Classes<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    /// Told of every change to the classes.
    changes: Arc<Fanout<()>>,
    /// True once `store` holds the first list. (Waiting on the store itself is safe for one
    /// task only: kube-runtime's readiness keeps the last waker registered, so with several
    /// tasks waiting, or a `now_or_never` probe, a waiter may never be woken.)
    ready: tokio::sync::watch::Sender<bool>,
}

impl<K: kube::Resource<DynamicType = ()> + Clone + 'static> std::fmt::Debug for Classes<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classes").field("kind", &K::kind(&())).finish()
    }
}

impl<K: kube::Resource<DynamicType = ()> + Clone + 'static> Classes<K> {
    fn new() -> (Classes<K>, reflector::store::Writer<K>) {
        let (store, writer) = reflector::store();
        let classes = Classes {
            store,
            changes: Arc::new(Fanout::default()),
            ready: tokio::sync::watch::Sender::new(false),
        };
        (classes, writer)
    }

    /// The classes.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// True once [`Classes::store`] holds the first list: what any number of tasks may wait on
    /// or look at.
    pub fn ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready.subscribe()
    }
}

enum Started {
    No(Box<Writers>),
    Yes(#[allow(dead_code)] Vec<AbortOnDrop>),
}

impl std::fmt::Debug for HostWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostWatch").field("namespace", &self.inner.namespace).finish()
    }
}

/// What one syncer is given of the host side: its partitions and the node and claim changes
/// that concern it. Dropped, it is unsubscribed from all of them.
pub(crate) struct TenantFeed {
    pub(crate) pods: Subscription<Pod>,
    pub(crate) config_maps: Subscription<ConfigMap>,
    pub(crate) secrets: Subscription<Secret>,
    pub(crate) volume_claims: Subscription<PersistentVolumeClaim>,
    pub(crate) network_policies: Subscription<NetworkPolicy>,
    pub(crate) services: Subscription<Service>,
    pub(crate) endpoint_slices: Subscription<EndpointSlice>,
    pub(crate) ingresses: Subscription<Ingress>,
    pub(crate) events: Subscription<Event>,
    pub(crate) nodes: Listener<Arc<Node>>,
    pub(crate) storage_classes: Listener<()>,
    pub(crate) ingress_classes: Listener<()>,
    pub(crate) host_releases: Listener<()>,
    pub(crate) claims: Listener<Key>,
}

/// The partition a host object the syncers wrote belongs to: its namespace and tenant label.
fn labelled<K: kube::Resource>(object: &K) -> Option<Partition> {
    let meta = object.meta();
    let labels = meta.labels.as_ref()?;
    if labels.get(host_names::LABEL_MANAGED_BY).map(String::as_str) != Some(host_names::MANAGED_BY)
    {
        return None;
    }
    Some(Partition {
        namespace: meta.namespace.clone()?,
        tenant: labels.get(host_names::LABEL_TENANT)?.clone(),
    })
}

/// The partition of a host Event: its namespace.
fn in_namespace(event: &Event) -> Option<Partition> {
    Some(Partition { namespace: event.metadata.namespace.clone()?, tenant: String::new() })
}

/// The tenant pod whose claim a Lease records, and the tenant.
fn claim_of(lease: &Lease) -> Option<(String, Key)> {
    let annotations = lease.metadata.annotations.as_ref()?;
    let claim = carrel_gpu::Claim::from_metadata(annotations).ok()?;
    Some((claim.holder.tenant, (claim.holder.namespace, claim.holder.pod)))
}

impl HostWatch {
    /// The host side for syncers of any tenants, watching every namespace of the host reached
    /// with `host`.
    pub fn new(host: kube::Client) -> HostWatch {
        HostWatch::make(host, None)
    }

    /// The host side for syncers whose host namespace is `namespace`, watching that namespace
    /// only (nodes and claims are cluster-wide all the same): for a syncer whose host
    /// credentials reach only its own namespace.
    pub fn in_namespace(host: kube::Client, namespace: &str) -> HostWatch {
        HostWatch::make(host, Some(namespace.to_owned()))
    }

    fn make(client: kube::Client, namespace: Option<String>) -> HostWatch {
        // Events of namespaces no syncer subscribes to are kept only where they may be a
        // tenant's; labelled objects are the syncers' own wherever they are.
        let one_namespace = namespace.is_some();
        let keep_events =
            move |p: &Partition| one_namespace || p.namespace.starts_with(HOST_NAMESPACE_PREFIX);
        let (nodes, nodes_writer) = reflector::store();
        let (claim_leases, leases_writer) = reflector::store();
        let (storage_classes, storage_classes_writer) = Classes::new();
        let (ingress_classes, ingress_classes_writer) = Classes::new();
        let unheard = Unheard::default();
        HostWatch {
            inner: Arc::new(Inner {
                client,
                namespace,
                pods: Arc::new(Feed::new(labelled, |_| true).telling(unheard.clone())),
                config_maps: Arc::new(Feed::new(labelled, |_| true)),
                secrets: Arc::new(Feed::new(labelled, |_| true)),
                volume_claims: Arc::new(Feed::new(labelled, |_| true)),
                network_policies: Arc::new(Feed::new(labelled, |_| true)),
                services: Arc::new(Feed::new(labelled, |_| true)),
                endpoint_slices: Arc::new(Feed::new(labelled, |_| true)),
                ingresses: Arc::new(Feed::new(labelled, |_| true)),
                events: Arc::new(Feed::new(in_namespace, keep_events)),
                nodes,
                claim_leases,
                storage_classes,
                ingress_classes,
                node_changes: Arc::new(Fanout::default()),
                host_releases: Arc::new(Fanout::default()),
                claim_changes: Arc::new(Fanout::default()),
                unheard,
                started: Mutex::new(Started::No(Box::new(Writers {
                    nodes: nodes_writer,
                    leases: leases_writer,
                    storage_classes: storage_classes_writer,
                    ingress_classes: ingress_classes_writer,
                }))),
            }),
        }
    }

    /// The client of the host.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// The host's nodes.
    pub fn nodes(&self) -> Store<Node> {
        self.inner.nodes.clone()
    }

    /// Every claim Lease.
    pub fn claim_leases(&self) -> Store<Lease> {
        self.inner.claim_leases.clone()
    }

    /// The host's StorageClasses.
    pub fn storage_classes(&self) -> &Classes<StorageClass> {
        &self.inner.storage_classes
    }

    /// The host's IngressClasses.
    pub fn ingress_classes(&self) -> &Classes<IngressClass> {
        &self.inner.ingress_classes
    }

    /// The host pods the syncer of `tenant` wrote in `host_namespace`, and their changes.
    /// Starts the watches if they are not running: call it within a Tokio runtime.
    pub fn pods(&self, tenant: &str, host_namespace: &str) -> Subscription<Pod> {
        self.start();
        self.inner.pods.subscribe(partition(tenant, host_namespace))
    }

    /// Everything the syncer of `tenant` in `host_namespace` is told of the host.
    pub(crate) fn subscribe(&self, tenant: &str, host_namespace: &str) -> TenantFeed {
        self.start();
        let labelled = partition(tenant, host_namespace);
        let events = Partition { namespace: host_namespace.to_owned(), tenant: String::new() };
        let nodes = self.inner.nodes.clone();
        let leases = self.inner.claim_leases.clone();
        let mine = tenant.to_owned();
        TenantFeed {
            pods: self.inner.pods.subscribe(labelled.clone()),
            config_maps: self.inner.config_maps.subscribe(labelled.clone()),
            secrets: self.inner.secrets.subscribe(labelled.clone()),
            volume_claims: self.inner.volume_claims.subscribe(labelled.clone()),
            network_policies: self.inner.network_policies.subscribe(labelled.clone()),
            services: self.inner.services.subscribe(labelled.clone()),
            endpoint_slices: self.inner.endpoint_slices.subscribe(labelled.clone()),
            ingresses: self.inner.ingresses.subscribe(labelled),
            events: self.inner.events.subscribe(events),
            // Shown what the caches hold, as a watch of their own would be at its start.
            nodes: self.inner.node_changes.listen(tenant, |send| {
                nodes.state().into_iter().for_each(send);
            }),
            // One change is enough for a syncer to look at every class.
            storage_classes: self.inner.storage_classes.changes.listen(tenant, |send| send(())),
            ingress_classes: self.inner.ingress_classes.changes.listen(tenant, |send| send(())),
            host_releases: self.inner.host_releases.listen(tenant, |_| {}),
            claims: self.inner.claim_changes.listen(tenant, |send| {
                for lease in leases.state() {
                    match claim_of(&lease) {
                        Some((holder, key)) if holder == mine => send(key),
                        _ => {}
                    }
                }
            }),
        }
    }

    /// Call `tell` with the tenant of each change to a host pod or a claim that no syncer
    /// subscribes to (its syncer is not running), as the change comes; from now on, and for the
    /// host pods listed when the watches start. `tell` runs while the change is routed: it must
    /// not block (spawn what it does). Starts the watches: call it within a Tokio runtime. Only
    /// the first call has an effect.
    pub fn on_unheard(&self, tell: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.inner.unheard.0.set(Box::new(tell));
        self.start();
    }

    /// The tenants with a subscription to any part of the host side.
    pub fn subscribed_tenants(&self) -> BTreeSet<String> {
        let inner = &self.inner;
        let mut tenants: BTreeSet<String> = [
            inner.pods.subscribed(),
            inner.config_maps.subscribed(),
            inner.secrets.subscribed(),
            inner.volume_claims.subscribed(),
            inner.network_policies.subscribed(),
            inner.services.subscribed(),
            inner.endpoint_slices.subscribed(),
            inner.ingresses.subscribed(),
        ]
        .into_iter()
        .flatten()
        .map(|p| p.tenant)
        .collect();
        tenants.extend(inner.node_changes.listening());
        tenants.extend(inner.storage_classes.changes.listening());
        tenants.extend(inner.ingress_classes.changes.listening());
        tenants.extend(inner.host_releases.listening());
        tenants.extend(inner.claim_changes.listening());
        tenants
    }

    /// The host namespaces whose Events a syncer subscribes to.
    pub fn subscribed_namespaces(&self) -> BTreeSet<String> {
        self.inner.events.subscribed().into_iter().map(|p| p.namespace).collect()
    }

    /// The partitions whose host pods are cached: those subscribed to, and those with pods.
    pub fn cached_pod_partitions(&self) -> BTreeSet<Partition> {
        self.inner.pods.cached()
    }

    /// Start the watches, once.
    fn start(&self) {
        let mut started = self.inner.started.lock();
        let Started::No(..) = &*started else { return };
        let placeholder = Started::Yes(Vec::new());
        let Started::No(writers) = std::mem::replace(&mut *started, placeholder) else {
            return;
        };
        let Writers {
            nodes: nodes_writer,
            leases: leases_writer,
            storage_classes,
            ingress_classes,
        } = *writers;
        let inner = &self.inner;
        let labels = format!("{}={}", host_names::LABEL_MANAGED_BY, host_names::MANAGED_BY);
        let labelled = watcher::Config::default().labels(&labels);
        let tasks = vec![
            self.spawn_feed(&inner.pods, labelled.clone(), "host pods"),
            self.spawn_feed(&inner.config_maps, labelled.clone(), "host ConfigMaps"),
            self.spawn_feed(&inner.secrets, labelled.clone(), "host Secrets"),
            self.spawn_feed(&inner.volume_claims, labelled.clone(), "host PersistentVolumeClaims"),
            self.spawn_feed(&inner.network_policies, labelled.clone(), "host NetworkPolicies"),
            self.spawn_feed(&inner.services, labelled.clone(), "host Services"),
            self.spawn_feed(&inner.endpoint_slices, labelled.clone(), "host EndpointSlices"),
            self.spawn_feed(&inner.ingresses, labelled, "host Ingresses"),
            self.spawn_feed(
                &inner.events,
                watcher::Config::default().fields("involvedObject.kind=Pod"),
                "host events",
            ),
            AbortOnDrop(tokio::spawn(watch_nodes(
                Api::all(inner.client.clone()),
                nodes_writer,
                inner.node_changes.clone(),
            ))),
            AbortOnDrop(tokio::spawn(watch_classes(
                Api::all(inner.client.clone()),
                storage_classes,
                inner.storage_classes.changes.clone(),
                inner.storage_classes.ready.clone(),
            ))),
            AbortOnDrop(tokio::spawn(watch_classes(
                Api::all(inner.client.clone()),
                ingress_classes,
                inner.ingress_classes.changes.clone(),
                inner.ingress_classes.ready.clone(),
            ))),
            AbortOnDrop(tokio::spawn(watch_host_releases(
                carrel_gpu::leases::api(&inner.client),
                inner.host_releases.clone(),
            ))),
            AbortOnDrop(tokio::spawn(watch_claims(
                carrel_gpu::leases::api(&inner.client),
                leases_writer,
                inner.claim_changes.clone(),
                inner.unheard.clone(),
            ))),
        ];
        *started = Started::Yes(tasks);
    }

    fn spawn_feed<K>(
        &self,
        feed: &Arc<Feed<K>>,
        config: watcher::Config,
        what: &'static str,
    ) -> AbortOnDrop
    where
        K: Fed
            + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = match &self.inner.namespace {
            Some(namespace) => Api::namespaced(self.inner.client.clone(), namespace),
            None => Api::all(self.inner.client.clone()),
        };
        let feed = feed.clone();
        AbortOnDrop(tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                match event {
                    Ok(event) => feed.apply(event),
                    Err(e) => tracing::warn!(error = %e, "watching the {what}"),
                }
            }
        }))
    }
}

fn partition(tenant: &str, host_namespace: &str) -> Partition {
    Partition { namespace: host_namespace.to_owned(), tenant: tenant.to_owned() }
}

/// Keep the cache of the host's nodes; every change goes to every syncer.
async fn watch_nodes(
    api: Api<Node>,
    writer: reflector::store::Writer<Node>,
    changes: Arc<Fanout<Arc<Node>>>,
) {
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => {
                changes.send_all(&Arc::new(node));
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "watching host nodes"),
        }
    }
}

/// Keep the cache of one kind of the host's classes; every change (a deletion too) goes to
/// every syncer.
async fn watch_classes<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    changes: Arc<Fanout<()>>,
    ready: tokio::sync::watch::Sender<bool>,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init) => {}
            // The reflector has applied the list to the store before passing this on.
            Ok(watcher::Event::InitDone) => {
                ready.send_replace(true);
                changes.send_all(&());
            }
            Ok(_) => changes.send_all(&()),
            Err(e) => tracing::warn!(error = %e, "watching the host's {}", K::kind(&())),
        }
    }
}

/// Tell every syncer of each host-name claim released.
async fn watch_host_releases(api: Api<Lease>, releases: Arc<Fanout<()>>) {
    let config =
        watcher::Config::default().labels(carrel_machinery::tenancy::LABEL_HOSTNAME_HOLDER);
    let stream = watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Delete(_)) => releases.send_all(&()),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "watching the host-name claims"),
        }
    }
}

/// Keep the cache of the claim Leases; a change to a claim goes to the syncer of the tenant
/// whose pod holds it, as that pod's key (the node agent writes the device it made on the
/// claim: the pod waiting for it can now run).
async fn watch_claims(
    api: Api<Lease>,
    writer: reflector::store::Writer<Lease>,
    changes: Arc<Fanout<Key>>,
    unheard: Unheard,
) {
    let config = watcher::Config::default().labels(&Selection::All.labels());
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(
                watcher::Event::Apply(lease)
                | watcher::Event::Delete(lease)
                | watcher::Event::InitApply(lease),
            ) => {
                if let Some((tenant, key)) = claim_of(&lease) {
                    if !changes.send(&tenant, key) {
                        unheard.tell(&tenant);
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "watching the claim Leases"),
        }
    }
}
