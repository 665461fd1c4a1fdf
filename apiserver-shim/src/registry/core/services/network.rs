//! The Service network of a cluster: cluster IPs from one IPv4 CIDR and node ports from one
//! range, given out as kube-apiserver's allocators give them (`ipallocator`, `portallocator`):
//! a Service asks for a value or is given a free one, and a value is held for as long as a
//! stored Service holds it. What is held is read from the stored Services themselves, under
//! the Services' write lock, so a value is released by the delete that removes its Service
//! and nothing can leak across a crash.
//!
//! A cluster is single-stack IPv4: the dual-stack fields are accepted and answered as a
//! single-stack kube-apiserver answers them.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;

use serde_json::{json, Map, Value};

use crate::admission::webhook::Egress;
use crate::validation::{go_strings, Errors};

/// The range node ports are given from, kube-apiserver's default `--service-node-port-range`.
pub const NODE_PORTS: RangeInclusive<u16> = 30000..=32767;

/// A cluster's Service network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceNetwork {
    base: u32,
    prefix: u8,
    node_ports: RangeInclusive<u16>,
    /// Where the cluster's API answers, which its `kubernetes` Service's endpoints name
    /// (kube-apiserver's `--advertise-address` and `--secure-port`); none for an API not served.
    api: Option<SocketAddr>,
    /// Where the cluster's admission webhooks may be called.
    webhook_egress: Egress,
}

impl Default for ServiceNetwork {
    /// kube-apiserver's default `--service-cluster-ip-range` as kubeadm sets it, `10.96.0.0/12`.
    fn default() -> Self {
        ServiceNetwork {
            base: u32::from(Ipv4Addr::new(10, 96, 0, 0)),
            prefix: 12,
            node_ports: NODE_PORTS,
            api: None,
            webhook_egress: Egress::strict(),
        }
    }
}

/// The values held by the stored Services other than the one being written.
#[derive(Debug, Default)]
pub struct Held {
    pub ips: HashSet<Ipv4Addr>,
    pub node_ports: HashSet<u16>,
}

impl Held {
    /// Note what a stored Service holds.
    pub fn add(&mut self, service: &Value) {
        for ip in cluster_ips(service) {
            if let Ok(ip) = ip.parse() {
                self.ips.insert(ip);
            }
        }
        self.node_ports.extend(node_ports(service));
    }
}

