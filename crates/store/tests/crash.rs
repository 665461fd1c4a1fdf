//! kill -9 checks: every acknowledged write survives the death of the process that made it, and
//! the store reopens cleanly afterwards, again and again on the same directory.
//!
//! The parent test re-executes this test binary as a child process (running only the ignored
//! `crash_child` test). The child opens the store and writes from several threads; before each
//! write it reports its intent on stdout, after each write that returned `Ok` it reports the
//! acknowledgement, one flushed line each. The parent kills the child with SIGKILL at a random
//! moment, reopens the store and checks it against what was acknowledged:
//!
//! * every key holds exactly its last acknowledged state (value, `mod_revision`,
//!   `create_revision`, or absence), or the result of the one write to it that was in flight when
//!   the child died (each thread owns its keys, so a key has at most one write in flight);
//! * every value is intact (values encode their key, a per-key increasing sequence number and
//!   their length, and the rest of their bytes is derived from those);
//! * no key holds anything that was never written;
//! * the store's usage (objects and bytes) is exactly what it holds;
//! * revisions never go backwards, and acknowledged revisions are never handed out twice;
//! * the history log replays from the compacted revision without error, densely, up to the
//!   current revision, and agrees with the objects it leaves behind.
//!
//! The state observed after a reopen is the next child's starting point, so each round also tests
//! recovery of a store that already recovered from a crash.
//!
//! A third test kills a child writing batches (`Store::create_all`) alongside single creates: after
//! each reopen every acknowledged batch is stored whole at its revisions, and the batch in flight
//! is stored whole or not at all.

// The parent reports its seed and a summary on stderr, so a failure can be replayed.
#![allow(clippy::print_stderr)]
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_store::{
    Error, EventKind, HistoryWindow, ListOptions, Object, Options, Revision, SledStore, Store,
    Usage,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Set (to the store directory) only in the child process.
const ENV_DIR: &str = "CARREL_CRASH_CHILD_DIR";
/// The child's round number, which makes its sequence numbers and new keys distinct.
const ENV_ROUND: &str = "CARREL_CRASH_CHILD_ROUND";
/// `random` (writer threads until killed) or `acks:N` (N writes from one thread, then block).
const ENV_MODE: &str = "CARREL_CRASH_CHILD_MODE";
/// The child's random seed.
const ENV_SEED: &str = "CARREL_CRASH_CHILD_SEED";
/// Rounds of the random crash test.
const ENV_ITERATIONS: &str = "CARREL_CRASH_ITERATIONS";
/// Fixes the parent's seed, to replay a failure's choices (timing still differs).
const ENV_PARENT_SEED: &str = "CARREL_CRASH_SEED";

/// Writer threads in a random-mode child.
const THREADS: usize = 4;
/// Reusable keys per writer thread (deleted and created again); new keys come on top.
const POOL_KEYS: usize = 6;
/// Values this large go to sled's blob files (its threshold is a quarter segment, 128 KiB).
const LARGE_VALUE: usize = 200 * 1024;
/// Ack lines start with this; everything else on the child's stdout is the test harness's.
const MARK: &str = "@@";
/// How long a child may take to open its store and report, before the test gives up on it.
const CHILD_START_TIMEOUT: Duration = Duration::from_secs(120);

/// The parent tests run one at a time: a child spawned by one briefly inherits (until its exec)
/// the lock files the other has open, which would make the other's reopen fail with `Locked`.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// ---------------------------------------------------------------------------------------------
// Values: `key|seq|filler_len|` followed by filler bytes derived from key and seq.

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

fn filler(key: &str, seq: u64, len: usize) -> impl Iterator<Item = u8> {
    let mut x = (fnv1a(key.as_bytes()) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    (0..len.div_ceil(8))
        .flat_map(move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .take(len)
}

fn make_value(key: &str, seq: u64, filler_len: usize) -> Bytes {
    let mut v = format!("{key}|{seq}|{filler_len}|").into_bytes();
    v.reserve(filler_len);
    v.extend(filler(key, seq, filler_len));
    Bytes::from(v)
}

/// The sequence number a stored value carries, after checking every byte of it.
fn check_value(key: &str, value: &[u8]) -> Result<u64, String> {
    let bad = |why: &str| {
        let head = String::from_utf8_lossy(&value[..value.len().min(80)]).into_owned();
        format!("value of {key:?} is damaged ({why}); {} bytes, starting {head:?}", value.len())
    };
    let mut parts = value.splitn(4, |b| *b == b'|');
    let (Some(k), Some(seq), Some(len), Some(rest)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("no header"));
    };
    if k != key.as_bytes() {
        return Err(bad("written for another key"));
    }
    let parse = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<u64>().ok());
    let (Some(seq), Some(len)) = (parse(seq), parse(len)) else {
        return Err(bad("unreadable header"));
    };
    if rest.len() as u64 != len {
        return Err(bad(&format!("filler is {} bytes, header says {len}", rest.len())));
    }
    if !rest.iter().copied().eq(filler(key, seq, rest.len())) {
        return Err(bad("filler bytes differ"));
    }
    Ok(seq)
}

// ---------------------------------------------------------------------------------------------
// The child.

/// One line to the parent, written with a single `write` and flushed before returning.
fn report(line: std::fmt::Arguments<'_>) {
    let line = format!("{MARK}{line}\n");
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes()).expect("write to the parent");
    out.flush().expect("flush to the parent");
}

