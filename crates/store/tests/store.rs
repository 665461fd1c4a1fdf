//! Behaviour of the sled store that a caller relies on: errors on open, write semantics, watch
//! edge cases and the history window. Randomised checks against a model live in `model.rs`, kill -9
//! checks in `crash.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_store::{
    Error, EventKind, HistoryWindow, ListOptions, ListPage, Object, Options, Quota, QuotaResource,
    Revision, SledStore, Store, Usage,
};

fn open_new(dir: &Path) -> SledStore {
    SledStore::open(dir.join("store"), Options::create()).expect("open a new store")
}

fn v(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn limit(n: usize) -> ListOptions {
    ListOptions { limit: Some(n), ..ListOptions::default() }
}

fn at(revision: Revision) -> ListOptions {
    ListOptions { revision: Some(revision), ..ListOptions::default() }
}

/// Every page of a list, following its continue tokens.
fn all_pages(store: &SledStore, prefix: &str, first: ListOptions) -> Vec<ListPage> {
    let mut pages = vec![store.list(prefix, &first).unwrap()];
    while let Some(token) = pages.last().unwrap().continue_token.clone() {
        let next = ListOptions { continue_token: Some(token), ..first.clone() };
        pages.push(store.list(prefix, &next).unwrap());
    }
    pages
}

/// Poll `cond` until it holds; the deadline only guards against a hang, it measures nothing.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_missing_directory_is_an_error_unless_creation_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("absent");
    match SledStore::open(&path, Options::default()) {
        Err(Error::Missing { path: p }) => assert_eq!(p, path),
        other => panic!("expected Missing, got {other:?}"),
    }
    assert!(!path.exists(), "opening without create must not create the directory");
    let store = SledStore::open(&path, Options::create()).unwrap();
    assert_eq!(store.current_revision(), 0);
}

#[test]
fn a_file_where_the_directory_should_be_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("file");
    std::fs::write(&path, b"not a store").unwrap();
    assert!(matches!(SledStore::open(&path, Options::create()), Err(Error::Corrupt { .. })));
}

#[test]
fn a_second_open_of_the_same_directory_is_locked_out_until_the_first_closes() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open_new(tmp.path());
    first.create("/k", v("1")).unwrap();
    match SledStore::open(first.path(), Options::default()) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    let path = first.path().to_path_buf();
    drop(first);
    let again = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(again.get("/k").unwrap().unwrap().value, v("1"));
}

