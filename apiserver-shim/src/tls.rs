//! TLS: certificates for the server, and serving the router over TLS with HTTP/1.1 and HTTP/2
//! chosen through ALPN.

use std::sync::Arc;

use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// What can go wrong setting up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or certificate failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM certificate or key could not be read.
    #[error("reading PEM: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// rustls refused the certificate or key.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// Saved certificates could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The files [`Certificates::load_or_generate`] keeps, in the order of the fields they hold.
const FILES: [&str; 5] = ["ca.crt", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key"];

/// Write a file only its owner can read.
fn write_private(path: &std::path::Path, content: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content.as_bytes())?;
    file.sync_all()
}

/// The domain tenants are served under by TLS server name unless a listener is given another
/// ([`crate::http::Clusters::set_tenant_domain`]): tenant `team-a` answers requests whose
/// server name is `team-a.tenants.carrel.local`, whatever their path. The serving certificate
/// [`Certificates::generate`] makes names `*.` this domain; a kubeconfig sets it as
/// `tls-server-name`, which needs no DNS. A domain of one's own whose wildcard DNS names the
/// listener lets clients reach `https://<tenant>.<domain>` directly.
pub const TENANT_DOMAIN: &str = "tenants.carrel.local";

/// The names in-cluster clients know the API by, which kube-apiserver's serving certificate
/// carries: the `kubernetes` Service's, short and qualified.
pub const IN_CLUSTER_NAMES: [&str; 4] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// The TLS server name of tenant `name` under `domain` (by default [`TENANT_DOMAIN`]).
pub fn tenant_server_name(name: &str, domain: &str) -> String {
    format!("{name}.{domain}")
}

/// The user name of the admin certificate [`Certificates::generate`] makes.
pub const ADMIN_USER: &str = "carrel-admin";
/// Its group: every permission.
pub const ADMIN_GROUP: &str = crate::rbac::SYSTEM_MASTERS;

/// A CA's certificate and key, as PEM: what serving and client certificates are issued from.
#[derive(Clone)]
pub struct Ca {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("cert_pem", &self.cert_pem).finish_non_exhaustive()
    }
}

