//! [`Server`]: the [`Resolver`] served on one UDP socket and one TCP listener of the same port.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};
use tracing::{debug, info};

use crate::error::{DnsError, Result};
use crate::resolver::{Resolver, SharedZone};

/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// Responses queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;
/// Tries at a port free for both UDP and TCP when the port is chosen by the system.
const BIND_TRIES: usize = 5;

/// A running cluster DNS server.
pub struct Server {
    inner: hickory_server::Server<Resolver>,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("local_addr", &self.local_addr).finish_non_exhaustive()
    }
}

impl Server {
    /// Serves `zone` on UDP and TCP at `addr`, forwarding other names to `upstream`. Port 0 picks
    /// one port free for both. Call from within a Tokio runtime.
    pub async fn bind(
        addr: SocketAddr,
        zone: SharedZone,
        upstream: Vec<SocketAddr>,
    ) -> Result<Self> {
        Self::serve(addr, Resolver::new(zone, upstream)).await
    }

    /// Serves `resolver` on UDP and TCP at `addr` (port 0: one port free for both).
    pub async fn serve(addr: SocketAddr, resolver: Resolver) -> Result<Self> {
        Self::start(addr, resolver)
    }

    /// [`Server::serve`] without waiting: binding does not block. Call from within a Tokio
    /// runtime (its tasks are spawned on it).
    pub fn start(addr: SocketAddr, resolver: Resolver) -> Result<Self> {
        let (udp, tcp, local_addr) = bind_both(addr)?;
        let udp = UdpSocket::from_std(udp).map_err(|source| DnsError::Bind {
            protocol: "udp",
            addr,
            source,
        })?;
        let tcp = TcpListener::from_std(tcp).map_err(|source| DnsError::Bind {
            protocol: "tcp",
            addr: local_addr,
            source,
        })?;
        let mut inner = hickory_server::Server::new(resolver);
        inner.register_socket(udp);
        inner.register_listener(tcp, TCP_IDLE, TCP_RESPONSE_BUFFER);
        info!(%local_addr, "cluster DNS serving");
        Ok(Self { inner, local_addr })
    }

    /// The address the server listens on, UDP and TCP alike.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting queries and waits for the server's tasks to end.
    pub async fn shutdown(mut self) -> Result<()> {
        self.inner.shutdown_gracefully().await.map_err(DnsError::Shutdown)?;
        info!(local_addr = %self.local_addr, "cluster DNS stopped");
        Ok(())
    }
}

/// A UDP socket and a TCP listener on one port, both non-blocking: with port 0, UDP's port,
/// tried again with another when TCP finds it taken. Also the address bound.
pub(crate) fn bind_both(
    addr: SocketAddr,
) -> Result<(std::net::UdpSocket, std::net::TcpListener, SocketAddr)> {
    let udp_error = |source| DnsError::Bind { protocol: "udp", addr, source };
    let mut tries = 0;
    loop {
        tries += 1;
        let udp = std::net::UdpSocket::bind(addr).map_err(udp_error)?;
        let bound = udp.local_addr().map_err(udp_error)?;
        match std::net::TcpListener::bind(bound) {
            Ok(tcp) => {
                let tcp_error = |source| DnsError::Bind { protocol: "tcp", addr: bound, source };
                udp.set_nonblocking(true).map_err(udp_error)?;
                tcp.set_nonblocking(true).map_err(tcp_error)?;
                return Ok((udp, tcp, bound));
            }
            Err(source)
                if addr.port() == 0
                    && source.kind() == std::io::ErrorKind::AddrInUse
                    && tries < BIND_TRIES =>
            {
                debug!(%bound, "TCP port taken; another port");
            }
            Err(source) => return Err(DnsError::Bind { protocol: "tcp", addr: bound, source }),
        }
    }
}
