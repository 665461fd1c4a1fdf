//! The sled backend checked against an in-memory model.
//!
//! * `sequential_operations_match_the_model`: random sequences of writes (with and without
//!   preconditions), reads, paginated lists (of the newest state, of a past revision, and ones
//!   whose pages are interleaved with other operations), compactions, watches and reopens, every
//!   result compared with a `BTreeMap` model, its revision counter and its event log.
//! * `concurrent_writers_and_watchers_agree`: several writer threads race on overlapping keys
//!   while two watchers follow the store; the event stream must be the dense, gap-free history
//!   that explains every acknowledged write, every error and every read.
//! * `pagination_is_stable_under_concurrent_writes`: a paginated list returns exactly the snapshot
//!   at its first page's revision while keys churn, as the history a watch replays says it was;
//!   continue tokens expire with compaction.
//! * `a_slow_watcher_is_ended_without_hurting_anyone_else`: a watcher that does not consume is
//!   ended with `WatcherTooSlow`; writers and other watchers do not notice.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_store::{
    Error, Event, EventKind, ListOptions, Object, Options, Revision, SledStore, Store, Watch,
};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// An error reduced to what the tests compare (`Error` is not `PartialEq`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fail {
    NotFound(String),
    AlreadyExists(String),
    Conflict { key: String, expected: Revision, actual: Revision },
    Expired { requested: Revision, oldest_available: Revision },
    TooSlow { last_delivered: Revision },
    Future { requested: Revision, current: Revision },
    InvalidContinue,
    Closed,
    Other(String),
}

fn fail(e: Error) -> Fail {
    match e {
        Error::NotFound { key } => Fail::NotFound(key),
        Error::AlreadyExists { key } => Fail::AlreadyExists(key),
        Error::Conflict { key, expected, actual } => Fail::Conflict { key, expected, actual },
        Error::Expired { requested, oldest_available } => {
            Fail::Expired { requested, oldest_available }
        }
        Error::WatcherTooSlow { last_delivered } => Fail::TooSlow { last_delivered },
        Error::FutureRevision { requested, current } => Fail::Future { requested, current },
        Error::InvalidContinue { .. } => Fail::InvalidContinue,
        Error::Closed => Fail::Closed,
        other => Fail::Other(other.to_string()),
    }
}

fn open_new(path: &Path, options: Options) -> SledStore {
    SledStore::open(path, options).expect("open a new store")
}

/// What one poll of a watch gave.
#[derive(Debug, PartialEq, Eq)]
enum Polled {
    Event(Event),
    Err(Fail),
    /// `try_next` says the watch has ended.
    Ended,
    /// Nothing arrived before the deadline.
    Timeout,
}

/// The watch's next item, polling `try_next` until `deadline`. Events reach live watchers from
/// the committer shortly after the write that made them returns, so "not yet" is not "never".
fn poll_next(watch: &mut Watch, deadline: Instant) -> Polled {
    loop {
        match watch.try_next() {
            Some(Ok(event)) => return Polled::Event(Event::clone(&event)),
            Some(Err(e)) => return Polled::Err(fail(e)),
            None if watch.is_done() => return Polled::Ended,
            None if Instant::now() >= deadline => return Polled::Timeout,
            None => thread::sleep(Duration::from_micros(200)),
        }
    }
}

/// Exactly `n` events from `watch`, and then nothing ready; otherwise a description of what came.
fn take_events(watch: &mut Watch, n: usize) -> Result<Vec<Event>, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = Vec::with_capacity(n);
    while events.len() < n {
        match poll_next(watch, deadline) {
            Polled::Event(event) => events.push(event),
            other => {
                return Err(format!(
                    "wanted {n} events, got {} then {other:?}: {events:?}",
                    events.len()
                ))
            }
        }
    }
    match watch.try_next() {
        None => Ok(events),
        Some(extra) => Err(format!("after the {n} events wanted, also {extra:?}: {events:?}")),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Sequential operations against a model
// ---------------------------------------------------------------------------------------------

/// Keys under two prefixes, plus one ("/ab/1") that collides with the prefix "/a".
const KEYS: [&str; 7] = ["/a/1", "/a/2", "/a/3", "/ab/1", "/b/1", "/b/2", "/b/3"];
/// Prefixes to list and watch: everything, a prefix without its slash, each directory, nothing.
const PREFIXES: [&str; 5] = ["", "/a", "/a/", "/b/", "/c/"];
/// Prefixes followed by live watches through the whole sequence.
const LIVE_PREFIXES: [&str; 2] = ["", "/a/"];

#[derive(Clone, Debug)]
enum Pre {
    /// No precondition.
    Unconditional,
    /// The key's current `mod_revision` (any revision when the key is missing).
    Current,
    /// A revision other than the key's current one, picked by the seed.
    Stale(u8),
}

#[derive(Clone, Debug)]
enum Op {
    Create(usize, Vec<u8>),
    Update(usize, Vec<u8>, Pre),
    Delete(usize, Pre),
    Get(usize),
    List(usize, Option<usize>),
    /// List a prefix, page by page, at a past revision picked by the seed (sometimes compacted,
    /// sometimes in the future).
    ListAt(usize, Option<usize>, u8),
    /// The next page of the pending paginated list, or the first page of a new one of the prefix:
    /// other operations run between its pages.
    Page(usize, usize),
    /// Compact to `seed % (revision + 1)`.
    Compact(u8),
    /// Compact to one past the current revision.
    CompactFuture,
    /// Watch a prefix from a revision picked by the seed, and check the replay.
    Watch(usize, u8),
    /// Watch a prefix from a revision, compact past it before reading anything (or after reading
    /// one event), then read the watch.
    WatchAcrossCompaction {
        prefix: usize,
        after: u8,
        to: u8,
        read_first: bool,
    },
    /// Drop the store and open it again from its directory.
    Reopen,
}

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..6)
}

