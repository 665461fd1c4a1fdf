//! One shared watch of a namespaced host kind, cut into partitions (a tenant's objects in its
//! host namespace): each partition has a cache of its own, and each change goes to the
//! subscribers of its partition only. To a subscriber, its partition reads as a watch of its own
//! objects would: a relist of the shared watch (`Init`, `InitApply`…, `InitDone`) reaches every
//! subscriber, and one that subscribes late is first shown what its cache holds as a relist.

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher::Event;
use parking_lot::Mutex;

use super::Unheard;

/// Where a host object belongs: its namespace, and the tenant its labels name (`""` for a kind
/// whose objects carry no tenant label: host Events, which belong to their namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition {
    /// The host namespace.
    pub namespace: String,
    /// The tenant, or `""`.
    pub tenant: String,
}

/// A kind a shared host watch can carry.
pub trait Fed:
    kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Fed for K where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

/// Where the shared watch is in its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// It has not begun one.
    Unlisted,
    /// Between `Init` and `InitDone`.
    Listing,
    /// Listed; changes come one by one.
    Live,
}

/// The objects of one partition.
struct Cache<K: Fed> {
    writer: reflector::store::Writer<K>,
    store: Store<K>,
}

impl<K: Fed> Cache<K> {
    /// A cache made while the shared watch is at `phase`: during a list it takes part in it,
    /// and once listed it is complete (and ready) with nothing in it.
    fn new(phase: Phase) -> Cache<K> {
        let (store, mut writer) = reflector::store();
        match phase {
            Phase::Unlisted => {}
            Phase::Listing => writer.apply_watcher_event(&Event::Init),
            Phase::Live => {
                writer.apply_watcher_event(&Event::Init);
                writer.apply_watcher_event(&Event::InitDone);
            }
        }
        Cache { writer, store }
    }
}

struct Subscriber<K> {
    id: u64,
    tx: UnboundedSender<Event<K>>,
    /// Whether it has been shown its partition: one that subscribed during a list is shown it
    /// once the list is done.
    primed: bool,
}

struct State<K: Fed> {
    phase: Phase,
    /// By namespace, then tenant.
    caches: HashMap<String, HashMap<String, Cache<K>>>,
    subscribers: HashMap<Partition, Vec<Subscriber<K>>>,
    next_id: u64,
}

/// One shared watch's objects by partition, and their subscribers.
pub(crate) struct Feed<K: Fed> {
    state: Mutex<State<K>>,
    /// The partition of an object; `None` for an object that is none of Carrel's.
    partition_of: fn(&K) -> Option<Partition>,
    /// Whether the objects of a partition no one subscribes to are kept, for a subscriber to
    /// come (a partition subscribed to is always kept).
    keep: Box<dyn Fn(&Partition) -> bool + Send + Sync>,
    /// Told of a change to a tenant's partition that no one subscribes to.
    unheard: Option<Unheard>,
}

impl<K: Fed> Feed<K> {
    pub(crate) fn new(
        partition_of: fn(&K) -> Option<Partition>,
        keep: impl Fn(&Partition) -> bool + Send + Sync + 'static,
    ) -> Feed<K> {
        Feed {
            state: Mutex::new(State {
                phase: Phase::Unlisted,
                caches: HashMap::new(),
                subscribers: HashMap::new(),
                next_id: 0,
            }),
            partition_of,
            keep: Box::new(keep),
            unheard: None,
        }
    }

    /// Tell `unheard` of each change to a tenant's partition no one subscribes to.
    pub(crate) fn telling(self, unheard: Unheard) -> Feed<K> {
        Feed { unheard: Some(unheard), ..self }
    }

    /// Tell of a change to `partition` if no one subscribes to it.
    fn unheard(&self, state: &State<K>, partition: &Partition) {
        if let Some(unheard) = &self.unheard {
            if !partition.tenant.is_empty() && !state.subscribers.contains_key(partition) {
                unheard.tell(&partition.tenant);
            }
        }
    }

