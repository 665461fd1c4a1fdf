//! Benchmarks for `carrel-store`, each figure printed beside a baseline measured in the same run.
//!
//! Run with `cargo bench -p carrel-store --bench store`. It is a plain program (no harness): every
//! loop is bounded both in count and in time, and the whole run takes well under two minutes.
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | durable writes, 1/8/64 writers | `SledStore::create` of 1 KiB values | 1 KiB append + `fdatasync` loop; raw sled inserts without sync |
//! | reads, 1 and 2 threads | `SledStore::get` | raw sled `Tree::get` on a plain database with the same keys |
//! | list 10,000 objects | `SledStore::list`, whole and in pages of 500 | raw sled `scan_prefix` |
//! | watch fan-out to 1,000 watchers | `Watch::next().await` on a tokio runtime | tokio mpsc / broadcast fan-out of `Arc<Event>` |

#![allow(clippy::print_stdout)]

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_bench::{median, ms, rate, ratio, section, verdict, watchdog, Run, Table};
use carrel_store::{Event, EventKind, ListOptions, Options, SledStore, Store, Watch};

/// Size of every value written.
const VALUE_BYTES: usize = 1024;
/// Writer counts measured.
const WRITERS: [usize; 3] = [1, 8, 64];
/// Durable-write measurements run in this many rounds of `WRITE_ROUND_TIME` each.
const WRITE_ROUNDS: usize = 3;
const WRITE_ROUND_TIME: Duration = Duration::from_secs(1);
/// Upper bound on writes per writer thread in one measurement.
const WRITES_PER_THREAD_CAP: usize = 50_000;
/// How long each read measurement runs, and its count bound per thread.
const READ_TIME: Duration = Duration::from_secs(2);
const READS_PER_THREAD_CAP: usize = 5_000_000;
/// Objects listed, and the page size of the paginated list.
const LIST_OBJECTS: usize = 10_000;
const LIST_PAGE: usize = 500;
/// Repetitions of each list measurement (bounded by `LIST_TIME` too).
const LIST_REPEATS: usize = 7;
const LIST_TIME: Duration = Duration::from_secs(4);
/// Watchers and events for the fan-out measurement. 500 events stay under the default
/// 1024-event watch buffer, so no watcher is ended for falling behind.
const WATCHERS: usize = 1_000;
const FANOUT_EVENTS: usize = 500;
/// Writer threads that produce the fan-out events (group commit batches them).
const FANOUT_WRITERS: usize = 64;
/// Repetitions of each fan-out measurement (the median is reported).
const FANOUT_REPEATS: usize = 3;
/// The longest any fan-out measurement may take before the run gives up.
const FANOUT_TIMEOUT: Duration = Duration::from_secs(60);

/// The whole run is abandoned after this long.
const WATCHDOG: Duration = Duration::from_secs(300);

