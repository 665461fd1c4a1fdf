//! The listener: accepting connections and serving HTTP/1.1 and HTTP/2 on them with every stage
//! bounded, so that idle or slow clients cannot take the server down.
//!
//! - A TLS handshake has [`Limits::tls_handshake_timeout`] to finish.
//! - An HTTP/1 request head has [`Limits::header_read_timeout`] to arrive (hyper's timer, which
//!   also runs while a keep-alive connection waits for its next request), and at most
//!   [`Limits::max_header_bytes`].
//! - A request body has [`Limits::body_read_timeout`] to arrive in full, counted from its head.
//! - A connection with no request in flight for [`Limits::idle_timeout`] is closed (HTTP/1 and
//!   HTTP/2 alike); a request in flight, such as a watch or `logs -f` streaming its response,
//!   keeps its connection open for as long as it streams. HTTP/2 connections are pinged every
//!   [`Limits::http2_keep_alive_interval`] and closed when a ping goes unanswered.
//! - At most [`Limits::http2_max_concurrent_streams`] streams per HTTP/2 connection.
//! - At most so many connections in all and per client IP: connections beyond either limit are
//!   accepted and closed at once. The total is also bounded by the open-file limit less a reserve
//!   for the stores ([`FdReserve`]), so client connections never take the descriptors a store
//!   needs to write.
//! - When `accept` fails (`EMFILE`, `ENFILE`, …) the loop sleeps, 5 ms doubling to 1 s, instead
//!   of spinning; repeated identical log lines are written once per [`LOG_WINDOW`], with the
//!   count of those suppressed.
//! - An early answer to a request whose body was not read (a 401 before a POST's body) first
//!   reads and discards the body, up to [`DRAIN_LIMIT`] bytes, so that HTTP/2 clients see a
//!   cleanly closed stream rather than a reset.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use bytes::Bytes;
use carrel_logging::{Admit, Repeats};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::access::PeerCertificates;

/// How long a repeated log line stays quiet after it was written.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The most bytes of an unread request body read and discarded before an early answer.
pub const DRAIN_LIMIT: usize = crate::http::MAX_BODY_BYTES;

/// How long a connection closed for idleness gets to finish what it is writing.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The first and the longest sleep after a failed `accept`.
const BACKOFF_FIRST: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Descriptors kept for the process's own use, whatever client connections want: a number for
/// the process itself (its binaries, certificates, in-process clients of its own API) and a
/// number for each store it serves (a store's log, checkpoints and blobs).
#[derive(Clone)]
pub struct FdReserve {
    /// Descriptors kept for the process as a whole.
    pub base: u64,
    /// Descriptors kept for each served store.
    pub per_store: u64,
    stores: Arc<dyn Fn() -> usize + Send + Sync>,
}

impl std::fmt::Debug for FdReserve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdReserve")
            .field("base", &self.base)
            .field("per_store", &self.per_store)
            .field("stores", &(self.stores)())
            .finish()
    }
}

impl Default for FdReserve {
    /// 256 for the process, 16 for each of one store.
    fn default() -> FdReserve {
        FdReserve::new(256, 16, || 1)
    }
}

impl FdReserve {
    /// Keep `base` descriptors, and `per_store` for each of the `stores()` served now (asked
    /// at every accepted connection, so that stores opened later are counted).
    pub fn new(
        base: u64,
        per_store: u64,
        stores: impl Fn() -> usize + Send + Sync + 'static,
    ) -> FdReserve {
        FdReserve { base, per_store, stores: Arc::new(stores) }
    }

    /// The descriptors kept now.
    pub fn reserved(&self) -> u64 {
        let stores = u64::try_from((self.stores)()).unwrap_or(u64::MAX);
        self.base.saturating_add(self.per_store.saturating_mul(stores))
    }
}

