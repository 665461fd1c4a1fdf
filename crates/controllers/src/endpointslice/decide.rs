//! What one sync of a Service's EndpointSlices changes, as a pure function of the Service, the
//! pods it selects, the zones of their nodes and the slices that exist (kube-controller-manager's
//! `reconciler.reconcile`).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::owners;
use crate::service_pods as sp;

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming the controller that manages a slice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The most endpoints the controller puts in one slice (`--max-endpoints-per-slice`).
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;
/// The label of the node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// What a sync reads.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The Service, with a selector.
    pub service: &'a Service,
    /// The pods it selects.
    pub pods: &'a [&'a Pod],
    /// Node name → zone, for the nodes that have one.
    pub zones: &'a BTreeMap<String, String>,
    /// The slices labelled as this controller's for the Service.
    pub slices: &'a [EndpointSlice],
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Make this slice (named by `generateName`).
    Create(EndpointSlice),
    /// Write this slice over the one of its name.
    Update(EndpointSlice),
    /// Delete the slice of this name.
    Delete(String),
}

/// Endpoints of one address type and one set of ports.
type Group = (String, Vec<PortKey>);

/// A port as a group's key holds it: name, number, protocol, app protocol.
type PortKey = (Option<String>, Option<i32>, Option<String>, Option<String>);

fn key(ports: &[EndpointPort]) -> Vec<PortKey> {
    let mut keys: Vec<PortKey> = ports
        .iter()
        .map(|p| (p.name.clone(), p.port, p.protocol.clone(), p.app_protocol.clone()))
        .collect();
    keys.sort();
    keys
}

fn ports_of(keys: &[PortKey]) -> Vec<EndpointPort> {
    keys.iter()
        .map(|(name, port, protocol, app_protocol)| EndpointPort {
            name: name.clone(),
            port: *port,
            protocol: protocol.clone(),
            app_protocol: app_protocol.clone(),
        })
        .collect()
}

