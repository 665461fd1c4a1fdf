//! [`SharedServer`]: many clusters' DNS on one UDP socket and one TCP listener. Each cluster
//! answers at an address of its own on the same port (a loopback address of `127.0.0.0/8`, all
//! of which reach this machine), and the address a query was sent to picks the cluster's
//! [`Resolver`]: a cluster costs an entry in its owner's map, not a socket or a task.
//!
//! UDP answers are sent from the address the query was sent to (`IP_PKTINFO`), as a client
//! expects; a TCP connection's cluster is its local address. Queries to an address that names
//! no cluster are dropped, and so is anything sent to an address outside `127.0.0.0/8`: the
//! listener is bound to every address only to receive all of loopback's.
//!
//! [`SharedServer::start_by_source`] is the other way to tell clusters apart, for a server that
//! pods reach through one Service address: the address a query comes from (a pod's IP) picks
//! the cluster, and a query from an address that names none is dropped.

use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{
    Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode,
};
use hickory_server::proto::rr::Record;
use hickory_server::proto::serialize::binary::{BinEncodable, BinEncoder};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use nix::libc;
use nix::sys::socket::{
    recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
    SockaddrIn,
};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tracing::{debug, info, warn};

use crate::error::{DnsError, Result};
use crate::resolver::Resolver;
use crate::server::bind_both;

/// Which cluster answers at an address: its handler (a [`Resolver`]), or `None`.
pub type Route<H = Resolver> = Arc<dyn Fn(Ipv4Addr) -> Option<H> + Send + Sync>;

/// Which cluster answers queries from an address, and where: its handler (a [`Resolver`]) here,
/// or another server it is served by; `None` for none.
pub type SourceRoute<H = Resolver> = Arc<dyn Fn(IpAddr) -> Option<Answerer<H>> + Send + Sync>;

/// Who answers a cluster's queries.
#[derive(Clone, Debug)]
pub enum Answerer<H = Resolver> {
    /// Its handler, here.
    Here(H),
    /// Another server, which the encoded query is relayed to (the replica serving the cluster).
    Relayed(Arc<dyn Relay>),
}

/// Relays a cluster's encoded queries to the server that answers them.
pub trait Relay: Send + Sync + std::fmt::Debug {
    /// The encoded answer to the encoded `query`, which came over `protocol`; `None` for none.
    fn relay(&self, query: Vec<u8>, protocol: Protocol) -> BoxFuture<'static, Option<Vec<u8>>>;
}

impl<H: RequestHandler> Answerer<H> {
    async fn answer(&self, raw: Vec<u8>, src: SocketAddr, protocol: Protocol) -> Option<Vec<u8>> {
        match self {
            Answerer::Here(handler) => answer(handler, raw, src, protocol).await,
            Answerer::Relayed(relay) => relay.relay(raw, protocol).await,
        }
    }
}

/// How long a TCP connection may stay idle between queries.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// The largest UDP query read.
const UDP_BUFFER: usize = 4096;

/// A running shared DNS server; its tasks end when it is dropped.
#[derive(Debug)]
pub struct SharedServer {
    port: u16,
    udp: tokio::task::JoinHandle<()>,
    tcp: tokio::task::JoinHandle<()>,
}

impl Drop for SharedServer {
    fn drop(&mut self) {
        self.udp.abort();
        self.tcp.abort();
    }
}

impl SharedServer {
    /// Serve, on UDP and TCP of `port` (0: one free for both), the clusters `route` names by
    /// the loopback address a query was sent to. Binding does not block; call from within a
    /// Tokio runtime.
    pub fn start<H: RequestHandler + Clone>(port: u16, route: Route<H>) -> Result<Self> {
        let any = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
        let udp_error = |source| DnsError::Bind { protocol: "udp", addr: any, source };
        let (udp, tcp, bound) = bind_both(any)?;
        let tcp_error = |source| DnsError::Bind { protocol: "tcp", addr: bound, source };
        setsockopt(&udp, sockopt::Ipv4PacketInfo, &true)
            .map_err(|e| udp_error(std::io::Error::from(e)))?;
        let udp = Arc::new(UdpSocket::from_std(udp).map_err(udp_error)?);
        let tcp = TcpListener::from_std(tcp).map_err(tcp_error)?;
        info!(port = bound.port(), "shared cluster DNS serving on loopback addresses");
        Ok(Self {
            port: bound.port(),
            udp: tokio::spawn(serve_udp(udp, route.clone())),
            tcp: tokio::spawn(serve_tcp(tcp, move |stream: &TcpStream, _| {
                let local = stream.local_addr().ok()?;
                route_to(&route, local.ip()).map(Answerer::Here)
            })),
        })
    }

