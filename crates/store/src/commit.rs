//! Group commit, leader and followers.
//!
//! Writers apply their change to sled in memory (under the store's write lock, which fixes their
//! revision) and queue the event and its write-ahead log record here. Then each waits for its
//! revision to be durable: the first waiter to find no sync in progress becomes the leader, takes
//! everything queued, appends it to the write-ahead log with one `fdatasync`, hands the events to
//! the watchers' publisher and wakes every writer it covered. Writers that arrive during that
//! sync queue up for the next one, so syncs per write fall as concurrency grows, and a lone writer
//! syncs on its own thread with no hand-off.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{Error, Event, Result, Revision};

#[derive(Debug, Default)]
struct State {
    /// The newest revision applied to sled (durable or not).
    applied: Revision,
    /// Events applied but not yet durable, in revision order.
    pending: Vec<Arc<Event>>,
    /// Their write-ahead log records, encoded, in the same order.
    wal: Vec<u8>,
    /// Someone is syncing (or checkpointing) now.
    busy: bool,
    /// Set by the first failed sync; the store is read-only from then on.
    failed: Option<String>,
    shutdown: bool,
}

/// What a leader must make durable.
#[derive(Debug)]
pub(crate) struct Batch {
    /// Everything up to this revision.
    pub through: Revision,
    /// The events to publish once durable.
    pub events: Vec<Arc<Event>>,
    /// Their write-ahead log records.
    pub wal: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct Commit {
    state: Mutex<State>,
    changed: Condvar,
    durable: AtomicU64,
}

impl Commit {
    pub(crate) fn new(revision: Revision) -> Commit {
        Commit {
            state: Mutex::new(State { applied: revision, ..State::default() }),
            changed: Condvar::new(),
            durable: AtomicU64::new(revision),
        }
    }

    /// The newest durable revision.
    pub(crate) fn durable(&self) -> Revision {
        self.durable.load(Ordering::Acquire)
    }

    /// Refuse writes once a sync has failed or the store is closing.
    pub(crate) fn check_writable(&self) -> Result<()> {
        let state = self.state.lock();
        if let Some(why) = &state.failed {
            return Err(Error::Failed(why.clone()));
        }
        if state.shutdown {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Queue an event that has just been applied, with its encoded write-ahead log record.
    /// Called under the store's write lock, so events arrive in revision order.
    pub(crate) fn record(&self, event: Arc<Event>, wal_record: impl FnOnce(&mut Vec<u8>)) {
        let mut state = self.state.lock();
        debug_assert!(event.revision > state.applied);
        state.applied = event.revision;
        state.pending.push(event);
        wal_record(&mut state.wal);
    }

    /// Wait until `revision` is durable, or become the leader who makes it so: `Some(batch)`
    /// means the caller must sync the batch and then call [`Commit::finish`].
    pub(crate) fn wait_or_lead(&self, revision: Revision) -> Result<Option<Batch>> {
        if self.durable() >= revision {
            return Ok(None);
        }
        let mut state = self.state.lock();
        loop {
            if self.durable() >= revision {
                return Ok(None);
            }
            if let Some(why) = &state.failed {
                return Err(Error::Failed(why.clone()));
            }
            if !state.busy && state.applied > self.durable() {
                state.busy = true;
                return Ok(Some(Batch {
                    through: state.applied,
                    events: std::mem::take(&mut state.pending),
                    wal: std::mem::take(&mut state.wal),
                }));
            }
            self.changed.wait(&mut state);
        }
    }

    /// Report a leader's sync up to `through` and wake everyone waiting.
    pub(crate) fn finish(&self, through: Revision, outcome: &Result<()>) {
        let mut state = self.state.lock();
        match outcome {
            Ok(()) => self.durable.store(through, Ordering::Release),
            Err(e) => {
                tracing::error!(error = %e, "sync failed; the store accepts no more writes");
                state.failed.get_or_insert_with(|| e.to_string());
            }
        }
        state.busy = false;
        self.changed.notify_all();
    }

    /// Hold off every sync while `f` runs (a checkpoint must not interleave with appends).
    pub(crate) fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        {
            let mut state = self.state.lock();
            while state.busy {
                self.changed.wait(&mut state);
            }
            state.busy = true;
        }
        let out = f();
        let mut state = self.state.lock();
        state.busy = false;
        self.changed.notify_all();
        out
    }

    /// Mark the store failed (a checkpoint could not be made durable) and wake every waiter.
    pub(crate) fn fail(&self, why: String) {
        let mut state = self.state.lock();
        tracing::error!(error = %why, "the store accepts no more writes");
        state.failed.get_or_insert(why);
        self.changed.notify_all();
    }

    /// Whether a sync or checkpoint has failed.
    pub(crate) fn is_failed(&self) -> bool {
        self.state.lock().failed.is_some()
    }

    /// Sleep up to `timeout` (for housekeeping); `false` once the store is closing.
    pub(crate) fn idle(&self, timeout: Duration) -> bool {
        let mut state = self.state.lock();
        if !state.shutdown {
            let _ = self.changed.wait_for(&mut state, timeout);
        }
        !state.shutdown
    }

    /// Refuse new writes and end the housekeeping loop.
    pub(crate) fn shut_down(&self) {
        let mut state = self.state.lock();
        state.shutdown = true;
        self.changed.notify_all();
    }
}
