//! A `Server` on 127.0.0.1:0 queried over UDP and TCP with hickory's client: cluster answers, a
//! zone swap, forwarding to an upstream hickory authority, SERVFAIL from a dead upstream, and the
//! shared server telling clusters apart by the address queries are sent to or come from.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use carrel_dns::{
    Answerer, Protocol, Relay, Resolver, Server, SharedZone, Zone, DEFAULT_DOMAIN,
    SERVICE_NAME_LABEL,
};
use hickory_server::net::client::{Client, ClientHandle};
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::net::tcp::TcpClientStream;
use hickory_server::net::udp::UdpClientStream;
use hickory_server::proto::op::{DnsResponse, ResponseCode};
use hickory_server::proto::rr::rdata::{A, SOA};
use hickory_server::proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() }
}

fn web(ip: &str) -> Service {
    Service {
        metadata: meta("default", "web"),
        spec: Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn zone(web_ip: &str) -> Zone {
    let headless = Service {
        metadata: meta("db", "pg"),
        spec: Some(ServiceSpec { cluster_ip: Some("None".into()), ..Default::default() }),
        ..Default::default()
    };
    let mut slice_meta = meta("db", "pg-x");
    slice_meta.labels = Some(BTreeMap::from([(SERVICE_NAME_LABEL.into(), "pg".into())]));
    let slice = EndpointSlice {
        metadata: slice_meta,
        address_type: "IPv4".into(),
        endpoints: ["10.1.0.1", "10.1.0.2"]
            .iter()
            .map(|ip| Endpoint { addresses: vec![(*ip).into()], ..Default::default() })
            .collect(),
        ports: None,
    };
    Zone::build(DEFAULT_DOMAIN, &[web(web_ip), headless], &[slice]).unwrap()
}

async fn udp_client(addr: SocketAddr) -> Client<TokioRuntimeProvider> {
    let stream = UdpClientStream::builder(addr, TokioRuntimeProvider::default())
        .with_timeout(Some(Duration::from_secs(5)))
        .build();
    let (client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
    tokio::spawn(bg);
    client
}

async fn tcp_client(addr: SocketAddr) -> Client<TokioRuntimeProvider> {
    let timeout = Some(Duration::from_secs(5));
    let (stream, sender) =
        TcpClientStream::new(addr, None, timeout, TokioRuntimeProvider::default());
    let (client, bg) = Client::<TokioRuntimeProvider>::new(stream.await.unwrap(), sender);
    tokio::spawn(bg);
    client
}

async fn query<C: ClientHandle>(client: &mut C, name: &str, t: RecordType) -> DnsResponse {
    client.query(Name::from_str(name).unwrap(), DNSClass::IN, t).await.unwrap()
}

fn addresses(response: &DnsResponse) -> Vec<String> {
    let mut v: Vec<String> = response.answers.iter().map(|r| r.data.to_string()).collect();
    v.sort();
    v
}

/// A hickory authority for `example.com.` with `www.example.com. A 192.0.2.7`.
async fn upstream() -> (hickory_server::Server<Catalog>, SocketAddr) {
    let origin = Name::from_str("example.com.").unwrap();
    let mut handler = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
        origin.clone(),
        ZoneType::Primary,
        AxfrPolicy::Deny,
    );
    let soa = SOA::new(origin.clone(), origin.clone(), 1, 3600, 600, 86400, 60);
    handler.upsert_mut(Record::from_rdata(origin.clone(), 60, RData::SOA(soa)), 1);
    let www = Name::from_str("www.example.com.").unwrap();
    handler.upsert_mut(Record::from_rdata(www, 60, RData::A(A(Ipv4Addr::new(192, 0, 2, 7)))), 1);
    let mut catalog = Catalog::new();
    catalog.upsert(origin.into(), vec![Arc::new(handler)]);
    let mut server = hickory_server::Server::new(catalog);
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    server.register_socket(socket);
    (server, addr)
}

#[tokio::test]
async fn cluster_answers_over_udp_and_tcp() {
    let shared = SharedZone::new(zone("10.96.0.10"));
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), shared, vec![]).await.unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    let mut udp = udp_client(addr).await;
    let mut tcp = tcp_client(addr).await;

    for response in [
        query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await,
        query(&mut tcp, "web.default.svc.cluster.local.", RecordType::A).await,
    ] {
        assert_eq!(response.metadata.response_code, ResponseCode::NoError);
        assert!(response.metadata.authoritative);
        assert_eq!(addresses(&response), vec!["10.96.0.10"]);
    }

    // Names are case-insensitive.
    let upper = query(&mut udp, "WEB.Default.svc.CLUSTER.local.", RecordType::A).await;
    assert_eq!(addresses(&upper), vec!["10.96.0.10"]);

    let headless = query(&mut tcp, "pg.db.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&headless), vec!["10.1.0.1", "10.1.0.2"]);

    let srv = query(&mut udp, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV).await;
    assert_eq!(addresses(&srv), vec!["0 100 80 web.default.svc.cluster.local."]);

    let missing = query(&mut udp, "nope.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(missing.authorities[0].record_type(), RecordType::SOA);

    let nodata = query(&mut tcp, "web.default.svc.cluster.local.", RecordType::AAAA).await;
    assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
    assert!(nodata.answers.is_empty());
    assert_eq!(nodata.authorities[0].record_type(), RecordType::SOA);

    // Outside the domain with no upstream: SERVFAIL.
    let outside = query(&mut udp, "www.example.com.", RecordType::A).await;
    assert_eq!(outside.metadata.response_code, ResponseCode::ServFail);

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_zone_swap_is_seen_by_the_next_query() {
    let shared = SharedZone::new(zone("10.96.0.10"));
    let server =
        Server::bind("127.0.0.1:0".parse().unwrap(), shared.clone(), vec![]).await.unwrap();
    let mut udp = udp_client(server.local_addr()).await;
    let before = query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&before), vec!["10.96.0.10"]);
    shared.replace(zone("10.96.0.99"));
    let after = query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&after), vec!["10.96.0.99"]);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn other_names_are_forwarded_upstream() {
    let (mut upstream, upstream_addr) = upstream().await;
    let shared = SharedZone::new(zone("10.96.0.10"));
    let server =
        Server::bind("127.0.0.1:0".parse().unwrap(), shared, vec![upstream_addr]).await.unwrap();
    let mut udp = udp_client(server.local_addr()).await;
    let mut tcp = tcp_client(server.local_addr()).await;

    let forwarded = query(&mut udp, "www.example.com.", RecordType::A).await;
    assert_eq!(forwarded.metadata.response_code, ResponseCode::NoError);
    assert_eq!(addresses(&forwarded), vec!["192.0.2.7"]);

    let missing = query(&mut udp, "nope.example.com.", RecordType::A).await;
    assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);

    // The cluster's own names still come from the zone.
    let cluster = query(&mut tcp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&cluster), vec!["10.96.0.10"]);

    server.shutdown().await.unwrap();
    upstream.shutdown_gracefully().await.unwrap();
}

