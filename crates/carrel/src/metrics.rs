//! The resource metrics (`metrics.k8s.io`, `kubectl top`) of `carrel up`'s clusters.
//!
//! The host's come from its simulated kubelets ([`SimMetrics`]: [`carrel_sim::usage`] over the
//! host's pods). A tenant's come from the host's own metrics API, read through a `kube::Client`
//! as from any host (metrics-server on a real one), and shown in the tenant's names
//! ([`TenantMetrics`]):
//!
//! - a pod's metrics are its host pod's (the host pod `host_names::host_pod` names in the
//!   tenant's host namespace), with the tenant pod's name, namespace and labels; a host pod's
//!   metrics with no tenant pod that maps to it are never shown;
//! - a node's are the sum of the tenant's own pods' on it, not the host node's: a tenant sees
//!   its own load on a node and nothing of another tenant's (nor of the node's system), as its
//!   virtual node shows its own quota and not the node's whole. A virtual node none of its
//!   running pods is on has no metrics.
//!
//! A host whose metrics cannot be read is a 503 with the reason.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use carrel_apiserver::api::{ListParams as StoreListParams, Target};
use carrel_apiserver::metrics::{self, ContainerUsage, Metrics, NodeUsage, PodUsage, Usage};
use carrel_apiserver::{Api, ApiError, ApiResult};
use carrel_syncer::host_names;

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

/// One host pod's metrics, as the host's metrics API answered them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostPodMetrics {
    timestamp: DateTime<Utc>,
    window: Duration,
    containers: Vec<ContainerUsage>,
}

impl HostPodMetrics {
    /// A `PodMetrics` of the host's, by its name: `None` for one without a name.
    fn read(item: &DynamicObject) -> Option<(String, HostPodMetrics)> {
        let name = item.metadata.name.clone()?;
        let data = &item.data;
        let timestamp = data["timestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
        let window = data["window"]
            .as_str()
            .and_then(|w| carrel_machinery::duration::parse(w).ok())
            .and_then(|nanos| u64::try_from(nanos).ok())
            .map_or(Duration::ZERO, Duration::from_nanos);
        let containers = data["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let quantity = |resource: &str| c["usage"][resource].as_str().unwrap_or("0");
                Some(ContainerUsage {
                    name: c["name"].as_str()?.to_owned(),
                    usage: Usage {
                        cpu: quantity("cpu").to_owned(),
                        memory: quantity("memory").to_owned(),
                    },
                })
            })
            .collect();
        Some((name, HostPodMetrics { timestamp, window, containers }))
    }
}

/// A tenant's resource metrics, from the host's metrics API, in the tenant's names (see the
/// module's documentation for what a tenant is shown).
pub struct TenantMetrics {
    /// The host's API.
    host: kube::Client,
    /// The tenant's namespace on the host.
    host_namespace: String,
    /// The tenant's own API, for its pods and virtual nodes; not kept open by this.
    tenant: Weak<Api>,
}

impl std::fmt::Debug for TenantMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantMetrics").field("host_namespace", &self.host_namespace).finish()
    }
}

impl TenantMetrics {
    /// The metrics of the tenant whose API is `tenant` and whose host namespace is
    /// `host_namespace`, read from the host through `host`.
    pub fn new(host: kube::Client, host_namespace: String, tenant: &Arc<Api>) -> TenantMetrics {
        TenantMetrics { host, host_namespace, tenant: Arc::downgrade(tenant) }
    }

    /// What the tenant's own API holds of the core resource `plural`.
    fn tenant_list(
        &self,
        plural: &'static str,
        namespace: Option<String>,
    ) -> impl std::future::Future<Output = ApiResult<Vec<Value>>> + Send + 'static {
        let tenant = self.tenant.upgrade();
        async move {
            let tenant = tenant.ok_or_else(|| ApiError::unavailable("the cluster is closing"))?;
            list(tenant, plural, namespace).await
        }
    }

    /// The host's metrics of the pods in the tenant's host namespace, by host pod name.
    fn host_metrics(
        &self,
    ) -> impl std::future::Future<Output = ApiResult<HashMap<String, HostPodMetrics>>> + Send + 'static
    {
        let gvk = GroupVersionKind::gvk(metrics::GROUP, metrics::VERSION, "PodMetrics");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "pods");
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(self.host.clone(), &self.host_namespace, &resource);
        async move {
            let listed = api.list(&ListParams::default()).await.map_err(|e| {
                tracing::debug!(error = %e, "reading the host's resource metrics");
                let why = match e {
                    kube::Error::Api(status) => status.message,
                    other => other.to_string(),
                };
                ApiError::unavailable(format!(
                    "the host's resource metrics (metrics.k8s.io) could not be read: {why}"
                ))
            })?;
            Ok(listed.items.iter().filter_map(HostPodMetrics::read).collect())
        }
    }
}