/// Targets.
const TARGET_LATENCY_RATIO: f64 = 2.0;
const TARGET_SCALING: f64 = 20.0;

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> BenchResult<()> {
    let started = Instant::now();
    watchdog(WATCHDOG, "a hang in the store or sled?");
    let tmp = tempfile::tempdir()?;
    println!("carrel-store benchmark: every ratio is ours / baseline, both measured in this run");
    println!("temp dir: {}", tmp.path().display());
    println!("cores: {}", thread::available_parallelism().map_or(0, |n| n.get()));

    let mut table = Table::default();
    let value = Bytes::from((0..VALUE_BYTES).map(|i| (i % 251) as u8).collect::<Vec<u8>>());

    writes(tmp.path(), &value, &mut table)?;
    reads_and_lists(tmp.path(), &value, &mut table)?;
    fanout(tmp.path(), &value, &mut table)?;

    table.print();
    println!();
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Durable writes
// ----------------------------------------------------------------------------------------------

fn writes(tmp: &Path, value: &Bytes, table: &mut Table) -> BenchResult<()> {
    section("durable writes");

    // Baseline: raw sled inserts, no sync at all.
    let sled_raw = raw_sled_inserts(&tmp.join("raw-sled-inserts"), value)?;
    println!("  raw sled insert (no sync): {}", sled_raw.describe());

    // The disk's speed drifts, so the fdatasync baseline and the stores take turns: each round
    // runs every measurement for `WRITE_ROUND_TIME`, and the rounds are pooled.
    let mut raw_file =
        File::options().create(true).append(true).open(tmp.join("raw-fdatasync.log"))?;
    raw_file.sync_all()?;
    let mut raw = Run::default();
    let mut by_writers = Vec::new();
    for writers in WRITERS {
        let dir = tmp.join(format!("store-writers-{writers}"));
        let store = Arc::new(SledStore::open(&dir, Options::create())?);
        by_writers.push((writers, store, Run::default()));
    }
    for round in 0..WRITE_ROUNDS {
        // Baseline: append 1 KiB and fdatasync, in a loop, in the same temp directory.
        let r = raw_fdatasync(&mut raw_file, value)?;
        println!("  round {round}: raw append+fdatasync: {}", r.describe());
        raw.merge(r);
        for (writers, store, run) in &mut by_writers {
            let writers = *writers;
            let r = run_writers(
                store,
                writers,
                WRITE_ROUND_TIME,
                WRITES_PER_THREAD_CAP,
                |t, i| Some(format!("/bench/r{round}/w{writers}/{t:02}/{i:08}")),
                value,
            )?;
            println!("  round {round}: store create, {writers} writer(s): {}", r.describe());
            run.merge(r);
        }
    }
    let by_writers: Vec<(usize, Run)> = by_writers
        .into_iter()
        .map(|(writers, store, run)| {
            drop(store);
            (writers, run)
        })
        .collect();
    println!("  pooled raw append+fdatasync: {}", raw.describe());
    for (writers, run) in &by_writers {
        println!("  pooled store create, {writers} writer(s): {}", run.describe());
    }
    let single = &by_writers[0].1;

    table.header("Durable writes (1 KiB values, create of distinct keys)");
    table.row(
        "1 writer: p50 latency",
        ms(single.p50()),
        format!("raw fdatasync p50 {}", ms(raw.p50())),
        ratio(single.p50().as_secs_f64(), raw.p50().as_secs_f64()),
        {
            let r = single.p50().as_secs_f64() / raw.p50().as_secs_f64();
            verdict(r <= TARGET_LATENCY_RATIO, format!("<= {TARGET_LATENCY_RATIO}x"))
        },
    );
    table.row(
        "1 writer: p99 latency",
        ms(single.p99()),
        format!("raw fdatasync p99 {}", ms(raw.p99())),
        ratio(single.p99().as_secs_f64(), raw.p99().as_secs_f64()),
        String::new(),
    );
    table.row(
        "1 writer: writes/s",
        rate(single.rate()),
        format!("raw fdatasync {}", rate(raw.rate())),
        ratio(single.rate(), raw.rate()),
        String::new(),
    );
    table.row(
        "1 writer: writes/s",
        rate(single.rate()),
        format!("raw sled insert, no sync {}", rate(sled_raw.rate())),
        ratio(single.rate(), sled_raw.rate()),
        String::new(),
    );
    for (writers, run) in &by_writers[1..] {
        table.row(
            &format!("{writers} writers: writes/s"),
            rate(run.rate()),
            format!("1 writer {}", rate(single.rate())),
            ratio(run.rate(), single.rate()),
            if *writers == 64 {
                verdict(
                    run.rate() >= TARGET_SCALING * single.rate(),
                    format!(">= {TARGET_SCALING}x"),
                )
            } else {
                String::new()
            },
        );
        table.row(
            &format!("{writers} writers: writes/s"),
            rate(run.rate()),
            format!("raw fdatasync {}", rate(raw.rate())),
            ratio(run.rate(), raw.rate()),
            String::new(),
        );
        table.row(
            &format!("{writers} writers: p50 / p99 latency"),
            format!("{} / {}", ms(run.p50()), ms(run.p99())),
            format!("raw fdatasync p50 {}", ms(raw.p50())),
            ratio(run.p50().as_secs_f64(), raw.p50().as_secs_f64()),
            String::new(),
        );
    }
    Ok(())
}

fn raw_fdatasync(file: &mut File, value: &[u8]) -> BenchResult<Run> {
    let mut latencies = Vec::new();
    let start = Instant::now();
    let deadline = start + WRITE_ROUND_TIME;
    while latencies.len() < WRITES_PER_THREAD_CAP && Instant::now() < deadline {
        let t = Instant::now();
        file.write_all(value)?;
        file.sync_data()?;
        latencies.push(t.elapsed());
    }
    Ok(Run::from_parts(latencies, start.elapsed()))
}

fn raw_sled_inserts(path: &Path, value: &[u8]) -> BenchResult<Run> {
    // Same cache as the store's default; no periodic flush, no explicit flush: no sync at all.
    let db = sled::Config::new()
        .path(path)
        .cache_capacity(Options::default().cache_capacity)
        .flush_every_ms(None)
        .open()?;
    let mut latencies = Vec::new();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(2);
    while latencies.len() < 200_000 && Instant::now() < deadline {
        let key = format!("/bench/raw/{:08}", latencies.len());
        let t = Instant::now();
        db.insert(key.as_bytes(), value)?;
        latencies.push(t.elapsed());
    }
    Ok(Run::from_parts(latencies, start.elapsed()))
}

/// Run `threads` writer threads, each creating the keys `key(thread, i)` for i = 0, 1, ... until
/// `key` returns `None`, `cap` writes or `time` has passed.
fn run_writers<F>(
    store: &Arc<SledStore>,
    threads: usize,
    time: Duration,
    cap: usize,
    key: F,
    value: &Bytes,
) -> BenchResult<Run>
where
    F: Fn(usize, usize) -> Option<String> + Send + Sync,
{
    let barrier = Barrier::new(threads + 1);
    let key = &key;
    let barrier = &barrier;
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = store.clone();
                let value = value.clone();
                scope.spawn(move || -> BenchResult<Vec<Duration>> {
                    let mut latencies = Vec::new();
                    barrier.wait();
                    let deadline = Instant::now() + time;
                    let mut i = 0;
                    while i < cap && Instant::now() < deadline {
                        let Some(k) = key(t, i) else { break };
                        let op = Instant::now();
                        store.create(&k, value.clone())?;
                        latencies.push(op.elapsed());
                        i += 1;
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| "writer thread panicked")??);
        }
        Ok(Run::from_parts(all, start.elapsed()))
    })
}

