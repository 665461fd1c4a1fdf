//! A tenant's cluster DNS answering its Service names, against the same library serving the same
//! names from a static zone, and what its names and servers cost in memory.
//!
//! Run with `cargo bench -p carrel-dns --bench dns`. A plain program (no harness); a watchdog
//! ends a hung run. `CARREL_BENCH_DNS_SERVICES` (default 2,000) sets the zone's size.
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | A queries over UDP, one client, names at random | `carrel_dns::SharedServer` as `carrel up` runs it: one port for [`TENANTS`] tenants, the queried one's zone built from its Services and EndpointSlices, asked at its own loopback address | the faster, per percentile, of two servers of the same library on the same runtime: `hickory_server::Server` over hickory's own `Catalog` with an `InMemoryZoneHandler` of the same A records and an SOA, and ours's own transport (`SharedServer`, as many addresses routed) over a handler that answers from a map of the same records and looks at nothing else: what the zone and the resolver cost over the least a server can do |
//! | memory per Service | resident growth of a zone of N Services with 2-endpoint slices, per Service | - |
//! | memory per tenant resolver | resident growth of 10,000 tenants' entries (an address, a resolver over a pending zone), per tenant | - |
//!
//! Both servers get byte-identical queries from one blocking client thread (a connected UDP
//! socket), alternating in rounds so that drift in the machine falls on both alike; each answer
//! is checked (its ID, NOERROR, one answer).

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, section, verdict, watchdog, Run, Table};
use carrel_dns::{
    Resolver, Route, SharedServer, SharedZone, Zone, DEFAULT_DOMAIN, SERVICE_NAME_LABEL, TTL,
};
use hickory_server::net::runtime::{Time, TokioRuntimeProvider};
use hickory_server::proto::op::{Message, Metadata, Query};
use hickory_server::proto::rr::rdata::{A, SOA};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::MessageResponseBuilder;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const NAMESPACES: usize = 10;
const ROUNDS: usize = 6;
const QUERIES_PER_ROUND: usize = 2_000;
const RESOLVERS_FOR_MEMORY: usize = 10_000;
/// Tenants on the shared port beside the one queried.
const TENANTS: u32 = 1_000;

/// Service `i`: its name, namespace and cluster IP.
fn service_of(i: usize) -> (String, String, Ipv4Addr) {
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 16, 0)) + i as u32);
    (format!("svc-{i}"), format!("ns-{}", i % NAMESPACES), ip)
}

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..ObjectMeta::default()
    }
}

/// `n` Services, each with an EndpointSlice of two ready endpoints and a named port.
fn objects(n: usize) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut services = Vec::with_capacity(n);
    let mut slices = Vec::with_capacity(n);
    for i in 0..n {
        let (name, namespace, ip) = service_of(i);
        let port = ServicePort { name: Some("http".into()), port: 80, ..ServicePort::default() };
        services.push(Service {
            metadata: meta(&namespace, &name),
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.to_string()),
                cluster_ips: Some(vec![ip.to_string()]),
                ports: Some(vec![port]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        });
        let mut slice_meta = meta(&namespace, &format!("{name}-abcde"));
        slice_meta.labels = Some(BTreeMap::from([(SERVICE_NAME_LABEL.to_owned(), name)]));
        let pods = [(i * 2) as u32, (i * 2 + 1) as u32];
        slices.push(EndpointSlice {
            metadata: slice_meta,
            address_type: "IPv4".into(),
            endpoints: pods
                .iter()
                .map(|p| Endpoint {
                    addresses: vec![
                        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)) + p).to_string()
                    ],
                    ..Endpoint::default()
                })
                .collect(),
            ports: None,
        });
    }
    (services, slices)
}

/// The first baseline: hickory's own authority with the same A records, on `runtime`.
fn static_server(runtime: &tokio::runtime::Runtime, n: usize) -> SocketAddr {
    let origin = Name::from_str(&format!("{DEFAULT_DOMAIN}.")).expect("the domain");
    let mut handler = InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
        origin.clone(),
        ZoneType::Primary,
        AxfrPolicy::Deny,
    );
    let soa = SOA::new(origin.clone(), origin.clone(), 1, 7200, 1800, 86400, TTL);
    handler.upsert_mut(Record::from_rdata(origin.clone(), TTL, RData::SOA(soa)), 1);
    for i in 0..n {
        let (name, namespace, ip) = service_of(i);
        let fqdn =
            Name::from_str(&format!("{name}.{namespace}.svc.{DEFAULT_DOMAIN}.")).expect("a name");
        handler.upsert_mut(Record::from_rdata(fqdn, TTL, RData::A(A(ip))), 1);
    }
    let mut catalog = Catalog::new();
    catalog.upsert(origin.into(), vec![Arc::new(handler)]);
    runtime.block_on(async move {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("an address");
        let mut server = hickory_server::Server::new(catalog);
        server.register_socket(socket);
        // Served until the process ends.
        std::mem::forget(server);
        addr
    })
}

