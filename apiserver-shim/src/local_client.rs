//! A `kube::Client` of a server in this process: the server's axum router called as a tower
//! service, with no socket between them. `carrel up` gives it to the controllers it runs beside
//! its host API (the tenant manager), so they reach that API exactly as they would reach any
//! Kubernetes API server: through requests, authentication and RBAC.
//!
//! On a secured server the client is a service account: [`ServiceAccount::ensure`] creates it,
//! with a ClusterRole of exactly the rules it is given bound to it, and every request carries a
//! token for it signed with the server's key (re-issued before it expires).
//!
//! [`loopback`] is the other kind: a client of one server that carries no credential at all, but
//! an identity in its requests' extensions, which only this transport can put there (as
//! kube-apiserver's privileged loopback client). `carrel up` gives one to each tenant's syncer
//! for its tenant, and one to its controllers for the host.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{header, HeaderValue, Request};
use axum::Router;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::api::{Api, Target, Write};
use crate::auth::token::{ObjectRef, Signer, TokenClaims};
use crate::auth::{CredentialError, UserInfo};
use crate::http::{router, Loopback, Server};
use crate::object::meta_str;
use crate::resource::built_in;
use crate::status::ApiError;

/// How long a token of the local client is valid; it is re-issued at half that age.
const TOKEN_VALIDITY: Duration = Duration::from_secs(3600);

/// The field manager of the bootstrap objects written here.
const MANAGER: &str = "carrel";

/// What can go wrong making a local client.
#[derive(Debug, thiserror::Error)]
pub enum LocalClientError {
    /// The server refused one of the bootstrap objects.
    #[error("creating {what}: {source}")]
    Api {
        /// The object.
        what: String,
        /// Why.
        source: ApiError,
    },
    /// A token could not be signed.
    #[error("issuing a service-account token: {0}")]
    Credentials(#[from] CredentialError),
}

/// A service account of the host and what it may do.
#[derive(Clone, Debug)]
pub struct ServiceAccount {
    /// Its namespace (created when missing).
    pub namespace: String,
    /// Its name; its ClusterRole and ClusterRoleBinding are `local:<namespace>:<name>`.
    pub name: String,
    /// The RBAC rules of its ClusterRole (`PolicyRule`s as JSON).
    pub rules: Vec<Value>,
}

impl ServiceAccount {
    /// The name of its ClusterRole and ClusterRoleBinding: `local:<namespace>:<name>`, apart
    /// from the roles and bindings an admin applies (the manifests' `carrel:node-agent` binds
    /// another account, and applying it must not take this one's rights away).
    pub fn role_name(&self) -> String {
        format!("local:{}:{}", self.namespace, self.name)
    }

    /// Create (or bring up to date) in `api` the namespace, the service account, its ClusterRole
    /// and the binding of one to the other; the service account's UID.
    pub fn ensure(&self, api: &Api) -> Result<String, LocalClientError> {
        let role = self.role_name();
        let namespace = json!({"metadata": {"name": self.namespace}});
        ensure(api, ("", "namespaces"), None, &self.namespace, namespace)?;
        let account = json!({"metadata": {"name": self.name, "namespace": self.namespace}});
        let account =
            ensure(api, ("", "serviceaccounts"), Some(&self.namespace), &self.name, account)?;
        let cluster_role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": self.rules,
        });
        ensure(api, ("rbac.authorization.k8s.io", "clusterroles"), None, &role, cluster_role)?;
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}],
        });
        ensure(api, ("rbac.authorization.k8s.io", "clusterrolebindings"), None, &role, binding)?;
        Ok(meta_str(&account, "uid").unwrap_or_default().to_owned())
    }
}

