//! The accept loop ([`serve`]) and the serving of one connection: TLS, HTTP/1 and HTTP/2 with
//! their timeouts, the idle close, and each request's body bounds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::access::PeerCertificates;

use super::activity::Activity;
use super::body::{drain, BodyState, RequestBody, ResponseBody};
use super::fd_reserve::open_file_limit;
use super::status_bodies::StatusBodies;
use super::{Backoff, Limits, LogLimiter, Refused, DRAIN_LIMIT, LOG_WINDOW};

/// How long a connection closed for idleness gets to finish what it is writing.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Serve `router` on `listener` until `shutdown` resolves: over TLS when `tls` is given (each
/// connection speaks the protocol ALPN chose), else plain HTTP/1.1 and HTTP/2 (prior
/// knowledge). Connections in progress are dropped at shutdown.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: Router,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let nofile = open_file_limit();
    tracing::debug!(
        nofile,
        reserved = limits.fd_reserve.reserved(),
        limit = limits.connection_limit(nofile),
        per_ip = limits.max_connections_per_ip,
        "connection limits"
    );
    let builder = Arc::new(builder(&limits));
    let limits = Arc::new(limits);
    let gate = limits.gate.clone();
    let logs = LogLimiter::new(LOG_WINDOW);
    let mut backoff = Backoff::default();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => {
                    backoff.succeeded();
                    accepted
                }
                Err(e) => {
                    let pause = backoff.failed();
                    if let Some(suppressed) = logs.admit("accept", Instant::now()) {
                        tracing::warn!(error = %e, suppressed, ?pause,
                            "accepting a connection failed; pausing before the next accept");
                    }
                    tokio::select! {
                        _ = &mut shutdown => return,
                        _ = tokio::time::sleep(pause) => continue,
                    }
                }
            },
        };
        let total = limits.connection_limit(nofile);
        let per_ip = match limits.per_ip_exempt.contains(&peer.ip()) {
            true => 0,
            false => limits.max_connections_per_ip,
        };
        let slot = match gate.admit(peer.ip(), total, per_ip) {
            Ok(slot) => slot,
            Err(refused) => {
                // Closed at once: the descriptor goes back before the next accept.
                drop(tcp);
                let key = match refused {
                    Refused::Total => "limit-total",
                    Refused::PerIp => "limit-per-ip",
                };
                if let Some(suppressed) = logs.admit(key, Instant::now()) {
                    tracing::warn!(%peer, ?refused, total, per_ip = limits.max_connections_per_ip,
                        suppressed, "connection limit reached; closing new connections");
                }
                continue;
            }
        };
        // Watch events are small writes; without this Nagle's algorithm holds them back.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let (acceptor, router, limits, builder) =
            (acceptor.clone(), router.clone(), limits.clone(), builder.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let Some(acceptor) = acceptor else {
                let peer_certificates = PeerCertificates::new(Vec::new());
                let named = None;
                return connection(
                    tcp,
                    peer,
                    (peer_certificates, named),
                    router,
                    &limits,
                    &builder,
                )
                .await;
            };
            let tls = match tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(tcp))
                .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            // Every request on the connection carries the client's certificate chain.
            let chain: Vec<CertificateDer<'static>> = tls
                .get_ref()
                .1
                .peer_certificates()
                .map(|c| c.iter().map(|d| d.clone().into_owned()).collect())
                .unwrap_or_default();
            let peer_certificates = PeerCertificates::new(chain);
            let named = tls.get_ref().1.server_name().map(|n| super::TlsServerName(n.into()));
            connection(tls, peer, (peer_certificates, named), router, &limits, &builder).await;
        });
    }
}

/// The HTTP/1 and HTTP/2 settings of every connection.
pub(super) fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(limits.http2_keep_alive_timeout)
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Serve HTTP on one connection until it ends, or until it has had no request in flight for
/// the idle timeout.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    (peer_certificates, server_name): (PeerCertificates, Option<super::TlsServerName>),
    router: Router,
    limits: &Limits,
    builder: &auto::Builder<TokioExecutor>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new(limits.max_header_bytes));
    let service = {
        let activity = activity.clone();
        let body_timeout = limits.body_read_timeout;
        let router = TowerToHyperService::new(router);
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = activity.begin();
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(peer_certificates.clone());
            if let Some(name) = &server_name {
                parts.extensions.insert(name.clone());
            }
            let body = Arc::new(Mutex::new(BodyState::new(body, body_timeout)));
            let request =
                hyper::Request::from_parts(parts, axum::body::Body::new(RequestBody(body.clone())));
            let answer = hyper::service::Service::call(&router, request);
            async move {
                let response = match answer.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                drain(&body, DRAIN_LIMIT).await;
                Ok::<_, Infallible>(
                    response.map(|inner| ResponseBody { inner, in_flight: Some(in_flight) }),
                )
            }
        })
    };
    let io = StatusBodies { io, activity: activity.clone(), pending: None };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        () = activity.idle(limits.idle_timeout) => {}
    }
    tracing::debug!(%peer, "closing an idle connection");
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(CLOSE_GRACE, conn).await;
}
