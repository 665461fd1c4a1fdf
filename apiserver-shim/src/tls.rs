//! TLS: certificates for the server, and serving the router over TLS with HTTP/1.1 and HTTP/2
//! chosen through ALPN.

use std::sync::Arc;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

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
    /// A fresh CA, and a serving certificate for `hosts` (DNS names or IP addresses) signed by it.
    pub fn generate(hosts: &[String]) -> Result<Certificates, TlsError> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name.push(rcgen::DnType::CommonName, "carrel-ca");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca, ca_key);

        let key = rcgen::KeyPair::generate()?;
        let mut leaf = rcgen::CertificateParams::new(hosts.to_vec())?;
        leaf.distinguished_name.push(rcgen::DnType::CommonName, "carrel-apiserver");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = leaf.signed_by(&key, &issuer)?;

        let admin_key = rcgen::KeyPair::generate()?;
        let mut admin = rcgen::CertificateParams::new(Vec::<String>::new())?;
        admin.distinguished_name.push(rcgen::DnType::CommonName, "carrel-admin");
        admin.distinguished_name.push(rcgen::DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &issuer)?;
        Ok(Certificates {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            admin_cert_pem: admin_cert.pem(),
            admin_key_pem: admin_key.serialize_pem(),
        })
    }

    /// A rustls server configuration offering HTTP/2 and HTTP/1.1.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes()).collect::<Result<_, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Serve `router` over TLS on `listener` until `shutdown` resolves. Each connection speaks the
/// protocol ALPN chose; connections in progress are dropped at shutdown.
pub async fn serve(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(config);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    continue;
                }
            },
        };
        // Watch events are small writes; without this Nagle's algorithm holds them back.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "setting TCP_NODELAY failed");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(tls) => tls,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let builder = auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder.serve_connection_with_upgrades(TokioIo::new(tls), service).await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
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
}
