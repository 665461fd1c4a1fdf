//! Behaviour of the sled store that a caller relies on: errors on open, write semantics, watch
//! edge cases and the history window. Randomised checks against a model live in `model.rs`, kill -9
//! checks in `crash.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_store::{Error, EventKind, HistoryWindow, ListOptions, Options, SledStore, Store};

fn open_new(dir: &Path) -> SledStore {
    SledStore::open(dir.join("store"), Options::create()).expect("open a new store")
}

fn v(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
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
    let mut options = ListOptions { limit: Some(3), continue_token: None };
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
    let page =
        store.list("/pods/a/", &ListOptions { limit: Some(1), continue_token: None }).unwrap();
    let foreign = ListOptions { limit: None, continue_token: page.continue_token };
    assert!(matches!(store.list("/pods/b/", &foreign), Err(Error::InvalidContinue { .. })));
    // `/pods/` must not match `/podsx/`.
    assert_eq!(store.list("/pods/", &ListOptions::default()).unwrap().items.len(), 10);
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
    let page = store.list("", &ListOptions { limit: Some(1), continue_token: None }).unwrap();
    for i in 20..30 {
        store.create(&format!("/k{i}"), v("x")).unwrap();
    }
    eventually("compaction past the token", || store.compacted_revision() > page.revision);
    let next = ListOptions { limit: Some(1), continue_token: page.continue_token };
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