#[test]
#[ignore = "run by the crash tests as their child process"]
fn crash_child() {
    let Some(dir) = std::env::var_os(ENV_DIR) else {
        return;
    };
    // A failed check in any thread must end the process, so the parent sees it at once.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));

    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let round: u64 = var(ENV_ROUND).parse().expect("round number");
    let seed: u64 = var(ENV_SEED).parse().expect("seed");
    let mode = var(ENV_MODE);

    let mut options = Options::create();
    if round % 3 == 2 {
        // Every third round keeps little history, so crashes also hit compaction in progress.
        options.history = HistoryWindow { min_age: Duration::ZERO, min_events: 300 };
        options.compaction_interval = Duration::from_millis(50);
    }
    // A `Locked` here fails the test: the parent's store is closed, and `SledStore::open` itself
    // waits out the moment sled's background work keeps its lock after a close.
    let store = Arc::new(SledStore::open(&dir, options).expect("child: open the store"));

    // The first line starts with a newline: the harness may have left "test crash_child ... "
    // unterminated on stdout.
    let mut out = std::io::stdout().lock();
    out.write_all(b"\n").expect("write to the parent");
    drop(out);

    if let Some(n) = mode.strip_prefix("acks:") {
        let n: usize = n.parse().expect("ack count");
        let mut writer = Writer::start(store.clone(), 0, round, seed);
        report(format_args!("S {round}"));
        let mut acked = 0;
        while acked < n {
            acked += usize::from(writer.step());
        }
        report(format_args!("B {n}"));
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if mode == "batches" {
        batch_child(store, round, seed);
    }
    assert_eq!(mode, "random", "unknown child mode");
    let writers: Vec<Writer> = (0..THREADS)
        .map(|t| {
            Writer::start(
                store.clone(),
                t,
                round,
                seed ^ (t as u64 + 1).wrapping_mul(0x1234_5678_9abc_def1),
            )
        })
        .collect();
    report(format_args!("S {round}"));
    let handles: Vec<JoinHandle<()>> = writers
        .into_iter()
        .map(|mut w| {
            std::thread::spawn(move || loop {
                w.step();
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("writer thread");
    }
}

/// The most objects in one batch of a `batches` child.
const BATCH_MAX: usize = 40;

/// A `batches` child: one thread writes batches with `create_all`, reporting each before
/// (`I <batch> <size>`) and after (`A <batch> <size> <first revision>`), while another creates
/// single objects under `s/` (unreported), so that batches share group commits with other
/// writes. Never returns.
fn batch_child(store: Arc<SledStore>, round: u64, seed: u64) -> ! {
    let singles = store.clone();
    std::thread::spawn(move || {
        for n in 0u64.. {
            let key = format!("s/{round}-{n}");
            singles
                .create(&key, make_value(&key, n, 100))
                .unwrap_or_else(|e| panic!("child: create {key:?}: {e}"));
        }
    });
    let mut rng = StdRng::seed_from_u64(seed);
    report(format_args!("S {round}"));
    for n in 1u64.. {
        let size = rng.random_range(1..=BATCH_MAX);
        let batch = format!("b{round}-{n}");
        let seq = round << 32 | n;
        let items: Vec<(String, Bytes)> = (0..size)
            .map(|j| {
                let key = format!("{batch}/{j:02}");
                let len = match rng.random_range(0..100) {
                    // Some large values make appends long enough to be cut by the kill.
                    0..8 => rng.random_range(LARGE_VALUE..=LARGE_VALUE + 64 * 1024),
                    _ => rng.random_range(0..=2000),
                };
                let value = make_value(&key, seq, len);
                (key, value)
            })
            .collect();
        report(format_args!("I {batch} {size}"));
        let objects =
            store.create_all(items).unwrap_or_else(|e| panic!("child: batch {batch}: {e}"));
        let first = objects[0].mod_revision;
        for (j, object) in objects.iter().enumerate() {
            assert_eq!(object.mod_revision, first + j as u64, "child: batch {batch}");
        }
        report(format_args!("A {batch} {size} {first}"));
    }
    unreachable!("the batch child runs until it is killed")
}

/// A key one writer thread owns, as that thread last left it.
struct Slot {
    key: String,
    /// `(mod_revision, create_revision)` while the key exists.
    current: Option<(Revision, Revision)>,
    /// Pool keys are created again after a delete; new keys are dropped.
    pool: bool,
}

/// One writer thread's keys and choices. Each key belongs to one thread, so its writes are
/// sequential and at most one is in flight.
struct Writer {
    store: Arc<SledStore>,
    thread: usize,
    round: u64,
    rng: StdRng,
    slots: Vec<Slot>,
    /// Sequence numbers are `round << 32 | n`: increasing per key, across rounds too.
    next_seq: u64,
    new_keys: u64,
}

impl Writer {
    /// Pick up this thread's keys as the last round (and the recovery) left them.
    fn start(store: Arc<SledStore>, thread: usize, round: u64, seed: u64) -> Writer {
        let prefix = format!("t{thread}/");
        let page = store.list(&prefix, &ListOptions::default()).expect("child: list own keys");
        assert!(page.continue_token.is_none());
        let mut slots: Vec<Slot> = page
            .items
            .iter()
            .map(|o| Slot {
                key: o.key.clone(),
                current: Some((o.mod_revision, o.create_revision)),
                pool: o.key.starts_with(&format!("{prefix}p")),
            })
            .collect();
        for i in 0..POOL_KEYS {
            let key = format!("{prefix}p{i}");
            if !slots.iter().any(|s| s.key == key) {
                slots.push(Slot { key, current: None, pool: true });
            }
        }
        Writer {
            store,
            thread,
            round,
            rng: StdRng::seed_from_u64(seed),
            slots,
            next_seq: round << 32,
            new_keys: 0,
        }
    }

    fn seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn value_filler_len(&mut self) -> usize {
        match self.rng.random_range(0..100) {
            0..5 => self.rng.random_range(LARGE_VALUE..=LARGE_VALUE + 64 * 1024),
            5..12 => self.rng.random_range(8 * 1024..=64 * 1024),
            _ => self.rng.random_range(0..=1500),
        }
    }

    /// Write `key` (create when `current` is `None`, update otherwise) and report it.
    fn write(&mut self, index: Option<usize>, key: String, expected: Option<Revision>) {
        let seq = self.seq();
        let filler_len = self.value_filler_len();
        let value = make_value(&key, seq, filler_len);
        let current = index.and_then(|i| self.slots[i].current);
        report(format_args!("I {key} {seq} W {}", value.len()));
        let result = match current {
            None => self.store.create(&key, value.clone()),
            Some(_) => self.store.update(&key, value.clone(), expected),
        };
        let object = result.unwrap_or_else(|e| panic!("child: write {key:?} seq {seq}: {e}"));
        assert_eq!(object.value, value);
        report(format_args!("A {key} {seq} W {} {}", object.mod_revision, object.create_revision));
        let state = Some((object.mod_revision, object.create_revision));
        match index {
            Some(i) => self.slots[i].current = state,
            None => self.slots.push(Slot { key, current: state, pool: false }),
        }
    }

    /// One operation; whether it was a write that got acknowledged.
    fn step(&mut self) -> bool {
        if self.rng.random_range(0..100) < 12 {
            self.new_keys += 1;
            let key = format!("t{}/n{}-{}", self.thread, self.round, self.new_keys);
            self.write(None, key, None);
            return true;
        }
        let i = self.rng.random_range(0..self.slots.len());
        let key = self.slots[i].key.clone();
        let Some((mod_rev, _)) = self.slots[i].current else {
            self.write(Some(i), key, None);
            return true;
        };
        match self.rng.random_range(0..100) {
            0..40 => self.write(Some(i), key, Some(mod_rev)),
            40..65 => self.write(Some(i), key, None),
            65..80 => {
                let seq = self.seq();
                let expected = self.rng.random_bool(0.5).then_some(mod_rev);
                report(format_args!("I {key} {seq} D"));
                let deleted = self
                    .store
                    .delete(&key, expected)
                    .unwrap_or_else(|e| panic!("child: delete {key:?} seq {seq}: {e}"));
                assert!(deleted.mod_revision > mod_rev);
                report(format_args!("A {key} {seq} D {}", deleted.mod_revision));
                if self.slots[i].pool {
                    self.slots[i].current = None;
                } else {
                    self.slots.swap_remove(i);
                }
            }
            80..90 => {
                // A stale precondition must change nothing; nothing to report.
                let stale = mod_rev + self.rng.random_range(1..=3);
                let result = if self.rng.random_bool(0.5) {
                    self.store.update(&key, make_value(&key, u64::MAX, 0), Some(stale)).map(drop)
                } else {
                    self.store.delete(&key, Some(stale)).map(drop)
                };
                assert!(
                    matches!(result, Err(Error::Conflict { actual, .. }) if actual == mod_rev),
                    "child: stale write to {key:?} got {result:?}"
                );
                return false;
            }
            _ => {
                let result = self.store.create(&key, make_value(&key, u64::MAX, 0));
                assert!(
                    matches!(result, Err(Error::AlreadyExists { .. })),
                    "child: create of existing {key:?} got {result:?}"
                );
                return false;
            }
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: running and killing a child.

/// A running child; killed and reaped on drop, so no child outlives a failed test.
struct ChildGuard {
    child: Option<Child>,
    lines: Receiver<String>,
    stdout_reader: Option<JoinHandle<usize>>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl ChildGuard {
    fn spawn(dir: &Path, round: u64, mode: &str, seed: u64) -> ChildGuard {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "crash_child", "--nocapture", "--ignored", "--test-threads=1"])
            .env(ENV_DIR, dir)
            .env(ENV_ROUND, round.to_string())
            .env(ENV_MODE, mode)
            .env(ENV_SEED, seed.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel();
        // Only complete lines count: a line cut short by the kill was never acknowledged.
        let stdout_reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut partial = 0;
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return partial,
                    Ok(_) if line.last() != Some(&b'\n') => partial += 1,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&line).trim_end().to_owned();
                        if line.starts_with(MARK) && tx.send(line).is_err() {
                            return partial;
                        }
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_reader = {
            let mut pipe = child.stderr.take().expect("child stderr");
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.read_to_end(&mut buf);
                stderr.lock().unwrap().push_str(&String::from_utf8_lossy(&buf));
            })
        };
        ChildGuard {
            child: Some(child),
            lines,
            stdout_reader: Some(stdout_reader),
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the child has exited by itself (a failure: it only ends by being killed).
    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().expect("poll the child"))
    }

    /// Kill with SIGKILL, reap, and return the exit status and every complete line it reported.
    fn kill(&mut self) -> (ExitStatus, Vec<String>, usize) {
        let mut child = self.child.take().expect("child still running");
        child.kill().expect("SIGKILL the child");
        let status = child.wait().expect("reap the child");
        let partial = self.stdout_reader.take().map_or(0, |h| h.join().expect("stdout reader"));
        if let Some(h) = self.stderr_reader.take() {
            h.join().expect("stderr reader");
        }
        (status, self.lines.try_iter().collect(), partial)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: what was acknowledged, and the check against a reopened store.

/// What the parent knows a key holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Known {
    Absent {
        /// The last revision known to have touched the key (its deletion), 0 if none.
        revision: Revision,
    },
    Present {
        seq: u64,
        len: usize,
        mod_revision: Revision,
        create_revision: Revision,
    },
}

impl Known {
    fn revision(&self) -> Revision {
        match self {
            Known::Absent { revision } => *revision,
            Known::Present { mod_revision, .. } => *mod_revision,
        }
    }
}

/// A write the child started and has not acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Intent {
    Write { seq: u64, len: usize },
    Delete { seq: u64 },
}

#[derive(Debug)]
struct KeyState {
    known: Known,
    pending: Option<Intent>,
    last_seq: u64,
}

/// Everything acknowledged so far, across rounds.
#[derive(Debug, Default)]
struct Model {
    keys: BTreeMap<String, KeyState>,
    /// The current revision found at the last reopen (durable: the parent opened it).
    recovered: Revision,
    /// Revisions acknowledged in this round.
    acked: HashSet<Revision>,
    max_acked: Revision,
}

#[derive(Debug, Default)]
struct Tally {
    acks: usize,
    in_flight_applied: usize,
    in_flight_lost: usize,
}

impl Model {
    /// Apply one reported line; panics on a report that contradicts what is known.
    fn apply(&mut self, line: &str) {
        let fields: Vec<&str> = line.strip_prefix(MARK).expect("marked line").split(' ').collect();
        let num = |i: usize| -> u64 {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("bad line {line:?}"))
        };
        match fields[0] {
            "S" | "B" => {}
            "I" => {
                let seq = num(2);
                let intent = match fields.get(3) {
                    Some(&"W") => Intent::Write { seq, len: num(4) as usize },
                    Some(&"D") => Intent::Delete { seq },
                    _ => panic!("bad line {line:?}"),
                };
                let state = self.keys.entry(fields[1].to_owned()).or_insert(KeyState {
                    known: Known::Absent { revision: 0 },
                    pending: None,
                    last_seq: 0,
                });
                assert!(state.pending.is_none(), "{line:?}: a second write in flight");
                assert!(seq > state.last_seq, "{line:?}: sequence not increasing");
                state.pending = Some(intent);
                state.last_seq = seq;
            }
            "A" => {
                let (key, seq) = (fields[1], num(2));
                let state = self.keys.get_mut(key).unwrap_or_else(|| panic!("{line:?}: no intent"));
                let (revision, known) = match (fields.get(3), state.pending) {
                    (Some(&"W"), Some(Intent::Write { seq: s, len })) if s == seq => {
                        let (mod_revision, create_revision) = (num(4), num(5));
                        let expected_create = match state.known {
                            Known::Present { create_revision, .. } => create_revision,
                            Known::Absent { .. } => mod_revision,
                        };
                        assert_eq!(create_revision, expected_create, "{line:?}: create_revision");
                        (mod_revision, Known::Present { seq, len, mod_revision, create_revision })
                    }
                    (Some(&"D"), Some(Intent::Delete { seq: s })) if s == seq => {
                        assert!(matches!(state.known, Known::Present { .. }), "{line:?}: absent");
                        (num(4), Known::Absent { revision: num(4) })
                    }
                    _ => panic!("{line:?} does not match the write in flight {:?}", state.pending),
                };
                assert!(revision > state.known.revision(), "{line:?}: revision went backwards");
                assert!(
                    revision > self.recovered,
                    "{line:?}: revision at or below the recovered {}",
                    self.recovered
                );
                assert!(self.acked.insert(revision), "{line:?}: revision acknowledged twice");
                self.max_acked = self.max_acked.max(revision);
                state.known = known;
                state.pending = None;
            }
            _ => panic!("bad line {line:?}"),
        }
    }

    /// Reopen the store after a kill and check it against everything acknowledged; then take
    /// what it holds as the new baseline.
    fn verify(&mut self, dir: &Path, tally: &mut Tally) -> Result<(), String> {
        let store = SledStore::open(dir, Options::default())
            .map_err(|e| format!("reopen after the kill failed: {e} ({e:?})"))?;
        let current = store.current_revision();
        let compacted = store.compacted_revision();
        if compacted > current {
            return Err(format!("compacted revision {compacted} is beyond current {current}"));
        }

        let page = store.list("", &ListOptions::default()).map_err(|e| format!("list: {e}"))?;
        if page.continue_token.is_some() || page.revision != current {
            return Err(format!("list read at {} (current {current})", page.revision));
        }
        let stored: BTreeMap<String, Object> =
            page.items.into_iter().map(|o| (o.key.clone(), o)).collect();
        for (key, object) in &stored {
            let got = store.get(key).map_err(|e| format!("get {key:?}: {e}"))?;
            if got.as_ref() != Some(object) {
                return Err(format!("get {key:?} = {got:?} disagrees with list"));
            }
        }

        // The usage the store recovered (its record, carried through the log replay) is what it
        // holds.
        let counted = Usage {
            objects: stored.len() as u64,
            bytes: stored.values().map(|o| Usage::bytes_of(&o.key, &o.value)).sum(),
        };
        if store.usage() != counted {
            return Err(format!(
                "usage {:?} recovered, but the store holds {counted:?}",
                store.usage()
            ));
        }

        let keys: BTreeSet<&String> = self.keys.keys().chain(stored.keys()).collect();
        let mut next = BTreeMap::new();
        for key in keys {
            let state = self.keys.get(key);
            let (known, pending) = match state {
                Some(s) => (s.known.clone(), s.pending),
                None => (Known::Absent { revision: 0 }, None),
            };
            let observed = match stored.get(key) {
                Some(object) => {
                    let seq = check_value(key, &object.value)?;
                    let len = object.value.len();
                    let here = Known::Present {
                        seq,
                        len,
                        mod_revision: object.mod_revision,
                        create_revision: object.create_revision,
                    };
                    let applied_in_flight = matches!(
                        pending, Some(Intent::Write { seq: s, len: l }) if s == seq && l == len
                    );
                    if here == known {
                        if pending.is_some() {
                            tally.in_flight_lost += 1;
                        }
                    } else if applied_in_flight {
                        let expected_create = match known {
                            Known::Present { create_revision, .. } => create_revision,
                            Known::Absent { .. } => object.mod_revision,
                        };
                        if object.mod_revision <= known.revision()
                            || object.mod_revision <= self.recovered
                            || object.mod_revision > current
                            || self.acked.contains(&object.mod_revision)
                            || object.create_revision != expected_create
                        {
                            return Err(format!(
                                "{key:?}: the in-flight write seq {seq} landed at revisions \
                                 {}/{} (known {known:?}, recovered {}, current {current})",
                                object.mod_revision, object.create_revision, self.recovered
                            ));
                        }
                        tally.in_flight_applied += 1;
                    } else {
                        return Err(format!(
                            "{key:?} holds seq {seq} ({len} bytes) at revisions {}/{}, but the \
                             last acknowledged state is {known:?} and the write in flight was \
                             {pending:?}: an acknowledged write was lost or a write appeared",
                            object.mod_revision, object.create_revision
                        ));
                    }
                    here
                }
                None => match (&known, pending) {
                    (Known::Absent { .. }, _) => {
                        if pending.is_some() {
                            tally.in_flight_lost += 1;
                        }
                        known.clone()
                    }
                    (Known::Present { .. }, Some(Intent::Delete { .. })) => {
                        tally.in_flight_applied += 1;
                        Known::Absent { revision: known.revision() }
                    }
                    (Known::Present { .. }, _) => {
                        return Err(format!(
                            "{key:?} is missing, but the last acknowledged state is {known:?} \
                             (write in flight: {pending:?}): an acknowledged write was lost"
                        ));
                    }
                },
            };
            next.insert(key.clone(), observed);
        }

        // Checked after the keys, which name what was lost.
        if current < self.max_acked || current < self.recovered {
            return Err(format!(
                "current revision {current} is behind the newest acknowledged {} or the last \
                 recovered {}",
                self.max_acked, self.recovered
            ));
        }

        // The log: dense from the compacted revision to the current one, and the last event of
        // each key agrees with the object table.
        let mut watch =
            store.watch("", compacted).map_err(|e| format!("watch from {compacted}: {e}"))?;
        let mut expected_rev = compacted + 1;
        let mut last_events = BTreeMap::new();
        while let Some(event) = watch.try_next() {
            let event = event.map_err(|e| format!("watch replay from {compacted}: {e}"))?;
            if event.revision != expected_rev {
                return Err(format!(
                    "watch replay from {compacted}: revision {} where {expected_rev} was due",
                    event.revision
                ));
            }
            check_value(&event.key, &event.value)
                .map_err(|e| format!("event {}: {e}", event.revision))?;
            expected_rev += 1;
            last_events.insert(event.key.clone(), event);
        }
        if expected_rev != current + 1 {
            return Err(format!(
                "watch replay from {compacted} ended at {} but the current revision is {current}",
                expected_rev - 1
            ));
        }
        for (key, event) in &last_events {
            let object = stored.get(key);
            let agrees = match event.kind {
                EventKind::Deleted => object.is_none(),
                EventKind::Created | EventKind::Modified => object.is_some_and(|o| {
                    o.value == event.value
                        && o.mod_revision == event.revision
                        && o.create_revision == event.create_revision
                }),
            };
            if !agrees {
                return Err(format!(
                    "{key:?}: the log's last event {:?} at {} disagrees with the object {object:?}",
                    event.kind, event.revision
                ));
            }
            if let (EventKind::Deleted, Some(Known::Absent { revision })) =
                (event.kind, next.get_mut(key))
            {
                *revision = (*revision).max(event.revision);
            }
        }
        for (key, object) in &stored {
            if object.mod_revision > compacted && !last_events.contains_key(key) {
                return Err(format!(
                    "{key:?} at revision {} is newer than the compaction {compacted}, but the \
                     log has no event for it",
                    object.mod_revision
                ));
            }
        }
        drop(watch);
        drop(store);

        for (key, known) in next {
            let state = self.keys.entry(key).or_insert(KeyState {
                known: Known::Absent { revision: 0 },
                pending: None,
                last_seq: 0,
            });
            state.known = known;
            state.pending = None;
        }
        self.recovered = current;
        self.acked.clear();
        self.max_acked = 0;
        Ok(())
    }
}

fn parent_seed() -> u64 {
    std::env::var(ENV_PARENT_SEED).ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random)
}

/// Wait until the child reports a line starting with `prefix`, applying every line on the way.
fn wait_for(child: &mut ChildGuard, model: &mut Model, prefix: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        match child.lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                model.apply(&line);
                if line[MARK.len()..].starts_with(prefix) {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(10)),
        }
        if let Some(status) = child.exited() {
            panic!("the child exited by itself ({status}); stderr:\n{}", child.stderr());
        }
        assert!(
            Instant::now() < deadline,
            "the child did not report {prefix:?} in {timeout:?}; stderr:\n{}",
            child.stderr()
        );
    }
}