#[test]
fn an_open_waits_for_a_handle_of_this_process_that_is_closing() {
    let tmp = tempfile::tempdir().unwrap();
    let first = open_new(tmp.path());
    first.create("/k", v("1")).unwrap();
    let path = first.path().to_path_buf();
    let waiting = Options { lock_wait: Duration::from_secs(10), ..Options::default() };
    let closing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
    });
    // Opened as soon as the first handle has let go, not refused while it closes.
    let again = SledStore::open(&path, waiting.clone()).unwrap();
    closing.join().unwrap();
    assert_eq!(again.get("/k").unwrap().unwrap().value, v("1"));
    // Waiting is bounded: a handle that stays open is still refused.
    let short = Options { lock_wait: Duration::from_millis(50), ..Options::default() };
    match SledStore::open(&path, short) {
        Err(Error::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
}

#[test]
fn a_corrupt_database_is_a_clear_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let path = {
        let store = open_new(tmp.path());
        for i in 0..50 {
            store.create(&format!("/k{i}"), v("some value")).unwrap();
        }
        store.path().to_path_buf()
    };
    // Overwrite the log with garbage of the same length.
    let log = path.join("db");
    let len = std::fs::metadata(&log).unwrap().len() as usize;
    std::fs::write(&log, vec![0xA5u8; len]).unwrap();
    match SledStore::open(&path, Options::default()) {
        Err(Error::Corrupt { .. }) | Err(Error::Sled(_)) | Err(Error::Io(_)) => {}
        Ok(store) => {
            // sled may treat a torn log as empty; then nothing may claim to be there.
            assert_eq!(store.list("", &ListOptions::default()).unwrap().items.len(), 0);
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }

    // A corrupt configuration file.
    let tmp2 = tempfile::tempdir().unwrap();
    let path2 = open_new(tmp2.path()).path().to_path_buf();
    std::fs::write(path2.join("conf"), b"garbage garbage garbage").unwrap();
    assert!(SledStore::open(&path2, Options::default()).is_err());
}

#[test]
fn a_sled_database_that_is_not_a_carrel_store_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("foreign");
    {
        let db = sled::open(&path).unwrap();
        db.insert("hello", "world").unwrap();
        db.flush().unwrap();
    }
    match SledStore::open(&path, Options::default()) {
        Err(Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("no Carrel layout"), "{detail}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn writes_carry_revisions_and_preconditions() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());

    let a = store.create("/pods/ns/a", v("a1")).unwrap();
    assert_eq!((a.create_revision, a.mod_revision), (1, 1));
    assert!(matches!(
        store.create("/pods/ns/a", v("again")),
        Err(Error::AlreadyExists { key }) if key == "/pods/ns/a"
    ));
    // A failed write consumes no revision.
    assert_eq!(store.current_revision(), 1);

    let b = store.create("/pods/ns/b", v("b1")).unwrap();
    assert_eq!(b.mod_revision, 2);
    let a2 = store.update("/pods/ns/a", v("a2"), Some(1)).unwrap();
    assert_eq!((a2.create_revision, a2.mod_revision), (1, 3));
    match store.update("/pods/ns/a", v("stale"), Some(1)) {
        Err(Error::Conflict { expected: 1, actual: 3, .. }) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
    let a3 = store.update("/pods/ns/a", v("a3"), None).unwrap();
    assert_eq!(a3.mod_revision, 4);
    assert!(matches!(store.update("/pods/ns/zz", v("x"), None), Err(Error::NotFound { .. })));
    assert!(matches!(store.delete("/pods/ns/a", Some(3)), Err(Error::Conflict { .. })));

    let gone = store.delete("/pods/ns/a", Some(4)).unwrap();
    assert_eq!(gone.value, v("a3"), "a deletion returns the object as it was");
    assert_eq!((gone.create_revision, gone.mod_revision), (1, 5));
    assert_eq!(store.get("/pods/ns/a").unwrap(), None);
    assert!(matches!(store.delete("/pods/ns/a", None), Err(Error::NotFound { .. })));
    assert_eq!(store.current_revision(), 5);

    let recreated = store.create("/pods/ns/a", v("new")).unwrap();
    assert_eq!((recreated.create_revision, recreated.mod_revision), (6, 6));
}

#[test]
fn bad_keys_and_oversized_values_are_refused_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = SledStore::open(
        tmp.path().join("s"),
        Options { max_value_bytes: 1024, ..Options::create() },
    )
    .unwrap();
    assert!(matches!(store.create("", v("x")), Err(Error::InvalidKey { .. })));
    assert!(matches!(store.create(&"k".repeat(5000), v("x")), Err(Error::InvalidKey { .. })));
    match store.create("/k", Bytes::from(vec![0u8; 1025])) {
        Err(Error::TooLarge { size: 1025, limit: 1024 }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
    store.create("/k", Bytes::from(vec![1u8; 1024])).unwrap();
    assert!(matches!(
        store.update("/k", Bytes::from(vec![0u8; 4096]), None),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(store.get("/k").unwrap().unwrap().value.len(), 1024);
    assert_eq!(store.current_revision(), 1);
}

#[test]
fn the_object_count_quota_refuses_creates_beyond_it_and_deletes_make_room() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    assert_eq!(store.quota(), Quota::UNLIMITED);
    store.set_quota(Quota { objects: 3, bytes: u64::MAX });
    for name in ["a", "b", "c"] {
        store.create(&format!("/k/{name}"), v("value")).unwrap();
    }
    match store.create("/k/d", v("value")) {
        Err(Error::QuotaExceeded {
            resource: QuotaResource::Count,
            requested: 1,
            used: 3,
            limited: 3,
        }) => {}
        other => panic!("expected QuotaExceeded on count, got {other:?}"),
    }
    assert!(store.get("/k/d").unwrap().is_none());
    assert_eq!(store.current_revision(), 3, "a refused write takes no revision");
    // Updates do not add objects.
    store.update("/k/a", v("other"), None).unwrap();
    store.delete("/k/b", None).unwrap();
    store.create("/k/d", v("value")).unwrap();
    assert_eq!(store.usage().objects, 3);
    // A quota lowered below what is held: nothing is lost, deletes still work, creates wait.
    store.set_quota(Quota { objects: 1, bytes: u64::MAX });
    assert!(matches!(store.create("/k/e", v("x")), Err(Error::QuotaExceeded { .. })));
    store.delete("/k/a", None).unwrap();
    store.delete("/k/c", None).unwrap();
    assert!(matches!(store.create("/k/e", v("x")), Err(Error::QuotaExceeded { .. })));
    store.delete("/k/d", None).unwrap();
    store.create("/k/e", v("x")).unwrap();
    assert_eq!(store.usage().objects, 1);
}

#[test]
fn the_bytes_quota_refuses_creates_and_growing_updates_beyond_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    // Each object counts its key and its value: "/k/a" + 96 bytes = 100.
    let hundred = Bytes::from(vec![7u8; 96]);
    store.set_quota(Quota { objects: u64::MAX, bytes: 250 });
    store.create("/k/a", hundred.clone()).unwrap();
    store.create("/k/b", hundred.clone()).unwrap();
    assert_eq!(store.usage(), Usage { objects: 2, bytes: 200 });
    match store.create("/k/c", hundred.clone()) {
        Err(Error::QuotaExceeded {
            resource: QuotaResource::Bytes,
            requested: 100,
            used: 200,
            limited: 250,
        }) => {}
        other => panic!("expected QuotaExceeded on bytes, got {other:?}"),
    }
    // Growing an object past the bound is refused; growing within it, or shrinking, is not.
    match store.update("/k/a", Bytes::from(vec![7u8; 150]), None) {
        Err(Error::QuotaExceeded { resource: QuotaResource::Bytes, requested: 54, .. }) => {}
        other => panic!("expected QuotaExceeded on bytes, got {other:?}"),
    }
    assert_eq!(store.get("/k/a").unwrap().unwrap().value, hundred);
    store.update("/k/a", Bytes::from(vec![7u8; 146]), None).unwrap();
    assert_eq!(store.usage().bytes, 250);
    // Marking an object for deletion may grow it, and is a step of a delete: never refused.
    store.update_to_delete("/k/a", Bytes::from(vec![7u8; 156]), None).unwrap();
    assert_eq!(store.usage().bytes, 260);
    store.update("/k/a", Bytes::from(vec![7u8; 146]), None).unwrap();
    store.set_quota(Quota { objects: u64::MAX, bytes: 100 });
    store.update("/k/a", Bytes::from(vec![7u8; 120]), None).unwrap();
    assert_eq!(store.usage().bytes, 224);
    store.delete("/k/a", None).unwrap();
    store.create("/k/c", v("")).unwrap_err();
    store.delete("/k/b", None).unwrap();
    store.create("/k/c", hundred).unwrap();
    assert_eq!(store.usage(), Usage { objects: 1, bytes: 100 });
}

#[test]
fn usage_is_counted_from_every_write_and_survives_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("store");
    let expected = {
        let store = SledStore::open(&path, Options::create()).unwrap();
        assert_eq!(store.usage(), Usage::default());
        for i in 0..50 {
            store.create(&format!("/k/{i:02}"), Bytes::from(vec![1u8; i])).unwrap();
        }
        for i in (0..50).step_by(3) {
            store.delete(&format!("/k/{i:02}"), None).unwrap();
        }
        for i in (1..50).step_by(3) {
            store.update(&format!("/k/{i:02}"), v("short"), None).unwrap();
        }
        // Compaction removes history, not objects.
        store.compact(store.current_revision()).unwrap();
        let listed = store.list("", &ListOptions::default()).unwrap().items;
        let counted = Usage {
            objects: listed.len() as u64,
            bytes: listed.iter().map(|o| Usage::bytes_of(&o.key, &o.value)).sum(),
        };
        assert_eq!(store.usage(), counted);
        counted
    };
    let store = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(store.usage(), expected);
    // The quota is the caller's to set again after a reopen; the counts it is checked against
    // are the ones recovered.
    assert_eq!(store.quota(), Quota::UNLIMITED);
    store.set_quota(Quota { objects: expected.objects, bytes: u64::MAX });
    assert!(matches!(store.create("/k/new", v("x")), Err(Error::QuotaExceeded { .. })));
}

#[test]
fn large_values_round_trip_across_reopen() {
    // Values above sled's inline limit go to its blob files, which the store syncs itself.
    let tmp = tempfile::tempdir().unwrap();
    let big: Bytes = (0..2_000_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
    let path = {
        let store = open_new(tmp.path());
        store.create("/big", big.clone()).unwrap();
        store.update("/big", big.slice(..300_000), None).unwrap();
        store.path().to_path_buf()
    };
    let store = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(store.get("/big").unwrap().unwrap().value, big.slice(..300_000));
    let mut watch = store.watch("/", 0).unwrap();
    let first = watch.blocking_next().unwrap().unwrap();
    assert_eq!(first.value, big);
    let second = watch.blocking_next().unwrap().unwrap();
    assert_eq!(second.prev_value.as_ref(), Some(&big));
}

#[test]
fn state_and_counters_survive_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let path = {
        let store = open_new(tmp.path());
        for i in 0..10 {
            store.create(&format!("/k/{i}"), v(&i.to_string())).unwrap();
        }
        store.delete("/k/3", None).unwrap();
        store.compact(4).unwrap();
        store.path().to_path_buf()
    };
    let store = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(store.current_revision(), 11);
    assert_eq!(store.compacted_revision(), 4);
    assert_eq!(store.list("/k/", &ListOptions::default()).unwrap().items.len(), 9);
    assert_eq!(store.create("/k/new", v("n")).unwrap().mod_revision, 12);
    assert!(store.watch("/", 3).unwrap_err().is_expired());
    let mut watch = store.watch("/", 4).unwrap();
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 5);
}

#[test]
fn list_pages_follow_continue_tokens_within_a_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    for ns in ["a", "b"] {
        for i in 0..5 {
            store.create(&format!("/pods/{ns}/p{i}"), v(ns)).unwrap();
        }
    }
    store.create("/podsx/a/p0", v("neighbour")).unwrap();

    let mut seen = Vec::new();
    let mut options = limit(3);
    let first_revision = store.current_revision();
    loop {
        let page = store.list("/pods/a/", &options).unwrap();
        assert_eq!(page.revision, first_revision);
        seen.extend(page.items.iter().map(|o| o.key.clone()));
        match page.continue_token {
            Some(t) => options.continue_token = Some(t),
            None => break,
        }
        // Writes between pages do not change the paginated list's revision.
        store.create(&format!("/other/{}", seen.len()), v("x")).unwrap();
    }
    let expected: Vec<_> = (0..5).map(|i| format!("/pods/a/p{i}")).collect();
    assert_eq!(seen, expected);

    // A token from one listing is refused for another.
    let page = store.list("/pods/a/", &limit(1)).unwrap();
    let foreign = ListOptions { continue_token: page.continue_token.clone(), ..Default::default() };
    assert!(matches!(store.list("/pods/b/", &foreign), Err(Error::InvalidContinue { .. })));
    // The token carries its revision: repeating it is fine, asking for another is refused.
    let same = ListOptions { revision: Some(page.revision), ..foreign.clone() };
    assert_eq!(store.list("/pods/a/", &same).unwrap().items[0].key, "/pods/a/p1");
    let other = ListOptions { revision: Some(page.revision - 1), ..foreign };
    assert!(matches!(store.list("/pods/a/", &other), Err(Error::InvalidContinue { .. })));
    // `/pods/` must not match `/podsx/`.
    assert_eq!(store.list("/pods/", &ListOptions::default()).unwrap().items.len(), 10);
}

#[test]
fn the_pages_of_a_list_are_one_snapshot_whatever_is_written_between_them() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    for i in 0..6 {
        store.create(&format!("/cm/k{i}"), v(&format!("old{i}"))).unwrap();
    }
    let before = store.list("/cm/", &ListOptions::default()).unwrap();
    let first = store.list("/cm/", &limit(2)).unwrap();
    assert_eq!(first.items[..], before.items[..2]);
    // Between pages: a later key updated, one deleted, one created, one deleted and recreated,
    // and an already returned one deleted.
    store.update("/cm/k3", v("new3"), None).unwrap();
    store.delete("/cm/k4", None).unwrap();
    store.create("/cm/k2a", v("born later")).unwrap();
    store.delete("/cm/k5", None).unwrap();
    store.create("/cm/k5", v("reborn")).unwrap();
    store.delete("/cm/k0", None).unwrap();
    let mut items = first.items.clone();
    let mut token = first.continue_token;
    while let Some(t) = token {
        let page =
            store.list("/cm/", &ListOptions { continue_token: Some(t), ..limit(2) }).unwrap();
        assert_eq!(page.revision, first.revision);
        items.extend(page.items);
        token = page.continue_token;
    }
    assert_eq!(items, before.items, "the pages show the state at the first page's revision");
    // A new list shows the new state.
    let now: Vec<(String, Bytes)> = store
        .list("/cm/", &ListOptions::default())
        .unwrap()
        .items
        .into_iter()
        .map(|o| (o.key, o.value))
        .collect();
    let want =
        [("k1", "old1"), ("k2", "old2"), ("k2a", "born later"), ("k3", "new3"), ("k5", "reborn")];
    let want: Vec<(String, Bytes)> = want.iter().map(|(k, x)| (format!("/cm/{k}"), v(x))).collect();
    assert_eq!(now, want);
}

