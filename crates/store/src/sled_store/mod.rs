//! The embedded backend: one sled database (one directory) per store.
//!
//! Writes are serialized by a write lock that fixes each write's revision and applies the object,
//! its log entry and the new revision in one atomic sled batch, in memory. Durability is group
//! commit's job: a leader appends the writes to the write-ahead log with one `fdatasync` per
//! group (see [`crate::commit`] and [`crate::wal`]); sled is flushed only at checkpoints. Reads
//! take the lock shared, so a read sees a state at one revision, and they return only once that
//! revision is durable: nothing a client reads can be lost in a crash.

use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
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
mod open;

use self::open::{load, lock_dir, prepare_dir, Loaded};
use crate::{
    Error, Event, EventKind, Health, HistoryWindow, ListOptions, ListPage, Object, Quota, Result,
    Revision, Store, Usage,
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
    _lock: File,
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
}

impl SledStore {
    /// Open (or, with [`Options::create_if_missing`], create) the store in `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<SledStore> {
        let path = path.as_ref().to_path_buf();
        prepare_dir(&path, options.create_if_missing)?;
        let lock = lock_dir(&path)?;

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
    let object_key = codec::object_key(&event.key);
    match event.kind {
        EventKind::Deleted => batch.remove(object_key),
        _ => batch.insert(
            object_key,
            codec::encode_object(&event.value, event.create_revision, event.revision),
        ),
    }
    batch.insert(&codec::log_key(event.revision), record);
    batch.insert(codec::META_REVISION, &codec::encode_u64(event.revision));
    batch.insert(codec::META_USAGE, &codec::encode_usage(event.revision, usage));
    batch
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

    /// A page of `prefix` at the newest revision or at a past one. A past revision's state is the
    /// current one with every key written since shown as it was then: the first write to a key
    /// after that revision says what the key held before it (nothing, for a creation).
    fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListPage> {
        let token = options
            .continue_token
            .as_deref()
            .map(|t| ContinueToken::decode(t, prefix))
            .transpose()?;
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        // Every page of a paginated list is read at its first page's revision.
        let at = match (&token, options.revision) {
            (Some(token), Some(revision)) if token.revision != revision => {
                return Err(Error::InvalidContinue {
                    reason: "the token is for a list at another revision",
                });
            }
            (Some(token), _) => Some(token.revision),
            (None, revision) => revision,
        };
        let after_key = token.as_ref().map(|t| t.last_key.as_str());
        let mut rewind = match at {
            Some(at) => {
                // Most of the history is read without holding writers up; only what they
                // applied meanwhile is read under the lock, below.
                let applied = *self.writer.read();
                if at > applied {
                    return Err(Error::FutureRevision { requested: at, current: applied });
                }
                let oldest_available = self.compacted.load(Ordering::Acquire);
                if at < oldest_available {
                    return Err(Error::Expired { requested: at, oldest_available });
                }
                let mut rewind =
                    Rewind { prefix, after_key, at, next: at + 1, prior: BTreeMap::new() };
                self.rewind(&mut rewind, applied)?;
                Some(rewind)
            }
            None => None,
        };

        let reader = self.writer.read();
        let read_at = *reader;
        if let Some(rewind) = &mut rewind {
            self.rewind(rewind, read_at)?;
        }
        let mut prior = rewind.map(|r| r.prior).unwrap_or_default().into_iter().peekable();
        let start = match after_key {
            Some(last_key) => Bound::Excluded(codec::object_key(last_key)),
            None => Bound::Included(codec::object_key(prefix)),
        };
        let object_prefix = codec::object_key(prefix);
        let db = self.db()?;
        let mut current = db.range::<Vec<u8>, _>((start, Bound::Unbounded));
        let mut next_current: Option<Object> = None;
        let mut current_done = false;
        let mut items = Vec::new();
        let mut more = false;
        loop {
            if next_current.is_none() && !current_done {
                match current.next().transpose()? {
                    Some((k, v)) if k.starts_with(&object_prefix) => {
                        let key = std::str::from_utf8(&k[1..]).map_err(|e| self.corrupt(e))?;
                        let object = codec::decode_object(key.to_owned(), v);
                        next_current = Some(object.map_err(|e| self.corrupt(e))?);
                    }
                    _ => current_done = true,
                }
            }
            // The next key from either side; a key written since the list's revision shows
            // its state at that revision, and is left out if it did not exist then.
            let order = match (&next_current, prior.peek()) {
                (None, None) => break,
                (Some(object), Some((key, _))) => object.key.as_str().cmp(key.as_str()),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
            };
            let object = match order {
                std::cmp::Ordering::Less => next_current.take(),
                std::cmp::Ordering::Equal => {
                    next_current = None;
                    prior.next().and_then(|(_, then)| then)
                }
                std::cmp::Ordering::Greater => prior.next().and_then(|(_, then)| then),
            };
            let Some(object) = object else { continue };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(object);
        }
        drop(reader);

        self.wait_durable(read_at)?;
        let revision = at.unwrap_or(read_at);
        let continue_token = match (more, items.last()) {
            (true, Some(last)) => {
                Some(ContinueToken { revision, last_key: last.key.clone() }.encode())
            }
            _ => None,
        };
        Ok(ListPage { items, revision, continue_token })
    }

