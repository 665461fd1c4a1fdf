//! [`Zone`]: an immutable snapshot of one tenant's cluster names, built from its Services and
//! EndpointSlices, and the answer to one question about it ([`Zone::lookup`]). Pure: no I/O.
//!
//! The names are the ones the Kubernetes DNS specification gives and CoreDNS's `kubernetes`
//! plugin serves (with `pods insecure`):
//!
//! | name | records |
//! | --- | --- |
//! | `<svc>.<ns>.svc.<domain>` | A/AAAA: the ClusterIPs; for a headless Service the addresses of its ready endpoints (all of them with `publishNotReadyAddresses`); CNAME to `externalName` for an ExternalName Service |
//! | `<host>.<svc>.<ns>.svc.<domain>` | A/AAAA of one endpoint of a headless Service; `<host>` is its `hostname`, or its address with dashes for dots (colons) |
//! | `_<port>._<proto>.<svc>.<ns>.svc.<domain>` | SRV per named port: to `<svc>.<ns>.svc.<domain>` for a ClusterIP Service, to each endpoint's `<host>` name for a headless one |
//! | `<a-b-c-d>.<ns>.pod.<domain>` | A `a.b.c.d` (AAAA for a dashed IPv6 address), for any namespace |
//!
//! The cluster's own API is the exception: `kubernetes.default.svc.<domain>` is answered as a
//! headless Service is, with the address its EndpointSlice names (where the tenant's API
//! answers, [`API_SERVICE`]), since no service proxy carries its cluster IP there.
//!
//! Every name between those and the domain (`<ns>.svc.<domain>`, `_tcp.<svc>.<ns>.svc.<domain>`)
//! exists without records, so a question about it is NODATA, not NXDOMAIN. A headless Service
//! with no endpoint to publish has no name, as in CoreDNS.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use hickory_server::proto::rr::rdata::{A, AAAA, CNAME, SOA, SRV};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tracing::warn;

use crate::error::{DnsError, Result};

/// The Service of the cluster's API, `default/kubernetes`: Carrel serves it itself, at the
/// address its endpoints name, not behind a cluster IP.
pub const API_SERVICE: (&str, &str) = ("default", "kubernetes");

/// The TTL of every record, and the SOA's minimum (negative-answer) TTL: the `kubernetes`
/// plugin's default.
pub const TTL: u32 = 5;
/// The cluster domain when none is configured.
pub const DEFAULT_DOMAIN: &str = "cluster.local";
/// The label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// SOA refresh, retry and expire, in seconds, as CoreDNS gives them.
const SOA_REFRESH: i32 = 7200;
const SOA_RETRY: i32 = 1800;
const SOA_EXPIRE: i32 = 86400;
/// How many CNAMEs inside the zone one answer follows.
const MAX_CNAME_CHAIN: usize = 8;

/// One tenant's cluster names at one moment. Build one with [`Zone::build`]; a changed Service or
/// EndpointSlice makes a new one (see [`crate::SharedZone::replace`]).
#[derive(Clone, Debug)]
pub struct Zone {
    origin: Name,
    lower_origin: LowerName,
    serial: u32,
    /// Every name that exists, each with its records; names in between have none.
    names: HashMap<LowerName, Vec<Record>>,
}

/// How a question about a name in the zone was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// NOERROR with answers.
    Found,
    /// NOERROR without answers: the name exists, with no record of the type asked.
    NoData,
    /// NXDOMAIN: the name does not exist.
    NxDomain,
}

/// The answer to one question about a name in the zone.
#[derive(Clone, Debug)]
pub struct Lookup {
    /// Which kind of answer this is.
    pub outcome: Outcome,
    /// The answer section: the records asked for, after the CNAMEs that lead to them.
    pub answers: Vec<Record>,
    /// The authority section: the zone's SOA for NODATA and NXDOMAIN, else empty.
    pub authority: Vec<Record>,
    /// The additional section: the addresses of SRV targets in the zone.
    pub additionals: Vec<Record>,
}

impl Zone {
    /// A zone with no Services: only the domain, `svc.<domain>` and the pod names exist.
    pub fn empty(domain: &str) -> Result<Self> {
        Self::build(domain, &[], &[])
    }