fn store_dir(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = tmp.path().join("store");
    std::fs::create_dir(&dir).expect("create the store directory");
    dir
}

#[test]
fn acknowledged_writes_survive_repeated_kill_9() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let rounds: u64 = std::env::var(ENV_ITERATIONS)
        .ok()
        .map(|s| s.parse().expect("CARREL_CRASH_ITERATIONS is a number"))
        .unwrap_or(25);
    let seed = parent_seed();
    eprintln!("crash test: {rounds} rounds, {ENV_PARENT_SEED}={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = store_dir(&tmp);
    let mut model = Model::default();
    let mut tally = Tally::default();
    let (mut early_kills, mut partial_lines) = (0, 0);
    let started = Instant::now();

    for round in 1..=rounds {
        let child_seed: u64 = rng.random();
        let mut child = ChildGuard::spawn(&dir, round, "random", child_seed);
        if rng.random_bool(0.15) {
            // Kill while the child may still be opening (and recovering) the store.
            early_kills += 1;
            std::thread::sleep(Duration::from_millis(rng.random_range(0..=150)));
        } else {
            wait_for(&mut child, &mut model, "S", CHILD_START_TIMEOUT);
            std::thread::sleep(Duration::from_millis(rng.random_range(20..=400)));
        }
        if let Some(status) = child.exited() {
            panic!(
                "round {round}: the child exited by itself ({status}); stderr:\n{}",
                child.stderr()
            );
        }
        let pid = child.pid();
        let (status, lines, partial) = child.kill();
        partial_lines += partial;
        if status.signal() != Some(libc::SIGKILL) {
            panic!(
                "round {round}: child {pid} ended with {status}, not by SIGKILL; stderr:\n{}",
                child.stderr()
            );
        }
        for line in &lines {
            model.apply(line);
        }
        tally.acks += model.acked.len();
        if let Err(e) = model.verify(&dir, &mut tally) {
            panic!(
                "round {round} (seed {seed}, child seed {child_seed}): {e}\nchild stderr:\n{}",
                child.stderr()
            );
        }
    }
    eprintln!(
        "crash test: {rounds} rounds in {:.1?}: {} writes acknowledged, in-flight writes \
         applied {} / lost {}, {early_kills} kills during start-up, {partial_lines} cut lines, \
         final revision {}, {} keys",
        started.elapsed(),
        tally.acks,
        tally.in_flight_applied,
        tally.in_flight_lost,
        model.recovered,
        model.keys.values().filter(|s| matches!(s.known, Known::Present { .. })).count(),
    );
    assert!(tally.acks > 0, "no round acknowledged anything");
}

