//! The Endpoints controller (kube-controller-manager's `endpoint` controller,
//! `pkg/controller/endpoint`): for each Service with a selector, an Endpoints object of the
//! Service's name listing the pods it selects.
//!
//! A sync reads the Service, the pods of its namespace it selects and the Endpoints object;
//! [`decide`] says what to write: one address per pod that has an IP and has not finished, in
//! `addresses` when it is ready (or the Service publishes not-ready addresses) and in
//! `notReadyAddresses` otherwise (a terminating pod only with `publishNotReadyAddresses`), in
//! subsets by the ports it resolves (a named `targetPort` through the pod's container ports; a
//! headless Service without ports gets subsets without ports). At most 1000 addresses are kept,
//! ready ones first, and the object is annotated `endpoints.kubernetes.io/over-capacity:
//! truncated`. Written objects carry `endpoints.kubernetes.io/last-change-trigger-time` and the
//! Service's labels (with `service.kubernetes.io/headless` for a headless one). When a Service is
//! deleted, its Endpoints go too; selectorless and ExternalName Services' Endpoints are the
//! user's.
//!
//! The controller is woken by its Services, by Endpoints objects (their Service's), and by the
//! pods a Service selects now or selected when the pod was last seen
//! ([`crate::service_pods::PodIndex`]); Service deletions come from a watch of its own.
//!
//! Where it differs: truncation keeps ready addresses first rather than a share of each subset;
//! Endpoints left over from Services deleted while the controller was not running are not looked
//! for; the trigger time is the latest change of the Service or its pods' readiness.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use tokio::sync::watch;

use crate::service_pods::{self as sp, PodIndex};
use crate::{Context, Error};

/// The annotation that says addresses were left out.
pub const OVER_CAPACITY_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
/// Its value.
pub const TRUNCATED: &str = "truncated";
/// The most addresses an Endpoints object holds.
pub const MAX_CAPACITY: usize = 1000;

struct Shared {
    client: kube::Client,
    index: Arc<PodIndex>,
}

/// Run the Endpoints controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let controller =
        Controller::new(Api::<Service>::all(client.clone()), watcher::Config::default());
    let index = Arc::new(PodIndex::new(controller.store()));
    let shared = Arc::new(Shared { client: client.clone(), index: index.clone() });
    let controller = controller
        .watches(Api::<Endpoints>::all(client.clone()), watcher::Config::default(), |ep| {
            let namespace = ep.namespace().unwrap_or_default();
            Some(ObjectRef::<Service>::new(&ep.name_any()).within(&namespace))
        })
        .watches(Api::<Pod>::all(client.clone()), watcher::Config::default(), move |pod| {
            index.services_of(&pod)
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {});
    tokio::join!(controller, deletions(client, stop));
}