// ----------------------------------------------------------------------------------------------
// Reads and lists
// ----------------------------------------------------------------------------------------------

fn object_key(i: usize) -> String {
    format!("/bench/obj/{i:08}")
}

fn reads_and_lists(tmp: &Path, value: &Bytes, table: &mut Table) -> BenchResult<()> {
    section("reads and lists");
    let keys: Vec<String> = (0..LIST_OBJECTS).map(object_key).collect();

    // The store, filled with 10,000 objects by 64 writers (group commit keeps this quick).
    let store = Arc::new(SledStore::open(tmp.join("store-reads"), Options::create())?);
    let fill = run_writers(
        &store,
        64,
        Duration::from_secs(60),
        LIST_OBJECTS,
        |t, i| {
            let n = t + i * 64;
            (n < LIST_OBJECTS).then(|| object_key(n))
        },
        value,
    )?;
    if fill.ops() != LIST_OBJECTS {
        return Err(format!("filled {} objects, wanted {LIST_OBJECTS}", fill.ops()).into());
    }
    println!("  filled the store: {}", fill.describe());

    // The baseline: a plain sled database with the same keys and values.
    let db = sled::Config::new()
        .path(tmp.join("raw-sled-reads"))
        .cache_capacity(Options::default().cache_capacity)
        .flush_every_ms(None)
        .open()?;
    for k in &keys {
        db.insert(k.as_bytes(), value.as_ref())?;
    }
    db.flush()?;

    table.header("Reads (get of existing keys, 10,000 keys, 1 KiB values)");
    for threads in [1usize, 2] {
        let ours =
            run_readers(threads, &keys, |k| store.get(k).map(|o| o.is_some()).map_err(Into::into))?;
        let raw = run_readers(threads, &keys, |k| {
            db.get(k.as_bytes()).map(|o| o.is_some()).map_err(Into::into)
        })?;
        println!("  store get, {threads} thread(s): {}", ours.describe());
        println!("  raw sled get, {threads} thread(s): {}", raw.describe());
        table.row(
            &format!("{threads} thread(s): reads/s"),
            rate(ours.rate()),
            format!("raw sled Tree::get {}", rate(raw.rate())),
            ratio(ours.rate(), raw.rate()),
            String::new(),
        );
    }

    table.header("List 10,000 objects (1 KiB values)");
    let prefix = "/bench/obj/";
    let whole = repeat_timed(|| {
        let page = store.list(prefix, &ListOptions::default())?;
        Ok(page.items.len())
    })?;
    let paged = repeat_timed(|| {
        let mut options = ListOptions { limit: Some(LIST_PAGE), ..ListOptions::default() };
        let mut total = 0;
        let mut pages = 0;
        loop {
            let page = store.list(prefix, &options)?;
            total += page.items.len();
            pages += 1;
            match page.continue_token {
                Some(token) if pages <= LIST_OBJECTS / LIST_PAGE + 1 => {
                    options.continue_token = Some(token);
                }
                Some(_) => return Err("pagination did not end".into()),
                None => break,
            }
        }
        Ok(total)
    })?;
    let raw = repeat_timed(|| {
        let items: Vec<(sled::IVec, sled::IVec)> =
            db.scan_prefix(prefix.as_bytes()).collect::<Result<_, _>>()?;
        Ok(items.len())
    })?;
    println!("  store list, unpaginated: median {}", ms(whole));
    println!("  store list, pages of {LIST_PAGE}: median {}", ms(paged));
    println!("  raw sled scan_prefix: median {}", ms(raw));
    table.row(
        "unpaginated list: time",
        ms(whole),
        format!("raw sled scan_prefix {}", ms(raw)),
        ratio(whole.as_secs_f64(), raw.as_secs_f64()),
        String::new(),
    );
    table.row(
        "unpaginated list: objects/s",
        rate(LIST_OBJECTS as f64 / whole.as_secs_f64()),
        format!("raw sled scan_prefix {}", rate(LIST_OBJECTS as f64 / raw.as_secs_f64())),
        ratio(raw.as_secs_f64(), whole.as_secs_f64()),
        String::new(),
    );
    table.row(
        &format!("paginated list ({LIST_PAGE}/page): time"),
        ms(paged),
        format!("raw sled scan_prefix {}", ms(raw)),
        ratio(paged.as_secs_f64(), raw.as_secs_f64()),
        String::new(),
    );
    table.row(
        &format!("paginated list ({LIST_PAGE}/page): objects/s"),
        rate(LIST_OBJECTS as f64 / paged.as_secs_f64()),
        format!("raw sled scan_prefix {}", rate(LIST_OBJECTS as f64 / raw.as_secs_f64())),
        ratio(raw.as_secs_f64(), paged.as_secs_f64()),
        String::new(),
    );
    drop(store);
    Ok(())
}