/// Create `object` as `name`, or make the stored one's content (all but its metadata) what
/// `object` says; the object as stored.
fn ensure(
    api: &Api,
    (group, plural): (&str, &str),
    namespace: Option<&str>,
    name: &str,
    object: Value,
) -> Result<Value, LocalClientError> {
    let what = format!("{plural} {name}");
    let Some(rt) = built_in(group, plural) else {
        let source = ApiError::not_found(group, plural, name);
        return Err(LocalClientError::Api { what, source });
    };
    let target = Target { rt, namespace: namespace.map(str::to_owned) };
    let write = Write::by(MANAGER, false);
    let result = match api.get(&target, name) {
        Ok(mut existing) => {
            let mut changed = false;
            for (key, value) in object.as_object().into_iter().flatten() {
                if key != "metadata" && existing.get(key) != Some(value) {
                    existing[key] = value.clone();
                    changed = true;
                }
            }
            if changed {
                api.update(&target, name, existing, None, &write)
            } else {
                Ok(existing)
            }
        }
        Err(_) => api.create(&target, object, &write),
    };
    result.map_err(|source| LocalClientError::Api { what, source })
}

/// Tokens for one service account, re-issued when half their validity has passed.
#[derive(Debug)]
pub struct Tokens {
    signer: Signer,
    issuer: String,
    namespace: String,
    account: ObjectRef,
    current: Mutex<Option<(Instant, HeaderValue)>>,
}

impl Tokens {
    /// Tokens signed by `signer` for `issuer` (their audience too) naming service account
    /// `name` (with `uid`) in `namespace`.
    pub fn new(signer: Signer, issuer: &str, namespace: &str, name: &str, uid: &str) -> Tokens {
        Tokens {
            signer,
            issuer: issuer.to_owned(),
            namespace: namespace.to_owned(),
            account: ObjectRef::new(name, uid),
            current: Mutex::new(None),
        }
    }

    /// The `Authorization` header value of a request now.
    pub fn header(&self) -> Result<HeaderValue, CredentialError> {
        let mut current = self.current.lock();
        if let Some((issued, value)) = current.as_ref() {
            if issued.elapsed() < TOKEN_VALIDITY / 2 {
                return Ok(value.clone());
            }
        }
        let claims = TokenClaims::new(
            &self.issuer,
            &self.namespace,
            self.account.clone(),
            vec![self.issuer.clone()],
            SystemTime::now(),
            TOKEN_VALIDITY,
        );
        let token = self.signer.issue(&claims)?;
        let value =
            HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| CredentialError::Sign)?;
        *current = Some((Instant::now(), value.clone()));
        Ok(value)
    }
}

/// The verbs of Kubernetes' resource requests.
const RESOURCE_VERBS: [&str; 8] =
    ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

/// What keeps `rules` from being a component's least-privilege rules, one line each: a rule
/// that is not a PolicyRule of resources, a `*` anywhere, a verb Kubernetes does not have, a
/// group and resource named by two rules (each is named once, so its verbs read in one place).
pub fn least_privilege_problems(rules: &[Value]) -> Vec<String> {
    let strings = |rule: &Value, field: &str| -> Vec<String> {
        let values = rule[field].as_array().into_iter().flatten().filter_map(Value::as_str);
        values.map(str::to_owned).collect()
    };
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for rule in rules {
        let typed: k8s_openapi::api::rbac::v1::PolicyRule =
            match serde_json::from_value(rule.clone()) {
                Ok(typed) => typed,
                Err(e) => {
                    problems.push(format!("{rule}: not a PolicyRule: {e}"));
                    continue;
                }
            };
        if typed.api_groups.as_ref().is_none_or(Vec::is_empty)
            || typed.resources.as_ref().is_none_or(Vec::is_empty)
            || typed.resource_names.is_some()
            || typed.non_resource_urls.is_some()
        {
            problems.push(format!("{rule}: not a rule on whole resources"));
        }
        for field in ["apiGroups", "resources", "verbs"] {
            if strings(rule, field).iter().any(|s| s.contains('*')) {
                problems.push(format!("{rule}: `*` in {field}"));
            }
        }
        for verb in &typed.verbs {
            if !RESOURCE_VERBS.contains(&verb.as_str()) {
                problems.push(format!("{rule}: no verb {verb}"));
            }
        }
        for group in strings(rule, "apiGroups") {
            for resource in strings(rule, "resources") {
                if !seen.insert((group.clone(), resource.clone())) {
                    problems.push(format!("{group}/{resource} named by two rules"));
                }
            }
        }
    }
    problems
}

