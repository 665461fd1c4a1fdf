//! Benchmarks for `carrel-apiserver` over HTTP/1.1 on loopback, each figure printed beside a
//! baseline measured in the same run.
//!
//! Run with `cargo bench -p carrel-apiserver --bench api`. It is a plain program (no harness):
//! every loop is bounded both in count and in time, a watchdog ends a hung run, and the whole run
//! takes well under two minutes.
//!
//! The API server runs in this process on 127.0.0.1:0 over a fresh `SledStore`, on a tokio runtime
//! of its own (2 workers). The clients run on a second runtime (2 workers): one task per client,
//! each with its own HTTP/1.1 keep-alive connection (hyper's `client::conn::http1`).
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | GET, LIST of 1,000, CREATE, UPDATE; 1 and 32 clients | the API server | a bare hyper `server::conn::http1` server that answers each request type with the bytes our server returned for it |
//! | durable CREATE, 1 client | the API server | `Store::create` of the same bytes on a second store, 1 writer |
//! | CREATE over TLS, 32 clients | `carrel_apiserver::tls::serve` | the bare hyper server behind the same rustls configuration |
//! | watch delivery, 32 watchers × 200 events | `?watch=true&resourceVersion=<rv>` | the bare server streaming the captured event line to every watcher for each POST |

#![allow(clippy::print_stdout)]

mod clients;
mod servers;

use std::sync::{Arc, LazyLock};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_apiserver::tls::Certificates;
use carrel_apiserver::{Api, Server};
use carrel_bench::{ms, rate, ratio, runtime, section, verdict, watchdog, Run, Table};
use carrel_store::{Options, SledStore};
use http_body_util::Full;
use tokio_rustls::TlsAcceptor;

use clients::{
    capture, compare, fill, load, store_writers, store_writes, tls_connector, watch_run, Endpoint,
    Op, Pair, WatchRun,
};
use servers::{start_bare, start_ours};

/// Client counts measured.
const CLIENTS: [usize; 2] = [1, 32];
/// How long each load measurement runs, and its count bound per client.
const LOAD_TIME: Duration = Duration::from_secs(2);
const REQUESTS_PER_CLIENT_CAP: usize = 200_000;
/// ConfigMaps in the listed namespace.
const LIST_OBJECTS: usize = 1_000;
/// Size of each ConfigMap's `data.payload` value.
const PAYLOAD_BYTES: usize = 512;
/// The store-only durable write baseline runs in this many rounds around the API's CREATE.
const STORE_ROUNDS: usize = 2;
const STORE_ROUND_TIME: Duration = Duration::from_secs(1);
const STORE_WRITES_CAP: usize = 50_000;
/// Watch delivery: watchers, events, repetitions (the median total is reported).
const WATCHERS: usize = 32;
const WATCH_EVENTS: usize = 200;
const WATCH_REPEATS: usize = 3;
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest any single request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole run is abandoned after this long.
const WATCHDOG: Duration = Duration::from_secs(240);

/// Targets.
const TARGET_TLS_CREATES: f64 = 5_000.0;
const TARGET_CREATE_VS_STORE: f64 = 2.0;
const TARGET_GET_P99: f64 = 2.0;

const CM_PATH: &str = "/api/v1/namespaces/default/configmaps";
const GET_NAME: &str = "cm-00000";

static PAYLOAD: LazyLock<String> =
    LazyLock::new(|| (0..PAYLOAD_BYTES).map(|i| (b'a' + (i % 26) as u8) as char).collect());

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

