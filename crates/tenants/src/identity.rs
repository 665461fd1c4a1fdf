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
    carrel_apiserver::auth::token::tenant_issuer(tenant)
}

/// How a tenant's kubeconfig reaches the listener: its URL, the listener's CA (none: plain
/// HTTP, in tests), and whether the listener's certificate names the tenant's TLS server name.
#[derive(Clone, Debug)]
pub struct Endpoint<'a> {
    /// The tenant's URL (`https://host:port/tenants/<name>`).
    pub url: &'a str,
    /// The listener's CA.
    pub server_ca_pem: Option<&'a str>,
    /// The domain of the tenant's server name (`<tenant>.<domain>`), to be asked for as
    /// `tls-server-name`, which reaches the tenant whatever path a client sends; none: by path
    /// only.
    pub by_name: Option<&'a str>,
}

/// The admin kubeconfig of tenant `name` served at `endpoint`: with the listener's CA, a client
/// certificate from the tenant's CA kept in `pki`; without (plain HTTP, in tests), no
/// credential.
pub fn admin_kubeconfig(
    name: &str,
    endpoint: &Endpoint<'_>,
    pki: &Path,
) -> Result<String, CredentialError> {
    let Some(server_ca) = endpoint.server_ca_pem else {
        return Ok(kubeconfig::admin(endpoint.url, None));
    };
    let ca = TenantCa::load_or_generate(pki, name)?;
    let (cert, key) = admin_credential(&ca, pki)?;
    let server_name =
        endpoint.by_name.map(|domain| carrel_apiserver::tls::tenant_server_name(name, domain));
    Ok(kubeconfig::with_client_certificate(
        endpoint.url,
        server_name.as_deref(),
        server_ca,
        &cert,
        &key,
    ))
}

/// The admin client certificate and key (PEM) from the tenant's CA `ca`, kept in `pki` as
/// `admin.crt` and `admin.key`: issued on first use (a new key), read afterwards.
pub fn admin_credential(ca: &TenantCa, pki: &Path) -> Result<(String, String), CredentialError> {
    ca.load_or_issue_client(pki, "admin", ADMIN_USER, &[ADMIN_GROUP], ADMIN_VALIDITY)
}
