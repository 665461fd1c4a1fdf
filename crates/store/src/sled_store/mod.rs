//! The embedded backend: one sled database (one directory) per store.
//!
//! Writes are serialized by a write lock that fixes each write's revision and applies the object,
//! its log entry and the new revision in one atomic sled batch, in memory. Durability is group
//! commit's job: a leader appends the writes to the write-ahead log with one `fdatasync` per
//! group (see [`crate::commit`] and [`crate::wal`]); sled is flushed only at checkpoints. Reads
//! take the lock shared, so a read sees a state at one revision, and they return only once that
//! revision is durable: nothing a client reads can be lost in a crash.
//!
//! Opening is in `open`, lists and watches (and the history they rewind or replay) in
//! `list_watch`, compaction, checkpoints, durability waits and reopening in `housekeeping`,
//! several creates as one write ([`Store::create_all`]) in `batch`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::codec::{self, DecodeError};
use crate::commit::Commit;
use crate::continue_token::ContinueToken;
use crate::durable::{sync_dir, DiskSync};
use crate::hub::Hub;
use crate::io::{Failure, Retry};
use crate::wal::{self, Wal};
use crate::watch::Watch;

mod batch;
mod dir_lock;
mod housekeeping;
mod list_watch;
mod open;

use self::dir_lock::DirLock;
use self::open::{load, prepare_dir, Loaded};
use crate::{
    CommitStats, Error, Event, EventKind, Health, HistoryWindow, ListOptions, ListPage, Object,
    Quota, Result, Revision, Store, Usage,
};

/// The longest key a store accepts.
const MAX_KEY_BYTES: usize = 4096;
/// Log entries read per step of a watch's replay.
const REPLAY_CHUNK: usize = 256;
/// Log entries removed per compaction batch.
const COMPACTION_CHUNK: usize = 4096;
/// The lock file that keeps a second process (or handle) out.
const LOCK_FILE: &str = "carrel.lock";

/// How to open a [`SledStore`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Create the directory if it does not exist (otherwise a missing one is [`Error::Missing`]).
    pub create_if_missing: bool,
    /// How much history to keep for watches and continued lists.
    pub history: HistoryWindow,
    /// How often the history window is enforced.
    pub compaction_interval: Duration,
    /// Events buffered per watcher before a watcher that does not keep up is ended.
    pub watch_buffer: usize,
    /// The largest value accepted, in bytes.
    pub max_value_bytes: usize,
    /// sled's page cache, in bytes. Every tenant has its own store, so keep it modest.
    pub cache_capacity: u64,
    /// Checkpoint (flush sled and empty the write-ahead log) once the log is this large…
    pub checkpoint_bytes: u64,
    /// …or this long after the last checkpoint, whichever comes first.
    pub checkpoint_interval: Duration,
    /// How I/O errors that leave the disk as it was (`EMFILE`, `ENOMEM`, `ENOSPC` before
    /// anything was written, …) are retried before a write gets [`Error::Unavailable`] or a
    /// checkpoint is put off.
    pub retry: Retry,
    /// A store failed by an uncertain I/O error reopens itself (see [`SledStore::reopen`]) this
    /// long after the failure, then at doubling intervals up to a minute; `None`: only when
    /// asked.
    pub reopen_after: Option<Duration>,
    /// How long opening waits for a handle of this process on the same directory to close and
    /// let go of it (a handle of another process is [`Error::Locked`] at once).
    pub lock_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: false,
            history: HistoryWindow::default(),
            compaction_interval: Duration::from_secs(1),
            watch_buffer: 1024,
            // kube-apiserver accepts request bodies up to 3 MiB.
            max_value_bytes: 3 * 1024 * 1024,
            cache_capacity: 64 * 1024 * 1024,
            checkpoint_bytes: 64 * 1024 * 1024,
            checkpoint_interval: Duration::from_secs(30),
            retry: Retry::default(),
            reopen_after: Some(Duration::from_secs(5)),
            lock_wait: Duration::ZERO,
        }
    }
}

impl Options {
    /// The defaults, creating the directory when it is missing.
    pub fn create() -> Options {
        Options { create_if_missing: true, ..Options::default() }
    }
}

