//! Group commit.
//!
//! Writers apply their change to sled in memory (under the store's write lock, which fixes their
//! revision), hand the resulting event to the [`Commit`] queue and wait. One committer thread
//! takes everything queued, makes it durable with a single sync, wakes every writer it covered
//! and only then publishes the events to watchers. While a sync runs, new writers queue up for the
//! next one, so the number of syncs per write falls as concurrency grows.

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
    /// Set by the first failed sync; the store is read-only from then on.
    failed: Option<String>,
    shutdown: bool,
}

/// What the committer should do next.
pub(crate) enum Work {
    /// Sync everything up to `through`, then publish `events`.
    Sync { through: Revision, events: Vec<Arc<Event>> },
    /// Nothing to sync now; time for housekeeping.
    Idle,
    /// The store is closing and everything is durable.
    Stop,
}

#[derive(Debug)]
pub(crate) struct Commit {
    state: Mutex<State>,
    work: Condvar,
    durable_cv: Condvar,
    durable: AtomicU64,
}

impl Commit {
    pub(crate) fn new(revision: Revision) -> Commit {
        Commit {
            state: Mutex::new(State { applied: revision, ..State::default() }),
            work: Condvar::new(),
            durable_cv: Condvar::new(),
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

    /// Queue an event that has just been applied. Called under the store's write lock, so
    /// events arrive in revision order.
    pub(crate) fn record(&self, event: Arc<Event>) {
        let mut state = self.state.lock();
        debug_assert!(event.revision > state.applied);
        state.applied = event.revision;
        state.pending.push(event);
        self.work.notify_one();
    }

    /// Block until `revision` is durable.
    pub(crate) fn wait_durable(&self, revision: Revision) -> Result<()> {
        if self.durable() >= revision {
            return Ok(());
        }
        let mut state = self.state.lock();
        loop {
            if self.durable() >= revision {
                return Ok(());
            }
            if let Some(why) = &state.failed {
                return Err(Error::Failed(why.clone()));
            }
            self.durable_cv.wait(&mut state);
        }
    }

    /// The committer's next piece of work; waits up to `idle` for writes to arrive.
    pub(crate) fn next_work(&self, idle: Duration) -> Work {
        let mut state = self.state.lock();
        let ready = |s: &State| s.failed.is_none() && s.applied > self.durable();
        if !ready(&state) && !state.shutdown {
            let _ = self.work.wait_for(&mut state, idle);
        }
        if ready(&state) {
            let events = std::mem::take(&mut state.pending);
            return Work::Sync { through: state.applied, events };
        }
        if state.shutdown {
            Work::Stop
        } else {
            Work::Idle
        }
    }

    /// Report the outcome of a sync up to `through` and wake the writers waiting on it.
    pub(crate) fn finish(&self, through: Revision, outcome: &Result<()>) {
        let mut state = self.state.lock();
        match outcome {
            Ok(()) => self.durable.store(through, Ordering::Release),
            Err(e) => {
                tracing::error!(error = %e, "sync failed; the store accepts no more writes");
                state.failed = Some(e.to_string());
            }
        }
        self.durable_cv.notify_all();
    }

    /// Ask the committer to finish what is queued and stop.
    pub(crate) fn shut_down(&self) {
        let mut state = self.state.lock();
        state.shutdown = true;
        self.work.notify_all();
    }
}
