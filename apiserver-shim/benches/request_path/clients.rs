//! Clients as kubectl and client-go are: HTTP/2 over TLS with a client certificate, one
//! connection per client; the load runs; and the store's own durable writes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use carrel_apiserver::tls::Certificates;
use carrel_bench::Run;
use carrel_store::{SledStore, Store};
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, Barrier};
use tokio_rustls::TlsConnector;

use crate::servers::{Canned, Reply};
use crate::{
    BenchResult, CM_PATH, GET_NAME, LIST_OBJECTS, PAYLOAD, REQUESTS_PER_CLIENT_CAP,
    REQUEST_TIMEOUT, STORE_WRITES_CAP, WARMUP, WARMUP_REQUESTS_CAP,
};

/// A client's HTTP/2 connection: cloned for every stream it carries.
pub(crate) type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// Where a client connects, and how.
pub(crate) struct Endpoint {
    addr: SocketAddr,
    /// `https://127.0.0.1:<port>`: HTTP/2 requests carry the scheme and authority.
    origin: String,
    tls: TlsConnector,
}

impl Endpoint {
    pub(crate) fn new(addr: SocketAddr, tls: TlsConnector) -> Arc<Endpoint> {
        Arc::new(Endpoint { addr, origin: format!("https://{addr}"), tls })
    }

    /// A request for `path` (with its query), JSON in and out.
    pub(crate) fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> BenchResult<Request<Full<Bytes>>> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.origin))
            .header(ACCEPT, "application/json");
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        Ok(builder.body(Full::new(body.map(Bytes::from).unwrap_or_default()))?)
    }
}

/// A client's TLS: trusting the CA of `certs` and presenting its admin client certificate
/// (CN `carrel-admin`, O `system:masters`), offering `h2` and `http/1.1` as client-go does.
pub(crate) fn tls_connector(certs: &Certificates) -> BenchResult<TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(certs.ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let chain = CertificateDer::pem_slice_iter(certs.admin_cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(certs.admin_key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A new HTTP/2 connection over TLS, `TCP_NODELAY` on; an error unless ALPN chose `h2`.
pub(crate) async fn connect(ep: &Endpoint) -> BenchResult<Sender> {
    let tcp = TcpStream::connect(ep.addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(ep.addr.ip().to_string())?;
    let tls = ep.tls.connect(name, tcp).await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err("the server did not choose HTTP/2".into());
    }
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// `clients` connections to `ep`.
pub(crate) async fn connect_all(ep: &Endpoint, clients: usize) -> BenchResult<Vec<Sender>> {
    let mut senders = Vec::with_capacity(clients);
    for _ in 0..clients {
        senders.push(connect(ep).await?);
    }
    Ok(senders)
}

/// Send one request and read the whole response.
pub(crate) async fn exchange(
    sender: &mut Sender,
    request: Request<Full<Bytes>>,
) -> BenchResult<Reply> {
    tokio::time::timeout(REQUEST_TIMEOUT, async {
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Reply { status: parts.status, headers: parts.headers, body })
    })
    .await
    .map_err(|_| "request timed out")?
}

pub(crate) fn expect(reply: &Reply, status: StatusCode, what: &str) -> BenchResult<()> {
    if reply.status == status {
        return Ok(());
    }
    let body = String::from_utf8_lossy(&reply.body[..reply.body.len().min(400)]).into_owned();
    Err(format!("{what}: got {}, wanted {status}: {body}", reply.status).into())
}

/// A ConfigMap as a client sends it.
pub(crate) fn configmap(name: &str, index: usize) -> String {
    let payload = PAYLOAD.as_str();
    format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\
         \"labels\":{{\"app\":\"bench\"}}}},\"data\":{{\"index\":\"{index}\",\
         \"payload\":\"{payload}\"}}}}"
    )
}

/// A request type of the load runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Get,
    List,
    Create,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::List => "LIST 1,000",
            Op::Create => "CREATE",
        }
    }

    fn expected(self) -> StatusCode {
        match self {
            Op::Create => StatusCode::CREATED,
            _ => StatusCode::OK,
        }
    }

    /// Request `index` of client `client` in a run tagged `tag` (CREATE names must be new).
    fn request(
        self,
        ep: &Endpoint,
        tag: &str,
        client: usize,
        index: usize,
    ) -> BenchResult<Request<Full<Bytes>>> {
        match self {
            Op::Get => ep.request(Method::GET, &format!("{CM_PATH}/{GET_NAME}"), None),
            Op::List => ep.request(Method::GET, CM_PATH, None),
            Op::Create => {
                let name = format!("{tag}-c{client:02}-{index:07}");
                ep.request(Method::POST, CM_PATH, Some(configmap(&name, index)))
            }
        }
    }
}

