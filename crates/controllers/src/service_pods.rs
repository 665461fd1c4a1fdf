//! What the Endpoints and EndpointSlice controllers read of Services and of the pods they select,
//! as kube-controller-manager's `endpointslice` utilities and `podutil.FindPort` read them, and
//! the index that wakes a Service when a pod it selects (or selected) changes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;

use crate::pods;
use crate::replicaset::selector::Selector;

/// The label that marks what belongs to a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The annotation that says when the change an Endpoints object or slice reflects happened.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// The selector of a Service that has one: a Service without (or with an empty one) is
/// selectorless, and an ExternalName Service gets no endpoints either.
pub fn selector(service: &Service) -> Option<Selector> {
    let spec = service.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    spec.selector.as_ref().filter(|s| !s.is_empty()).map(Selector::from_map)
}

/// The pods of `pods` that `service` selects (none for a selectorless one).
pub fn selected<'a>(service: &Service, pods: &'a [Pod]) -> Vec<&'a Pod> {
    let Some(selector) = selector(service) else { return Vec::new() };
    let namespace = service.metadata.namespace.as_deref();
    let mut found: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == namespace)
        .filter(|p| selector.matches(p.metadata.labels.as_ref()))
        .collect();
    found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    found
}

/// Whether the Service is headless (`clusterIP: None`).
pub fn is_headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Whether the Service publishes its pods' addresses before they are ready.
pub fn publishes_not_ready(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.publish_not_ready_addresses).unwrap_or(false)
}

/// The Service's ports.
pub fn ports(service: &Service) -> &[ServicePort] {
    service.spec.as_ref().and_then(|s| s.ports.as_deref()).unwrap_or_default()
}

/// `ShouldPodBeInEndpoints`: a pod that has an IP and has not finished; a terminating one only
/// when `include_terminating`.
pub fn in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if pods::is_finished(pod) || pod_ips(pod).is_empty() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// The pod's IPs: `status.podIPs`, else `status.podIP`.
pub fn pod_ips(pod: &Pod) -> Vec<&str> {
    let Some(status) = pod.status.as_ref() else { return Vec::new() };
    let listed: Vec<&str> = status.pod_ips.iter().flatten().map(|ip| ip.ip.as_str()).collect();
    if !listed.is_empty() {
        return listed;
    }
    status.pod_ip.as_deref().filter(|ip| !ip.is_empty()).into_iter().collect()
}

/// The address family of an IP: `IPv4`, `IPv6`, or none for what is not an IP.
pub fn family(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

/// The pod's IP of `family`.
pub fn pod_ip<'a>(pod: &'a Pod, family_wanted: &str) -> Option<&'a str> {
    pod_ips(pod).into_iter().find(|ip| family(ip) == Some(family_wanted))
}

/// The address families the Service's endpoints have: its `ipFamilies`, else its cluster IP's,
/// else (a Service without a cluster IP) the families of the pods' IPs, IPv4 when they have none.
pub fn families(service: &Service, pods: &[&Pod]) -> Vec<&'static str> {
    let spec = service.spec.as_ref();
    let listed: Vec<&'static str> = spec
        .and_then(|s| s.ip_families.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|f| match f.as_str() {
            "IPv4" => Some("IPv4"),
            "IPv6" => Some("IPv6"),
            _ => None,
        })
        .collect();
    if !listed.is_empty() {
        return listed;
    }
    if let Some(f) = spec.and_then(|s| s.cluster_ip.as_deref()).and_then(family) {
        return vec![f];
    }
    let mut found: Vec<&'static str> = ["IPv4", "IPv6"]
        .into_iter()
        .filter(|f| pods.iter().any(|p| pod_ip(p, f).is_some()))
        .collect();
    if found.is_empty() {
        found.push("IPv4");
    }
    found
}

/// `podutil.FindPort`: the port a Service port's `targetPort` names on `pod` — a number as it
/// is, a name through the pod's container ports of the same name and protocol; `None` when the
/// pod has no such port.
pub fn target_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// The pod's hostname in the Service's DNS: its `spec.hostname`, when its `spec.subdomain` is
/// the Service.
pub fn hostname(pod: &Pod, service: &Service) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let name = spec.hostname.as_deref().filter(|h| !h.is_empty())?;
    let same_namespace = pod.metadata.namespace == service.metadata.namespace;
    (same_namespace && spec.subdomain.as_deref() == service.metadata.name.as_deref())
        .then(|| name.to_owned())
}

/// The reference an endpoint keeps to its pod.
pub fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// When the newest change the endpoints reflect happened: the latest of the Service's creation
/// and, for each pod, when its `Ready` condition last changed (its creation, without one).
pub fn trigger_time(service: &Service, pods: &[&Pod]) -> Option<Time> {
    let ready_changed = |p: &Pod| {
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        let ready = conditions.into_iter().flatten().find(|c| c.type_ == "Ready");
        ready.and_then(|c| c.last_transition_time.clone()).or(p.metadata.creation_timestamp.clone())
    };
    let service_time = service.metadata.creation_timestamp.clone();
    pods.iter().filter_map(|p| ready_changed(p)).chain(service_time).max_by_key(|t| t.0)
}

/// A time as the trigger-time annotation writes it (RFC 3339).
pub fn format_time(time: &Time) -> String {
    time.0.to_string()
}

/// The labels of what the controllers make for `service`: the Service's own, and
/// [`HEADLESS_LABEL`] for a headless one (never the Service's own value of it).
pub fn labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.remove(HEADLESS_LABEL);
    if is_headless(service) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels
}

