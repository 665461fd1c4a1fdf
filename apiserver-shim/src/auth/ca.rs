//! A tenant's client CA: generated once, kept as `ca.crt` and `ca.key` in the tenant's directory,
//! and used to issue the client certificates [`super::client_cert::verify`] accepts.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SigningKey,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use time::OffsetDateTime;

use super::{client_cert, files, AuthError, CredentialError, UserInfo};

/// The CA certificate's file in a tenant's directory.
pub const CERT_FILE: &str = "ca.crt";
/// The CA private key's file (PKCS#8 PEM, mode 0600).
pub const KEY_FILE: &str = "ca.key";

/// How long a generated CA is valid.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
/// How far before now certificates start being valid, for clocks a little behind ours (as
/// Kubernetes' CSR signer backdates).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// A tenant's client CA: its certificate and the key that signs client certificates.
pub struct TenantCa {
    cert_pem: String,
    key_pem: String,
    cert_der: CertificateDer<'static>,
    subject: String,
    not_after: OffsetDateTime,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for TenantCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("TenantCa")
            .field("subject", &self.subject)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl TenantCa {
    /// A fresh CA for `tenant`: an ECDSA P-256 key and a self-signed certificate with CN
    /// `carrel-<tenant>-ca`, valid for 10 years, that may sign end-entity certificates only
    /// (path length 0).
    pub fn generate(tenant: &str) -> Result<TenantCa, CredentialError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, format!("carrel-{tenant}-ca"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        let cert = params.self_signed(&key)?;
        TenantCa::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// The CA of a certificate and its PKCS#8 private key, both PEM. The certificate must be a
    /// CA certificate and the key its own.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<TenantCa, CredentialError> {
        TenantCa::parse(cert_pem, key_pem, CERT_FILE, KEY_FILE)
    }

    fn parse(
        cert_pem: &str,
        key_pem: &str,
        cert_what: &str,
        key_what: &str,
    ) -> Result<TenantCa, CredentialError> {
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| CredentialError::invalid(cert_what, format!("no PEM certificate: {e}")))?;
        let (_, x509) = x509_parser::parse_x509_certificate(&cert_der).map_err(|e| {
            CredentialError::invalid(cert_what, format!("malformed certificate: {e}"))
        })?;
        if !x509.is_ca() {
            return Err(CredentialError::invalid(cert_what, "not a CA certificate"));
        }
        webpki::anchor_from_trusted_cert(&cert_der).map_err(|e| {
            CredentialError::invalid(cert_what, format!("not usable as a trust anchor: {e}"))
        })?;
        let key = KeyPair::from_pem(key_pem).map_err(|e| {
            CredentialError::invalid(key_what, format!("not a PKCS#8 private key: {e}"))
        })?;
        if x509.public_key().raw != key.subject_public_key_info().as_slice() {
            return Err(CredentialError::invalid(
                key_what,
                format!("the key does not match the certificate in {cert_what}"),
            ));
        }
        let subject = x509.subject().to_string();
        let not_after = x509.validity().not_after.to_datetime();
        let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(|e| {
            CredentialError::invalid(cert_what, format!("cannot issue with it: {e}"))
        })?;
        Ok(TenantCa {
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
            cert_der: cert_der.into_owned(),
            subject,
            not_after,
            issuer,
        })
    }