/// How long each stage of a connection may take and how many connections there may be.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The TLS handshake, from accept (10 s).
    pub tls_handshake_timeout: Duration,
    /// An HTTP/1 request head, from the first byte or from the end of the previous request
    /// (32 s, as kube-apiserver's `ReadHeaderTimeout`).
    pub header_read_timeout: Duration,
    /// A request body in full, from its head (60 s, kube-apiserver's request timeout).
    pub body_read_timeout: Duration,
    /// A connection with no request in flight (90 s, as kube-apiserver's `IdleTimeout`).
    pub idle_timeout: Duration,
    /// How often an HTTP/2 connection is pinged (30 s).
    pub http2_keep_alive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed (15 s).
    pub http2_keep_alive_timeout: Duration,
    /// Concurrent streams per HTTP/2 connection (250, Go's default, which kube-apiserver uses
    /// when `--http2-max-streams-per-connection` is 0).
    pub http2_max_concurrent_streams: u32,
    /// A request head's size: HTTP/1 request line and headers, HTTP/2 header list (1 MiB, as
    /// kube-apiserver's `MaxHeaderBytes`).
    pub max_header_bytes: usize,
    /// Open connections in all; 0 for no limit but the descriptors (the default).
    pub max_connections: usize,
    /// Open connections from one client IP address; 0 for none (1,024).
    pub max_connections_per_ip: usize,
    /// Addresses the per-address limit does not apply to (the total does): where a process's
    /// own in-process clients connect from. None by default.
    pub per_ip_exempt: Vec<IpAddr>,
    /// Descriptors client connections may not take.
    pub fd_reserve: FdReserve,
    /// The count of open connections, which the listener admits through; a clone reads it
    /// ([`Gate::open`]).
    pub gate: Arc<Gate>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(32),
            body_read_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(90),
            http2_keep_alive_interval: Duration::from_secs(30),
            http2_keep_alive_timeout: Duration::from_secs(15),
            http2_max_concurrent_streams: 250,
            max_header_bytes: 1024 * 1024,
            max_connections: 0,
            max_connections_per_ip: 1024,
            per_ip_exempt: Vec::new(),
            fd_reserve: FdReserve::default(),
            gate: Arc::default(),
        }
    }
}

impl Limits {
    /// The most connections open at once under an open-file limit of `nofile`: what the
    /// descriptors allow after the reserve, and no more than `max_connections`.
    pub fn connection_limit(&self, nofile: u64) -> usize {
        let by_files = nofile.saturating_sub(self.fd_reserve.reserved());
        let by_files = usize::try_from(by_files).unwrap_or(usize::MAX);
        match self.max_connections {
            0 => by_files,
            max => max.min(by_files),
        }
    }
}

/// The listener's command-line flags, for the binaries that serve.
#[derive(Clone, Debug, clap::Args)]
pub struct ListenerFlags {
    /// The most client connections open at once; beyond it new connections are closed. It is
    /// also bounded by the open-file limit less what the stores keep. 0: only that bound.
    #[arg(long, default_value_t = 0)]
    pub max_connections: usize,
    /// The most connections open at once from one client IP address. 0: no limit.
    #[arg(long, default_value_t = 1024)]
    pub max_connections_per_ip: usize,
    /// The most concurrent streams of one HTTP/2 connection.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub http2_max_streams_per_connection: u32,
    /// How long a connection with no request in flight stays open (e.g. 90s, 5m).
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub connection_idle_timeout: Duration,
}

impl ListenerFlags {
    /// The limits these flags ask for, the rest at their defaults.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            http2_max_concurrent_streams: self.http2_max_streams_per_connection,
            idle_timeout: self.connection_idle_timeout,
            ..Limits::default()
        }
    }
}

/// Why a flag's duration does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a Go duration.
    #[error("{text:?}: want e.g. 90s or 5m ({why})")]
    Syntax {
        /// What was written.
        text: String,
        /// The parser's complaint.
        why: carrel_machinery::duration::Error,
    },
    /// Zero or negative.
    #[error("{0:?}: must be more than zero")]
    NotPositive(String),
}

/// A duration such as `90s`, `5m`, `500ms`, `1h` or `1m30s`, as Go's flags read one, and more
/// than zero.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let nanos = carrel_machinery::duration::parse(text)
        .map_err(|why| DurationError::Syntax { text: text.to_owned(), why })?;
    match u64::try_from(nanos) {
        Ok(nanos) if nanos > 0 => Ok(Duration::from_nanos(nanos)),
        _ => Err(DurationError::NotPositive(text.to_owned())),
    }
}

