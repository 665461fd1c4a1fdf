//! The EndpointSlice mirroring controller (kube-controller-manager's
//! `endpointslice-mirroring` controller, `pkg/controller/endpointslicemirroring`): the Endpoints
//! a user writes by hand for a Service that selects nothing are mirrored as EndpointSlices, so
//! that what reads slices (the cluster DNS, the syncer carrying the Service to the host) sees
//! them.
//!
//! An Endpoints object is mirrored when its Service exists and selects nothing, and it is not
//! labelled `endpointslice.kubernetes.io/skip-mirror: "true"`. Its slices are labelled
//! `kubernetes.io/service-name=<service>` and
//! `endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io`, carry the
//! Endpoints' own labels and annotations (but the trigger time and kubectl's last applied
//! configuration), and are owned by it (controller), so they go with it. Each subset gives one
//! slice per address family and port set, subsets with the same ports sharing theirs: ready
//! addresses ready, not-ready addresses not; at most 1000 endpoints a slice. When the Service
//! goes, starts selecting pods, or the Endpoints are marked to skip, the slices go.
//!
//! The controller is woken by Endpoints, by Services (their Endpoints) and by the slices it owns.
//!
//! Where it differs: slices are matched to what they should hold by address type and ports, not
//! by kube's endpoint-level reuse; no `--mirroring-max-endpoints-per-subset` flag.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::endpointslice::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL};
use crate::service_pods as sp;
use crate::{Context, Error};

/// The controller named on the slices it keeps.
pub const MIRRORING: &str = "endpointslicemirroring-controller.k8s.io";
/// The label on an Endpoints object that keeps it from being mirrored.
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// The most endpoints a mirrored slice holds.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

/// Annotations of an Endpoints object not carried to its slices.
const NOT_MIRRORED: [&str; 2] =
    [sp::TRIGGER_TIME_ANNOTATION, "kubectl.kubernetes.io/last-applied-configuration"];

/// Run the mirroring controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let mirrored = format!("{MANAGED_BY_LABEL}={MIRRORING}");
    Controller::new(Api::<Endpoints>::all(client.clone()), watcher::Config::default())
        .owns(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default().labels(&mirrored),
        )
        .watches(Api::<Service>::all(client.clone()), watcher::Config::default(), |service| {
            let namespace = service.namespace().unwrap_or_default();
            Some(ObjectRef::<Endpoints>::new(&service.name_any()).within(&namespace))
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, Arc::new(client))
        .for_each(|_| async {})
        .await;
}

