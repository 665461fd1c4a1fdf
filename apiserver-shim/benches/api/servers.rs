//! Servers: ours as `main.rs` serves it, and the bare hyper baseline with canned responses.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use bytes::Bytes;
use carrel_apiserver::{router, Server};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::broadcast;
use tokio_rustls::TlsAcceptor;

use crate::BenchResult;

/// Our server on 127.0.0.1:0, as `main.rs` serves it: `axum::serve` for plain HTTP,
/// `tls::serve` for TLS.
pub(crate) fn start_ours(
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
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) content_type: Option<HeaderValue>,
    pub(crate) body: Bytes,
}

/// What the bare server answers: one real response of our server per request type.
pub(crate) struct Canned {
    pub(crate) get: Reply,
    pub(crate) list: Reply,
    pub(crate) create: Reply,
    pub(crate) update: Reply,
    /// One line of our server's watch stream, newline included.
    pub(crate) event: Bytes,
    /// Every POST sends `event` to every open watch.
    pub(crate) events: broadcast::Sender<Bytes>,
}

type BareBody = UnsyncBoxBody<Bytes, Infallible>;

/// The baseline: hyper's HTTP/1.1 server answering every request with canned bytes.
/// Like our server, it leaves Nagle's algorithm on unless `nodelay`.
pub(crate) fn start_bare(
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
