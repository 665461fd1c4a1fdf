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
//!
//! `limits` holds the limits and flags, `fd_reserve` the descriptor reserve, `gate` the
//! connection gate, accept backoff and log limiting, [`serve`] the accept loop and connection
//! serving, `status_bodies` the bodies of hyper's automatic error answers, `body` the body
//! timeout and draining, and `activity` the idle tracking.

mod activity;
mod body;
mod fd_reserve;
mod gate;
mod limits;
mod serve;
mod status_bodies;

use std::time::Duration;

pub use body::BodyTimeout;
pub use fd_reserve::FdReserve;
pub use gate::{Backoff, Gate, LogLimiter, Refused, Slot};
pub use limits::{parse_duration, DurationError, Limits, ListenerFlags};
pub use serve::serve;

/// The server name a client asked for in its TLS handshake (SNI), in the extensions of every
/// request of its connection: it selects a tenant ([`crate::http::clusters`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsServerName(pub std::sync::Arc<str>);

/// How long a repeated log line stays quiet after it was written.
pub const LOG_WINDOW: Duration = Duration::from_secs(10);

/// The largest request body accepted, as kube-apiserver's limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The most bytes of an unread request body read and discarded before an early answer.
pub const DRAIN_LIMIT: usize = MAX_BODY_BYTES;

#[cfg(test)]
mod tests;