/// The least a server built on the same library can do: answer each A question from a map of
/// the same records, nothing else looked at.
#[derive(Clone, Debug)]
struct StaticAnswers {
    records: Arc<HashMap<LowerName, Record>>,
}

#[async_trait::async_trait]
impl RequestHandler for StaticAnswers {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let builder = MessageResponseBuilder::from_message_request(request);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let answer = match request.request_info() {
            Ok(info) => self.records.get(info.query.name()),
            Err(_) => None,
        };
        let response = builder.build(
            metadata,
            answer,
            std::iter::empty(),
            std::iter::empty(),
            std::iter::empty(),
        );
        response_handle.send_response(response).await.expect("an answer sent")
    }
}

/// The second baseline: [`StaticAnswers`] of the same A records on the same transport as ours
/// (a [`SharedServer`] with as many addresses routed), asked at `at`; keeps the server running
/// in `keep`.
fn static_map_server(
    runtime: &tokio::runtime::Runtime,
    n: usize,
    at: Ipv4Addr,
    keep: &mut Vec<SharedServer>,
) -> SocketAddr {
    let records = (0..n)
        .map(|i| {
            let (name, namespace, ip) = service_of(i);
            let fqdn = Name::from_str(&format!("{name}.{namespace}.svc.{DEFAULT_DOMAIN}."))
                .expect("a name");
            (LowerName::new(&fqdn), Record::from_rdata(fqdn, TTL, RData::A(A(ip))))
        })
        .collect();
    let handler = StaticAnswers { records: Arc::new(records) };
    let routes: HashMap<Ipv4Addr, StaticAnswers> =
        (0..TENANTS).map(|i| (Ipv4Addr::from(u32::from(at) + i), handler.clone())).collect();
    let route: Route<StaticAnswers> = Arc::new(move |addr| routes.get(&addr).cloned());
    let server = runtime.block_on(async { SharedServer::start(0, route) }).expect("a server");
    let addr = SocketAddr::from((at, server.port()));
    keep.push(server);
    addr
}

/// The queries every server gets, the same bytes: A for Service names at random (seeded).
fn queries(n: usize, count: usize) -> Vec<Vec<u8>> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    (0..count)
        .map(|q| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let (name, namespace, _) = service_of((state % n as u64) as usize);
            let fqdn = Name::from_str(&format!("{name}.{namespace}.svc.{DEFAULT_DOMAIN}."))
                .expect("a name");
            let mut message = Message::query();
            message.metadata.id = q as u16;
            message.metadata.recursion_desired = true;
            message.add_query(Query::query(fqdn, RecordType::A));
            message.to_vec().expect("a query")
        })
        .collect()
}

