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

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::thread;
use std::time::{Duration, Instant};

use axum::serve::ListenerExt;
use bytes::Bytes;
use carrel_apiserver::tls::Certificates;
use carrel_apiserver::{router, Api, Server};
use carrel_bench::{median, ms, rate, ratio, runtime, section, verdict, watchdog, Run, Table};
use carrel_store::{Options, SledStore, Store};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{broadcast, Barrier};
use tokio_rustls::{TlsAcceptor, TlsConnector};

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
// Servers
// ----------------------------------------------------------------------------------------------

/// Our server on 127.0.0.1:0, as `main.rs` serves it: `axum::serve` for plain HTTP,
/// `tls::serve` for TLS.
fn start_ours(
    rt: &Runtime,
    server: &Arc<Server>,
    tls: Option<Arc<rustls::ServerConfig>>,
    nodelay: bool,
) -> BenchResult<SocketAddr> {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let app = router(server.clone());
    rt.spawn(async move {
        match tls {
            Some(config) => {
                carrel_apiserver::tls::serve(listener, config, app, std::future::pending()).await
            }
            None if nodelay => {
                let listener = listener.tap_io(|tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                if let Err(e) = axum::serve(listener, app).await {
                    println!("our server stopped: {e}");
                }
            }
            None => {
                if let Err(e) = axum::serve(listener, app).await {
                    println!("our server stopped: {e}");
                }
            }
        }
    });
    Ok(addr)
}

/// One response, as a client saw it.
#[derive(Clone)]
struct Reply {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

/// What the bare server answers: one real response of our server per request type.
struct Canned {
    get: Reply,
    list: Reply,
    create: Reply,
    update: Reply,
    /// One line of our server's watch stream, newline included.
    event: Bytes,
    /// Every POST sends `event` to every open watch.
    events: broadcast::Sender<Bytes>,
}

type BareBody = UnsyncBoxBody<Bytes, Infallible>;

/// The baseline: hyper's HTTP/1.1 server answering every request with canned bytes.
/// Like our server, it leaves Nagle's algorithm on unless `nodelay`.
fn start_bare(
    rt: &Runtime,
    canned: &Arc<Canned>,
    tls: Option<TlsAcceptor>,
    nodelay: bool,
) -> BenchResult<SocketAddr> {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let canned = canned.clone();
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            if nodelay {
                let _ = tcp.set_nodelay(true);
            }
            let canned = canned.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let canned = canned.clone();
                    async move { Ok::<_, Infallible>(bare_answer(&canned, request).await) }
                });
                let http = hyper::server::conn::http1::Builder::new();
                let _ = match tls {
                    None => http.serve_connection(TokioIo::new(tcp), service).await,
                    Some(acceptor) => match acceptor.accept(tcp).await {
                        Ok(stream) => http.serve_connection(TokioIo::new(stream), service).await,
                        Err(_) => return,
                    },
                };
            });
        }
    });
    Ok(addr)
}

async fn bare_answer(canned: &Canned, request: Request<Incoming>) -> Response<BareBody> {
    let method = request.method().clone();
    let watch = request.uri().query().is_some_and(|q| q.contains("watch=true"));
    let list = request.uri().path().ends_with("/configmaps");
    // Read the body, as any server must.
    if request.into_body().collect().await.is_err() {
        return canned_response(StatusCode::BAD_REQUEST, None, Full::default().boxed_unsync());
    }
    let reply = match method {
        Method::GET if watch => {
            let rx = canned.events.subscribe();
            let stream = futures::stream::unfold(rx, |mut rx| async move {
                loop {
                    match rx.recv().await {
                        Ok(line) => return Some((Ok(Frame::data(line)), rx)),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            });
            let body = StreamBody::new(stream).boxed_unsync();
            let content_type = Some(HeaderValue::from_static("application/json"));
            return canned_response(StatusCode::OK, content_type, body);
        }
        Method::GET if list => &canned.list,
        Method::GET => &canned.get,
        Method::POST => {
            let _ = canned.events.send(canned.event.clone());
            &canned.create
        }
        Method::PUT => &canned.update,
        _ => return canned_response(StatusCode::NOT_FOUND, None, Full::default().boxed_unsync()),
    };
    canned_response(
        reply.status,
        reply.content_type.clone(),
        Full::new(reply.body.clone()).boxed_unsync(),
    )
}

fn canned_response(
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: BareBody,
) -> Response<BareBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response.headers_mut().insert(CONTENT_TYPE, content_type);
    }
    response
}