/// `threads` threads each doing `read` of keys spread over `keys` for `READ_TIME`.
fn run_readers<F>(threads: usize, keys: &[String], read: F) -> BenchResult<Run>
where
    F: Fn(&str) -> BenchResult<bool> + Sync,
{
    let barrier = Barrier::new(threads + 1);
    let read = &read;
    let barrier = &barrier;
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> BenchResult<Vec<Duration>> {
                    let mut latencies = Vec::with_capacity(1 << 20);
                    let mut index = t * 4999;
                    barrier.wait();
                    let deadline = Instant::now() + READ_TIME;
                    while latencies.len() < READS_PER_THREAD_CAP {
                        // Check the clock every 256 reads; time each batch of 256 as one sample
                        // spread evenly, so timing costs little next to a sub-microsecond get.
                        if Instant::now() >= deadline {
                            break;
                        }
                        let op = Instant::now();
                        for _ in 0..256 {
                            index = (index + 7919) % keys.len();
                            if !read(&keys[index])? {
                                return Err(format!("{} is missing", keys[index]).into());
                            }
                        }
                        let each = op.elapsed() / 256;
                        latencies.extend(std::iter::repeat_n(each, 256));
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| "reader thread panicked")??);
        }
        Ok(Run::from_parts(all, start.elapsed()))
    })
}

