//! The EndpointSlice controller (kube-controller-manager's `endpointslice` controller,
//! `pkg/controller/endpointslice`): for each Service with a selector, EndpointSlices listing the
//! pods it selects.
//!
//! A sync reads the Service, the pods of its namespace it selects, the zones of their nodes and
//! the slices labelled `kubernetes.io/service-name=<service>` and
//! `endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io`; `decide.rs` says
//! what to write. Each slice is owned by its Service (controller, blocking its owner's deletion),
//! so the garbage collector deletes the slices of a deleted Service. Selectorless and
//! ExternalName Services are left alone (their slices are the user's). A slice that is written
//! carries `endpoints.kubernetes.io/last-change-trigger-time`.
//!
//! The controller is woken by its Services, by the slices they own, and by the pods a Service
//! selects now or selected when the pod was last seen ([`crate::service_pods::PodIndex`]).
//!
//! Where it differs: no topology hints or traffic distribution; no `FailedToUpdateEndpointSlices`
//! events; the trigger time is the latest change of the Service or its pods' readiness rather
//! than the earliest change not yet written.

pub mod decide;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::service_pods::{self as sp, PodIndex};
use crate::{Context, Error};

pub use decide::{decide, Facts, Step, MANAGED_BY, MANAGED_BY_LABEL, SERVICE_NAME_LABEL};

struct Shared {
    client: kube::Client,
    index: Arc<PodIndex>,
}

/// Run the EndpointSlice controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let controller =
        Controller::new(Api::<Service>::all(client.clone()), watcher::Config::default());
    let index = Arc::new(PodIndex::new(controller.store()));
    let shared = Arc::new(Shared { client: client.clone(), index: index.clone() });
    let managed = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    controller
        .owns(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default().labels(&managed),
        )
        .watches(Api::<Pod>::all(client), watcher::Config::default(), move |pod| {
            index.services_of(&pod)
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

fn error_policy(service: Arc<Service>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(service = %service.name_any(), %error, "endpoint slice sync failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(service: Arc<Service>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version; a deleted Service's slices are the garbage collector's.
    let Some(service) = services.get_opt(&service.name_any()).await? else {
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
    let zones = zones(&shared.client, &pods).await?;
    let slices_api: Api<EndpointSlice> = Api::namespaced(shared.client.clone(), &namespace);
    let selector =
        format!("{SERVICE_NAME_LABEL}={},{MANAGED_BY_LABEL}={MANAGED_BY}", service.name_any());
    let slices = slices_api.list(&ListParams::default().labels(&selector)).await?.items;

    let steps = decide(&Facts { service: &service, pods: &pods, zones: &zones, slices: &slices });
    let trigger = sp::trigger_time(&service, &pods);
    for step in steps {
        match step {
            Step::Create(slice) => {
                slices_api.create(&PostParams::default(), &stamped(slice, &trigger)).await?;
            }
            Step::Update(slice) => {
                let name = slice.name_any();
                slices_api
                    .replace(&name, &PostParams::default(), &stamped(slice, &trigger))
                    .await?;
            }
            Step::Delete(name) => match slices_api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            },
        }
    }
    Ok(Action::await_change())
}

/// `slice` with the trigger-time annotation (or without one, when there is no time).
fn stamped(mut slice: EndpointSlice, trigger: &Option<Time>) -> EndpointSlice {
    let annotations = slice.metadata.annotations.get_or_insert_with(BTreeMap::new);
    match trigger {
        Some(time) => {
            annotations.insert(sp::TRIGGER_TIME_ANNOTATION.into(), sp::format_time(time));
        }
        None => {
            annotations.remove(sp::TRIGGER_TIME_ANNOTATION);
        }
    }
    slice
}

/// The zones of the nodes `pods` run on (read only when one of them has a node).
async fn zones(client: &kube::Client, pods: &[&Pod]) -> Result<BTreeMap<String, String>, Error> {
    let nodes: HashSet<&str> =
        pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.as_deref()).collect();
    if nodes.is_empty() {
        return Ok(BTreeMap::new());
    }
    let listed = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?.items;
    Ok(listed
        .into_iter()
        .filter(|n| n.metadata.name.as_deref().is_some_and(|name| nodes.contains(name)))
        .filter_map(|n| {
            let zone = n.labels().get(decide::ZONE_LABEL)?.clone();
            Some((n.metadata.name?, zone))
        })
        .collect())
}