    /// The CA kept in `dir` (`ca.crt` and `ca.key`).
    pub fn load(dir: &Path) -> Result<TenantCa, CredentialError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        let cert_pem = files::read(&cert_path)?;
        let key_pem = files::read(&key_path)?;
        TenantCa::parse(
            &cert_pem,
            &key_pem,
            &cert_path.display().to_string(),
            &key_path.display().to_string(),
        )
    }

    /// Writes the CA to `dir` (created, mode 0700, if missing): `ca.crt` (0644) and `ca.key`
    /// (0600), each replaced whole.
    pub fn save(&self, dir: &Path) -> Result<(), CredentialError> {
        files::create_dir(dir)?;
        // The key first: a crash between the two leaves a key without its certificate, which
        // `load` refuses, rather than a certificate whose key is lost.
        files::write(&dir.join(KEY_FILE), &self.key_pem, files::PRIVATE)?;
        files::write(&dir.join(CERT_FILE), &self.cert_pem, files::PUBLIC)
    }

    /// The CA kept in `dir`, or a new one for `tenant` saved there when `dir` holds neither file.
    /// A directory with only one of the two files is an error, never overwritten.
    pub fn load_or_generate(dir: &Path, tenant: &str) -> Result<TenantCa, CredentialError> {
        let (cert_path, key_path) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        match (files::exists(&cert_path)?, files::exists(&key_path)?) {
            (false, false) => {
                let ca = TenantCa::generate(tenant)?;
                ca.save(dir)?;
                Ok(ca)
            }
            (true, false) => Err(CredentialError::Missing { path: key_path }),
            (false, true) => Err(CredentialError::Missing { path: cert_path }),
            (true, true) => TenantCa::load(dir),
        }
    }

    /// The CA certificate, PEM (a kubeconfig's `certificate-authority-data` is not this: that is
    /// the serving CA).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER: the trust anchor for [`client_cert::verify`].
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// The CA certificate's subject, as text.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Verifies a client's chain against this CA: [`client_cert::verify`].
    pub fn verify(
        &self,
        chain: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<UserInfo, AuthError> {
        client_cert::verify(chain, &self.cert_der, now)
    }

    /// A client certificate for `user` (the subject CN) in `groups` (one subject O each, in
    /// order), valid from a few minutes ago for `valid_for` (but never past the CA's own
    /// expiry), with a fresh ECDSA P-256 key. Returns the certificate and its key, PEM.
    pub fn issue_client(
        &self,
        user: &str,
        groups: &[&str],
        valid_for: Duration,
    ) -> Result<(String, String), CredentialError> {
        if user.is_empty() {
            return Err(CredentialError::invalid("user", "a client certificate needs a user name"));
        }
        let now = OffsetDateTime::now_utc();
        let not_after = time::Duration::try_from(valid_for)
            .ok()
            .and_then(|d| now.checked_add(d))
            .map_or(self.not_after, |t| t.min(self.not_after));
        self.issue_between(user, groups, now - BACKDATE, not_after)
    }

    /// The client certificate kept as `<stem>.crt` and `<stem>.key` in `dir`, or, when there is
    /// none yet, one issued as [`TenantCa::issue_client`] does and saved there (key 0600): a
    /// credential that stays the same across restarts.
    pub fn load_or_issue_client(
        &self,
        dir: &Path,
        stem: &str,
        user: &str,
        groups: &[&str],
        valid_for: Duration,
    ) -> Result<(String, String), CredentialError> {
        let cert_path = dir.join(format!("{stem}.crt"));
        let key_path = dir.join(format!("{stem}.key"));
        if files::exists(&cert_path)? && files::exists(&key_path)? {
            return Ok((files::read(&cert_path)?, files::read(&key_path)?));
        }
        let (cert, key) = self.issue_client(user, groups, valid_for)?;
        files::create_dir(dir)?;
        files::write(&key_path, &key, files::PRIVATE)?;
        files::write(&cert_path, &cert, files::PUBLIC)?;
        Ok((cert, key))
    }

    /// [`TenantCa::issue_client`] with explicit validity; an empty `user` leaves the CN out.
    pub(crate) fn issue_between(
        &self,
        user: &str,
        groups: &[&str],
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<(String, String), CredentialError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params.signed_by(&key, &self.issuer)?;
        let der = replace_subject(cert.der(), &subject(user, groups), self.issuer.key())?;
        let cert_pem = pem_encode("CERTIFICATE", &der);
        Ok((cert_pem, key.serialize_pem()))
    }

    /// The issuer, for tests that sign unusual certificates with this CA.
    #[cfg(test)]
    pub(crate) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }
}