#[test]
fn a_list_at_a_past_revision_is_what_a_list_then_returned() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    let mut then: Vec<(Revision, Vec<Object>)> = Vec::new();
    let mut record = |store: &SledStore| {
        let page = store.list("/pods/", &ListOptions::default()).unwrap();
        then.push((page.revision, page.items));
    };
    record(&store);
    store.create("/pods/a", v("a1")).unwrap();
    store.create("/pods/b", v("b1")).unwrap();
    store.create("/podsx/neighbour", v("n")).unwrap();
    store.create("/pods/c", v("c1")).unwrap();
    record(&store);
    store.update("/pods/a", v("a2"), None).unwrap();
    record(&store);
    store.delete("/pods/b", None).unwrap();
    store.create("/pods/d", v("d1")).unwrap();
    record(&store);
    store.update("/pods/c", v("c2"), None).unwrap();
    store.update("/pods/c", v("c3"), None).unwrap();
    store.delete("/pods/a", None).unwrap();
    store.create("/pods/a", v("a-again")).unwrap();
    record(&store);
    store.update("/podsx/neighbour", v("n2"), None).unwrap();
    record(&store);

    assert_eq!(then[1].1.len(), 3, "a, b and c at revision {}", then[1].0);
    // Each recorded state differs from the one before, except across the write outside the prefix.
    for pair in then[..5].windows(2) {
        assert_ne!(pair[0].1, pair[1].1, "revisions {} and {}", pair[0].0, pair[1].0);
    }
    assert_eq!(then[4].1, then[5].1);
    for (revision, items) in &then {
        let page = store.list("/pods/", &at(*revision)).unwrap();
        assert_eq!(page.revision, *revision);
        assert_eq!(&page.items, items, "list at {revision}");
        // Page by page too: the pages together are the same snapshot.
        let pages = all_pages(&store, "/pods/", ListOptions { limit: Some(1), ..at(*revision) });
        assert!(pages.iter().all(|p| p.revision == *revision));
        let paged: Vec<Object> = pages.into_iter().flat_map(|p| p.items).collect();
        assert_eq!(&paged, items, "paged list at {revision}");
    }
    // Revisions between the recorded ones too: b is deleted at 6, d created at 7.
    assert_eq!(then[2].0, 5);
    let page = store.list("/pods/", &at(5)).unwrap();
    let b = page.items.iter().find(|o| o.key == "/pods/b").expect("b before its deletion");
    assert_eq!((b.value.clone(), b.create_revision, b.mod_revision), (v("b1"), 2, 2));
    let keys = |page: ListPage| page.items.into_iter().map(|o| o.key).collect::<Vec<_>>();
    assert_eq!(keys(store.list("/pods/", &at(6)).unwrap()), ["/pods/a", "/pods/c"]);
    assert_eq!(keys(store.list("/pods/", &at(7)).unwrap()), ["/pods/a", "/pods/c", "/pods/d"]);
}

