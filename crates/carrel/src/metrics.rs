//! The resource metrics (`metrics.k8s.io`, `kubectl top`) of `carrel up`'s host: from its
//! simulated kubelets ([`SimMetrics`]: [`carrel_sim::usage`] over the host's pods).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::Value;

use carrel_apiserver::api::{ListParams as StoreListParams, Target};
use carrel_apiserver::metrics::{ContainerUsage, Metrics, NodeUsage, PodUsage, Usage};
use carrel_apiserver::{Api, ApiError, ApiResult};

/// The items of the core resource `plural` of `api` in `namespace` (every namespace when
/// `None`), read off the async workers.
async fn list(
    api: Arc<Api>,
    plural: &'static str,
    namespace: Option<String>,
) -> ApiResult<Vec<Value>> {
    let rt = carrel_apiserver::resource::built_in("", plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
    let listed = tokio::task::spawn_blocking(move || {
        api.list(&Target { rt, namespace }, &StoreListParams::default())
    })
    .await
    .map_err(|e| ApiError::internal(format!("listing {plural}: {e}")))??;
    match listed {
        Value::Object(mut list) => match list.remove("items") {
            Some(Value::Array(items)) => Ok(items),
            _ => Ok(Vec::new()),
        },
        _ => Ok(Vec::new()),
    }
}

fn meta<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

/// An object's labels.
fn labels(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// A simulated usage as the API writes it.
fn written(usage: &carrel_sim::usage::Usage) -> Usage {
    Usage { cpu: usage.cpu.to_string(), memory: usage.memory.to_string() }
}

/// The host's resource metrics, from its simulated kubelets: what [`carrel_sim::usage`] says
/// the host's pods and nodes use, read at each request.
#[derive(Debug)]
pub struct SimMetrics {
    host: Arc<Api>,
}

impl SimMetrics {
    /// The metrics of the pods and nodes of `host`.
    pub fn new(host: Arc<Api>) -> SimMetrics {
        SimMetrics { host }
    }
}

impl Metrics for SimMetrics {
    fn pods(&self, namespace: Option<&str>) -> BoxFuture<'static, ApiResult<Vec<PodUsage>>> {
        let (host, namespace) = (self.host.clone(), namespace.map(str::to_owned));
        Box::pin(async move {
            let pods = list(host, "pods", namespace).await?;
            let now = Utc::now();
            Ok(pods.iter().filter_map(|pod| sim_pod(pod, now)).collect())
        })
    }

    fn nodes(&self) -> BoxFuture<'static, ApiResult<Vec<NodeUsage>>> {
        let host = self.host.clone();
        Box::pin(async move {
            let nodes = list(host.clone(), "nodes", None).await?;
            let pods = list(host, "pods", None).await?;
            let now = Utc::now();
            Ok(nodes
                .iter()
                .map(|node| {
                    let name = meta(node, "name");
                    NodeUsage {
                        name: name.to_owned(),
                        labels: labels(node),
                        timestamp: now,
                        window: carrel_sim::usage::WINDOW,
                        usage: written(&carrel_sim::usage::node_usage(name, &pods)),
                    }
                })
                .collect())
        })
    }
}

/// A simulated pod's usage at `now`, if it has any.
fn sim_pod(pod: &Value, now: DateTime<Utc>) -> Option<PodUsage> {
    let containers = carrel_sim::usage::pod_usage(pod)?;
    Some(PodUsage {
        name: meta(pod, "name").to_owned(),
        namespace: meta(pod, "namespace").to_owned(),
        labels: labels(pod),
        timestamp: now,
        window: carrel_sim::usage::WINDOW,
        containers: containers
            .iter()
            .map(|c| ContainerUsage { name: c.name.clone(), usage: written(&c.usage) })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_simulated_host_shows_running_pods_and_each_nodes_load() {
        let running = json!({
            "metadata": {"name": "train-x-default", "namespace": "carrel-team-a",
                         "labels": {"label.carrel.dev/app": "train"},
                         "annotations": {"sim.carrel.dev/cpu-usage": "250m",
                                         "sim.carrel.dev/memory-usage": "64Mi"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "main", "state": {"running": {"startedAt": "2025-03-01T10:00:00Z"}}}]},
        });
        let now = Utc::now();
        let usage = sim_pod(&running, now).expect("running");
        assert_eq!(usage.namespace, "carrel-team-a");
        assert_eq!(usage.labels["label.carrel.dev/app"], "train");
        assert_eq!(usage.containers[0].usage, Usage { cpu: "250m".into(), memory: "64Mi".into() });
        let mut pending = running.clone();
        pending["status"] = json!({"phase": "Pending"});
        assert_eq!(sim_pod(&pending, now), None);
    }
}
