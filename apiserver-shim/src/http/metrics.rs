//! The resource metrics API (`metrics.k8s.io/v1beta1`) of a cluster given a [`Metrics`] source:
//! request info finds its requests ([`MetricsRequest::of`]) only on such a cluster, the
//! authorization layer checks them as RBAC checks any resource request
//! ([`MetricsRequest::attributes`]: `get` or `list` on `pods` or `nodes` in `metrics.k8s.io`),
//! and [`answer`] answers them from the source, as metrics-server does: a `PodMetrics` or
//! `NodeMetrics`, or a list of them that its selectors kept, sorted; 404 for a name with no
//! metrics; 405 for `watch` and every write.

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use chrono::Utc;
use serde_json::{json, Value};

use crate::access;
use crate::api::Target;
use crate::auth::UserInfo;
use crate::metrics::{self, Metrics, Resource, Selection};
use crate::rbac::Attributes;
use crate::status::{ApiError, ApiResult};

use super::request::{accept, include_object, Query};
use super::request_info::path_of;
use super::response::{json_response, respond_object};
use super::table::{self, TableOptions};
use super::{blocking, Server};

/// A request for the resource metrics API.
#[derive(Clone, Debug)]
pub(super) struct MetricsRequest {
    resource: Resource,
    /// The namespace of a pods request that names one.
    namespace: Option<String>,
    /// The object's name, for a GET of one.
    name: Option<String>,
    /// Whether it asks to watch (`watch=true`).
    watch: bool,
}

impl MetricsRequest {
    /// Whether `group` and `version` are the API's.
    pub(super) fn serves(group: &str, version: &str) -> bool {
        group == metrics::GROUP && version == metrics::VERSION
    }

    /// The request `segments` (after `/apis/metrics.k8s.io/v1beta1`) name with `query`: 404
    /// for a path the API does not serve (a subresource, or the `/watch/` paths, which
    /// metrics-server does not have either).
    pub(super) fn of(segments: &[&str], query: &Query) -> ApiResult<MetricsRequest> {
        let lookup = |plural: &str| metrics::TYPES.iter().find(|t| t.plural == plural).cloned();
        let path = path_of(metrics::GROUP, segments, lookup)?;
        if path.subresource.is_some() || path.legacy_watch {
            return Err(ApiError::no_route());
        }
        Ok(MetricsRequest {
            resource: Resource::of(&path.rt),
            namespace: path.namespace,
            name: path.name,
            watch: query.flag("watch"),
        })
    }

    /// The request's verb, as RBAC names it.
    fn verb(&self, method: &Method) -> &'static str {
        access::verb(method, self.name.is_some(), self.watch)
    }

    /// What `user` must be allowed: the verb on the resource, in its namespace, by its name.
    pub(super) fn attributes(&self, user: UserInfo, method: &Method) -> Attributes {
        let rt = self.resource.resource_type();
        let mut attributes = Attributes::resource(user, self.verb(method), rt.group, rt.plural);
        attributes.api_version = rt.version.to_owned();
        attributes.namespace = self.namespace.clone().unwrap_or_default();
        attributes.name = self.name.clone().unwrap_or_default();
        attributes
    }
}

/// Answer an authorized metrics request from `source`.
pub(super) async fn answer(
    server: &Server,
    source: &Arc<dyn Metrics>,
    request: MetricsRequest,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let verb = request.verb(method);
    if !matches!(verb, "get" | "list") {
        return Err(request.resource.not_supported(verb));
    }
    let resource = request.resource;
    let rt = resource.resource_type();
    let now = Utc::now();
    let Some(name) = request.name.clone() else {
        let selection =
            Selection::parse(resource, query.get("labelSelector"), query.get("fieldSelector"))?;
        let documents: Vec<Value> = match resource {
            Resource::Pods => {
                metrics::sorted_pods(source.pods(request.namespace.as_deref()).await?)
                    .into_iter()
                    .filter(|p| request.namespace.as_ref().is_none_or(|ns| *ns == p.namespace))
                    .map(|p| p.document(&now, false))
                    .collect()
            }
            Resource::Nodes => metrics::sorted_nodes(source.nodes().await?)
                .into_iter()
                .map(|n| n.document(&now, false))
                .collect(),
        };
        let items: Vec<Value> = documents.into_iter().filter(|d| selection.matches(d)).collect();
        let accept = accept(headers);
        if table::wants_table(accept) {
            let options = TableOptions { include_object: include_object(query), no_headers: false };
            let t = table::table(rt, &items, json!({}), table::table_version(accept), options);
            return Ok(json_response(StatusCode::OK, &t));
        }
        return Ok(json_response(StatusCode::OK, &resource.list(items)));
    };
    let found = match resource {
        Resource::Pods => source
            .pods(request.namespace.as_deref())
            .await?
            .into_iter()
            .find(|p| p.name == name && request.namespace.as_ref() == Some(&p.namespace))
            .map(|p| p.document(&now, true)),
        Resource::Nodes => source
            .nodes()
            .await?
            .into_iter()
            .find(|n| n.name == name)
            .map(|n| n.document(&now, true)),
    };
    match found {
        Some(document) => Ok(respond_object(StatusCode::OK, rt, document, headers, query)),
        None => Err(missing(server, resource, request.namespace, name).await),
    }
}