    /// Serve, on UDP and TCP of `addr` (port 0: one free for both), the clusters `route` names
    /// by the address a query comes from. Binding does not block; call from within a Tokio
    /// runtime.
    pub fn start_by_source<H: RequestHandler + Clone>(
        addr: SocketAddr,
        route: SourceRoute<H>,
    ) -> Result<Self> {
        let (udp, tcp, bound) = bind_both(addr)?;
        let udp_error = |source| DnsError::Bind { protocol: "udp", addr: bound, source };
        let tcp_error = |source| DnsError::Bind { protocol: "tcp", addr: bound, source };
        let udp = Arc::new(UdpSocket::from_std(udp).map_err(udp_error)?);
        let tcp = TcpListener::from_std(tcp).map_err(tcp_error)?;
        info!(%bound, "shared cluster DNS serving clusters by their clients' addresses");
        Ok(Self {
            port: bound.port(),
            udp: tokio::spawn(serve_udp_by_source(udp, route.clone())),
            tcp: tokio::spawn(serve_tcp(tcp, move |_, src| route(src.ip()))),
        })
    }

    /// The port every cluster answers on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

async fn serve_udp_by_source<H: RequestHandler + Clone>(
    socket: Arc<UdpSocket>,
    route: SourceRoute<H>,
) {
    let mut buf = vec![0u8; UDP_BUFFER];
    loop {
        let (len, src) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(e) => {
                warn!(error = %e, "reading from the shared DNS socket");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(resolver) = route(src.ip()) else {
            debug!(%src, "no cluster answers this address");
            continue;
        };
        let (raw, socket) = (buf[..len].to_vec(), socket.clone());
        tokio::spawn(async move {
            if let Some(answer) = resolver.answer(raw, src, Protocol::Udp).await {
                if let Err(e) = socket.send_to(&answer, src).await {
                    debug!(error = %e, %src, "sending a DNS answer");
                }
            }
        });
    }
}

/// The cluster at `dst`, if it is a loopback address one answers at.
fn route_to<H>(route: &Route<H>, dst: IpAddr) -> Option<H> {
    match dst {
        IpAddr::V4(v4) if v4.is_loopback() => route(v4),
        _ => None,
    }
}

async fn serve_udp<H: RequestHandler + Clone>(socket: Arc<UdpSocket>, route: Route<H>) {
    let mut buf = vec![0u8; UDP_BUFFER];
    let fd = socket.as_raw_fd();
    loop {
        let (len, src, dst) =
            match socket.async_io(Interest::READABLE, || receive(fd, &mut buf)).await {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                    debug!(error = %e, "reading a DNS query");
                    continue;
                }
                Err(e) => {
                    // Not this query's: give whatever it is a moment to pass.
                    warn!(error = %e, "reading from the shared DNS socket");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
        let Some(resolver) = route_to(&route, IpAddr::V4(dst)) else {
            debug!(%dst, "no cluster answers at this address");
            continue;
        };
        let (raw, socket) = (buf[..len].to_vec(), socket.clone());
        tokio::spawn(async move {
            if let Some(answer) = answer(&resolver, raw, SocketAddr::V4(src), Protocol::Udp).await {
                if let Err(e) = send_from(&socket, &answer, dst, src).await {
                    debug!(error = %e, %src, "sending a DNS answer");
                }
            }
        });
    }
}

/// One datagram: its length, who sent it and the address it was sent to.
fn receive(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddrV4, Ipv4Addr)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut control = nix::cmsg_space!(libc::in_pktinfo);
    let message = recvmsg::<SockaddrIn>(fd, &mut iov, Some(&mut control), MsgFlags::empty())
        .map_err(std::io::Error::from)?;
    let src = message.address.map(SocketAddrV4::from);
    let mut dst = None;
    for control in message.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::Ipv4PacketInfo(info) = control {
            dst = Some(Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr)));
        }
    }
    match (src, dst) {
        (Some(src), Some(dst)) => Ok((message.bytes, src, dst)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "a datagram without its addresses",
        )),
    }
}