fn pre_strategy() -> impl Strategy<Value = Pre> {
    prop_oneof![
        1 => Just(Pre::Unconditional),
        2 => Just(Pre::Current),
        1 => any::<u8>().prop_map(Pre::Stale),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let prefix = 0..PREFIXES.len();
    let limit = prop_oneof![Just(None), (1usize..=3).prop_map(Some)];
    prop_oneof![
        6 => (key.clone(), value_strategy()).prop_map(|(k, v)| Op::Create(k, v)),
        6 => (key.clone(), value_strategy(), pre_strategy())
            .prop_map(|(k, v, p)| Op::Update(k, v, p)),
        3 => (key.clone(), pre_strategy()).prop_map(|(k, p)| Op::Delete(k, p)),
        1 => key.prop_map(Op::Get),
        2 => (prefix.clone(), limit.clone()).prop_map(|(p, l)| Op::List(p, l)),
        2 => (prefix.clone(), limit, any::<u8>()).prop_map(|(p, l, s)| Op::ListAt(p, l, s)),
        3 => (prefix.clone(), 1usize..=2).prop_map(|(p, l)| Op::Page(p, l)),
        1 => any::<u8>().prop_map(Op::Compact),
        1 => Just(Op::CompactFuture),
        1 => (prefix.clone(), any::<u8>()).prop_map(|(p, s)| Op::Watch(p, s)),
        1 => (prefix, any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(prefix, after, to, read_first)| {
            Op::WatchAcrossCompaction { prefix, after, to, read_first }
        }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Clone, Debug)]
struct Entry {
    value: Bytes,
    create_revision: Revision,
    mod_revision: Revision,
}

/// What the store should hold: objects, the revision counter, the compaction point and the full
/// event log (`log[i]` has revision `i + 1`; compaction only limits what may be asked of it).
#[derive(Debug, Default)]
struct Model {
    objects: BTreeMap<String, Entry>,
    revision: Revision,
    compacted: Revision,
    log: Vec<Event>,
}

impl Model {
    fn object(key: &str, e: &Entry) -> Object {
        Object {
            key: key.to_owned(),
            value: e.value.clone(),
            create_revision: e.create_revision,
            mod_revision: e.mod_revision,
        }
    }

    fn get(&self, key: &str) -> Option<Object> {
        self.objects.get(key).map(|e| Model::object(key, e))
    }

    /// The object a precondition is checked against.
    fn current(&self, key: &str, expected: Option<Revision>) -> Result<Entry, Fail> {
        let entry = self.objects.get(key).ok_or_else(|| Fail::NotFound(key.to_owned()))?;
        match expected {
            Some(expected) if expected != entry.mod_revision => {
                Err(Fail::Conflict { key: key.to_owned(), expected, actual: entry.mod_revision })
            }
            _ => Ok(entry.clone()),
        }
    }

    fn commit(&mut self, event: Event) -> Object {
        assert_eq!(event.revision, self.revision + 1);
        self.revision = event.revision;
        let object = event.object();
        match event.kind {
            EventKind::Deleted => {
                self.objects.remove(&event.key);
            }
            _ => {
                self.objects.insert(
                    event.key.clone(),
                    Entry {
                        value: event.value.clone(),
                        create_revision: event.create_revision,
                        mod_revision: event.revision,
                    },
                );
            }
        }
        self.log.push(event);
        object
    }

    fn create(&mut self, key: &str, value: Bytes) -> Result<Object, Fail> {
        if self.objects.contains_key(key) {
            return Err(Fail::AlreadyExists(key.to_owned()));
        }
        let revision = self.revision + 1;
        Ok(self.commit(Event {
            kind: EventKind::Created,
            revision,
            key: key.to_owned(),
            value,
            prev_value: None,
            create_revision: revision,
        }))
    }

    fn update(
        &mut self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<Object, Fail> {
        let current = self.current(key, expected)?;
        Ok(self.commit(Event {
            kind: EventKind::Modified,
            revision: self.revision + 1,
            key: key.to_owned(),
            value,
            prev_value: Some(current.value),
            create_revision: current.create_revision,
        }))
    }

    fn delete(&mut self, key: &str, expected: Option<Revision>) -> Result<Object, Fail> {
        let current = self.current(key, expected)?;
        Ok(self.commit(Event {
            kind: EventKind::Deleted,
            revision: self.revision + 1,
            key: key.to_owned(),
            value: current.value,
            prev_value: None,
            create_revision: current.create_revision,
        }))
    }

    fn list(&self, prefix: &str) -> Vec<Object> {
        self.objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| Model::object(k, e))
            .collect()
    }

    /// What a list of `prefix` at `revision` shows: the log replayed up to it, or the error.
    fn list_at(&self, prefix: &str, revision: Revision) -> Result<Vec<Object>, Fail> {
        if revision > self.revision {
            return Err(Fail::Future { requested: revision, current: self.revision });
        }
        if revision < self.compacted {
            return Err(Fail::Expired { requested: revision, oldest_available: self.compacted });
        }
        let mut state = BTreeMap::new();
        for event in &self.log[..revision as usize] {
            match event.kind {
                EventKind::Deleted => state.remove(&event.key),
                _ => state.insert(event.key.clone(), event.object()),
            };
        }
        Ok(state.into_values().filter(|o| o.key.starts_with(prefix)).collect())
    }

    /// What a watch of `prefix` from `after` yields.
    fn watch(&self, prefix: &str, after: Revision) -> Result<Vec<Event>, Fail> {
        if after < self.compacted {
            return Err(Fail::Expired { requested: after, oldest_available: self.compacted });
        }
        Ok(self
            .log
            .iter()
            .filter(|e| e.revision > after && e.key.starts_with(prefix))
            .cloned()
            .collect())
    }

    /// The revision a precondition passes.
    fn expected(&self, key: &str, pre: &Pre) -> Option<Revision> {
        let entry = self.objects.get(key);
        match pre {
            Pre::Unconditional => None,
            Pre::Current => Some(entry.map_or(self.revision, |e| e.mod_revision)),
            Pre::Stale(seed) => {
                let (m, c) =
                    entry.map_or((self.revision, 0), |e| (e.mod_revision, e.create_revision));
                let candidates: Vec<Revision> =
                    [0, m.saturating_sub(1), m + 1, c, self.revision + 7, u64::MAX]
                        .into_iter()
                        .filter(|r| *r != m || entry.is_none())
                        .collect();
                Some(candidates[*seed as usize % candidates.len()])
            }
        }
    }
}

/// The store under test, its model, and watches kept open across the whole sequence.
struct Harness {
    dir: tempfile::TempDir,
    store: Option<SledStore>,
    model: Model,
    live: Vec<(&'static str, Watch)>,
    /// A paginated list in progress across operations.
    paging: Option<Paging>,
}

/// A paginated list whose next page is still to be read.
#[derive(Debug)]
struct Paging {
    prefix: &'static str,
    limit: usize,
    /// The first page's revision.
    revision: Revision,
    /// How many objects its pages have returned so far.
    returned: usize,
    token: String,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open_new(&dir.path().join("store"), Options::create());
        let mut h = Harness {
            dir,
            store: Some(store),
            model: Model::default(),
            live: Vec::new(),
            paging: None,
        };
        h.open_live();
        h
    }

    fn store(&self) -> &SledStore {
        self.store.as_ref().expect("store open")
    }

    fn open_live(&mut self) {
        let from = self.model.revision;
        let store = self.store.as_ref().expect("store open");
        self.live =
            LIVE_PREFIXES.iter().map(|p| (*p, store.watch(p, from).expect("live watch"))).collect();
    }

    /// After a successful write: each live watch on a matching prefix delivers exactly its event.
    fn check_live(&mut self) -> Result<(), TestCaseError> {
        let event = self.model.log.last().expect("a write happened").clone();
        for (prefix, watch) in &mut self.live {
            let want: Vec<Event> =
                if event.key.starts_with(*prefix) { vec![event.clone()] } else { Vec::new() };
            let got = take_events(watch, want.len());
            prop_assert_eq!(got, Ok(want), "live watch on {:?}", prefix);
        }
        Ok(())
    }

    fn check_watch(&self, prefix: &str, after: Revision) -> Result<(), TestCaseError> {
        let want = self.model.watch(prefix, after);
        let got = match self.store().watch(prefix, after) {
            Err(e) => Err(fail(e)),
            Ok(mut watch) => {
                let n = want.as_ref().map_or(0, Vec::len);
                match take_events(&mut watch, n) {
                    Ok(events) => Ok(events),
                    Err(what) => Err(Fail::Other(what)),
                }
            }
        };
        prop_assert_eq!(got, want, "watch {:?} from {}", prefix, after);
        Ok(())
    }

    /// A watch whose history is compacted while it replays must deliver a prefix of its events
    /// (no gap) and then either the rest or `Expired`.
    fn check_watch_across_compaction(
        &mut self,
        prefix: &str,
        after: Revision,
        to: Revision,
        read_first: bool,
    ) -> Result<(), TestCaseError> {
        let want = self.model.watch(prefix, after).expect("a valid start");
        let mut watch = self.store().watch(prefix, after).expect("a valid start");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        if read_first && !want.is_empty() {
            match poll_next(&mut watch, deadline) {
                Polled::Event(e) => got.push(e),
                other => prop_assert!(false, "watch {:?} from {}: {:?}", prefix, after, other),
            }
        }
        let compacted = self.store().compact(to).map_err(fail);
        prop_assert_eq!(compacted, Ok(()), "compact to {}", to);
        self.model.compacted = self.model.compacted.max(to);
        let end = loop {
            if got.len() == want.len() {
                break watch.try_next().map(|x| x.map(|e| e.revision).map_err(fail));
            }
            match poll_next(&mut watch, deadline) {
                Polled::Event(e) => got.push(e),
                Polled::Err(f) => break Some(Err(f)),
                other => prop_assert!(false, "watch {:?} from {}: {:?}", prefix, after, other),
            }
        };
        let context =
            format!("watch {prefix:?} from {after}, compacted to {to} (read first: {read_first})");
        prop_assert_eq!(&got[..], &want[..got.len()], "{}", context);
        match end {
            None => prop_assert_eq!(got.len(), want.len(), "{}", context),
            Some(Err(Fail::Expired { requested, oldest_available })) => {
                prop_assert_eq!(oldest_available, self.model.compacted, "{}", context);
                prop_assert!(requested < oldest_available, "{}: {}", context, requested);
                prop_assert!(watch.try_next().is_none(), "{}: more after the end", context);
            }
            Some(other) => prop_assert!(false, "{}: then {:?}", context, other),
        }
        Ok(())
    }

    fn check_list(&self, prefix: &str, limit: Option<usize>) -> Result<(), TestCaseError> {
        let want = self.model.list(prefix);
        // An empty listing is one empty page; otherwise full pages and a last, possibly short one.
        let pages: Vec<&[Object]> = match limit {
            Some(l) if !want.is_empty() => want.chunks(l).collect(),
            _ => vec![&want[..]],
        };
        let mut token = None;
        for (i, page_want) in pages.iter().enumerate() {
            let options = ListOptions { limit, continue_token: token.take(), revision: None };
            let page = self.store().list(prefix, &options).map_err(|e| {
                TestCaseError::fail(format!("list {prefix:?} {options:?}: {:?}", fail(e)))
            })?;
            prop_assert_eq!(
                &page.items[..],
                *page_want,
                "list {:?} limit {:?} page {}",
                prefix,
                limit,
                i
            );
            prop_assert_eq!(page.revision, self.model.revision, "list revision, page {}", i);
            let last = i + 1 == pages.len();
            prop_assert_eq!(
                page.continue_token.is_none(),
                last,
                "continue token on page {} of {} ({:?} limit {:?})",
                i,
                pages.len(),
                prefix,
                limit
            );
            token = page.continue_token;
        }
        Ok(())
    }

    /// A list of `prefix` at `revision`, page by page, against the model's state then.
    fn check_list_at(
        &self,
        prefix: &str,
        limit: Option<usize>,
        revision: Revision,
    ) -> Result<(), TestCaseError> {
        let context = format!("list {prefix:?} limit {limit:?} at {revision}");
        let first = ListOptions { limit, continue_token: None, revision: Some(revision) };
        let want = match self.model.list_at(prefix, revision) {
            Err(e) => {
                let got = self.store().list(prefix, &first).map(|p| p.items).map_err(fail);
                prop_assert_eq!(got, Err(e), "{}", context);
                return Ok(());
            }
            Ok(want) => want,
        };
        let pages: Vec<&[Object]> = match limit {
            Some(l) if !want.is_empty() => want.chunks(l).collect(),
            _ => vec![&want[..]],
        };
        let mut options = first;
        for (i, page_want) in pages.iter().enumerate() {
            let page = self
                .store()
                .list(prefix, &options)
                .map_err(|e| TestCaseError::fail(format!("{context}: page {i}: {:?}", fail(e))))?;
            prop_assert_eq!(&page.items[..], *page_want, "{}: page {}", context, i);
            prop_assert_eq!(page.revision, revision, "{}: page {} revision", context, i);
            let last = i + 1 == pages.len();
            prop_assert_eq!(page.continue_token.is_none(), last, "{}: page {}", context, i);
            // Later pages need only the token, which carries the revision.
            options = ListOptions { limit, continue_token: page.continue_token, revision: None };
        }
        Ok(())
    }

    /// The next page of the pending paginated list (or the first of a new one): the snapshot at
    /// its first page's revision, whatever happened since, unless that revision was compacted.
    fn check_page(&mut self, prefix: &'static str, limit: usize) -> Result<(), TestCaseError> {
        let (options, prefix, limit, revision, returned) = match self.paging.take() {
            Some(p) => {
                let options = ListOptions {
                    limit: Some(p.limit),
                    continue_token: Some(p.token),
                    revision: None,
                };
                (options, p.prefix, p.limit, p.revision, p.returned)
            }
            None => {
                let options = ListOptions { limit: Some(limit), ..ListOptions::default() };
                (options, prefix, limit, self.model.revision, 0)
            }
        };
        let context = format!("page {returned}.. of {prefix:?} at {revision}, limit {limit}");
        let got = self.store().list(prefix, &options).map_err(fail);
        let snapshot = match self.model.list_at(prefix, revision) {
            Ok(snapshot) => snapshot,
            Err(e) => {
                prop_assert_eq!(got.map(|p| p.items), Err(e), "{}", context);
                return Ok(());
            }
        };
        let page = got.map_err(|e| TestCaseError::fail(format!("{context}: {e:?}")))?;
        let end = (returned + limit).min(snapshot.len());
        prop_assert_eq!(&page.items[..], &snapshot[returned..end], "{}", context);
        prop_assert_eq!(page.revision, revision, "{}", context);
        prop_assert_eq!(page.continue_token.is_some(), end < snapshot.len(), "{}", context);
        if let Some(token) = page.continue_token {
            self.paging = Some(Paging { prefix, limit, revision, returned: end, token });
        }
        Ok(())
    }

    fn reopen(&mut self) -> Result<(), TestCaseError> {
        drop(self.store.take());
        // Closing ends every watch with `Closed`, after which it yields nothing.
        for (prefix, mut watch) in std::mem::take(&mut self.live) {
            let first = poll_next(&mut watch, Instant::now() + Duration::from_secs(10));
            prop_assert_eq!(first, Polled::Err(Fail::Closed), "live watch {:?} at close", prefix);
            prop_assert!(watch.try_next().is_none(), "a closed watch yielded more");
            prop_assert!(watch.blocking_next().is_none(), "a closed watch yielded more");
        }
        let options = Options { create_if_missing: false, ..Options::default() };
        let store = SledStore::open(self.dir.path().join("store"), options).map_err(|e| {
            // Dropping a store releases its directory, so nothing may hold it now.
            TestCaseError::fail(format!("reopen right after dropping the only handle: {e}"))
        })?;
        self.store = Some(store);
        self.open_live();
        Ok(())
    }

    fn step(&mut self, i: usize, op: &Op) -> Result<(), TestCaseError> {
        let write = |h: &mut Harness, got: Result<Object, Fail>, want: Result<Object, Fail>| {
            prop_assert_eq!(&got, &want, "op {}: {:?}", i, op);
            if let Ok(object) = &got {
                // Every acknowledged write takes exactly the next revision.
                prop_assert_eq!(object.mod_revision, h.model.revision);
                h.check_live()?;
            }
            Ok(())
        };
        match op {
            Op::Create(k, v) => {
                let (key, value) = (KEYS[*k], Bytes::from(v.clone()));
                let got = self.store().create(key, value.clone()).map_err(fail);
                let want = self.model.create(key, value);
                write(self, got, want)?;
            }
            Op::Update(k, v, pre) => {
                let (key, value) = (KEYS[*k], Bytes::from(v.clone()));
                let expected = self.model.expected(key, pre);
                let got = self.store().update(key, value.clone(), expected).map_err(fail);
                let want = self.model.update(key, value, expected);
                write(self, got, want)?;
            }
            Op::Delete(k, pre) => {
                let key = KEYS[*k];
                let expected = self.model.expected(key, pre);
                let got = self.store().delete(key, expected).map_err(fail);
                let want = self.model.delete(key, expected);
                write(self, got, want)?;
            }
            Op::Get(k) => {
                let got = self.store().get(KEYS[*k]).map_err(fail);
                prop_assert_eq!(got, Ok(self.model.get(KEYS[*k])), "op {}: {:?}", i, op);
            }
            Op::List(p, limit) => self.check_list(PREFIXES[*p], *limit)?,
            Op::ListAt(p, limit, seed) => {
                let (compacted, current) = (self.model.compacted, self.model.revision);
                let revision = match seed % 4 {
                    0 => compacted,
                    1 => compacted.saturating_sub(1),
                    _ => Revision::from(*seed) % (current + 2),
                };
                self.check_list_at(PREFIXES[*p], *limit, revision)?;
            }
            Op::Page(p, limit) => self.check_page(PREFIXES[*p], *limit)?,
            Op::Compact(seed) => {
                let to = Revision::from(*seed) % (self.model.revision + 1);
                let got = self.store().compact(to).map_err(fail);
                prop_assert_eq!(got, Ok(()), "op {}: {:?} (to {})", i, op, to);
                self.model.compacted = self.model.compacted.max(to);
            }
            Op::CompactFuture => {
                let to = self.model.revision + 1;
                let got = self.store().compact(to).map_err(fail);
                let want = Err(Fail::Future { requested: to, current: self.model.revision });
                prop_assert_eq!(got, want, "op {}: {:?}", i, op);
            }
            Op::Watch(p, seed) => {
                let after = match seed % 4 {
                    0 => self.model.compacted,
                    _ => Revision::from(*seed) % (self.model.revision + 2),
                };
                self.check_watch(PREFIXES[*p], after)?;
            }
            Op::WatchAcrossCompaction { prefix, after, to, read_first } => {
                let (compacted, current) = (self.model.compacted, self.model.revision);
                let after = compacted + Revision::from(*after) % (current - compacted + 1);
                // Mostly past the watch's start: somewhere in `after..=current`.
                let to = after + Revision::from(*to) % (current - after + 1);
                self.check_watch_across_compaction(PREFIXES[*prefix], after, to, *read_first)?;
            }
            Op::Reopen => self.reopen()?,
        }
        prop_assert_eq!(self.store().current_revision(), self.model.revision, "after op {}", i);
        prop_assert_eq!(self.store().compacted_revision(), self.model.compacted, "after op {}", i);
        Ok(())
    }

    /// Every prefix listed at every revision up to one past the current one.
    fn check_all_lists_at(&self) -> Result<(), TestCaseError> {
        for prefix in PREFIXES {
            for revision in 0..=self.model.revision + 1 {
                self.check_list_at(prefix, None, revision)?;
                self.check_list_at(prefix, Some(2), revision)?;
            }
        }
        Ok(())
    }

    /// Every prefix watched from every revision up to one past the current one.
    fn check_all_watches(&self) -> Result<(), TestCaseError> {
        for prefix in PREFIXES {
            for after in 0..=self.model.revision + 1 {
                self.check_watch(prefix, after)?;
            }
        }
        Ok(())
    }
}

/// `PROPTEST_CASES` from the environment, for longer runs; `default` otherwise.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(default)
}

fn run_sequence(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Harness::new();
    prop_assert_eq!(h.store().current_revision(), 0);
    for (i, op) in ops.iter().enumerate() {
        h.step(i, op)?;
    }
    // The final state, listed whole and page by page.
    for prefix in PREFIXES {
        h.check_list(prefix, None)?;
        h.check_list(prefix, Some(2))?;
    }
    h.check_all_watches()?;
    h.check_all_lists_at()?;
    // And all of it survives a reopen.
    h.reopen()?;
    prop_assert_eq!(h.store().current_revision(), h.model.revision);
    prop_assert_eq!(h.store().compacted_revision(), h.model.compacted);
    h.check_list("", None)?;
    h.check_all_watches()?;
    h.check_all_lists_at()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(32)))]

    #[test]
    fn sequential_operations_match_the_model(ops in prop::collection::vec(op_strategy(), 1..60)) {
        run_sequence(&ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Concurrent writers and watchers
// ---------------------------------------------------------------------------------------------

/// Overlapping keys for the writers; "/c/x" and "/c/xy/0" are outside the sub-prefix "/c/x/".
const CONCURRENT_KEYS: [&str; 8] =
    ["/c/x/0", "/c/x/1", "/c/x/2", "/c/x", "/c/xy/0", "/c/y/0", "/c/y/1", "/d/0"];
const SUB_PREFIX: &str = "/c/x/";
const WRITERS: u64 = 4;
const OPS_PER_WRITER: usize = 50;
const CONCURRENT_ROUNDS: u64 = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    Create,
    Update,
    Delete,
}

/// One write a writer made, with the store's revision just before it started and just after it
/// returned.
#[derive(Debug)]
struct WriteRecord {
    writer: u64,
    kind: WriteKind,
    key: &'static str,
    value: Option<Bytes>,
    expected: Option<Revision>,
    before: Revision,
    after: Revision,
    result: Result<Object, Fail>,
}

/// One read a writer made, bracketed the same way.
#[derive(Debug)]
struct ReadRecord {
    key: &'static str,
    before: Revision,
    after: Revision,
    result: Result<Option<Object>, Fail>,
}

fn run_writer(store: &SledStore, seed: u64, writer: u64) -> (Vec<WriteRecord>, Vec<ReadRecord>) {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(writer));
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    // The last revision this writer saw for each key: fresh after its own reads, stale later.
    let mut seen: HashMap<&'static str, Revision> = HashMap::new();
    for i in 0..OPS_PER_WRITER {
        let key = CONCURRENT_KEYS[rng.random_range(0..CONCURRENT_KEYS.len())];
        let value = Bytes::from(format!("w{writer}-{i}").into_bytes());
        let choice = rng.random_range(0..10);
        let read_first = choice < 5;
        let mut current = None;
        if read_first {
            let before = store.current_revision();
            let result = store.get(key).map_err(fail);
            let after = store.current_revision();
            if let Ok(object) = &result {
                current = object.clone();
                match object {
                    Some(o) => seen.insert(key, o.mod_revision),
                    None => seen.remove(key),
                };
            }
            reads.push(ReadRecord { key, before, after, result });
        }
        let (kind, value, expected) = match (choice, &current) {
            // Read, then write conditionally on what was read.
            (0..=4, None) => (WriteKind::Create, Some(value), None),
            (0..=2, Some(o)) => (WriteKind::Update, Some(value), Some(o.mod_revision)),
            (3..=4, Some(o)) => (WriteKind::Delete, None, Some(o.mod_revision)),
            // Blind writes, some on revisions seen long ago.
            (5..=6, _) => (WriteKind::Create, Some(value), None),
            (7, _) => (WriteKind::Update, Some(value), seen.get(key).copied()),
            (8, _) => (WriteKind::Update, Some(value), None),
            _ => (WriteKind::Delete, None, seen.get(key).copied()),
        };
        let before = store.current_revision();
        let result = match kind {
            WriteKind::Create => store.create(key, value.clone().expect("a value")),
            WriteKind::Update => store.update(key, value.clone().expect("a value"), expected),
            WriteKind::Delete => store.delete(key, expected),
        }
        .map_err(fail);
        let after = store.current_revision();
        if let Ok(o) = &result {
            match kind {
                WriteKind::Delete => seen.remove(key),
                _ => seen.insert(key, o.mod_revision),
            };
        }
        writes.push(WriteRecord { writer, kind, key, value, expected, before, after, result });
    }
    (writes, reads)
}

