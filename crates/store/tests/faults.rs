//! Injected I/O errors on the write and checkpoint paths (`carrel_store::failpoints`).
//!
//! Passing errors (nothing reached the disk: `EMFILE`, `ENFILE`, `ENOMEM`, `EINTR`, `EAGAIN`,
//! `ENOSPC` on a write that wrote nothing, any failed open) are retried and never fail the store;
//! writes resume once they stop, with nothing lost. Uncertain errors (a failed sync, a write that
//! landed in part, a failed sled flush) fail the store: nothing unacknowledged is then reported
//! durable, nothing acknowledged is lost after reopening, and the store can be reopened in place.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_store::failpoints::{self, Fault, FaultPoint};
use carrel_store::{
    Error, EventKind, Health, ListOptions, Options, Retry, Revision, SledStore, Store,
};

const PASSING: [(i32, &str); 6] = [
    (libc::EMFILE, "EMFILE"),
    (libc::ENFILE, "ENFILE"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EINTR, "EINTR"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOSPC, "ENOSPC"),
];

/// Retries that are quick to run out, so that a lasting error is seen soon.
fn quick_retry() -> Retry {
    Retry {
        attempts: 2,
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
    }
}

/// No housekeeping checkpoint and no reopening unless a test asks for it.
fn options() -> Options {
    Options {
        retry: quick_retry(),
        reopen_after: None,
        checkpoint_bytes: u64::MAX,
        checkpoint_interval: Duration::from_secs(3600),
        ..Options::create()
    }
}

/// A checkpoint at every housekeeping round that finds the log not empty.
fn checkpointing() -> Options {
    Options {
        checkpoint_bytes: 1,
        compaction_interval: Duration::from_millis(5),
        checkpoint_interval: Duration::ZERO,
        ..options()
    }
}

fn v(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// Poll `cond` until it holds; the deadline only guards against a hang, it measures nothing.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A fresh store directory; its faults are cleared when the guard drops.
struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    fn new() -> Dir {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("store");
        Dir { _tmp: tmp, path }
    }

    fn open(&self, options: Options) -> SledStore {
        SledStore::open(&self.path, options).expect("open the store")
    }

    fn inject(&self, fault: Fault) {
        failpoints::inject(&self.path, fault);
    }

    fn fired(&self, point: FaultPoint) -> u32 {
        failpoints::fired(&self.path, point)
    }

    fn clear(&self) {
        failpoints::clear(&self.path);
    }

    /// Whether the write-ahead log is empty on disk (a checkpoint completed).
    fn wal_is_empty(&self) -> bool {
        let bytes = std::fs::read(self.path.join("carrel.wal")).unwrap();
        bytes[..8].iter().all(|b| *b == 0)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        failpoints::clear(&self.path);
    }
}

/// Every object of the store, as key and value.
fn contents(store: &SledStore) -> Vec<(String, Bytes)> {
    let page = store.list("", &ListOptions::default()).unwrap();
    page.items.into_iter().map(|o| (o.key, o.value)).collect()
}

fn value_of(store: &SledStore, key: &str) -> Option<Bytes> {
    store.get(key).unwrap().map(|o| o.value)
}

fn assert_failed(store: &SledStore, what: &str) -> String {
    match store.health() {
        Health::Failed { reason } => reason,
        Health::Ok => panic!("{what}: the store should be failed"),
    }
}

#[test]
fn passing_errors_on_the_write_path_are_retried_and_lose_nothing() {
    for (errno, name) in PASSING {
        for point in [FaultPoint::WalWrite, FaultPoint::WalGrow] {
            let dir = Dir::new();
            let store = dir.open(Options { retry: Retry::default(), ..options() });
            // A value larger than a chunk of the log makes every write grow it.
            let big = |i: usize| Bytes::from(vec![b'a' + i as u8; 1536 * 1024]);
            let value =
                |i: usize| if point == FaultPoint::WalGrow { big(i) } else { v(&format!("{i}")) };
            store.create("k0", value(0)).unwrap();
            dir.inject(Fault::new(point, errno, Some(2)));
            let written = store.create("k1", value(1)).unwrap_or_else(|e| {
                panic!("{name} at {point:?}: a passing error must be retried, got {e}")
            });
            assert_eq!(dir.fired(point), 2, "{name} at {point:?}: the fault fired");
            assert_eq!(store.health(), Health::Ok, "{name} at {point:?}");
            assert_eq!(store.current_revision(), written.mod_revision);
            store.update("k0", value(2), None).unwrap();
            drop(store);

            let store = dir.open(options());
            assert_eq!(value_of(&store, "k0"), Some(value(2)), "{name} at {point:?}");
            assert_eq!(value_of(&store, "k1"), Some(value(1)), "{name} at {point:?}");
        }
    }
}