    /// The zone of `domain` (such as [`DEFAULT_DOMAIN`]) for these Services and EndpointSlices.
    /// An EndpointSlice belongs to the Service of its namespace named by its
    /// [`SERVICE_NAME_LABEL`]; objects whose names are not valid DNS names are left out, with a
    /// warning.
    pub fn build(domain: &str, services: &[Service], slices: &[EndpointSlice]) -> Result<Self> {
        Self::build_from(domain, services, slices)
    }

    /// [`Zone::build`] from Services and EndpointSlices as they are held, owned or shared (a
    /// watch cache's `Arc`s), so that a rebuild copies none of them.
    pub(crate) fn build_from<S, E>(domain: &str, services: &[S], slices: &[E]) -> Result<Self>
    where
        S: Borrow<Service>,
        E: Borrow<EndpointSlice>,
    {
        let origin = origin(domain)?;
        let mut by_service: HashMap<(&str, &str), Vec<&EndpointSlice>> = HashMap::new();
        for slice in slices.iter().map(Borrow::borrow) {
            let Some(service) =
                slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL))
            else {
                continue;
            };
            let namespace = slice.metadata.namespace.as_deref().unwrap_or("default");
            by_service.entry((namespace, service.as_str())).or_default().push(slice);
        }
        let mut builder = Builder::new(origin);
        for service in services.iter().map(Borrow::borrow) {
            let Some(name) = service.metadata.name.as_deref() else { continue };
            let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
            let slices = by_service.get(&(namespace, name)).map(Vec::as_slice).unwrap_or_default();
            builder.service(service, name, namespace, slices);
        }
        Ok(builder.finish())
    }

    /// The zone's domain, fully qualified and lowercase (`cluster.local.`).
    pub fn origin(&self) -> &Name {
        &self.origin
    }

    /// The SOA serial.
    pub fn serial(&self) -> u32 {
        self.serial
    }

    /// This zone with another SOA serial.
    pub fn with_serial(mut self, serial: u32) -> Self {
        self.serial = serial;
        self
    }

    /// Whether `name` is the domain or under it: a name this zone answers for.
    pub fn contains(&self, name: &LowerName) -> bool {
        self.lower_origin.zone_of(name)
    }

    /// The zone's SOA record (`ns.dns.<domain>`, `hostmaster.<domain>`), as CoreDNS gives it.
    pub fn soa(&self) -> Record {
        let mname = Name::from_ascii("ns.dns").and_then(|n| n.append_domain(&self.origin));
        let rname = Name::from_ascii("hostmaster").and_then(|n| n.append_domain(&self.origin));
        let (mname, rname) = match (mname, rname) {
            (Ok(m), Ok(r)) => (m, r),
            // A domain too long for the two prefixes: the domain itself stands for both.
            _ => (self.origin.clone(), self.origin.clone()),
        };
        let soa = SOA::new(mname, rname, self.serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, TTL);
        Record::from_rdata(self.origin.clone(), TTL, RData::SOA(soa))
    }

    /// The answer to a question of `record_type` about `name` (any case); `None` when the name is
    /// outside the domain.
    pub fn lookup(&self, name: &LowerName, record_type: RecordType) -> Option<Lookup> {
        self.contains(name).then(|| self.lookup_in(name, record_type, 0))
    }

    fn lookup_in(&self, name: &LowerName, record_type: RecordType, depth: usize) -> Lookup {
        if let Some(pod) = self.pod(name) {
            return match pod {
                Pod::Missing => self.negative(Outcome::NxDomain),
                Pod::Exists => self.negative(Outcome::NoData),
                Pod::Address(ip) => {
                    let record = address_record(Name::from(name.clone()), ip);
                    if record_type == RecordType::ANY || record.record_type() == record_type {
                        self.found(vec![record], Vec::new())
                    } else {
                        self.negative(Outcome::NoData)
                    }
                }
            };
        }
        if *name == self.lower_origin && matches!(record_type, RecordType::SOA | RecordType::ANY) {
            return self.found(vec![self.soa()], Vec::new());
        }
        let Some(records) = self.names.get(name) else {
            return self.negative(Outcome::NxDomain);
        };
        if !matches!(record_type, RecordType::CNAME | RecordType::ANY) {
            if let Some(cname) = records.iter().find(|r| r.record_type() == RecordType::CNAME) {
                return self.follow(cname, record_type, depth);
            }
        }
        let answers: Vec<Record> = records
            .iter()
            .filter(|r| record_type == RecordType::ANY || r.record_type() == record_type)
            .cloned()
            .collect();
        if answers.is_empty() {
            return self.negative(Outcome::NoData);
        }
        let additionals = self.srv_additionals(&answers);
        self.found(answers, additionals)
    }

    /// A CNAME's answer: the CNAME, then the target's answer when the target is in the zone.
    fn follow(&self, cname: &Record, record_type: RecordType, depth: usize) -> Lookup {
        let mut answers = vec![cname.clone()];
        let RData::CNAME(CNAME(target)) = &cname.data else {
            return self.found(answers, Vec::new());
        };
        let target = LowerName::new(target);
        if depth >= MAX_CNAME_CHAIN || !self.contains(&target) {
            return self.found(answers, Vec::new());
        }
        let next = self.lookup_in(&target, record_type, depth + 1);
        answers.extend(next.answers);
        let outcome =
            if next.outcome == Outcome::NxDomain { Outcome::NxDomain } else { Outcome::Found };
        Lookup { outcome, answers, authority: next.authority, additionals: next.additionals }
    }

    /// The A and AAAA records of the SRV targets among `answers`.
    fn srv_additionals(&self, answers: &[Record]) -> Vec<Record> {
        let mut additionals = Vec::new();
        for record in answers {
            let RData::SRV(srv) = &record.data else { continue };
            let Some(records) = self.names.get(&LowerName::new(&srv.target)) else { continue };
            for r in records {
                if matches!(r.record_type(), RecordType::A | RecordType::AAAA)
                    && !additionals.contains(r)
                {
                    additionals.push(r.clone());
                }
            }
        }
        additionals
    }

    fn found(&self, answers: Vec<Record>, additionals: Vec<Record>) -> Lookup {
        Lookup { outcome: Outcome::Found, answers, authority: Vec::new(), additionals }
    }

    fn negative(&self, outcome: Outcome) -> Lookup {
        Lookup {
            outcome,
            answers: Vec::new(),
            authority: vec![self.soa()],
            additionals: Vec::new(),
        }
    }

    /// What `name` is under `pod.<domain>`; `None` when it is not under it.
    fn pod(&self, name: &LowerName) -> Option<Pod> {
        let name = Name::from(name.clone());
        let relative = usize::from(name.num_labels()) - usize::from(self.origin.num_labels());
        let labels: Vec<&[u8]> = name.iter().take(relative).collect();
        let (&last, rest) = labels.split_last()?;
        if !last.eq_ignore_ascii_case(b"pod") {
            return None;
        }
        Some(match rest {
            // `pod.<domain>` and `<ns>.pod.<domain>`.
            [] | [_] => Pod::Exists,
            [address, _namespace] => match dashed_address(address) {
                Some(ip) => Pod::Address(ip),
                None => Pod::Missing,
            },
            _ => Pod::Missing,
        })
    }
}

