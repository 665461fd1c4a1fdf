//! The errors of this crate.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What can go wrong building a zone, reading the upstream servers, or serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// The cluster domain is not a valid DNS name.
    #[error("cluster domain {domain:?} is not a valid DNS name")]
    Domain {
        /// The domain as given.
        domain: String,
        /// Why hickory refused it.
        #[source]
        source: hickory_server::proto::ProtoError,
    },
    /// A socket could not be bound.
    #[error("binding {protocol} on {addr}")]
    Bind {
        /// `udp` or `tcp`.
        protocol: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The resolver configuration naming the upstream servers could not be read.
    #[error("reading {path}")]
    ResolvConf {
        /// The file read.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The server's tasks ended with an error while shutting down.
    #[error("shutting down the DNS server")]
    Shutdown(#[source] hickory_server::net::NetError),
}

/// A `Result` whose error is [`DnsError`].
pub type Result<T, E = DnsError> = std::result::Result<T, E>;