#[test]
fn a_lasting_passing_error_gives_a_retryable_error_and_writes_resume() {
    for (errno, name) in PASSING {
        let dir = Dir::new();
        let store = dir.open(options());
        store.create("before", v("1")).unwrap();
        dir.inject(Fault::new(FaultPoint::WalWrite, errno, None));
        match store.create("during", v("2")) {
            Err(e @ Error::Unavailable(_)) => assert!(e.is_retryable(), "{name}"),
            other => panic!("{name}: expected Unavailable, got {other:?}"),
        }
        assert_eq!(store.health(), Health::Ok, "{name}: a passing error must not fail the store");
        // The write was not confirmed, so it is not shown as durable: its revision is not the
        // store's, and reading it waits for a sync, which gives up too.
        assert_eq!(store.current_revision(), 1, "{name}");
        assert!(matches!(store.get("during"), Err(Error::Unavailable(_))), "{name}");
        assert_eq!(value_of(&store, "before"), Some(v("1")), "{name}: older reads work");

        dir.clear();
        // The cause is gone: the next write succeeds, and the one given up on was kept queued.
        store.create("after", v("3")).unwrap();
        assert_eq!(store.current_revision(), 3, "{name}");
        assert_eq!(value_of(&store, "during"), Some(v("2")), "{name}");
        drop(store);
        let store = dir.open(options());
        assert_eq!(
            contents(&store),
            vec![("after".into(), v("3")), ("before".into(), v("1")), ("during".into(), v("2"))],
            "{name}"
        );
    }
}

#[test]
fn passing_errors_put_off_a_checkpoint_without_failing_the_store() {
    for (errno, name) in PASSING {
        for point in [FaultPoint::CheckpointOpen, FaultPoint::WalResetWrite] {
            let dir = Dir::new();
            let store = dir.open(checkpointing());
            dir.inject(Fault::new(point, errno, None));
            store.create("a", v("1")).unwrap();
            eventually("the checkpoint to meet the fault", || dir.fired(point) > 3);
            assert_eq!(store.health(), Health::Ok, "{name} at {point:?}");
            store.create("b", v("2")).unwrap();
            assert!(!dir.wal_is_empty(), "{name} at {point:?}: the log keeps the writes");

            dir.clear();
            eventually("a checkpoint to complete", || dir.wal_is_empty());
            store.create("c", v("3")).unwrap();
            drop(store);
            let store = dir.open(options());
            assert_eq!(
                contents(&store),
                vec![("a".into(), v("1")), ("b".into(), v("2")), ("c".into(), v("3"))],
                "{name} at {point:?}"
            );
        }
    }
}

#[test]
fn a_passing_error_in_a_checkpoint_is_retried_within_it() {
    let dir = Dir::new();
    let store = dir.open(Options { retry: Retry::default(), ..checkpointing() });
    dir.inject(Fault::new(FaultPoint::CheckpointOpen, libc::EMFILE, Some(1)));
    store.create("a", v("1")).unwrap();
    eventually("a checkpoint to complete", || dir.wal_is_empty());
    assert_eq!(dir.fired(FaultPoint::CheckpointOpen), 1);
    assert_eq!(store.health(), Health::Ok);
}

/// Faults after which the disk's state is uncertain, on the write path.
fn uncertain_write_faults() -> Vec<(Fault, &'static str)> {
    vec![
        (Fault::new(FaultPoint::WalSync, libc::EIO, Some(1)), "fdatasync EIO"),
        (Fault::new(FaultPoint::WalSync, libc::ENOSPC, Some(1)), "fdatasync ENOSPC"),
        (Fault::new(FaultPoint::WalSync, libc::EMFILE, Some(1)), "fdatasync EMFILE"),
        (
            Fault { partial: true, ..Fault::new(FaultPoint::WalWrite, libc::ENOSPC, Some(1)) },
            "write ENOSPC after part of it landed",
        ),
        (Fault::new(FaultPoint::WalWrite, libc::EIO, Some(1)), "write EIO"),
    ]
}

