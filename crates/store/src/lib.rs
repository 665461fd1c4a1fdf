//! Carrel's revisioned object store.
//!
//! Every Carrel API server stands on a [`Store`]: a key-value map of serialized objects with one
//! monotonically increasing [`Revision`] per store, which the API exposes as `resourceVersion`.
//! Every write is acknowledged only once it is on disk; every change is also an [`Event`] in a
//! history log, so a [`Watch`] can resume from any revision inside the history window.
//!
//! | concept | where |
//! |---|---|
//! | the trait every backend implements | [`Store`] |
//! | the embedded backend: one sled database per tenant | [`SledStore`] |
//! | watches: ordered, resumable, bounded | [`Watch`] |
//! | paginated lists and their continue tokens | [`ListOptions`], [`ListPage`] |
//! | errors, each one the API can map to a Kubernetes `Status` | [`Error`] |
//! | how much a store holds, and the most it may hold | [`Usage`], [`Quota`] |
//! | several creates as one atomic, durable write | [`Store::create_all`] |
//! | durable commits (syncs) made | [`CommitStats`] |
//!
//! The store knows nothing of Kubernetes objects: keys are strings chosen by the API layer
//! (group, resource, namespace and name), values are opaque bytes.

mod codec;
mod commit;
mod continue_token;
mod durable;
mod error;
mod faults;
mod history;
mod hub;
mod io;
mod sled_store;
mod wal;
mod watch;

use std::sync::Arc;

use bytes::Bytes;

pub use error::{Error, QuotaResource, Result};
/// Injected I/O errors, for tests (feature `failpoints`).
#[cfg(feature = "failpoints")]
pub mod failpoints {
    pub use crate::faults::{clear, fired, inject, Fault, FaultPoint};
}
pub use history::HistoryWindow;
pub use io::{io_stats, IoStats, Retry};
pub use sled_store::{Options, SledStore};
pub use watch::Watch;

/// A store revision. Every acknowledged write gets the next one; `0` means "before any write".
pub type Revision = u64;

/// An object as stored, with the revisions the API turns into metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// The key the object is stored under.
    pub key: String,
    /// The serialized object, exactly as written.
    pub value: Bytes,
    /// The revision of the write that created the object.
    pub create_revision: Revision,
    /// The revision of the last write to the object (its `resourceVersion`).
    pub mod_revision: Revision,
}

/// What a write did to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key did not exist before this write.
    Created,
    /// The key existed and got a new value.
    Modified,
    /// The key was removed.
    Deleted,
}

/// One change, as watchers see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The revision of the write.
    pub revision: Revision,
    /// The key written.
    pub key: String,
    /// The value after the write; for [`EventKind::Deleted`], the last value the object had.
    pub value: Bytes,
    /// The value before the write, for [`EventKind::Modified`].
    pub prev_value: Option<Bytes>,
    /// The revision that created the object.
    pub create_revision: Revision,
}

impl Event {
    /// The object this event leaves behind (for a deletion: the object as it was deleted, at the
    /// deletion's revision, as Kubernetes reports deleted objects).
    pub fn object(&self) -> Object {
        Object {
            key: self.key.clone(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.revision,
        }
    }
}

/// Whether a store accepts writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// It does.
    Ok,
    /// An I/O error left what is on disk uncertain: the store serves reads but refuses writes
    /// until it is reopened.
    Failed {
        /// The error, as the store reports it.
        reason: String,
    },
}

/// How much a store holds: its objects, and the bytes of their keys and values.
///
/// The store keeps it in its metadata, written in the same atomic batch as every write, so it is
/// exact after a crash and costs nothing to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Objects stored.
    pub objects: u64,
    /// The bytes of their keys and values.
    pub bytes: u64,
}

impl Usage {
    /// The bytes one object counts for.
    pub fn bytes_of(key: &str, value: &[u8]) -> u64 {
        (key.len() + value.len()) as u64
    }

    /// The usage after creating `key` with `value`.
    pub fn with_created(self, key: &str, value: &[u8]) -> Usage {
        Usage {
            objects: self.objects.saturating_add(1),
            bytes: self.bytes.saturating_add(Usage::bytes_of(key, value)),
        }
    }