    /// Read the history from `rewind.next` through `through`, keeping for each key of the listing
    /// the state its first write after `rewind.at` replaced.
    fn rewind(&self, rewind: &mut Rewind<'_>, through: Revision) -> Result<()> {
        if rewind.next > through {
            return Ok(());
        }
        let range = codec::log_key(rewind.next)..=codec::log_key(through);
        for entry in self.db()?.range(range) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
            if revision != rewind.next {
                return Err(self.history_gone(rewind.at, rewind.next));
            }
            rewind.next += 1;
            let record = codec::view_event(&v).map_err(|e| self.corrupt(e))?;
            let key = record.key;
            if !key.starts_with(rewind.prefix)
                || rewind.after_key.is_some_and(|after| key <= after)
                || rewind.prior.contains_key(key)
            {
                continue;
            }
            let then = match record.kind {
                EventKind::Created => None,
                EventKind::Modified | EventKind::Deleted => {
                    // A record written before log records kept the previous mod revision: the
                    // state before it cannot be rebuilt, as if its history were compacted.
                    let mod_revision = record.prev_mod_revision.ok_or(Error::Expired {
                        requested: rewind.at,
                        oldest_available: revision,
                    })?;
                    let value = match record.kind {
                        EventKind::Deleted => record.value(),
                        _ => record.prev_value().ok_or_else(|| {
                            self.corrupt(format!(
                                "the modification at revision {revision} has no previous value"
                            ))
                        })?,
                    };
                    Some(Object {
                        key: key.to_owned(),
                        value,
                        create_revision: record.create_revision,
                        mod_revision,
                    })
                }
            };
            rewind.prior.insert(key.to_owned(), then);
        }
        if rewind.next <= through {
            return Err(self.history_gone(rewind.at, rewind.next));
        }
        Ok(())
    }

    /// The error for a list at `at` that finds no history entry for `missing`: compaction took
    /// it (revisions are dense, so nothing else removes entries), or the database is damaged.
    fn history_gone(&self, at: Revision, missing: Revision) -> Error {
        let oldest_available = self.compacted.load(Ordering::Acquire);
        if at < oldest_available {
            Error::Expired { requested: at, oldest_available }
        } else {
            self.corrupt(format!("the history has no entry for revision {missing}"))
        }
    }

    fn watch(self: &Arc<Self>, prefix: &str, after: Revision) -> Result<Watch> {
        let oldest_available = self.compacted.load(Ordering::Acquire);
        if after < oldest_available {
            return Err(Error::Expired { requested: after, oldest_available });
        }
        let live = self.hub.subscribe(prefix)?;
        let backlog = Replay {
            store: Arc::downgrade(self),
            prefix: prefix.to_owned(),
            next: after + 1,
            through: live.published,
            buffered: Default::default(),
        };
        Ok(Watch::new(after, Box::new(backlog), live))
    }

    fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.commit.durable();
        if revision > current {
            return Err(Error::FutureRevision { requested: revision, current });
        }
        self.compact_to(revision)
    }

    fn compact_to(&self, revision: Revision) -> Result<()> {
        let _compaction = self.compaction.lock();
        let compacted = self.compacted.load(Ordering::Acquire);
        if revision <= compacted {
            return Ok(());
        }
        // Announce first: a replay that meets the gap then knows it was compacted.
        self.compacted.store(revision, Ordering::Release);
        let range = codec::log_key(compacted + 1)..=codec::log_key(revision);
        let db = self.db()?;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for key in db.range(range).keys() {
            batch.remove(key?);
            in_batch += 1;
            if in_batch == COMPACTION_CHUNK {
                db.apply_batch(std::mem::take(&mut batch))?;
                in_batch = 0;
            }
        }
        batch.insert(codec::META_COMPACTED, &codec::encode_u64(revision));
        db.apply_batch(batch)?;
        tracing::debug!(path = %self.path.display(), revision, "compacted history");
        Ok(())
    }

    /// Enforce the history window: discard events both older than its age and beyond its count.
    fn enforce_history(&self) -> Result<()> {
        let window = self.options.history;
        let by_count = window.count_bound(self.commit.durable());
        let compacted = self.compacted.load(Ordering::Acquire);
        if by_count <= compacted {
            return Ok(());
        }
        let cutoff = unix_millis().saturating_sub(window.min_age.as_millis() as u64);
        let mut boundary = compacted;
        let range = codec::log_key(compacted + 1)..=codec::log_key(by_count);
        for entry in self.db()?.range(range).take(COMPACTION_CHUNK) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
            let record = codec::decode_event(revision, &v).map_err(|e| self.corrupt(e))?;
            if record.unix_millis > cutoff {
                break;
            }
            boundary = revision;
        }
        self.compact_to(boundary)
    }

    /// Make sled's own state durable, then empty the write-ahead log: everything in it is now in
    /// sled on disk. No sync runs meanwhile (`Commit::exclusive`), so no append interleaves.
    /// A passing error is retried, and if it lasts, the checkpoint is put off (`false`): the log
    /// still holds everything, so nothing is at risk. An uncertain one fails the store.
    fn checkpoint(&self) -> bool {
        if self.commit.is_failed() {
            return false;
        }
        let outcome = self.commit.exclusive(|| {
            let db = self.db().map_err(|error| Failure { error, passing: false })?;
            self.options.retry.run("checkpoint", || {
                self.disk.lock().sync(&db)?;
                self.wal.lock().reset()
            })
        });
        match outcome {
            Ok(()) => true,
            Err(f) if f.passing => {
                tracing::warn!(
                    path = %self.path.display(), error = %f.error,
                    "checkpoint put off after a passing I/O error; the write-ahead log keeps everything"
                );
                false
            }
            Err(f) => {
                self.commit.fail(format!("checkpoint failed: {}", f.error));
                false
            }
        }
    }

    /// Block until `revision` is durable, syncing as the leader when no one else is.
    fn wait_durable(&self, revision: Revision) -> Result<()> {
        while let Some(batch) = self.commit.wait_or_lead(revision)? {
            let outcome = self
                .options
                .retry
                .run("write-ahead log append", || self.wal.lock().append(&batch.wal));
            match outcome {
                Ok(()) => {
                    // Still the only leader, so events reach the publisher in revision order.
                    let sent = self
                        .publisher
                        .lock()
                        .as_ref()
                        .is_some_and(|p| p.send((batch.events, batch.through)).is_ok());
                    if !sent {
                        tracing::debug!(path = %self.path.display(), "no publisher: store closing");
                    }
                    self.commit.finish(batch.through, &Ok(()));
                }
                Err(f) if f.passing => {
                    // Nothing reached the log: the batch waits for the next leader.
                    let why = f.error.to_string();
                    self.commit.give_back(batch, why.clone());
                    return Err(Error::Unavailable(why));
                }
                Err(f) => {
                    let outcome = Err(f.error);
                    self.commit.finish(batch.through, &outcome);
                    outcome?;
                }
            }
        }
        Ok(())
    }

    /// Reopen a failed store in place: see [`SledStore::reopen`].
    fn reopen(&self) -> Result<bool> {
        // Writers and consistent readers wait; no sync or checkpoint runs meanwhile.
        let mut writer = self.writer.write();
        if self.commit.failure().is_none() {
            return Ok(false);
        }
        let durable = self.commit.durable();
        self.commit.exclusive(|| {
            // sled's lock is released once its last handle is dropped; `open_sled` waits for
            // a replay or compaction still holding one.
            self.db.write().take();
            let loaded = load(&self.path, &self.options)?;
            if loaded.revision < durable {
                let e = self.corrupt(format!(
                    "reopened at revision {} but revision {durable} was acknowledged",
                    loaded.revision
                ));
                *self.db.write() = Some(loaded.db);
                return Err(e);
            }
            // Writes that reached the disk without being acknowledged are durable now:
            // watchers get them, in order, after everything already published.
            let mut recovered = Vec::new();
            if loaded.revision > durable {
                let range = codec::log_key(durable + 1)..=codec::log_key(loaded.revision);
                for entry in loaded.db.range(range) {
                    let (k, v) = entry?;
                    let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
                    let record = codec::decode_event(revision, &v).map_err(|e| self.corrupt(e))?;
                    recovered.push(Arc::new(record.event));
                }
            }
            *self.disk.lock() = loaded.disk;
            *self.wal.lock() = loaded.wal;
            *self.db.write() = Some(loaded.db);
            *self.usage.lock() = loaded.usage;
            self.compacted.fetch_max(loaded.compacted, Ordering::AcqRel);
            *writer = loaded.revision;
            if !recovered.is_empty() {
                if let Some(p) = self.publisher.lock().as_ref() {
                    let _ = p.send((recovered, loaded.revision));
                }
            }
            self.commit.reset(loaded.revision);
            crate::io::count_reopen();
            tracing::info!(
                path = %self.path.display(), revision = loaded.revision,
                "failed store reopened; it accepts writes again"
            );
            Ok(true)
        })
    }

    fn run_housekeeping(self: Arc<Self>) {
        let interval = self.options.compaction_interval;
        let mut last_checkpoint = Instant::now();
        // While failed: when to try reopening next, and the wait after that.
        let mut reopen: Option<(Instant, Duration)> = None;
        while self.commit.idle(interval) {
            if self.commit.is_failed() {
                let Some(first) = self.options.reopen_after else { continue };
                let (at, wait) = *reopen.get_or_insert((Instant::now() + first, first));
                if Instant::now() >= at {
                    match self.reopen() {
                        Ok(_) => reopen = None,
                        Err(e) => {
                            let wait = (wait * 2).min(Duration::from_secs(60));
                            tracing::warn!(
                                path = %self.path.display(), error = %e, ?wait,
                                "reopening the failed store failed; trying again later"
                            );
                            reopen = Some((Instant::now() + wait, wait));
                        }
                    }
                }
                continue;
            }
            // Writes whose sync was given up on after a passing error are still queued: make
            // them durable even if no writer comes along.
            let applied = self.commit.applied();
            if applied > self.commit.durable() {
                if let Err(e) = self.wait_durable(applied) {
                    tracing::debug!(path = %self.path.display(), error = %e, "sync put off");
                }
            }
            let wal_len = self.wal.lock().len();
            if wal_len >= self.options.checkpoint_bytes
                || (wal_len > 0 && last_checkpoint.elapsed() >= self.options.checkpoint_interval)
            {
                last_checkpoint = Instant::now();
                self.checkpoint();
            }
            if let Err(e) = self.enforce_history() {
                tracing::warn!(path = %self.path.display(), error = %e, "compaction failed");
            }
        }
    }
}

