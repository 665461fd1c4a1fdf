//! The request path as users reach it: `carrel-apiserver` over TLS with client certificates and
//! HTTP/2 on loopback, each figure beside a baseline measured in the same run.
//!
//! Run with `cargo bench -p carrel-apiserver --bench request_path`. It is a plain program (no
//! harness): every loop is bounded both in count and in time, every request and watch has a
//! timeout, a watchdog ends a hung run, and the whole run takes about 30 s.
//!
//! Ours is served as `carrel up` serves it (`servers.rs`): the host API (`Api::host`) over a
//! fresh `SledStore`, `Server::secured` with the CA of `Certificates::generate`, `Clusters` and
//! `http::clusters_router` (flow control with this machine's limits), and `tls::serve` with
//! `Certificates::server_config` (client certificates asked for and checked per request, ALPN
//! `h2` and `http/1.1`); the listener sets `TCP_NODELAY` on every accepted socket. It runs on a
//! tokio runtime of its own (2 workers).
//!
//! The baseline is a bare hyper server (`hyper_util::server::conn::auto`, as our listener uses)
//! on the same runtime, behind the very same `rustls::ServerConfig` (same certificates, same
//! client-certificate verifier, same ALPN), with `TCP_NODELAY` on every accepted socket and our
//! listener's HTTP/2 stream limit (250). It answers every request of a type with the bytes our
//! server returned for one such request, captured first over HTTP/2: status, every header but
//! `Date` and `Content-Length` (which hyper writes), body. For a watch it answers our watch's
//! head and streams the captured event line to every open watch on each POST.
//!
//! The clients run on a second runtime (2 workers) as kubectl and client-go do: HTTP/2 over
//! rustls (hyper's `client::conn::http2`), the generated admin client certificate (CN
//! `carrel-admin`, O `system:masters`), `TCP_NODELAY`, one connection per client; latency is
//! measured at the client, from sending a request to the end of its response body. Every
//! client warms its connection up first, unmeasured; then ours and the baseline are measured
//! in alternating rounds (the order swapped each round) and the rounds pooled, so that a drift
//! of the machine falls on both.
//!
//! The CPUs are kept out of their idle states for the whole run (`carrel_bench::hold_cpus_awake`,
//! a PM QoS request on `/dev/cpu_dma_latency`, which needs root); the first lines printed say
//! whether that took. Without it a bare server, which answers in microseconds, lets the CPUs halt
//! between requests and pays their wake-up on every round trip, while ours keeps more threads
//! busy around each request and pays less of it: on a 2-core VM that made a bare HTTP/1.1
//! server's single-client GET about twice as slow as ours (70 µs against 35 µs p50; 13.5 µs
//! against 25 µs with the CPUs held awake). The table says which way the run was made.
//!
//! | target | ours | baseline |
//! |---|---|---|
//! | GET p99 ≤ 1.5x, at 1 and at 2 clients | GET of one ConfigMap | the bare server |
//! | LIST p50 and p99 ≤ 2x, 1 client | LIST of the 1,000 ConfigMaps in `default` | the bare server |
//! | durable CREATE at 32 clients ≥ 0.5x | POST of new ConfigMaps from 32 clients (answered once durable) | `Store::create` of the captured object from 32 threads on a second `SledStore` in another temp dir, in rounds between ours; the bare server's rate is shown beside |
//! | watch delivery p99 ≤ 10 ms | 1,000 watches (`?watch=true&resourceVersion=<rv>`) over 4 HTTP/2 connections (250 streams each, as client-go would open them against a 250-stream limit); a writer on a fifth connection creates ConfigMaps one at a time, each once every watcher has the one before; time from the CREATE's response at the writer (the write is durable then) to the event at each watcher | the bare server streaming the captured event line to the 1,000 streams on each POST |

#![allow(clippy::print_stdout)]

mod clients;
mod servers;
mod watch;

use std::sync::{Arc, LazyLock};
use std::thread;
use std::time::{Duration, Instant};

use carrel_apiserver::tls::Certificates;
use carrel_bench::{
    hold_cpus_awake, ms, rate, ratio, runtime, section, verdict, watchdog, Run, Table,
};
use carrel_store::{Options, SledStore};
use tokio::runtime::Runtime;

use clients::{
    capture, connect_all, fill, load, store_writers, tls_connector, warm_up, Endpoint, Op,
};
use servers::{start_bare, start_ours};
use watch::{watch_run, WatchRun};

