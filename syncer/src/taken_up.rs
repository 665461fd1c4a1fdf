//! Which tenant pods a syncer has taken up, observed through the APIs: a tenant pod is taken up
//! once its syncer has made its host pod (the host pod shows up) or decided about it without one
//! (the tenant pod shows a `PodScheduled` condition, a node or a final phase), or once it is
//! deleted. [`watch`] reports each such pod once while it exists. What the syncer never shows
//! through the APIs (a failed attempt, a host name taken) is never reported.
//!
//! `carrel up` runs it beside each tenant's syncer and gives the pod's room in its intake window
//! back on each report; it reaches both APIs as a client, as the syncer does, and is shown the
//! host pods by the host side the syncers share ([`watch_shared`]).

use std::collections::HashSet;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;

use crate::{host_names, HostWatch};

/// Whether the syncer has shown on tenant pod `pod` that it took it up.
fn shows_taken_up(pod: &Pod) -> bool {
    let bound =
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let status = pod.status.as_ref();
    let decided = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"));
    let finished = matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    bound || decided || finished
}

/// The pods reported, by (namespace, name), so each is reported once while it exists.
#[derive(Debug, Default)]
struct Reported(HashSet<(String, String)>);

impl Reported {
    fn settle(&mut self, settled: &impl Fn(&str, &str), namespace: &str, name: &str) {
        if self.0.insert((namespace.to_owned(), name.to_owned())) {
            settled(namespace, name);
        }
    }
}

/// Call `settled` with the namespace and name of each of `tenant`'s pods as its syncer takes it
/// up, watching its pods (through `tenant_client`) and its host pods in `host_namespace`
/// (through `host`). Runs until dropped; watch errors are retried with backoff.
pub async fn watch(
    tenant: String,
    tenant_client: kube::Client,
    host: kube::Client,
    host_namespace: String,
    settled: impl Fn(&str, &str),
) {
    let host_pods = watcher(
        Api::<Pod>::namespaced(host, &host_namespace),
        watcher::Config::default().labels(&host_names::host_selector(&tenant)),
    )
    .default_backoff();
    follow(tenant, tenant_client, host_pods, settled).await;
}

/// [`watch`], shown the host pods by the host side `host` that the syncers share rather than by
/// a watch of its own. Call it within a Tokio runtime.
pub async fn watch_shared(
    tenant: String,
    tenant_client: kube::Client,
    host: HostWatch,
    host_namespace: String,
    settled: impl Fn(&str, &str),
) {
    let host_pods = host.pods(&tenant, &host_namespace).map(Ok::<_, watcher::Error>);
    follow(tenant, tenant_client, host_pods, settled).await;
}

/// Report the tenant pods taken up, from the tenant's pods and `host_pods`, its host pods.
async fn follow(
    tenant: String,
    tenant_client: kube::Client,
    host_pods: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    settled: impl Fn(&str, &str),
) {
    let tenant_pods = watcher(Api::<Pod>::all(tenant_client), watcher::Config::default())
        .default_backoff()
        .map(|e| (true, e));
    let host_pods = host_pods.map(|e| (false, e));
    let mut events = std::pin::pin!(futures::stream::select(tenant_pods, host_pods));
    let mut reported = Reported::default();
    while let Some((in_tenant, event)) = events.next().await {
        let pod = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => p,
            Ok(watcher::Event::Delete(p)) if in_tenant => {
                let (Some(namespace), Some(name)) = (&p.metadata.namespace, &p.metadata.name)
                else {
                    continue;
                };
                reported.settle(&settled, namespace, name);
                reported.0.remove(&(namespace.clone(), name.clone()));
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(%tenant, error = %e, "watching pods for the intake window");
                continue;
            }
        };
        let key = if in_tenant {
            shows_taken_up(&pod)
                .then(|| Some((pod.metadata.namespace.clone()?, pod.metadata.name.clone()?)))
                .flatten()
        } else {
            pod.metadata.annotations.as_ref().and_then(|a| {
                Some((
                    a.get(host_names::ANNOTATION_NAMESPACE)?.clone(),
                    a.get(host_names::ANNOTATION_NAME)?.clone(),
                ))
            })
        };
        if let Some((namespace, name)) = key {
            reported.settle(&settled, &namespace, &name);
        }
    }
}