/// A list at a past revision: the keys written since, each with its state at that revision
/// (`None`: it did not exist then), read from the history.
struct Rewind<'a> {
    prefix: &'a str,
    /// Continuing a list: only keys after this one.
    after_key: Option<&'a str>,
    /// The revision listed.
    at: Revision,
    /// The next history entry to read.
    next: Revision,
    prior: BTreeMap<String, Option<Object>>,
}

/// A watch's replay of the log, from its start up to where live delivery took over.
struct Replay {
    store: Weak<Inner>,
    prefix: String,
    next: Revision,
    through: Revision,
    buffered: std::collections::VecDeque<Arc<Event>>,
}

impl Replay {
    fn fill(&mut self) -> Result<()> {
        let store = self.store.upgrade().ok_or(Error::Closed)?;
        let range = codec::log_key(self.next)..=codec::log_key(self.through);
        let mut read = 0;
        for entry in store.db()?.range(range).take(REPLAY_CHUNK) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| store.corrupt(e))?;
            if revision != self.next {
                // Revisions are dense, so a hole is history compacted under us.
                let oldest_available = store.compacted.load(Ordering::Acquire);
                if self.next <= oldest_available {
                    return Err(Error::Expired { requested: self.next - 1, oldest_available });
                }
            }
            self.next = revision + 1;
            read += 1;
            let record = codec::decode_event(revision, &v).map_err(|e| store.corrupt(e))?;
            if record.event.key.starts_with(&self.prefix) {
                self.buffered.push_back(Arc::new(record.event));
            }
        }
        if read == 0 && self.next <= self.through {
            // Nothing left in the range at all: it was compacted away entirely.
            let oldest_available = store.compacted.load(Ordering::Acquire);
            if self.next <= oldest_available {
                return Err(Error::Expired { requested: self.next - 1, oldest_available });
            }
            self.next = self.through + 1;
        }
        Ok(())
    }
}

impl Iterator for Replay {
    type Item = Result<Arc<Event>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                return Some(Ok(event));
            }
            if self.next > self.through {
                return None;
            }
            if let Err(e) = self.fill() {
                self.next = self.through + 1;
                return Some(Err(e));
            }
        }
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
