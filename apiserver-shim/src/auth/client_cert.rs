//! Client certificates: accepted at the handshake on proof of key possession alone
//! ([`AnyClientCert`]), trusted per request against the tenant's CA ([`verify`]).
//!
//! # Why trust is deferred
//!
//! One listener serves every tenant, each with its own CA, and which tenant a connection is for is
//! known only from each request's path (`/tenants/<name>/…`), long after the handshake. A rustls
//! verifier holding every tenant's CA would let a certificate of tenant A through a connection
//! that then talks to tenant B, and would have to be rebuilt whenever a tenant comes or goes; so
//! the handshake decides nothing about trust. What it does decide is possession: the client's
//! `CertificateVerify` signature is checked against the certificate's public key, so whoever
//! presents a certificate holds its private key. Each request then runs [`verify`] with the
//! certificates rustls kept (`peer_certificates()`) and its tenant's CA as the only trust anchor;
//! a connection's certificate is never trusted because an earlier request on it was.
//!
//! Client authentication is offered, not required: clients with bearer tokens, and anonymous
//! ones, send no certificate.

use std::sync::LazyLock;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};
use x509_parser::der_parser::asn1_rs::Tag;
use x509_parser::x509::AttributeTypeAndValue;

use super::{AuthError, UserInfo, CREDENTIAL_ID_KEY};

/// The signature algorithms of rustls' ring provider, the one the server's TLS uses: for the
/// handshake signatures and for the chains [`verify`] checks.
static ALGORITHMS: LazyLock<WebPkiSupportedAlgorithms> =
    LazyLock::new(|| rustls::crypto::ring::default_provider().signature_verification_algorithms);

/// A rustls client-certificate verifier that asks for a certificate, does not require one,
/// accepts any well-formed one without a trust decision, and checks the handshake signature
/// that proves the client holds its key. See the [module documentation](self) for why, and
/// [`verify`] for the trust decision each request must then make.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use carrel_apiserver::auth::client_cert::AnyClientCert;
/// # fn f(certs: Vec<rustls::pki_types::CertificateDer<'static>>, key: rustls::pki_types::PrivateKeyDer<'static>) -> Result<(), rustls::Error> {
/// let provider = Arc::new(rustls::crypto::ring::default_provider());
/// let config = rustls::ServerConfig::builder_with_provider(provider)
///     .with_safe_default_protocol_versions()?
///     .with_client_cert_verifier(Arc::new(AnyClientCert::new()))
///     .with_single_cert(certs, key)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AnyClientCert {
    /// The verifier, with the ring provider's signature algorithms.
    pub fn new() -> AnyClientCert {
        AnyClientCert { algorithms: *ALGORITHMS }
    }
}