/// The tenant's pods of `pods` that have host metrics in `host`, as the tenant sees them (its
/// pod's name, namespace and labels, its host pod's usage), each with the node it is bound to.
/// A host pod's metrics that no tenant pod maps to are left out.
pub(crate) fn joined(
    pods: &[Value],
    host: &HashMap<String, HostPodMetrics>,
) -> Vec<(Option<String>, PodUsage)> {
    pods.iter()
        .filter_map(|pod| {
            let (namespace, name) = (meta(pod, "namespace"), meta(pod, "name"));
            let found = host.get(&host_names::host_pod(namespace, name))?;
            let node = pod["spec"]["nodeName"].as_str().map(str::to_owned);
            let usage = PodUsage {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                labels: labels(pod),
                timestamp: found.timestamp,
                window: found.window,
                containers: found.containers.clone(),
            };
            Some((node, usage))
        })
        .collect()
}

/// The tenant's nodes of `nodes` (its virtual nodes) that its pods of `pods` run on, each with
/// the sum of those pods' usage: the tenant's own load there, and no one else's.
pub(crate) fn node_sums(nodes: &[Value], pods: &[(Option<String>, PodUsage)]) -> Vec<NodeUsage> {
    nodes
        .iter()
        .filter_map(|node| {
            let name = meta(node, "name");
            let on_node: Vec<&PodUsage> = pods
                .iter()
                .filter(|(bound, _)| bound.as_deref() == Some(name))
                .map(|(_, usage)| usage)
                .collect();
            let latest = on_node.iter().max_by_key(|p| p.timestamp)?;
            let totals: Vec<Usage> = on_node.iter().map(|p| p.total()).collect();
            Some(NodeUsage {
                name: name.to_owned(),
                labels: labels(node),
                timestamp: latest.timestamp,
                window: latest.window,
                usage: metrics::sum(&totals),
            })
        })
        .collect()
}