/// The writes that bring the Service's slices in line with its pods: an endpoint per pod IP of
/// each address type, grouped by the ports it resolves, at most [`MAX_ENDPOINTS_PER_SLICE`] per
/// slice; endpoints already in a slice stay there, new ones fill slices with room before new
/// slices are made, and a slice no longer needed is rewritten in place when a new one is needed.
/// A Service with no endpoints keeps one empty slice. Nothing, when all is as it should be.
pub fn decide(facts: &Facts<'_>) -> Vec<Step> {
    let service = facts.service;
    let uid = service.metadata.uid.as_deref().unwrap_or_default();
    let mut desired: BTreeMap<Group, Vec<Endpoint>> = BTreeMap::new();
    for family in sp::families(service, facts.pods) {
        for pod in facts.pods.iter().filter(|p| sp::in_endpoints(p, true)) {
            let Some(ip) = sp::pod_ip(pod, family) else { continue };
            let ports = endpoint_ports(service, pod);
            let endpoint = endpoint(service, pod, ip, facts.zones);
            desired.entry((family.to_owned(), key(&ports))).or_default().push(endpoint);
        }
    }

    let mut steps = Vec::new();
    // Slices another Service (an earlier one of the same name) owns are deleted.
    let (owned, foreign): (Vec<&EndpointSlice>, Vec<&EndpointSlice>) =
        facts.slices.iter().partition(|s| owners::is_controlled_by(&s.metadata, uid));
    steps.extend(foreign.iter().map(|s| Step::Delete(name(s))));

    let mut by_group: BTreeMap<Group, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in owned {
        by_group.entry(group_of(slice)).or_default().push(slice);
    }
    for slices in by_group.values_mut() {
        slices.sort_by_key(|s| name(s));
    }

    let mut updates: Vec<EndpointSlice> = Vec::new();
    let mut creates: Vec<EndpointSlice> = Vec::new();
    let mut unneeded: Vec<&EndpointSlice> = Vec::new();
    for (group, slices) in &by_group {
        if !desired.contains_key(group) {
            unneeded.extend(slices.iter().copied());
        }
    }
    for (group, wanted) in &desired {
        let existing = by_group.get(group).cloned().unwrap_or_default();
        let mut pending: HashMap<String, &Endpoint> =
            wanted.iter().map(|e| (identity(e), e)).collect();
        let mut filled: Vec<(&EndpointSlice, Vec<Endpoint>)> = Vec::new();
        for slice in existing {
            let kept: Vec<Endpoint> = slice
                .endpoints
                .iter()
                .filter_map(|e| pending.remove(&identity(e)).cloned())
                .collect();
            filled.push((slice, kept));
        }
        // New endpoints, in the pods' order, fill slices with room, then new slices.
        let mut new: Vec<Endpoint> =
            wanted.iter().filter(|e| pending.contains_key(&identity(e))).cloned().collect();
        for (_, kept) in filled.iter_mut() {
            let room = MAX_ENDPOINTS_PER_SLICE.saturating_sub(kept.len()).min(new.len());
            kept.extend(new.drain(..room));
        }
        for (slice, kept) in filled {
            if kept.is_empty() {
                unneeded.push(slice);
            } else {
                let fresh = slice_for(service, &group.0, &ports_of(&group.1), kept, Some(slice));
                if changed(slice, &fresh) {
                    updates.push(fresh);
                }
            }
        }
        for chunk in new.chunks(MAX_ENDPOINTS_PER_SLICE) {
            creates.push(slice_for(service, &group.0, &ports_of(&group.1), chunk.to_vec(), None));
        }
    }

    if desired.is_empty() {
        // A Service without endpoints keeps one empty slice, of its first address type.
        let family = sp::families(service, facts.pods)[0];
        let placeholder = slice_for(service, family, &[], Vec::new(), None);
        match unneeded.iter().position(|s| s.address_type == family) {
            Some(i) => {
                let slice = unneeded.remove(i);
                let fresh = slice_for(service, family, &[], Vec::new(), Some(slice));
                if changed(slice, &fresh) {
                    updates.push(fresh);
                }
            }
            None => creates.push(placeholder),
        }
    }

    // A slice no longer needed becomes a new one of its address type rather than being deleted
    // while another is made.
    for create in creates {
        match unneeded.iter().position(|s| s.address_type == create.address_type) {
            Some(i) => {
                let old = unneeded.remove(i);
                let mut reused = create;
                reused.metadata = ObjectMeta {
                    name: old.metadata.name.clone(),
                    generate_name: None,
                    resource_version: old.metadata.resource_version.clone(),
                    ..reused.metadata
                };
                updates.push(reused);
            }
            None => steps.push(Step::Create(create)),
        }
    }
    steps.extend(updates.into_iter().map(Step::Update));
    steps.extend(unneeded.into_iter().map(|s| Step::Delete(name(s))));
    steps
}

fn name(slice: &EndpointSlice) -> String {
    slice.metadata.name.clone().unwrap_or_default()
}

/// A slice's address type and ports, ports in a fixed order.
fn group_of(slice: &EndpointSlice) -> Group {
    (slice.address_type.clone(), key(slice.ports.as_deref().unwrap_or_default()))
}

/// What makes two endpoints the same one: the pod and its address.
fn identity(endpoint: &Endpoint) -> String {
    let pod = endpoint.target_ref.as_ref().and_then(|r| r.uid.clone()).unwrap_or_default();
    format!("{pod}/{}", endpoint.addresses.join(","))
}

/// The ports of `pod`'s endpoints: one per Service port whose target the pod has.
fn endpoint_ports(service: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = sp::ports(service).iter().filter_map(|port| {
        Some(EndpointPort {
            name: Some(port.name.clone().unwrap_or_default()),
            port: Some(sp::target_port(pod, port)?),
            protocol: Some(port.protocol.clone().unwrap_or_else(|| "TCP".into())),
            app_protocol: port.app_protocol.clone(),
        })
    });
    ports_of(&key(&ports.collect::<Vec<_>>()))
}