/// A [`Store`] on one sled database.
///
/// Dropping it finishes the writes in flight, ends every watch with [`Error::Closed`] and
/// releases the directory.
#[derive(Debug)]
pub struct SledStore {
    inner: Arc<Inner>,
    housekeeping: Option<JoinHandle<()>>,
    publisher: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// `None` only while a failed store is reopened (or when reopening it failed).
    db: RwLock<Option<sled::Db>>,
    /// Held for the store's lifetime; declared after `db` so that it is released last.
    _lock: DirLock,
    options: Options,
    /// The newest applied revision; writers hold it exclusively, readers shared.
    writer: RwLock<Revision>,
    commit: Commit,
    compacted: AtomicU64,
    compaction: Mutex<()>,
    hub: Hub,
    disk: Mutex<DiskSync>,
    wal: Mutex<Wal>,
    /// Durable events go to the publisher thread, in commit order, through this channel.
    publisher: Mutex<Option<std::sync::mpsc::Sender<Published>>>,
    /// What the store holds as of the newest applied revision; changed under the write lock only.
    usage: Mutex<Usage>,
    /// The most it may hold.
    quota: Mutex<Quota>,
    /// Durable commits made since the store was opened, and the revisions they covered.
    commits: AtomicU64,
    committed_revisions: AtomicU64,
}

impl SledStore {
    /// Open (or, with [`Options::create_if_missing`], create) the store in `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<SledStore> {
        let path = path.as_ref().to_path_buf();
        prepare_dir(&path, options.create_if_missing)?;
        let lock = DirLock::take(&path, options.lock_wait)?;

        let Loaded { db, revision, compacted, usage, disk, wal } = load(&path, &options)?;
        tracing::debug!(
            path = %path.display(), revision, compacted, objects = usage.objects, bytes = usage.bytes,
            "opened store"
        );

        let inner = Arc::new(Inner {
            path,
            db: RwLock::new(Some(db)),
            _lock: lock,
            writer: RwLock::new(revision),
            commit: Commit::new(revision),
            compacted: AtomicU64::new(compacted),
            compaction: Mutex::new(()),
            hub: Hub::new(revision, options.watch_buffer),
            disk: Mutex::new(disk),
            wal: Mutex::new(wal),
            publisher: Mutex::new(None),
            usage: Mutex::new(usage),
            quota: Mutex::new(Quota::UNLIMITED),
            commits: AtomicU64::new(0),
            committed_revisions: AtomicU64::new(0),
            options,
        });
        // Fan-out to watchers runs on its own thread, so that a thousand watchers never delay
        // the next sync; the channel keeps the commit order.
        let (to_publisher, published) = std::sync::mpsc::channel::<Published>();
        *inner.publisher.lock() = Some(to_publisher);
        let publisher = {
            let inner = inner.clone();
            std::thread::Builder::new().name("carrel-store-publish".into()).spawn(move || {
                for (events, through) in published {
                    inner.hub.publish(&events, through);
                }
            })?
        };
        // Housekeeping: the history window and checkpoints.
        let housekeeping = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("carrel-store-housekeeping".into())
                .spawn(move || inner.run_housekeeping())?
        };
        Ok(SledStore { inner, housekeeping: Some(housekeeping), publisher: Some(publisher) })
    }

    /// The directory this store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether the store accepts writes.
    pub fn health(&self) -> Health {
        match self.inner.commit.failure() {
            None => Health::Ok,
            Some(reason) => Health::Failed { reason },
        }
    }

    /// Bring a failed store back without restarting the process: drop sled's handle, open the
    /// database again from disk, replay the write-ahead log onto it and sync it all, as at open;
    /// then accept writes again. Watchers receive the recovered writes they had not seen. Writes
    /// that were applied in memory but never acknowledged are kept if they reached the disk and
    /// dropped otherwise; nothing acknowledged is lost. `Ok(false)` if the store was not failed;
    /// an error leaves it failed (and, if sled could not be opened again, unreadable) until the
    /// next attempt.
    pub fn reopen(&self) -> Result<bool> {
        self.inner.reopen()
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        {
            // Taking the write lock orders shutdown after every write that already has a revision.
            let _writer = self.inner.writer.write();
            self.inner.commit.shut_down();
        }
        if let Some(thread) = self.housekeeping.take() {
            if thread.join().is_err() {
                tracing::error!(path = %self.inner.path.display(), "store housekeeping panicked");
            }
        }
        // A clean close leaves nothing to replay.
        self.inner.checkpoint();
        // The publisher ends once it has passed on everything the last sync sent it.
        self.inner.publisher.lock().take();
        if let Some(thread) = self.publisher.take() {
            if thread.join().is_err() {
                tracing::error!(path = %self.inner.path.display(), "store publisher panicked");
            }
        }
        self.inner.hub.close();
    }
}