impl Metrics for TenantMetrics {
    fn pods(&self, namespace: Option<&str>) -> BoxFuture<'static, ApiResult<Vec<PodUsage>>> {
        let pods = self.tenant_list("pods", namespace.map(str::to_owned));
        let host = self.host_metrics();
        Box::pin(async move {
            let (pods, host) = (pods.await?, host.await?);
            Ok(joined(&pods, &host).into_iter().map(|(_, usage)| usage).collect())
        })
    }

    fn nodes(&self) -> BoxFuture<'static, ApiResult<Vec<NodeUsage>>> {
        let nodes = self.tenant_list("nodes", None);
        let pods = self.tenant_list("pods", None);
        let host = self.host_metrics();
        Box::pin(async move {
            let (nodes, pods, host) = (nodes.await?, pods.await?, host.await?);
            Ok(node_sums(&nodes, &joined(&pods, &host)))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(namespace: &str, name: &str, node: Option<&str>, labels: Value) -> Value {
        json!({
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"nodeName": node},
        })
    }

    fn host_metric(at: &str, cpu: &str, memory: &str) -> HostPodMetrics {
        HostPodMetrics {
            timestamp: DateTime::parse_from_rfc3339(at).expect("a time").with_timezone(&Utc),
            window: Duration::from_secs(10),
            containers: vec![ContainerUsage {
                name: "main".into(),
                usage: Usage { cpu: cpu.into(), memory: memory.into() },
            }],
        }
    }

    #[test]
    fn a_tenant_sees_its_pods_host_metrics_in_its_own_names_and_nothing_else() {
        let pods = [
            pod("default", "train", Some("n1"), json!({"app": "train"})),
            pod("default", "eval", Some("n1"), json!({})),
            pod("serving", "train", None, json!({})),
        ];
        let host = HashMap::from([
            (
                host_names::host_pod("default", "train"),
                host_metric("2025-03-01T10:00:00Z", "250m", "64Mi"),
            ),
            // A host pod no tenant pod maps to (one gone, or a name the tenant does not have).
            (
                host_names::host_pod("default", "gone"),
                host_metric("2025-03-01T10:00:00Z", "8", "1Gi"),
            ),
            ("train".to_owned(), host_metric("2025-03-01T10:00:00Z", "8", "1Gi")),
            (
                host_names::host_pod("serving", "train"),
                host_metric("2025-03-01T10:00:05Z", "1m", "4Mi"),
            ),
        ]);
        let shown = joined(&pods, &host);
        let names: Vec<(Option<&str>, &str, &str)> = shown
            .iter()
            .map(|(node, p)| (node.as_deref(), p.namespace.as_str(), p.name.as_str()))
            .collect();
        // `eval` has no metrics on the host yet; `gone` and the host's own `train` are dropped.
        assert_eq!(names, [(Some("n1"), "default", "train"), (None, "serving", "train")]);
        let train = &shown[0].1;
        assert_eq!(train.labels, BTreeMap::from([("app".to_owned(), "train".to_owned())]));
        assert_eq!(train.containers[0].usage, Usage { cpu: "250m".into(), memory: "64Mi".into() });
        // Labels are the tenant pod's own, never the host pod's.
        assert!(shown[1].1.labels.is_empty());
    }

    #[test]
    fn a_tenants_node_shows_the_sum_of_its_own_pods_only() {
        let pods = [
            pod("default", "a", Some("n1"), json!({})),
            pod("default", "b", Some("n1"), json!({})),
            pod("default", "c", Some("n2"), json!({})),
            pod("default", "d", None, json!({})),
        ];
        let host = HashMap::from([
            (
                host_names::host_pod("default", "a"),
                host_metric("2025-03-01T10:00:00Z", "250m", "64Mi"),
            ),
            (
                host_names::host_pod("default", "b"),
                host_metric("2025-03-01T10:00:05Z", "100m", "128Mi"),
            ),
            (host_names::host_pod("default", "d"), host_metric("2025-03-01T10:00:05Z", "1", "1Gi")),
        ]);
        let nodes = [
            json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}}),
            json!({"metadata": {"name": "n2"}}),
            json!({"metadata": {"name": "n3"}}),
        ];
        let sums = node_sums(&nodes, &joined(&pods, &host));
        // n2's pod has no metrics yet and n3 runs none of the tenant's pods: neither is shown.
        assert_eq!(sums.len(), 1, "{sums:?}");
        let n1 = &sums[0];
        assert_eq!(n1.name, "n1");
        assert_eq!(n1.usage, Usage { cpu: "350m".into(), memory: "192Mi".into() });
        assert_eq!(n1.labels["kubernetes.io/hostname"], "n1");
        assert_eq!(n1.timestamp.to_rfc3339(), "2025-03-01T10:00:05+00:00");
    }

    #[test]
    fn a_host_pod_metric_is_read_as_the_host_wrote_it() {
        let item: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "train-x-default", "namespace": "carrel-team-a",
                         "labels": {"carrel.dev/tenant-namespace": "default"}},
            "timestamp": "2025-03-01T10:00:00Z",
            "window": "15.1s",
            "containers": [{"name": "main", "usage": {"cpu": "3017690n", "memory": "15116Ki"}}],
        }))
        .expect("a PodMetrics");
        let (name, read) = HostPodMetrics::read(&item).expect("read");
        assert_eq!(name, "train-x-default");
        assert_eq!(read.window, Duration::from_millis(15_100));
        assert_eq!(read.timestamp.to_rfc3339(), "2025-03-01T10:00:00+00:00");
        assert_eq!(
            read.containers,
            [ContainerUsage {
                name: "main".into(),
                usage: Usage { cpu: "3017690n".into(), memory: "15116Ki".into() },
            }]
        );
    }

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
