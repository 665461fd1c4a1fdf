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
    /// Set by the first failed sync; the store is read-only from then on (until reopened).
    failed: Option<String>,
    /// The last leader whose sync hit a passing error that outlasted its retries: the revisions
    /// it covered and why. Its batch went back to the queue for the next leader.
    unavailable: Option<(Revision, String)>,
    /// Counts such leaders, so that a waiter learns the sync it waited for gave up.
    gave_up: u64,
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

    /// Queue events applied together, at consecutive revisions, with their one write-ahead log
    /// record. They are queued at once, so the next leader takes all of them: they become
    /// durable in one sync, or (if it fails) not at all.
    pub(crate) fn record_all(
        &self,
        events: Vec<Arc<Event>>,
        wal_record: impl FnOnce(&mut Vec<u8>),
    ) {
        let Some(last) = events.last().map(|e| e.revision) else { return };
        let mut state = self.state.lock();
        debug_assert!(events.first().is_some_and(|e| e.revision > state.applied));
        state.applied = last;
        state.pending.extend(events);
        wal_record(&mut state.wal);
    }

    /// Wait until `revision` is durable, or become the leader who makes it so: `Some(batch)`
    /// means the caller must sync the batch and then call [`Commit::finish`].
    pub(crate) fn wait_or_lead(&self, revision: Revision) -> Result<Option<Batch>> {
        if self.durable() >= revision {
            return Ok(None);
        }
        let mut state = self.state.lock();
        let gave_up = state.gave_up;
        loop {
            if self.durable() >= revision {
                return Ok(None);
            }
            if let Some(why) = &state.failed {
                return Err(Error::Failed(why.clone()));
            }
            if state.gave_up != gave_up {
                if let Some((through, why)) = &state.unavailable {
                    if revision <= *through {
                        return Err(Error::Unavailable(why.clone()));
                    }
                }
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
                if state.failed.is_none() {
                    crate::io::count_failure();
                    state.failed = Some(e.to_string());
                }
            }
        }
        state.busy = false;
        self.changed.notify_all();
    }

    /// A leader's sync hit a passing error that outlasted its retries: put its batch back at the
    /// head of the queue, for the next leader, and tell the writers it covered.
    pub(crate) fn give_back(&self, batch: Batch, why: String) {
        let mut state = self.state.lock();
        let Batch { through, mut events, mut wal } = batch;
        events.append(&mut state.pending);
        state.pending = events;
        wal.extend_from_slice(&state.wal);
        state.wal = wal;
        state.unavailable = Some((through, why));
        state.gave_up += 1;
        state.busy = false;
        self.changed.notify_all();
    }

    /// The newest revision applied, durable or not.
    pub(crate) fn applied(&self) -> Revision {
        self.state.lock().applied
    }

    /// Why the store is failed, if it is.
    pub(crate) fn failure(&self) -> Option<String> {
        self.state.lock().failed.clone()
    }

    /// After a reopen: `revision` is applied and durable, nothing is queued, and writes are
    /// accepted again.
    pub(crate) fn reset(&self, revision: Revision) {
        let mut state = self.state.lock();
        state.applied = revision;
        state.pending.clear();
        state.wal.clear();
        state.failed = None;
        state.unavailable = None;
        self.durable.store(revision, Ordering::Release);
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
        if state.failed.is_none() {
            crate::io::count_failure();
            state.failed = Some(why);
        }
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