/// The 404 for a name without metrics, as metrics-server words it: the measured object's own
/// when the cluster has no such object (`pods "x" not found`), else the metrics' own
/// (`podmetrics.metrics.k8s.io "default/x" not found`).
async fn missing(
    server: &Server,
    resource: Resource,
    namespace: Option<String>,
    name: String,
) -> ApiError {
    let no_metrics = resource.no_metrics(namespace.as_deref(), &name);
    // The core kind measured has the plural of the metrics' type.
    let Some(rt) = crate::resource::built_in("", resource.resource_type().plural) else {
        return no_metrics;
    };
    let api = server.api.clone();
    let found = blocking(move || api.get(&Target { rt, namespace }, &name)).await;
    match found {
        Err(e @ ApiError::NotFound { .. }) => e,
        _ => no_metrics,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::Request;
    use axum::Router;
    use carrel_store::{Options, SledStore};
    use futures::future::BoxFuture;
    use rustls::pki_types::CertificateDer;
    use tower::ServiceExt;

    use super::*;
    use crate::access::Security;
    use crate::api::Api;
    use crate::http::{router, Loopback};
    use crate::metrics::{ContainerUsage, NodeUsage, PodUsage, Usage};

    /// A source with fixed usage, which answers every namespace's pods whatever it is asked
    /// (the server keeps the namespace asked for), or fails.
    #[derive(Debug)]
    struct Fixed {
        pods: Vec<PodUsage>,
        nodes: Vec<NodeUsage>,
        fails: bool,
    }

    impl Metrics for Fixed {
        fn pods(&self, _namespace: Option<&str>) -> BoxFuture<'static, ApiResult<Vec<PodUsage>>> {
            let answer = match self.fails {
                true => Err(ApiError::unavailable("the host's metrics are unavailable")),
                false => Ok(self.pods.clone()),
            };
            Box::pin(async move { answer })
        }

        fn nodes(&self) -> BoxFuture<'static, ApiResult<Vec<NodeUsage>>> {
            let nodes = self.nodes.clone();
            Box::pin(async move { Ok(nodes) })
        }
    }

    fn pod(namespace: &str, name: &str, app: &str, cpu: &str) -> PodUsage {
        PodUsage {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
            timestamp: Utc::now(),
            window: Duration::from_secs(10),
            containers: vec![ContainerUsage {
                name: "main".into(),
                usage: Usage { cpu: cpu.to_owned(), memory: "64Mi".into() },
            }],
        }
    }

    fn fixed() -> Fixed {
        let node = |name: &str, pool: &str| NodeUsage {
            name: name.to_owned(),
            labels: BTreeMap::from([("pool".to_owned(), pool.to_owned())]),
            timestamp: Utc::now(),
            window: Duration::from_secs(10),
            usage: Usage { cpu: "350m".into(), memory: "320Mi".into() },
        };
        Fixed {
            pods: vec![
                pod("serving", "serve", "serve", "10m"),
                pod("default", "train", "train", "250m"),
                pod("default", "eval", "eval", "1m"),
            ],
            nodes: vec![node("n2", "cpu"), node("n1", "gpu")],
            fails: false,
        }
    }

    fn api(dir: &tempfile::TempDir) -> Arc<Api> {
        let store = SledStore::open(dir.path().join("store"), Options::create()).expect("store");
        Arc::new(Api::new(Arc::new(store)).expect("api"))
    }

    /// `method path` through `router`, with `headers`: the status and the body as JSON (`null`
    /// for one that is not).
    async fn send(
        router: &Router,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        identity: Option<Loopback>,
    ) -> (u16, Value) {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut request = request.body(Body::empty()).expect("request");
        if let Some(identity) = identity {
            request.extensions_mut().insert(identity);
        }
        let response = router.clone().oneshot(request).await.expect("an answer");
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("body");
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn get(router: &Router, path: &str) -> (u16, Value) {
        send(router, "GET", path, &[], None).await
    }

    fn names(list: &Value) -> Vec<String> {
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                let meta = &i["metadata"];
                match meta["namespace"].as_str() {
                    Some(ns) => format!("{ns}/{}", meta["name"].as_str().unwrap_or_default()),
                    None => meta["name"].as_str().unwrap_or_default().to_owned(),
                }
            })
            .collect()
    }

    const PODS: &str = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods";
    const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

    fn served_groups(list: &Value) -> Vec<String> {
        list["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .filter_map(|g| g["name"].as_str().map(str::to_owned))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_cluster_without_a_source_serves_no_metrics_and_lists_none() {
        let dir = tempfile::tempdir().expect("dir");
        let router = router(Arc::new(Server::new(api(&dir), "")));
        let (code, groups) = get(&router, "/apis").await;
        assert_eq!(code, 200);
        assert!(!served_groups(&groups).contains(&metrics::GROUP.to_owned()), "{groups}");
        let (_, aggregated) = send(&router, "GET", "/apis", &[("accept", AGGREGATED)], None).await;
        assert!(!aggregated.to_string().contains("metrics.k8s.io"), "{aggregated}");
        for path in ["/apis/metrics.k8s.io", "/apis/metrics.k8s.io/v1beta1", PODS] {
            let (code, status) = get(&router, path).await;
            assert_eq!((code, &status["reason"]), (404, &json!("NotFound")), "{path}: {status}");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn discovery_lists_the_api_of_a_cluster_given_a_source() {
        let dir = tempfile::tempdir().expect("dir");
        let server = Arc::new(Server::new(api(&dir), ""));
        server.set_metrics(Arc::new(fixed()));
        let router = router(server);
        let (_, groups) = get(&router, "/apis").await;
        assert!(served_groups(&groups).contains(&metrics::GROUP.to_owned()), "{groups}");
        let (code, group) = get(&router, "/apis/metrics.k8s.io").await;
        assert_eq!(code, 200);
        assert_eq!(
            group["preferredVersion"],
            json!({"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"})
        );
        let (code, resources) = get(&router, "/apis/metrics.k8s.io/v1beta1").await;
        assert_eq!(code, 200);
        assert_eq!(
            resources,
            json!({
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": "metrics.k8s.io/v1beta1",
                "resources": [
                    {"name": "nodes", "singularName": "", "namespaced": false,
                     "kind": "NodeMetrics", "verbs": ["get", "list"]},
                    {"name": "pods", "singularName": "", "namespaced": true,
                     "kind": "PodMetrics", "verbs": ["get", "list"]},
                ],
            })
        );
        let (_, aggregated) = send(&router, "GET", "/apis", &[("accept", AGGREGATED)], None).await;
        let item = aggregated["items"]
            .as_array()
            .expect("items")
            .iter()
            .find(|i| i["metadata"]["name"] == metrics::GROUP)
            .cloned()
            .unwrap_or_else(|| panic!("no metrics.k8s.io in {aggregated}"));
        let version = &item["versions"][0];
        assert_eq!(version["version"], "v1beta1");
        assert_eq!(version["resources"][1]["resource"], "pods");
        assert_eq!(
            version["resources"][1]["responseKind"],
            json!({"group": "metrics.k8s.io", "version": "v1beta1", "kind": "PodMetrics"})
        );
        assert_eq!(version["resources"][0]["scope"], "Cluster");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn lists_and_gets_answer_from_the_source_as_metrics_server_does() {
        let dir = tempfile::tempdir().expect("dir");
        let server = Arc::new(Server::new(api(&dir), ""));
        server.set_metrics(Arc::new(fixed()));
        let router = router(server);

        // One namespace, sorted; every namespace; selectors.
        let (code, list) = get(&router, PODS).await;
        assert_eq!(code, 200, "{list}");
        assert_eq!((&list["kind"], &list["metadata"]), (&json!("PodMetricsList"), &json!({})));
        assert_eq!(names(&list), ["default/eval", "default/train"]);
        assert!(list["items"][0].get("kind").is_none(), "{list}");
        let (_, all) = get(&router, "/apis/metrics.k8s.io/v1beta1/pods").await;
        assert_eq!(names(&all), ["default/eval", "default/train", "serving/serve"]);
        let (_, selected) = get(&router, &format!("{PODS}?labelSelector=app%3Dtrain")).await;
        assert_eq!(names(&selected), ["default/train"]);
        let path = "/apis/metrics.k8s.io/v1beta1/pods?fieldSelector=metadata.namespace%3Dserving";
        assert_eq!(names(&get(&router, path).await.1), ["serving/serve"]);
        let path = format!("{PODS}?fieldSelector=metadata.name%21%3Dtrain");
        assert_eq!(names(&get(&router, &path).await.1), ["default/eval"]);
        let (code, status) = get(&router, &format!("{PODS}?labelSelector=app%3Da%20b")).await;
        assert_eq!((code, &status["reason"]), (400, &json!("BadRequest")), "{status}");
        let (code, status) =
            get(&router, &format!("{PODS}?fieldSelector=spec.nodeName%3Dn1")).await;
        assert_eq!(code, 400, "{status}");

        // One pod, with its kind.
        let (code, train) = get(&router, &format!("{PODS}/train")).await;
        assert_eq!(code, 200, "{train}");
        assert_eq!(train["kind"], "PodMetrics");
        assert_eq!(train["apiVersion"], "metrics.k8s.io/v1beta1");
        assert_eq!(
            train["containers"],
            json!([{"name": "main", "usage": {"cpu": "250m", "memory": "64Mi"}}])
        );
        assert_eq!(train["window"], "10s");
        // The same name in another namespace is not that pod.
        let (code, _) =
            get(&router, "/apis/metrics.k8s.io/v1beta1/namespaces/serving/pods/train").await;
        assert_eq!(code, 404);

        // Nodes.
        let (_, nodes) = get(&router, "/apis/metrics.k8s.io/v1beta1/nodes").await;
        assert_eq!(nodes["kind"], "NodeMetricsList");
        assert_eq!(names(&nodes), ["n1", "n2"]);
        let path = "/apis/metrics.k8s.io/v1beta1/nodes?labelSelector=pool%3Dgpu";
        assert_eq!(names(&get(&router, path).await.1), ["n1"]);
        let (code, n2) = get(&router, "/apis/metrics.k8s.io/v1beta1/nodes/n2").await;
        assert_eq!((code, &n2["kind"]), (200, &json!("NodeMetrics")));
        assert_eq!(n2["usage"], json!({"cpu": "350m", "memory": "320Mi"}));

        // As a table, as `kubectl get pods.metrics.k8s.io` asks.
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        let (_, t) = send(&router, "GET", PODS, &[("accept", accept)], None).await;
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["rows"][1]["cells"], json!(["train", "250m", "64Mi", "10s"]));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn names_without_metrics_paths_and_verbs_not_served_are_refused_in_kubernetes_words() {
        let dir = tempfile::tempdir().expect("dir");
        let server = Arc::new(Server::new(api(&dir), ""));
        server.set_metrics(Arc::new(fixed()));
        let router = router(server);
        // A pod the cluster has but that has no metrics (not running yet), and one it lacks.
        let pod = json!({"metadata": {"name": "waiting"},
                         "spec": {"containers": [{"name": "main", "image": "x"}]}});
        let request = Request::post("/api/v1/namespaces/default/pods")
            .header("content-type", "application/json")
            .body(Body::from(pod.to_string()))
            .expect("request");
        let created = router.clone().oneshot(request).await.expect("an answer");
        assert_eq!(created.status().as_u16(), 201);
        let (code, status) = get(&router, &format!("{PODS}/waiting")).await;
        assert_eq!(code, 404);
        assert_eq!(status["message"], "podmetrics.metrics.k8s.io \"default/waiting\" not found");
        assert_eq!(status["details"]["kind"], "podmetrics");
        let (code, status) = get(&router, &format!("{PODS}/nope")).await;
        assert_eq!(code, 404);
        assert_eq!(status["message"], "pods \"nope\" not found");
        let (code, status) = get(&router, "/apis/metrics.k8s.io/v1beta1/nodes/ghost").await;
        assert_eq!(code, 404);
        assert_eq!(status["message"], "nodes \"ghost\" not found");

        // Paths the API does not have.
        for path in [
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/train/status",
            "/apis/metrics.k8s.io/v1beta1/watch/namespaces/default/pods",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/nodes",
            "/apis/metrics.k8s.io/v1beta1/pods/train",
            "/apis/metrics.k8s.io/v1beta1/services",
        ] {
            let (code, status) = get(&router, path).await;
            assert_eq!(code, 404, "{path}: {status}");
        }

        // Watches and writes: 405.
        let (code, status) = get(&router, &format!("{PODS}?watch=true")).await;
        assert_eq!(code, 405);
        assert_eq!(status["reason"], "MethodNotAllowed");
        assert_eq!(
            status["message"],
            "watch is not supported on resources of kind \"pods.metrics.k8s.io\""
        );
        let (code, status) = get(&router, "/apis/metrics.k8s.io/v1beta1/nodes?watch=1").await;
        assert_eq!(code, 405);
        assert_eq!(
            status["message"],
            "watch is not supported on resources of kind \"nodes.metrics.k8s.io\""
        );
        for (method, path, verb) in [
            ("POST", PODS.to_owned(), "create"),
            ("PUT", format!("{PODS}/train"), "update"),
            ("PATCH", format!("{PODS}/train"), "patch"),
            ("DELETE", format!("{PODS}/train"), "delete"),
            ("DELETE", PODS.to_owned(), "deletecollection"),
        ] {
            let (code, status) = send(&router, method, &path, &[], None).await;
            assert_eq!(code, 405, "{method} {path}");
            assert_eq!(
                status["message"],
                format!("{verb} is not supported on resources of kind \"pods.metrics.k8s.io\"")
            );
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failing_source_is_its_error() {
        let dir = tempfile::tempdir().expect("dir");
        let server = Arc::new(Server::new(api(&dir), ""));
        server.set_metrics(Arc::new(Fixed { fails: true, ..fixed() }));
        let (code, status) = get(&router(server), PODS).await;
        assert_eq!(code, 503);
        assert_eq!(status["message"], "the host's metrics are unavailable");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn rbac_allows_and_refuses_the_metrics_of_pods_and_nodes() {
        let dir = tempfile::tempdir().expect("dir");
        let api = api(&dir);
        let signer =
            crate::auth::token::Signer::load_or_generate(&dir.path().join("pki")).expect("a key");
        let security = Security::new(CertificateDer::from(Vec::new()), Some(signer), "issuer");
        let server = Arc::new(Server::secured(api, "", Arc::new(security)));
        server.set_metrics(Arc::new(fixed()));
        let router = router(server.clone());
        let admin = || {
            let user = UserInfo::new("carrel-admin", [crate::rbac::SYSTEM_MASTERS]);
            Some(Loopback::new(server.clone(), user.with_authenticated_group()))
        };
        let as_jane = [("impersonate-user", "jane")];
        let (code, status) = send(&router, "GET", PODS, &as_jane, admin()).await;
        assert_eq!(code, 403, "{status}");
        assert_eq!(
            status["message"],
            "pods.metrics.k8s.io is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\""
        );
        let path = "/apis/metrics.k8s.io/v1beta1/nodes/n1";
        let (code, status) = send(&router, "GET", path, &as_jane, admin()).await;
        assert_eq!(code, 403, "{status}");
        assert!(status["message"].as_str().unwrap_or_default().contains("cannot get resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"), "{status}");

        // A Role on the metrics of pods in `default`, bound to jane: she lists and gets there,
        // and nowhere else.
        let write = |path: &str, body: Value| {
            let mut request = Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .expect("request");
            request.extensions_mut().insert(admin().expect("the admin"));
            router.clone().oneshot(request)
        };
        let role = json!({"metadata": {"name": "top"}, "rules": [
            {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]}]});
        let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
        assert_eq!(write(roles, role).await.expect("an answer").status().as_u16(), 201);
        let binding = json!({"metadata": {"name": "jane-top"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "top"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}]});
        let bindings = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
        assert_eq!(write(bindings, binding).await.expect("an answer").status().as_u16(), 201);
        let (code, list) = send(&router, "GET", PODS, &as_jane, admin()).await;
        assert_eq!(code, 200, "{list}");
        assert_eq!(names(&list), ["default/eval", "default/train"]);
        let (code, _) = send(&router, "GET", &format!("{PODS}/train"), &as_jane, admin()).await;
        assert_eq!(code, 200);
        let all = "/apis/metrics.k8s.io/v1beta1/pods";
        assert_eq!(send(&router, "GET", all, &as_jane, admin()).await.0, 403);
        // RBAC first, as kube-apiserver checks before it proxies: a watch she may not make is
        // 403, not 405.
        let watch = format!("{PODS}?watch=true");
        assert_eq!(send(&router, "GET", &watch, &as_jane, admin()).await.0, 403);
    }
}