/// Whether `rules` allow `verb` on `resource` (a subresource as `pods/log`) of `group`, as the
/// server's RBAC decides it.
pub fn grants(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let attributes = crate::rbac::Attributes::resource(UserInfo::default(), verb, group, resource)
        .with_subresource(subresource);
    rules
        .iter()
        .filter_map(|r| serde_json::from_value(r.clone()).ok())
        .any(|rule| crate::rbac::rule_allows(&attributes, &rule))
}

/// A client of `server`, a secured server in this process, as `account`: the account and its
/// RBAC are created in the server's store (or brought up to date), and every request carries a
/// token for it signed with `signer` for `issuer`, so the server's RBAC allows it exactly
/// `account.rules`.
pub fn service_account_client(
    server: Arc<Server>,
    account: &ServiceAccount,
    signer: Signer,
    issuer: &str,
) -> Result<kube::Client, LocalClientError> {
    let uid = account.ensure(server.api())?;
    let tokens = Tokens::new(signer, issuer, &account.namespace, &account.name, &uid);
    Ok(client(router(server), Some(Arc::new(tokens)), "default"))
}

/// A client of `router` (a server's, or every cluster's of a listener) in this process, sending
/// `tokens`' bearer tokens when given (none: for a server served open); `default_namespace` is
/// the client's default.
pub fn client(
    router: Router,
    tokens: Option<Arc<Tokens>>,
    default_namespace: &str,
) -> kube::Client {
    let service = tower::ServiceBuilder::new()
        .map_request(move |request: Request<kube::client::Body>| {
            let mut request = request.map(axum::body::Body::new);
            if let Some(tokens) = &tokens {
                match tokens.header() {
                    Ok(value) => {
                        request.headers_mut().insert(header::AUTHORIZATION, value);
                    }
                    // Sent without: the server answers 401, which the caller reports.
                    Err(e) => tracing::warn!(error = %e, "issuing the local client's token failed"),
                }
            }
            request
        })
        .service(with_upgrades(router));
    kube::Client::new(service, default_namespace)
}

/// `router` as a service whose requests that ask for an upgrade (a pod's streams) go over an
/// HTTP/1.1 connection in memory, which can be upgraded as a socket's can; every other request
/// is a call of `router`, with no connection at all. The request's extensions (a loopback
/// identity) go with it either way.
fn with_upgrades(
    router: Router,
) -> impl tower::Service<
    Request<axum::body::Body>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |request: Request<axum::body::Body>| {
        let router = router.clone();
        async move {
            if !request.headers().contains_key(header::UPGRADE) {
                return router.oneshot(request).await;
            }
            Ok(over_a_connection(router, request).await)
        }
    })
}

/// Bytes buffered each way on an in-memory connection.
const CONNECTION_BUFFER: usize = 64 * 1024;

async fn over_a_connection(
    router: Router,
    request: Request<axum::body::Body>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use hyper_util::rt::TokioIo;
    let (near, far) = tokio::io::duplex(CONNECTION_BUFFER);
    let extensions = request.extensions().clone();
    let serve = hyper::service::service_fn(move |mut incoming: Request<hyper::body::Incoming>| {
        incoming.extensions_mut().extend(extensions.clone());
        router.clone().oneshot(incoming.map(axum::body::Body::new))
    });
    tokio::spawn(async move {
        let connection = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(far), serve)
            .with_upgrades();
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "an in-process upgraded connection ended");
        }
    });
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(near)).await {
            Ok(pair) => pair,
            Err(e) => {
                return ApiError::internal(format!("an in-process connection: {e}")).into_response()
            }
        };
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    match sender.send_request(request).await {
        Ok(response) => response.map(axum::body::Body::new),
        Err(e) => ApiError::internal(format!("an in-process request: {e}")).into_response(),
    }
}