/// Rounds of each load measurement, per server, and how long each runs.
const ROUNDS: usize = 3;
const ROUND_TIME: Duration = Duration::from_secs(1);
const REQUESTS_PER_CLIENT_CAP: usize = 100_000;
/// Unmeasured requests on every client's connection before its first round.
const WARMUP: Duration = Duration::from_millis(300);
const WARMUP_REQUESTS_CAP: usize = 2_000;
/// ConfigMaps in the listed namespace.
const LIST_OBJECTS: usize = 1_000;
/// Size of each ConfigMap's `data.payload` value.
const PAYLOAD_BYTES: usize = 512;
/// Clients of the durable CREATE, and threads of the store's own durable write.
const WRITERS: usize = 32;
const STORE_WRITES_CAP: usize = 50_000;
/// Watch delivery: watches, the HTTP/2 connections they share, events per run, the pause
/// after every watcher has an event, runs per server.
const WATCHERS: usize = 1_000;
const WATCH_CONNECTIONS: usize = 4;
const WATCH_EVENTS: usize = 20;
const WATCH_GAP: Duration = Duration::from_millis(5);
const WATCH_ROUNDS: usize = 2;
const WATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest any single request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole run is abandoned after this long.
const WATCHDOG: Duration = Duration::from_secs(300);

/// Targets.
const TARGET_GET_P99: f64 = 1.5;
const TARGET_LIST: f64 = 2.0;
const TARGET_CREATE_VS_STORE: f64 = 0.5;
const TARGET_WATCH_P99: Duration = Duration::from_millis(10);

const CM_PATH: &str = "/api/v1/namespaces/default/configmaps";
const GET_NAME: &str = "cm-00000";