fn main() -> BenchResult<()> {
    let started = Instant::now();
    watchdog(WATCHDOG, "a hang in the server, the store or sled?");
    let tmp = tempfile::tempdir()?;
    let store_tmp = tempfile::tempdir()?;
    println!(
        "carrel-apiserver benchmark: every ratio is ours / baseline, both measured in this run"
    );
    println!(
        "temp dirs: {} (server), {} (store)",
        tmp.path().display(),
        store_tmp.path().display()
    );
    println!("cores: {}", thread::available_parallelism().map_or(0, |n| n.get()));

    let server_rt = runtime("server")?;
    let client_rt = runtime("client")?;

    // Our server, plain and TLS, over one store.
    let store = SledStore::open(tmp.path().join("store"), Options::create())?;
    let api = Arc::new(Api::new(Arc::new(store))?);
    let server = Arc::new(Server::new(api.clone(), ""));
    let certs = Certificates::generate(&["127.0.0.1".into(), "localhost".into()])?;
    let tls_config = certs.server_config()?;
    let connector = tls_connector(&certs.ca_pem)?;
    let ours = Endpoint::new(start_ours(&server_rt, &server, None, false)?, None);
    let ours_tls = Endpoint::new(
        start_ours(&server_rt, &server, Some(tls_config.clone()), false)?,
        Some(connector.clone()),
    );
    // For the watch only: the same server, with TCP_NODELAY set on accepted sockets by the
    // benchmark's listener (`main.rs` and `tls::serve` leave Nagle's algorithm on).
    let ours_nodelay = Endpoint::new(start_ours(&server_rt, &server, None, true)?, None);

    section("setup");
    let canned = client_rt.block_on(async {
        let t = Instant::now();
        fill(&ours).await?;
        println!("  created {LIST_OBJECTS} ConfigMaps in {}", ms(t.elapsed()));
        capture(&ours, &api).await
    })?;
    println!(
        "  captured responses: GET {} B, LIST {} B, CREATE {} B, UPDATE {} B, watch event {} B",
        canned.get.body.len(),
        canned.list.body.len(),
        canned.create.body.len(),
        canned.update.body.len(),
        canned.event.len()
    );
    let store_value = canned.create.body.clone();
    let canned = Arc::new(canned);
    let bare = Endpoint::new(start_bare(&server_rt, &canned, None, false)?, None);
    let bare_tls = Endpoint::new(
        start_bare(&server_rt, &canned, Some(TlsAcceptor::from(tls_config)), false)?,
        Some(connector),
    );
    let bare_nodelay = Endpoint::new(start_bare(&server_rt, &canned, None, true)?, None);
    memory("after setup");

    let mut table = Table::default();
    let mut results = Vec::new();

    // GET and LIST.
    for op in [Op::Get, Op::List] {
        section(op.name());
        for clients in CLIENTS {
            let pair = client_rt.block_on(compare(&ours, &bare, op, clients, "x"))?;
            results.push((op, clients, pair));
        }
        memory(&format!("after {}", op.name()));
    }

    // CREATE, with the store's own durable write measured around the single-client run.
    section("CREATE");
    let durable = SledStore::open(store_tmp.path().join("store"), Options::create())?;
    let mut store_run = Run::default();
    let mut create_1 = None;
    for round in 0..STORE_ROUNDS {
        let r = store_writes(&durable, round, &store_value)?;
        println!("  round {round}: store create, 1 writer: {}", r.describe());
        store_run.merge(r);
        if round == 0 {
            let run = client_rt.block_on(load(&ours, Op::Create, 1, "cr-o1"))?;
            println!("  ours, 1 client: {}", run.describe());
            create_1 = Some(run);
        }
    }
    println!("  pooled store create, 1 writer: {}", store_run.describe());
    let create_1 = create_1.ok_or("no single-client CREATE run")?;
    let store_32 = store_writers(&durable, 32, &store_value)?;
    println!("  store create, 32 writer threads: {}", store_32.describe());
    drop(durable);
    let bare_1 = client_rt.block_on(load(&bare, Op::Create, 1, "cr-b1"))?;
    println!("  bare, 1 client: {}", bare_1.describe());
    results.push((Op::Create, 1, Pair { ours: create_1, bare: bare_1 }));
    let pair = client_rt.block_on(compare(&ours, &bare, Op::Create, 32, "cr"))?;
    let create_32_rate = pair.ours.rate();
    results.push((Op::Create, 32, pair));
    memory("after CREATE");

    section("UPDATE");
    for clients in CLIENTS {
        let pair = client_rt.block_on(compare(&ours, &bare, Op::Update, clients, "up"))?;
        results.push((Op::Update, clients, pair));
    }
    memory("after UPDATE");

    section("CREATE over TLS");
    let tls = client_rt.block_on(compare(&ours_tls, &bare_tls, Op::Create, 32, "ct"))?;
    memory("after CREATE over TLS");

    section("watch");
    let watch_servers = [
        ("ours", &ours, "wa"),
        ("bare", &bare, "wb"),
        ("ours, TCP_NODELAY", &ours_nodelay, "wc"),
        ("bare, TCP_NODELAY", &bare_nodelay, "wd"),
    ];
    let mut watches: Vec<Vec<WatchRun>> = watch_servers.iter().map(|_| Vec::new()).collect();
    for repeat in 0..WATCH_REPEATS {
        for ((name, ep, tag), runs) in watch_servers.iter().zip(&mut watches) {
            let rv = api.current_revision().to_string();
            let run = client_rt.block_on(watch_run(ep, &rv, &format!("{tag}{repeat}")))?;
            println!("  {name}, repeat {repeat}: {}", run.describe());
            runs.push(run);
        }
    }
    memory("after watch");

    // The table.
    table.header(
        "Requests over HTTP/1.1 on loopback (ConfigMaps; bare = hyper returning the same bytes)",
    );
    for (op, clients, pair) in &results {
        let what = format!("{}, {clients} client(s)", op.name());
        let (o, b) = (&pair.ours, &pair.bare);
        table.row(
            &format!("{what}: p50"),
            ms(o.p50()),
            format!("bare p50 {}", ms(b.p50())),
            ratio(secs(o.p50()), secs(b.p50())),
            String::new(),
        );
        let p99_ratio = secs(o.p99()) / secs(b.p99());
        table.row(
            &format!("{what}: p99"),
            ms(o.p99()),
            format!("bare p99 {}", ms(b.p99())),
            ratio(secs(o.p99()), secs(b.p99())),
            if *op == Op::Get {
                verdict(p99_ratio <= TARGET_GET_P99, format!("<= {TARGET_GET_P99}x"))
            } else {
                String::new()
            },
        );
        table.row(
            &format!("{what}: requests/s"),
            rate(o.rate()),
            format!("bare {}", rate(b.rate())),
            ratio(o.rate(), b.rate()),
            String::new(),
        );
    }

    let create_1 = &results
        .iter()
        .find(|(op, clients, _)| *op == Op::Create && *clients == 1)
        .ok_or("no single-client CREATE")?
        .2
        .ours;
    table.header(&format!(
        "Durable CREATE against the store's own durable write ({} B values)",
        store_value.len()
    ));
    let create_ratio = secs(create_1.p50()) / secs(store_run.p50());
    table.row(
        "CREATE, 1 client: p50",
        ms(create_1.p50()),
        format!("Store::create p50 {}", ms(store_run.p50())),
        ratio(secs(create_1.p50()), secs(store_run.p50())),
        verdict(create_ratio <= TARGET_CREATE_VS_STORE, format!("<= {TARGET_CREATE_VS_STORE}x")),
    );
    table.row(
        "CREATE, 1 client: p99",
        ms(create_1.p99()),
        format!("Store::create p99 {}", ms(store_run.p99())),
        ratio(secs(create_1.p99()), secs(store_run.p99())),
        String::new(),
    );
    table.row(
        "CREATE, 1 client: creates/s",
        rate(create_1.rate()),
        format!("Store::create {}", rate(store_run.rate())),
        ratio(create_1.rate(), store_run.rate()),
        String::new(),
    );

    table.row(
        "CREATE, 32 clients: creates/s",
        rate(create_32_rate),
        format!("Store::create, 32 threads {}", rate(store_32.rate())),
        ratio(create_32_rate, store_32.rate()),
        String::new(),
    );

    table.header("CREATE over TLS (rustls, HTTP/1.1), 32 clients");
    table.row(
        "TLS CREATE, 32 clients: creates/s",
        rate(tls.ours.rate()),
        format!("bare over TLS {}", rate(tls.bare.rate())),
        ratio(tls.ours.rate(), tls.bare.rate()),
        verdict(tls.ours.rate() >= TARGET_TLS_CREATES, format!(">= {TARGET_TLS_CREATES:.0}/s")),
    );
    table.row(
        "TLS CREATE, 32 clients: creates/s",
        rate(tls.ours.rate()),
        format!("ours, plain HTTP {}", rate(create_32_rate)),
        ratio(tls.ours.rate(), create_32_rate),
        String::new(),
    );
    table.row(
        "TLS CREATE, 32 clients: p50 / p99",
        format!("{} / {}", ms(tls.ours.p50()), ms(tls.ours.p99())),
        format!("bare {} / {}", ms(tls.bare.p50()), ms(tls.bare.p99())),
        ratio(secs(tls.ours.p50()), secs(tls.bare.p50())),
        String::new(),
    );

    let mut watches = watches.into_iter().map(WatchRun::summarize);
    let (wo, wb) = (watches.next().ok_or("no watch")?, watches.next().ok_or("no watch")?);
    let (wo_nd, wb_nd) = (watches.next().ok_or("no watch")?, watches.next().ok_or("no watch")?);
    table.header(&format!(
        "Watch: {WATCHERS} watchers, 1 writer creating {WATCH_EVENTS} ConfigMaps one at a time \
         (median of {WATCH_REPEATS}; latencies pooled)"
    ));
    table.row(
        "every event at every watcher: time",
        ms(wo.total),
        format!("bare {}", ms(wb.total)),
        ratio(secs(wo.total), secs(wb.total)),
        String::new(),
    );
    table.row(
        "the writer's creates: time",
        ms(wo.writes),
        format!("bare {}", ms(wb.writes)),
        ratio(secs(wo.writes), secs(wb.writes)),
        String::new(),
    );
    table.row(
        "after the last create's response: time",
        ms(wo.tail),
        format!("bare {}", ms(wb.tail)),
        ratio(secs(wo.tail), secs(wb.tail)),
        String::new(),
    );
    table.row(
        "POST sent -> event at a watcher: p50",
        ms(wo.delivery.p50()),
        format!("bare {}", ms(wb.delivery.p50())),
        ratio(secs(wo.delivery.p50()), secs(wb.delivery.p50())),
        String::new(),
    );
    table.row(
        "POST sent -> event at a watcher: p99",
        ms(wo.delivery.p99()),
        format!("bare {}", ms(wb.delivery.p99())),
        ratio(secs(wo.delivery.p99()), secs(wb.delivery.p99())),
        String::new(),
    );
    table.row(
        "with TCP_NODELAY: after the last create",
        ms(wo_nd.tail),
        format!("bare, TCP_NODELAY {}", ms(wb_nd.tail)),
        ratio(secs(wo_nd.tail), secs(wb_nd.tail)),
        String::new(),
    );
    table.row(
        "with TCP_NODELAY: event at a watcher: p50",
        ms(wo_nd.delivery.p50()),
        format!("bare, TCP_NODELAY {}", ms(wb_nd.delivery.p50())),
        ratio(secs(wo_nd.delivery.p50()), secs(wb_nd.delivery.p50())),
        String::new(),
    );
    table.row(
        "with TCP_NODELAY: event at a watcher: p99",
        ms(wo_nd.delivery.p99()),
        format!("bare, TCP_NODELAY {}", ms(wb_nd.delivery.p99())),
        ratio(secs(wo_nd.delivery.p99()), secs(wb_nd.delivery.p99())),
        String::new(),
    );
    let deliveries = (WATCHERS * WATCH_EVENTS) as f64;
    table.row(
        "deliveries/s",
        rate(deliveries / secs(wo.total)),
        format!("bare {}", rate(deliveries / secs(wb.total))),
        ratio(secs(wb.total), secs(wo.total)),
        String::new(),
    );

    table.print();
    println!();
    println!("peak memory of the process (server + clients), VmHWM: {}", vm("VmHWM"));
    println!("current memory, VmRSS: {}", vm("VmRSS"));
    println!("total benchmark time: {:.1} s", started.elapsed().as_secs_f64());
    client_rt.shutdown_timeout(Duration::from_secs(5));
    server_rt.shutdown_timeout(Duration::from_secs(5));
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Figures
// ----------------------------------------------------------------------------------------------

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

fn memory(when: &str) {
    println!("  VmHWM {when}: {}", vm("VmHWM"));
}

// ----------------------------------------------------------------------------------------------
// Output
// ----------------------------------------------------------------------------------------------