#[test]
fn exactly_the_acknowledged_writes_survive_a_kill_of_a_blocked_writer() {
    const WRITES: usize = 60;
    let _one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let seed = parent_seed();
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = store_dir(&tmp);
    let mut model = Model::default();
    let mut tally = Tally::default();
    for round in 1..=3 {
        let mut child = ChildGuard::spawn(&dir, round, &format!("acks:{WRITES}"), seed ^ round);
        wait_for(&mut child, &mut model, "B", CHILD_START_TIMEOUT);
        assert_eq!(model.acked.len(), WRITES, "round {round}: acknowledged writes");
        assert!(
            model.keys.values().all(|s| s.pending.is_none()),
            "round {round}: a write still in flight after the child blocked"
        );
        let max_acked = model.max_acked;
        let (status, lines, _) = child.kill();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "round {round}: {status}");
        assert!(lines.is_empty(), "round {round}: reports after blocking: {lines:?}");
        let known: Vec<(String, Known)> =
            model.keys.iter().map(|(k, s)| (k.clone(), s.known.clone())).collect();
        if let Err(e) = model.verify(&dir, &mut tally) {
            panic!("round {round} (seed {seed}): {e}\nchild stderr:\n{}", child.stderr());
        }
        assert_eq!(model.recovered, max_acked, "round {round}: revision after reopen");
        let after: Vec<(String, Known)> =
            model.keys.iter().map(|(k, s)| (k.clone(), s.known.clone())).collect();
        assert_eq!(after, known, "round {round}: state after reopen");
    }
}