/// Delete the Endpoints of each Service deleted, until `stop`.
async fn deletions(client: kube::Client, stop: watch::Receiver<bool>) {
    let events = watcher(Api::<Service>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .try_filter_map(|event| async move {
            Ok(match event {
                watcher::Event::Delete(service) => Some(service),
                _ => None,
            })
        });
    let deleted = events.for_each(|service| {
        let client = client.clone();
        async move {
            let Ok(service) = service else { return };
            let namespace = service.namespace().unwrap_or_default();
            let api: Api<Endpoints> = Api::namespaced(client, &namespace);
            match api.delete(&service.name_any(), &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(error) => {
                    tracing::debug!(service = %service.name_any(), %error, "deleting endpoints");
                }
            }
        }
    });
    tokio::select! {
        () = deleted => {}
        () = crate::stopped(&stop) => {}
    }
}

fn error_policy(service: Arc<Service>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(service = %service.name_any(), %error, "endpoints sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(service: Arc<Service>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let services: Api<Service> = Api::namespaced(shared.client.clone(), &namespace);
    let api: Api<Endpoints> = Api::namespaced(shared.client.clone(), &namespace);
    let Some(service) = services.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    if sp::selector(&service).is_none() {
        return Ok(Action::await_change());
    }
    let all: Vec<Pod> = Api::<Pod>::namespaced(shared.client.clone(), &namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let present: HashSet<&str> = all.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
    shared.index.forget_gone(&namespace, &present);
    let pods = sp::selected(&service, &all);
    let current = api.get_opt(&name).await?;
    match decide(&service, &pods, current.as_ref()) {
        None => {}
        Some(endpoints) if current.is_some() => {
            api.replace(&name, &PostParams::default(), &endpoints).await?;
        }
        Some(endpoints) => {
            api.create(&PostParams::default(), &endpoints).await?;
        }
    }
    Ok(Action::await_change())
}

/// The Endpoints object `service` should have, given the pods it selects and the `current` one;
/// `None` when `current` already says it (nothing to write).
pub fn decide(service: &Service, pods: &[&Pod], current: Option<&Endpoints>) -> Option<Endpoints> {
    let (subsets, truncated) = subsets(service, pods);
    let labels = sp::labels(service);
    let annotations = current.and_then(|c| c.metadata.annotations.as_ref());
    let marked = annotations.and_then(|a| a.get(OVER_CAPACITY_ANNOTATION)).map(String::as_str);
    if let Some(current) = current {
        let same = current.subsets.clone().unwrap_or_default() == subsets
            && current.metadata.labels.clone().unwrap_or_default() == labels
            && (marked == Some(TRUNCATED)) == truncated;
        if same {
            return None;
        }
    }
    let mut annotations = annotations.cloned().unwrap_or_default();
    match sp::trigger_time(service, pods) {
        Some(time) => {
            annotations.insert(sp::TRIGGER_TIME_ANNOTATION.into(), sp::format_time(&time));
        }
        None => {
            annotations.remove(sp::TRIGGER_TIME_ANNOTATION);
        }
    }
    if truncated {
        annotations.insert(OVER_CAPACITY_ANNOTATION.into(), TRUNCATED.into());
    } else {
        annotations.remove(OVER_CAPACITY_ANNOTATION);
    }
    let metadata = ObjectMeta {
        name: service.metadata.name.clone(),
        namespace: service.metadata.namespace.clone(),
        labels: Some(labels),
        annotations: Some(annotations),
        ..current.map(|c| c.metadata.clone()).unwrap_or_default()
    };
    Some(Endpoints { metadata, subsets: Some(subsets) })
}

/// The subsets of `service`'s endpoints, and whether addresses were left out to keep within
/// [`MAX_CAPACITY`].
fn subsets(service: &Service, pods: &[&Pod]) -> (Vec<EndpointSubset>, bool) {
    let tolerate = sp::publishes_not_ready(service);
    let family = sp::families(service, pods).first().copied().filter(|_| has_family(service));
    let portless = sp::ports(service).is_empty() && sp::is_headless(service);
    let mut groups: BTreeMap<Vec<PortKey>, (Vec<EndpointAddress>, Vec<EndpointAddress>)> =
        BTreeMap::new();
    for pod in pods.iter().filter(|p| sp::in_endpoints(p, tolerate)) {
        let ip = match family {
            Some(family) => sp::pod_ip(pod, family),
            None => sp::pod_ips(pod).first().copied(),
        };
        let Some(ip) = ip else { continue };
        let ports: Vec<PortKey> = if portless {
            Vec::new()
        } else {
            let resolved: Vec<PortKey> = sp::ports(service)
                .iter()
                .filter_map(|port| {
                    Some(PortKey {
                        name: port.name.clone().unwrap_or_default(),
                        port: sp::target_port(pod, port)?,
                        protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        app_protocol: port.app_protocol.clone(),
                    })
                })
                .collect();
            if resolved.is_empty() {
                continue;
            }
            resolved
        };
        let address = EndpointAddress {
            ip: ip.to_owned(),
            hostname: sp::hostname(pod, service),
            node_name: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            target_ref: Some(sp::target_ref(pod)),
        };
        let mut ports = ports;
        ports.sort();
        let (ready, not_ready) = groups.entry(ports).or_default();
        if tolerate || crate::pods::is_ready(pod) {
            ready.push(address);
        } else {
            not_ready.push(address);
        }
    }
    // At most MAX_CAPACITY addresses, ready ones first.
    let total: usize = groups.values().map(|(r, n)| r.len() + n.len()).sum();
    let truncated = total > MAX_CAPACITY;
    let mut room = MAX_CAPACITY;
    for (ready, _) in groups.values_mut() {
        ready.truncate(room);
        room -= ready.len();
    }
    for (_, not_ready) in groups.values_mut() {
        not_ready.truncate(room);
        room -= not_ready.len();
    }
    let subsets = groups
        .into_iter()
        .filter(|(_, (r, n))| !r.is_empty() || !n.is_empty())
        .map(|(ports, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: Some(ready).filter(|a| !a.is_empty()),
                not_ready_addresses: Some(not_ready).filter(|a| !a.is_empty()),
                ports: Some(ports.into_iter().map(PortKey::into_port).collect::<Vec<_>>())
                    .filter(|p| !p.is_empty()),
            }
        })
        .collect();
    (subsets, truncated)
}

/// Whether the Service says its address family (its IP families or a cluster IP); otherwise
/// each pod's first IP is its address.
fn has_family(service: &Service) -> bool {
    let spec = service.spec.as_ref();
    spec.and_then(|s| s.ip_families.as_ref()).is_some_and(|f| !f.is_empty())
        || spec.and_then(|s| s.cluster_ip.as_deref()).and_then(sp::family).is_some()
}

/// An endpoint port, ordered by name then number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PortKey {
    name: String,
    port: i32,
    protocol: String,
    app_protocol: Option<String>,
}

impl PortKey {
    fn into_port(self) -> EndpointPort {
        EndpointPort {
            name: Some(self.name).filter(|n| !n.is_empty()),
            port: self.port,
            protocol: Some(self.protocol),
            app_protocol: self.app_protocol,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn service(spec: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc",
                         "labels": {"app": "web"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn http() -> Value {
        json!({"selector": {"app": "web"},
               "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}]})
    }

    fn pod(name: &str, ip: &str, ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx",
                     "ports": [{"name": "web", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "lastTransitionTime": "2026-01-02T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn run(service: &Service, pods: &[Pod], current: Option<&Endpoints>) -> Option<Endpoints> {
        let pods: Vec<&Pod> = pods.iter().collect();
        decide(service, &pods, current)
    }

    fn ips(list: &Option<Vec<EndpointAddress>>) -> Vec<&str> {
        list.iter().flatten().map(|a| a.ip.as_str()).collect()
    }

    #[test]
    fn ready_and_unready_pods_go_to_addresses_and_not_ready_addresses() {
        let svc = service(http());
        let pods = [pod("b", "10.0.0.2", false), pod("a", "10.0.0.1", true), pod("c", "", true)];
        let made = run(&svc, &pods, None).unwrap();
        assert_eq!(made.metadata.name.as_deref(), Some("web"));
        let subsets = made.subsets.as_ref().unwrap();
        assert_eq!(subsets.len(), 1);
        assert_eq!(ips(&subsets[0].addresses), ["10.0.0.1"]);
        assert_eq!(ips(&subsets[0].not_ready_addresses), ["10.0.0.2"]);
        let port = &subsets[0].ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 8080));
        let address = &subsets[0].addresses.as_ref().unwrap()[0];
        assert_eq!(address.node_name.as_deref(), Some("node-1"));
        assert_eq!(address.target_ref.as_ref().unwrap().name.as_deref(), Some("a"));
        let annotations = made.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[sp::TRIGGER_TIME_ANNOTATION], "2026-01-02T00:00:00Z");
        assert_eq!(made.metadata.labels.as_ref().unwrap()["app"], "web");
        // Written, nothing changes.
        assert!(run(&svc, &pods, Some(&made)).is_none());
    }

    #[test]
    fn publish_not_ready_addresses_lists_every_pod_as_ready() {
        let mut spec = http();
        spec["publishNotReadyAddresses"] = json!(true);
        let made = run(&service(spec), &[pod("a", "10.0.0.1", false)], None).unwrap();
        let subset = &made.subsets.unwrap()[0];
        assert_eq!(ips(&subset.addresses), ["10.0.0.1"]);
        assert!(subset.not_ready_addresses.is_none());
    }

    #[test]
    fn terminating_pods_are_left_out_unless_not_ready_addresses_are_published() {
        let mut going = pod("a", "10.0.0.1", true);
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-03T00:00:00Z")).unwrap());
        let made = run(&service(http()), std::slice::from_ref(&going), None).unwrap();
        assert_eq!(made.subsets, Some(vec![]));
        let mut spec = http();
        spec["publishNotReadyAddresses"] = json!(true);
        let made = run(&service(spec), &[going], None).unwrap();
        assert_eq!(ips(&made.subsets.unwrap()[0].addresses), ["10.0.0.1"]);
    }

    #[test]
    fn pods_without_the_named_port_are_left_out_and_headless_services_need_no_ports() {
        let mut other = pod("b", "10.0.0.2", true);
        other.spec.as_mut().unwrap().containers[0].ports = None;
        let made = run(&service(http()), &[pod("a", "10.0.0.1", true), other.clone()], None);
        let subsets = made.unwrap().subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        assert_eq!(ips(&subsets[0].addresses), ["10.0.0.1"]);
        let headless = service(json!({"selector": {"app": "web"}, "clusterIP": "None"}));
        let made = run(&headless, &[other], None).unwrap();
        assert_eq!(made.metadata.labels.as_ref().unwrap()[sp::HEADLESS_LABEL], "");
        let subset = &made.subsets.unwrap()[0];
        assert_eq!(ips(&subset.addresses), ["10.0.0.2"]);
        assert!(subset.ports.is_none());
    }

    #[test]
    fn more_than_a_thousand_addresses_are_truncated_ready_first() {
        let svc = service(http());
        let pods: Vec<Pod> = (0..1002)
            .map(|i| pod(&format!("p{i}"), &format!("10.0.{}.{}", i / 250, i % 250 + 1), i >= 2))
            .collect();
        let made = run(&svc, &pods, None).unwrap();
        let subset = &made.subsets.as_ref().unwrap()[0];
        assert_eq!(ips(&subset.addresses).len(), 1000);
        assert!(subset.not_ready_addresses.is_none());
        let annotations = made.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[OVER_CAPACITY_ANNOTATION], TRUNCATED);
        // Back under capacity, the annotation goes.
        let fewer = run(&svc, &pods[..10], Some(&made)).unwrap();
        assert!(!fewer.metadata.annotations.unwrap().contains_key(OVER_CAPACITY_ANNOTATION));
    }

    #[test]
    fn a_change_of_readiness_is_written_over_the_current_object() {
        let svc = service(http());
        let mut current = run(&svc, &[pod("a", "10.0.0.1", true)], None).unwrap();
        current.metadata.resource_version = Some("7".into());
        let next = run(&svc, &[pod("a", "10.0.0.1", false)], Some(&current)).unwrap();
        assert_eq!(next.metadata.resource_version.as_deref(), Some("7"));
        let subset = &next.subsets.unwrap()[0];
        assert!(subset.addresses.is_none());
        assert_eq!(ips(&subset.not_ready_addresses), ["10.0.0.1"]);
    }
}