#[test]
fn a_past_state_is_rebuilt_even_when_the_write_that_made_it_is_compacted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    let a = store.create("/k/a", v("a1")).unwrap();
    let b = store.create("/k/b", v("b1")).unwrap();
    for i in 0..5 {
        store.create(&format!("/other/{i}"), v("x")).unwrap();
    }
    let quiet = store.current_revision();
    store.compact(quiet).unwrap();
    // The history now starts after the writes that made a and b; change both.
    store.update("/k/a", v("a2"), None).unwrap();
    store.delete("/k/b", None).unwrap();
    let page = store.list("/k/", &at(quiet)).unwrap();
    assert_eq!(page.items, vec![a, b], "values and revisions as written, before the compaction");
    // And so after a reopen, from the history on disk.
    let path = store.path().to_path_buf();
    drop(store);
    let store = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(store.list("/k/", &at(quiet)).unwrap().items, page.items);
}

#[test]
fn a_list_at_a_compacted_or_future_revision_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    for i in 0..6 {
        store.create(&format!("/k/{i}"), v("x")).unwrap();
    }
    store.compact(3).unwrap();
    match store.list("/k/", &at(2)) {
        Err(Error::Expired { requested: 2, oldest_available: 3 }) => {}
        other => panic!("expected Expired, got {other:?}"),
    }
    assert!(store.list("/k/", &at(2)).unwrap_err().is_expired());
    assert_eq!(store.list("/k/", &at(3)).unwrap().items.len(), 3, "the compacted revision itself");
    assert_eq!(store.list("/k/", &at(6)).unwrap().items.len(), 6, "the current revision");
    match store.list("/k/", &at(7)) {
        Err(Error::FutureRevision { requested: 7, current: 6 }) => {}
        other => panic!("expected FutureRevision, got {other:?}"),
    }
    // A paginated list at a revision that is compacted between its pages expires.
    let first = store.list("/k/", &ListOptions { limit: Some(2), ..at(4) }).unwrap();
    assert_eq!(first.revision, 4);
    store.compact(5).unwrap();
    let next = ListOptions { continue_token: first.continue_token, ..limit(2) };
    match store.list("/k/", &next) {
        Err(Error::Expired { requested: 4, oldest_available: 5 }) => {}
        other => panic!("expected Expired, got {other:?}"),
    }
}