/// What the parent knows of the batches a `batches` child wrote: each acknowledged batch's size
/// and first revision, and the one batch in flight.
#[derive(Debug, Default)]
struct Batches {
    acked: BTreeMap<String, (usize, Revision)>,
    in_flight: Option<(String, usize)>,
}

impl Batches {
    fn apply(&mut self, line: &str) {
        let fields: Vec<&str> = line.strip_prefix(MARK).expect("marked line").split(' ').collect();
        let num = |i: usize| -> u64 {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("bad line {line:?}"))
        };
        match fields[0] {
            "S" => {}
            "I" => {
                assert!(self.in_flight.is_none(), "{line:?}: a second batch in flight");
                self.in_flight = Some((fields[1].to_owned(), num(2) as usize));
            }
            "A" => {
                let in_flight = self.in_flight.take();
                assert_eq!(
                    in_flight,
                    Some((fields[1].to_owned(), num(2) as usize)),
                    "{line:?}: not the batch in flight"
                );
                self.acked.insert(fields[1].to_owned(), (num(2) as usize, num(3)));
            }
            _ => panic!("bad line {line:?}"),
        }
    }

    /// Reopen the store after a kill: every acknowledged batch is there whole, at its revisions;
    /// the batch in flight is there whole or not at all; no other batch is there. A batch
    /// found whole becomes acknowledged, one not found is forgotten.
    fn verify(&mut self, dir: &Path) -> Result<bool, String> {
        let store = SledStore::open(dir, Options::default())
            .map_err(|e| format!("reopen after the kill failed: {e} ({e:?})"))?;
        let page = store.list("b", &ListOptions::default()).map_err(|e| format!("list: {e}"))?;
        let mut found: BTreeMap<String, Vec<Object>> = BTreeMap::new();
        for object in page.items {
            check_value(&object.key, &object.value)?;
            let batch = object.key.split('/').next().unwrap_or_default().to_owned();
            found.entry(batch).or_default().push(object);
        }
        let in_flight = self.in_flight.take();
        let mut applied = false;
        for (batch, objects) in &found {
            let first = objects[0].mod_revision;
            let (size, acked_first) = match (self.acked.get(batch), &in_flight) {
                (Some(&(size, first)), _) => (size, Some(first)),
                (None, Some((name, size))) if name == batch => (*size, None),
                _ => return Err(format!("batch {batch} was never written, yet it is stored")),
            };
            if objects.len() != size {
                return Err(format!(
                    "batch {batch} of {size} objects is stored in part: {} of them \
                     (acknowledged: {})",
                    objects.len(),
                    acked_first.is_some()
                ));
            }
            for (j, object) in objects.iter().enumerate() {
                let due = acked_first.unwrap_or(first) + j as u64;
                if object.key != format!("{batch}/{j:02}")
                    || object.mod_revision != due
                    || object.create_revision != due
                {
                    return Err(format!(
                        "batch {batch}: {:?} at {}/{} where revision {due} was due",
                        object.key, object.mod_revision, object.create_revision
                    ));
                }
            }
            if acked_first.is_none() {
                applied = true;
                self.acked.insert(batch.clone(), (size, first));
            }
        }
        for batch in self.acked.keys() {
            if !found.contains_key(batch) {
                return Err(format!("acknowledged batch {batch} is lost"));
            }
        }
        Ok(applied)
    }
}