impl Ca {
    /// A fresh CA.
    pub fn generate() -> Result<Ca, TlsError> {
        let key = rcgen::KeyPair::generate()?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(rcgen::DnType::CommonName, "carrel-ca");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let cert = ca.self_signed(&key)?;
        Ok(Ca { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    fn issuer(&self) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>, TlsError> {
        let key = rcgen::KeyPair::from_pem(&self.key_pem)?;
        Ok(rcgen::Issuer::from_ca_cert_pem(&self.cert_pem, key)?)
    }

    /// A client certificate for user `user` in group `group`, and its key, as PEM.
    pub fn client(&self, user: &str, group: &str) -> Result<(String, String), TlsError> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, user);
        params.distinguished_name.push(rcgen::DnType::OrganizationName, group);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer()?)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A CA and a serving certificate it signed, as PEM.
#[derive(Clone, Debug)]
pub struct Certificates {
    /// The CA certificate clients trust (a kubeconfig's `certificate-authority-data`).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
    /// A client certificate for the cluster admin (CN `carrel-admin`, O `system:masters`),
    /// signed by the same CA, and its key. Empty when the serving certificate came from files.
    pub admin_cert_pem: String,
    /// The admin certificate's private key.
    pub admin_key_pem: String,
}

impl Certificates {
    /// A fresh CA, and a serving certificate for `hosts` (DNS names or IP addresses) and every
    /// tenant's server name (`*.`[`TENANT_DOMAIN`]) signed by it.
    pub fn generate(hosts: &[String]) -> Result<Certificates, TlsError> {
        let ca = Ca::generate()?;
        Certificates::issue(&ca, hosts)
    }

    /// A serving certificate for `hosts` and every tenant's server name (`*.`[`TENANT_DOMAIN`]),
    /// and an admin certificate, from `ca`: what each of several replicas sharing one CA serves
    /// with, so that a kubeconfig trusting the CA trusts all of them.
    pub fn issue(ca: &Ca, hosts: &[String]) -> Result<Certificates, TlsError> {
        let issuer = ca.issuer()?;
        let key = rcgen::KeyPair::generate()?;
        let mut names = hosts.to_vec();
        names.push(format!("*.{TENANT_DOMAIN}"));
        // Each name once, whether or not a caller named the default domain itself.
        names.sort();
        names.dedup();
        let mut leaf = rcgen::CertificateParams::new(names)?;
        leaf.distinguished_name.push(rcgen::DnType::CommonName, "carrel-apiserver");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &issuer)?;
        let (admin_cert_pem, admin_key_pem) = ca.client(ADMIN_USER, ADMIN_GROUP)?;
        Ok(Certificates {
            ca_pem: ca.cert_pem.clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            admin_cert_pem,
            admin_key_pem,
        })
    }

    /// The certificates saved in `dir`, or fresh ones for `hosts` saved there (keys readable by
    /// the owner only), so that kubeconfigs written for them stay valid across restarts.
    pub fn load_or_generate(
        dir: &std::path::Path,
        hosts: &[String],
    ) -> Result<Certificates, TlsError> {
        let io = |path: std::path::PathBuf| move |source| TlsError::Io { path, source };
        if FILES.iter().all(|f| dir.join(f).exists()) {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(io(dir.join(f)));
            let certs = Certificates {
                ca_pem: read(FILES[0])?,
                cert_pem: read(FILES[1])?,
                key_pem: read(FILES[2])?,
                admin_cert_pem: read(FILES[3])?,
                admin_key_pem: read(FILES[4])?,
            };
            certs.server_config()?;
            return Ok(certs);
        }
        let certs = Certificates::generate(hosts)?;
        std::fs::create_dir_all(dir).map_err(io(dir.to_owned()))?;
        let contents = [
            &certs.ca_pem,
            &certs.cert_pem,
            &certs.key_pem,
            &certs.admin_cert_pem,
            &certs.admin_key_pem,
        ];
        for (file, content) in FILES.iter().zip(contents) {
            let path = dir.join(file);
            write_private(&path, content).map_err(io(path.clone()))?;
        }
        Ok(certs)
    }

    /// Whether the serving certificate is valid for server name `name` (certificates saved
    /// before tenants were served by name do not cover their names).
    pub fn covers(&self, name: &str) -> bool {
        let Some(Ok(der)) = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).next() else {
            return false;
        };
        let Ok(cert) = webpki::EndEntityCert::try_from(&der) else { return false };
        let Ok(name) = rustls::pki_types::ServerName::try_from(name) else { return false };
        cert.verify_is_valid_for_subject_name(&name).is_ok()
    }

    /// The CA certificate, DER-encoded: what the host's client certificates chain to.
    pub fn ca_der(&self) -> Result<CertificateDer<'static>, TlsError> {
        Ok(CertificateDer::from_pem_slice(self.ca_pem.as_bytes())?)
    }

    /// A rustls server configuration offering HTTP/2 and HTTP/1.1, asking clients for a
    /// certificate without requiring one: which CA a client certificate must chain to depends on
    /// the cluster the request is for, so the request layer decides
    /// ([`crate::auth::client_cert::AnyClientCert`]).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(Arc::new(crate::auth::client_cert::AnyClientCert::new()))
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Serve `router` over TLS on `listener` until `shutdown` resolves, with the default
/// [`Limits`](crate::listener::Limits). Each connection speaks the protocol ALPN chose;
/// connections in progress are dropped at shutdown.
pub async fn serve(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::listener::serve(listener, Some(config), router, Default::default(), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_make_a_server_config_with_alpn() {
        let certs = Certificates::generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let config = certs.server_config().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
    }

    #[test]
    fn the_serving_certificate_covers_every_tenants_server_name() {
        let certs = Certificates::generate(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        assert!(certs.covers("localhost"));
        assert!(certs.covers(&tenant_server_name("team-a", TENANT_DOMAIN)));
        // One label under the domain only, and nothing else.
        assert!(!certs.covers(&format!("a.b.{TENANT_DOMAIN}")));
        assert!(!certs.covers("team-a.example.com"));
    }

    #[test]
    fn saved_certificates_come_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let first = Certificates::load_or_generate(&pki, &["127.0.0.1".into()]).unwrap();
        let again = Certificates::load_or_generate(&pki, &["127.0.0.1".into()]).unwrap();
        assert_eq!(first.ca_pem, again.ca_pem);
        assert_eq!(first.admin_key_pem, again.admin_key_pem);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(pki.join("admin.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(pki.join("apiserver.crt"), "garbage").unwrap();
        assert!(Certificates::load_or_generate(&pki, &[]).is_err());
    }
}