    /// Take in one event of the shared watch: the caches follow it, and the subscribers of the
    /// partition it concerns (all of them, for the bounds of a list) are sent it.
    pub(crate) fn apply(&self, event: Event<K>) {
        let mut state = self.state.lock();
        match event {
            Event::Init => {
                state.phase = Phase::Listing;
                for cache in state.caches.values_mut().flat_map(HashMap::values_mut) {
                    cache.writer.apply_watcher_event(&Event::Init);
                }
                state.send_all(|| Event::Init);
            }
            Event::InitApply(object) => {
                let Some(partition) = (self.partition_of)(&object) else { return };
                let event = Event::InitApply(object);
                let create = (self.keep)(&partition);
                if let Some(cache) = state.cache(&partition, create) {
                    cache.writer.apply_watcher_event(&event);
                }
                self.unheard(&state, &partition);
                state.send(&partition, event);
            }
            Event::InitDone => {
                state.phase = Phase::Live;
                for cache in state.caches.values_mut().flat_map(HashMap::values_mut) {
                    cache.writer.apply_watcher_event(&Event::InitDone);
                }
                state.send_all(|| Event::InitDone);
                state.prime();
                state.prune_all();
            }
            Event::Apply(object) => {
                let partition = (self.partition_of)(&object);
                // An object whose labels now name another tenant (or none) leaves the
                // partition it was in.
                state.evict(&object, partition.as_ref().map(|p| p.tenant.as_str()));
                let Some(partition) = partition else { return };
                let event = Event::Apply(object);
                let create = (self.keep)(&partition);
                if let Some(cache) = state.cache(&partition, create) {
                    cache.writer.apply_watcher_event(&event);
                }
                self.unheard(&state, &partition);
                state.send(&partition, event);
            }
            Event::Delete(object) => {
                let left = state.evict(&object, None);
                // Its subscribers hear of it even if their cache never held it.
                if let Some(partition) = (self.partition_of)(&object) {
                    self.unheard(&state, &partition);
                    if !left.contains(&partition) {
                        state.send(&partition, Event::Delete(object));
                    }
                }
            }
        }
    }

    /// Subscribe to `partition`: its cache, and the changes to it from now on, led by a relist
    /// of what the cache holds (once the shared watch has listed).
    pub(crate) fn subscribe(self: &Arc<Self>, partition: Partition) -> Subscription<K> {
        let (tx, rx) = unbounded();
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        let primed = state.phase == Phase::Live;
        let store = state.make_cache(&partition).store.clone();
        if primed {
            relist(&store, &tx);
        }
        state.subscribers.entry(partition.clone()).or_default().push(Subscriber { id, tx, primed });
        drop(state);
        Subscription { feed: self.clone(), partition, id, store, rx }
    }

    fn unsubscribe(&self, partition: &Partition, id: u64) {
        let mut state = self.state.lock();
        if let Some(subscribers) = state.subscribers.get_mut(partition) {
            subscribers.retain(|s| s.id != id);
            if subscribers.is_empty() {
                state.subscribers.remove(partition);
            }
        }
        if state.phase == Phase::Live {
            state.prune(partition);
        }
    }

    /// The partitions subscribed to.
    pub(crate) fn subscribed(&self) -> BTreeSet<Partition> {
        self.state.lock().subscribers.keys().cloned().collect()
    }

    /// The partitions cached.
    pub(crate) fn cached(&self) -> BTreeSet<Partition> {
        let state = self.state.lock();
        let mut partitions = BTreeSet::new();
        for (namespace, tenants) in &state.caches {
            for tenant in tenants.keys() {
                partitions
                    .insert(Partition { namespace: namespace.clone(), tenant: tenant.clone() });
            }
        }
        partitions
    }
}

/// Show a subscriber what `store` holds as a relist.
fn relist<K: Fed>(store: &Store<K>, tx: &UnboundedSender<Event<K>>) {
    let _ = tx.unbounded_send(Event::Init);
    for object in store.state() {
        let _ = tx.unbounded_send(Event::InitApply((*object).clone()));
    }
    let _ = tx.unbounded_send(Event::InitDone);
}

impl<K: Fed> State<K> {
    /// The cache of `partition`, made when missing if `create` or someone subscribes to it.
    fn cache(&mut self, partition: &Partition, create: bool) -> Option<&mut Cache<K>> {
        if create || self.subscribers.contains_key(partition) {
            return Some(self.make_cache(partition));
        }
        self.caches.get_mut(&partition.namespace)?.get_mut(&partition.tenant)
    }