    /// The usage after `event`, applied to a store whose usage is `self`.
    pub(crate) fn after(self, event: &Event) -> Usage {
        let size = Usage::bytes_of(&event.key, &event.value);
        match event.kind {
            EventKind::Created => self.with_created(&event.key, &event.value),
            EventKind::Modified => {
                let before =
                    event.prev_value.as_ref().map_or(0, |v| Usage::bytes_of(&event.key, v));
                Usage {
                    objects: self.objects,
                    bytes: self.bytes.saturating_sub(before).saturating_add(size),
                }
            }
            EventKind::Deleted => Usage {
                objects: self.objects.saturating_sub(1),
                bytes: self.bytes.saturating_sub(size),
            },
        }
    }
}

/// What a store's writes have cost since it was opened, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Durable commits: appends to the write-ahead log, each made durable by one `fdatasync`.
    /// Writes waiting at the same time share one (group commit); a [`Store::create_all`] is
    /// always within one.
    pub commits: u64,
    /// The revisions those commits made durable.
    pub revisions: u64,
}

/// The most a store may hold. A create that would take the store past either bound, or an update
/// that grows it past the bytes bound, is refused with [`Error::QuotaExceeded`]; deletes, updates
/// that do not grow the store and [`Store::update_to_delete`] always pass, so a store at or over
/// its quota can always shrink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    /// The most objects.
    pub objects: u64,
    /// The most bytes of keys and values, as [`Usage::bytes`] counts them.
    pub bytes: u64,
}

impl Quota {
    /// No bound: what a store has until [`Store::set_quota`] is called.
    pub const UNLIMITED: Quota = Quota { objects: u64::MAX, bytes: u64::MAX };

    /// Whether a write that takes a store from `used` to `after` may be made: not if it adds
    /// an object (`adds_object`) beyond the count, nor if it grows the bytes beyond theirs.
    /// Shrinking always may.
    pub fn check(&self, used: Usage, after: Usage, adds_object: bool) -> Result<()> {
        if adds_object && after.objects > self.objects {
            return Err(Error::QuotaExceeded {
                resource: QuotaResource::Count,
                requested: after.objects.saturating_sub(used.objects),
                used: used.objects,
                limited: self.objects,
            });
        }
        if after.bytes > used.bytes && after.bytes > self.bytes {
            return Err(Error::QuotaExceeded {
                resource: QuotaResource::Bytes,
                requested: after.bytes - used.bytes,
                used: used.bytes,
                limited: self.bytes,
            });
        }
        Ok(())
    }
}

impl Default for Quota {
    fn default() -> Self {
        Quota::UNLIMITED
    }
}

/// How much of a prefix to list, and as of when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// The most objects to return in this page; `None` returns them all.
    pub limit: Option<usize>,
    /// The token from the previous page's [`ListPage::continue_token`].
    pub continue_token: Option<String>,
    /// List the prefix as it was at this revision rather than now: objects created later are
    /// absent, objects updated or deleted later are shown with their value and revisions of
    /// then. `None` lists the newest state. A continue token carries its list's revision, so
    /// this need not be repeated with it (if it is, it must be the token's).
    pub revision: Option<Revision>,
}

/// One page of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    /// Objects in key order.
    pub items: Vec<Object>,
    /// The revision the list was read at: a watch from this revision misses no later change.
    /// Every page of one paginated list is read at, and reports, the revision of its first page.
    pub revision: Revision,
    /// Present when more objects follow; pass it back to get the next page.
    pub continue_token: Option<String>,
}