static PAYLOAD: LazyLock<String> =
    LazyLock::new(|| (0..PAYLOAD_BYTES).map(|i| (b'a' + (i % 26) as u8) as char).collect());

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> BenchResult<()> {
    let started = Instant::now();
    watchdog(WATCHDOG, "a hang in the server, the store or sled?");
    let tmp = tempfile::tempdir()?;
    let store_tmp = tempfile::tempdir()?;
    println!(
        "carrel-apiserver request path over TLS and HTTP/2: every ratio is ours / baseline, both \
         measured in this run"
    );
    println!(
        "temp dirs: {} (server), {} (store)",
        tmp.path().display(),
        store_tmp.path().display()
    );
    println!("cores: {}", thread::available_parallelism().map_or(0, |n| n.get()));
    // Held until the end of `main`.
    let awake = hold_cpus_awake();
    let idle_note = match &awake {
        Ok(_) => "CPU idle states held off".to_owned(),
        Err(e) => {
            println!(
                "could not hold the CPUs out of their idle states ({e}): a bare server's latency \
                 then includes the CPUs' wake-ups, which flatters ours"
            );
            "CPU idle states NOT held off: the baseline's latency includes CPU wake-ups".to_owned()
        }
    };
    println!("{idle_note}");

    let server_rt = runtime("server")?;
    let client_rt = runtime("client")?;

    let certs = Certificates::generate(&["127.0.0.1".into(), "localhost".into()])?;
    let config = certs.server_config()?;
    let connector = tls_connector(&certs)?;
    let ours = start_ours(&server_rt, tmp.path(), &certs, config.clone())?;
    let ours_ep = Endpoint::new(ours.addr, connector.clone());

    section("setup");
    let canned = client_rt.block_on(async {
        let t = Instant::now();
        fill(&ours_ep).await?;
        println!("  created {LIST_OBJECTS} ConfigMaps in {}", ms(t.elapsed()));
        capture(&ours_ep, &ours.api.current_revision().to_string()).await
    })?;
    println!(
        "  captured responses: GET {} B, LIST {} B, CREATE {} B, watch event {} B",
        canned.get.body.len(),
        canned.list.body.len(),
        canned.create.body.len(),
        canned.event.len()
    );
    let store_value = canned.create.body.clone();
    let canned = Arc::new(canned);
    let bare_ep = Endpoint::new(start_bare(&server_rt, &canned, config)?, connector);
    let eps = Endpoints { ours: ours_ep, bare: bare_ep };

    let mut table = Table::default();

    // GET at 1 and 2 clients.
    table.header(&format!(
        "GET of one ConfigMap over TLS + HTTP/2 (bare = hyper with the same TLS, same bytes; \
         {idle_note})"
    ));
    for clients in [1, 2] {
        section(&format!("GET, {clients} client(s)"));
        let pair = compare(&client_rt, &eps, Op::Get, clients)?;
        let what = format!("GET, {clients} client(s)");
        latency_rows(&mut table, &what, &pair, None, Some(TARGET_GET_P99));
        rate_row(&mut table, &what, &pair);
    }

    section("LIST 1,000, 1 client");
    let pair = compare(&client_rt, &eps, Op::List, 1)?;
    table.header(&format!(
        "LIST of {LIST_OBJECTS} ConfigMaps ({} B) over TLS + HTTP/2, 1 client",
        canned.list.body.len()
    ));
    latency_rows(&mut table, "LIST, 1 client", &pair, Some(TARGET_LIST), Some(TARGET_LIST));
    rate_row(&mut table, "LIST, 1 client", &pair);

    // Durable CREATE, with the store's own 32-writer rate in rounds between ours.
    section(&format!("durable CREATE, {WRITERS} clients"));
    let durable = SledStore::open(store_tmp.path().join("store"), Options::create())?;
    let (mut ours_run, mut bare_run, mut store_run) =
        (Run::default(), Run::default(), Run::default());
    let (ours_senders, bare_senders) = client_rt.block_on(async {
        let ours = connect_all(&eps.ours, WRITERS).await?;
        let bare = connect_all(&eps.bare, WRITERS).await?;
        warm_up(&eps.ours, &ours, Op::Create, "cw-o").await?;
        warm_up(&eps.bare, &bare, Op::Create, "cw-b").await?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((ours, bare))
    })?;
    for round in 0..ROUNDS {
        let store =
            store_writers(&durable, WRITERS, &store_value, &format!("r{round}"), ROUND_TIME)?;
        println!("  round {round}: Store::create, {WRITERS} threads: {}", store.describe());
        store_run.merge(store);
        let o = client_rt.block_on(load(
            &eps.ours,
            &ours_senders,
            Op::Create,
            &format!("c{round}-o"),
            ROUND_TIME,
        ))?;
        println!("  round {round}: ours: {}", o.describe());
        ours_run.merge(o);
        let b = client_rt.block_on(load(
            &eps.bare,
            &bare_senders,
            Op::Create,
            &format!("c{round}-b"),
            ROUND_TIME,
        ))?;
        println!("  round {round}: bare: {}", b.describe());
        bare_run.merge(b);
    }
    drop((ours_senders, bare_senders, durable));
    table.header(&format!(
        "Durable CREATE, {WRITERS} clients, against the store's own durable write from \
         {WRITERS} threads ({} B values)",
        store_value.len()
    ));
    table.row(
        "CREATE: creates/s",
        rate(ours_run.rate()),
        format!("Store::create {}", rate(store_run.rate())),
        ratio(ours_run.rate(), store_run.rate()),
        verdict(
            ours_run.rate() >= TARGET_CREATE_VS_STORE * store_run.rate(),
            format!(">= {TARGET_CREATE_VS_STORE}x"),
        ),
    );
    table.row(
        "CREATE: p50 / p99",
        format!("{} / {}", ms(ours_run.p50()), ms(ours_run.p99())),
        format!("Store::create {} / {}", ms(store_run.p50()), ms(store_run.p99())),
        ratio(secs(ours_run.p99()), secs(store_run.p99())),
        String::new(),
    );
    table.row(
        "CREATE: creates/s",
        rate(ours_run.rate()),
        format!("bare {}", rate(bare_run.rate())),
        ratio(ours_run.rate(), bare_run.rate()),
        String::new(),
    );

    // Watch delivery.
    section(&format!("watch, {WATCHERS} watchers over {WATCH_CONNECTIONS} connections"));
    let (mut ours_watch, mut bare_watch) = (WatchRun::default(), WatchRun::default());
    for round in 0..WATCH_ROUNDS {
        let rv = ours.api.current_revision().to_string();
        let o = client_rt.block_on(watch_run(&eps.ours, &rv, &format!("w{round}-o")))?;
        println!("  round {round}: ours: {}", o.describe());
        ours_watch.merge(o);
        let b = client_rt.block_on(watch_run(&eps.bare, &rv, &format!("w{round}-b")))?;
        println!("  round {round}: bare: {}", b.describe());
        bare_watch.merge(b);
    }
    table.header(&format!(
        "Watch: {WATCHERS} watchers over {WATCH_CONNECTIONS} HTTP/2 connections, {} events \
         created one at a time",
        WATCH_EVENTS * WATCH_ROUNDS
    ));
    let (o, b) = (&ours_watch, &bare_watch);
    let rows = [
        ("CREATE response -> event: p50", &o.after_response, &b.after_response, 50.0),
        ("CREATE response -> event: p99", &o.after_response, &b.after_response, 99.0),
        ("CREATE sent -> event: p50", &o.after_send, &b.after_send, 50.0),
        ("CREATE sent -> event: p99", &o.after_send, &b.after_send, 99.0),
        ("CREATE response -> last watcher: p50", &o.last, &b.last, 50.0),
        ("CREATE response -> last watcher: p99", &o.last, &b.last, 99.0),
    ];
    for (i, (what, o, b, p)) in rows.into_iter().enumerate() {
        let (o, b) = (o.percentile(p), b.percentile(p));
        let target = match i {
            1 => verdict(o <= TARGET_WATCH_P99, format!("<= {}", ms(TARGET_WATCH_P99))),
            _ => String::new(),
        };
        table.row(what, ms(o), format!("bare {}", ms(b)), ratio(secs(o), secs(b)), target);
    }
    table.row(
        "opening the watches: p50",
        ms(o.open.p50()),
        format!("bare {}", ms(b.open.p50())),
        ratio(secs(o.open.p50()), secs(b.open.p50())),
        String::new(),
    );

    table.print();
    println!();
    println!("peak memory of the process (servers + clients), VmHWM: {}", vm("VmHWM"));
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    client_rt.shutdown_timeout(Duration::from_secs(5));
    server_rt.shutdown_timeout(Duration::from_secs(5));
    drop(awake);
    Ok(())
}

