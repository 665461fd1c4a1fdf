//! Who a tenant's clients are: its admin credential (a `system:masters` certificate from the
//! tenant's CA, kept in its data directory so that it survives a restart) and the issuer of its
//! service-account tokens.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::{CredentialError, UserInfo};
use carrel_apiserver::{kubeconfig, local_client, Server};

/// The user of a tenant's admin kubeconfig.
pub const ADMIN_USER: &str = "carrel-admin";
/// Its group: every permission, through the bootstrap `cluster-admin` binding.
pub const ADMIN_GROUP: &str = "system:masters";
/// How long the admin certificate is valid.
pub const ADMIN_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The user a tenant's admin certificate authenticates as: [`ADMIN_USER`] in [`ADMIN_GROUP`]
/// and `system:authenticated`. `carrel up`'s syncer acts in its tenant as this user through an
/// in-process client ([`admin_client`]).
pub fn admin_user() -> UserInfo {
    UserInfo::new(ADMIN_USER, [ADMIN_GROUP]).with_authenticated_group()
}

/// A client of tenant `server`, in this process, as its admin ([`admin_user`]): no socket and no
/// credential, but the in-process transport's identity, which RBAC objects neither grant nor
/// take away ([`local_client::loopback`]).
pub fn admin_client(server: Arc<Server>) -> kube::Client {
    local_client::loopback(server, admin_user(), "default")
}

/// The issuer (and default audience) of a tenant's service-account tokens.
pub fn issuer(tenant: &str) -> String {
    format!("https://kubernetes.default.svc/tenants/{tenant}")
}

/// The admin kubeconfig of tenant `name` served at `url`: with the listener's CA
/// (`server_ca_pem`), a client certificate from the tenant's CA kept in `pki`; without (plain
/// HTTP, in tests), no credential.
pub fn admin_kubeconfig(
    name: &str,
    url: &str,
    server_ca_pem: Option<&str>,
    pki: &Path,
) -> Result<String, CredentialError> {
    let Some(server_ca) = server_ca_pem else {
        return Ok(kubeconfig::admin(url, None));
    };
    let ca = TenantCa::load_or_generate(pki, name)?;
    let (cert, key) = admin_credential(&ca, pki)?;
    Ok(kubeconfig::with_client_certificate(url, server_ca, &cert, &key))
}

/// The admin client certificate and key (PEM) from the tenant's CA `ca`, kept in `pki` as
/// `admin.crt` and `admin.key`: issued on first use (a new key), read afterwards.
pub fn admin_credential(ca: &TenantCa, pki: &Path) -> Result<(String, String), CredentialError> {
    ca.load_or_issue_client(pki, "admin", ADMIN_USER, &[ADMIN_GROUP], ADMIN_VALIDITY)
}