/// A name under `pod.<domain>`.
enum Pod {
    /// A name above the pod records: it exists, with no records.
    Exists,
    /// `<dashed-ip>.<ns>.pod.<domain>`.
    Address(IpAddr),
    /// Anything else: it does not exist.
    Missing,
}

/// The zone's names being gathered, Service by Service.
struct Builder {
    origin: Name,
    names: HashMap<LowerName, Vec<Record>>,
    /// SRV owner name → (port, target); weighed once all are known.
    srv: BTreeMap<LowerName, (Name, Vec<(u16, Name)>)>,
}

impl Builder {
    fn new(origin: Name) -> Self {
        Self { origin, names: HashMap::new(), srv: BTreeMap::new() }
    }

    /// `relative` under the domain, lowercase; `None`, with a warning, when it is not a DNS name.
    fn name(&self, relative: &str) -> Option<Name> {
        match Name::from_ascii(relative).and_then(|n| n.append_domain(&self.origin)) {
            Ok(name) => Some(name.to_lowercase()),
            Err(error) => {
                warn!(name = relative, %error, "not a DNS name; left out of the cluster zone");
                None
            }
        }
    }

    fn add(&mut self, name: &Name, data: RData) {
        let record = Record::from_rdata(name.clone(), TTL, data);
        let records = self.names.entry(LowerName::new(name)).or_default();
        if !records.contains(&record) {
            records.push(record);
        }
    }