/// Run `f` up to `LIST_REPEATS` times (at most `LIST_TIME`), check it saw every object each time,
/// and return the median time.
fn repeat_timed(mut f: impl FnMut() -> BenchResult<usize>) -> BenchResult<Duration> {
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < LIST_REPEATS && (times.is_empty() || start.elapsed() < LIST_TIME) {
        let t = Instant::now();
        let n = f()?;
        times.push(t.elapsed());
        if n != LIST_OBJECTS {
            return Err(format!("listed {n} objects, wanted {LIST_OBJECTS}").into());
        }
    }
    times.sort_unstable();
    Ok(times[times.len() / 2])
}

// ----------------------------------------------------------------------------------------------
// Watch fan-out
// ----------------------------------------------------------------------------------------------

fn fanout(tmp: &Path, value: &Bytes, table: &mut Table) -> BenchResult<()> {
    section("watch fan-out");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;

    // Each figure is the median of `FANOUT_REPEATS` runs on fresh stores, taking turns.
    let mut alone = Vec::new();
    let mut live = Vec::new();
    let mut live_writes = Vec::new();
    let mut queued = Vec::new();
    for repeat in 0..FANOUT_REPEATS {
        let dir = |what: &str| tmp.join(format!("store-fanout-{what}-{repeat}"));
        // The same writes with nobody watching, for reference.
        let store = Arc::new(SledStore::open(dir("alone"), Options::create())?);
        let run = fanout_writes(&store, value)?;
        println!("  {FANOUT_EVENTS} writes, no watchers: {}", ms(run));
        alone.push(run);
        drop(store);

        // Ours, live: 1,000 watches consumed on the runtime while 64 writers create the events.
        let store = Arc::new(SledStore::open(dir("live"), Options::create())?);
        let received = Arc::new(AtomicUsize::new(0));
        let watches = watch_all(&store)?;
        let tasks = spawn_watchers(&rt, watches, &received);
        let start = Instant::now();
        let writes = fanout_writes(&store, value)?;
        join_all(&rt, tasks)?;
        let total = start.elapsed();
        check_received(&received)?;
        println!(
            "  {FANOUT_EVENTS} writes to {WATCHERS} live watchers: writes done after {}, \
             every event delivered after {}",
            ms(writes),
            ms(total)
        );
        live.push(total);
        live_writes.push(writes);
        drop(store);

        // Ours, queued: the same, but the watchers start consuming only once every event is
        // queued for them: delivery alone.
        let store = Arc::new(SledStore::open(dir("queued"), Options::create())?);
        let received = Arc::new(AtomicUsize::new(0));
        let watches = watch_all(&store)?;
        fanout_writes(&store, value)?;
        let start = Instant::now();
        let tasks = spawn_watchers(&rt, watches, &received);
        join_all(&rt, tasks)?;
        let elapsed = start.elapsed();
        check_received(&received)?;
        println!(
            "  draining {FANOUT_EVENTS} queued events from each of {WATCHERS} watches: {}",
            ms(elapsed)
        );
        queued.push(elapsed);
        drop(store);
    }
    let alone = median(alone);
    let live = median(live);
    let live_writes = median(live_writes);
    let queued = median(queued);

    let events: Vec<Arc<Event>> = (0..FANOUT_EVENTS)
        .map(|n| {
            Arc::new(Event {
                kind: EventKind::Created,
                revision: n as u64 + 1,
                key: format!("/fan/{n:06}"),
                value: value.clone(),
                prev_value: None,
                create_revision: n as u64 + 1,
            })
        })
        .collect();
    let mut mpsc_live = Vec::new();
    let mut mpsc_queued = Vec::new();
    let mut broadcast = Vec::new();
    for _ in 0..FANOUT_REPEATS {
        mpsc_live.push(mpsc_fanout(&rt, &events, false)?);
        mpsc_queued.push(mpsc_fanout(&rt, &events, true)?);
        broadcast.push(broadcast_fanout(&rt, &events)?);
    }
    let mpsc_live = median(mpsc_live);
    let mpsc_queued = median(mpsc_queued);
    let broadcast = median(broadcast);
    println!("  tokio mpsc fan-out, live (median): {}", ms(mpsc_live));
    println!("  tokio mpsc fan-out, queued (median): {}", ms(mpsc_queued));
    println!("  tokio broadcast fan-out, live (median): {}", ms(broadcast));

    let delivered = (WATCHERS * FANOUT_EVENTS) as f64;
    let per_s = |d: Duration| delivered / d.as_secs_f64();
    table.header(&format!(
        "Watch fan-out: {FANOUT_EVENTS} events to each of {WATCHERS} watchers \
         ({} deliveries; median of {FANOUT_REPEATS})",
        WATCHERS * FANOUT_EVENTS
    ));
    table.row(
        "live: writes + delivery, deliveries/s",
        rate(per_s(live)),
        format!("tokio mpsc, live {}", rate(per_s(mpsc_live))),
        ratio(per_s(live), per_s(mpsc_live)),
        String::new(),
    );
    table.row(
        "live: writes + delivery, deliveries/s",
        rate(per_s(live)),
        format!("tokio broadcast, live {}", rate(per_s(broadcast))),
        ratio(per_s(live), per_s(broadcast)),
        String::new(),
    );
    table.row(
        &format!("live: time for the writes ({FANOUT_WRITERS} writers)"),
        ms(live_writes),
        format!("same writes, no watchers {}", ms(alone)),
        ratio(live_writes.as_secs_f64(), alone.as_secs_f64()),
        String::new(),
    );
    table.row(
        "queued: delivery only, deliveries/s",
        rate(per_s(queued)),
        format!("tokio mpsc, queued {}", rate(per_s(mpsc_queued))),
        ratio(per_s(queued), per_s(mpsc_queued)),
        String::new(),
    );
    Ok(())
}