impl Default for AnyClientCert {
    fn default() -> AnyClientCert {
        AnyClientCert::new()
    }
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No hints: each tenant has its own CA and the handshake does not know the tenant. An empty
    /// list tells clients to send whatever certificate they have.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    /// Accepts any end-entity certificate that parses, whoever issued it and whenever it is
    /// valid: the trust decision is [`verify`]'s, per request.
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Verifies a client's certificate chain (the end entity first, then any intermediates, as
/// rustls' `peer_certificates()` gives it) against `ca`, the tenant's CA and the only trust
/// anchor, for client authentication, at `now`; and says who it names, as kube-apiserver does:
/// the user is the subject's common name (the last, if several), the groups every subject
/// organization in order, then `system:authenticated`; `extra` holds the credential id
/// `X509SHA256=<hex SHA-256 of the certificate>`.
pub fn verify(
    chain: &[CertificateDer<'_>],
    ca: &CertificateDer<'_>,
    now: UnixTime,
) -> Result<UserInfo, AuthError> {
    let (leaf, intermediates) = chain.split_first().ok_or(AuthError::NoClientCertificate)?;
    let anchor =
        webpki::anchor_from_trusted_cert(ca).map_err(|e| AuthError::InvalidCa(format!("{e:?}")))?;
    let end_entity = webpki::EndEntityCert::try_from(leaf)
        .map_err(|e| AuthError::MalformedCertificate(format!("{e:?}")))?;
    end_entity
        .verify_for_usage(
            ALGORITHMS.all,
            &[anchor],
            intermediates,
            now,
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(chain_error)?;
    let mut user = names(leaf)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, leaf);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    user.extra.insert(CREDENTIAL_ID_KEY.to_owned(), vec![format!("X509SHA256={hex}")]);
    Ok(user.with_authenticated_group())
}

/// Why webpki refused a chain, as an [`AuthError`].
fn chain_error(e: webpki::Error) -> AuthError {
    use webpki::Error as E;
    match e {
        E::CertExpired { .. } => AuthError::CertificateExpired,
        E::CertNotValidYet { .. } => AuthError::CertificateNotYetValid,
        E::BadDer
        | E::BadDerTime
        | E::TrailingData(_)
        | E::MalformedExtensions
        | E::ExtensionValueInvalid
        | E::InvalidCertValidity
        | E::InvalidSerialNumber
        | E::EmptyEkuExtension
        | E::UnsupportedCertVersion
        | E::UnsupportedCriticalExtension => AuthError::MalformedCertificate(format!("{e:?}")),
        E::UnknownIssuer => AuthError::UntrustedCertificate("not issued by the tenant's CA".into()),
        E::CaUsedAsEndEntity => {
            AuthError::UntrustedCertificate("a CA certificate is not a client certificate".into())
        }
        E::RequiredEkuNotFoundContext(_) => {
            AuthError::UntrustedCertificate("not valid for client authentication".into())
        }
        E::InvalidSignatureForPublicKey => {
            AuthError::UntrustedCertificate("a signature in the chain does not verify".into())
        }
        other => AuthError::UntrustedCertificate(format!("{other:?}")),
    }
}

/// The user a (trusted) certificate names: its subject's CN and O values, read as Go's
/// `pkix.Name` reads them (the last CN wins; every O, in order).
fn names(leaf: &CertificateDer<'_>) -> Result<UserInfo, AuthError> {
    let (_, x509) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| AuthError::MalformedCertificate(e.to_string()))?;
    let subject = x509.subject();
    let name = match subject.iter_common_name().last() {
        Some(cn) => text(cn)?,
        None => String::new(),
    };
    if name.is_empty() {
        return Err(AuthError::NoCommonName);
    }
    let groups = subject.iter_organization().map(text).collect::<Result<Vec<_>, _>>()?;
    Ok(UserInfo { name, groups, ..UserInfo::default() })
}

/// A directory string's text: PrintableString, UTF8String, IA5String, NumericString or BMPString.
fn text(attribute: &AttributeTypeAndValue<'_>) -> Result<String, AuthError> {
    if let Ok(s) = attribute.as_str() {
        return Ok(s.to_owned());
    }
    let value = attribute.attr_value();
    if value.header.tag() == Tag::BmpString && value.data.len() % 2 == 0 {
        let units = value.data.chunks_exact(2).map(|u| u16::from_be_bytes([u[0], u[1]]));
        if let Ok(s) = char::decode_utf16(units).collect::<Result<String, _>>() {
            return Ok(s);
        }
    }
    Err(AuthError::MalformedCertificate(format!(
        "subject attribute {} is not a string this server reads",
        attribute.attr_type()
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
    use rustls::client::ResolvesClientCert;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{PrivateKeyDer, ServerName};
    use rustls::sign::CertifiedKey;
    use rustls::{
        ClientConfig, ClientConnection, Connection, RootCertStore, ServerConfig, ServerConnection,
    };
    use time::OffsetDateTime;

    use super::*;
    use crate::auth::ca::TenantCa;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    fn issue(ca: &TenantCa, user: &str, groups: &[&str]) -> CertificateDer<'static> {
        der(&ca.issue_client(user, groups, Duration::from_secs(3600)).unwrap().0)
    }

    fn at(offset_secs: i64) -> UnixTime {
        let now = UnixTime::now().as_secs();
        UnixTime::since_unix_epoch(Duration::from_secs(now.saturating_add_signed(offset_secs)))
    }

    #[test]
    fn a_certificate_of_tenant_a_verifies_against_a_and_not_b() {
        let (a, b) = (TenantCa::generate("a").unwrap(), TenantCa::generate("b").unwrap());
        let cert = issue(&a, "alice", &["dev"]);
        let user = verify(std::slice::from_ref(&cert), a.cert_der(), UnixTime::now()).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.uid, "");
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        let id = &user.extra[CREDENTIAL_ID_KEY];
        assert_eq!(id.len(), 1);
        assert!(
            id[0].starts_with("X509SHA256=") && id[0].len() == "X509SHA256=".len() + 64,
            "{id:?}"
        );
        let err = verify(&[cert], b.cert_der(), UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::UntrustedCertificate(_)), "{err}");
    }

    #[test]
    fn groups_are_every_organization_in_order() {
        let ca = TenantCa::generate("a").unwrap();
        let cert = issue(&ca, "bob", &["zeta", "alpha", "system:masters", "mid"]);
        let user = ca.verify(&[cert], UnixTime::now()).unwrap();
        assert_eq!(user.groups, ["zeta", "alpha", "system:masters", "mid", "system:authenticated"]);
        let cert = issue(&ca, "carol", &[]);
        assert_eq!(ca.verify(&[cert], UnixTime::now()).unwrap().groups, ["system:authenticated"]);
    }

    #[test]
    fn self_signed_and_ca_certificates_are_untrusted() {
        let ca = TenantCa::generate("a").unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "mallory");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let self_signed = params.self_signed(&key).unwrap();
        let err = ca.verify(&[self_signed.der().clone()], UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::UntrustedCertificate(_)), "{err}");
        // A self-signed certificate copying the CA's name is still not the CA's.
        let mut forged = CertificateParams::new(Vec::<String>::new()).unwrap();
        forged.distinguished_name.push(DnType::CommonName, "carrel-a-ca");
        let forged_issuer = rcgen::Issuer::new(forged, KeyPair::generate().unwrap());
        let leaf = params.signed_by(&key, &forged_issuer).unwrap();
        let err = ca.verify(&[leaf.der().clone()], UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::UntrustedCertificate(_)), "{err}");
        // The CA's own certificate is not a client certificate.
        let err = ca.verify(&[ca.cert_der().clone()], UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::UntrustedCertificate(_)), "{err}");
    }

    #[test]
    fn a_serving_certificate_of_the_ca_is_not_a_client_certificate() {
        let ca = TenantCa::generate("a").unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, ca.issuer()).unwrap();
        let err = ca.verify(&[cert.der().clone()], UnixTime::now()).unwrap_err();
        assert_eq!(
            err,
            AuthError::UntrustedCertificate("not valid for client authentication".into())
        );
    }

    #[test]
    fn expired_and_not_yet_valid_certificates_are_refused() {
        let ca = TenantCa::generate("a").unwrap();
        let now = OffsetDateTime::now_utc();
        let (expired, _) = ca
            .issue_between(
                "alice",
                &[],
                now - time::Duration::days(2),
                now - time::Duration::days(1),
            )
            .unwrap();
        assert_eq!(
            ca.verify(&[der(&expired)], UnixTime::now()),
            Err(AuthError::CertificateExpired)
        );
        // A valid certificate, judged at other times.
        let cert = issue(&ca, "alice", &[]);
        assert_eq!(
            ca.verify(std::slice::from_ref(&cert), at(7200)),
            Err(AuthError::CertificateExpired)
        );
        assert_eq!(
            ca.verify(std::slice::from_ref(&cert), at(-3600)),
            Err(AuthError::CertificateNotYetValid)
        );
        assert!(ca.verify(&[cert], at(1800)).is_ok());
    }

    #[test]
    fn a_certificate_without_a_common_name_names_no_user() {
        let ca = TenantCa::generate("a").unwrap();
        let now = OffsetDateTime::now_utc();
        let (cert, _) = ca
            .issue_between(
                "",
                &["dev"],
                now - time::Duration::hours(1),
                now + time::Duration::hours(1),
            )
            .unwrap();
        assert_eq!(ca.verify(&[der(&cert)], UnixTime::now()), Err(AuthError::NoCommonName));
    }

    #[test]
    fn malformed_and_missing_certificates_are_refused() {
        let ca = TenantCa::generate("a").unwrap();
        assert_eq!(ca.verify(&[], UnixTime::now()), Err(AuthError::NoClientCertificate));
        let err = ca
            .verify(&[CertificateDer::from(vec![0x30, 0x03, 1, 2, 3])], UnixTime::now())
            .unwrap_err();
        assert!(matches!(err, AuthError::MalformedCertificate(_)), "{err}");
        let err = ca.verify(&[CertificateDer::from(Vec::new())], UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::MalformedCertificate(_)), "{err}");
        let cert = issue(&ca, "alice", &[]);
        let err =
            verify(&[cert], &CertificateDer::from(vec![1, 2, 3]), UnixTime::now()).unwrap_err();
        assert!(matches!(err, AuthError::InvalidCa(_)), "{err}");
    }

    #[test]
    fn the_verifier_offers_but_does_not_require_client_auth() {
        let verifier = AnyClientCert::new();
        assert!(verifier.offer_client_auth());
        assert!(!verifier.client_auth_mandatory());
        assert!(verifier.root_hint_subjects().is_empty());
        assert!(verifier
            .supported_verify_schemes()
            .contains(&SignatureScheme::ECDSA_NISTP256_SHA256));
        let garbage = CertificateDer::from(vec![1, 2, 3]);
        assert!(verifier.verify_client_cert(&garbage, &[], UnixTime::now()).is_err());
        // Any well-formed certificate passes, even one no tenant issued, even expired.
        let ca = TenantCa::generate("a").unwrap();
        let now = OffsetDateTime::now_utc();
        let (expired, _) = ca
            .issue_between("x", &[], now - time::Duration::days(2), now - time::Duration::days(1))
            .unwrap();
        assert!(verifier.verify_client_cert(&der(&expired), &[], UnixTime::now()).is_ok());
    }

    /// A server (serving a self-signed certificate for `localhost`) using [`AnyClientCert`], and
    /// the roots a client needs to trust it.
    fn server_config() -> (Arc<ServerConfig>, RootCertStore) {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(Arc::new(AnyClientCert::new()))
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        (Arc::new(config), roots)
    }

    fn client_builder(
        roots: RootCertStore,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert> {
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
    }

    /// Runs the handshake in memory, pumping bytes between the two ends; the server's error if
    /// it refused, or the client's.
    fn handshake(
        client: ClientConfig,
        server: Arc<ServerConfig>,
    ) -> Result<ServerConnection, rustls::Error> {
        let name = ServerName::try_from("localhost").unwrap();
        let mut client = Connection::Client(ClientConnection::new(Arc::new(client), name)?);
        let mut server = Connection::Server(ServerConnection::new(server)?);
        for _ in 0..16 {
            pump(&mut client, &mut server)?;
            pump(&mut server, &mut client)?;
            if !client.is_handshaking() && !server.is_handshaking() {
                // The client's last flight (its Finished, in TLS 1.3) may still be in flight.
                pump(&mut client, &mut server)?;
                let Connection::Server(server) = server else { unreachable!() };
                return Ok(server);
            }
        }
        panic!("the handshake did not finish");
    }

    fn pump(from: &mut Connection, to: &mut Connection) -> Result<(), rustls::Error> {
        let mut bytes = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut bytes).unwrap();
        }
        let mut reader = bytes.as_slice();
        while !reader.is_empty() {
            to.read_tls(&mut reader).unwrap();
            to.process_new_packets()?;
        }
        Ok(())
    }

    fn versions() -> [&'static rustls::SupportedProtocolVersion; 2] {
        [&rustls::version::TLS13, &rustls::version::TLS12]
    }

    #[test]
    fn a_client_presenting_a_certificate_completes_the_handshake_and_is_seen() {
        let ca = TenantCa::generate("a").unwrap();
        let (cert_pem, key_pem) =
            ca.issue_client("alice", &["dev"], Duration::from_secs(3600)).unwrap();
        for version in versions() {
            let (server, roots) = server_config();
            let client = client_builder(roots, version)
                .with_client_auth_cert(
                    vec![der(&cert_pem)],
                    PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap(),
                )
                .unwrap();
            let server = handshake(client, server).unwrap();
            assert_eq!(server.protocol_version(), Some(version.version));
            let chain = server.peer_certificates().expect("the client's chain").to_vec();
            assert_eq!(chain, [der(&cert_pem)]);
            // What the request layer then does with it.
            assert_eq!(ca.verify(&chain, UnixTime::now()).unwrap().name, "alice");
            let other = TenantCa::generate("b").unwrap();
            assert!(matches!(
                other.verify(&chain, UnixTime::now()),
                Err(AuthError::UntrustedCertificate(_))
            ));
        }
    }

    #[test]
    fn a_client_without_a_certificate_completes_the_handshake() {
        for version in versions() {
            let (server, roots) = server_config();
            let client = client_builder(roots, version).with_no_client_auth();
            let server = handshake(client, server).unwrap();
            assert!(server.peer_certificates().is_none());
        }
    }

    /// Presents a certificate with a key that is not its own.
    #[derive(Debug)]
    struct WrongKey(Arc<CertifiedKey>);

    impl ResolvesClientCert for WrongKey {
        fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
            Some(self.0.clone())
        }

        fn has_certs(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_client_without_the_certificates_key_is_refused_at_the_handshake() {
        let ca = TenantCa::generate("a").unwrap();
        let (cert_pem, _) = ca.issue_client("alice", &[], Duration::from_secs(3600)).unwrap();
        let (_, other_key) = ca.issue_client("mallory", &[], Duration::from_secs(3600)).unwrap();
        let signer = rustls::crypto::ring::sign::any_supported_type(
            &PrivateKeyDer::from_pem_slice(other_key.as_bytes()).unwrap(),
        )
        .unwrap();
        let stolen = Arc::new(CertifiedKey::new(vec![der(&cert_pem)], signer));
        for version in versions() {
            let (server, roots) = server_config();
            let client = client_builder(roots, version)
                .with_client_cert_resolver(Arc::new(WrongKey(stolen.clone())));
            let err = handshake(client, server).unwrap_err();
            assert!(
                matches!(err, rustls::Error::InvalidCertificate(CertificateError::BadSignature)),
                "{version:?}: {err:?}"
            );
        }
    }
}
