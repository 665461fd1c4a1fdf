//! [`Resolver`]: the request handler. Names in the cluster domain are answered from the current
//! [`Zone`] (authoritative); other names are forwarded to the upstream servers and their answer
//! relayed, or SERVFAIL when none answers, as CoreDNS's `forward` plugin does.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use hickory_server::net::client::Client;
use hickory_server::net::runtime::{Time, TokioRuntimeProvider};
use hickory_server::net::tcp::TcpClientStream;
use hickory_server::net::udp::UdpClientStream;
use hickory_server::net::xfer::{DnsHandle, Protocol};
use hickory_server::proto::op::{
    DnsRequestOptions, DnsResponse, Edns, MessageType, Metadata, OpCode, Query, ResponseCode,
};
use hickory_server::proto::rr::{DNSClass, Record};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use parking_lot::RwLock;
use tracing::{debug, warn};

use crate::error::{DnsError, Result};
use crate::zone::{Outcome, Zone};

/// How long one upstream server is given to answer before the next is tried.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(2);
/// The DNS port upstream servers listen on.
const DNS_PORT: u16 = 53;

/// The current zone, shared by the server and whoever watches Services and EndpointSlices; the
/// snapshot is replaced whole, and a query sees either the old one or the new one. A zone made
/// [`SharedZone::pending`] is not loaded until its first [`SharedZone::replace`].
#[derive(Clone, Debug)]
pub struct SharedZone {
    current: Arc<RwLock<Arc<Zone>>>,
    loaded: Arc<tokio::sync::watch::Sender<bool>>,
}

impl SharedZone {
    /// Shares `zone`, loaded.
    pub fn new(zone: Zone) -> Self {
        Self::with(zone, true)
    }

    /// An empty zone of `domain` waiting for its first [`SharedZone::replace`]: until then a
    /// [`Resolver`] over it asks for it ([`Resolver::on_pending`]) and waits.
    pub fn pending(domain: &str) -> Result<Self> {
        Ok(Self::with(Zone::empty(domain)?, false))
    }

    fn with(zone: Zone, loaded: bool) -> Self {
        let (loaded, _) = tokio::sync::watch::channel(loaded);
        Self { current: Arc::new(RwLock::new(Arc::new(zone))), loaded: Arc::new(loaded) }
    }

    /// The current snapshot.
    pub fn current(&self) -> Arc<Zone> {
        self.current.read().clone()
    }

    /// Makes `zone` the current snapshot, its SOA serial one past the previous one's; the zone
    /// is loaded from then on.
    pub fn replace(&self, zone: Zone) {
        {
            let mut current = self.current.write();
            let serial = current.serial().wrapping_add(1);
            *current = Arc::new(zone.with_serial(serial));
        }
        self.loaded.send_replace(true);
    }

    /// Whether the zone has been loaded.
    pub fn is_loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Wait until the zone is loaded, at most `limit`; whether it is.
    pub async fn loaded_within(&self, limit: Duration) -> bool {
        let mut loaded = self.loaded.subscribe();
        let waited = tokio::time::timeout(limit, loaded.wait_for(|l| *l)).await;
        matches!(waited, Ok(Ok(_)))
    }
}

/// What a [`Resolver`] over a pending zone calls to have it loaded.
pub type OnPending = Arc<dyn Fn() + Send + Sync>;

/// How long a query to a pending zone waits for it before it is answered SERVFAIL (the client
/// asks again), as CoreDNS answers before its first sync.
pub const PENDING_WAIT: Duration = Duration::from_secs(2);

/// The cluster DNS request handler: a zone, and the servers other names are forwarded to.
#[derive(Clone)]
pub struct Resolver {
    zone: SharedZone,
    /// Shared: a resolver is cloned for every query the shared server routes to it.
    upstream: Arc<[SocketAddr]>,
    forward_timeout: Duration,
    on_pending: Option<OnPending>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("zone", &self.zone)
            .field("upstream", &self.upstream)
            .field("forward_timeout", &self.forward_timeout)
            .field("on_pending", &self.on_pending.is_some())
            .finish()
    }
}

