//! A tenant Service as its host Service, and what the host gives a Service back.
//!
//! A tenant Service that selects pods is carried to the tenant's host namespace, its selector
//! rewritten as its pods' labels are ([`host_names::host_label_key`], confined to the
//! Service's tenant namespace), so the host's service proxy sends its traffic to the tenant's
//! host pods. It asks the host for the tenant's own cluster IP and node ports; where the host
//! gives others (taken there, or outside its range), the tenant Service is made again with the
//! host's ([`tenant_service_with`]), so the address a tenant pod is shown is the one that works.
//! A Service that selects nothing (its EndpointSlices are written by hand, pointing at a
//! database outside the cluster, say) is carried too, with its slices
//! ([`host_endpoint_slice`]): their addresses pass the [`AddressPolicy`], so a tenant can
//! point its Service at its own pods or at addresses outside the cluster, never at another
//! tenant's pods, a node or anything on loopback or link-local addresses (kube-apiserver's
//! endpoint rules, and CVE-2021-25740's lesson). The tenant's own `default/kubernetes` and
//! `kube-system/kube-dns` Services are not carried: their addresses mean the tenant's API and
//! DNS, which Carrel serves. An ExternalName and a headless Service need nothing of the host:
//! the tenant's DNS answers them.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use std::sync::Arc;

use super::*;

/// The tenant Services Carrel serves itself: the tenant's API and its DNS.
const SERVED_BY_CARREL: [(&str, &str); 2] =
    [("default", "kubernetes"), ("kube-system", "kube-dns")];

/// Whether a tenant Service is carried to the host: one of type ClusterIP, NodePort or
/// LoadBalancer, with a cluster IP, other than those Carrel serves itself.
pub fn carried(service: &Service) -> bool {
    let Some(spec) = &service.spec else { return false };
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    let key = (
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default(),
    );
    matches!(kind, "ClusterIP" | "NodePort" | "LoadBalancer")
        && cluster_ip(spec).is_some_and(|ip| ip != "None")
        && !SERVED_BY_CARREL.contains(&key)
}

/// Whether a tenant Service selects pods (else its EndpointSlices are written by hand).
pub fn selects_pods(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.selector.as_ref()).is_some_and(|s| !s.is_empty())
}

/// A spec's (primary) cluster IP.
pub fn cluster_ip(spec: &ServiceSpec) -> Option<&str> {
    spec.cluster_ips
        .iter()
        .flatten()
        .chain(&spec.cluster_ip)
        .map(String::as_str)
        .find(|ip| !ip.is_empty())
}