/// The subject `O=<group>, …, CN=<user>` (Go's order: organizations before the common name),
/// UTF8String values, one attribute per RDN; no CN when `user` is empty.
fn subject(user: &str, groups: &[&str]) -> Vec<u8> {
    const ORGANIZATION: [u8; 3] = [0x55, 0x04, 0x0a];
    const COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];
    let rdn = |oid: &[u8], value: &str| {
        let attribute =
            [der::tlv(der::OID, oid), der::tlv(der::UTF8_STRING, value.as_bytes())].concat();
        der::tlv(der::SET, &der::tlv(der::SEQUENCE, &attribute))
    };
    let mut names: Vec<u8> = groups.iter().flat_map(|g| rdn(&ORGANIZATION, g)).collect();
    if !user.is_empty() {
        names.extend(rdn(&COMMON_NAME, user));
    }
    der::tlv(der::SEQUENCE, &names)
}

/// `cert` with its subject replaced by `subject`, signed again by `ca_key`.
///
/// rcgen keeps one value per attribute type in a name (rustls/rcgen#81), and Kubernetes takes a
/// user's groups from every O of the subject; so rcgen makes the certificate (validity, key,
/// extensions, serial) and this puts in the subject with all of them. The certificate is
/// `SEQUENCE { tbsCertificate, signatureAlgorithm, signature BIT STRING }`, and the subject the
/// sixth field of `tbsCertificate` (after `[0] version`, serial, signature, issuer, validity).
fn replace_subject(
    cert: &[u8],
    subject: &[u8],
    ca_key: &KeyPair,
) -> Result<Vec<u8>, CredentialError> {
    let layout = || CredentialError::invalid("issued certificate", "unexpected DER layout");
    let outer = der::read(cert)
        .filter(|(t, rest)| t.tag == der::SEQUENCE && rest.is_empty())
        .ok_or_else(layout)?
        .0;
    let parts = der::elements(outer.content).ok_or_else(layout)?;
    let [tbs, algorithm, _signature] = parts.as_slice() else {
        return Err(layout());
    };
    let mut fields = der::elements(tbs.content).ok_or_else(layout)?;
    let subject_index = if fields.first().is_some_and(|f| f.tag == der::VERSION) { 5 } else { 4 };
    let field = fields.get_mut(subject_index).ok_or_else(layout)?;
    field.whole = subject;
    let tbs = der::tlv(
        der::SEQUENCE,
        &fields.iter().flat_map(|f| f.whole.iter().copied()).collect::<Vec<_>>(),
    );
    let signature = ca_key.sign(&tbs)?;
    let bits = [&[0u8][..], &signature].concat();
    Ok(der::tlv(
        der::SEQUENCE,
        &[tbs.as_slice(), algorithm.whole, &der::tlv(der::BIT_STRING, &bits)].concat(),
    ))
}

/// PEM with 64-character lines.
fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// Just enough DER to take a certificate apart and put it back together.
mod der {
    pub(super) const BIT_STRING: u8 = 0x03;
    pub(super) const OID: u8 = 0x06;
    pub(super) const UTF8_STRING: u8 = 0x0c;
    pub(super) const SEQUENCE: u8 = 0x30;
    pub(super) const SET: u8 = 0x31;
    /// `[0] EXPLICIT`, the version of a `TBSCertificate`.
    pub(super) const VERSION: u8 = 0xa0;