/// Follow a watch until it ends; the events and the error that ended it.
fn drain(mut watch: Watch) -> (Vec<Event>, Option<Fail>) {
    let mut events = Vec::new();
    loop {
        match watch.blocking_next() {
            Some(Ok(event)) => events.push(Event::clone(&event)),
            Some(Err(e)) => {
                let after = watch.blocking_next().map(|x| x.map(|e| e.revision).map_err(fail));
                let end = match after {
                    None => fail(e),
                    Some(more) => Fail::Other(format!("{e} was followed by {more:?}")),
                };
                return (events, Some(end));
            }
            None => return (events, None),
        }
    }
}

/// The history the full watcher saw: every key's states, by revision.
struct History {
    events: Vec<Event>,
    states: HashMap<String, Vec<(Revision, Option<Object>)>>,
    final_state: BTreeMap<String, Object>,
}

impl History {
    /// Replay `events` (which must be revisions `1..=n`) onto an empty map, checking that each
    /// event is consistent with the state before it.
    fn replay(events: Vec<Event>) -> Result<History, String> {
        let mut state: BTreeMap<String, Object> = BTreeMap::new();
        let mut states: HashMap<String, Vec<(Revision, Option<Object>)>> = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            if e.revision != i as Revision + 1 {
                return Err(format!("event {i} has revision {}, not {}", e.revision, i + 1));
            }
            let before = state.get(&e.key);
            let consistent = match (e.kind, before) {
                (EventKind::Created, None) => {
                    e.create_revision == e.revision && e.prev_value.is_none()
                }
                (EventKind::Modified, Some(b)) => {
                    e.create_revision == b.create_revision
                        && e.prev_value.as_ref() == Some(&b.value)
                }
                (EventKind::Deleted, Some(b)) => {
                    e.create_revision == b.create_revision
                        && e.value == b.value
                        && e.prev_value.is_none()
                }
                _ => false,
            };
            if !consistent {
                return Err(format!("event {e:?} does not follow from {before:?}"));
            }
            let after = match e.kind {
                EventKind::Deleted => {
                    state.remove(&e.key);
                    None
                }
                _ => {
                    state.insert(e.key.clone(), e.object());
                    Some(e.object())
                }
            };
            states.entry(e.key.clone()).or_default().push((e.revision, after));
        }
        Ok(History { events, states, final_state: state })
    }

    fn state_at(&self, key: &str, revision: Revision) -> Option<Object> {
        let transitions = self.states.get(key)?;
        let i = transitions.partition_point(|(r, _)| *r <= revision);
        i.checked_sub(1).and_then(|i| transitions[i].1.clone())
    }

    /// Whether the key was in a state satisfying `pred` at some revision in `lo..=hi`.
    fn some_state(
        &self,
        key: &str,
        lo: Revision,
        hi: Revision,
        pred: impl Fn(&Option<Object>) -> bool,
    ) -> bool {
        if pred(&self.state_at(key, lo)) {
            return true;
        }
        self.states.get(key).is_some_and(|transitions| {
            transitions.iter().any(|(r, s)| *r > lo && *r <= hi && pred(s))
        })
    }
}