    fn add_srv(&mut self, owner: &Name, port: u16, target: &Name) {
        let (_, targets) =
            self.srv.entry(LowerName::new(owner)).or_insert_with(|| (owner.clone(), Vec::new()));
        if !targets.iter().any(|(p, t)| *p == port && t == target) {
            targets.push((port, target.clone()));
        }
    }

    fn service(
        &mut self,
        service: &Service,
        name: &str,
        namespace: &str,
        slices: &[&EndpointSlice],
    ) {
        let Some(spec) = &service.spec else { return };
        let Some(service_name) = self.name(&format!("{name}.{namespace}.svc")) else { return };
        if spec.type_.as_deref() == Some("ExternalName") {
            let Some(external) = spec.external_name.as_deref().filter(|n| !n.is_empty()) else {
                return;
            };
            match Name::from_ascii(external) {
                Ok(mut target) => {
                    target.set_fqdn(true);
                    self.add(&service_name, RData::CNAME(CNAME(target.to_lowercase())));
                }
                Err(error) => {
                    warn!(service = name, namespace, external, %error, "externalName is not a DNS name")
                }
            }
            return;
        }
        let cluster_ips: Vec<&str> = match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
            (_, Some(ip)) if !ip.is_empty() => vec![ip.as_str()],
            _ => return,
        };
        if cluster_ips.first() == Some(&"None")
            || ((namespace, name) == API_SERVICE && !slices.is_empty())
        {
            let all = spec.publish_not_ready_addresses == Some(true);
            self.headless(&service_name, slices, all);
            return;
        }
        for ip in cluster_ips {
            match ip.parse::<IpAddr>() {
                Ok(ip) => self.add(&service_name, address_data(ip)),
                Err(_) => warn!(service = name, namespace, ip, "clusterIP is not an IP address"),
            }
        }
        for port in spec.ports.iter().flatten() {
            let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) else { continue };
            let Ok(number) = u16::try_from(port.port) else { continue };
            let protocol = protocol(port.protocol.as_deref());
            let Some(owner) =
                self.name(&format!("_{port_name}._{protocol}.{name}.{namespace}.svc"))
            else {
                continue;
            };
            self.add_srv(&owner, number, &service_name);
        }
    }

    /// A headless Service's names: its own, one per endpoint, and an SRV per named port of each
    /// EndpointSlice. `all`: not-ready endpoints too (`publishNotReadyAddresses`).
    fn headless(&mut self, service_name: &Name, slices: &[&EndpointSlice], all: bool) {
        for slice in slices {
            if slice.address_type == "FQDN" {
                continue;
            }
            let mut ports = Vec::new();
            for port in slice.ports.iter().flatten() {
                let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) else {
                    continue;
                };
                let Some(number) = port.port.and_then(|p| u16::try_from(p).ok()) else { continue };
                let relative = format!("_{port_name}._{}", protocol(port.protocol.as_deref()));
                let owner = Name::from_ascii(&relative).and_then(|n| n.append_domain(service_name));
                match owner {
                    Ok(owner) => ports.push((owner.to_lowercase(), number)),
                    Err(error) => warn!(port = port_name, %error, "port name is not a DNS label"),
                }
            }
            for endpoint in &slice.endpoints {
                let ready = endpoint.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !ready && !all {
                    continue;
                }
                for address in &endpoint.addresses {
                    let Ok(ip) = address.parse::<IpAddr>() else {
                        warn!(address = address.as_str(), "endpoint address is not an IP address");
                        continue;
                    };
                    let host = match endpoint.hostname.as_deref().filter(|h| !h.is_empty()) {
                        Some(hostname) => hostname.to_owned(),
                        None => dashed(ip),
                    };
                    let host = Name::from_ascii(&host).and_then(|n| n.append_domain(service_name));
                    let host = match host {
                        Ok(host) => host.to_lowercase(),
                        Err(error) => {
                            warn!(%ip, %error, "endpoint hostname is not a DNS label");
                            continue;
                        }
                    };
                    self.add(service_name, address_data(ip));
                    self.add(&host, address_data(ip));
                    for (owner, port) in &ports {
                        self.add_srv(owner, *port, &host);
                    }
                }
            }
        }
    }

    fn finish(mut self) -> Zone {
        for (_, (owner, targets)) in std::mem::take(&mut self.srv) {
            // CoreDNS's weights: 100 shared evenly among the records of one priority.
            let weight = u16::try_from(100 / targets.len().max(1)).unwrap_or(100);
            for (port, target) in targets {
                self.add(&owner, RData::SRV(SRV::new(0, weight, port, target)));
            }
        }
        let lower_origin = LowerName::new(&self.origin);
        for fixed in ["svc", "pod"] {
            if let Some(name) = self.name(fixed) {
                self.names.entry(LowerName::new(&name)).or_default();
            }
        }
        // Every name between a record's owner and the domain exists, with no records.
        let owners: Vec<LowerName> = self.names.keys().cloned().collect();
        for owner in owners {
            let mut name = owner;
            while name != lower_origin && lower_origin.zone_of(&name) {
                name = name.base_name();
                self.names.entry(name.clone()).or_default();
            }
        }
        self.names.entry(lower_origin.clone()).or_default();
        Zone { origin: self.origin, lower_origin, serial: 1, names: self.names }
    }
}