impl ServiceNetwork {
    /// The network `cidr` (`a.b.c.d/n`, IPv4, `n` from 8 to 30) with node ports from `node_ports`.
    pub fn new(cidr: &str, node_ports: RangeInclusive<u16>) -> Result<ServiceNetwork, String> {
        let (address, bits) =
            cidr.split_once('/').ok_or_else(|| format!("{cidr:?} is not a CIDR (a.b.c.d/n)"))?;
        let address: Ipv4Addr =
            address.parse().map_err(|_| format!("{cidr:?}: {address:?} is not an IPv4 address"))?;
        let prefix: u8 =
            bits.parse().map_err(|_| format!("{cidr:?}: {bits:?} is not a prefix length"))?;
        if !(8..=30).contains(&prefix) {
            return Err(format!("{cidr:?}: the prefix length must be from 8 to 30"));
        }
        if node_ports.is_empty() {
            return Err("the node port range is empty".into());
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(ServiceNetwork {
            base: u32::from(address) & mask,
            prefix,
            node_ports,
            api: None,
            ..Default::default()
        })
    }

    /// The network `cidr` with kube-apiserver's node port range (30000-32767): what a
    /// `--service-cluster-ip-range` flag reads.
    pub fn from_cidr(cidr: &str) -> Result<ServiceNetwork, String> {
        ServiceNetwork::new(cidr, NODE_PORTS)
    }

    /// This network, in a cluster whose API answers at `address`.
    pub fn with_api_endpoint(self, address: SocketAddr) -> ServiceNetwork {
        ServiceNetwork { api: Some(address), ..self }
    }

    /// This network, its admission webhooks called within `egress` (by default
    /// [`Egress::strict`]: no loopback, link-local or multicast address).
    pub fn with_webhook_egress(self, egress: Egress) -> ServiceNetwork {
        ServiceNetwork { webhook_egress: egress, ..self }
    }

    /// Where the cluster's admission webhooks may be called.
    pub fn webhook_egress(&self) -> Egress {
        self.webhook_egress
    }

    /// Where the cluster's API answers, if it is served: what the `kubernetes` Service's
    /// Endpoints and EndpointSlice name.
    pub fn api_endpoint(&self) -> Option<SocketAddr> {
        self.api
    }

    /// The network as `a.b.c.d/n`.
    pub fn cidr(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }

    /// The first address of the network, the `kubernetes` Service's.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// The tenth address of the network, the cluster DNS Service's (`kube-system/kube-dns`), as
    /// kubeadm gives it; none in a network too small to have one.
    pub fn dns(&self) -> Option<Ipv4Addr> {
        let ip = Ipv4Addr::from(self.base + 10);
        self.usable(ip).then_some(ip)
    }

    /// How many addresses the network spans, its network and broadcast addresses included.
    fn size(&self) -> u32 {
        1 << (32 - self.prefix)
    }

    /// Whether `ip` may be given out: within the network, neither its network nor its broadcast
    /// address.
    fn usable(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(self.base);
        offset > 0 && offset < self.size() - 1
    }

    /// A free address: first from the upper band, at random, as kube-apiserver leaves the
    /// lower band (1/16 of the network, 16 to 256 addresses) to Services that ask for theirs.
    fn free_ip(&self, held: &Held) -> Option<Ipv4Addr> {
        let usable = self.size() - 2;
        let lower = (usable / 16).clamp(16, 256).min(usable);
        let upper = usable - lower;
        let pick = |start: u32, len: u32| {
            if len == 0 {
                return None;
            }
            let first = random(len);
            (0..len)
                .map(|i| Ipv4Addr::from(self.base + 1 + start + (first + i) % len))
                .find(|ip| !held.ips.contains(ip))
        };
        pick(lower, upper).or_else(|| pick(0, lower))
    }

    /// A free node port, at random within the range.
    fn free_node_port(&self, held: &Held, taken: &HashSet<u16>) -> Option<u16> {
        let (start, end) = (*self.node_ports.start(), *self.node_ports.end());
        let len = u32::from(end - start) + 1;
        let first = random(len);
        (0..len)
            .map(|i| start + ((first + i) % len) as u16)
            .find(|p| !held.node_ports.contains(p) && !taken.contains(p))
    }

    /// Whether [`ServiceNetwork::assign`] looks at what the other Services hold for `new`: it
    /// asks for an address or a node port it does not hold already (in `old`), or needs one
    /// chosen. A write that keeps what it holds (a label change, a status write resent with its
    /// spec) does not, and need not read every Service to learn what is held.
    pub fn needs_held(&self, old: Option<&Value>, new: &Value) -> bool {
        let Some(spec) = new.get("spec").and_then(Value::as_object) else { return false };
        if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
            return false;
        }
        let old_ips = old.map(cluster_ips).unwrap_or_default();
        let asked = cluster_ips_of(spec);
        let ip = !is_headless(spec) && (asked.is_empty() || asked.first() != old_ips.first());
        let old_ports: HashSet<u16> = old.map(node_ports).unwrap_or_default().into_iter().collect();
        let ports = needs_node_ports(spec)
            && spec.get("ports").and_then(Value::as_array).into_iter().flatten().any(|port| {
                let asked = port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0);
                asked.and_then(|p| u16::try_from(p).ok()).is_none_or(|p| !old_ports.contains(&p))
            });
        ip || ports
    }

    /// Give a Service what it needs of the network before it is stored: its IP families and
    /// policy, its cluster IPs and its node ports, asked for or free ones, against `held`.
    /// `old` is the stored Service of an update; what it already holds it keeps.
    pub fn assign(&self, old: Option<&Value>, new: &mut Value, held: &Held) -> Result<(), Errors> {
        let mut e = Errors::default();
        let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        let kind = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_owned();
        if kind == "ExternalName" {
            return Ok(());
        }
        let old_ips = old.map(cluster_ips).unwrap_or_default();
        self.families(spec, &mut e);
        self.cluster_ip(spec, &old_ips, held, &mut e);
        if needs_node_ports(spec) {
            let old_ports: HashSet<u16> =
                old.map(node_ports).unwrap_or_default().into_iter().collect();
            self.node_ports(spec, &old_ports, held, &mut e);
        }
        if e.0.is_empty() {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// `ipFamilyPolicy` and `ipFamilies` as a single-stack IPv4 cluster sets them.
    fn families(&self, spec: &mut Map<String, Value>, e: &mut Errors) {
        let headless_selectorless = is_headless(spec)
            && spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty);
        let policy = spec.get("ipFamilyPolicy").and_then(Value::as_str).map(str::to_owned);
        let policy = match policy.as_deref() {
            None | Some("") if headless_selectorless => "RequireDualStack".to_owned(),
            None | Some("") => "SingleStack".to_owned(),
            Some("RequireDualStack") if !headless_selectorless => {
                e.invalid(
                    "spec.ipFamilyPolicy",
                    "\"RequireDualStack\"",
                    "this cluster is not configured for dual-stack services",
                );
                return;
            }
            Some(other) => other.to_owned(),
        };
        let families: Vec<String> = spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        for (i, family) in families.iter().enumerate() {
            if family != "IPv4" {
                e.invalid(
                    &format!("spec.ipFamilies[{i}]"),
                    &crate::object::go_quote(family),
                    "not configured on this cluster",
                );
            }
        }
        let ips = cluster_ips_of(spec);
        for (i, ip) in ips.iter().enumerate() {
            if let Ok(IpAddr::V6(_)) = ip.parse::<IpAddr>() {
                e.invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    &go_strings("string", Some(&ips[..])),
                    "IPv6 is not configured on this cluster",
                );
            }
        }
        spec.insert("ipFamilyPolicy".into(), json!(policy));
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
    }

    fn cluster_ip(
        &self,
        spec: &mut Map<String, Value>,
        old: &[String],
        held: &Held,
        e: &mut Errors,
    ) {
        if is_headless(spec) {
            spec.insert("clusterIP".into(), json!("None"));
            spec.insert("clusterIPs".into(), json!(["None"]));
            return;
        }
        let asked = cluster_ips_of(spec);
        let ip = match asked.first() {
            Some(ip) if old.first() == Some(ip) => ip.clone(),
            Some(ip) => {
                let shown = go_strings("string", Some(&asked[..]));
                let Ok(parsed) = ip.parse::<Ipv4Addr>() else { return };
                if !self.usable(parsed) {
                    e.invalid(
                        "spec.clusterIPs",
                        &shown,
                        &format!(
                            "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid \
                             range. The range of valid IPs is {}",
                            self.cidr()
                        ),
                    );
                    return;
                }
                if held.ips.contains(&parsed) {
                    e.invalid(
                        "spec.clusterIPs",
                        &shown,
                        &format!("failed to allocate IP {ip}: provided IP is already allocated"),
                    );
                    return;
                }
                ip.clone()
            }
            None => match self.free_ip(held) {
                Some(ip) => ip.to_string(),
                None => {
                    e.invalid(
                        "spec.clusterIPs",
                        "[]string(nil)",
                        "failed to allocate a serviceIP: range is full",
                    );
                    return;
                }
            },
        };
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }

    fn node_ports(
        &self,
        spec: &mut Map<String, Value>,
        old: &HashSet<u16>,
        held: &Held,
        e: &mut Errors,
    ) {
        let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) else { return };
        let mut taken = HashSet::new();
        let range = format!("{}-{}", self.node_ports.start(), self.node_ports.end());
        for (i, port) in ports.iter_mut().filter_map(Value::as_object_mut).enumerate() {
            let path = format!("spec.ports[{i}].nodePort");
            let asked = port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0);
            let chosen = match asked {
                Some(p) => {
                    let Some(p16) = u16::try_from(p).ok().filter(|p| self.node_ports.contains(p))
                    else {
                        e.invalid(
                            &path,
                            &p.to_string(),
                            &format!(
                                "provided port is not in the valid range. The range of valid \
                                 ports is {range}"
                            ),
                        );
                        continue;
                    };
                    // One Service may use one node port for several of its ports (TCP and UDP).
                    if !old.contains(&p16)
                        && !taken.contains(&p16)
                        && held.node_ports.contains(&p16)
                    {
                        e.invalid(&path, &p.to_string(), "provided port is already allocated");
                        continue;
                    }
                    p16
                }
                None => match self.free_node_port(held, &taken) {
                    Some(p) => p,
                    None => {
                        e.invalid(&path, "0", "failed to allocate a nodePort: range is full");
                        continue;
                    }
                },
            };
            taken.insert(chosen);
            port.insert("nodePort".into(), json!(chosen));
        }
    }
}