/// A database as layout 1 wrote it: its log records lack the previous mod revision.
#[test]
fn a_layout_1_database_is_upgraded_and_its_old_history_expires_for_past_lists() {
    fn log_record_v1(
        kind: u8,
        create: u64,
        key: &str,
        prev: Option<&[u8]>,
        value: &[u8],
    ) -> Vec<u8> {
        let mut out = vec![1, kind];
        out.extend_from_slice(&0u64.to_be_bytes());
        out.extend_from_slice(&create.to_be_bytes());
        out.extend_from_slice(&(key.len() as u32).to_be_bytes());
        out.extend_from_slice(key.as_bytes());
        match prev {
            Some(p) => {
                out.extend_from_slice(&(p.len() as u32).to_be_bytes());
                out.extend_from_slice(p);
            }
            None => out.extend_from_slice(&u32::MAX.to_be_bytes()),
        }
        out.extend_from_slice(value);
        out
    }
    fn object_record(create: u64, modified: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![1];
        out.extend_from_slice(&create.to_be_bytes());
        out.extend_from_slice(&modified.to_be_bytes());
        out.extend_from_slice(value);
        out
    }
    fn log_key(revision: u64) -> Vec<u8> {
        let mut k = vec![b'l'];
        k.extend_from_slice(&revision.to_be_bytes());
        k
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("old");
    {
        // Revision 1 creates /k/a, 2 updates it.
        let db = sled::open(&path).unwrap();
        db.insert("mformat", &1u64.to_be_bytes()).unwrap();
        db.insert(log_key(1), log_record_v1(1, 1, "/k/a", None, b"a1")).unwrap();
        db.insert(log_key(2), log_record_v1(2, 1, "/k/a", Some(b"a1"), b"a2")).unwrap();
        db.insert("o/k/a", object_record(1, 2, b"a2")).unwrap();
        db.insert("mrevision", &2u64.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let store = SledStore::open(&path, Options::default()).unwrap();
    assert_eq!(store.current_revision(), 2);
    // Its history still replays.
    let mut watch = store.watch("", 0).unwrap();
    assert_eq!(watch.blocking_next().unwrap().unwrap().value, v("a1"));
    assert_eq!(watch.blocking_next().unwrap().unwrap().prev_value, Some(v("a1")));
    // Before revision 1 nothing needs rebuilding (a creation); at revision 1, /k/a's state
    // before the layout 1 update cannot be rebuilt.
    assert!(store.list("/k/", &at(0)).unwrap().items.is_empty());
    match store.list("/k/", &at(1)) {
        Err(Error::Expired { requested: 1, oldest_available: 2 }) => {}
        other => panic!("expected Expired, got {other:?}"),
    }
    // Writes from now on keep it.
    store.update("/k/a", v("a3"), None).unwrap();
    let at_2 = store.list("/k/", &at(2)).unwrap().items;
    assert_eq!((at_2[0].value.clone(), at_2[0].mod_revision), (v("a2"), 2));
    drop(store);
    // The layout was upgraded in place. (sled's threads may hold its lock a moment longer.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let db = loop {
        match sled::open(&path) {
            Ok(db) => break db,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => panic!("reopen with sled: {e}"),
        }
    };
    assert_eq!(db.get("mformat").unwrap().unwrap().as_ref(), &2u64.to_be_bytes());
}

#[test]
fn a_watch_delivers_kinds_values_and_previous_values() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    let mut watch = store.watch("/cm/", 0).unwrap();
    store.create("/cm/x", v("1")).unwrap();
    store.create("/other/y", v("ignored")).unwrap();
    store.update("/cm/x", v("2"), None).unwrap();
    store.delete("/cm/x", None).unwrap();

    let events: Vec<_> = (0..3).map(|_| watch.blocking_next().unwrap().unwrap()).collect();
    assert_eq!(
        events.iter().map(|e| (e.kind, e.revision)).collect::<Vec<_>>(),
        vec![(EventKind::Created, 1), (EventKind::Modified, 3), (EventKind::Deleted, 4)]
    );
    assert_eq!(events[1].prev_value, Some(v("1")));
    assert_eq!(events[2].value, v("2"), "a deletion carries the last value");
    assert_eq!(events[2].create_revision, 1);
    assert!(watch.try_next().is_none());
}

#[test]
fn a_watch_from_a_future_revision_starts_there() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    let mut watch = store.watch("", 2).unwrap();
    for i in 0..4 {
        store.create(&format!("/{i}"), v("x")).unwrap();
    }
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 3);
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 4);
}