fn unix_millis() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The sled batch that applies one event: the object, its history log entry, the revision and the
/// store's usage after it.
fn event_batch(event: &Event, record: &[u8], usage: Usage) -> sled::Batch {
    let mut batch = sled::Batch::default();
    add_event(&mut batch, event, record);
    set_revision(&mut batch, event.revision, usage);
    batch
}

/// Add to `batch` the object `event` leaves and its history log entry.
fn add_event(batch: &mut sled::Batch, event: &Event, record: &[u8]) {
    let object_key = codec::object_key(&event.key);
    match event.kind {
        EventKind::Deleted => batch.remove(object_key),
        _ => batch.insert(
            object_key,
            codec::encode_object(&event.value, event.create_revision, event.revision),
        ),
    }
    batch.insert(&codec::log_key(event.revision), record);
}

/// Add to `batch` the store's revision and its usage as of that revision.
fn set_revision(batch: &mut sled::Batch, revision: Revision, usage: Usage) {
    batch.insert(codec::META_REVISION, &codec::encode_u64(revision));
    batch.insert(codec::META_USAGE, &codec::encode_usage(revision, usage));
}

/// Durable events on their way to watchers, and the revision they bring the hub up to.
type Published = (Vec<Arc<Event>>, Revision);

/// A write's intent, checked against the current object under the write lock.
enum Op {
    Create(Bytes),
    /// An update; `bounded`: checked against the quota (not when it is a step of a deletion).
    Update {
        value: Bytes,
        expected: Option<Revision>,
        bounded: bool,
    },
    Delete(Option<Revision>),
}

impl Inner {
    /// sled's handle (an `Arc`; callers hold it only for one operation, so a reopen can drop it).
    fn db(&self) -> Result<sled::Db> {
        match &*self.db.read() {
            Some(db) => Ok(db.clone()),
            None => Err(Error::Failed(
                self.commit.failure().unwrap_or_else(|| "the store is being reopened".into()),
            )),
        }
    }

    fn corrupt(&self, e: impl std::fmt::Display) -> Error {
        Error::Corrupt { path: self.path.clone(), detail: e.to_string() }
    }

    fn check_key(&self, key: &str) -> Result<()> {
        let invalid = |reason| Error::InvalidKey { key: key.to_owned(), reason };
        if key.is_empty() {
            return Err(invalid("empty"));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(invalid("longer than 4096 bytes"));
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        let limit = self.options.max_value_bytes;
        if value.len() > limit {
            return Err(Error::TooLarge { size: value.len(), limit });
        }
        Ok(())
    }

    fn read_object(&self, key: &str) -> Result<Option<Object>> {
        match self.db()?.get(codec::object_key(key))? {
            Some(record) => {
                Ok(Some(codec::decode_object(key.to_owned(), record).map_err(|e| self.corrupt(e))?))
            }
            None => Ok(None),
        }
    }

    fn write(&self, key: &str, op: Op) -> Result<Object> {
        self.check_key(key)?;
        if let Op::Create(v) | Op::Update { value: v, .. } = &op {
            self.check_value(v)?;
        }
        let bounded = !matches!(op, Op::Update { bounded: false, .. });
        let mut writer = self.writer.write();
        self.commit.check_writable()?;
        let current = self.read_object(key)?;
        let revision = *writer + 1;
        // What the key was at before this write, for lists at past revisions.
        let prev_mod_revision = current.as_ref().map_or(0, |o| o.mod_revision);
        let check = |expected: Option<Revision>| -> Result<Object> {
            let current = current.clone().ok_or_else(|| Error::NotFound { key: key.to_owned() })?;
            match expected {
                Some(expected) if expected != current.mod_revision => Err(Error::Conflict {
                    key: key.to_owned(),
                    expected,
                    actual: current.mod_revision,
                }),
                _ => Ok(current),
            }
        };
        let event = match op {
            Op::Create(value) => {
                if current.is_some() {
                    return Err(Error::AlreadyExists { key: key.to_owned() });
                }
                Event {
                    kind: EventKind::Created,
                    revision,
                    key: key.to_owned(),
                    value,
                    prev_value: None,
                    create_revision: revision,
                }
            }
            Op::Update { value, expected, .. } => {
                let current = check(expected)?;
                Event {
                    kind: EventKind::Modified,
                    revision,
                    key: key.to_owned(),
                    value,
                    prev_value: Some(current.value),
                    create_revision: current.create_revision,
                }
            }
            Op::Delete(expected) => {
                let current = check(expected)?;
                Event {
                    kind: EventKind::Deleted,
                    revision,
                    key: key.to_owned(),
                    value: current.value,
                    prev_value: None,
                    create_revision: current.create_revision,
                }
            }
        };

        let mut usage = self.usage.lock();
        let after = usage.after(&event);
        if bounded {
            let quota = *self.quota.lock();
            quota.check(*usage, after, event.kind == EventKind::Created)?;
        }
        let record = codec::encode_event(&event, prev_mod_revision, unix_millis());
        self.db()?.apply_batch(event_batch(&event, &record, after))?;
        *usage = after;
        drop(usage);
        *writer = revision;
        let object = event.object();
        self.commit.record(Arc::new(event), |wal| wal::encode(revision, &record, wal));
        drop(writer);

        self.wait_durable(revision)?;
        Ok(object)
    }
}

impl Store for SledStore {
    fn get(&self, key: &str) -> Result<Option<Object>> {
        let inner = &self.inner;
        let reader = inner.writer.read();
        let read_at = *reader;
        let object = inner.read_object(key)?;
        drop(reader);
        // What the read shows must be durable. An object is the key's last write, so it is
        // durable once its own revision is: an old object needs no wait for the writes in flight
        // on other keys. An absent key may be a deletion not yet durable: wait for everything.
        let shown = object.as_ref().map_or(read_at, |o| o.mod_revision);
        inner.wait_durable(shown)?;
        Ok(object)
    }

    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListPage> {
        self.inner.list(prefix, options)
    }