/// Writes a repeated log line once per window: the first occurrence is written, the next ones
/// within [`LOG_WINDOW`] are counted, and the first one after it is written with that count.
///
/// The accept loop's own bound, whatever logger the process installs; the counting is
/// [`carrel_logging::Repeats`], keyed by the line.
#[derive(Debug)]
pub struct LogLimiter(Repeats<&'static str>);

impl LogLimiter {
    /// Quiet repeats for `window`.
    pub fn new(window: Duration) -> LogLimiter {
        let limits = carrel_logging::Limits { window, distinct: 1, ..Default::default() };
        LogLimiter(Repeats::new(limits))
    }

    /// Whether the line `key` is to be written now: `Some(n)` with the number of repeats not
    /// written since it last was, or `None` to stay quiet.
    pub fn admit(&self, key: &'static str, now: Instant) -> Option<u64> {
        match self.0.admit_at(&key, 0, now) {
            Admit::Write { unwritten } => Some(unwritten),
            Admit::Quiet => None,
        }
    }
}

/// The sleep after each failed `accept` in a row: 5 ms, doubling up to 1 s; a success starts
/// over.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff { next: BACKOFF_FIRST }
    }
}

impl Backoff {
    /// How long to sleep after this failure.
    pub fn failed(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        now
    }

    /// An accept succeeded.
    pub fn succeeded(&mut self) {
        self.next = BACKOFF_FIRST;
    }
}

/// Why a connection was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The limit on open connections in all.
    Total,
    /// The limit on open connections from one address.
    PerIp,
}

/// The connections open, in all and by client address.
#[derive(Debug, Default)]
pub struct Gate {
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// An admitted connection's place: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    gate: Arc<Gate>,
    ip: IpAddr,
}

impl Gate {
    /// Admit a connection from `ip` if fewer than `total` are open and fewer than `per_ip`
    /// (0: any number) from `ip`.
    pub fn admit(
        self: &Arc<Gate>,
        ip: IpAddr,
        total: usize,
        per_ip: usize,
    ) -> Result<Slot, Refused> {
        let mut open = self.open.lock();
        if open.0 >= total {
            return Err(Refused::Total);
        }
        let from_ip = open.1.get(&ip).copied().unwrap_or(0);
        if per_ip > 0 && from_ip >= per_ip {
            return Err(Refused::PerIp);
        }
        open.0 += 1;
        open.1.insert(ip, from_ip + 1);
        Ok(Slot { gate: self.clone(), ip })
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock();
        open.0 = open.0.saturating_sub(1);
        if let std::collections::hash_map::Entry::Occupied(mut entry) = open.1.entry(self.ip) {
            *entry.get_mut() -= 1;
            if *entry.get() == 0 {
                entry.remove();
            }
        }
    }
}

/// The process's soft limit on open files.
fn open_file_limit() -> u64 {
    match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, _)) => soft,
        Err(e) => {
            tracing::warn!(error = %e, "reading the open-file limit failed; assuming 1024");
            1024
        }
    }
}

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
                return connection(tcp, peer, peer_certificates, router, &limits, &builder).await;
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
            connection(tls, peer, peer_certificates, router, &limits, &builder).await;
        });
    }
}

/// The HTTP/1 and HTTP/2 settings of every connection.
fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
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
    peer_certificates: PeerCertificates,
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

/// A connection's IO that gives hyper's own HTTP/1 error answers (400 for a request it cannot
/// parse, 414 for a URI over 64 KiB, 431 for a head over [`Limits::max_header_bytes`]), which
/// hyper sends before any handler runs and with an empty body, the `Status` body every other
/// error has.
#[derive(Debug)]
struct StatusBodies<I> {
    io: I,
    activity: Arc<Activity>,
    /// A replacement being written: its bytes, how many are written, and the length of what it
    /// replaces.
    pending: Option<(Vec<u8>, usize, usize)>,
}

/// The status code of hyper's automatic error answer, if `head` is one: a lone head with no
/// body, for a 400, 414 or 431.
fn automatic_error(head: &[u8]) -> Option<u16> {
    if head.len() > 512 || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let rest = head.strip_prefix(b"HTTP/1.1 ").or_else(|| head.strip_prefix(b"HTTP/1.0 "))?;
    let code = match rest.get(..4)? {
        b"400 " => 400,
        b"414 " => 414,
        b"431 " => 431,
        _ => return None,
    };
    let head = std::str::from_utf8(head).ok()?.to_ascii_lowercase();
    head.contains("\r\ncontent-length: 0\r\n").then_some(code)
}