#[test]
fn closing_the_store_ends_its_watches() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    store.create("/a", v("1")).unwrap();
    let mut watch = store.watch("", 0).unwrap();
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 1);
    drop(store);
    assert!(matches!(watch.blocking_next(), Some(Err(Error::Closed))));
    assert!(watch.blocking_next().is_none());
    assert!(watch.is_done());
}

#[test]
fn compacting_to_the_future_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    store.create("/a", v("1")).unwrap();
    assert!(matches!(store.compact(2), Err(Error::FutureRevision { requested: 2, current: 1 })));
    store.compact(1).unwrap();
    store.compact(1).unwrap();
    assert_eq!(store.compacted_revision(), 1);
}

#[test]
fn the_history_window_keeps_the_newest_events() {
    let tmp = tempfile::tempdir().unwrap();
    let options = Options {
        history: HistoryWindow { min_age: Duration::ZERO, min_events: 5 },
        compaction_interval: Duration::from_millis(10),
        ..Options::create()
    };
    let store = SledStore::open(tmp.path().join("s"), options).unwrap();
    for i in 0..20 {
        store.create(&format!("/k{i}"), v("x")).unwrap();
    }
    eventually("compaction to revision 15", || store.compacted_revision() == 15);
    match store.watch("", 10) {
        Err(Error::Expired { requested: 10, oldest_available: 15 }) => {}
        other => panic!("expected Expired, got {other:?}"),
    }
    let mut watch = store.watch("", 15).unwrap();
    let revisions: Vec<_> =
        (0..5).map(|_| watch.blocking_next().unwrap().unwrap().revision).collect();
    assert_eq!(revisions, vec![16, 17, 18, 19, 20]);
    // A continue token from before the window is expired too.
    let page = store.list("", &limit(1)).unwrap();
    for i in 20..30 {
        store.create(&format!("/k{i}"), v("x")).unwrap();
    }
    eventually("compaction past the token", || store.compacted_revision() > page.revision);
    let next = ListOptions { continue_token: page.continue_token, ..limit(1) };
    assert!(store.list("", &next).unwrap_err().is_expired());
}