/// The host Service of tenant Service `service` in host namespace `host_namespace`, asking for
/// the tenant's cluster IP and node ports.
pub fn host_service(tenant: &str, host_namespace: &str, service: &Service) -> Service {
    let namespace = service.metadata.namespace.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let uid = service.metadata.uid.clone().unwrap_or_default();
    let spec = service.spec.clone().unwrap_or_default();
    // A Service that selects nothing selects nothing on the host either: its slices are carried.
    let selector = selects_pods(service).then(|| {
        let mut selector: BTreeMap<String, String> = spec
            .selector
            .iter()
            .flatten()
            .map(|(k, v)| (host_names::host_label_key(k), v.clone()))
            .collect();
        selector.insert(host_names::LABEL_NAMESPACE.to_owned(), namespace.clone());
        selector
    });
    let ip = cluster_ip(&spec).map(str::to_owned);
    Service {
        metadata: ObjectMeta {
            name: Some(host_names::host_name(&namespace, &name)),
            namespace: Some(host_namespace.to_owned()),
            labels: Some(host_names::host_labels(tenant)),
            annotations: Some(host_names::host_annotations(&namespace, &name, &uid)),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: spec.type_.clone(),
            selector,
            cluster_ip: ip.clone(),
            cluster_ips: ip.map(|ip| vec![ip]),
            ip_family_policy: Some("SingleStack".to_owned()),
            ports: spec.ports.clone(),
            session_affinity: spec.session_affinity.clone(),
            session_affinity_config: spec.session_affinity_config.clone(),
            publish_not_ready_addresses: spec.publish_not_ready_addresses,
            internal_traffic_policy: spec.internal_traffic_policy.clone(),
            external_traffic_policy: spec.external_traffic_policy.clone(),
            allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports,
            load_balancer_class: spec.load_balancer_class.clone(),
            load_balancer_source_ranges: spec.load_balancer_source_ranges.clone(),
            external_ips: spec.external_ips.clone(),
            traffic_distribution: spec.traffic_distribution.clone(),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `wanted` without the cluster IP and node ports it asks for: what is asked of a host that
/// refused them, so that it gives its own.
pub fn host_allocates(mut wanted: Service) -> Service {
    if let Some(spec) = wanted.spec.as_mut() {
        spec.cluster_ip = None;
        spec.cluster_ips = None;
        for port in spec.ports.iter_mut().flatten() {
            port.node_port = None;
        }
    }
    wanted
}

/// What of a host Service the syncer keeps in line with the tenant's: everything it writes but
/// the cluster IP (the host's to give, and fixed) and the node ports (the host's where it
/// gave others).
pub fn host_service_shown(service: &Service) -> Value {
    let spec = service.spec.clone().unwrap_or_default();
    let ports: Vec<Value> = spec.ports.iter().flatten().map(port_shown).collect();
    json!({
        "type": spec.type_.as_deref().unwrap_or("ClusterIP"),
        "selector": spec.selector,
        "ports": ports,
        "sessionAffinity": spec.session_affinity.as_deref().unwrap_or("None"),
        "sessionAffinityConfig": spec.session_affinity_config,
        "publishNotReadyAddresses": spec.publish_not_ready_addresses.unwrap_or(false),
        "externalTrafficPolicy": spec.external_traffic_policy,
        "loadBalancerClass": spec.load_balancer_class,
        "loadBalancerSourceRanges": spec.load_balancer_source_ranges.unwrap_or_default(),
        "externalIPs": spec.external_ips.unwrap_or_default(),
    })
}

fn port_shown(port: &ServicePort) -> Value {
    json!({
        "name": port.name.as_deref().unwrap_or_default(),
        "protocol": port.protocol.as_deref().unwrap_or("TCP"),
        "port": port.port,
        "targetPort": port.target_port,
        "appProtocol": port.app_protocol,
    })
}

/// The node ports of a Service, port by port.
pub fn node_ports(service: &Service) -> Vec<Option<i32>> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports.into_iter().flatten().map(|p| p.node_port.filter(|n| *n != 0)).collect()
}

/// Whether the host gave host Service `host` other values than tenant Service `service` holds:
/// another cluster IP, or other node ports.
pub fn host_gave_others(service: &Service, host: &Service) -> bool {
    let ip = |s: &Service| s.spec.as_ref().and_then(cluster_ip).map(str::to_owned);
    let (Some(host_ip), Some(ip)) = (ip(host), ip(service)) else { return false };
    host_ip != ip || node_ports(host) != node_ports(service)
}

/// Tenant Service `service` made again with what the host gave `host`: its cluster IP and
/// node ports, everything else as it is (a new object: no uid, resourceVersion or timestamp).
pub fn tenant_service_with(service: &Service, host: &Service) -> Service {
    let host_spec = host.spec.clone().unwrap_or_default();
    let mut again = service.clone();
    let meta = &mut again.metadata;
    meta.uid = None;
    meta.resource_version = None;
    meta.creation_timestamp = None;
    meta.managed_fields = None;
    meta.generation = None;
    meta.deletion_timestamp = None;
    meta.deletion_grace_period_seconds = None;
    again.status = None;
    if let Some(spec) = again.spec.as_mut() {
        let ip = cluster_ip(&host_spec).map(str::to_owned);
        spec.cluster_ips = ip.clone().map(|ip| vec![ip]);
        spec.cluster_ip = ip;
        let given = node_ports(host);
        for (i, port) in spec.ports.iter_mut().flatten().enumerate() {
            port.node_port = given.get(i).copied().flatten();
        }
    }
    again
}

/// Whether another Service of `services` than `service` holds an address `host` was given (its
/// cluster IP, or one of its node ports): then the tenant Service cannot be made again with them.
pub fn held_by_another(services: &[Arc<Service>], service: &Service, host: &Service) -> bool {
    let ip = host.spec.as_ref().and_then(cluster_ip);
    let ports: Vec<i32> = node_ports(host).into_iter().flatten().collect();
    services.iter().any(|other| {
        let same = other.metadata.namespace == service.metadata.namespace
            && other.metadata.name == service.metadata.name;
        let holds_ip = ip.is_some() && other.spec.as_ref().and_then(cluster_ip) == ip;
        let holds_port = node_ports(other).into_iter().flatten().any(|p| ports.contains(&p));
        !same && (holds_ip || holds_port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(namespace: &str, name: &str, ip: &str, node_port: Option<i32>) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": format!("{name}-uid")},
            "spec": {"type": if node_port.is_some() { "NodePort" } else { "ClusterIP" },
                "clusterIP": ip, "clusterIPs": [ip], "selector": {"app": name},
                "ports": [{"port": 80, "nodePort": node_port}]},
        }))
        .expect("a Service")
    }

    #[test]
    fn a_service_is_made_again_with_the_hosts_values_unless_another_holds_them() {
        let web = service("default", "web", "10.96.5.5", Some(30080));
        let host = service("carrel-t", "web-x-default", "10.100.0.9", Some(31000));
        assert!(carried(&web));
        assert!(host_gave_others(&web, &host));
        assert!(!host_gave_others(&web, &web));
        let again = tenant_service_with(&web, &host);
        assert_eq!(again.metadata.uid, None);
        assert_eq!(cluster_ip(again.spec.as_ref().unwrap()), Some("10.100.0.9"));
        assert_eq!(node_ports(&again), [Some(31000)]);
        assert_eq!(again.spec.as_ref().unwrap().selector, web.spec.as_ref().unwrap().selector);

        let others = vec![Arc::new(web.clone()), Arc::new(service("api", "x", "10.96.7.7", None))];
        assert!(!held_by_another(&others, &web, &host));
        let ip_holder = Arc::new(service("api", "y", "10.100.0.9", None));
        assert!(held_by_another(&[ip_holder], &web, &host));
        let port_holder = Arc::new(service("api", "z", "10.96.8.8", Some(31000)));
        assert!(held_by_another(&[port_holder], &web, &host));

        // Headless Services and those Carrel serves stay in the tenant; a selectorless one is
        // carried selecting nothing.
        let mut headless = web.clone();
        headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        headless.spec.as_mut().unwrap().cluster_ips = Some(vec!["None".into()]);
        assert!(!carried(&headless));
        let mut selectorless = web.clone();
        selectorless.spec.as_mut().unwrap().selector = None;
        assert!(carried(&selectorless) && !selects_pods(&selectorless));
        let on_host = host_service("t", "carrel-t", &selectorless);
        assert_eq!(on_host.spec.unwrap().selector, None);
        for (ns, name) in [("default", "kubernetes"), ("kube-system", "kube-dns")] {
            assert!(!carried(&service(ns, name, "10.96.0.1", None)), "{ns}/{name}");
        }
    }
}