// ----------------------------------------------------------------------------------------------
// Clients
// ----------------------------------------------------------------------------------------------

/// Where a client connects.
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    host: String,
    tls: Option<TlsConnector>,
}

impl Endpoint {
    fn new(addr: SocketAddr, tls: Option<TlsConnector>) -> Arc<Endpoint> {
        Arc::new(Endpoint { addr, host: addr.to_string(), tls })
    }
}

fn tls_connector(ca_pem: &str) -> BenchResult<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A new keep-alive HTTP/1.1 connection (TLS when the endpoint has a connector).
async fn connect(ep: &Endpoint) -> BenchResult<Sender> {
    let tcp = TcpStream::connect(ep.addr).await?;
    tcp.set_nodelay(true)?;
    match &ep.tls {
        None => handshake(TokioIo::new(tcp)).await,
        Some(connector) => {
            let name = ServerName::try_from(ep.addr.ip().to_string())?;
            let stream = connector.connect(name, tcp).await?;
            handshake(TokioIo::new(stream)).await
        }
    }
}

async fn handshake<I>(io: I) -> BenchResult<Sender>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn request(
    ep: &Endpoint,
    method: Method,
    path: &str,
    body: Option<String>,
) -> BenchResult<Request<Full<Bytes>>> {
    let mut builder = Request::builder().method(method).uri(path).header(HOST, ep.host.as_str());
    if body.is_some() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    Ok(builder.body(Full::new(body.map(Bytes::from).unwrap_or_default()))?)
}

/// Send one request and read the whole response.
async fn exchange(sender: &mut Sender, request: Request<Full<Bytes>>) -> BenchResult<Reply> {
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Reply { status, content_type, body })
    })
    .await
    .map_err(|_| "request timed out")?
}

fn expect(reply: &Reply, status: StatusCode, what: &str) -> BenchResult<()> {
    if reply.status == status {
        return Ok(());
    }
    let body = String::from_utf8_lossy(&reply.body[..reply.body.len().min(400)]).into_owned();
    Err(format!("{what}: got {}, wanted {status}: {body}", reply.status).into())
}

/// A ConfigMap as a client sends it.
fn configmap(name: &str, resource_version: Option<&str>, index: usize) -> String {
    let rv =
        resource_version.map(|rv| format!(",\"resourceVersion\":\"{rv}\"")).unwrap_or_default();
    let payload = PAYLOAD.as_str();
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\
         \"labels\":{{\"app\":\"bench\"}}{rv}}},\"data\":{{\"index\":\"{index}\",\
         \"payload\":\"{payload}\"}}}}"
    )
}

/// The `metadata.resourceVersion` of an object in a response body.
fn resource_version(body: &[u8]) -> BenchResult<String> {
    let text = std::str::from_utf8(body)?;
    let key = "\"resourceVersion\":\"";
    let start = text.find(key).ok_or("no resourceVersion in the response")? + key.len();
    let len = text[start..].find('"').ok_or("unterminated resourceVersion")?;
    Ok(text[start..start + len].to_owned())
}

/// A request type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    List,
    Create,
    Update,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::List => "LIST 1,000",
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
        }
    }

    fn expected(self) -> StatusCode {
        match self {
            Op::Create => StatusCode::CREATED,
            _ => StatusCode::OK,
        }
    }

    /// Request `index` of client `client` in a run tagged `tag`; `rv` is the client's object's
    /// current resourceVersion (UPDATE only).
    fn request(
        self,
        ep: &Endpoint,
        tag: &str,
        client: usize,
        index: usize,
        rv: &str,
    ) -> BenchResult<Request<Full<Bytes>>> {
        match self {
            Op::Get => request(ep, Method::GET, &format!("{CM_PATH}/{GET_NAME}"), None),
            Op::List => request(ep, Method::GET, CM_PATH, None),
            Op::Create => {
                let name = format!("{tag}-c{client:02}-{index:07}");
                request(ep, Method::POST, CM_PATH, Some(configmap(&name, None, index)))
            }
            Op::Update => {
                let name = update_name(tag, client);
                let path = format!("{CM_PATH}/{name}");
                request(ep, Method::PUT, &path, Some(configmap(&name, Some(rv), index)))
            }
        }
    }
}

