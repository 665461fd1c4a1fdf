//! `Store::create_all`: several creates as one write. They get consecutive revisions, their events
//! come in order, they are made durable by one commit (one write-ahead log record, one sync), and
//! either all of them are written or none. Kill -9 checks of a batch are in `crash.rs`.

use std::path::Path;

use bytes::Bytes;
use carrel_store::{
    CommitStats, Error, EventKind, ListOptions, Options, Quota, QuotaResource, SledStore, Store,
};

fn open(dir: &Path) -> SledStore {
    SledStore::open(dir.join("store"), Options::create()).expect("open the store")
}

fn items(prefix: &str, n: usize) -> Vec<(String, Bytes)> {
    (0..n).map(|i| (format!("{prefix}/{i:02}"), Bytes::from(format!("value {i}")))).collect()
}

fn keys(store: &SledStore) -> Vec<String> {
    store.list("", &ListOptions::default()).unwrap().items.into_iter().map(|o| o.key).collect()
}

#[test]
fn a_batch_gets_consecutive_revisions_and_its_events_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.create("/before", Bytes::from_static(b"x")).unwrap();
    let mut watch = store.watch("", store.current_revision()).unwrap();

    let batch = items("/b", 5);
    let objects = store.create_all(batch.clone()).unwrap();
    let revisions: Vec<_> = objects.iter().map(|o| (o.mod_revision, o.create_revision)).collect();
    assert_eq!(revisions, vec![(2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]);
    assert_eq!(objects.iter().map(|o| (o.key.clone(), o.value.clone())).collect::<Vec<_>>(), batch);
    assert_eq!(store.current_revision(), 6);
    for object in &objects {
        assert_eq!(store.get(&object.key).unwrap().as_ref(), Some(object));
    }
    let events: Vec<_> = (0..5).map(|_| watch.blocking_next().unwrap().unwrap()).collect();
    for (event, object) in events.iter().zip(&objects) {
        assert_eq!(event.kind, EventKind::Created);
        assert_eq!(event.object(), *object);
    }
    assert_eq!(store.usage().objects, 6);
    // A list at a revision inside the batch sees its first part: the history is per revision.
    let at = ListOptions { revision: Some(3), ..ListOptions::default() };
    assert_eq!(store.list("/b/", &at).unwrap().items.len(), 2);
}

#[test]
fn a_batch_is_one_durable_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    assert_eq!(store.commit_stats(), CommitStats::default());

    // A lone writer's creates are one commit each…
    for (key, value) in items("/one", 3) {
        store.create(&key, value).unwrap();
    }
    assert_eq!(store.commit_stats(), CommitStats { commits: 3, revisions: 3 });

    // …a batch of twenty is one.
    store.create_all(items("/all", 20)).unwrap();
    assert_eq!(store.commit_stats(), CommitStats { commits: 4, revisions: 23 });

    // Nothing to write is no commit.
    assert!(store.create_all(Vec::new()).unwrap().is_empty());
    assert_eq!(store.commit_stats().commits, 4);
}

#[test]
fn a_batch_with_an_existing_or_repeated_key_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.create("/b/03", Bytes::from_static(b"mine")).unwrap();
    let (revision, stats) = (store.current_revision(), store.commit_stats());

    let err = store.create_all(items("/b", 5)).unwrap_err();
    assert!(matches!(&err, Error::AlreadyExists { key } if key == "/b/03"), "{err:?}");

    let mut repeated = items("/c", 2);
    repeated.push(repeated[0].clone());
    let err = store.create_all(repeated).unwrap_err();
    assert!(matches!(&err, Error::AlreadyExists { key } if key == "/c/00"), "{err:?}");

    let err = store.create_all(vec![("".into(), Bytes::new())]).unwrap_err();
    assert!(matches!(err, Error::InvalidKey { .. }), "{err:?}");

    assert_eq!(keys(&store), vec!["/b/03".to_owned()]);
    assert_eq!(store.get("/b/03").unwrap().unwrap().value, Bytes::from_static(b"mine"));
    assert_eq!((store.current_revision(), store.commit_stats()), (revision, stats));
    assert_eq!(store.usage().objects, 1);
}

#[test]
fn the_quota_is_checked_for_the_whole_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let store = open(tmp.path());
    store.create("/first", Bytes::from_static(b"x")).unwrap();
    store.set_quota(Quota { objects: 5, bytes: u64::MAX });
    let err = store.create_all(items("/b", 5)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::QuotaExceeded { resource: QuotaResource::Count, requested: 5, used: 1, .. }
        ),
        "{err:?}"
    );
    assert_eq!(keys(&store), vec!["/first".to_owned()]);
    assert_eq!(store.current_revision(), 1);
    store.create_all(items("/b", 4)).unwrap();
    assert_eq!(store.usage().objects, 5);
}

#[test]
fn a_batch_survives_reopen_with_its_revisions() {
    let tmp = tempfile::tempdir().unwrap();
    let written = {
        let store = open(tmp.path());
        store.create("/a", Bytes::from_static(b"1")).unwrap();
        let objects = store.create_all(items("/b", 7)).unwrap();
        store.create("/c", Bytes::from_static(b"3")).unwrap();
        objects
    };
    let store = open(tmp.path());
    assert_eq!(store.current_revision(), 9);
    assert_eq!(store.commit_stats(), CommitStats::default(), "counted since this open");
    for object in &written {
        assert_eq!(store.get(&object.key).unwrap().as_ref(), Some(object));
    }
    let mut watch = store.watch("", 0).unwrap();
    let revisions: Vec<_> =
        std::iter::from_fn(|| watch.try_next()).map(|e| e.unwrap().revision).collect();
    assert_eq!(revisions, (1..=9).collect::<Vec<_>>());
}

#[test]
fn concurrent_writes_never_split_a_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(open(tmp.path()));
    let singles = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                store.create(&format!("/s/{i:03}"), Bytes::from_static(b"s")).unwrap();
            }
        })
    };
    let batches: Vec<Vec<_>> =
        (0..20).map(|n| store.create_all(items(&format!("/b{n:02}"), 10)).unwrap()).collect();
    singles.join().unwrap();
    for batch in batches {
        let first = batch[0].mod_revision;
        let revisions: Vec<_> = batch.iter().map(|o| o.mod_revision).collect();
        assert_eq!(revisions, (first..first + 10).collect::<Vec<_>>());
    }
    assert_eq!(store.commit_stats().revisions, 400);
}
