//! The manager's identity on a host: the service account `carrel/tenant-manager`, and the RBAC
//! rules that allow exactly what the manager does there (read, watch, update and delete Tenants
//! and write their status; create, read and delete their host namespaces; keep their kubeconfig
//! Secrets; count and release GPU claim Leases). On another host, an admin grants these; in
//! `carrel up` [`in_process_client`] creates them in the embedded host and makes the manager's
//! client of it.

use std::sync::Arc;

use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::local_client::{self, LocalClientError, ServiceAccount};
use carrel_apiserver::Server;
use serde_json::{json, Value};

/// The service account's namespace.
pub const NAMESPACE: &str = "carrel";
/// The service account's name.
pub const NAME: &str = "tenant-manager";

/// What the manager does on the host, as RBAC rules.
pub fn rules() -> Vec<Value> {
    vec![
        json!({"apiGroups": ["carrel.dev"], "resources": ["tenants"],
               "verbs": ["get", "list", "watch", "update", "delete"]}),
        json!({"apiGroups": ["carrel.dev"], "resources": ["tenants/status"], "verbs": ["update"]}),
        json!({"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "create", "delete"]}),
        json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "update"]}),
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["list", "watch", "delete"]}),
    ]
}

/// The manager's service account, with [`rules`].
pub fn service_account() -> ServiceAccount {
    ServiceAccount { namespace: NAMESPACE.to_owned(), name: NAME.to_owned(), rules: rules() }
}

/// The manager's client of `host`, a server in this process. On a secured host, `tokens` is the
/// host's token key and issuer: the service account and its RBAC are created in the host's store
/// (or brought up to date) and every request carries a token for it. Without, the host is served
/// open and the client sends no credential.
pub fn in_process_client(
    host: Arc<Server>,
    tokens: Option<(Signer, &str)>,
) -> Result<kube::Client, LocalClientError> {
    match tokens {
        Some((signer, issuer)) => {
            local_client::service_account_client(host, &service_account(), signer, issuer)
        }
        None => Ok(local_client::client(carrel_apiserver::http::router(host), None, "default")),
    }
}