#[test]
fn the_history_window_keeps_young_events_beyond_the_count() {
    let tmp = tempfile::tempdir().unwrap();
    let options = Options {
        history: HistoryWindow { min_age: Duration::from_secs(3600), min_events: 2 },
        compaction_interval: Duration::from_millis(5),
        ..Options::create()
    };
    let store = SledStore::open(tmp.path().join("s"), options).unwrap();
    for i in 0..10 {
        store.create(&format!("/k{i}"), v("x")).unwrap();
    }
    // Give the committer many housekeeping rounds; none may discard an hour-young event.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(store.compacted_revision(), 0);
    let mut watch = store.watch("", 0).unwrap();
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 1);
}

#[test]
fn a_watcher_whose_history_is_compacted_mid_replay_is_expired() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    for i in 0..600 {
        store.create(&format!("/k{i}"), v("x")).unwrap();
    }
    let mut watch = store.watch("", 0).unwrap();
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 1);
    store.compact(550).unwrap();
    // The replay reads the log in chunks; the chunk after the compaction finds its history gone.
    let mut last = 1;
    loop {
        match watch.blocking_next() {
            Some(Ok(e)) => {
                assert_eq!(e.revision, last + 1, "no gaps");
                last = e.revision;
            }
            Some(Err(e)) => {
                assert!(e.is_expired(), "{e:?}");
                break;
            }
            None => panic!("the watch ended without an error"),
        }
    }
    assert!(last < 550);
}

#[test]
fn a_quiet_watch_makes_progress_with_the_store_and_never_past_what_it_holds() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open_new(tmp.path());
    let mut watch = store.watch("/cm/", 0).unwrap();
    assert!(watch.try_next().is_none());
    store.create("/other/a", v("1")).unwrap();
    store.create("/other/b", v("2")).unwrap();
    // Nothing of its prefix happened: it has seen everything up to the store's revision.
    let deadline = Instant::now() + Duration::from_secs(5);
    while watch.progress() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(watch.progress(), 2);
    // An event of its prefix not yet taken holds it back, until it is delivered.
    store.create("/cm/x", v("3")).unwrap();
    store.create("/other/c", v("4")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(watch.progress(), 2, "not past an event still waiting");
    assert_eq!(watch.blocking_next().unwrap().unwrap().revision, 3);
    let deadline = Instant::now() + Duration::from_secs(5);
    while watch.progress() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(watch.progress(), 4);
}