/// Which Services a pod change wakes: those that select the pod now, and those that selected
/// it when it was last seen (a pod whose labels changed leaves the Services it left).
pub struct PodIndex {
    services: Store<Service>,
    /// (namespace, pod) → the Services that selected it when it was last seen.
    last: Mutex<HashMap<PodKey, Vec<ObjectRef<Service>>>>,
}

/// A pod's namespace and name.
type PodKey = (String, String);

impl std::fmt::Debug for PodIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodIndex").field("pods", &self.last.lock().len()).finish_non_exhaustive()
    }
}

impl PodIndex {
    /// An index over the Services in `services` (the controller's own store).
    pub fn new(services: Store<Service>) -> PodIndex {
        PodIndex { services, last: Mutex::new(HashMap::new()) }
    }

    /// The Services to wake for a change of `pod`.
    pub fn services_of(&self, pod: &Pod) -> Vec<ObjectRef<Service>> {
        let Some(namespace) = pod.metadata.namespace.clone() else { return Vec::new() };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let now: Vec<ObjectRef<Service>> = self
            .services
            .state()
            .into_iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace.as_str()))
            .filter(|s| selector(s).is_some_and(|sel| sel.matches(pod.metadata.labels.as_ref())))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        let mut last = self.last.lock();
        let key = (namespace, name);
        let mut woken = if now.is_empty() {
            last.remove(&key).unwrap_or_default()
        } else {
            last.insert(key, now.clone()).unwrap_or_default()
        };
        for service in now {
            if !woken.contains(&service) {
                woken.push(service);
            }
        }
        woken
    }

    /// Forget the pods of `namespace` that are gone (not among `present`).
    pub fn forget_gone(&self, namespace: &str, present: &HashSet<&str>) {
        self.last.lock().retain(|(ns, name), _| ns != namespace || present.contains(name.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn pods_without_an_ip_finished_or_terminating_are_left_out() {
        let ip = json!({"phase": "Running", "podIP": "10.0.0.1"});
        assert!(in_endpoints(&pod(json!({"status": ip})), false));
        assert!(!in_endpoints(&pod(json!({"status": {"phase": "Pending"}})), true));
        let done = json!({"status": {"phase": "Succeeded", "podIP": "10.0.0.1"}});
        assert!(!in_endpoints(&pod(done), true));
        let going = pod(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
                               "status": ip}));
        assert!(!in_endpoints(&going, false) && in_endpoints(&going, true));
    }

    #[test]
    fn named_target_ports_resolve_through_container_ports_of_the_same_protocol() {
        let p = pod(json!({"spec": {"containers": [{"name": "c", "image": "i", "ports": [
            {"name": "http", "containerPort": 8080},
            {"name": "dns", "containerPort": 53, "protocol": "UDP"},
        ]}]}}));
        let port = |target: serde_json::Value, protocol: &str| -> ServicePort {
            serde_json::from_value(json!({"port": 80, "targetPort": target, "protocol": protocol}))
                .unwrap()
        };
        assert_eq!(target_port(&p, &port(json!("http"), "TCP")), Some(8080));
        assert_eq!(target_port(&p, &port(json!("dns"), "UDP")), Some(53));
        assert_eq!(target_port(&p, &port(json!("dns"), "TCP")), None);
        assert_eq!(target_port(&p, &port(json!("metrics"), "TCP")), None);
        assert_eq!(target_port(&p, &port(json!(9090), "TCP")), Some(9090));
    }

    #[test]
    fn families_come_from_the_service_else_its_pods() {
        let v4 = pod(json!({"status": {"podIP": "10.0.0.1"}}));
        let v6 = pod(json!({"status": {"podIPs": [{"ip": "fd00::1"}]}}));
        let dual = service(json!({"spec": {"ipFamilies": ["IPv6", "IPv4"]}}));
        assert_eq!(families(&dual, &[]), ["IPv6", "IPv4"]);
        let with_ip = service(json!({"spec": {"clusterIP": "fd00::10"}}));
        assert_eq!(families(&with_ip, &[&v4]), ["IPv6"]);
        let headless = service(json!({"spec": {"clusterIP": "None"}}));
        assert_eq!(families(&headless, &[&v6]), ["IPv6"]);
        assert_eq!(families(&headless, &[]), ["IPv4"]);
        assert_eq!(pod_ip(&v6, "IPv6"), Some("fd00::1"));
        assert_eq!(pod_ip(&v6, "IPv4"), None);
    }

    #[test]
    fn selectorless_and_external_name_services_select_nothing() {
        let p =
            pod(json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web"}}}));
        let pods = [p];
        let by = |spec: serde_json::Value| {
            service(json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": spec}))
        };
        assert_eq!(selected(&by(json!({"selector": {"app": "web"}})), &pods).len(), 1);
        assert!(selected(&by(json!({"selector": {"app": "db"}})), &pods).is_empty());
        assert!(selected(&by(json!({})), &pods).is_empty());
        assert!(selected(&by(json!({"selector": {}})), &pods).is_empty());
        let external = json!({"type": "ExternalName", "selector": {"app": "web"}});
        assert!(selected(&by(external), &pods).is_empty());
    }

    #[test]
    fn a_hostname_needs_the_service_as_subdomain() {
        let p = pod(json!({"metadata": {"namespace": "ns"},
                           "spec": {"hostname": "web-0", "subdomain": "web", "containers": []}}));
        let web = service(json!({"metadata": {"name": "web", "namespace": "ns"}}));
        let other = service(json!({"metadata": {"name": "db", "namespace": "ns"}}));
        assert_eq!(hostname(&p, &web).as_deref(), Some("web-0"));
        assert_eq!(hostname(&p, &other), None);
    }
}