/// A client of `server` in this process, acting as `user` with every permission: its requests
/// carry no credential but a `Loopback` identity, which the server's authentication layer
/// takes to be `user` and its authorization layer allows everything (on a server served open,
/// nothing is checked anyway). They go through the rest of the server's layers (audit, request
/// info, admission) as any request does, under the server's base path (`/tenants/<name>`).
/// `default_namespace` is the client's default.
pub fn loopback(server: Arc<Server>, user: UserInfo, default_namespace: &str) -> kube::Client {
    let base = server.base().to_owned();
    let identity = Loopback::new(server.clone(), user);
    let service = tower::ServiceBuilder::new()
        .map_request(move |request: Request<kube::client::Body>| {
            let mut request = request.map(axum::body::Body::new);
            if !base.is_empty() {
                let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
                match format!("{base}{path}").parse() {
                    Ok(uri) => *request.uri_mut() = uri,
                    // Sent as it is: the server answers 404, which the caller reports.
                    Err(e) => tracing::warn!(error = %e, "a loopback request's path"),
                }
            }
            request.extensions_mut().insert(identity.clone());
            request
        })
        .service(with_upgrades(router(server)));
    kube::Client::new(service, default_namespace)
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderName, StatusCode};
    use carrel_store::{Options, SledStore};
    use futures::StreamExt;
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
    use kube::api::{PostParams, WatchEvent, WatchParams};
    use rustls::pki_types::CertificateDer;
    use tower::ServiceExt;

    use super::*;
    use crate::access::Security;
    use crate::api::DeleteParams;
    use crate::http::{clusters_router, Clusters};
    use crate::rbac::SYSTEM_MASTERS;
    use crate::tls::Certificates;

    #[test]
    fn wildcards_unknown_verbs_and_a_resource_named_twice_are_problems() {
        let good = [
            json!({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]}),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}),
        ];
        assert_eq!(least_privilege_problems(&good), Vec::<String>::new());
        assert!(grants(&good, "", "pods/log", "get"));
        assert!(!grants(&good, "", "pods/exec", "get"));
        assert!(!grants(&good, "apps", "deployments", "get"));
        let bad = [
            json!({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["escalate-ish"]}),
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                   "resourceNames": ["one"]}),
            json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}),
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}),
        ];
        let problems = least_privilege_problems(&bad);
        assert!(problems.iter().any(|p| p.contains("`*` in apiGroups")), "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("no verb escalate-ish")), "{problems:?}");
        assert!(
            problems.iter().any(|p| p.contains("not a rule on whole resources")),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.contains("/pods named by two rules")), "{problems:?}");
    }

    fn host(dir: &tempfile::TempDir) -> Arc<Api> {
        let store = SledStore::open(dir.path().join("host"), Options::create()).unwrap();
        Arc::new(Api::host(Arc::new(store)).unwrap())
    }

    const ISSUER: &str = "https://kubernetes.default.svc";

    #[tokio::test(flavor = "multi_thread")]
    async fn a_local_client_is_a_service_account_with_only_its_rules() {
        let dir = tempfile::tempdir().unwrap();
        let api = host(&dir);
        // The server's key, and the same key for the client's tokens.
        let pki = dir.path().join("pki");
        let signer = Signer::load_or_generate(&pki).unwrap();
        let security = Security::new(CertificateDer::from(Vec::new()), Some(signer), ISSUER);
        let server = Arc::new(Server::secured(api.clone(), "", Arc::new(security)));
        let account = ServiceAccount {
            namespace: "carrel".into(),
            name: "reader".into(),
            rules: vec![
                json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]}),
            ],
        };
        let uid = account.ensure(&api).unwrap();
        // Ensuring again changes nothing.
        assert_eq!(account.ensure(&api).unwrap(), uid);
        let signer = Signer::load(&pki).unwrap();
        let tokens = Arc::new(Tokens::new(signer, ISSUER, "carrel", "reader", &uid));
        let client = client(router(server.clone()), Some(tokens), "default");
        let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
        let carrel = namespaces.get("carrel").await.unwrap();
        assert_eq!(carrel.metadata.name.as_deref(), Some("carrel"));
        let config_maps: kube::Api<ConfigMap> = kube::Api::namespaced(client, "default");
        match config_maps.list(&Default::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
            other => panic!("a read outside the rules: {other:?}"),
        }
        // Without a token: 401.
        let anonymous = super::client(router(server), None, "default");
        let namespaces: kube::Api<Namespace> = kube::Api::all(anonymous);
        match namespaces.get("carrel").await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 401, "{status:?}"),
            other => panic!("an anonymous read: {other:?}"),
        }
    }

    /// The admin of a cluster: who an admin certificate names, in `system:masters`.
    fn admin() -> UserInfo {
        UserInfo::new("carrel-admin", [SYSTEM_MASTERS]).with_authenticated_group()
    }

    /// Delete the bootstrap binding of `cluster-admin` to `system:masters`: RBAC then grants the
    /// admin group nothing.
    fn revoke_the_admins(api: &Api) {
        let rt = built_in("rbac.authorization.k8s.io", "clusterrolebindings").unwrap();
        let target = Target { rt, namespace: None };
        api.delete(&target, "cluster-admin", &DeleteParams::default()).unwrap();
    }

    fn code<T: std::fmt::Debug>(answer: Result<T, kube::Error>) -> u16 {
        match answer {
            Ok(_) => 200,
            Err(kube::Error::Api(status)) => status.code,
            Err(other) => panic!("not an answer: {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_loopback_client_creates_and_watches_pods_in_a_tenant_whatever_its_rbac_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path().join("tenant"), Options::create()).unwrap();
        let api = Arc::new(Api::new(Arc::new(store)).unwrap());
        let signer = Signer::load_or_generate(&dir.path().join("pki")).unwrap();
        let issuer = "https://kubernetes.default.svc/tenants/team-a";
        let security = Security::new(CertificateDer::from(Vec::new()), Some(signer), issuer);
        let server = Arc::new(Server::secured(api.clone(), "/tenants/team-a", Arc::new(security)));
        revoke_the_admins(&api);
        let client = loopback(server, admin(), "default");

        // Who it is: the admin, by the same name and groups as the admin's certificate.
        let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
        let review = reviews.create(&PostParams::default(), &Default::default()).await.unwrap();
        let user = review.status.and_then(|s| s.user_info).unwrap();
        assert_eq!(user.username.as_deref(), Some("carrel-admin"));
        assert_eq!(
            user.groups.unwrap_or_default(),
            [SYSTEM_MASTERS, crate::auth::AUTHENTICATED_GROUP]
        );

        // A watch from the start, then a pod created: the watch sees it.
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, "default");
        let listed = pods.list(&Default::default()).await.unwrap();
        let version = listed.metadata.resource_version.unwrap();
        let events = pods.watch(&WatchParams::default().timeout(10), &version).await.unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "train"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }))
        .unwrap();
        let created = pods.create(&PostParams::default(), &pod).await.unwrap();
        // Through the server's layers: defaulted and stored as any pod.
        assert!(created.metadata.uid.is_some());
        let mut events = std::pin::pin!(events);
        let added = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("a watch event in time")
            .expect("the watch goes on")
            .unwrap();
        match added {
            WatchEvent::Added(pod) => assert_eq!(pod.metadata.name.as_deref(), Some("train")),
            other => panic!("{other:?}"),
        }
        let names: Vec<String> = pods
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        assert_eq!(names, ["train"]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_loopback_identity_holds_for_its_own_cluster_only() {
        let dir = tempfile::tempdir().unwrap();
        let api = host(&dir);
        let signer = Signer::load_or_generate(&dir.path().join("pki")).unwrap();
        let security =
            Arc::new(Security::new(CertificateDer::from(Vec::new()), Some(signer), ISSUER));
        let mine = Arc::new(Server::secured(api.clone(), "", security.clone()));
        let other = Arc::new(Server::secured(api, "", security));
        let request = |loopback: Loopback| {
            let mut request =
                Request::get("/api/v1/namespaces").body(axum::body::Body::empty()).unwrap();
            request.extensions_mut().insert(loopback);
            request
        };
        let answer = router(mine.clone())
            .oneshot(request(Loopback::new(mine.clone(), admin())))
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
        let answer = router(other).oneshot(request(Loopback::new(mine, admin()))).await.unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    }

    /// A client of the listener at `endpoint` trusting `certs`' CA: with the admin's certificate
    /// or with no credential, and with `headers` on every request.
    async fn network_client(
        endpoint: &str,
        certs: &Certificates,
        with_certificate: bool,
        headers: &[(&str, &str)],
    ) -> kube::Client {
        let text = crate::kubeconfig::admin(endpoint, Some(certs));
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let options = kube::config::KubeConfigOptions::default();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await.unwrap();
        if !with_certificate {
            config.auth_info = Default::default();
        }
        config.headers = headers
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                )
            })
            .collect();
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn no_request_over_the_listener_gets_the_loopback_identity() {
        let dir = tempfile::tempdir().unwrap();
        let api = host(&dir);
        let certs = Certificates::generate(&["127.0.0.1".into()]).unwrap();
        let signer = Signer::load_or_generate(&dir.path().join("pki")).unwrap();
        let security = Security::new(certs.ca_der().unwrap(), Some(signer), ISSUER);
        let server = Arc::new(Server::secured(api.clone(), "", Arc::new(security)));
        // Served as `carrel up` serves its clusters: over TLS, every cluster on one listener.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("https://{}", listener.local_addr().unwrap());
        let router = clusters_router(Arc::new(Clusters::new(server.clone())));
        let config = certs.server_config().unwrap();
        tokio::spawn(crate::tls::serve(listener, config, router, std::future::pending()));
        // RBAC grants the admins nothing: only the loopback identity may still read.
        revoke_the_admins(&api);
        let namespaces = |client| kube::Api::<Namespace>::all(client);
        let in_process = loopback(server, admin(), "default");
        assert_eq!(code(namespaces(in_process).list(&Default::default()).await), 200);

        // Headers that name the admin, its group or a loopback in every way a client could try.
        let header_sets: &[&[(&str, &str)]] = &[
            &[],
            &[("impersonate-user", "carrel-admin"), ("impersonate-group", SYSTEM_MASTERS)],
            &[("impersonate-user", "system:apiserver"), ("impersonate-group", SYSTEM_MASTERS)],
            &[("x-remote-user", "carrel-admin"), ("x-remote-group", SYSTEM_MASTERS)],
            &[("loopback", "carrel-admin"), ("x-carrel-loopback", "true")],
            &[("authorization", "Bearer loopback")],
        ];
        for headers in header_sets {
            // The admin's own certificate: the same user and groups as the loopback client, and
            // nothing RBAC does not grant.
            let admin = network_client(&endpoint, &certs, true, headers).await;
            let answer = code(namespaces(admin).list(&Default::default()).await);
            assert!(matches!(answer, 401 | 403), "with the certificate and {headers:?}: {answer}");
            let anonymous = network_client(&endpoint, &certs, false, headers).await;
            let answer = code(namespaces(anonymous).list(&Default::default()).await);
            assert_eq!(answer, 401, "without a certificate, with {headers:?}");
        }
        // The certificate alone is the admin, refused by RBAC.
        let admin = network_client(&endpoint, &certs, true, &[]).await;
        let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(admin.clone());
        let review = reviews.create(&PostParams::default(), &Default::default()).await.unwrap();
        let user = review.status.and_then(|s| s.user_info).unwrap();
        assert_eq!(user.username.as_deref(), Some("carrel-admin"));
        assert_eq!(code(namespaces(admin).list(&Default::default()).await), 403);
    }
}