/// Send each query to `server` and wait for its answer, checked; each round trip's time.
fn ask(client: &UdpSocket, server: SocketAddr, queries: &[Vec<u8>]) -> Run {
    client.connect(server).expect("connect");
    let mut buf = [0u8; 1500];
    let mut latencies = Vec::with_capacity(queries.len());
    let start = Instant::now();
    for query in queries {
        let sent = Instant::now();
        client.send(query).expect("send");
        let len = client.recv(&mut buf).expect("an answer");
        latencies.push(sent.elapsed());
        let answer = &buf[..len];
        assert_eq!(answer[..2], query[..2], "the answer to this query");
        assert_eq!(answer[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([answer[6], answer[7]]), 1, "one answer");
    }
    Run::from_parts(latencies, start.elapsed())
}

/// Resident memory of this process, in bytes.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn main() {
    watchdog(Duration::from_secs(600), "dns");
    let n: usize = std::env::var("CARREL_BENCH_DNS_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let runtime = carrel_bench::runtime("dns").expect("a runtime");
    let mut table = Table::default();
    section("memory");
    let first = u32::from(Ipv4Addr::new(127, 1, 0, 1));
    // Each measured on a heap that has freed nothing yet, so that growth is what it holds.
    let before = resident();
    let resolvers: HashMap<Ipv4Addr, Resolver> = (0..RESOLVERS_FOR_MEMORY as u32)
        .map(|i| {
            let zone = SharedZone::pending(DEFAULT_DOMAIN).expect("a zone");
            (Ipv4Addr::from(first + i), Resolver::new(zone, Vec::new()))
        })
        .collect();
    let per_resolver = resident().saturating_sub(before) as f64 / RESOLVERS_FOR_MEMORY as f64;
    println!("{RESOLVERS_FOR_MEMORY} tenants: {:.0} bytes per tenant resolver", per_resolver);
    let (services, slices) = objects(n * 5);
    let before = resident();
    let big = Zone::build(DEFAULT_DOMAIN, &services, &slices).expect("the zone");
    let per_service = resident().saturating_sub(before) as f64 / (n * 5) as f64;
    println!("a zone of {} Services: {:.0} bytes per Service", n * 5, per_service);
    drop((big, services, slices, resolvers));

    section(&format!("A queries for {n} Services over UDP"));
    let (services, slices) = objects(n);
    let zone = Zone::build(DEFAULT_DOMAIN, &services, &slices).expect("the zone");
    // The queried tenant at 127.1.0.1, the others after it, each with a zone of its own.
    let mut tenants: HashMap<Ipv4Addr, Resolver> = (1..TENANTS)
        .map(|i| {
            let zone = SharedZone::new(Zone::empty(DEFAULT_DOMAIN).expect("a zone"));
            (Ipv4Addr::from(first + i), Resolver::new(zone, Vec::new()))
        })
        .collect();
    let queried = Ipv4Addr::from(first);
    tenants.insert(queried, Resolver::new(SharedZone::new(zone), Vec::new()));
    let route: Route = Arc::new(move |addr| tenants.get(&addr).cloned());
    let shared = runtime.block_on(async { SharedServer::start(0, route) }).expect("our server");
    let ours = SocketAddr::from((queried, shared.port()));
    let catalog = static_server(&runtime, n);
    let mut keep = Vec::new();
    let map = static_map_server(&runtime, n, queried, &mut keep);
    let client = UdpSocket::bind("127.0.0.1:0").expect("a client socket");
    client.set_read_timeout(Some(Duration::from_secs(2))).expect("a timeout");
    let all = queries(n, QUERIES_PER_ROUND * ROUNDS);
    // A warm-up round each, not counted.
    for server in [ours, catalog, map] {
        ask(&client, server, &all[..QUERIES_PER_ROUND]);
    }
    let mut runs = [Run::default(), Run::default(), Run::default()];
    for (round, chunk) in all.chunks(QUERIES_PER_ROUND).enumerate() {
        // Each server first in turn, so that drift falls on all alike.
        let mut order = [0, 1, 2];
        order.rotate_left(round % 3);
        let mut got: [Option<Run>; 3] = [None, None, None];
        for which in order {
            got[which] = Some(ask(&client, [ours, catalog, map][which], chunk));
        }
        let [o, c, m] = got.map(|r| r.expect("asked"));
        println!(
            "round {round}: ours {} | catalog {} | static map {}",
            o.describe(),
            c.describe(),
            m.describe()
        );
        for (run, new) in runs.iter_mut().zip([o, c, m]) {
            run.merge(new);
        }
    }
    let [ours_run, catalog_run, map_run] = runs;
    table.header(&format!(
        "DNS: A for a Service name, {n} Services, one client over UDP, {TENANTS} tenants on the \
         port; baseline: the faster of hickory's Server and Catalog over an in-memory zone, and \
         the same transport as ours with a handler answering from a map"
    ));
    for (what, p) in [("p50", 50.0), ("p99", 99.0)] {
        let (o, c, m) = (ours_run.percentile(p), catalog_run.percentile(p), map_run.percentile(p));
        let (b, which) = if m <= c { (m, "static map") } else { (c, "catalog") };
        let r = o.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE);
        println!("{what}: ours {}, catalog {}, static map {}", ms(o), ms(c), ms(m));
        table.row(
            what,
            ms(o),
            format!("{} ({which})", ms(b)),
            ratio(o.as_secs_f64(), b.as_secs_f64()),
            verdict(r <= 1.5, "≤ 1.5x".into()),
        );
    }

    drop((shared, keep));
    table.header("DNS: memory (resident growth)");
    table.row(
        &format!("per Service (zone of {}, 2 endpoints each)", n * 5),
        format!("{per_service:.0} B"),
        "-".into(),
        "-".into(),
        "-".into(),
    );
    table.row(
        "per tenant resolver (an address and a resolver over an empty zone)",
        format!("{per_resolver:.0} B"),
        "-".into(),
        "-".into(),
        "-".into(),
    );
    table.print();
}