/// Create the listed ConfigMaps `cm-00000`..`cm-00999`, from 8 connections.
pub(crate) async fn fill(ep: &Arc<Endpoint>) -> BenchResult<()> {
    const FILLERS: usize = 8;
    let mut tasks = Vec::new();
    for (t, mut sender) in connect_all(ep, FILLERS).await?.into_iter().enumerate() {
        let ep = ep.clone();
        tasks.push(tokio::spawn(async move {
            for n in (t..LIST_OBJECTS).step_by(FILLERS) {
                let body = configmap(&format!("cm-{n:05}"), n);
                let reply =
                    exchange(&mut sender, ep.request(Method::POST, CM_PATH, Some(body))?).await?;
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

/// One real response of our server per request type, the head of a watch and one watch event
/// line. The namespace holds exactly `LIST_OBJECTS` ConfigMaps again afterwards.
pub(crate) async fn capture(ep: &Arc<Endpoint>, rv: &str) -> BenchResult<Canned> {
    let mut client = connect(ep).await?;
    let mut watcher = connect(ep).await?;
    let path = format!("{CM_PATH}?watch=true&resourceVersion={rv}");
    watcher.ready().await?;
    let watch = tokio::time::timeout(
        REQUEST_TIMEOUT,
        watcher.send_request(ep.request(Method::GET, &path, None)?),
    )
    .await
    .map_err(|_| "opening a watch timed out")??;
    if watch.status() != StatusCode::OK {
        return Err(format!("watch: got {}", watch.status()).into());
    }
    let (head, mut stream) = watch.into_parts();
    let watch = Reply { status: head.status, headers: head.headers, body: Bytes::new() };

    let name = "capture-object";
    let body = configmap(name, 0);
    let create = exchange(&mut client, ep.request(Method::POST, CM_PATH, Some(body))?).await?;
    expect(&create, StatusCode::CREATED, "CREATE")?;

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

    let path = format!("{CM_PATH}/{name}");
    let delete = exchange(&mut client, ep.request(Method::DELETE, &path, None)?).await?;
    expect(&delete, StatusCode::OK, "DELETE")?;

    let get = exchange(&mut client, Op::Get.request(ep, "", 0, 0)?).await?;
    expect(&get, StatusCode::OK, "GET")?;
    let list = exchange(&mut client, Op::List.request(ep, "", 0, 0)?).await?;
    expect(&list, StatusCode::OK, "LIST")?;
    let items = serde_json::from_slice::<serde_json::Value>(&list.body)?["items"]
        .as_array()
        .map_or(0, Vec::len);
    if items != LIST_OBJECTS {
        return Err(format!("the list has {items} items, wanted {LIST_OBJECTS}").into());
    }
    let (events, _) = broadcast::channel(64);
    Ok(Canned { get, list, create, watch, event, events })
}

/// Each of `senders` sending `op` requests one after another on its own connection, unmeasured,
/// for `WARMUP` (at most `WARMUP_REQUESTS_CAP` each): TLS and HTTP/2 settled, caches warm.
pub(crate) async fn warm_up(
    ep: &Arc<Endpoint>,
    senders: &[Sender],
    op: Op,
    tag: &str,
) -> BenchResult<()> {
    run_clients(ep, senders, op, tag, WARMUP, WARMUP_REQUESTS_CAP).await.map(drop)
}

/// One measured round: each of `senders` sending `op` requests one after another for `time`
/// (at most `REQUESTS_PER_CLIENT_CAP` each).
pub(crate) async fn load(
    ep: &Arc<Endpoint>,
    senders: &[Sender],
    op: Op,
    tag: &str,
    time: Duration,
) -> BenchResult<Run> {
    run_clients(ep, senders, op, tag, time, REQUESTS_PER_CLIENT_CAP).await
}

async fn run_clients(
    ep: &Arc<Endpoint>,
    senders: &[Sender],
    op: Op,
    tag: &str,
    time: Duration,
    cap: usize,
) -> BenchResult<Run> {
    let barrier = Arc::new(Barrier::new(senders.len() + 1));
    let tag: Arc<str> = Arc::from(tag);
    let mut tasks = Vec::new();
    for (client, sender) in senders.iter().enumerate() {
        let (barrier, ep, tag, mut sender) =
            (barrier.clone(), ep.clone(), tag.clone(), sender.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let deadline = Instant::now() + time;
            let mut latencies = Vec::new();
            let mut index = 0;
            while index < cap && Instant::now() < deadline {
                let request = op.request(&ep, &tag, client, index)?;
                let t = Instant::now();
                let reply = exchange(&mut sender, request).await?;
                latencies.push(t.elapsed());
                expect(&reply, op.expected(), op.name())?;
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

/// The store's own durable write, `Store::create` of `value` under new keys, from `threads`
/// threads at once for `time`; `tag` keeps each round's keys apart.
pub(crate) fn store_writers(
    store: &SledStore,
    threads: usize,
    value: &Bytes,
    tag: &str,
    time: Duration,
) -> BenchResult<Run> {
    carrel_bench::on_threads(threads, time, STORE_WRITES_CAP, |t, n| {
        store.create(&format!("/bench/{tag}/{t:02}/{n:08}"), value.clone())?;
        Ok(())
    })
}