/// The answer, with a `Status` body, that replaces hyper's for `code`.
fn status_answer(code: u16, max_header_bytes: usize) -> Vec<u8> {
    let error = match code {
        414 => crate::ApiError::uri_too_long("the request URI is too long"),
        431 => crate::ApiError::headers_too_large(format!(
            "the request's headers are larger than the limit of {max_header_bytes} bytes"
        )),
        _ => crate::ApiError::bad_request("the request could not be parsed as HTTP"),
    };
    let body = serde_json::to_vec(&error.to_status()).unwrap_or_default();
    let reason = axum::http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Bad Request");
    let mut answer = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

impl<I: AsyncWrite + Unpin> StatusBodies<I> {
    /// Write the pending replacement; `Ready` with the length it stands for once all is written.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        while let Some((bytes, written, replaces)) = self.pending.as_mut() {
            if *written == bytes.len() {
                let replaces = *replaces;
                self.pending = None;
                return Poll::Ready(Ok(replaces));
            }
            match Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(0))
    }

    /// Whether `buf` is hyper's automatic error answer, to be replaced.
    fn replaces(&mut self, buf: &[u8]) -> bool {
        if self.pending.is_some() {
            return true;
        }
        if self.activity.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let Some(code) = automatic_error(buf) else { return false };
        self.pending = Some((status_answer(code, self.activity.max_header_bytes), 0, buf.len()));
        true
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StatusBodies<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StatusBodies<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.replaces(buf) {
            return self.poll_pending(cx);
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
        if self.replaces(first) {
            return self.poll_pending(cx);
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What a connection is doing: how many requests are in flight, and since when it has had none.
#[derive(Debug)]
struct Activity {
    start: Instant,
    /// The connection's limit on a request head, for the 431 answer's message.
    max_header_bytes: usize,
    in_flight: AtomicUsize,
    /// When the last request ended, in milliseconds since `start`.
    last_ms: AtomicU64,
}

impl Activity {
    fn new(max_header_bytes: usize) -> Activity {
        Activity {
            start: Instant::now(),
            max_header_bytes,
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        }
    }

    fn begin(self: &Arc<Activity>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }

    /// How long the connection has had no request in flight; `None` while one is.
    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_millis(self.last_ms.load(Ordering::SeqCst));
        Some(self.start.elapsed().saturating_sub(last))
    }

    /// Resolves once the connection has had no request in flight for `timeout`.
    async fn idle(&self, timeout: Duration) {
        loop {
            match self.idle_for() {
                Some(idle) if idle >= timeout => return,
                Some(idle) => tokio::time::sleep(timeout - idle).await,
                None => tokio::time::sleep(timeout).await,
            }
        }
    }
}

/// A request in flight; it ends when its response has been sent in full, or dropped.
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = u64::try_from(self.0.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.0.last_ms.store(now, Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a request body could not be read in full.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(Duration);

impl BodyTimeout {
    /// The body timeout among `error` and its sources, if it is one.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
                return Some(timeout);
            }
            next = error.source();
        }
        None
    }
}

/// A request body, read until a deadline; shared between the handler and the connection, which
/// reads what the handler left before answering.
#[derive(Debug)]
struct BodyState {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    done: bool,
}

impl BodyState {
    fn new(body: Incoming, timeout: Duration) -> BodyState {
        BodyState { body, deadline: Box::pin(tokio::time::sleep(timeout)), timeout, done: false }
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.done = true;
                    Poll::Ready(Some(Err(BodyTimeout(self.timeout).into())))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// The body a handler reads.
#[derive(Debug)]
struct RequestBody(Arc<Mutex<BodyState>>);

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        self.0.lock().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        let state = self.0.lock();
        state.done || state.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.lock().body.size_hint()
    }
}

/// Read and discard what is left of a request body, up to `limit` bytes and its deadline.
async fn drain(body: &Mutex<BodyState>, limit: usize) {
    let mut read = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| {
            let mut state = body.lock();
            if state.done || state.body.is_end_stream() {
                return Poll::Ready(None);
            }
            state.poll_frame(cx)
        })
        .await;
        match frame {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                if read > limit {
                    return;
                }
            }
            Some(Err(_)) | None => return,
        }
    }
}

/// A response body that ends its request's time in flight when it is sent in full or dropped.
#[derive(Debug)]
struct ResponseBody {
    inner: axum::body::Body,
    in_flight: Option<InFlight>,
}

