//! How long each stage of a connection may take and how many connections there may be
//! ([`Limits`]), and the command-line flags that set them ([`ListenerFlags`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use super::{FdReserve, Gate};

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