/// Ours and the baseline.
struct Endpoints {
    ours: Arc<Endpoint>,
    bare: Arc<Endpoint>,
}

/// Ours and the baseline under the same load.
struct Pair {
    ours: Run,
    bare: Run,
}

/// `op` from `clients` clients against ours and the baseline: each client's connection warmed
/// up, then `ROUNDS` rounds on each, alternating (the order swapped every round), pooled.
fn compare(rt: &Runtime, eps: &Endpoints, op: Op, clients: usize) -> BenchResult<Pair> {
    rt.block_on(async {
        let ours = connect_all(&eps.ours, clients).await?;
        let bare = connect_all(&eps.bare, clients).await?;
        warm_up(&eps.ours, &ours, op, "wu-o").await?;
        warm_up(&eps.bare, &bare, op, "wu-b").await?;
        let mut pair = Pair { ours: Run::default(), bare: Run::default() };
        for round in 0..ROUNDS {
            for ours_now in [round % 2 == 0, round % 2 == 1] {
                let (name, ep, senders, run) = match ours_now {
                    true => ("ours", &eps.ours, &ours, &mut pair.ours),
                    false => ("bare", &eps.bare, &bare, &mut pair.bare),
                };
                let r = load(ep, senders, op, &format!("r{round}-{name}"), ROUND_TIME).await?;
                println!("  round {round}: {name}: {}", r.describe());
                run.merge(r);
            }
        }
        Ok(pair)
    })
}

/// p50 and p99 rows of `pair`, each with a verdict where a target (a ratio) is given.
fn latency_rows(
    table: &mut Table,
    what: &str,
    pair: &Pair,
    p50_target: Option<f64>,
    p99_target: Option<f64>,
) {
    for (p, target) in [(50.0, p50_target), (99.0, p99_target)] {
        let (o, b) = (pair.ours.percentile(p), pair.bare.percentile(p));
        let target = target
            .map_or_else(String::new, |t| verdict(secs(o) <= t * secs(b), format!("<= {t}x")));
        table.row(
            &format!("{what}: p{p}"),
            ms(o),
            format!("bare p{p} {}", ms(b)),
            ratio(secs(o), secs(b)),
            target,
        );
    }
}

fn rate_row(table: &mut Table, what: &str, pair: &Pair) {
    table.row(
        &format!("{what}: requests/s"),
        rate(pair.ours.rate()),
        format!("bare {}", rate(pair.bare.rate())),
        ratio(pair.ours.rate(), pair.bare.rate()),
        String::new(),
    );
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A field of /proc/self/status, such as `VmHWM`.
fn vm(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map_or_else(|| "unknown".to_owned(), |v| v.trim().to_owned())
}
