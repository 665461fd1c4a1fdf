//! A watch: first the history a watcher asked for, read from the log, then live events.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::{self, error::TryRecvError};

use crate::hub::{EndSignal, Subscription};
use crate::{Event, Result, Revision};

/// Events from the log, from the watch's start up to where live delivery takes over.
pub(crate) type Backlog = Box<dyn Iterator<Item = Result<Arc<Event>>> + Send>;

/// A stream of changes under a prefix, in revision order, with no gaps and no duplicates.
///
/// It ends with an error: [`Error::WatcherTooSlow`](crate::Error::WatcherTooSlow) when the
/// watcher fell further behind than its buffer, [`Error::Expired`](crate::Error::Expired) when
/// the history it was replaying was compacted, [`Error::Closed`](crate::Error::Closed) when the
/// store closed. After the error it yields nothing more.
pub struct Watch {
    last: Revision,
    backlog: Option<Backlog>,
    live: mpsc::Receiver<Arc<Event>>,
    end: Arc<EndSignal>,
    done: bool,
    /// The store's published revision (see [`Watch::progress`]).
    published: Arc<AtomicU64>,
    /// The highest progress seen: every event of the prefix up to it was delivered.
    progressed: Revision,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("last", &self.last)
            .field("replaying", &self.backlog.is_some())
            .field("done", &self.done)
            .finish()
    }
}

/// What one step of a watch produced.
enum Step {
    Yield(Option<Result<Arc<Event>>>),
    Live,
}

impl Watch {
    pub(crate) fn new(after: Revision, backlog: Backlog, live: Subscription) -> Watch {
        Watch {
            last: after,
            backlog: Some(backlog),
            live: live.rx,
            end: live.end,
            done: false,
            published: live.progress,
            progressed: after,
        }
    }

    /// A revision this watch has delivered every event of its prefix up to, never lower than
    /// it said before: the store's latest published revision when nothing is waiting to be
    /// delivered, else what it had reached. What a bookmark carries, as etcd's progress
    /// notifications and kube-apiserver's bookmarks do, so that a watch of a quiet prefix
    /// resumes from a revision still in the history.
    pub fn progress(&mut self) -> Revision {
        self.progressed = self.progressed.max(self.last);
        if self.done || self.backlog.is_some() {
            return self.progressed;
        }
        // Read before looking at the queue: the hub raises it only after offering every event
        // up to it, so an empty queue now means each of those of this prefix was delivered.
        let published = self.published.load(Ordering::Acquire);
        if self.live.is_empty() {
            self.progressed = self.progressed.max(published);
        }
        self.progressed
    }

    /// The revision of the last event delivered (or the watch's start).
    pub fn last_revision(&self) -> Revision {
        self.last
    }

    /// Whether the watch has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    fn step_backlog(&mut self) -> Step {
        if self.done {
            return Step::Yield(None);
        }
        while let Some(backlog) = &mut self.backlog {
            match backlog.next() {
                Some(Ok(event)) => {
                    if event.revision > self.last {
                        self.last = event.revision;
                        return Step::Yield(Some(Ok(event)));
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Step::Yield(Some(Err(e)));
                }
                None => self.backlog = None,
            }
        }
        Step::Live
    }

    /// Take a live event; `None` means "skip it, it was already delivered from the log".
    fn accept(&mut self, received: Option<Arc<Event>>) -> Option<Option<Result<Arc<Event>>>> {
        match received {
            Some(event) if event.revision <= self.last => None,
            Some(event) => {
                self.last = event.revision;
                Some(Some(Ok(event)))
            }
            None => {
                self.done = true;
                Some(Some(Err(self.end.error(self.last))))
            }
        }
    }

    /// The next event; `None` once the watch has ended.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>>> {
        loop {
            if let Step::Yield(out) = self.step_backlog() {
                return out;
            }
            let received = self.live.recv().await;
            if let Some(out) = self.accept(received) {
                return out;
            }
        }
    }

    /// The next event, blocking the thread. Must not be called from inside an async runtime.
    pub fn blocking_next(&mut self) -> Option<Result<Arc<Event>>> {
        loop {
            if let Step::Yield(out) = self.step_backlog() {
                return out;
            }
            let received = self.live.blocking_recv();
            if let Some(out) = self.accept(received) {
                return out;
            }
        }
    }

    /// The next event if one is ready now; `None` if none is (or the watch has ended).
    pub fn try_next(&mut self) -> Option<Result<Arc<Event>>> {
        loop {
            if let Step::Yield(out) = self.step_backlog() {
                return out;
            }
            let received = match self.live.try_recv() {
                Ok(event) => Some(event),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => None,
            };
            if let Some(out) = self.accept(received) {
                return out;
            }
        }
    }
}