/// The zone's origin for `domain`: fully qualified, lowercase.
fn origin(domain: &str) -> Result<Name> {
    let mut origin = Name::from_ascii(domain.trim_end_matches('.'))
        .map_err(|source| DnsError::Domain { domain: domain.to_owned(), source })?;
    origin.set_fqdn(true);
    Ok(origin.to_lowercase())
}

/// `tcp`, `udp` or `sctp`, from a port's protocol (TCP when unset).
fn protocol(protocol: Option<&str>) -> String {
    protocol.unwrap_or("TCP").to_ascii_lowercase()
}

fn address_data(ip: IpAddr) -> RData {
    match ip {
        IpAddr::V4(ip) => RData::A(A(ip)),
        IpAddr::V6(ip) => RData::AAAA(AAAA(ip)),
    }
}

fn address_record(name: Name, ip: IpAddr) -> Record {
    Record::from_rdata(name, TTL, address_data(ip))
}

/// An address as one DNS label: `10-1-2-3`, `fd00--1`.
fn dashed(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string().replace('.', "-"),
        IpAddr::V6(ip) => ip.to_string().replace(':', "-"),
    }
}

/// The address a dashed label (`10-1-2-3`, `fd00--1`) stands for.
fn dashed_address(label: &[u8]) -> Option<IpAddr> {
    let label = std::str::from_utf8(label).ok()?;
    if let Ok(ip) = label.replace('-', ".").parse::<std::net::Ipv4Addr>() {
        return Some(IpAddr::V4(ip));
    }
    label.replace('-', ":").parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn meta(ns: &str, name: &str) -> ObjectMeta {
        ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() }
    }

    fn port(name: &str, number: i32, protocol: &str) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port: number,
            protocol: Some(protocol.into()),
            ..Default::default()
        }
    }

    fn cluster_ip(ns: &str, name: &str, ip: &str, ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: meta(ns, name),
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(ports),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn headless(ns: &str, name: &str, publish_not_ready: bool) -> Service {
        Service {
            metadata: meta(ns, name),
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                publish_not_ready_addresses: publish_not_ready.then_some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Endpoints: (address, hostname, ready).
    fn slice(
        ns: &str,
        service: &str,
        endpoints: &[(&str, Option<&str>, Option<bool>)],
    ) -> EndpointSlice {
        let mut metadata = meta(ns, &format!("{service}-abc"));
        metadata.labels = Some(BTreeMap::from([(SERVICE_NAME_LABEL.into(), service.into())]));
        EndpointSlice {
            metadata,
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(ip, host, ready)| Endpoint {
                    addresses: vec![(*ip).into()],
                    hostname: host.map(Into::into),
                    conditions: Some(EndpointConditions { ready: *ready, ..Default::default() }),
                    ..Default::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
        }
    }

    fn name(s: &str) -> LowerName {
        LowerName::new(&Name::from_ascii(s).unwrap())
    }

    fn ask(zone: &Zone, n: &str, t: RecordType) -> Lookup {
        zone.lookup(&name(n), t).unwrap()
    }

    fn data(lookup: &Lookup) -> Vec<String> {
        let mut v: Vec<String> = lookup.answers.iter().map(|r| r.data.to_string()).collect();
        v.sort();
        v
    }

    fn zone() -> Zone {
        let services = vec![
            cluster_ip(
                "default",
                "web",
                "10.96.0.10",
                vec![port("http", 80, "TCP"), port("dns", 53, "UDP")],
            ),
            headless("db", "pg", false),
            headless("db", "all", true),
            Service {
                metadata: meta("default", "ext"),
                spec: Some(ServiceSpec {
                    type_: Some("ExternalName".into()),
                    external_name: Some("example.com".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Service {
                metadata: meta("default", "v6"),
                spec: Some(ServiceSpec {
                    cluster_ips: Some(vec!["fd00::10".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        let slices = vec![
            slice(
                "db",
                "pg",
                &[
                    ("10.1.0.1", Some("pg-0"), Some(true)),
                    ("10.1.0.2", None, None),
                    ("10.1.0.3", None, Some(false)),
                ],
            ),
            slice("db", "all", &[("10.2.0.1", None, Some(false))]),
        ];
        Zone::build(DEFAULT_DOMAIN, &services, &slices).unwrap()
    }

    #[test]
    fn cluster_ip_service_has_its_address() {
        let l = ask(&zone(), "web.default.svc.cluster.local.", RecordType::A);
        assert_eq!(l.outcome, Outcome::Found);
        assert_eq!(data(&l), vec!["10.96.0.10"]);
        assert_eq!(l.answers[0].ttl, TTL);
    }

    #[test]
    fn ipv6_cluster_ip_is_aaaa_and_a_is_nodata() {
        let z = zone();
        assert_eq!(
            data(&ask(&z, "v6.default.svc.cluster.local.", RecordType::AAAA)),
            vec!["fd00::10"]
        );
        let l = ask(&z, "v6.default.svc.cluster.local.", RecordType::A);
        assert_eq!(l.outcome, Outcome::NoData);
        assert_eq!(l.authority[0].record_type(), RecordType::SOA);
    }

    #[test]
    fn names_are_case_insensitive() {
        let l = ask(&zone(), "WEB.Default.SVC.Cluster.Local.", RecordType::A);
        assert_eq!(data(&l), vec!["10.96.0.10"]);
    }

    #[test]
    fn missing_name_is_nxdomain_with_soa() {
        let l = ask(&zone(), "nope.default.svc.cluster.local.", RecordType::A);
        assert_eq!(l.outcome, Outcome::NxDomain);
        assert!(l.answers.is_empty());
        assert_eq!(l.authority.len(), 1);
        assert_eq!(l.authority[0].record_type(), RecordType::SOA);
    }

    #[test]
    fn existing_name_of_other_type_and_namespace_are_nodata() {
        let z = zone();
        assert_eq!(
            ask(&z, "web.default.svc.cluster.local.", RecordType::TXT).outcome,
            Outcome::NoData
        );
        assert_eq!(ask(&z, "default.svc.cluster.local.", RecordType::A).outcome, Outcome::NoData);
        assert_eq!(ask(&z, "nons.svc.cluster.local.", RecordType::A).outcome, Outcome::NxDomain);
    }

    #[test]
    fn outside_the_domain_is_none() {
        assert!(zone().lookup(&name("example.com."), RecordType::A).is_none());
    }

    #[test]
    fn headless_service_has_ready_endpoints_only() {
        let l = ask(&zone(), "pg.db.svc.cluster.local.", RecordType::A);
        // Unset `ready` counts as ready; `ready: false` is left out.
        assert_eq!(data(&l), vec!["10.1.0.1", "10.1.0.2"]);
    }

    #[test]
    fn publish_not_ready_addresses_publishes_all() {
        let l = ask(&zone(), "all.db.svc.cluster.local.", RecordType::A);
        assert_eq!(data(&l), vec!["10.2.0.1"]);
    }

    #[test]
    fn headless_endpoint_hostname_and_dashed_names() {
        let z = zone();
        assert_eq!(
            data(&ask(&z, "pg-0.pg.db.svc.cluster.local.", RecordType::A)),
            vec!["10.1.0.1"]
        );
        assert_eq!(
            data(&ask(&z, "10-1-0-2.pg.db.svc.cluster.local.", RecordType::A)),
            vec!["10.1.0.2"]
        );
        assert_eq!(
            ask(&z, "10-1-0-3.pg.db.svc.cluster.local.", RecordType::A).outcome,
            Outcome::NxDomain
        );
    }

    #[test]
    fn srv_for_cluster_ip_targets_the_service() {
        let z = zone();
        let l = ask(&z, "_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
        assert_eq!(data(&l), vec!["0 100 80 web.default.svc.cluster.local."]);
        assert_eq!(
            data(&ask(&z, "_dns._udp.web.default.svc.cluster.local.", RecordType::SRV)),
            vec!["0 100 53 web.default.svc.cluster.local."]
        );
        assert_eq!(l.additionals.len(), 1);
        assert_eq!(
            ask(&z, "_http._udp.web.default.svc.cluster.local.", RecordType::SRV).outcome,
            Outcome::NxDomain
        );
        assert_eq!(
            ask(&z, "_tcp.web.default.svc.cluster.local.", RecordType::SRV).outcome,
            Outcome::NoData
        );
    }

    #[test]
    fn the_cluster_api_is_answered_where_its_endpoints_say() {
        let api = |slices: &[EndpointSlice]| {
            let service =
                cluster_ip("default", "kubernetes", "10.96.0.1", vec![port("https", 443, "TCP")]);
            Zone::build(DEFAULT_DOMAIN, &[service], slices).unwrap()
        };
        let mut slice = slice("default", "kubernetes", &[("127.0.0.1", None, Some(true))]);
        slice.ports.as_mut().unwrap()[0] =
            EndpointPort { name: Some("https".into()), port: Some(34567), ..Default::default() };
        let z = api(&[slice]);
        assert_eq!(
            data(&ask(&z, "kubernetes.default.svc.cluster.local.", RecordType::A)),
            ["127.0.0.1"]
        );
        assert_eq!(
            data(&ask(&z, "_https._tcp.kubernetes.default.svc.cluster.local.", RecordType::SRV)),
            ["0 100 34567 127-0-0-1.kubernetes.default.svc.cluster.local."]
        );
        // With no endpoints recorded, its cluster IP, as any Service's.
        let z = api(&[]);
        assert_eq!(
            data(&ask(&z, "kubernetes.default.svc.cluster.local.", RecordType::A)),
            ["10.96.0.1"]
        );
    }

    #[test]
    fn srv_for_headless_targets_each_endpoint_with_shared_weight() {
        let l = ask(&zone(), "_http._tcp.pg.db.svc.cluster.local.", RecordType::SRV);
        assert_eq!(
            data(&l),
            vec![
                "0 50 8080 10-1-0-2.pg.db.svc.cluster.local.",
                "0 50 8080 pg-0.pg.db.svc.cluster.local."
            ]
        );
        assert_eq!(l.additionals.len(), 2);
    }

    #[test]
    fn external_name_is_a_cname() {
        let z = zone();
        let l = ask(&z, "ext.default.svc.cluster.local.", RecordType::A);
        assert_eq!(l.outcome, Outcome::Found);
        assert_eq!(l.answers[0].record_type(), RecordType::CNAME);
        assert_eq!(data(&l), vec!["example.com."]);
    }

    #[test]
    fn pod_names() {
        let z = zone();
        assert_eq!(
            data(&ask(&z, "10-244-1-7.anyns.pod.cluster.local.", RecordType::A)),
            vec!["10.244.1.7"]
        );
        assert_eq!(
            data(&ask(&z, "fd00--7.anyns.pod.cluster.local.", RecordType::AAAA)),
            vec!["fd00::7"]
        );
        assert_eq!(
            ask(&z, "10-244-1-7.anyns.pod.cluster.local.", RecordType::AAAA).outcome,
            Outcome::NoData
        );
        assert_eq!(
            ask(&z, "not-an-ip.anyns.pod.cluster.local.", RecordType::A).outcome,
            Outcome::NxDomain
        );
    }

    #[test]
    fn apex_soa_and_custom_domain() {
        let z = Zone::build("Tenant.Example", &[cluster_ip("a", "b", "10.0.0.1", vec![])], &[])
            .unwrap();
        assert_eq!(z.origin().to_ascii(), "tenant.example.");
        assert_eq!(
            ask(&z, "tenant.example.", RecordType::SOA).answers[0].record_type(),
            RecordType::SOA
        );
        assert_eq!(data(&ask(&z, "b.a.svc.tenant.example.", RecordType::A)), vec!["10.0.0.1"]);
        assert!(z.lookup(&name("b.a.svc.cluster.local."), RecordType::A).is_none());
    }
}