/// How a round's writes went.
#[derive(Debug, Default)]
struct Tally {
    acknowledged: usize,
    conflicts: usize,
    not_found: usize,
    already_exists: usize,
    reads: usize,
}

fn check_concurrent_round(seed: u64) -> Tally {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open_new(&dir.path().join("store"), Options::create()));
    let full = store.watch("", 0).expect("watch everything");
    let sub = store.watch(SUB_PREFIX, 0).expect("watch a sub-prefix");
    let full = thread::spawn(move || drain(full));
    let sub = thread::spawn(move || drain(sub));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            thread::spawn(move || run_writer(&store, seed, w))
        })
        .collect();
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for w in writers {
        let (ws, rs) = w.join().expect("writer panicked");
        writes.extend(ws);
        reads.extend(rs);
    }
    let revision = store.current_revision();
    let listed = store.list("", &ListOptions::default()).expect("final list");
    assert_eq!(listed.revision, revision, "seed {seed}");
    assert!(listed.continue_token.is_none(), "seed {seed}");
    let store = Arc::try_unwrap(store).expect("only this thread holds the store");
    drop(store);
    let (full, full_end) = full.join().expect("watcher panicked");
    let (sub, sub_end) = sub.join().expect("watcher panicked");
    assert_eq!(full_end, Some(Fail::Closed), "seed {seed}: the full watch ended badly");
    assert_eq!(sub_end, Some(Fail::Closed), "seed {seed}: the sub-prefix watch ended badly");

    // The full watch saw every revision, once, in order, and they explain the final contents.
    let revisions: Vec<Revision> = full.iter().map(|e| e.revision).collect();
    assert_eq!(revisions, (1..=revision).collect::<Vec<_>>(), "seed {seed}: full watch revisions");
    let history = History::replay(full).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let final_state: Vec<Object> = history.final_state.values().cloned().collect();
    assert_eq!(listed.items, final_state, "seed {seed}: final contents vs replayed events");

    // The sub-prefix watch saw exactly the full one's events under its prefix.
    let filtered: Vec<&Event> =
        history.events.iter().filter(|e| e.key.starts_with(SUB_PREFIX)).collect();
    assert_eq!(sub.iter().collect::<Vec<_>>(), filtered, "seed {seed}: sub-prefix watch");

    // Every acknowledged write is one event; every error is explained by some state the key had.
    let mut acknowledged = Vec::new();
    let mut tally = Tally { reads: reads.len(), ..Tally::default() };
    let mut last_by_writer: HashMap<u64, Revision> = HashMap::new();
    for w in &writes {
        let ctx = || format!("seed {seed}: {w:?}");
        match &w.result {
            Ok(o) => {
                let r = o.mod_revision;
                assert!(w.before < r && r <= w.after, "{}: revision outside the call", ctx());
                let previous = last_by_writer.insert(w.writer, r).unwrap_or(0);
                assert!(previous < r, "{}: a writer's revisions went backwards", ctx());
                let event = &history.events[r as usize - 1];
                let kind = match w.kind {
                    WriteKind::Create => EventKind::Created,
                    WriteKind::Update => EventKind::Modified,
                    WriteKind::Delete => EventKind::Deleted,
                };
                assert_eq!((event.kind, &event.key), (kind, &w.key.to_owned()), "{}", ctx());
                assert_eq!(
                    &event.object(),
                    o,
                    "{}: the event is not the acknowledged object",
                    ctx()
                );
                if let Some(v) = &w.value {
                    assert_eq!(&o.value, v, "{}: acknowledged a different value", ctx());
                }
                if let Some(expected) = w.expected {
                    let prior = history.state_at(w.key, r - 1).map(|p| p.mod_revision);
                    assert_eq!(prior, Some(expected), "{}: precondition did not hold", ctx());
                }
                acknowledged.push(r);
            }
            Err(Fail::NotFound(k)) if w.kind != WriteKind::Create && k == w.key => {
                let absent = history.some_state(w.key, w.before, revision, |s| s.is_none());
                assert!(absent, "{}: NotFound, but the key always existed", ctx());
                tally.not_found += 1;
            }
            Err(Fail::AlreadyExists(k)) if w.kind == WriteKind::Create && k == w.key => {
                let present = history.some_state(w.key, w.before, revision, |s| s.is_some());
                assert!(present, "{}: AlreadyExists, but the key never existed", ctx());
                tally.already_exists += 1;
            }
            Err(Fail::Conflict { key, expected, actual })
                if w.kind != WriteKind::Create && key == w.key && Some(*expected) == w.expected =>
            {
                assert_ne!(expected, actual, "{}", ctx());
                let at = |s: &Option<Object>| s.as_ref().is_some_and(|o| o.mod_revision == *actual);
                assert!(
                    history.some_state(w.key, w.before, revision, at),
                    "{}: no such revision",
                    ctx()
                );
                tally.conflicts += 1;
            }
            Err(other) => panic!("{}: unexpected error {other:?}", ctx()),
        }
    }
    acknowledged.sort_unstable();
    assert_eq!(
        acknowledged,
        (1..=revision).collect::<Vec<_>>(),
        "seed {seed}: acknowledged writes"
    );
    tally.acknowledged = acknowledged.len();

    // Every read saw the key as it was at some revision while the read was in flight.
    for r in &reads {
        let got = r.result.clone().unwrap_or_else(|e| panic!("seed {seed}: {r:?}: {e:?}"));
        let seen = history.some_state(r.key, r.before, r.after, |s| *s == got);
        assert!(seen, "seed {seed}: {r:?} is no state the key had during the read");
    }
    tally
}