#[test]
fn an_uncertain_write_error_fails_the_store_and_loses_nothing_acknowledged() {
    for (fault, name) in uncertain_write_faults() {
        let dir = Dir::new();
        let store = dir.open(options());
        let acked: Vec<_> =
            (0..5).map(|i| store.create(&format!("a{i}"), v("x")).unwrap()).collect();
        let mut watch = store.watch("", 0).unwrap();
        dir.inject(fault);
        let failed = store.create("b", v("unacknowledged"));
        assert!(failed.is_err(), "{name}: the write must not be acknowledged");
        assert!(!failed.unwrap_err().is_retryable(), "{name}");
        let reason = assert_failed(&store, name);
        assert!(!reason.is_empty());

        // Nothing unacknowledged is reported durable: not as the revision, not by a read, not
        // by a list, not to a watcher.
        assert_eq!(store.current_revision(), acked.last().unwrap().mod_revision, "{name}");
        assert!(matches!(store.get("b"), Err(Error::Failed(_))), "{name}");
        assert!(matches!(store.list("", &ListOptions::default()), Err(Error::Failed(_))), "{name}");
        for expected in &acked {
            let event = watch.blocking_next().unwrap().unwrap();
            assert_eq!(event.revision, expected.mod_revision, "{name}");
        }
        assert!(watch.try_next().is_none(), "{name}: no event for the unacknowledged write");
        // Writes are refused from now on; acknowledged objects still read.
        assert!(matches!(store.create("c", v("1")), Err(Error::Failed(_))), "{name}");
        assert_eq!(value_of(&store, "a0"), Some(v("x")), "{name}");
        drop(store);

        dir.clear();
        let store = dir.open(options());
        for object in &acked {
            assert_eq!(value_of(&store, &object.key), Some(v("x")), "{name}: {} lost", object.key);
        }
        assert!(value_of(&store, "c").is_none(), "{name}: a refused write appeared");
        store.create("c", v("1")).unwrap();
    }
}

#[test]
fn a_batch_that_meets_an_uncertain_write_error_is_recovered_whole_or_not_at_all() {
    for (fault, name) in uncertain_write_faults() {
        let dir = Dir::new();
        let store = dir.open(options());
        store.create("a", v("acknowledged")).unwrap();
        dir.inject(fault);
        let batch: Vec<_> = (0..10).map(|i| (format!("b/{i}"), v(&"y".repeat(100 * i)))).collect();
        let failed = store.create_all(batch.clone());
        assert!(failed.is_err(), "{name}: the batch must not be acknowledged");
        assert_failed(&store, name);
        assert_eq!(store.current_revision(), 1, "{name}");
        drop(store);

        dir.clear();
        let store = dir.open(options());
        assert_eq!(value_of(&store, "a"), Some(v("acknowledged")), "{name}");
        let stored = contents(&store);
        let found: Vec<_> = stored.iter().filter(|(k, _)| k.starts_with("b/")).cloned().collect();
        let mut sorted = batch.clone();
        sorted.sort();
        assert!(
            found.is_empty() || found == sorted,
            "{name}: {} of the batch's 10 objects recovered",
            found.len()
        );
        assert_eq!(store.current_revision(), 1 + found.len() as Revision, "{name}");
        // Whichever it was, the store goes on from there.
        store.create("c", v("1")).unwrap();
    }
}

#[test]
fn an_uncertain_checkpoint_error_fails_the_store_and_loses_nothing_acknowledged() {
    let faults = [
        (FaultPoint::CheckpointSync, libc::EIO),
        (FaultPoint::CheckpointSync, libc::EMFILE),
        (FaultPoint::CheckpointFlush, libc::EIO),
        (FaultPoint::WalResetSync, libc::EIO),
    ];
    for (point, errno) in faults {
        let dir = Dir::new();
        let store = dir.open(checkpointing());
        dir.inject(Fault::new(point, errno, Some(1)));
        // Write until the failing checkpoint refuses a write: every one acknowledged before
        // must survive.
        let mut acked = Vec::new();
        for i in 0.. {
            match store.create(&format!("a{i}"), v("x")) {
                Ok(object) => acked.push(object),
                Err(Error::Failed(_)) => break,
                Err(e) => panic!("{point:?}: {e}"),
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(dir.fired(point), 1, "{point:?}");
        let reason = assert_failed(&store, "checkpoint");
        assert!(reason.contains("checkpoint failed"), "{point:?}: {reason}");
        assert!(matches!(store.create("b", v("1")), Err(Error::Failed(_))), "{point:?}");
        drop(store);

        let store = dir.open(options());
        for object in &acked {
            assert_eq!(
                value_of(&store, &object.key),
                Some(v("x")),
                "{point:?}: {} lost",
                object.key
            );
        }
        // The one write that met the failure was never acknowledged: as after a crash, it may
        // have reached sled's files before the sync failed, but nothing after it can have.
        let last = acked.last().unwrap().mod_revision;
        let revision = store.current_revision();
        assert!(revision == last || revision == last + 1, "{point:?}: {revision} after {last}");
        if revision == last + 1 {
            assert_eq!(value_of(&store, &format!("a{}", acked.len())), Some(v("x")), "{point:?}");
        }
        assert_eq!(value_of(&store, "b"), None, "{point:?}: a write to a failed store landed");
    }
}

#[test]
fn many_writers_ride_out_passing_errors_with_nothing_lost() {
    let dir = Dir::new();
    let store = Arc::new(dir.open(Options { retry: quick_retry(), ..checkpointing() }));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let path = dir.path.clone();
    let chaos = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let points =
                [FaultPoint::WalWrite, FaultPoint::CheckpointOpen, FaultPoint::WalResetWrite];
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (errno, _) = PASSING[i % PASSING.len()];
                failpoints::inject(&path, Fault::new(points[i % points.len()], errno, Some(3)));
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut acked: Vec<(String, Bytes)> = Vec::new();
                let mut unconfirmed = 0;
                for i in 0..60 {
                    let key = format!("t{t}-{i}");
                    let value = v(&format!("{t}/{i}"));
                    match store.create(&key, value.clone()) {
                        Ok(_) => acked.push((key, value)),
                        Err(Error::Unavailable(_)) => unconfirmed += 1,
                        Err(e) => panic!("{key}: {e}"),
                    }
                }
                (acked, unconfirmed)
            })
        })
        .collect();
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.join().unwrap().0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    chaos.join().unwrap();
    dir.clear();
    assert_eq!(store.health(), Health::Ok, "passing errors must never fail the store");
    store.create("last", v("1")).unwrap();
    drop(Arc::try_unwrap(store).unwrap());

    let store = dir.open(options());
    for (key, value) in &acked {
        assert_eq!(value_of(&store, key).as_ref(), Some(value), "{key} was acknowledged but lost");
    }
    assert!(!acked.is_empty());
}

