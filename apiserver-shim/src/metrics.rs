//! The resource metrics API, `metrics.k8s.io/v1beta1`, as metrics-server serves it: `pods`
//! (`PodMetrics`, namespaced) and `nodes` (`NodeMetrics`, cluster-scoped), read only (`get`,
//! `list`). A cluster serves it only once it is given a [`Metrics`] source
//! ([`crate::Server::set_metrics`]); without one, discovery does not list the group and its
//! paths are 404, as on a cluster without metrics-server.
//!
//! Here is what the API is made of, with no IO: the source's trait and the usage it gives, the
//! served types, the JSON documents in metrics-server's shapes, and which items a list's
//! selectors keep. `http/metrics.rs` finds the requests and answers them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use carrel_machinery::quantity::Quantity;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::future::BoxFuture;
use serde_json::{json, Map, Value};

use crate::registry::form::Untyped;
use crate::registry::{Strategy, Validate};
use crate::resource::ResourceType;
use crate::selector::{FieldLabels, FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::table;

/// The API group.
pub const GROUP: &str = "metrics.k8s.io";
/// The served version.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of its documents.
const API_VERSION: &str = "metrics.k8s.io/v1beta1";

/// What a container, or a node, uses: each a quantity as the API writes it (`250m`,
/// `3017690n`; `64Mi`, `15116Ki`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    /// CPU, in cores.
    pub cpu: String,
    /// Memory (the working set), in bytes.
    pub memory: String,
}

/// One running container's usage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUsage {
    /// The container's name.
    pub name: String,
    /// What it uses.
    pub usage: Usage,
}

/// A running pod's usage, as a source measured it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    /// The pod's name.
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's labels, which a list's `labelSelector` selects on.
    pub labels: BTreeMap<String, String>,
    /// When the usage was measured (the end of its window).
    pub timestamp: DateTime<Utc>,
    /// How long the usage was measured over.
    pub window: Duration,
    /// Its running containers' usage.
    pub containers: Vec<ContainerUsage>,
}

/// A node's usage, as a source measured it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUsage {
    /// The node's name.
    pub name: String,
    /// The node's labels, which a list's `labelSelector` selects on.
    pub labels: BTreeMap<String, String>,
    /// When the usage was measured (the end of its window).
    pub timestamp: DateTime<Utc>,
    /// How long the usage was measured over.
    pub window: Duration,
    /// What the node uses.
    pub usage: Usage,
}

/// Where a cluster's resource metrics come from: the (simulated) kubelets of a host, or, for a
/// tenant, the host's own metrics read back in the tenant's names. Errors are Kubernetes errors
/// (a source that cannot be read is a 503).
pub trait Metrics: Send + Sync + fmt::Debug {
    /// The usage of the running pods in `namespace`, or in every namespace when `None`. A pod
    /// with no usage measured is left out.
    fn pods(&self, namespace: Option<&str>) -> BoxFuture<'static, ApiResult<Vec<PodUsage>>>;

    /// The usage of the nodes. A node with no usage measured is left out.
    fn nodes(&self) -> BoxFuture<'static, ApiResult<Vec<NodeUsage>>>;
}

/// The two resources of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `pods`: `PodMetrics`, namespaced.
    Pods,
    /// `nodes`: `NodeMetrics`, cluster-scoped.
    Nodes,
}

/// The API's types, as discovery lists them: no singular name (metrics-server gives none), and
/// only `get` and `list`. Each has the plural of the core kind it measures, which is how a GET
/// of a name without metrics finds whether that object exists.
pub static TYPES: &[ResourceType] =
    &[metrics_type("NodeMetrics", "nodes", false), metrics_type("PodMetrics", "pods", true)];

const fn metrics_type(kind: &'static str, plural: &'static str, namespaced: bool) -> ResourceType {
    crate::resource::handled((GROUP, VERSION), kind, plural, namespaced, &["get", "list"], &Columns)
}