    fn create(&self, key: &str, value: Bytes) -> Result<Object> {
        self.inner.write(key, Op::Create(value))
    }

    fn create_all(&self, items: Vec<(String, Bytes)>) -> Result<Vec<Object>> {
        self.inner.create_all(items)
    }

    fn update(&self, key: &str, value: Bytes, expected: Option<Revision>) -> Result<Object> {
        self.inner.write(key, Op::Update { value, expected, bounded: true })
    }

    fn update_to_delete(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Object> {
        self.inner.write(key, Op::Update { value, expected, bounded: false })
    }

    fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Object> {
        self.inner.write(key, Op::Delete(expected))
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch> {
        self.inner.watch(prefix, after)
    }

    fn current_revision(&self) -> Revision {
        self.inner.commit.durable()
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.compacted.load(Ordering::Acquire)
    }

    fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision)
    }

    fn health(&self) -> Health {
        SledStore::health(self)
    }

    fn reopen(&self) -> Result<bool> {
        SledStore::reopen(self)
    }

    fn usage(&self) -> Usage {
        *self.inner.usage.lock()
    }

    fn set_quota(&self, quota: Quota) {
        *self.inner.quota.lock() = quota;
    }

    fn quota(&self) -> Quota {
        *self.inner.quota.lock()
    }

    fn commit_stats(&self) -> CommitStats {
        CommitStats {
            commits: self.inner.commits.load(Ordering::Acquire),
            revisions: self.inner.committed_revisions.load(Ordering::Acquire),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::open::open_sled;
    use super::*;

    /// A store whose usage record is missing (written by a build that kept none) or behind its
    /// revision (written since by such a build) is counted from its objects when opened.
    #[test]
    fn usage_without_a_current_record_is_counted_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s");
        let (held, revision) = {
            let store = SledStore::open(&path, Options::create()).unwrap();
            store.create("/a", Bytes::from_static(b"one")).unwrap();
            store.create("/b", Bytes::from_static(b"two two")).unwrap();
            store.update("/a", Bytes::from_static(b"1"), None).unwrap();
            (store.usage(), store.current_revision())
        };
        assert_eq!(held, Usage { objects: 2, bytes: 2 + 1 + 2 + 7 });
        for record in [None, Some(codec::encode_usage(revision - 1, Usage::default()))] {
            {
                // As `open_sled`: the closed store's IO threads may hold sled's lock a moment.
                let db = open_sled(&path, &sled::Config::new().path(&path)).unwrap();
                match record {
                    None => db.remove(codec::META_USAGE).unwrap(),
                    Some(stale) => db.insert(codec::META_USAGE, &stale).unwrap(),
                };
                db.flush().unwrap();
            }
            let store = SledStore::open(&path, Options::default()).unwrap();
            assert_eq!(store.usage(), held, "record {record:?}");
        }
    }
}
