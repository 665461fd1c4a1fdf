//! Every cluster one listener serves: the host API at the root, and each tenant's API under
//! `/tenants/<name>`. It also tells flow control which flow a request belongs to, and ends a
//! tenant's long-running requests when the tenant stops being served.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::Server;
use crate::flowcontrol::{Classified, Classify, Flow, ObjectCount, Serving};

/// The path prefix of tenants' APIs.
pub const TENANTS_PREFIX: &str = "/tenants/";

/// The host API and the tenants' APIs, by tenant name.
#[derive(Debug)]
pub struct Clusters {
    host: Arc<Server>,
    tenants: RwLock<HashMap<String, Tenant>>,
}

/// A served tenant: its API, and what ends its long-running requests when it is dropped.
#[derive(Debug)]
struct Tenant {
    server: Arc<Server>,
    serving: Serving,
}

impl Clusters {
    /// Serve `host` at the root, and no tenant yet.
    pub fn new(host: Arc<Server>) -> Clusters {
        Clusters { host, tenants: RwLock::default() }
    }

    /// The host API.
    pub fn host(&self) -> &Arc<Server> {
        &self.host
    }

    /// A tenant's API, if it is served.
    pub fn tenant(&self, name: &str) -> Option<Arc<Server>> {
        self.tenants.read().get(name).map(|t| t.server.clone())
    }

    /// Serve a tenant's API (replacing any it had, whose watches and log streams end).
    pub fn insert(&self, name: &str, server: Arc<Server>) {
        let tenant = Tenant { server, serving: Serving::new() };
        let replaced = self.tenants.write().insert(name.to_owned(), tenant);
        drop(replaced);
    }

    /// Stop serving a tenant's API: its watches and log streams end now. It is returned so that
    /// its store can be closed.
    pub fn remove(&self, name: &str) -> Option<Arc<Server>> {
        let removed = self.tenants.write().remove(name);
        removed.map(|t| t.server)
    }

    /// How many tenants are served.
    pub fn count(&self) -> usize {
        self.tenants.read().len()
    }

    /// The names of the tenants served.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tenants.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// The cluster a request path is for, and whether the path names a tenant that is not
    /// served (`None` then).
    pub fn route(&self, path: &str) -> Option<Arc<Server>> {
        match path.strip_prefix(TENANTS_PREFIX) {
            Some(rest) => {
                let name = rest.split('/').next().unwrap_or_default();
                self.tenant(name)
            }
            None => Some(self.host.clone()),
        }
    }
}

impl Classify for Clusters {
    /// The host's health probes are exempt; everything else at the root is the host's flow; a
    /// served tenant's paths are its own flow, which lasts while it is served; paths under the
    /// tenants' prefix that name no served tenant share one flow.
    fn classify<'a>(&self, path: &'a str) -> Classified<'a> {
        let Some(rest) = path.strip_prefix(TENANTS_PREFIX) else {
            let flow = if super::is_health(path) { Flow::Exempt } else { Flow::Host };
            let objects: Arc<dyn ObjectCount> = self.host.api().clone();
            let pod_intake = self.host.has_pod_intake();
            return Classified { flow, path, pod_intake, objects: Some(objects) };
        };
        let name = rest.split('/').next().unwrap_or_default();
        let within = &rest[name.len()..];
        let tenants = self.tenants.read();
        let (flow, pod_intake, objects) = match tenants.get(name) {
            Some(tenant) => (
                Flow::Tenant { name: name.to_owned(), served: tenant.serving.served() },
                tenant.server.has_pod_intake(),
                Some(tenant.server.api().clone() as Arc<dyn ObjectCount>),
            ),
            None => (Flow::Unserved, false, None),
        };
        Classified { flow, path: within, pod_intake, objects }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use carrel_store::{Options, SledStore};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::flowcontrol::FlowConfig;
    use crate::http::clusters_router_with;
    use crate::Api;

    fn api(dir: &tempfile::TempDir, name: &str) -> Arc<Api> {
        let store = SledStore::open(dir.path().join(name), Options::create()).unwrap();
        Arc::new(Api::new(Arc::new(store)).unwrap())
    }

    /// The host and tenants `a` and `b`, each over its own store.
    fn clusters(dir: &tempfile::TempDir) -> Arc<Clusters> {
        let host = api(dir, "host");
        let clusters = Arc::new(Clusters::new(Arc::new(Server::new(host, ""))));
        for name in ["a", "b"] {
            let server = Server::new(api(dir, name), &format!("/tenants/{name}"));
            clusters.insert(name, Arc::new(server));
        }
        clusters
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_tenants_watches_are_bounded_and_another_tenant_is_still_served() {
        let dir = tempfile::tempdir().unwrap();
        let config = FlowConfig::for_cores(2);
        let limit = config.tenants.long_running_per_flow;
        let router = clusters_router_with(clusters(&dir), &config);
        let watch = "/tenants/a/api/v1/namespaces/default/configmaps?watch=true";
        let mut open = Vec::new();
        let mut refused = 0;
        for _ in 0..1_000 {
            let response = router.clone().oneshot(get(watch)).await.unwrap();
            match response.status() {
                StatusCode::OK => open.push(response),
                StatusCode::TOO_MANY_REQUESTS => {
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    assert_eq!(status["reason"], "TooManyRequests");
                    refused += 1;
                }
                other => panic!("unexpected {other}"),
            }
        }
        assert_eq!(open.len(), limit);
        assert_eq!(refused, 1_000 - limit);
        // Tenant b reads and watches; tenant a still reads.
        let b = router.clone().oneshot(get("/tenants/b/api/v1/namespaces")).await.unwrap();
        assert_eq!(b.status(), StatusCode::OK);
        let b_watch = "/tenants/b/api/v1/namespaces/default/configmaps?watch=true";
        let b_watch = router.clone().oneshot(get(b_watch)).await.unwrap();
        assert_eq!(b_watch.status(), StatusCode::OK);
        let a = router.clone().oneshot(get("/tenants/a/api/v1/namespaces")).await.unwrap();
        assert_eq!(a.status(), StatusCode::OK);
        // A watch closed makes room for another.
        open.pop();
        let again = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(again.status(), StatusCode::OK);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_watch_ends_when_its_tenant_is_no_longer_served() {
        let dir = tempfile::tempdir().unwrap();
        let clusters = clusters(&dir);
        let router = clusters_router_with(clusters.clone(), &FlowConfig::for_cores(2));
        let api = clusters.tenant("a").unwrap().api().clone();
        let before = Arc::strong_count(&api);
        let watch = "/tenants/a/api/v1/namespaces/default/configmaps?watch=true";
        let response = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        // Open while the tenant is served (no events: nothing is written).
        let early = tokio::time::timeout(Duration::from_millis(300), body.frame()).await;
        assert!(early.is_err(), "the watch ended while its tenant was served");
        assert!(Arc::strong_count(&api) > before, "the watch holds the tenant's API");
        let removed = clusters.remove("a").unwrap();
        let end = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(frame) = body.frame().await {
                frame.unwrap();
            }
        })
        .await;
        assert!(end.is_ok(), "the watch did not end when its tenant went");
        drop(body);
        // The watch's task lets go of the tenant's API.
        for _ in 0..500 {
            if Arc::strong_count(&api) == before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(Arc::strong_count(&api), before);
        drop(removed);
        // Requests for the tenant are now 404.
        let gone = router.clone().oneshot(get(watch)).await.unwrap();
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    }
}