impl Resource {
    /// The resource of a type of [`TYPES`].
    pub fn of(rt: &ResourceType) -> Resource {
        if rt.namespaced {
            Resource::Pods
        } else {
            Resource::Nodes
        }
    }

    /// Its type.
    pub fn resource_type(self) -> &'static ResourceType {
        match self {
            Resource::Nodes => &TYPES[0],
            Resource::Pods => &TYPES[1],
        }
    }

    /// The resource metrics-server names in its not-found errors.
    fn not_found_resource(self) -> &'static str {
        match self {
            Resource::Pods => "podmetrics",
            Resource::Nodes => "nodemetrics",
        }
    }

    /// metrics-server's 404 for an object that exists but has no metrics:
    /// `podmetrics.metrics.k8s.io "default/train" not found`, `nodemetrics.metrics.k8s.io "n1"
    /// not found`.
    pub fn no_metrics(self, namespace: Option<&str>, name: &str) -> ApiError {
        let name = match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_owned(),
        };
        ApiError::not_found(GROUP, self.not_found_resource(), &name)
    }

    /// 405 for a verb the API does not serve, in kube-apiserver's words:
    /// `watch is not supported on resources of kind "pods.metrics.k8s.io"`.
    pub fn not_supported(self, verb: &str) -> ApiError {
        let plural = self.resource_type().plural;
        ApiError::method_not_allowed(format!(
            "{verb} is not supported on resources of kind \"{plural}.{GROUP}\""
        ))
    }

    /// `PodMetricsList` or `NodeMetricsList`, with `items` (each already a document).
    pub fn list(self, items: Vec<Value>) -> Value {
        json!({
            "kind": format!("{}List", self.resource_type().kind),
            "apiVersion": API_VERSION,
            "metadata": {},
            "items": items,
        })
    }
}

/// An RFC 3339 time in seconds, as `metav1.Time` is written.
fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A window as `metav1.Duration` writes it (Go's `Duration.String`: `10s`, `15.1s`).
fn window(d: Duration) -> String {
    carrel_machinery::duration::format(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn usage_json(usage: &Usage) -> Value {
    json!({"cpu": usage.cpu, "memory": usage.memory})
}

/// `metadata` of a document: the name, namespace (pods only), the time of the answer as its
/// creation time (metrics-server's), and the labels when there are any.
fn metadata(
    name: &str,
    namespace: Option<&str>,
    labels: &BTreeMap<String, String>,
    now: &DateTime<Utc>,
) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(namespace) = namespace {
        meta.insert("namespace".into(), json!(namespace));
    }
    meta.insert("creationTimestamp".into(), json!(time(now)));
    if !labels.is_empty() {
        meta.insert("labels".into(), json!(labels));
    }
    Value::Object(meta)
}

impl PodUsage {
    /// Its `PodMetrics` document, answered at `now`: with `kind` and `apiVersion` when it is
    /// answered alone (`typed`), without them as an item of a list.
    pub fn document(&self, now: &DateTime<Utc>, typed: bool) -> Value {
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|c| json!({"name": c.name, "usage": usage_json(&c.usage)}))
            .collect();
        let mut doc = Map::new();
        if typed {
            doc.insert("kind".into(), json!("PodMetrics"));
            doc.insert("apiVersion".into(), json!(API_VERSION));
        }
        doc.insert(
            "metadata".into(),
            metadata(&self.name, Some(&self.namespace), &self.labels, now),
        );
        doc.insert("timestamp".into(), json!(time(&self.timestamp)));
        doc.insert("window".into(), json!(window(self.window)));
        doc.insert("containers".into(), Value::Array(containers));
        Value::Object(doc)
    }

    /// The pod's usage: the sum of its containers'.
    pub fn total(&self) -> Usage {
        sum(self.containers.iter().map(|c| &c.usage))
    }
}

impl NodeUsage {
    /// Its `NodeMetrics` document, answered at `now`: with `kind` and `apiVersion` when it is
    /// answered alone (`typed`), without them as an item of a list.
    pub fn document(&self, now: &DateTime<Utc>, typed: bool) -> Value {
        let mut doc = Map::new();
        if typed {
            doc.insert("kind".into(), json!("NodeMetrics"));
            doc.insert("apiVersion".into(), json!(API_VERSION));
        }
        doc.insert("metadata".into(), metadata(&self.name, None, &self.labels, now));
        doc.insert("timestamp".into(), json!(time(&self.timestamp)));
        doc.insert("window".into(), json!(window(self.window)));
        doc.insert("usage".into(), usage_json(&self.usage));
        Value::Object(doc)
    }
}

/// The sum of usages, as `Quantity.Add` sums them (a quantity that does not parse counts as
/// zero).
pub fn sum<'a>(usages: impl IntoIterator<Item = &'a Usage>) -> Usage {
    let (mut cpu, mut memory) = (Quantity::ZERO, Quantity::ZERO);
    for usage in usages {
        cpu.add(&Quantity::parse(&usage.cpu).unwrap_or(Quantity::ZERO));
        memory.add(&Quantity::parse(&usage.memory).unwrap_or(Quantity::ZERO));
    }
    Usage { cpu: cpu.to_string(), memory: memory.to_string() }
}

