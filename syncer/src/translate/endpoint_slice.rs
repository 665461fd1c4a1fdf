//! A tenant EndpointSlice of a Service that selects nothing, as its host EndpointSlice: the
//! endpoints a tenant wrote by hand, carried to the host Service of their Service with only the
//! addresses the [`AddressPolicy`] allows.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

/// The label naming an EndpointSlice's Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming the controller that keeps an EndpointSlice.
pub const LABEL_SLICE_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";

/// Which addresses a tenant's hand-written endpoints may carry to the host: the tenant's own
/// host pods', and addresses outside the cluster; never another pod's (an address of a node's
/// pod range), a node's, or a loopback, link-local, unspecified or multicast one.
#[derive(Debug, Default)]
pub struct AddressPolicy {
    own: HashSet<IpAddr>,
    pod_ranges: Vec<(IpAddr, u8)>,
    nodes: HashSet<IpAddr>,
}

impl AddressPolicy {
    /// The policy for a tenant whose host pods are `own`, on a host whose nodes are `nodes`.
    pub fn new<'a>(
        own: impl IntoIterator<Item = &'a Pod>,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> AddressPolicy {
        let mut policy = AddressPolicy::default();
        for pod in own {
            let status = pod.status.as_ref();
            let ips = status.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().map(|p| &p.ip);
            let ip = status.and_then(|s| s.pod_ip.as_ref());
            policy.own.extend(ips.chain(ip).filter_map(|ip| ip.parse::<IpAddr>().ok()));
        }
        for node in nodes {
            let spec = node.spec.as_ref();
            let ranges = spec.and_then(|s| s.pod_cidrs.as_ref()).into_iter().flatten();
            let range = spec.and_then(|s| s.pod_cidr.as_ref());
            policy.pod_ranges.extend(ranges.chain(range).filter_map(|c| cidr(c)));
            let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
            policy.nodes.extend(
                addresses.into_iter().flatten().filter_map(|a| a.address.parse::<IpAddr>().ok()),
            );
        }
        policy
    }

    /// Why `address` may not be carried; `None` if it may.
    pub fn refuses(&self, address: &str) -> Option<&'static str> {
        let Ok(ip) = address.parse::<IpAddr>() else { return Some("not an IP address") };
        if self.own.contains(&ip) {
            return None;
        }
        let special = match ip {
            IpAddr::V4(v4) => {
                v4.is_loopback()
                    || v4.is_link_local()
                    || v4.is_unspecified()
                    || v4.is_multicast()
                    || v4.is_broadcast()
            }
            IpAddr::V6(v6) => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || v6.is_unicast_link_local()
            }
        };
        if special {
            return Some("a loopback, link-local, unspecified or multicast address");
        }
        if self.nodes.contains(&ip) {
            return Some("a node's address");
        }
        if self.pod_ranges.iter().any(|(base, bits)| within(ip, *base, *bits)) {
            return Some("a pod address that is not one of the tenant's pods'");
        }
        None
    }
}

/// `a.b.c.d/n` or an IPv6 CIDR, as (address, prefix length).
fn cidr(text: &str) -> Option<(IpAddr, u8)> {
    let (address, bits) = text.split_once('/')?;
    Some((address.parse().ok()?, bits.parse().ok()?))
}

/// Whether `ip` is within `base/bits`.
fn within(ip: IpAddr, base: IpAddr, bits: u8) -> bool {
    match (ip, base) {
        (IpAddr::V4(ip), IpAddr::V4(base)) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(base) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(base)) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(base) & mask
        }
        _ => false,
    }
}