fn error_policy(endpoints: Arc<Endpoints>, error: &Error, _: Arc<kube::Client>) -> Action {
    tracing::debug!(endpoints = %endpoints.name_any(), %error, "mirroring failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(endpoints: Arc<Endpoints>, client: Arc<kube::Client>) -> Result<Action, Error> {
    let namespace = endpoints.namespace().unwrap_or_default();
    let name = endpoints.name_any();
    let current =
        Api::<Endpoints>::namespaced((*client).clone(), &namespace).get_opt(&name).await?;
    let service = Api::<Service>::namespaced((*client).clone(), &namespace).get_opt(&name).await?;
    let api: Api<EndpointSlice> = Api::namespaced((*client).clone(), &namespace);
    let selector = format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MIRRORING}");
    let existing = api.list(&ListParams::default().labels(&selector)).await?.items;
    let wanted = match (&current, &service) {
        (Some(endpoints), Some(service)) if mirrored(endpoints, service) => mirror(endpoints),
        _ => Vec::new(),
    };
    for step in plan(wanted, existing) {
        match step {
            Step::Create(slice) => {
                api.create(&PostParams::default(), &slice).await?;
            }
            Step::Update(slice) => {
                api.replace(&slice.name_any(), &PostParams::default(), &slice).await?;
            }
            Step::Delete(name) => match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    Ok(Action::await_change())
}

/// Whether `endpoints` of `service` are mirrored: the Service selects nothing and the
/// Endpoints are not marked to skip.
pub fn mirrored(endpoints: &Endpoints, service: &Service) -> bool {
    let skip = endpoints.labels().get(SKIP_MIRROR_LABEL).is_some_and(|v| v == "true");
    !skip
        && sp::selector(service).is_none()
        && service.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("ExternalName")
}

/// The slices `endpoints` mirror as, without names (made with `generateName`).
pub fn mirror(endpoints: &Endpoints) -> Vec<EndpointSlice> {
    let name = endpoints.name_any();
    let mut labels = endpoints.labels().clone();
    labels.insert(SERVICE_NAME_LABEL.to_owned(), name.clone());
    labels.insert(MANAGED_BY_LABEL.to_owned(), MIRRORING.to_owned());
    let mut annotations = endpoints.annotations().clone();
    annotations.retain(|k, _| !NOT_MIRRORED.contains(&k.as_str()));
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: name.clone(),
        uid: endpoints.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    // Endpoints by (address type, ports), in the order the subsets give them.
    let mut groups: Vec<(Kind, Vec<Endpoint>)> = Vec::new();
    for subset in endpoints.subsets.iter().flatten() {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: p.name.clone(),
                port: Some(p.port),
                protocol: p.protocol.clone().or_else(|| Some("TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset.not_ready_addresses.iter().flatten().map(|a| (a, false));
        for (address, ready) in ready.chain(not_ready) {
            let Some(family) = sp::family(&address.ip) else { continue };
            let key = (family.to_owned(), ports.clone());
            let at = match groups.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    groups.push((key, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[at].1.push(endpoint(address, ready));
        }
    }
    let mut slices = Vec::new();
    for ((address_type, ports), all) in groups {
        for chunk in all.chunks(MAX_ENDPOINTS_PER_SLICE) {
            slices.push(EndpointSlice {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{name}-")),
                    namespace: endpoints.metadata.namespace.clone(),
                    labels: Some(labels.clone()),
                    annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                    owner_references: Some(vec![owner.clone()]),
                    ..ObjectMeta::default()
                },
                address_type: address_type.clone(),
                endpoints: chunk.to_vec(),
                ports: Some(ports.clone()),
            });
        }
    }
    slices
}

/// What a slice holds one kind of: its address type and ports.
type Kind = (String, Vec<EndpointPort>);

fn endpoint(address: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![address.ip.clone()],
        conditions: Some(EndpointConditions { ready: Some(ready), ..Default::default() }),
        hostname: address.hostname.clone(),
        node_name: address.node_name.clone(),
        target_ref: address.target_ref.clone(),
        ..Endpoint::default()
    }
}

/// A write the controller makes.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// A new slice.
    Create(EndpointSlice),
    /// A slice replaced (named, with its resourceVersion).
    Update(EndpointSlice),
    /// A slice deleted, by name.
    Delete(String),
}

/// The writes that bring `existing` slices to `wanted` (unnamed): each wanted slice takes an
/// existing one of its address type and ports, updated where its content differs, or is made;
/// existing ones left over are deleted.
pub fn plan(wanted: Vec<EndpointSlice>, existing: Vec<EndpointSlice>) -> Vec<Step> {
    let mut unused: Vec<EndpointSlice> = existing;
    unused.sort_by_key(|s| s.name_any());
    let mut steps = Vec::new();
    for slice in wanted {
        let same_kind = unused
            .iter()
            .position(|e| e.address_type == slice.address_type && e.ports == slice.ports);
        match same_kind {
            Some(i) => {
                let current = unused.remove(i);
                let same = current.endpoints == slice.endpoints
                    && current.metadata.labels == slice.metadata.labels
                    && current.metadata.annotations == slice.metadata.annotations
                    && current.metadata.owner_references == slice.metadata.owner_references;
                if !same {
                    let mut updated = slice;
                    updated.metadata.name = current.metadata.name.clone();
                    updated.metadata.generate_name = None;
                    updated.metadata.resource_version = current.metadata.resource_version.clone();
                    steps.push(Step::Update(updated));
                }
            }
            None => steps.push(Step::Create(slice)),
        }
    }
    steps.extend(unused.into_iter().map(|s| Step::Delete(s.name_any())));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoints(value: serde_json::Value) -> Endpoints {
        serde_json::from_value(value).unwrap()
    }

    fn service(selector: Option<serde_json::Value>) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"selector": selector}}))
            .unwrap()
    }

    #[test]
    fn hand_written_endpoints_of_a_selectorless_service_are_mirrored() {
        let ep = endpoints(json!({
            "metadata": {"name": "db", "namespace": "shop", "uid": "u1",
                "labels": {"team": "data"},
                "annotations": {"note": "x", "endpoints.kubernetes.io/last-change-trigger-time": "t"}},
            "subsets": [
                {"addresses": [{"ip": "203.0.113.5", "hostname": "a"}, {"ip": "2001:db8::5"}],
                 "notReadyAddresses": [{"ip": "203.0.113.6"}],
                 "ports": [{"name": "pg", "port": 5432}]},
                {"addresses": [{"ip": "203.0.113.7"}], "ports": [{"name": "pg", "port": 5432}]},
            ],
        }));
        assert!(mirrored(&ep, &service(None)));
        assert!(!mirrored(&ep, &service(Some(json!({"app": "db"})))));
        let mut skipped = ep.clone();
        skipped.metadata.labels.as_mut().unwrap().insert(SKIP_MIRROR_LABEL.into(), "true".into());
        assert!(!mirrored(&skipped, &service(None)));

        let slices = mirror(&ep);
        assert_eq!(slices.len(), 2, "one per address family: {slices:#?}");
        let v4 = slices.iter().find(|s| s.address_type == "IPv4").unwrap();
        let shown = serde_json::to_value(v4).unwrap();
        assert_eq!(shown["metadata"]["generateName"], json!("db-"));
        assert_eq!(
            shown["metadata"]["labels"],
            json!({"team": "data", SERVICE_NAME_LABEL: "db", MANAGED_BY_LABEL: MIRRORING})
        );
        assert_eq!(shown["metadata"]["annotations"], json!({"note": "x"}));
        assert_eq!(shown["metadata"]["ownerReferences"][0]["kind"], json!("Endpoints"));
        assert_eq!(shown["metadata"]["ownerReferences"][0]["controller"], json!(true));
        assert_eq!(shown["ports"], json!([{"name": "pg", "port": 5432, "protocol": "TCP"}]));
        assert_eq!(
            shown["endpoints"],
            json!([
                {"addresses": ["203.0.113.5"], "conditions": {"ready": true}, "hostname": "a"},
                {"addresses": ["203.0.113.6"], "conditions": {"ready": false}},
                {"addresses": ["203.0.113.7"], "conditions": {"ready": true}},
            ])
        );
    }

    #[test]
    fn slices_are_reused_by_kind_updated_made_and_deleted() {
        let ep = endpoints(json!({"metadata": {"name": "db", "uid": "u1"},
            "subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]}));
        let wanted = mirror(&ep);
        // Nothing yet: made.
        assert!(matches!(plan(wanted.clone(), vec![])[..], [Step::Create(_)]));
        // Already so: nothing.
        let mut current = wanted[0].clone();
        current.metadata.name = Some("db-abc".into());
        current.metadata.resource_version = Some("7".into());
        assert_eq!(plan(wanted.clone(), vec![current.clone()]), vec![]);
        // Another address: updated in place; a slice of other ports left over: deleted.
        let ep2 = endpoints(json!({"metadata": {"name": "db", "uid": "u1"},
            "subsets": [{"addresses": [{"ip": "10.0.0.2"}], "ports": [{"port": 80}]}]}));
        let mut other = current.clone();
        other.metadata.name = Some("db-old".into());
        other.ports = Some(vec![]);
        let steps = plan(mirror(&ep2), vec![other, current]);
        match &steps[..] {
            [Step::Update(s), Step::Delete(gone)] => {
                assert_eq!(s.metadata.name.as_deref(), Some("db-abc"));
                assert_eq!(s.metadata.resource_version.as_deref(), Some("7"));
                assert_eq!(s.endpoints[0].addresses, ["10.0.0.2"]);
                assert_eq!(gone, "db-old");
            }
            other => panic!("{other:?}"),
        }
        // Nothing wanted: everything goes.
        assert_eq!(
            plan(
                vec![],
                wanted
                    .clone()
                    .into_iter()
                    .map(|mut s| {
                        s.metadata.name = Some("db-x".into());
                        s
                    })
                    .collect()
            ),
            vec![Step::Delete("db-x".into())]
        );
    }
}