/// What an update that changes a Service's type drops of what only the old type needed, when
/// the client left it as it was (kube-apiserver's `dropTypeDependentFields`): the cluster IPs
/// and IP families of a Service turned ExternalName, the node ports of one that no longer
/// needs them, and the traffic policies and `allocateLoadBalancerNodePorts` of the old type.
pub fn drop_type_dependent(old: &Value, new: &mut Value) {
    let (Some(before), Some(after)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return;
    };
    let type_of = |spec: &Map<String, Value>| {
        spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP").to_owned()
    };
    let (was, is) = (type_of(before), type_of(after));
    if was == is {
        return;
    }
    let same = |after: &Map<String, Value>, key: &str| after.get(key) == before.get(key);
    if was != "ExternalName"
        && is == "ExternalName"
        && same(after, "clusterIP")
        && same(after, "clusterIPs")
    {
        after.remove("clusterIP");
        after.remove("clusterIPs");
        for key in ["ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"] {
            if same(after, key) {
                after.remove(key);
            }
        }
    }
    if needs_node_ports(before) && !needs_node_ports(after) {
        let ports = |spec: &Map<String, Value>| {
            spec.get("ports")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|p| p.get("nodePort").cloned()).collect::<Vec<_>>())
        };
        if ports(after) == ports(before) {
            for port in after
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                port.remove("nodePort");
            }
        }
    }
    if !matches!(is.as_str(), "NodePort" | "LoadBalancer") && same(after, "externalTrafficPolicy") {
        after.remove("externalTrafficPolicy");
    }
    if is != "LoadBalancer" && same(after, "allocateLoadBalancerNodePorts") {
        after.remove("allocateLoadBalancerNodePorts");
    }
}