impl Resolver {
    /// Answers from `zone`, forwards other names to `upstream`, tried in order.
    pub fn new(zone: SharedZone, upstream: Vec<SocketAddr>) -> Self {
        Self { zone, upstream: upstream.into(), forward_timeout: FORWARD_TIMEOUT, on_pending: None }
    }

    /// Call `load` when a query finds the zone pending ([`SharedZone::pending`]): it is to have
    /// the zone loaded (the query then waits up to [`PENDING_WAIT`] for it).
    pub fn on_pending(mut self, load: OnPending) -> Self {
        self.on_pending = Some(load);
        self
    }

    /// Gives each upstream server `timeout` to answer (default [`FORWARD_TIMEOUT`]).
    pub fn with_forward_timeout(mut self, timeout: Duration) -> Self {
        self.forward_timeout = timeout;
        self
    }

    /// The zone this handler answers from.
    pub fn zone(&self) -> &SharedZone {
        &self.zone
    }

    /// The first upstream answer to `request`'s question, trying each server in turn over the
    /// request's own protocol.
    async fn forward(&self, request: &Request, protocol: Protocol) -> Option<DnsResponse> {
        let query = request.request_info().ok()?.query.original().clone();
        for &server in self.upstream.iter() {
            let result = match protocol {
                Protocol::Tcp => {
                    let (stream, sender) = TcpClientStream::new(
                        server,
                        None,
                        Some(self.forward_timeout),
                        TokioRuntimeProvider::default(),
                    );
                    match stream.await {
                        Ok(stream) => {
                            let (client, bg) = Client::<TokioRuntimeProvider>::with_timeout(
                                stream,
                                sender,
                                self.forward_timeout,
                            );
                            let bg = tokio::spawn(bg);
                            let result = first(client, query.clone(), request).await;
                            bg.abort();
                            result
                        }
                        Err(error) => Err(error.to_string()),
                    }
                }
                _ => {
                    let stream = UdpClientStream::builder(server, TokioRuntimeProvider::default())
                        .with_timeout(Some(self.forward_timeout))
                        .build();
                    let (client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
                    let bg = tokio::spawn(bg);
                    let result = first(client, query.clone(), request).await;
                    bg.abort();
                    result
                }
            };
            match result {
                Ok(response) => return Some(response),
                Err(error) => {
                    warn!(%server, name = %query.name(), error, "upstream did not answer")
                }
            }
        }
        None
    }
}

/// The first response of `handle` to `query`.
async fn first<H: DnsHandle>(
    handle: H,
    query: Query,
    request: &Request,
) -> std::result::Result<DnsResponse, String> {
    let mut options = DnsRequestOptions::default();
    options.recursion_desired = request.metadata.recursion_desired;
    match handle.lookup(query, options).next().await {
        Some(Ok(response)) => Ok(response),
        Some(Err(error)) => Err(error.to_string()),
        None => Err("no response".to_owned()),
    }
}

#[async_trait::async_trait]
impl RequestHandler for Resolver {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let response_edns = request.edns.as_ref().map(|edns| {
            let mut response = Edns::new();
            response.set_max_payload(edns.max_payload().max(512));
            response.set_version(0);
            response
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(edns) = &response_edns {
            builder.edns(edns);
        }
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = !self.upstream.is_empty();
        let info = match request.request_info() {
            _ if request.metadata.message_type != MessageType::Query => None,
            _ if request.metadata.op_code != OpCode::Query => {
                metadata.response_code = ResponseCode::NotImp;
                None
            }
            Err(_) => {
                metadata.response_code = ResponseCode::FormErr;
                None
            }
            Ok(info) => Some(info),
        };
        let Some(info) = info else {
            if metadata.response_code == ResponseCode::NoError {
                metadata.response_code = ResponseCode::FormErr;
            }
            return send(response_handle, builder.build_no_records(metadata)).await;
        };
        let query = info.query;
        if !self.zone.is_loaded() {
            if let Some(load) = &self.on_pending {
                load();
            }
            if !self.zone.loaded_within(PENDING_WAIT).await {
                debug!(name = %query.name(), "the zone is not loaded yet");
                metadata.response_code = ResponseCode::ServFail;
                return send(response_handle, builder.build_no_records(metadata)).await;
            }
        }
        // The cluster domain is answered from the zone, in class IN only; the rest is forwarded.
        let zone = self.zone.current();
        if zone.contains(query.name()) && query.query_class() != DNSClass::IN {
            metadata.response_code = ResponseCode::Refused;
            return send(response_handle, builder.build_no_records(metadata)).await;
        }
        if let Some(lookup) = zone.lookup(query.name(), query.query_type()) {
            metadata.authoritative = true;
            metadata.response_code = match lookup.outcome {
                Outcome::NxDomain => ResponseCode::NXDomain,
                Outcome::Found | Outcome::NoData => ResponseCode::NoError,
            };
            let original = query.original().name();
            let answers = lookup.answers;
            debug!(name = %original, r#type = %query.query_type(), outcome = ?lookup.outcome, "cluster answer");
            let response = builder.build(
                metadata,
                answers.iter(),
                std::iter::empty(),
                lookup.authority.iter(),
                lookup.additionals.iter(),
            );
            return send(response_handle, response).await;
        }
        let Some(upstream) = self.forward(request, info.protocol).await else {
            metadata.response_code = ResponseCode::ServFail;
            return send(response_handle, builder.build_no_records(metadata)).await;
        };
        let message = upstream.into_message();
        metadata.response_code = message.metadata.response_code;
        metadata.authoritative = message.metadata.authoritative;
        metadata.truncation = message.metadata.truncation;
        metadata.authentic_data = message.metadata.authentic_data;
        metadata.recursion_available = message.metadata.recursion_available;
        let response = builder.build(
            metadata,
            message.answers.iter(),
            message.authorities.iter(),
            std::iter::empty(),
            message.additionals.iter(),
        );
        let result = response_handle.send_response(response).await;
        result.unwrap_or_else(|error| {
            warn!(%error, "sending a DNS response");
            ResponseInfo::from(hickory_server::proto::op::Header {
                metadata,
                counts: Default::default(),
            })
        })
    }
}

/// Sends `response`, logging a failure.
async fn send<'a, R: ResponseHandler>(
    mut handle: R,
    response: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
) -> ResponseInfo {
    let metadata = *response.metadata();
    match handle.send_response(response).await {
        Ok(info) => info,
        Err(error) => {
            warn!(%error, "sending a DNS response");
            ResponseInfo::from(hickory_server::proto::op::Header {
                metadata,
                counts: Default::default(),
            })
        }
    }
}

/// The upstream servers named by the resolver configuration at `path` (`/etc/resolv.conf`).
pub fn upstream_from_resolv_conf(path: &Path) -> Result<Vec<SocketAddr>> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| DnsError::ResolvConf { path: path.to_owned(), source })?;
    Ok(parse_resolv_conf(&text))
}

/// The `nameserver` lines of a resolver configuration, each on port 53; addresses with an
/// interface scope (`fe80::1%eth0`) are left out.
pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next()).flatten()
        })
        .filter_map(|address| address.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, DNS_PORT))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_nameservers_in_order() {
        let text = "# comment\nsearch default.svc\nnameserver 10.0.0.10\nnameserver fd00::1\n\
                    nameserver fe80::1%eth0\noptions ndots:5\nnameserver nonsense\n";
        let servers = parse_resolv_conf(text);
        assert_eq!(servers, vec!["10.0.0.10:53".parse().unwrap(), "[fd00::1]:53".parse().unwrap()]);
    }

    #[test]
    fn replace_bumps_the_serial() {
        let shared = SharedZone::new(Zone::empty("cluster.local").unwrap());
        let before = shared.current().serial();
        shared.replace(Zone::empty("cluster.local").unwrap());
        assert_eq!(shared.current().serial(), before + 1);
    }
}
