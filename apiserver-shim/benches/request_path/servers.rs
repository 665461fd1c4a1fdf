//! Servers: ours as `carrel up` serves it, and the bare hyper baseline behind the same TLS.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use carrel_apiserver::access::Security;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::http::{clusters_router, Clusters};
use carrel_apiserver::listener::Limits;
use carrel_apiserver::tls::Certificates;
use carrel_apiserver::{Api, Server};
use carrel_store::{Options, SledStore};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, CONTENT_LENGTH, DATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::broadcast;
use tokio_rustls::TlsAcceptor;

use crate::BenchResult;

/// The issuer of the host's service-account tokens, as `carrel up` names it.
const HOST_ISSUER: &str = "https://kubernetes.default.svc";

/// Our server, running.
pub(crate) struct Ours {
    pub(crate) addr: SocketAddr,
    pub(crate) api: Arc<Api>,
}

/// Our server on 127.0.0.1:0 as `carrel up` wires it: the host API over a `SledStore` in
/// `data`, `Server::secured` with the CA of `certs` and a token signer, `Clusters` and
/// `clusters_router` (flow control included), served by `tls::serve` with `config`.
pub(crate) fn start_ours(
    rt: &Runtime,
    data: &Path,
    certs: &Certificates,
    config: Arc<rustls::ServerConfig>,
) -> BenchResult<Ours> {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let store = SledStore::open(data.join("host"), Options::create())?;
    let api = Arc::new(Api::host(Arc::new(store))?);
    let tokens = Signer::load_or_generate(&data.join("pki"))?;
    let security = Security::new(certs.ca_der()?, Some(tokens), HOST_ISSUER);
    let host = Arc::new(Server::secured(api.clone(), "", Arc::new(security)));
    let router = clusters_router(Arc::new(Clusters::new(host)));
    rt.spawn(carrel_apiserver::tls::serve(listener, config, router, std::future::pending()));
    Ok(Ours { addr, api })
}

/// One response, as a client saw it.
#[derive(Clone)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// What the bare server answers: one real response of our server per request type.
pub(crate) struct Canned {
    pub(crate) get: Reply,
    pub(crate) list: Reply,
    pub(crate) create: Reply,
    /// The head of our server's answer to a watch (its body is left empty).
    pub(crate) watch: Reply,
    /// One line of our server's watch stream, newline included.
    pub(crate) event: Bytes,
    /// Every POST sends `event` to every open watch.
    pub(crate) events: broadcast::Sender<Bytes>,
}

type BareBody = UnsyncBoxBody<Bytes, Infallible>;

/// The baseline on 127.0.0.1:0: hyper's HTTP/1.1 and HTTP/2 server (`auto`, as our listener
/// uses) behind `config`, the very rustls configuration ours serves with (certificates,
/// client-certificate verification, ALPN), `TCP_NODELAY` on every accepted socket as our
/// listener sets it, and our listener's HTTP/2 stream limit; every request answered with
/// canned bytes.
pub(crate) fn start_bare(
    rt: &Runtime,
    canned: &Arc<Canned>,
    config: Arc<rustls::ServerConfig>,
) -> BenchResult<SocketAddr> {
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let canned = canned.clone();
    let acceptor = TlsAcceptor::from(config);
    let limits = Limits::default();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_concurrent_streams);
    let builder = Arc::new(builder);
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let (canned, acceptor, builder) = (canned.clone(), acceptor.clone(), builder.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request| {
                    let canned = canned.clone();
                    async move { Ok::<_, Infallible>(bare_answer(&canned, request).await) }
                });
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
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
        return empty(StatusCode::BAD_REQUEST);
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
            return canned_response(&canned.watch, StreamBody::new(stream).boxed_unsync());
        }
        Method::GET if list => &canned.list,
        Method::GET => &canned.get,
        Method::POST => {
            let _ = canned.events.send(canned.event.clone());
            &canned.create
        }
        _ => return empty(StatusCode::NOT_FOUND),
    };
    canned_response(reply, Full::new(reply.body.clone()).boxed_unsync())
}

/// `reply`'s status and headers (but `Date` and `Content-Length`, which hyper writes) with `body`.
fn canned_response(reply: &Reply, body: BareBody) -> Response<BareBody> {
    let mut response = Response::new(body);
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    for (name, value) in &reply.headers {
        if name != DATE && name != CONTENT_LENGTH {
            headers.append(name, value.clone());
        }
    }
    response
}

fn empty(status: StatusCode) -> Response<BareBody> {
    let mut response = Response::new(Full::default().boxed_unsync());
    *response.status_mut() = status;
    response
}