/// Which items a list keeps: its `labelSelector` on the items' labels, and its `fieldSelector`
/// on `metadata.name` and `metadata.namespace` (the only fields a kind without a field label
/// conversion of its own selects on, as for metrics-server's).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    labels: LabelSelector,
    fields: FieldSelector,
    resource: Option<Resource>,
}

impl Selection {
    /// The selection of a list of `resource` with these query parameters; a selector that does
    /// not parse, or a field that cannot be selected on, is kube-apiserver's 400.
    pub fn parse(
        resource: Resource,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> ApiResult<Selection> {
        let labels = LabelSelector::parse(label_selector.unwrap_or_default())?;
        let fields = FieldSelector::parse(field_selector.unwrap_or_default())?;
        fields.check_supported(field_labels(resource))?;
        Ok(Selection { labels, fields, resource: Some(resource) })
    }

    /// Whether `document` (a `PodMetrics` or `NodeMetrics` of this selection's resource) is
    /// kept.
    pub fn matches(&self, document: &Value) -> bool {
        let Some(resource) = self.resource else { return true };
        self.labels.matches_object(document)
            && self.fields.matches(field_labels(resource), document)
    }
}

fn field_labels(resource: Resource) -> FieldLabels {
    FieldLabels::Default { cluster_scoped: resource == Resource::Nodes }
}

/// Pods' usage as a list answers it: sorted by namespace and name, as metrics-server sorts them.
pub fn sorted_pods(mut pods: Vec<PodUsage>) -> Vec<PodUsage> {
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    pods
}

/// Nodes' usage as a list answers it: sorted by name.
pub fn sorted_nodes(mut nodes: Vec<NodeUsage>) -> Vec<NodeUsage> {
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// The table columns of both types, as metrics-server prints them (`kubectl get
/// pods.metrics.k8s.io`): the name, each resource's usage (a pod's summed over its
/// containers), and the window.
#[derive(Debug)]
pub struct Columns;

impl Validate for Columns {
    type Object = Untyped;
}

impl Strategy for Columns {
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        vec![
            table::definition("Name", "string", "name", "Name of the resource", 0),
            table::definition("cpu", "string", "quantity", "", 0),
            table::definition("memory", "string", "quantity", "", 0),
            table::definition("Window", "string", "duration", "", 0),
        ]
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        let read = |usage: &Value| Usage {
            cpu: usage["cpu"].as_str().unwrap_or("0").to_owned(),
            memory: usage["memory"].as_str().unwrap_or("0").to_owned(),
        };
        let usage = match object["containers"].as_array() {
            Some(containers) => {
                let each: Vec<Usage> = containers.iter().map(|c| read(&c["usage"])).collect();
                sum(&each)
            }
            None => read(&object["usage"]),
        };
        vec![
            table::name_cell(object),
            json!(usage.cpu),
            json!(usage.memory),
            object["window"].clone(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("a time").with_timezone(&Utc)
    }

    fn usage(cpu: &str, memory: &str) -> Usage {
        Usage { cpu: cpu.to_owned(), memory: memory.to_owned() }
    }

    fn pod(namespace: &str, name: &str, labels: &[(&str, &str)]) -> PodUsage {
        PodUsage {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            timestamp: at("2025-03-01T10:00:00Z"),
            window: Duration::from_millis(15_100),
            containers: vec![
                ContainerUsage { name: "main".into(), usage: usage("3017690n", "15116Ki") },
                ContainerUsage { name: "sidecar".into(), usage: usage("250m", "64Mi") },
            ],
        }
    }

    #[test]
    fn documents_have_metrics_servers_shapes() {
        let now = at("2025-03-01T10:00:07Z");
        assert_eq!(
            pod("default", "train", &[("app", "train")]).document(&now, true),
            json!({
                "kind": "PodMetrics",
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {
                    "name": "train",
                    "namespace": "default",
                    "creationTimestamp": "2025-03-01T10:00:07Z",
                    "labels": {"app": "train"},
                },
                "timestamp": "2025-03-01T10:00:00Z",
                "window": "15.1s",
                "containers": [
                    {"name": "main", "usage": {"cpu": "3017690n", "memory": "15116Ki"}},
                    {"name": "sidecar", "usage": {"cpu": "250m", "memory": "64Mi"}},
                ],
            })
        );
        // An item of a list has no kind, and no labels where the pod has none.
        let item = pod("default", "bare", &[]).document(&now, false);
        assert!(item.get("kind").is_none() && item.get("apiVersion").is_none(), "{item}");
        assert!(item["metadata"].get("labels").is_none(), "{item}");
        assert_eq!(
            Resource::Pods.list(vec![item.clone()]),
            json!({
                "kind": "PodMetricsList",
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {},
                "items": [item],
            })
        );
        let node = NodeUsage {
            name: "n1".into(),
            labels: BTreeMap::from([("kubernetes.io/hostname".into(), "n1".into())]),
            timestamp: at("2025-03-01T10:00:00Z"),
            window: Duration::from_secs(10),
            usage: usage("350m", "320Mi"),
        };
        assert_eq!(
            node.document(&now, true),
            json!({
                "kind": "NodeMetrics",
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {
                    "name": "n1",
                    "creationTimestamp": "2025-03-01T10:00:07Z",
                    "labels": {"kubernetes.io/hostname": "n1"},
                },
                "timestamp": "2025-03-01T10:00:00Z",
                "window": "10s",
                "usage": {"cpu": "350m", "memory": "320Mi"},
            })
        );
        assert_eq!(Resource::Nodes.list(Vec::new())["kind"], "NodeMetricsList");
    }

    #[test]
    fn usages_sum_as_quantities() {
        let total = pod("default", "train", &[]).total();
        assert_eq!(total, usage("253017690n", "80652Ki"));
        assert_eq!(sum([&usage("100m", "256Mi"), &usage("250m", "64Mi")]), usage("350m", "320Mi"));
        assert_eq!(sum([]), usage("0", "0"));
    }

    #[test]
    fn selections_keep_what_their_selectors_select_and_refuse_bad_ones() {
        let now = at("2025-03-01T10:00:07Z");
        let train = pod("default", "train", &[("app", "train")]).document(&now, false);
        let serve = pod("serving", "serve", &[("app", "serve")]).document(&now, false);
        let keeps = |label: Option<&str>, field: Option<&str>| -> Vec<bool> {
            let selection = Selection::parse(Resource::Pods, label, field).expect("parses");
            [&train, &serve].iter().map(|d| selection.matches(d)).collect()
        };
        assert_eq!(keeps(None, None), [true, true]);
        assert_eq!(keeps(Some("app=train"), None), [true, false]);
        assert_eq!(keeps(Some("app in (serve,other)"), None), [false, true]);
        assert_eq!(keeps(Some("!app"), None), [false, false]);
        assert_eq!(keeps(None, Some("metadata.name=serve")), [false, true]);
        assert_eq!(keeps(None, Some("metadata.namespace!=serving")), [true, false]);
        assert_eq!(keeps(Some("app=train"), Some("metadata.name=serve")), [false, false]);

        let err = Selection::parse(Resource::Pods, Some("app=a b"), None).expect_err("bad labels");
        assert_eq!(err.code(), 400);
        assert_eq!(err.message(), "found 'b', expected: ',' or 'end of string'");
        let err = Selection::parse(Resource::Pods, None, Some("spec.nodeName=n1"))
            .expect_err("not a metadata field");
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.message(),
            "\"spec.nodeName\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        let err = Selection::parse(Resource::Nodes, None, Some("name")).expect_err("no operator");
        assert_eq!(err.code(), 400);

        // Nodes have no namespace: `metadata.namespace` reads as empty.
        let node = NodeUsage {
            name: "n1".into(),
            labels: BTreeMap::new(),
            timestamp: at("2025-03-01T10:00:00Z"),
            window: Duration::from_secs(10),
            usage: usage("1", "1Gi"),
        }
        .document(&now, false);
        let selection =
            Selection::parse(Resource::Nodes, None, Some("metadata.namespace=")).expect("parses");
        assert!(selection.matches(&node));
    }

    #[test]
    fn not_found_and_refused_verbs_read_as_metrics_server_and_kube_apiserver_say_them() {
        let err = Resource::Pods.no_metrics(Some("default"), "train");
        assert_eq!(err.code(), 404);
        assert_eq!(err.message(), "podmetrics.metrics.k8s.io \"default/train\" not found");
        let status = err.to_status();
        assert_eq!(status["details"]["group"], "metrics.k8s.io");
        assert_eq!(status["details"]["kind"], "podmetrics");
        let err = Resource::Nodes.no_metrics(None, "n1");
        assert_eq!(err.message(), "nodemetrics.metrics.k8s.io \"n1\" not found");
        let err = Resource::Pods.not_supported("watch");
        assert_eq!(err.code(), 405);
        assert_eq!(err.reason(), "MethodNotAllowed");
        assert_eq!(
            err.message(),
            "watch is not supported on resources of kind \"pods.metrics.k8s.io\""
        );
    }

    #[test]
    fn lists_are_sorted_as_metrics_server_sorts_them() {
        let pods = vec![pod("b", "a", &[]), pod("a", "z", &[]), pod("a", "b", &[])];
        let names: Vec<(String, String)> =
            sorted_pods(pods).into_iter().map(|p| (p.namespace, p.name)).collect();
        assert_eq!(
            names,
            [("a".into(), "b".into()), ("a".into(), "z".into()), ("b".into(), "a".into())]
        );
    }

    #[test]
    fn tables_show_usage_summed_per_pod_and_the_window() {
        let now = at("2025-03-01T10:00:07Z");
        let rt = Resource::Pods.resource_type();
        let document = pod("default", "train", &[]).document(&now, false);
        let t = crate::http::table::table(
            rt,
            &[document],
            json!({}),
            "v1",
            crate::http::table::TableOptions::default(),
        );
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["Name", "cpu", "memory", "Window"]);
        assert_eq!(t["rows"][0]["cells"], json!(["train", "253017690n", "80652Ki", "15.1s"]));
    }

    #[test]
    fn each_type_is_found_by_its_resource() {
        for resource in [Resource::Pods, Resource::Nodes] {
            assert_eq!(Resource::of(resource.resource_type()), resource);
        }
        assert_eq!(Resource::Pods.resource_type().kind, "PodMetrics");
        assert!(Resource::Pods.resource_type().namespaced);
        assert_eq!(Resource::Nodes.resource_type().kind, "NodeMetrics");
        assert_eq!(Resource::Nodes.resource_type().verbs, ["get", "list"]);
    }
}