#[tokio::test]
async fn a_dead_upstream_is_servfail() {
    // A socket that never answers.
    let dead = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let resolver =
        Resolver::new(SharedZone::new(zone("10.96.0.10")), vec![dead.local_addr().unwrap()])
            .with_forward_timeout(Duration::from_millis(300));
    let server = Server::serve("127.0.0.1:0".parse().unwrap(), resolver).await.unwrap();
    let mut udp = udp_client(server.local_addr()).await;
    let response = query(&mut udp, "www.example.com.", RecordType::A).await;
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_query_to_a_pending_zone_has_it_loaded_and_waits_for_it() {
    let shared = SharedZone::pending(DEFAULT_DOMAIN).unwrap();
    assert!(!shared.is_loaded());
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let load = {
        let (shared, asked) = (shared.clone(), asked.clone());
        Arc::new(move || {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let shared = shared.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                shared.replace(zone("10.96.0.10"));
            });
        })
    };
    let resolver = Resolver::new(shared.clone(), vec![]).on_pending(load);
    let server = Server::serve("127.0.0.1:0".parse().unwrap(), resolver).await.unwrap();
    let mut udp = udp_client(server.local_addr()).await;
    let first = query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&first), vec!["10.96.0.10"], "answered once loaded, not NXDOMAIN");
    assert!(shared.is_loaded());
    let again = query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(addresses(&again), vec!["10.96.0.10"]);
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1, "asked once, while pending");
    server.shutdown().await.unwrap();

    // A zone nobody loads is SERVFAIL, so that the client asks again, never a false NXDOMAIN.
    let never = SharedZone::pending(DEFAULT_DOMAIN).unwrap();
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), never, vec![]).await.unwrap();
    let mut udp = udp_client(server.local_addr()).await;
    let response = query(&mut udp, "web.default.svc.cluster.local.", RecordType::A).await;
    assert_eq!(response.metadata.response_code, ResponseCode::ServFail);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn one_shared_port_answers_each_cluster_at_its_own_address() {
    let a = Ipv4Addr::new(127, 1, 0, 1);
    let b = Ipv4Addr::new(127, 1, 0, 2);
    let zones = std::collections::HashMap::from([
        (a, Resolver::new(SharedZone::new(zone("10.96.0.10")), vec![])),
        (b, Resolver::new(SharedZone::new(zone("10.96.0.20")), vec![])),
    ]);
    let route: carrel_dns::Route = Arc::new(move |addr| zones.get(&addr).cloned());
    let server = carrel_dns::SharedServer::start(0, route).unwrap();
    let port = server.port();
    for (addr, ip) in [(a, "10.96.0.10"), (b, "10.96.0.20")] {
        let at = SocketAddr::from((addr, port));
        let mut udp = udp_client(at).await;
        let mut tcp = tcp_client(at).await;
        for client in [&mut udp, &mut tcp] {
            let response = query(client, "web.default.svc.cluster.local.", RecordType::A).await;
            assert_eq!(addresses(&response), vec![ip], "{at}");
            assert!(response.metadata.authoritative);
        }
        let srv =
            query(&mut udp, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV).await;
        assert_eq!(addresses(&srv), vec!["0 100 80 web.default.svc.cluster.local."]);
    }
    // An address no cluster answers at gets nothing: no answer, no other cluster's names.
    let nobody = SocketAddr::from((Ipv4Addr::new(127, 1, 0, 3), port));
    let stream = UdpClientStream::builder(nobody, TokioRuntimeProvider::default())
        .with_timeout(Some(Duration::from_millis(300)))
        .build();
    let (mut client, bg) = Client::<TokioRuntimeProvider>::from_sender(stream);
    tokio::spawn(bg);
    let name = Name::from_str("web.default.svc.cluster.local.").unwrap();
    assert!(client.query(name, DNSClass::IN, RecordType::A).await.is_err());
    let refused = tokio::net::TcpStream::connect(nobody).await;
    if let Ok(mut stream) = refused {
        // Accepted by the shared listener, then closed at once.
        use tokio::io::AsyncReadExt;
        let mut byte = [0u8; 1];
        assert_eq!(stream.read(&mut byte).await.unwrap_or(0), 0);
    }
    drop(server);
}

