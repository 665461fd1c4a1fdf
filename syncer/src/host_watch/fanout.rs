//! Changes of a host kind cached once for every syncer (nodes, claim Leases), sent to the
//! syncers they concern: a map from tenant to its listeners.

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

/// The listeners of one kind's changes, by tenant.
pub(crate) struct Fanout<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    listeners: HashMap<String, Vec<(u64, UnboundedSender<T>)>>,
    next_id: u64,
}

impl<T> Default for Fanout<T> {
    fn default() -> Self {
        Fanout { state: Mutex::new(State { listeners: HashMap::new(), next_id: 0 }) }
    }
}

impl<T: Clone> Fanout<T> {
    /// Listen to the changes for `tenant`; `replay` is given a sender for what the listener is
    /// to be shown first, while no change can be sent (a change it already shows may come
    /// again, none is missed).
    pub(crate) fn listen(
        self: &Arc<Self>,
        tenant: &str,
        replay: impl FnOnce(&dyn Fn(T)),
    ) -> Listener<T> {
        let (tx, rx) = unbounded();
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        replay(&|item| {
            let _ = tx.unbounded_send(item);
        });
        state.listeners.entry(tenant.to_owned()).or_default().push((id, tx));
        drop(state);
        Listener { fanout: self.clone(), tenant: tenant.to_owned(), id, rx }
    }

    /// Send `item` to the listeners of `tenant`; dropped when there are none (false then).
    pub(crate) fn send(&self, tenant: &str, item: T) -> bool {
        let state = self.state.lock();
        let Some(listeners) = state.listeners.get(tenant) else { return false };
        for (_, tx) in listeners {
            let _ = tx.unbounded_send(item.clone());
        }
        true
    }

    /// Send `item` to every listener.
    pub(crate) fn send_all(&self, item: &T) {
        let state = self.state.lock();
        for (_, tx) in state.listeners.values().flatten() {
            let _ = tx.unbounded_send(item.clone());
        }
    }

    /// The tenants listened for.
    pub(crate) fn listening(&self) -> BTreeSet<String> {
        self.state.lock().listeners.keys().cloned().collect()
    }
}

impl<T> Fanout<T> {
    fn unlisten(&self, tenant: &str, id: u64) {
        let mut state = self.state.lock();
        if let Some(listeners) = state.listeners.get_mut(tenant) {
            listeners.retain(|(i, _)| *i != id);
            if listeners.is_empty() {
                state.listeners.remove(tenant);
            }
        }
    }
}

/// The changes for one tenant, as a stream. Dropped, it stops listening.
pub struct Listener<T> {
    fanout: Arc<Fanout<T>>,
    tenant: String,
    id: u64,
    rx: UnboundedReceiver<T>,
}

impl<T> std::fmt::Debug for Listener<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("tenant", &self.tenant).finish()
    }
}

impl<T> Stream for Listener<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.rx.poll_next_unpin(cx)
    }
}

impl<T> Drop for Listener<T> {
    fn drop(&mut self) {
        self.fanout.unlisten(&self.tenant, self.id);
    }
}
