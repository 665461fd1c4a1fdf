//! A tenant's cluster DNS answering its Service names, against the same library serving the same
//! names from a static zone, and what its names and servers cost in memory.
//!
//! Run with `cargo bench -p carrel-dns --bench dns`. A plain program (no harness); a watchdog
//! ends a hung run. `CARREL_BENCH_DNS_SERVICES` (default 2,000) sets the zone's size.
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | A queries over UDP, one client, names at random | `carrel_dns::Server`: the zone built from the Services and their EndpointSlices, as a tenant's | hickory-server's own `Catalog` over an `InMemoryZoneHandler` holding the same A records and an SOA, served by the same `hickory_server::Server` on the same runtime |
//! | memory per Service | resident growth of a zone of N Services with 2-endpoint slices, per Service | - |
//! | memory per tenant resolver | resident growth of 200 servers (UDP and TCP, an empty zone each), per server | - |
//!
//! Both servers get byte-identical queries from one blocking client thread (a connected UDP
//! socket), alternating in rounds so that drift in the machine falls on both alike; each answer
//! is checked (its ID, NOERROR, one answer).

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, section, verdict, watchdog, Run, Table};
use carrel_dns::{Resolver, Server, SharedZone, Zone, DEFAULT_DOMAIN, SERVICE_NAME_LABEL, TTL};
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::op::{Message, Query};
use hickory_server::proto::rr::rdata::{A, SOA};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneType};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const NAMESPACES: usize = 10;
const ROUNDS: usize = 6;
const QUERIES_PER_ROUND: usize = 2_000;
const SERVERS_FOR_MEMORY: usize = 200;

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

/// The baseline: hickory's own authority with the same A records, on `runtime`.
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

    section(&format!("A queries for {n} Services over UDP"));
    let (services, slices) = objects(n);
    let zone = Zone::build(DEFAULT_DOMAIN, &services, &slices).expect("the zone");
    let ours = runtime
        .block_on(async {
            Server::start("127.0.0.1:0".parse().expect("an address"), {
                Resolver::new(SharedZone::new(zone), Vec::new())
            })
        })
        .expect("our server");
    let baseline = static_server(&runtime, n);
    let client = UdpSocket::bind("127.0.0.1:0").expect("a client socket");
    client.set_read_timeout(Some(Duration::from_secs(2))).expect("a timeout");
    let all = queries(n, QUERIES_PER_ROUND * ROUNDS);
    // A warm-up round each, not counted.
    ask(&client, ours.local_addr(), &all[..QUERIES_PER_ROUND]);
    ask(&client, baseline, &all[..QUERIES_PER_ROUND]);
    let (mut ours_run, mut base_run) = (Run::default(), Run::default());
    for (round, chunk) in all.chunks(QUERIES_PER_ROUND).enumerate() {
        let (o, b) = if round % 2 == 0 {
            let o = ask(&client, ours.local_addr(), chunk);
            (o, ask(&client, baseline, chunk))
        } else {
            let b = ask(&client, baseline, chunk);
            (ask(&client, ours.local_addr(), chunk), b)
        };
        println!("round {round}: ours {} | static zone {}", o.describe(), b.describe());
        ours_run.merge(o);
        base_run.merge(b);
    }
    table.header(&format!("DNS: A for a Service name, {n} Services, one client over UDP"));
    for (what, o, b) in
        [("p50", ours_run.p50(), base_run.p50()), ("p99", ours_run.p99(), base_run.p99())]
    {
        let r = o.as_secs_f64() / b.as_secs_f64().max(f64::MIN_POSITIVE);
        table.row(
            what,
            ms(o),
            ms(b),
            ratio(o.as_secs_f64(), b.as_secs_f64()),
            verdict(r <= 1.5, "≤ 1.5x".into()),
        );
    }

    section("memory");
    let before = resident();
    let (services, slices) = objects(n * 5);
    let big = Zone::build(DEFAULT_DOMAIN, &services, &slices).expect("the zone");
    drop((services, slices));
    let per_service = resident().saturating_sub(before) as f64 / (n * 5) as f64;
    println!("a zone of {} Services: {:.0} bytes per Service", n * 5, per_service);
    drop(big);
    let before = resident();
    let servers: Vec<Server> = runtime.block_on(async {
        (0..SERVERS_FOR_MEMORY)
            .map(|_| {
                let zone = SharedZone::new(Zone::empty(DEFAULT_DOMAIN).expect("a zone"));
                Server::start(
                    "127.0.0.1:0".parse().expect("an address"),
                    Resolver::new(zone, vec![]),
                )
                .expect("a server")
            })
            .collect()
    });
    std::thread::sleep(Duration::from_millis(200));
    let per_server = resident().saturating_sub(before) as f64 / SERVERS_FOR_MEMORY as f64;
    println!("{SERVERS_FOR_MEMORY} servers: {:.1} KiB per tenant resolver", per_server / 1024.0);
    table.header("DNS: memory (resident growth)");
    table.row(
        &format!("per Service (zone of {}, 2 endpoints each)", n * 5),
        format!("{per_service:.0} B"),
        "-".into(),
        "-".into(),
        "-".into(),
    );
    table.row(
        "per tenant resolver (UDP+TCP server, empty zone)",
        format!("{:.1} KiB", per_server / 1024.0),
        "-".into(),
        "-".into(),
        "-".into(),
    );
    drop(servers);
    table.print();
}