#[test]
fn concurrent_writers_and_watchers_agree() {
    let tallies: Vec<Tally> = (0..CONCURRENT_ROUNDS).map(check_concurrent_round).collect();
    // The rounds must have raced (some conditional writes lost) and exercised every path.
    let sum = |f: fn(&Tally) -> usize| tallies.iter().map(f).sum::<usize>();
    assert!(sum(|t| t.conflicts) > 0, "no writer ever saw a Conflict: {tallies:?}");
    assert!(sum(|t| t.not_found) > 0, "no writer ever saw NotFound: {tallies:?}");
    assert!(sum(|t| t.already_exists) > 0, "no writer ever saw AlreadyExists: {tallies:?}");
    assert!(sum(|t| t.reads) > 0, "no writer ever read: {tallies:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. Pagination under concurrent writes
// ---------------------------------------------------------------------------------------------

const PAGE_PREFIX: &str = "/p/";
/// Keys `/p/k0000` to `/p/k0599`: even ones are stable, odd ones churn.
const PAGE_KEYS: usize = 600;
const PAGE_LIMIT: usize = 7;

fn page_key(i: usize) -> String {
    format!("{PAGE_PREFIX}k{i:04}")
}

/// Keep creating, updating and deleting odd keys until told to stop; the writes made.
fn churn(store: &SledStore, stop: &AtomicBool, writes: &AtomicU64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(7);
    while !stop.load(Ordering::Relaxed) {
        let key = page_key(rng.random_range(0..PAGE_KEYS / 2) * 2 + 1);
        let value = Bytes::from(format!("churn-{}", writes.load(Ordering::Relaxed)).into_bytes());
        // The only writer of these keys, so every write must succeed.
        let result = match store.get(&key).map_err(|e| format!("churn read of {key}: {e}"))? {
            None => store.create(&key, value),
            Some(o) if rng.random_bool(0.5) => store.update(&key, value, Some(o.mod_revision)),
            Some(o) => store.delete(&key, Some(o.mod_revision)),
        };
        result.map_err(|e| format!("churn write to {key}: {e}"))?;
        writes.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[test]
fn pagination_is_stable_under_concurrent_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open_new(&dir.path().join("store"), Options::create()));
    // Neighbours outside the prefix, before and after it.
    for key in ["/p", "/o/k0000", "/pa/k0000", "/q/k0000"] {
        store.create(key, Bytes::from_static(b"outside")).expect("create a neighbour");
    }
    // The stable keys, and every fourth churn key, written from four threads.
    let creators: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            thread::spawn(move || {
                let mut stable = Vec::new();
                for i in (t..PAGE_KEYS).step_by(4) {
                    if i % 2 == 0 || i % 4 == 1 {
                        let o =
                            store.create(&page_key(i), Bytes::from(format!("v{i}").into_bytes()));
                        let o = o.expect("create");
                        if i % 2 == 0 {
                            stable.push(o);
                        }
                    }
                }
                stable
            })
        })
        .collect();
    let mut stable: Vec<Object> =
        creators.into_iter().flat_map(|c| c.join().expect("creator panicked")).collect();
    stable.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(stable.len(), PAGE_KEYS / 2);

    let stop = Arc::new(AtomicBool::new(false));
    let churn_writes = Arc::new(AtomicU64::new(0));
    let churner = {
        let (store, stop, writes) = (store.clone(), stop.clone(), churn_writes.clone());
        thread::spawn(move || churn(&store, &stop, &writes))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while churn_writes.load(Ordering::Relaxed) < 5 {
        assert!(Instant::now() < deadline, "the churn thread does not write");
        thread::sleep(Duration::from_millis(1));
    }

    let mut passes = Vec::new();
    for pass in 0..3 {
        let writes_before = churn_writes.load(Ordering::Relaxed);
        let mut pages = Vec::new();
        let mut token = None;
        loop {
            let options = ListOptions {
                limit: Some(PAGE_LIMIT),
                continue_token: token.take(),
                ..ListOptions::default()
            };
            let page = store.list(PAGE_PREFIX, &options).expect("list a page");
            token = page.continue_token.clone();
            pages.push(page);
            if token.is_none() {
                break;
            }
            assert!(pages.len() <= PAGE_KEYS, "pass {pass}: the pagination does not end");
            // At least one churn write lands between every two pages.
            let seen = churn_writes.load(Ordering::Relaxed);
            while churn_writes.load(Ordering::Relaxed) == seen {
                assert!(Instant::now() < deadline, "the churn thread stopped writing");
                thread::sleep(Duration::from_micros(200));
            }
        }
        let churned = churn_writes.load(Ordering::Relaxed) - writes_before;
        assert!(
            churned >= pages.len() as u64 - 1,
            "pass {pass}: {churned} writes during {} pages",
            pages.len()
        );

        let first = pages[0].revision;
        for (i, page) in pages.iter().enumerate() {
            assert_eq!(page.revision, first, "pass {pass}: page {i} revision");
            let full = page.continue_token.is_some();
            assert!(
                if full { page.items.len() == PAGE_LIMIT } else { page.items.len() <= PAGE_LIMIT },
                "pass {pass}: page {i} of {} has {} items",
                pages.len(),
                page.items.len()
            );
        }
        let items: Vec<&Object> = pages.iter().flat_map(|p| &p.items).collect();
        for pair in items.windows(2) {
            assert!(pair[0].key < pair[1].key, "pass {pass}: {} then {}", pair[0].key, pair[1].key);
        }
        for o in &items {
            assert!(o.key.starts_with(PAGE_PREFIX), "pass {pass}: {} listed", o.key);
        }
        let listed_stable: Vec<Object> = items
            .iter()
            .filter(|o| o.key[PAGE_PREFIX.len() + 1..].parse::<usize>().expect("a number") % 2 == 0)
            .map(|o| Object::clone(o))
            .collect();
        assert_eq!(listed_stable, stable, "pass {pass}: the stable keys, each once, in order");
        passes.push((first, items.into_iter().cloned().collect::<Vec<Object>>()));
    }
    stop.store(true, Ordering::Relaxed);
    churner.join().expect("churn panicked").expect("churn writes all succeed");

    // Each pass is exactly the snapshot at its first page's revision: churned keys included as
    // they were then, whatever happened to them while the pages were read. What they were then
    // comes from the history, replayed by a watch.
    let mut replay = store.watch("", 0).expect("replay the whole history");
    let events = take_events(&mut replay, store.current_revision() as usize).expect("history");
    let history = History::replay(events).expect("a consistent history");
    let mut keys: Vec<&String> =
        history.states.keys().filter(|k| k.starts_with(PAGE_PREFIX)).collect();
    keys.sort();
    for (pass, (revision, items)) in passes.iter().enumerate() {
        let snapshot: Vec<Object> =
            keys.iter().filter_map(|k| history.state_at(k, *revision)).collect();
        assert!(
            snapshot.len() > stable.len(),
            "pass {pass}: some churned keys existed at revision {revision}"
        );
        assert_eq!(items, &snapshot, "pass {pass}: the pages against the snapshot at {revision}");
    }

    // A continue token lives as long as its revision is not compacted.
    let first_page = |store: &SledStore| {
        let page = store
            .list(PAGE_PREFIX, &ListOptions { limit: Some(PAGE_LIMIT), ..ListOptions::default() })
            .expect("first page");
        (page.revision, page.continue_token.expect("more pages"))
    };
    let (revision, token) = first_page(&store);
    let next = |token: &str| ListOptions {
        limit: Some(PAGE_LIMIT),
        continue_token: Some(token.into()),
        ..ListOptions::default()
    };
    store.compact(revision).expect("compact to the token's revision");
    let page =
        store.list(PAGE_PREFIX, &next(&token)).expect("the token's revision is still available");
    assert_eq!(page.revision, revision);
    let all = store.list(PAGE_PREFIX, &ListOptions::default()).expect("list all");
    assert_eq!(page.items[..], all.items[PAGE_LIMIT..2 * PAGE_LIMIT]);
    store.update(&stable[0].key, Bytes::from_static(b"later"), None).expect("update");
    store.compact(store.current_revision()).expect("compact past the token");
    assert_eq!(
        store.list(PAGE_PREFIX, &next(&token)).map_err(fail),
        Err(Fail::Expired { requested: revision, oldest_available: revision + 1 }),
    );
    // Tokens that are not this listing's.
    let (_, fresh) = first_page(&store);
    for (prefix, bad) in
        [(PAGE_PREFIX, "garbage!"), (PAGE_PREFIX, "YzE6MTI"), ("/o/", fresh.as_str())]
    {
        assert_eq!(
            store.list(prefix, &next(bad)).map_err(fail),
            Err(Fail::InvalidContinue),
            "token {bad:?} for {prefix:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 4. A slow watcher
// ---------------------------------------------------------------------------------------------

#[test]
fn a_slow_watcher_is_ended_without_hurting_anyone_else() {
    const BUFFER: usize = 8;
    const WRITES: u64 = 50;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options { watch_buffer: BUFFER, ..Options::create() };
    let store = Arc::new(open_new(&dir.path().join("store"), options));
    let mut slow = store.watch("", 0).expect("slow watch");
    let fast = store.watch("", 0).expect("fast watch");
    let fast = thread::spawn(move || {
        let mut fast = fast;
        let deadline = Instant::now() + Duration::from_secs(30);
        (0..WRITES).map(|_| poll_next(&mut fast, deadline)).collect::<Vec<_>>()
    });
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let store = store.clone();
            thread::spawn(move || {
                (0..WRITES / 2)
                    .map(|i| {
                        store.create(&format!("/s/{w}/{i}"), Bytes::from_static(b"v")).map_err(fail)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for w in writers {
        for result in w.join().expect("writer panicked") {
            assert!(result.is_ok(), "a write failed: {result:?}");
        }
    }
    assert_eq!(store.current_revision(), WRITES);

    // The consumed watcher saw every write, in order.
    let seen: Vec<Polled> = fast.join().expect("fast watcher panicked");
    let revisions: Vec<Option<Revision>> = seen
        .iter()
        .map(|p| match p {
            Polled::Event(e) => Some(e.revision),
            _ => None,
        })
        .collect();
    assert_eq!(revisions, (1..=WRITES).map(Some).collect::<Vec<_>>(), "fast watcher: {seen:?}");

    // The slow one gets what its buffer held, then WatcherTooSlow, then nothing.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut delivered = Vec::new();
    let end = loop {
        match poll_next(&mut slow, deadline) {
            Polled::Event(e) => delivered.push(e.revision),
            other => break other,
        }
    };
    assert_eq!(delivered, (1..=BUFFER as Revision).collect::<Vec<_>>(), "slow watcher");
    assert_eq!(end, Polled::Err(Fail::TooSlow { last_delivered: BUFFER as Revision }));
    assert!(slow.is_done());
    assert!(slow.try_next().is_none(), "an ended watch yielded more");
    assert!(slow.blocking_next().is_none(), "an ended watch yielded more");

    // Replaying the same history from the log is not limited by the buffer, and the store still
    // serves live watchers.
    let mut replay = store.watch("", 0).expect("replay watch");
    let events = take_events(&mut replay, WRITES as usize).expect("a replay of every write");
    assert_eq!(events.last().map(|e| e.revision), Some(WRITES));
    let o = store.create("/s/after", Bytes::from_static(b"v")).expect("write after");
    let live = take_events(&mut replay, 1).expect("a live event after the replay");
    assert_eq!(live[0].object(), o);
}