#[test]
fn a_failed_store_reopens_in_place_once_the_cause_is_gone() {
    let dir = Dir::new();
    let store = dir.open(options());
    let a = store.create("a", v("1")).unwrap();
    let mut watch = store.watch("", 0).unwrap();
    // A sync error that lasts: reopening cannot sync either, and leaves the store failed.
    dir.inject(Fault::new(FaultPoint::WalSync, libc::EIO, None));
    dir.inject(Fault::new(FaultPoint::CheckpointSync, libc::EIO, None));
    assert!(store.create("b", v("2")).is_err());
    assert_failed(&store, "after the sync error");
    assert!(store.reopen().is_err(), "reopening must fail while the disk fails");
    assert_failed(&store, "after a failed reopen");

    dir.clear();
    assert!(store.reopen().unwrap(), "the store reopens once the cause is gone");
    assert_eq!(store.health(), Health::Ok);
    assert!(!store.reopen().unwrap(), "a healthy store has nothing to reopen");
    // Acknowledged writes are there; the unacknowledged one may or may not be, consistently.
    assert_eq!(value_of(&store, "a"), Some(v("1")));
    let b = store.get("b").unwrap();
    let after_b = store.current_revision();
    assert_eq!(after_b, a.mod_revision + u64::from(b.is_some()));
    // Writes are accepted again, and the revisions go on without a gap.
    let c = store.create("c", v("3")).unwrap();
    assert_eq!(c.mod_revision, after_b + 1);
    // A watcher sees every durable write once, in order.
    let mut seen: Vec<(Revision, String)> = Vec::new();
    while seen.last().map(|s| s.0) != Some(c.mod_revision) {
        let event = watch.blocking_next().unwrap().unwrap();
        assert_eq!(event.kind, EventKind::Created);
        seen.push((event.revision, event.key.clone()));
    }
    let expected: Vec<(Revision, String)> = std::iter::once((a.mod_revision, "a".to_owned()))
        .chain(b.map(|b| (b.mod_revision, "b".to_owned())))
        .chain(std::iter::once((c.mod_revision, "c".to_owned())))
        .collect();
    assert_eq!(seen, expected);
    drop(store);

    let store = dir.open(options());
    assert_eq!(value_of(&store, "a"), Some(v("1")));
    assert_eq!(value_of(&store, "c"), Some(v("3")));
}

#[test]
fn a_failed_store_reopens_by_itself() {
    let dir = Dir::new();
    let store = dir.open(Options {
        reopen_after: Some(Duration::from_millis(20)),
        compaction_interval: Duration::from_millis(5),
        ..options()
    });
    store.create("a", v("1")).unwrap();
    dir.inject(Fault::new(FaultPoint::WalSync, libc::EIO, Some(1)));
    assert!(store.create("b", v("2")).is_err());
    eventually("the store to reopen itself", || store.health() == Health::Ok);
    store.create("c", v("3")).unwrap();
    assert_eq!(value_of(&store, "a"), Some(v("1")));
    assert!(carrel_store::io_stats().reopened >= 1);
    assert!(carrel_store::io_stats().failures >= 1);
}
