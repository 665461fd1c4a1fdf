//! A `kube::Client` of a server in this process: the server's axum router called as a tower
//! service, with no socket between them. `carrel up` gives it to the controllers it runs beside
//! its host API (the tenant manager), so they reach that API exactly as they would reach any
//! Kubernetes API server: through requests, authentication and RBAC.
//!
//! On a secured server the client is a service account: [`ServiceAccount::ensure`] creates it,
//! with a ClusterRole of exactly the rules it is given bound to it, and every request carries a
//! token for it signed with the server's key (re-issued before it expires).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{header, HeaderValue, Request};
use axum::Router;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::api::{Api, Target, Write};
use crate::auth::token::{ObjectRef, Signer, TokenClaims};
use crate::auth::CredentialError;
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
    /// Its name; its ClusterRole and ClusterRoleBinding are `<namespace>:<name>`.
    pub name: String,
    /// The RBAC rules of its ClusterRole (`PolicyRule`s as JSON).
    pub rules: Vec<Value>,
}

impl ServiceAccount {
    /// The name of its ClusterRole and ClusterRoleBinding.
    pub fn role_name(&self) -> String {
        format!("{}:{}", self.namespace, self.name)
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
        .service(router);
    kube::Client::new(service, default_namespace)
}

#[cfg(test)]
mod tests {
    use carrel_store::{Options, SledStore};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use rustls::pki_types::CertificateDer;

    use super::*;
    use crate::access::Security;
    use crate::http::router;
    use crate::Server;

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
}