/// `podToEndpoint`.
fn endpoint(service: &Service, pod: &Pod, ip: &str, zones: &BTreeMap<String, String>) -> Endpoint {
    let serving = sp::publishes_not_ready(service) || crate::pods::is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let ready = sp::publishes_not_ready(service) || (serving && !terminating);
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
    Endpoint {
        addresses: vec![ip.to_owned()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: sp::hostname(pod, service),
        zone: node.as_ref().and_then(|n| zones.get(n).cloned()),
        node_name: node,
        target_ref: Some(sp::target_ref(pod)),
        ..Endpoint::default()
    }
}

/// The slice the controller wants: `old`'s name and metadata with the Service's labels and owner,
/// or a new one named by `generateName`.
fn slice_for(
    service: &Service,
    family: &str,
    ports: &[EndpointPort],
    endpoints: Vec<Endpoint>,
    old: Option<&EndpointSlice>,
) -> EndpointSlice {
    let service_name = service.metadata.name.clone().unwrap_or_default();
    let mut labels = sp::labels(service);
    labels.insert(SERVICE_NAME_LABEL.into(), service_name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let owner: Option<OwnerReference> = owners::controller_ref(service);
    let metadata = match old {
        Some(old) => ObjectMeta {
            labels: Some(labels),
            owner_references: owner.map(|o| vec![o]),
            ..old.metadata.clone()
        },
        None => ObjectMeta {
            generate_name: Some(format!("{service_name}-")),
            namespace: service.metadata.namespace.clone(),
            labels: Some(labels),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
    };
    EndpointSlice {
        metadata,
        address_type: family.to_owned(),
        endpoints,
        ports: Some(ports.to_vec()),
    }
}

/// Whether writing `fresh` over `old` changes what the slice says.
fn changed(old: &EndpointSlice, fresh: &EndpointSlice) -> bool {
    old.endpoints != fresh.endpoints
        || key(old.ports.as_deref().unwrap_or_default())
            != key(fresh.ports.as_deref().unwrap_or_default())
        || old.metadata.labels != fresh.metadata.labels
        || old.metadata.owner_references != fresh.metadata.owner_references
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const UID: &str = "svc-uid";

    fn service(spec: Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": UID,
                         "labels": {"app": "web"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn http() -> Value {
        json!({"selector": {"app": "web"},
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]})
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool) -> Pod {
        let mut status = json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]});
        if let Some(ip) = ip {
            status["podIP"] = json!(ip);
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx",
                     "ports": [{"name": "web", "containerPort": 9000}]}]},
            "status": status,
        }))
        .unwrap()
    }

    fn zones() -> BTreeMap<String, String> {
        BTreeMap::from([("node-1".to_owned(), "zone-a".to_owned())])
    }

    fn run(service: &Service, pods: &[Pod], slices: &[EndpointSlice]) -> Vec<Step> {
        let pods: Vec<&Pod> = pods.iter().collect();
        decide(&Facts { service, pods: &pods, zones: &zones(), slices })
    }

    /// The slices as they would be stored after `steps`, names given in order.
    fn apply(slices: &[EndpointSlice], steps: &[Step]) -> Vec<EndpointSlice> {
        let mut out: Vec<EndpointSlice> = slices.to_vec();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Create(s) => {
                    let mut s = s.clone();
                    s.metadata.name = Some(format!("web-{i}{}", out.len()));
                    out.push(s);
                }
                Step::Update(s) => {
                    let at = out.iter().position(|o| o.metadata.name == s.metadata.name).unwrap();
                    out[at] = s.clone();
                }
                Step::Delete(name) => out.retain(|o| o.metadata.name.as_deref() != Some(name)),
            }
        }
        out
    }

    fn ips(slice: &EndpointSlice) -> Vec<(String, bool)> {
        slice
            .endpoints
            .iter()
            .map(|e| (e.addresses[0].clone(), e.conditions.as_ref().unwrap().ready.unwrap()))
            .collect()
    }

    #[test]
    fn ready_pods_make_one_slice_with_labels_owner_ports_and_conditions() {
        let svc = service(http());
        let pods = [
            pod("a", Some("10.0.0.1"), true),
            pod("b", Some("10.0.0.2"), false),
            pod("c", None, true),
        ];
        let steps = run(&svc, &pods, &[]);
        let [Step::Create(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(slice.address_type, "IPv4");
        assert_eq!(ips(slice), [("10.0.0.1".into(), true), ("10.0.0.2".into(), false)]);
        let labels = slice.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "web");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(labels["app"], "web");
        let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Service", UID));
        assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
        let port = &slice.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), Some(8080)));
        let endpoint = &slice.endpoints[0];
        assert_eq!(endpoint.node_name.as_deref(), Some("node-1"));
        assert_eq!(endpoint.zone.as_deref(), Some("zone-a"));
        assert_eq!(endpoint.target_ref.as_ref().unwrap().name.as_deref(), Some("a"));
        let unready = endpoint_conditions(&slice.endpoints[1]);
        assert_eq!(unready, (false, false, false));
    }

    fn endpoint_conditions(e: &Endpoint) -> (bool, bool, bool) {
        let c = e.conditions.as_ref().unwrap();
        (c.ready.unwrap(), c.serving.unwrap(), c.terminating.unwrap())
    }

    #[test]
    fn nothing_is_written_when_the_slices_are_as_they_should_be() {
        let svc = service(http());
        let pods = [pod("a", Some("10.0.0.1"), true), pod("b", Some("10.0.0.2"), true)];
        let slices = apply(&[], &run(&svc, &pods, &[]));
        assert_eq!(run(&svc, &pods, &slices), []);
    }

    #[test]
    fn a_pod_becoming_unready_or_gone_updates_its_slice_in_place() {
        let svc = service(http());
        let pods = [pod("a", Some("10.0.0.1"), true), pod("b", Some("10.0.0.2"), true)];
        let slices = apply(&[], &run(&svc, &pods, &[]));
        let unready = [pod("a", Some("10.0.0.1"), true), pod("b", Some("10.0.0.2"), false)];
        let steps = run(&svc, &unready, &slices);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.metadata.name, slices[0].metadata.name);
        assert_eq!(ips(slice), [("10.0.0.1".into(), true), ("10.0.0.2".into(), false)]);
        let steps = run(&svc, &pods[..1], &slices);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(ips(slice), [("10.0.0.1".into(), true)]);
    }

    #[test]
    fn terminating_pods_stay_serving_but_not_ready_and_finished_ones_go() {
        let svc = service(http());
        let mut going = pod("a", Some("10.0.0.1"), true);
        going.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        let mut done = pod("b", Some("10.0.0.2"), false);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let steps = run(&svc, &[going, done], &[]);
        let [Step::Create(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.endpoints.len(), 1);
        assert_eq!(endpoint_conditions(&slice.endpoints[0]), (false, true, true));
    }

    #[test]
    fn publish_not_ready_addresses_makes_every_endpoint_ready() {
        let mut spec = http();
        spec["publishNotReadyAddresses"] = json!(true);
        let steps = run(&service(spec), &[pod("a", Some("10.0.0.1"), false)], &[]);
        let [Step::Create(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(endpoint_conditions(&slice.endpoints[0]), (true, true, false));
    }

    #[test]
    fn named_target_ports_group_pods_by_the_port_they_resolve() {
        let svc = service(json!({"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}]}));
        let mut other = pod("b", Some("10.0.0.2"), true);
        other.spec.as_mut().unwrap().containers[0].ports.as_mut().unwrap()[0].container_port = 9001;
        let mut none = pod("c", Some("10.0.0.3"), true);
        none.spec.as_mut().unwrap().containers[0].ports = None;
        let steps = run(&svc, &[pod("a", Some("10.0.0.1"), true), other, none], &[]);
        let mut by_port: Vec<(Option<i32>, Vec<String>)> = steps
            .iter()
            .map(|s| match s {
                Step::Create(s) => (
                    s.ports.as_ref().unwrap().first().and_then(|p| p.port),
                    s.endpoints.iter().map(|e| e.addresses[0].clone()).collect(),
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        by_port.sort();
        assert_eq!(
            by_port,
            [
                (None, vec!["10.0.0.3".to_owned()]),
                (Some(9000), vec!["10.0.0.1".to_owned()]),
                (Some(9001), vec!["10.0.0.2".to_owned()]),
            ]
        );
    }

    #[test]
    fn slices_hold_at_most_a_hundred_endpoints_and_fill_before_growing() {
        let svc = service(http());
        let pods: Vec<Pod> = (0..150)
            .map(|i| {
                pod(&format!("p{i:03}"), Some(&format!("10.0.{}.{}", i / 100, i % 100 + 1)), true)
            })
            .collect();
        let steps = run(&svc, &pods, &[]);
        let sizes: Vec<usize> = steps
            .iter()
            .map(|s| match s {
                Step::Create(s) => s.endpoints.len(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sizes, [100, 50]);
        let slices = apply(&[], &steps);
        let more: Vec<Pod> = (150..170)
            .map(|i| pod(&format!("p{i:03}"), Some(&format!("10.1.0.{}", i - 149)), true))
            .collect();
        let all: Vec<Pod> = pods.into_iter().chain(more).collect();
        let steps = run(&svc, &all, &slices);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.endpoints.len(), 70);
    }

    #[test]
    fn a_service_without_endpoints_keeps_one_empty_slice() {
        let svc = service(http());
        let steps = run(&svc, &[pod("a", None, true)], &[]);
        let [Step::Create(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert!(slice.endpoints.is_empty() && slice.ports.as_ref().unwrap().is_empty());
        let placeholder = apply(&[], &steps);
        assert_eq!(run(&svc, &[], &placeholder), []);
        // Its first endpoint turns the empty slice into the real one.
        let steps = run(&svc, &[pod("a", Some("10.0.0.1"), true)], &placeholder);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.metadata.name, placeholder[0].metadata.name);
        assert_eq!(slice.endpoints.len(), 1);
        // And back when the pods are gone.
        let steps = run(&svc, &[], &apply(&placeholder, &steps));
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert!(slice.endpoints.is_empty());
    }

    #[test]
    fn slices_of_another_service_of_the_name_are_deleted_and_labels_follow_the_service() {
        let svc = service(http());
        let pods = [pod("a", Some("10.0.0.1"), true)];
        let mut slices = apply(&[], &run(&svc, &pods, &[]));
        let mut stale = slices[0].clone();
        stale.metadata.name = Some("web-old".into());
        stale.metadata.owner_references.as_mut().unwrap()[0].uid = "earlier".into();
        slices.push(stale);
        assert_eq!(run(&svc, &pods, &slices), [Step::Delete("web-old".into())]);
        let mut headless_spec = http();
        headless_spec["clusterIP"] = json!("None");
        let steps = run(&service(headless_spec), &pods, &slices[..1]);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.metadata.labels.as_ref().unwrap()[sp::HEADLESS_LABEL], "");
    }

    #[test]
    fn changed_ports_rewrite_the_slice_rather_than_replace_it() {
        let svc = service(http());
        let pods = [pod("a", Some("10.0.0.1"), true)];
        let slices = apply(&[], &run(&svc, &pods, &[]));
        let moved = service(json!({"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8081, "protocol": "TCP"}]}));
        let steps = run(&moved, &pods, &slices);
        let [Step::Update(slice)] = &steps[..] else { panic!("{steps:?}") };
        assert_eq!(slice.metadata.name, slices[0].metadata.name);
        assert_eq!(slice.ports.as_ref().unwrap()[0].port, Some(8081));
    }
}