/// The host EndpointSlice of tenant slice `slice` (of a Service that selects nothing), in host
/// namespace `host_namespace`, for the host Service `host_service`: its ports and address type
/// as they are, each endpoint with the addresses `policy` allows (one left with none is left
/// out), its conditions, hostname and zone, but not what names tenant objects (its target and
/// node). The addresses refused, each with why.
pub fn host_endpoint_slice(
    tenant: &str,
    host_namespace: &str,
    host_service: &str,
    slice: &EndpointSlice,
    policy: &AddressPolicy,
) -> (EndpointSlice, Vec<String>) {
    let namespace = slice.metadata.namespace.clone().unwrap_or_default();
    let name = slice.metadata.name.clone().unwrap_or_default();
    let uid = slice.metadata.uid.clone().unwrap_or_default();
    let mut labels = host_names::host_labels(tenant);
    labels.insert(LABEL_SERVICE_NAME.to_owned(), host_service.to_owned());
    labels.insert(LABEL_SLICE_MANAGED_BY.to_owned(), host_names::MANAGED_BY.to_owned());
    let mut refused = Vec::new();
    let endpoints = slice
        .endpoints
        .iter()
        .filter_map(|endpoint| {
            let addresses: Vec<String> = endpoint
                .addresses
                .iter()
                .filter(|a| match policy.refuses(a) {
                    None => true,
                    Some(why) => {
                        refused.push(format!("{a}: {why}"));
                        false
                    }
                })
                .cloned()
                .collect();
            (!addresses.is_empty()).then(|| Endpoint {
                addresses,
                conditions: endpoint.conditions.clone(),
                hostname: endpoint.hostname.clone(),
                zone: endpoint.zone.clone(),
                ..Endpoint::default()
            })
        })
        .collect();
    let host = EndpointSlice {
        metadata: ObjectMeta {
            name: Some(host_names::host_name(&namespace, &name)),
            namespace: Some(host_namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(host_names::host_annotations(&namespace, &name, &uid)),
            ..ObjectMeta::default()
        },
        address_type: slice.address_type.clone(),
        endpoints,
        ports: slice.ports.clone(),
    };
    (host, refused)
}

/// The Service (its name) tenant slice `slice` belongs to, if it names one.
pub fn slice_service(slice: &EndpointSlice) -> Option<&str> {
    slice.metadata.labels.as_ref()?.get(LABEL_SERVICE_NAME).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> AddressPolicy {
        let pod: Pod = serde_json::from_value(json!({
            "status": {"podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00::7"}]}
        }))
        .unwrap();
        let node: Node = serde_json::from_value(json!({
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00::/64"]},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]},
        }))
        .unwrap();
        let other: Node =
            serde_json::from_value(json!({"spec": {"podCIDR": "10.244.2.0/24"}})).unwrap();
        AddressPolicy::new([&pod], [&node, &other])
    }

    #[test]
    fn only_the_tenants_own_pods_and_addresses_outside_the_cluster_pass() {
        let policy = policy();
        for allowed in ["10.244.1.7", "fd00::7", "203.0.113.5", "10.0.5.5", "2001:db8::1"] {
            assert_eq!(policy.refuses(allowed), None, "{allowed}");
        }
        for (refused, why) in [
            ("10.244.1.8", "a pod address that is not one of the tenant's pods'"),
            ("10.244.2.9", "a pod address that is not one of the tenant's pods'"),
            ("fd00::8", "a pod address that is not one of the tenant's pods'"),
            ("192.168.1.10", "a node's address"),
            ("127.0.0.1", "a loopback, link-local, unspecified or multicast address"),
            ("169.254.169.254", "a loopback, link-local, unspecified or multicast address"),
            ("fe80::1", "a loopback, link-local, unspecified or multicast address"),
            ("0.0.0.0", "a loopback, link-local, unspecified or multicast address"),
            ("db.example.com", "not an IP address"),
        ] {
            assert_eq!(policy.refuses(refused), Some(why), "{refused}");
        }
    }

    #[test]
    fn a_slice_is_carried_with_the_addresses_it_may_hold_and_nothing_naming_tenant_objects() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "db-1", "namespace": "shop", "uid": "u",
                "labels": {LABEL_SERVICE_NAME: "db"}},
            "addressType": "IPv4",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["203.0.113.5"], "conditions": {"ready": true}, "hostname": "db-a",
                    "nodeName": "n1", "targetRef": {"kind": "Pod", "name": "x", "namespace": "shop"}},
                {"addresses": ["10.244.2.9"], "conditions": {"ready": true}},
                {"addresses": ["10.244.1.7"]},
            ],
        }))
        .unwrap();
        assert_eq!(slice_service(&slice), Some("db"));
        let (host, refused) = host_endpoint_slice("t", "carrel-t", "db-x-shop", &slice, &policy());
        let host = serde_json::to_value(&host).unwrap();
        assert_eq!(host["metadata"]["name"], json!("db-1-x-shop"));
        assert_eq!(host["metadata"]["labels"][LABEL_SERVICE_NAME], json!("db-x-shop"));
        assert_eq!(host["metadata"]["labels"][LABEL_SLICE_MANAGED_BY], json!("carrel-syncer"));
        assert_eq!(host["metadata"]["labels"]["carrel.dev/tenant"], json!("t"));
        assert_eq!(
            host["endpoints"],
            json!([
                {"addresses": ["203.0.113.5"], "conditions": {"ready": true}, "hostname": "db-a"},
                {"addresses": ["10.244.1.7"]},
            ])
        );
        assert_eq!(host["ports"], json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]));
        assert_eq!(refused, ["10.244.2.9: a pod address that is not one of the tenant's pods'"]);
    }
}
