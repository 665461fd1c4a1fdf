//! Clients: connections, requests, the load and watch runs, and the store's own writes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_apiserver::Api;
use carrel_bench::{median, ms, Run};
use carrel_store::{SledStore, Store};
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, Barrier};
use tokio_rustls::TlsConnector;

use crate::servers::{Canned, Reply};
use crate::{
    BenchResult, Sender, CM_PATH, GET_NAME, LIST_OBJECTS, LOAD_TIME, PAYLOAD,
    REQUESTS_PER_CLIENT_CAP, REQUEST_TIMEOUT, STORE_ROUND_TIME, STORE_WRITES_CAP, WATCHERS,
    WATCH_EVENTS, WATCH_TIMEOUT,
};

/// Where a client connects.
#[derive(Clone)]
pub(crate) struct Endpoint {
    addr: SocketAddr,
    host: String,
    tls: Option<TlsConnector>,
}

impl Endpoint {
    pub(crate) fn new(addr: SocketAddr, tls: Option<TlsConnector>) -> Arc<Endpoint> {
        Arc::new(Endpoint { addr, host: addr.to_string(), tls })
    }
}

pub(crate) fn tls_connector(ca_pem: &str) -> BenchResult<TlsConnector> {
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
pub(crate) enum Op {
    Get,
    List,
    Create,
    Update,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
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
pub(crate) async fn fill(ep: &Arc<Endpoint>) -> BenchResult<()> {
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
pub(crate) async fn capture(ep: &Arc<Endpoint>, api: &Api) -> BenchResult<Canned> {
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
pub(crate) struct Pair {
    pub(crate) ours: Run,
    pub(crate) bare: Run,
}

pub(crate) async fn compare(
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
pub(crate) async fn load(
    ep: &Arc<Endpoint>,
    op: Op,
    clients: usize,
    tag: &str,
) -> BenchResult<Run> {
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
pub(crate) struct WatchRun {
    /// From the first POST until every watcher has every event.
    pub(crate) total: Duration,
    /// From the first POST until the last POST's response.
    pub(crate) writes: Duration,
    /// From the last POST's response until every watcher has every event.
    pub(crate) tail: Duration,
    /// For every (watcher, event): from sending the event's POST to the event's arrival.
    pub(crate) delivery: Run,
}

impl WatchRun {
    pub(crate) fn describe(&self) -> String {
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
    pub(crate) fn summarize(runs: Vec<WatchRun>) -> WatchRun {
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
pub(crate) async fn watch_run(ep: &Arc<Endpoint>, rv: &str, tag: &str) -> BenchResult<WatchRun> {
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
pub(crate) fn store_writes(store: &SledStore, round: usize, value: &Bytes) -> BenchResult<Run> {
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
pub(crate) fn store_writers(store: &SledStore, threads: usize, value: &Bytes) -> BenchResult<Run> {
    carrel_bench::on_threads(threads, STORE_ROUND_TIME, STORE_WRITES_CAP, |t, n| {
        store.create(&format!("/bench/t{threads}/{t:02}/{n:08}"), value.clone())?;
        Ok(())
    })
}