impl HttpBody for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.in_flight = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_a_second_and_starts_over_after_a_success() {
        let mut backoff = Backoff::default();
        let sleeps: Vec<Duration> = (0..12).map(|_| backoff.failed()).collect();
        assert_eq!(sleeps[0], Duration::from_millis(5));
        assert_eq!(sleeps[1], Duration::from_millis(10));
        assert!(sleeps.windows(2).all(|w| w[0] <= w[1]), "{sleeps:?}");
        assert_eq!(*sleeps.last().unwrap(), Duration::from_secs(1));
        // A thousand failures in a row sleep at least ~16 minutes in all: no spinning.
        let total: Duration = (0..1000).map(|_| backoff.failed()).sum();
        assert!(total >= Duration::from_secs(990), "{total:?}");
        backoff.succeeded();
        assert_eq!(backoff.failed(), Duration::from_millis(5));
    }

    #[test]
    fn a_repeated_log_line_is_written_once_per_window_with_the_count_it_held_back() {
        let logs = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(logs.admit("accept", t0), Some(0));
        let written = (1..=100_000u64)
            .filter(|i| logs.admit("accept", t0 + Duration::from_micros(*i)).is_some())
            .count();
        assert_eq!(written, 0, "repeats within the window stay quiet");
        // Another line is not held back by the first.
        assert_eq!(logs.admit("limit-total", t0), Some(0));
        assert_eq!(logs.admit("accept", t0 + Duration::from_secs(11)), Some(100_000));
        assert_eq!(logs.admit("accept", t0 + Duration::from_secs(12)), None);
        assert_eq!(logs.admit("accept", t0 + Duration::from_secs(22)), Some(1));
    }

    #[test]
    fn the_gate_bounds_connections_in_all_and_per_address_and_gives_slots_back() {
        let gate = Arc::new(Gate::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = gate.admit(a, 3, 2).unwrap();
        let second = gate.admit(a, 3, 2).unwrap();
        assert_eq!(gate.admit(a, 3, 2).unwrap_err(), Refused::PerIp);
        let third = gate.admit(b, 3, 2).unwrap();
        assert_eq!(gate.admit(b, 3, 2).unwrap_err(), Refused::Total);
        assert_eq!(gate.open(), 3);
        drop(first);
        assert_eq!(gate.open(), 2);
        let again = gate.admit(a, 3, 2).unwrap();
        drop((second, third, again));
        assert_eq!(gate.open(), 0);
        assert!(gate.open.lock().1.is_empty(), "no address is remembered once closed");
        // 0 per address: only the total counts.
        let many: Vec<Slot> = (0..5).map(|_| gate.admit(a, 5, 0).unwrap()).collect();
        assert_eq!(many.len(), 5);
    }

    #[test]
    fn the_connection_limit_leaves_the_stores_their_descriptors() {
        let stores = Arc::new(AtomicUsize::new(1));
        let counted = stores.clone();
        let limits = Limits {
            fd_reserve: FdReserve::new(100, 10, move || counted.load(Ordering::SeqCst)),
            ..Limits::default()
        };
        assert_eq!(limits.connection_limit(1000), 890);
        stores.store(21, Ordering::SeqCst);
        assert_eq!(limits.connection_limit(1000), 690, "stores opened later are counted");
        assert_eq!(limits.connection_limit(200), 0, "a reserve above the limit admits nothing");
        let capped = Limits { max_connections: 50, ..limits };
        assert_eq!(capped.connection_limit(1000), 50);
    }

    /// Serve, over plain HTTP on 127.0.0.1:0, a router whose `POST /refuse` answers 401 without
    /// reading the body and whose `GET /` answers 200.
    async fn plain_server(limits: Limits) -> SocketAddr {
        use axum::routing::{get, post};
        let router = Router::new()
            .route("/", get(|| async { "ok" }))
            .route("/refuse", post(|| async { crate::ApiError::unauthorized() }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
        addr
    }

    /// Send `request` on a fresh connection and read the answer to its end.
    async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The server may answer and close before all of a huge head is written.
        let _ = tcp.write_all(request).await;
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    fn status_body(answer: &str) -> serde_json::Value {
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn uri_too_long_and_headers_too_large_are_answered_with_a_status() {
        let addr = plain_server(Limits::default()).await;
        let long_uri = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
        let answer = exchange(addr, long_uri.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 414 "), "{answer}");
        let status = status_body(&answer);
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 414);

        let big_header =
            format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "b".repeat(1024 * 1024 + 10));
        let answer = exchange(addr, big_header.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 431 "), "{}", &answer[..answer.len().min(200)]);
        let status = status_body(&answer);
        assert_eq!(status["code"], 431);
        assert_eq!(status["status"], "Failure");

        let answer = exchange(addr, b"NOT HTTP AT ALL\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
        assert_eq!(status_body(&answer)["reason"], "BadRequest");

        // Ordinary answers are left alone.
        let answer =
            exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("\r\n\r\nok"), "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_early_answer_to_an_http2_post_leaves_curls_stream_clean() {
        let addr = plain_server(Limits::default()).await;
        let dir = tempfile::tempdir().unwrap();
        let body = dir.path().join("body");
        std::fs::write(&body, vec![b'x'; 2 * 1024 * 1024]).unwrap();
        let url = format!("http://{addr}/refuse");
        let data = format!("@{}", body.display());
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("curl")
                .args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null"])
                .args(["-w", "%{http_code} %{http_version}", "--data-binary", &data, &url])
                .output()
                .expect("curl")
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "curl: {:?} {stdout} {stderr}", out.status);
        assert_eq!(stdout, "401 2", "{stderr}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_connections_are_closed_and_those_beyond_the_limit_at_once() {
        use tokio::io::AsyncReadExt as _;
        let limits = Limits {
            idle_timeout: Duration::from_millis(300),
            header_read_timeout: Duration::from_secs(30),
            max_connections_per_ip: 2,
            // Not the address the test connects from.
            per_ip_exempt: vec!["127.0.0.2".parse().unwrap()],
            ..Limits::default()
        };
        let addr = plain_server(limits).await;
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A third from the same address is closed at once, without an answer.
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(20), third.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        // The two admitted ones, never sending a byte, are closed once idle (not after the
        // header timeout of 30 s).
        for conn in [&mut first, &mut second] {
            let read = tokio::time::timeout(Duration::from_secs(20), conn.read(&mut buf)).await;
            assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
        }
        // Their places are given back: a new connection is served.
        let answer =
            exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_exempt_address_is_held_only_to_the_total() {
        use tokio::io::AsyncWriteExt as _;
        let limits = Limits {
            max_connections_per_ip: 1,
            per_ip_exempt: vec!["127.0.0.1".parse().unwrap()],
            ..Limits::default()
        };
        let addr = plain_server(limits).await;
        let mut open = Vec::new();
        for _ in 0..3 {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
            open.push(tcp);
        }
        let answer =
            exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 "), "the fourth from 127.0.0.1: {answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streaming_response_is_not_cut_by_the_idle_timeout() {
        use axum::routing::get;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        // A response that streams a line every 100 ms for 1.5 s, five times the idle timeout.
        let stream = || async {
            let lines = futures::stream::unfold(0, |i| async move {
                if i == 15 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((Ok::<_, Infallible>(Bytes::from(format!("{i}\n"))), i + 1))
            });
            axum::body::Body::from_stream(lines)
        };
        let router = Router::new().route("/watch", get(stream));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits { idle_timeout: Duration::from_millis(300), ..Limits::default() };
        tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /watch HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the idle connection was closed after the stream");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.contains("\r\n14\n\r\n"), "every line arrived: {answer}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_does_not_arrive_in_time_is_answered_504() {
        use carrel_store::{Options, SledStore};
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), Options::create()).unwrap();
        let api = Arc::new(crate::Api::new(Arc::new(store)).unwrap());
        let router = crate::router(Arc::new(crate::Server::new(api, "")));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = Limits { body_read_timeout: Duration::from_millis(300), ..Limits::default() };
        tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A head announcing 1,000 bytes of body, and 10 of them.
        let head = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nhost: x\r\n\
                    content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"kind\":1";
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut answer)).await;
        let n = read.expect("an answer before the client gives up").unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
        assert!(answer.starts_with("HTTP/1.1 504 "), "{answer}");
        let status = status_body(&answer);
        assert_eq!(status["reason"], "Timeout");
        assert!(status["message"].as_str().unwrap().contains("did not arrive within"), "{status}");
    }

    #[test]
    fn durations_read_like_flags() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("90").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