    /// The cache of `partition`, made when missing.
    fn make_cache(&mut self, partition: &Partition) -> &mut Cache<K> {
        let phase = self.phase;
        let tenants = self.caches.entry(partition.namespace.clone()).or_default();
        tenants.entry(partition.tenant.clone()).or_insert_with(|| Cache::new(phase))
    }

    /// Send `event` to the primed subscribers of `partition`.
    fn send(&mut self, partition: &Partition, event: Event<K>) {
        let Some(subscribers) = self.subscribers.get(partition) else { return };
        let primed: Vec<&Subscriber<K>> = subscribers.iter().filter(|s| s.primed).collect();
        if let Some((last, rest)) = primed.split_last() {
            for s in rest {
                let _ = s.tx.unbounded_send(event.clone());
            }
            let _ = last.tx.unbounded_send(event);
        }
    }

    /// Send an event to every primed subscriber.
    fn send_all(&self, event: impl Fn() -> Event<K>) {
        for s in self.subscribers.values().flatten().filter(|s| s.primed) {
            let _ = s.tx.unbounded_send(event());
        }
    }

    /// Show the subscribers that came during the list their partitions, now complete.
    fn prime(&mut self) {
        let State { caches, subscribers, .. } = self;
        for (partition, subs) in subscribers.iter_mut() {
            let Some(cache) =
                caches.get(&partition.namespace).and_then(|c| c.get(&partition.tenant))
            else {
                continue;
            };
            for s in subs.iter_mut().filter(|s| !s.primed) {
                relist(&cache.store, &s.tx);
                s.primed = true;
            }
        }
    }

    /// Take `object` out of every cache of its namespace but `except`'s (a tenant), telling
    /// their subscribers it is gone; the partitions it left.
    fn evict(&mut self, object: &K, except: Option<&str>) -> Vec<Partition> {
        let Some(namespace) = object.meta().namespace.clone() else { return Vec::new() };
        let Some(tenants) = self.caches.get_mut(&namespace) else { return Vec::new() };
        let key = object.to_object_ref(());
        let mut left = Vec::new();
        for (tenant, cache) in tenants.iter_mut() {
            if except == Some(tenant.as_str()) || cache.store.get(&key).is_none() {
                continue;
            }
            cache.writer.apply_watcher_event(&Event::Delete(object.clone()));
            left.push(Partition { namespace: namespace.clone(), tenant: tenant.clone() });
        }
        for partition in &left {
            self.send(partition, Event::Delete(object.clone()));
            self.prune(partition);
        }
        left
    }

    /// Drop the cache of `partition` if it is empty and no one subscribes to it.
    fn prune(&mut self, partition: &Partition) {
        if self.subscribers.contains_key(partition) {
            return;
        }
        let Some(tenants) = self.caches.get_mut(&partition.namespace) else { return };
        if tenants.get(&partition.tenant).is_some_and(|c| c.store.is_empty()) {
            tenants.remove(&partition.tenant);
        }
        if tenants.is_empty() {
            self.caches.remove(&partition.namespace);
        }
    }

    fn prune_all(&mut self) {
        let State { caches, subscribers, .. } = self;
        caches.retain(|namespace, tenants| {
            tenants.retain(|tenant, cache| {
                let partition = Partition { namespace: namespace.clone(), tenant: tenant.clone() };
                subscribers.contains_key(&partition) || !cache.store.is_empty()
            });
            !tenants.is_empty()
        });
    }
}

/// A subscription to one partition of a shared host watch: a stream of its changes as a watch
/// of its own would show them, and its cache. Dropped, it unsubscribes.
pub struct Subscription<K: Fed> {
    feed: Arc<Feed<K>>,
    partition: Partition,
    id: u64,
    store: Store<K>,
    rx: UnboundedReceiver<Event<K>>,
}

impl<K: Fed> Subscription<K> {
    /// The partition's cache, kept by the shared watch.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// The partition.
    pub fn partition(&self) -> &Partition {
        &self.partition
    }
}

impl<K: Fed> std::fmt::Debug for Subscription<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("partition", &self.partition).finish()
    }
}

impl<K: Fed> Stream for Subscription<K> {
    type Item = Event<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event<K>>> {
        self.rx.poll_next_unpin(cx)
    }
}

impl<K: Fed> Drop for Subscription<K> {
    fn drop(&mut self) {
        self.feed.unsubscribe(&self.partition, self.id);
    }
}

#[cfg(test)]
mod tests;