/// Create the fan-out events from `FANOUT_WRITERS` threads; how long that took.
fn fanout_writes(store: &Arc<SledStore>, value: &Bytes) -> BenchResult<Duration> {
    let run = run_writers(
        store,
        FANOUT_WRITERS,
        FANOUT_TIMEOUT,
        FANOUT_EVENTS,
        |t, i| {
            let n = t + i * FANOUT_WRITERS;
            (n < FANOUT_EVENTS).then(|| format!("/fan/{n:06}"))
        },
        value,
    )?;
    if run.ops() != FANOUT_EVENTS {
        return Err(format!("wrote {} events, wanted {FANOUT_EVENTS}", run.ops()).into());
    }
    Ok(run.elapsed())
}

fn watch_all(store: &Arc<SledStore>) -> BenchResult<Vec<Watch>> {
    let after = store.current_revision();
    Ok((0..WATCHERS).map(|_| store.watch("/fan/", after)).collect::<Result<Vec<_>, _>>()?)
}

/// One task per watch, each taking `FANOUT_EVENTS` events and checking their order.
fn spawn_watchers(
    rt: &tokio::runtime::Runtime,
    watches: Vec<Watch>,
    received: &Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<Result<(), String>>> {
    watches
        .into_iter()
        .map(|mut watch| {
            let received = received.clone();
            rt.spawn(async move {
                let mut last = 0;
                for _ in 0..FANOUT_EVENTS {
                    match watch.next().await {
                        Some(Ok(event)) if event.revision > last => last = event.revision,
                        Some(Ok(_)) => return Err("events out of order".to_owned()),
                        Some(Err(e)) => return Err(e.to_string()),
                        None => return Err("watch ended".to_owned()),
                    }
                    received.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect()
}

fn check_received(received: &AtomicUsize) -> BenchResult<()> {
    let got = received.load(Ordering::Relaxed);
    if got != WATCHERS * FANOUT_EVENTS {
        return Err(format!("delivered {got} events, wanted {}", WATCHERS * FANOUT_EVENTS).into());
    }
    Ok(())
}

/// Baseline: one bounded mpsc channel per watcher, `try_send` to each, as the store's hub does.
/// `queued`: fill every channel first, then time the receivers alone.
fn mpsc_fanout(
    rt: &tokio::runtime::Runtime,
    events: &[Arc<Event>],
    queued: bool,
) -> BenchResult<Duration> {
    let capacity = Options::default().watch_buffer;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..WATCHERS).map(|_| tokio::sync::mpsc::channel::<Arc<Event>>(capacity)).unzip();
    let send = || -> BenchResult<()> {
        for event in events {
            for tx in &senders {
                tx.try_send(event.clone()).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    };
    if queued {
        send()?;
    }
    let start = Instant::now();
    let tasks: Vec<_> = receivers
        .into_iter()
        .map(|mut rx| {
            rt.spawn(async move {
                for _ in 0..FANOUT_EVENTS {
                    if rx.recv().await.is_none() {
                        return Err("channel closed".to_owned());
                    }
                }
                Ok(())
            })
        })
        .collect();
    if !queued {
        send()?;
    }
    join_all(rt, tasks)?;
    Ok(start.elapsed())
}

/// Baseline: one tokio broadcast channel with a receiver per watcher.
fn broadcast_fanout(rt: &tokio::runtime::Runtime, events: &[Arc<Event>]) -> BenchResult<Duration> {
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<Event>>(FANOUT_EVENTS);
    let receivers: Vec<_> = (0..WATCHERS).map(|_| tx.subscribe()).collect();
    let start = Instant::now();
    let tasks: Vec<_> = receivers
        .into_iter()
        .map(|mut rx| {
            rt.spawn(async move {
                for _ in 0..FANOUT_EVENTS {
                    rx.recv().await.map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for event in events {
        tx.send(event.clone()).map_err(|e| e.to_string())?;
    }
    join_all(rt, tasks)?;
    Ok(start.elapsed())
}

fn join_all(
    rt: &tokio::runtime::Runtime,
    tasks: Vec<tokio::task::JoinHandle<Result<(), String>>>,
) -> BenchResult<()> {
    rt.block_on(async {
        tokio::time::timeout(FANOUT_TIMEOUT, async {
            for task in tasks {
                task.await.map_err(|e| e.to_string())??;
            }
            Ok::<(), String>(())
        })
        .await
        .map_err(|_| "fan-out timed out".to_owned())?
    })?;
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Output
// ----------------------------------------------------------------------------------------------