/// Send `answer` to `to` from address `from`, as the query was sent to it.
async fn send_from(
    socket: &UdpSocket,
    answer: &[u8],
    from: Ipv4Addr,
    to: SocketAddrV4,
) -> std::io::Result<()> {
    let info = libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: libc::in_addr { s_addr: u32::from(from).to_be() },
        ipi_addr: libc::in_addr { s_addr: 0 },
    };
    let to = SockaddrIn::from(to);
    let fd = socket.as_raw_fd();
    let send = || {
        let control = [ControlMessage::Ipv4PacketInfo(&info)];
        let iov = [IoSlice::new(answer)];
        sendmsg(fd, &iov, &control, MsgFlags::empty(), Some(&to)).map_err(std::io::Error::from)
    };
    socket.async_io(Interest::WRITABLE, send).await.map(drop)
}

/// Connections accepted on `listener`, each answered by the cluster `pick` names for it (from
/// the connection and its peer's address), or closed at once when it names none.
async fn serve_tcp<H, F>(listener: TcpListener, pick: F)
where
    H: RequestHandler + Clone,
    F: Fn(&TcpStream, SocketAddr) -> Option<Answerer<H>>,
{
    loop {
        let (stream, src) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                debug!(error = %e, "accepting a DNS connection");
                continue;
            }
        };
        let Some(resolver) = pick(&stream, src) else { continue };
        tokio::spawn(serve_connection(stream, src, resolver));
    }
}

/// Queries on one TCP connection, each with its two-byte length, answered in turn.
async fn serve_connection<H: RequestHandler>(
    mut stream: TcpStream,
    src: SocketAddr,
    resolver: Answerer<H>,
) {
    loop {
        let Ok(Ok(len)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else {
            return;
        };
        let mut raw = vec![0u8; usize::from(len)];
        if stream.read_exact(&mut raw).await.is_err() {
            return;
        }
        let Some(answer) = resolver.answer(raw, src, Protocol::Tcp).await else { continue };
        let Ok(len) = u16::try_from(answer.len()) else { return };
        if stream.write_u16(len).await.is_err() || stream.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// `resolver`'s answer to the query in `raw` from `src` over `protocol`, encoded; `None` for
/// what is not a DNS message. What a server that is relayed queries ([`Relay`]) answers with.
pub async fn answer<H: RequestHandler>(
    resolver: &H,
    raw: Vec<u8>,
    src: SocketAddr,
    protocol: Protocol,
) -> Option<Vec<u8>> {
    let request = match Request::from_bytes(raw, src, protocol) {
        Ok(request) => request,
        Err(e) => {
            debug!(error = %e, %src, "not a DNS query");
            return None;
        }
    };
    let captured = Captured { protocol, answer: Arc::default() };
    resolver.handle_request::<_, TokioTime>(&request, captured.clone()).await;
    let answer = captured.answer.lock().take();
    answer
}

/// A response handler that keeps the encoded answer.
#[derive(Clone)]
struct Captured {
    protocol: Protocol,
    answer: Arc<Mutex<Option<Vec<u8>>>>,
}

#[async_trait::async_trait]
impl ResponseHandler for Captured {
    async fn send_response<'a>(
        &mut self,
        response: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> std::result::Result<ResponseInfo, hickory_server::net::NetError> {
        let id = response.metadata().id;
        let max = match (self.protocol, response.edns()) {
            (Protocol::Udp, Some(edns)) => edns.max_payload().max(512),
            // RFC 1035 4.2.1: without EDNS, at most 512 bytes over UDP.
            (Protocol::Udp, None) => 512,
            _ => u16::MAX,
        };
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max);
        let info = match response.destructive_emit(&mut encoder) {
            Ok(info) => info,
            Err(e) => {
                debug!(error = %e, "the answer does not fit: SERVFAIL");
                bytes.clear();
                let mut encoder = BinEncoder::new(&mut bytes);
                let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
                metadata.response_code = ResponseCode::ServFail;
                let header = Header { metadata, counts: HeaderCounts::default() };
                header.emit(&mut encoder)?;
                ResponseInfo::from(header)
            }
        };
        *self.answer.lock() = Some(bytes);
        Ok(info)
    }
}