/// `dig` (Debian's dnsutils, which scripts/test.sh installs) asking `server` for `name` from
/// `source`: the answers' data, or `None` when nothing answered.
fn dig_from(source: Ipv4Addr, server: SocketAddr, name: &str, tcp: bool) -> Option<String> {
    let mut dig = std::process::Command::new("dig");
    dig.args(["+short", "+time=1", "+tries=1", "-b", &source.to_string()])
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), name, "A"]);
    if tcp {
        dig.arg("+tcp");
    }
    let out = dig.output().expect("dig (dnsutils) runs");
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shared_address_answers_each_cluster_for_its_own_clients() {
    let (a, b) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    // A cluster another server answers: its clients' queries are relayed there, over the
    // protocol they came by.
    let c = Ipv4Addr::new(127, 0, 0, 5);
    let elsewhere = Arc::new(Elsewhere {
        resolver: Resolver::new(SharedZone::new(zone("10.96.0.30")), vec![]),
        protocols: Arc::default(),
    });
    let zones = std::collections::HashMap::from([
        (
            std::net::IpAddr::V4(a),
            Answerer::Here(Resolver::new(SharedZone::new(zone("10.96.0.10")), vec![])),
        ),
        (
            std::net::IpAddr::V4(b),
            Answerer::Here(Resolver::new(SharedZone::new(zone("10.96.0.20")), vec![])),
        ),
        (std::net::IpAddr::V4(c), Answerer::Relayed(elsewhere.clone())),
    ]);
    let route: carrel_dns::SourceRoute = Arc::new(move |source| zones.get(&source).cloned());
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = carrel_dns::SharedServer::start_by_source(listen, route).unwrap();
    let at = SocketAddr::from((Ipv4Addr::LOCALHOST, server.port()));
    let name = "web.default.svc.cluster.local.";
    let asked = tokio::task::spawn_blocking(move || {
        [(a, false), (a, true), (b, false), (b, true), (Ipv4Addr::new(127, 0, 0, 4), false)]
            .map(|(source, tcp)| dig_from(source, at, name, tcp))
    })
    .await
    .unwrap();
    let [a_udp, a_tcp, b_udp, b_tcp, nobody] = asked;
    assert_eq!(a_udp.as_deref(), Some("10.96.0.10"));
    assert_eq!(a_tcp.as_deref(), Some("10.96.0.10"));
    assert_eq!(b_udp.as_deref(), Some("10.96.0.20"));
    assert_eq!(b_tcp.as_deref(), Some("10.96.0.20"));
    // A client whose address names no cluster gets no answer at all.
    assert_eq!(nobody, None);
    let relayed =
        tokio::task::spawn_blocking(move || [false, true].map(|tcp| dig_from(c, at, name, tcp)))
            .await
            .unwrap();
    assert_eq!(relayed, [Some("10.96.0.30".to_owned()), Some("10.96.0.30".to_owned())]);
    assert_eq!(*elsewhere.protocols.lock().unwrap(), [Protocol::Udp, Protocol::Tcp]);
    drop(server);
}

/// Another server of a cluster: answers relayed queries with its resolver, as a replica
/// answers those relayed to it, and records the protocol each came by.
#[derive(Debug)]
struct Elsewhere {
    resolver: Resolver,
    protocols: Arc<std::sync::Mutex<Vec<Protocol>>>,
}

impl Relay for Elsewhere {
    fn relay(
        &self,
        query: Vec<u8>,
        protocol: Protocol,
    ) -> futures::future::BoxFuture<'static, Option<Vec<u8>>> {
        self.protocols.lock().unwrap().push(protocol);
        let resolver = self.resolver.clone();
        let from = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        Box::pin(async move { carrel_dns::answer(&resolver, query, from, protocol).await })
    }
}