#[test]
fn a_batch_survives_kill_9_whole_or_not_at_all() {
    let _one_at_a_time = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let rounds: u64 = std::env::var(ENV_ITERATIONS)
        .ok()
        .map(|s| s.parse().expect("CARREL_CRASH_ITERATIONS is a number"))
        .map_or(10, |n: u64| n.div_ceil(2));
    let seed = parent_seed();
    eprintln!("batch crash test: {rounds} rounds, {ENV_PARENT_SEED}={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = store_dir(&tmp);
    let mut batches = Batches::default();
    let (mut in_flight_applied, mut in_flight_lost) = (0, 0);
    for round in 1..=rounds {
        let child_seed: u64 = rng.random();
        let mut child = ChildGuard::spawn(&dir, round, "batches", child_seed);
        let deadline = Instant::now() + CHILD_START_TIMEOUT;
        loop {
            match child.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    batches.apply(&line);
                    if line[MARK.len()..].starts_with('S') {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
            }
            if let Some(status) = child.exited() {
                panic!("round {round}: the child exited by itself ({status}):\n{}", child.stderr());
            }
            assert!(Instant::now() < deadline, "round {round}: the child did not start");
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(20..=400)));
        if let Some(status) = child.exited() {
            panic!("round {round}: the child exited by itself ({status}):\n{}", child.stderr());
        }
        let (status, lines, _) = child.kill();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "round {round}: {status}");
        for line in &lines {
            batches.apply(line);
        }
        let had_in_flight = batches.in_flight.is_some();
        match batches.verify(&dir) {
            Ok(true) => in_flight_applied += 1,
            Ok(false) => in_flight_lost += usize::from(had_in_flight),
            Err(e) => panic!(
                "round {round} (seed {seed}, child seed {child_seed}): {e}\nchild stderr:\n{}",
                child.stderr()
            ),
        }
    }
    eprintln!(
        "batch crash test: {} batches acknowledged, batches in flight applied {in_flight_applied} \
         / lost {in_flight_lost}",
        batches.acked.len()
    );
    assert!(!batches.acked.is_empty(), "no batch was acknowledged");
}
