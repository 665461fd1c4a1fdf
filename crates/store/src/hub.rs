//! Fan-out of durable events to live watchers.
//!
//! The syncing leader publishes each group of events once it is on disk. Every watcher has a bounded
//! queue; publishing never waits: a watcher whose queue is full is ended (it will see
//! [`Error::WatcherTooSlow`](crate::Error::WatcherTooSlow) after draining what it has), so a
//! slow watcher costs neither writers nor other watchers anything.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::{Error, Event, Result, Revision};

/// Why a watcher's live queue was closed.
#[derive(Debug, Default)]
pub(crate) struct EndSignal(AtomicU8);

const OPEN: u8 = 0;
const TOO_SLOW: u8 = 1;
const CLOSED: u8 = 2;

impl EndSignal {
    fn set(&self, why: u8) {
        let _ = self.0.compare_exchange(OPEN, why, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The error a watcher reports once its live queue is drained.
    pub(crate) fn error(&self, last_delivered: Revision) -> Error {
        match self.0.load(Ordering::Acquire) {
            TOO_SLOW => Error::WatcherTooSlow { last_delivered },
            _ => Error::Closed,
        }
    }
}

#[derive(Debug)]
struct Subscriber {
    prefix: String,
    tx: mpsc::Sender<Arc<Event>>,
    end: Arc<EndSignal>,
}

#[derive(Debug, Default)]
struct State {
    /// Every event up to this revision has been offered to every subscriber.
    published: Revision,
    subscribers: Vec<Subscriber>,
    closed: bool,
}

/// The live half of a new watch.
pub(crate) struct Subscription {
    /// Events after this revision arrive on `rx`; earlier ones must come from the log.
    pub published: Revision,
    pub rx: mpsc::Receiver<Arc<Event>>,
    pub end: Arc<EndSignal>,
    /// The hub's published revision as it rises.
    pub progress: Arc<AtomicU64>,
}

#[derive(Debug)]
pub(crate) struct Hub {
    state: Mutex<State>,
    capacity: usize,
    /// [`State::published`], readable without the lock: it is raised only after the events up
    /// to it were offered, so a watcher whose queue is empty after reading it has every event
    /// of its prefix up to it.
    progress: Arc<AtomicU64>,
}

impl Hub {
    pub(crate) fn new(published: Revision, capacity: usize) -> Hub {
        Hub {
            state: Mutex::new(State { published, ..State::default() }),
            capacity: capacity.max(1),
            progress: Arc::new(AtomicU64::new(published)),
        }
    }

    pub(crate) fn subscribe(&self, prefix: &str) -> Result<Subscription> {
        let mut state = self.state.lock();
        if state.closed {
            return Err(Error::Closed);
        }
        let (tx, rx) = mpsc::channel(self.capacity);
        let end = Arc::new(EndSignal::default());
        state.subscribers.push(Subscriber { prefix: prefix.to_owned(), tx, end: end.clone() });
        Ok(Subscription { published: state.published, rx, end, progress: self.progress.clone() })
    }

    /// Offer durable events, in revision order, up to and including `through`.
    pub(crate) fn publish(&self, events: &[Arc<Event>], through: Revision) {
        let mut state = self.state.lock();
        for event in events {
            state.subscribers.retain(|sub| {
                if !event.key.starts_with(&sub.prefix) {
                    return !sub.tx.is_closed();
                }
                match sub.tx.try_send(event.clone()) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_)) => {
                        tracing::debug!(prefix = %sub.prefix, revision = event.revision, "ending a watcher that fell behind");
                        sub.end.set(TOO_SLOW);
                        false
                    }
                    Err(TrySendError::Closed(_)) => false,
                }
            });
        }
        state.published = state.published.max(through);
        self.progress.store(state.published, Ordering::Release);
    }

    /// End every watcher with [`Error::Closed`] and refuse new ones.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        for sub in state.subscribers.drain(..) {
            sub.end.set(CLOSED);
        }
    }

    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.state.lock().subscribers.len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::EventKind;

    fn event(revision: Revision, key: &str) -> Arc<Event> {
        Arc::new(Event {
            kind: EventKind::Created,
            revision,
            key: key.into(),
            value: Bytes::new(),
            prev_value: None,
            create_revision: revision,
        })
    }

    #[test]
    fn a_full_queue_ends_only_its_own_watcher() {
        let hub = Hub::new(0, 2);
        let mut slow = hub.subscribe("/").unwrap();
        let mut fast = hub.subscribe("/").unwrap();
        let mut elsewhere = hub.subscribe("/other/").unwrap();
        for revision in 1..=3 {
            hub.publish(&[event(revision, "/a")], revision);
            assert_eq!(fast.rx.try_recv().unwrap().revision, revision);
        }
        // `slow` overflowed at revision 3 and is gone; the other two remain.
        assert_eq!(hub.subscriber_count(), 2);
        assert_eq!(slow.rx.try_recv().unwrap().revision, 1);
        assert_eq!(slow.rx.try_recv().unwrap().revision, 2);
        assert!(slow.rx.try_recv().is_err());
        assert!(matches!(slow.end.error(2), Error::WatcherTooSlow { last_delivered: 2 }));
        assert!(elsewhere.rx.try_recv().is_err(), "prefix filtering");
    }

    #[test]
    fn dropped_watchers_are_forgotten_and_close_ends_the_rest() {
        let hub = Hub::new(5, 4);
        let gone = hub.subscribe("/").unwrap();
        let kept = hub.subscribe("/").unwrap();
        assert_eq!(kept.published, 5);
        drop(gone);
        hub.publish(&[event(6, "/a")], 6);
        assert_eq!(hub.subscriber_count(), 1);
        assert_eq!(hub.subscribe("/").unwrap().published, 6);
        hub.close();
        assert!(matches!(kept.end.error(6), Error::Closed));
        assert!(matches!(hub.subscribe("/"), Err(Error::Closed)));
    }
}