/// Whether a Service of this spec has node ports: NodePort, and LoadBalancer unless it says
/// `allocateLoadBalancerNodePorts: false`.
fn needs_node_ports(spec: &Map<String, Value>) -> bool {
    match spec.get("type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => spec.get("allocateLoadBalancerNodePorts") != Some(&json!(false)),
        _ => false,
    }
}

fn is_headless(spec: &Map<String, Value>) -> bool {
    cluster_ips_of(spec).first().map(String::as_str) == Some("None")
}

/// A spec's cluster IPs: `clusterIPs`, else `clusterIP` alone (empty strings are none).
fn cluster_ips_of(spec: &Map<String, Value>) -> Vec<String> {
    let list: Vec<String> = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if !list.is_empty() {
        return list;
    }
    spec.get("clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| vec![s.to_owned()])
        .unwrap_or_default()
}

fn cluster_ips(service: &Value) -> Vec<String> {
    match service.pointer("/spec/type").and_then(Value::as_str) {
        Some("ExternalName") => Vec::new(),
        _ => service.get("spec").and_then(Value::as_object).map(cluster_ips_of).unwrap_or_default(),
    }
}

fn node_ports(service: &Value) -> Vec<u16> {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
        .collect()
}

/// A number below `bound` (not zero), from the system's random source.
fn random(bound: u32) -> u32 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(bound)) as u32
}

#[cfg(test)]
mod tests;