fn update_name(tag: &str, client: usize) -> String {
    format!("{tag}-u{client:02}")
}

/// Create the listed ConfigMaps `cm-00000`..`cm-00999`, from 8 connections.
async fn fill(ep: &Arc<Endpoint>) -> BenchResult<()> {
    const FILLERS: usize = 8;
    let mut tasks = Vec::new();
    for t in 0..FILLERS {
        let mut sender = connect(ep).await?;
        let ep = ep.clone();
        tasks.push(tokio::spawn(async move {
            for n in (t..LIST_OBJECTS).step_by(FILLERS) {
                let body = configmap(&format!("cm-{n:05}"), None, n);
                let reply =
                    exchange(&mut sender, request(&ep, Method::POST, CM_PATH, Some(body))?).await?;
                expect(&reply, StatusCode::CREATED, "filling the namespace")?;
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// One real response of our server per request type, and one watch event line. The namespace
/// holds exactly `LIST_OBJECTS` ConfigMaps again afterwards.
async fn capture(ep: &Arc<Endpoint>, api: &Api) -> BenchResult<Canned> {
    let mut client = connect(ep).await?;
    let mut watcher = connect(ep).await?;
    let path = format!("{CM_PATH}?watch=true&resourceVersion={}", api.current_revision());
    watcher.ready().await?;
    let watch = tokio::time::timeout(
        REQUEST_TIMEOUT,
        watcher.send_request(request(ep, Method::GET, &path, None)?),
    )
    .await
    .map_err(|_| "opening a watch timed out")??;
    if watch.status() != StatusCode::OK {
        return Err(format!("watch: got {}", watch.status()).into());
    }

    let name = "capture-object";
    let body = configmap(name, None, 0);
    let create = exchange(&mut client, request(ep, Method::POST, CM_PATH, Some(body))?).await?;
    expect(&create, StatusCode::CREATED, "CREATE")?;

    let mut stream = watch.into_body();
    let mut line = Vec::new();
    let event = loop {
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            break Bytes::copy_from_slice(&line[..=end]);
        }
        let frame = tokio::time::timeout(REQUEST_TIMEOUT, stream.frame())
            .await
            .map_err(|_| "no watch event")?
            .ok_or("the watch ended")??;
        if let Ok(data) = frame.into_data() {
            line.extend_from_slice(&data);
        }
    };
    drop(stream);

    let rv = resource_version(&create.body)?;
    let path = format!("{CM_PATH}/{name}");
    let body = configmap(name, Some(&rv), 1);
    let update = exchange(&mut client, request(ep, Method::PUT, &path, Some(body))?).await?;
    expect(&update, StatusCode::OK, "UPDATE")?;
    let delete = exchange(&mut client, request(ep, Method::DELETE, &path, None)?).await?;
    expect(&delete, StatusCode::OK, "DELETE")?;

    let get = exchange(&mut client, Op::Get.request(ep, "", 0, 0, "")?).await?;
    expect(&get, StatusCode::OK, "GET")?;
    let list = exchange(&mut client, Op::List.request(ep, "", 0, 0, "")?).await?;
    expect(&list, StatusCode::OK, "LIST")?;
    let items = serde_json::from_slice::<serde_json::Value>(&list.body)?["items"]
        .as_array()
        .map_or(0, Vec::len);
    if items != LIST_OBJECTS {
        return Err(format!("the list has {items} items, wanted {LIST_OBJECTS}").into());
    }
    let (events, _) = broadcast::channel(4 * WATCH_EVENTS);
    Ok(Canned { get, list, create, update, event, events })
}

/// Ours and the bare server, under the same load.
struct Pair {
    ours: Run,
    bare: Run,
}

async fn compare(
    ours: &Arc<Endpoint>,
    bare: &Arc<Endpoint>,
    op: Op,
    clients: usize,
    tag: &str,
) -> BenchResult<Pair> {
    let o = load(ours, op, clients, &format!("{tag}-o{clients}")).await?;
    println!("  ours, {clients} client(s): {}", o.describe());
    let b = load(bare, op, clients, &format!("{tag}-b{clients}")).await?;
    println!("  bare, {clients} client(s): {}", b.describe());
    Ok(Pair { ours: o, bare: b })
}

/// `clients` tasks, each on its own connection, sending `op` requests one after another for
/// `LOAD_TIME` (at most `REQUESTS_PER_CLIENT_CAP` each).
async fn load(ep: &Arc<Endpoint>, op: Op, clients: usize, tag: &str) -> BenchResult<Run> {
    let mut senders = Vec::new();
    let mut rvs = Vec::new();
    for client in 0..clients {
        let mut sender = connect(ep).await?;
        let mut rv = String::new();
        if op == Op::Update {
            // Each client updates an object of its own.
            let body = configmap(&update_name(tag, client), None, 0);
            let reply =
                exchange(&mut sender, request(ep, Method::POST, CM_PATH, Some(body))?).await?;
            expect(&reply, StatusCode::CREATED, "creating an object to update")?;
            rv = resource_version(&reply.body)?;
        }
        senders.push(sender);
        rvs.push(rv);
    }
    let barrier = Arc::new(Barrier::new(clients + 1));
    let tag: Arc<str> = Arc::from(tag);
    let mut tasks = Vec::new();
    for (client, (mut sender, mut rv)) in senders.into_iter().zip(rvs).enumerate() {
        let barrier = barrier.clone();
        let ep = ep.clone();
        let tag = tag.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let deadline = Instant::now() + LOAD_TIME;
            let mut latencies = Vec::new();
            let mut index = 0;
            while index < REQUESTS_PER_CLIENT_CAP && Instant::now() < deadline {
                let request = op.request(&ep, &tag, client, index, &rv)?;
                let t = Instant::now();
                let reply = exchange(&mut sender, request).await?;
                latencies.push(t.elapsed());
                expect(&reply, op.expected(), op.name())?;
                if op == Op::Update {
                    rv = resource_version(&reply.body)?;
                }
                index += 1;
            }
            Ok::<Vec<Duration>, Box<dyn std::error::Error + Send + Sync>>(latencies)
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(Run::from_parts(all, start.elapsed()))
}

/// One watch measurement.
struct WatchRun {
    /// From the first POST until every watcher has every event.
    total: Duration,
    /// From the first POST until the last POST's response.
    writes: Duration,
    /// From the last POST's response until every watcher has every event.
    tail: Duration,
    /// For every (watcher, event): from sending the event's POST to the event's arrival.
    delivery: Run,
}

impl WatchRun {
    fn describe(&self) -> String {
        format!(
            "writes {}, every event delivered after {} ({} after the last write), \
             delivery p50 {}, p99 {}",
            ms(self.writes),
            ms(self.total),
            ms(self.tail),
            ms(self.delivery.p50()),
            ms(self.delivery.p99())
        )
    }

    /// Median times; latencies pooled.
    fn summarize(runs: Vec<WatchRun>) -> WatchRun {
        let mut delivery = Run::default();
        let mut totals = Vec::new();
        let mut writes = Vec::new();
        let mut tails = Vec::new();
        for run in runs {
            totals.push(run.total);
            writes.push(run.writes);
            tails.push(run.tail);
            delivery.merge(run.delivery);
        }
        WatchRun { total: median(totals), writes: median(writes), tail: median(tails), delivery }
    }
}

/// `WATCHERS` watches from `rv`, each on its own connection, then one writer creating
/// `WATCH_EVENTS` ConfigMaps one at a time; until every watcher has counted every event line.
async fn watch_run(ep: &Arc<Endpoint>, rv: &str, tag: &str) -> BenchResult<WatchRun> {
    let path = format!("{CM_PATH}?watch=true&resourceVersion={rv}");
    let ready = Arc::new(Barrier::new(WATCHERS + 1));
    let mut tasks = Vec::new();
    for _ in 0..WATCHERS {
        let mut sender = connect(ep).await?;
        let watch = request(ep, Method::GET, &path, None)?;
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            let response = tokio::time::timeout(REQUEST_TIMEOUT, async {
                sender.ready().await?;
                sender.send_request(watch).await
            })
            .await;
            // The response's headers come once the server has registered the watch.
            ready.wait().await;
            let response = response.map_err(|_| "opening a watch timed out")??;
            if response.status() != StatusCode::OK {
                return Err(format!("watch: got {}", response.status()).into());
            }
            let mut body = response.into_body();
            let mut arrivals = Vec::with_capacity(WATCH_EVENTS);
            let deadline = tokio::time::Instant::now() + WATCH_TIMEOUT;
            while arrivals.len() < WATCH_EVENTS {
                let frame = tokio::time::timeout_at(deadline, body.frame())
                    .await
                    .map_err(|_| "watch delivery timed out")?
                    .ok_or("the watch ended early")??;
                if let Ok(data) = frame.into_data() {
                    let now = Instant::now();
                    let lines = data.iter().filter(|&&b| b == b'\n').count();
                    arrivals.extend(std::iter::repeat_n(now, lines));
                }
            }
            arrivals.truncate(WATCH_EVENTS);
            Ok::<Vec<Instant>, Box<dyn std::error::Error + Send + Sync>>(arrivals)
        }));
    }
    let mut writer = connect(ep).await?;
    tokio::time::timeout(REQUEST_TIMEOUT, ready.wait())
        .await
        .map_err(|_| "the watchers did not start")?;

    let start = Instant::now();
    let mut sent = Vec::with_capacity(WATCH_EVENTS);
    for i in 0..WATCH_EVENTS {
        let body = configmap(&format!("{tag}-{i:05}"), None, i);
        let request = request(ep, Method::POST, CM_PATH, Some(body))?;
        sent.push(Instant::now());
        let reply = exchange(&mut writer, request).await?;
        expect(&reply, StatusCode::CREATED, "watch writer's CREATE")?;
    }
    let written = Instant::now();

    let mut latencies = Vec::with_capacity(WATCHERS * WATCH_EVENTS);
    let mut last = written;
    for task in tasks {
        let arrivals = tokio::time::timeout(WATCH_TIMEOUT, task)
            .await
            .map_err(|_| "a watcher did not finish")???;
        for (arrival, sent) in arrivals.iter().zip(&sent) {
            latencies.push(arrival.saturating_duration_since(*sent));
            last = last.max(*arrival);
        }
    }
    let total = last - start;
    Ok(WatchRun {
        total,
        writes: written - start,
        tail: last - written,
        delivery: Run::from_parts(latencies, total),
    })
}

/// The store's own durable write: `Store::create` of `value` under distinct keys, 1 writer.
fn store_writes(store: &SledStore, round: usize, value: &Bytes) -> BenchResult<Run> {
    let mut latencies = Vec::new();
    let start = Instant::now();
    let deadline = start + STORE_ROUND_TIME;
    while latencies.len() < STORE_WRITES_CAP && Instant::now() < deadline {
        let key = format!("/bench/r{round}/{:08}", latencies.len());
        let t = Instant::now();
        store.create(&key, value.clone())?;
        latencies.push(t.elapsed());
    }
    Ok(Run::from_parts(latencies, start.elapsed()))
}

/// The store's own durable write from `threads` threads at once, for `STORE_ROUND_TIME`.
fn store_writers(store: &SledStore, threads: usize, value: &Bytes) -> BenchResult<Run> {
    let barrier = std::sync::Barrier::new(threads + 1);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || -> BenchResult<Vec<Duration>> {
                    let mut latencies = Vec::new();
                    barrier.wait();
                    let deadline = Instant::now() + STORE_ROUND_TIME;
                    while latencies.len() < STORE_WRITES_CAP && Instant::now() < deadline {
                        let key = format!("/bench/t{threads}/{t:02}/{:08}", latencies.len());
                        let op = Instant::now();
                        store.create(&key, value.clone())?;
                        latencies.push(op.elapsed());
                    }
                    Ok(latencies)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut all = Vec::new();
        for handle in handles {
            all.extend(handle.join().map_err(|_| "writer thread panicked")??);
        }
        Ok(Run::from_parts(all, start.elapsed()))
    })
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