/// A revisioned object store.
///
/// Implementations are shared between threads; every method may block on disk IO, so async callers
/// run them on a blocking pool. Writes return only once they are durable.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The object under `key`, if any.
    fn get(&self, key: &str) -> Result<Option<Object>>;

    /// Objects whose key starts with `prefix`, in key order, one page at a time.
    ///
    /// A list is a snapshot at one revision: the newest, or [`ListOptions::revision`]. Every
    /// following page is read at the first page's revision, so the pages of a paginated list are
    /// together exactly the snapshot, whatever writes happen meanwhile. A past revision is
    /// rebuilt from the history, so it must be inside the history window: older than
    /// [`Store::compacted_revision`] is [`Error::Expired`] (for a continue token too), newer
    /// than [`Store::current_revision`] is [`Error::FutureRevision`].
    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListPage>;

    /// Store a new object; [`Error::AlreadyExists`] if the key exists.
    fn create(&self, key: &str, value: Bytes) -> Result<Object>;

    /// Store new objects together, as one write: they get consecutive revisions in the order
    /// given, watchers see their events in that order, and they become durable in one commit
    /// (one write-ahead log record, one sync), so that after a crash either all of them are
    /// stored or none is. [`Error::AlreadyExists`] if any key exists (or is given twice); the
    /// [`Quota`] is checked for all of them together; on any error nothing is written. The
    /// objects are returned in the order given; an empty list writes nothing.
    fn create_all(&self, items: Vec<(String, Bytes)>) -> Result<Vec<Object>>;

    /// Replace an existing object; [`Error::NotFound`] if it does not exist, [`Error::Conflict`]
    /// if `expected` is given and is not the object's current `mod_revision`.
    fn update(&self, key: &str, value: Bytes, expected: Option<Revision>) -> Result<Object>;

    /// Replace an existing object as a step of deleting it (marking it for deletion while
    /// finalizers run): as [`Store::update`], but never refused by the [`Quota`], since deleting
    /// must always be possible.
    fn update_to_delete(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Object>;

    /// Remove an object and return it as it was deleted (its `mod_revision` is the deletion's
    /// revision); errors as for [`Store::update`].
    fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Object>;

    /// Every change to keys under `prefix` with a revision greater than `after`, in revision
    /// order, with no gaps and no duplicates. [`Error::Expired`] if `after` is older than the
    /// history window.
    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch>;

    /// The newest acknowledged revision.
    fn current_revision(&self) -> Revision;

    /// The newest revision whose history has been discarded; watches must start at or after it.
    fn compacted_revision(&self) -> Revision;

    /// Discard history up to and including `revision`. Compacting to an already compacted
    /// revision does nothing; a revision newer than [`Store::current_revision`] is an error.
    fn compact(&self, revision: Revision) -> Result<()>;

    /// Whether the store accepts writes.
    fn health(&self) -> Health {
        Health::Ok
    }

    /// Bring a failed store back: read it again from disk, replaying its write-ahead log, and
    /// accept writes again. `Ok(true)` if it was failed and is now healthy, `Ok(false)` if it was
    /// not failed; an error leaves it failed.
    fn reopen(&self) -> Result<bool> {
        Ok(false)
    }

    /// How much the store holds now, counting every applied write.
    fn usage(&self) -> Usage;

    /// Bound what the store may hold from now on (see [`Quota`]); [`Quota::UNLIMITED`] by default.
    fn set_quota(&self, quota: Quota);

    /// The bound set by [`Store::set_quota`].
    fn quota(&self) -> Quota;

    /// The durable commits made since the store was opened.
    fn commit_stats(&self) -> CommitStats;
}

impl<S: Store + ?Sized> Store for Arc<S> {
    fn get(&self, key: &str) -> Result<Option<Object>> {
        (**self).get(key)
    }
    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListPage> {
        (**self).list(prefix, options)
    }
    fn create(&self, key: &str, value: Bytes) -> Result<Object> {
        (**self).create(key, value)
    }
    fn create_all(&self, items: Vec<(String, Bytes)>) -> Result<Vec<Object>> {
        (**self).create_all(items)
    }
    fn update(&self, key: &str, value: Bytes, expected: Option<Revision>) -> Result<Object> {
        (**self).update(key, value, expected)
    }
    fn update_to_delete(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Object> {
        (**self).update_to_delete(key, value, expected)
    }
    fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Object> {
        (**self).delete(key, expected)
    }
    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        (**self).watch(prefix, after)
    }
    fn current_revision(&self) -> Revision {
        (**self).current_revision()
    }
    fn compacted_revision(&self) -> Revision {
        (**self).compacted_revision()
    }
    fn compact(&self, revision: Revision) -> Result<()> {
        (**self).compact(revision)
    }
    fn health(&self) -> Health {
        (**self).health()
    }
    fn reopen(&self) -> Result<bool> {
        (**self).reopen()
    }
    fn usage(&self) -> Usage {
        (**self).usage()
    }
    fn set_quota(&self, quota: Quota) {
        (**self).set_quota(quota)
    }
    fn quota(&self) -> Quota {
        (**self).quota()
    }
    fn commit_stats(&self) -> CommitStats {
        (**self).commit_stats()
    }
}