    /// One tag-length-value: its tag, the whole encoding, and the value.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Tlv<'a> {
        pub(super) tag: u8,
        pub(super) whole: &'a [u8],
        pub(super) content: &'a [u8],
    }

    /// The encoding of `content` under `tag` (single-byte tags, definite lengths).
    pub(super) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match u8::try_from(content.len()) {
            Ok(len) if len < 0x80 => out.push(len),
            _ => {
                let len = content.len().to_be_bytes();
                let skip = len.iter().take_while(|b| **b == 0).count();
                // At most 8 length bytes: the count fits the low seven bits.
                out.push(0x80 | (len.len() - skip) as u8);
                out.extend_from_slice(&len[skip..]);
            }
        }
        out.extend_from_slice(content);
        out
    }

    /// The first TLV of `input` and what follows it; `None` if it is cut short.
    pub(super) fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > size_of::<usize>() || rest.len() < n {
                return None;
            }
            let (bytes, rest) = rest.split_at(n);
            (bytes.iter().fold(0usize, |len, b| (len << 8) | usize::from(*b)), rest)
        };
        if rest.len() < len {
            return None;
        }
        let header = input.len() - rest.len();
        let (content, after) = rest.split_at(len);
        Some((Tlv { tag, whole: &input[..header + len], content }, after))
    }

    /// Every TLV of `input`, which they must fill exactly.
    pub(super) fn elements(mut input: &[u8]) -> Option<Vec<Tlv<'_>>> {
        let mut out = Vec::new();
        while !input.is_empty() {
            let (tlv, rest) = read(input)?;
            out.push(tlv);
            input = rest;
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn parse(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn a_generated_ca_is_a_ten_year_ca_named_for_its_tenant() {
        let ca = TenantCa::generate("acme").unwrap();
        let (_, x509) = x509_parser::parse_x509_certificate(ca.cert_der()).unwrap();
        assert!(x509.is_ca());
        assert_eq!(ca.subject(), "CN=carrel-acme-ca");
        let bc = x509.basic_constraints().unwrap().unwrap().value;
        assert_eq!(bc.path_len_constraint, Some(0));
        let years = (x509.validity().not_after.timestamp() - x509.validity().not_before.timestamp())
            as f64
            / (365.0 * 24.0 * 3600.0);
        assert!((9.99..10.01).contains(&years), "{years} years");
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!format!("{ca:?}").contains("PRIVATE"));
    }

    #[test]
    fn issued_certificates_carry_the_user_and_groups_and_a_client_auth_usage() {
        let ca = TenantCa::generate("acme").unwrap();
        let (cert_pem, key_pem) =
            ca.issue_client("alice", &["dev", "ops"], Duration::from_secs(3600)).unwrap();
        assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        let der = parse(&cert_pem);
        let (_, x509) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(x509.subject().to_string(), "O=dev, O=ops, CN=alice");
        assert_eq!(x509.issuer().to_string(), "CN=carrel-acme-ca");
        assert!(!x509.is_ca());
        assert!(x509.extended_key_usage().unwrap().unwrap().value.client_auth);
        let lifetime =
            x509.validity().not_after.timestamp() - x509.validity().not_before.timestamp();
        assert_eq!(lifetime, 3600 + 300);
        // The key is the certificate's.
        let key = KeyPair::from_pem(&key_pem).unwrap();
        assert_eq!(x509.public_key().raw, key.subject_public_key_info().as_slice());
        // An empty user is refused; an unbounded validity stops at the CA's own expiry.
        assert!(matches!(
            ca.issue_client("", &[], Duration::from_secs(1)),
            Err(CredentialError::Invalid { .. })
        ));
        let (forever, _) = ca.issue_client("bob", &[], Duration::MAX).unwrap();
        let forever = parse(&forever);
        let (_, forever) = x509_parser::parse_x509_certificate(&forever).unwrap();
        let (_, ca_x509) = x509_parser::parse_x509_certificate(ca.cert_der()).unwrap();
        assert_eq!(
            forever.validity().not_after.timestamp(),
            ca_x509.validity().not_after.timestamp()
        );
    }

    #[test]
    fn ca_files_round_trip_through_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let tenant_dir = dir.path().join("tenants").join("acme");
        let ca = TenantCa::generate("acme").unwrap();
        ca.save(&tenant_dir).unwrap();
        let key_mode =
            std::fs::metadata(tenant_dir.join(KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(key_mode, 0o600);
        let loaded = TenantCa::load(&tenant_dir).unwrap();
        assert_eq!(loaded.cert_pem(), ca.cert_pem());
        assert_eq!(loaded.cert_der(), ca.cert_der());
        // Certificates the loaded CA issues verify against the original, and the other way round.
        let now = UnixTime::now();
        let (cert, _) = loaded.issue_client("alice", &["dev"], Duration::from_secs(60)).unwrap();
        assert_eq!(ca.verify(&[parse(&cert)], now).unwrap().name, "alice");
        let (cert, _) = ca.issue_client("bob", &[], Duration::from_secs(60)).unwrap();
        assert_eq!(loaded.verify(&[parse(&cert)], now).unwrap().name, "bob");
    }

    #[test]
    fn load_rejects_a_missing_or_corrupt_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let err = TenantCa::load(&missing).unwrap_err();
        assert!(
            matches!(&err, CredentialError::Missing { path } if path.ends_with("ca.crt")),
            "{err}"
        );
        assert!(err.to_string().contains("nowhere/ca.crt: no such file"), "{err}");

        let ca = TenantCa::generate("acme").unwrap();
        ca.save(dir.path()).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), "garbage").unwrap();
        let err = TenantCa::load(dir.path()).unwrap_err();
        assert!(
            matches!(err, CredentialError::Invalid { ref what, .. } if what.ends_with("ca.crt")),
            "{err}"
        );

        ca.save(dir.path()).unwrap();
        std::fs::write(
            dir.path().join(KEY_FILE),
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let err = TenantCa::load(dir.path()).unwrap_err();
        assert!(
            matches!(err, CredentialError::Invalid { ref what, .. } if what.ends_with("ca.key")),
            "{err}"
        );

        // Another CA's key does not match the certificate.
        let other = TenantCa::generate("other").unwrap();
        std::fs::write(dir.path().join(KEY_FILE), &other.key_pem).unwrap();
        let err = TenantCa::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");

        // A leaf certificate is no CA.
        let (leaf, leaf_key) = ca.issue_client("alice", &[], Duration::from_secs(60)).unwrap();
        let err = TenantCa::from_pem(&leaf, &leaf_key).unwrap_err();
        assert!(err.to_string().contains("not a CA certificate"), "{err}");
    }

    #[test]
    fn load_or_generate_generates_once_and_never_overwrites_half_a_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = TenantCa::load_or_generate(dir.path(), "acme").unwrap();
        let second = TenantCa::load_or_generate(dir.path(), "acme").unwrap();
        assert_eq!(first.cert_pem(), second.cert_pem());
        std::fs::remove_file(dir.path().join(CERT_FILE)).unwrap();
        let err = TenantCa::load_or_generate(dir.path(), "acme").unwrap_err();
        assert!(
            matches!(err, CredentialError::Missing { ref path } if path.ends_with("ca.crt")),
            "{err}"
        );
        assert!(dir.path().join(KEY_FILE).exists(), "the lone key is kept");
    }

    #[test]
    fn der_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 65_535, 65_536] {
            let content = vec![7u8; len];
            let encoded = der::tlv(der::SEQUENCE, &content);
            let (tlv, rest) = der::read(&encoded).unwrap();
            assert!(rest.is_empty());
            assert_eq!(
                (tlv.tag, tlv.content.len(), tlv.whole.len()),
                (der::SEQUENCE, len, encoded.len())
            );
        }
        assert!(der::read(&[0x30, 0x82, 0x01]).is_none());
        assert!(der::read(&[0x30, 0x05, 0x00]).is_none());
        assert!(der::read(&[0x30, 0x80]).is_none());
    }
}
