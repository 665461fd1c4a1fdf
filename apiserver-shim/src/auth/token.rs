//! Service-account tokens: ES256 JWTs shaped as Kubernetes' bound service-account tokens, signed
//! and verified with a tenant's own key (`sa.key`).
//!
//! ES256 (ECDSA P-256, SHA-256) rather than RS256: ring, the crypto this server already links
//! for TLS, can generate P-256 keys but not RSA ones; the keys and signatures are small; and
//! Kubernetes accepts ECDSA service-account keys, so a tenant's tokens look like any cluster's.
//!
//! The JWS is made and checked here on ring directly rather than through a JWT crate: a single
//! algorithm is ever accepted (`alg` must be `ES256`; `none`, HMAC and anything else are refused
//! before any key is used), the claims decode into strict types (a time that is not a number is a
//! malformed token, never a missing check), and the checks are Kubernetes' own: the issuer, at
//! least one shared audience, `exp`, `nbf` and `iat` with a minute of leeway for clock skew.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rcgen::PublicKeyData;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use serde::{Deserialize, Deserializer, Serialize};

use super::{files, AuthError, CredentialError, UserInfo, AUTHENTICATED_GROUP, CREDENTIAL_ID_KEY};

/// The signing key's file in a tenant's directory (PKCS#8 PEM, mode 0600).
pub const KEY_FILE: &str = "sa.key";

/// The clock skew allowed on `exp`, `nbf` and `iat` (go-jose's default leeway, which
/// kube-apiserver uses).
pub const LEEWAY: Duration = Duration::from_secs(60);

/// The group of every service account.
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";

/// The `extra` key holding the name of the pod a token is bound to (the `extra` keys are named as
/// Kubernetes names them).
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
/// The uid of the pod a token is bound to.
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
/// The name of the node a token's pod runs on (or the node it is bound to).
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
/// The uid of that node.
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";

const ALGORITHM: &str = "ES256";

/// The claims of a bound service-account token, laid out as kube-apiserver writes them
/// (`pkg/serviceaccount/claims.go`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The issuer: the tenant's service-account issuer URL.
    pub iss: String,
    /// `system:serviceaccount:<namespace>:<name>`.
    pub sub: String,
    /// The audiences the token is for. Written as a list; read from a list or a single string.
    #[serde(deserialize_with = "one_or_many")]
    pub aud: Vec<String>,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// Issue time, seconds since the epoch.
    pub iat: i64,
    /// Start of validity, seconds since the epoch (the issue time).
    pub nbf: i64,
    /// A unique id for the token (a UUID): the credential id of requests made with it.
    pub jti: String,
    /// What the token is bound to.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// The `kubernetes.io` claim: the service account, and the objects the token is bound to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub serviceaccount: ObjectRef,
    /// The pod the token is bound to: it is valid only while that pod exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The node of the bound pod (or the node the token is bound to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
}

/// An object a token names: its name and uid.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The object's name.
    pub name: String,
    /// The object's uid.
    pub uid: String,
}

impl ObjectRef {
    /// The reference to `name` with `uid`.
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> ObjectRef {
        ObjectRef { name: name.into(), uid: uid.into() }
    }
}

/// `system:serviceaccount:<namespace>:<name>`, a service account's user name.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}

impl TokenClaims {
    /// The claims of a token for `service_account` in `namespace`, from `issuer`, for
    /// `audiences`, issued at `now` and valid for `valid_for`, with a fresh `jti`.
    pub fn new(
        issuer: &str,
        namespace: &str,
        service_account: ObjectRef,
        audiences: Vec<String>,
        now: SystemTime,
        valid_for: Duration,
    ) -> TokenClaims {
        let iat = unix_seconds(now);
        let lifetime = i64::try_from(valid_for.as_secs()).unwrap_or(i64::MAX);
        TokenClaims {
            iss: issuer.to_owned(),
            sub: service_account_user(namespace, &service_account.name),
            aud: audiences,
            exp: iat.saturating_add(lifetime),
            iat,
            nbf: iat,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: KubernetesClaims {
                namespace: namespace.to_owned(),
                serviceaccount: service_account,
                pod: None,
                node: None,
            },
        }
    }

    /// These claims bound to `pod` (and, when known, the node it runs on).
    pub fn bound_to_pod(mut self, pod: ObjectRef, node: Option<ObjectRef>) -> TokenClaims {
        self.kubernetes.pod = Some(pod);
        self.kubernetes.node = node;
        self
    }

    /// The user the token authenticates, as kube-apiserver makes it: named `sub`, with the
    /// service account's uid, in `system:serviceaccounts`, `system:serviceaccounts:<ns>` and
    /// `system:authenticated`; `extra` holds the credential id `JTI=<jti>` and the bound pod and
    /// node.
    pub fn user(&self) -> UserInfo {
        let k = &self.kubernetes;
        let mut extra = BTreeMap::new();
        if !self.jti.is_empty() {
            extra.insert(CREDENTIAL_ID_KEY.to_owned(), vec![format!("JTI={}", self.jti)]);
        }
        let mut bound = |object: &Option<ObjectRef>, name_key: &str, uid_key: &str| {
            if let Some(o) = object {
                if !o.name.is_empty() {
                    extra.insert(name_key.to_owned(), vec![o.name.clone()]);
                }
                if !o.uid.is_empty() {
                    extra.insert(uid_key.to_owned(), vec![o.uid.clone()]);
                }
            }
        };
        bound(&k.pod, POD_NAME_KEY, POD_UID_KEY);
        bound(&k.node, NODE_NAME_KEY, NODE_UID_KEY);
        UserInfo {
            name: self.sub.clone(),
            uid: k.serviceaccount.uid.clone(),
            groups: vec![
                SERVICE_ACCOUNTS_GROUP.to_owned(),
                format!("{SERVICE_ACCOUNTS_GROUP}:{}", k.namespace),
                AUTHENTICATED_GROUP.to_owned(),
            ],
            extra,
        }
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// The JOSE header this signer writes and accepts.
#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    /// Extensions the token says must be understood: this server understands none.
    #[serde(default, skip_serializing)]
    crit: Option<serde_json::Value>,
}

/// A tenant's service-account token key: an ECDSA P-256 key pair that signs tokens ([`issue`])
/// and checks them ([`verify`]).
///
/// [`issue`]: Signer::issue
/// [`verify`]: Signer::verify
pub struct Signer {
    key: EcdsaKeyPair,
    key_pem: String,
    public_key_pem: String,
    key_id: String,
    rng: SystemRandom,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Signer").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

impl Signer {
    /// A fresh ECDSA P-256 key.
    pub fn generate() -> Result<Signer, CredentialError> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        Signer::from_pem(&key.serialize_pem())
    }

    /// The signer of an ECDSA P-256 private key in PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, as
    /// `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it).
    pub fn from_pem(key_pem: &str) -> Result<Signer, CredentialError> {
        Signer::parse(key_pem, KEY_FILE)
    }

    fn parse(key_pem: &str, what: &str) -> Result<Signer, CredentialError> {
        let not_p256 = |reason: String| {
            CredentialError::invalid(
                what,
                format!("not an ECDSA P-256 private key in PKCS#8 PEM: {reason}"),
            )
        };
        let der = match PrivateKeyDer::from_pem_slice(key_pem.as_bytes()) {
            Ok(PrivateKeyDer::Pkcs8(der)) => der,
            Ok(_) => return Err(not_p256("a SEC1 or PKCS#1 key; convert it to PKCS#8".into())),
            Err(e) => return Err(not_p256(e.to_string())),
        };
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            der.secret_pkcs8_der(),
            &rng,
        )
        .map_err(|e| not_p256(e.to_string()))?;
        let public = rcgen::KeyPair::try_from(der.secret_pkcs8_der())
            .map_err(|e| not_p256(e.to_string()))?;
        // Kubernetes' key id: the SHA-256 of the DER public key (SPKI), base64url.
        let spki = public.subject_public_key_info();
        let key_id = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(Signer {
            key,
            key_pem: key_pem.to_owned(),
            public_key_pem: public.public_key_pem(),
            key_id,
            rng,
        })
    }

    /// The key kept in `dir` (`sa.key`).
    pub fn load(dir: &Path) -> Result<Signer, CredentialError> {
        let path = dir.join(KEY_FILE);
        Signer::parse(&files::read(&path)?, &path.display().to_string())
    }

    /// Writes the key to `dir` (created, mode 0700, if missing) as `sa.key`, mode 0600.
    pub fn save(&self, dir: &Path) -> Result<(), CredentialError> {
        files::create_dir(dir)?;
        files::write(&dir.join(KEY_FILE), &self.key_pem, files::PRIVATE)
    }

    /// The key kept in `dir`, or a new one saved there when there is none.
    pub fn load_or_generate(dir: &Path) -> Result<Signer, CredentialError> {
        if files::exists(&dir.join(KEY_FILE))? {
            return Signer::load(dir);
        }
        let signer = Signer::generate()?;
        signer.save(dir)?;
        Ok(signer)
    }

    /// The key id written in every token's header: base64url of the SHA-256 of the public key's
    /// DER, as Kubernetes derives it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The public key, PEM (`-----BEGIN PUBLIC KEY-----`): what verifies this tenant's tokens.
    pub fn public_key_pem(&self) -> &str {
        &self.public_key_pem
    }

    /// A signed token carrying `claims`: `base64url(header).base64url(claims).base64url(r‖s)`.
    pub fn issue(&self, claims: &TokenClaims) -> Result<String, CredentialError> {
        let header =
            Header { alg: ALGORITHM.to_owned(), kid: Some(self.key_id.clone()), crit: None };
        let header = serde_json::to_vec(&header).map_err(|_| CredentialError::Sign)?;
        let payload = serde_json::to_vec(claims).map_err(|_| CredentialError::Sign)?;
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(payload));
        let signature = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| CredentialError::Sign)?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }

    /// The claims of `token` if this key signed it, its issuer is `issuer`, it is valid now and
    /// it is for at least one of `audiences` (none accepted: every token refused).
    pub fn verify(
        &self,
        token: &str,
        issuer: &str,
        audiences: &[&str],
    ) -> Result<TokenClaims, AuthError> {
        self.verify_at(token, issuer, audiences, SystemTime::now())
    }

    /// [`Signer::verify`], judged at `now`.
    pub fn verify_at(
        &self,
        token: &str,
        issuer: &str,
        audiences: &[&str],
        now: SystemTime,
    ) -> Result<TokenClaims, AuthError> {
        let malformed = |reason: &str| AuthError::MalformedToken(reason.to_owned());
        let mut parts = token.split('.');
        let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("not a JWS in compact form (three dot-separated parts)"));
        };
        let header =
            URL_SAFE_NO_PAD.decode(header_b64).map_err(|_| malformed("header is not base64url"))?;
        let header: Header = serde_json::from_slice(&header)
            .map_err(|_| malformed("header is not a JOSE header"))?;
        if header.alg != ALGORITHM {
            return Err(malformed(&format!(
                "algorithm {:?} is not accepted, only ES256",
                header.alg
            )));
        }
        if header.crit.is_some() {
            return Err(malformed("critical header extensions are not supported"));
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature_b64)
            .map_err(|_| malformed("signature is not base64url"))?;
        let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        )
        .verify(signing_input.as_bytes(), &signature)
        .map_err(|_| AuthError::BadSignature)?;

        // Signed by this tenant's key: the claims can be read.
        let payload = URL_SAFE_NO_PAD
            .decode(payload_b64)
            .map_err(|_| malformed("payload is not base64url"))?;
        let claims: TokenClaims = serde_json::from_slice(&payload).map_err(|e| {
            AuthError::MalformedToken(format!("claims are not service-account claims: {e}"))
        })?;
        if claims.iss != issuer {
            return Err(AuthError::WrongIssuer(claims.iss));
        }
        let now = unix_seconds(now);
        let leeway = i64::try_from(LEEWAY.as_secs()).unwrap_or(0);
        if now > claims.exp.saturating_add(leeway) {
            return Err(AuthError::TokenExpired);
        }
        if claims.nbf > now.saturating_add(leeway) || claims.iat > now.saturating_add(leeway) {
            return Err(AuthError::TokenNotYetValid);
        }
        if !claims.aud.iter().any(|a| audiences.contains(&a.as_str())) {
            return Err(AuthError::AudienceMismatch {
                token: claims.aud,
                accepted: audiences.iter().map(|a| (*a).to_owned()).collect(),
            });
        }
        let k = &claims.kubernetes;
        if k.namespace.is_empty()
            || k.serviceaccount.name.is_empty()
            || k.serviceaccount.uid.is_empty()
        {
            return Err(malformed("the kubernetes.io claim names no service account"));
        }
        if claims.sub != service_account_user(&k.namespace, &k.serviceaccount.name) {
            return Err(malformed("sub does not name the token's service account"));
        }
        Ok(claims)
    }
}

/// The issuer of tenant `tenant`'s service-account tokens (and their default audience).
pub fn tenant_issuer(tenant: &str) -> String {
    format!("{TENANT_ISSUER_PREFIX}{tenant}")
}

/// What every tenant's token issuer starts with; the tenant's name follows.
pub const TENANT_ISSUER_PREFIX: &str = "https://kubernetes.default.svc/tenants/";

/// The tenant whose issuer `token` (a JWT) names, read without verifying anything: where to send
/// a request that names no tenant otherwise (an in-cluster client's, which sends no path prefix),
/// for that tenant to verify it with its own key. `None` for anything else.
pub fn claimed_tenant(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let tenant = claims.get("iss")?.as_str()?.strip_prefix(TENANT_ISSUER_PREFIX)?;
    let label = !tenant.is_empty()
        && tenant.len() <= 63
        && tenant.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    label.then(|| tenant.to_owned())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const ISSUER: &str = "https://carrel.example/tenants/acme";
    const API: &str = "https://kubernetes.default.svc";

    fn claims(valid_for: Duration) -> TokenClaims {
        TokenClaims::new(
            ISSUER,
            "default",
            ObjectRef::new("builder", "sa-uid"),
            vec![API.to_owned(), "vault".to_owned()],
            SystemTime::now(),
            valid_for,
        )
    }

    fn hour() -> Duration {
        Duration::from_secs(3600)
    }

    #[test]
    fn a_tokens_claimed_tenant_is_read_from_its_issuer() {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::load_or_generate(dir.path()).unwrap();
        let claim = |issuer: &str| {
            let claims = TokenClaims::new(
                issuer,
                "default",
                ObjectRef::new("builder", "sa-uid"),
                vec![API.to_owned()],
                SystemTime::now(),
                hour(),
            );
            claimed_tenant(&signer.issue(&claims).unwrap())
        };
        assert_eq!(claim(&tenant_issuer("team-a")).as_deref(), Some("team-a"));
        assert_eq!(claim(API), None, "the host's own tokens name no tenant");
        assert_eq!(claim(&tenant_issuer("../host")), None);
        assert_eq!(claim(&tenant_issuer("")), None);
        assert_eq!(claimed_tenant("not-a-jwt"), None);
        assert_eq!(claimed_tenant("a.%%%.c"), None);
    }

    /// A token with `header` and `payload` as given (JSON), signed by `signer`.
    fn sign_raw(
        signer: &Signer,
        header: &serde_json::Value,
        payload: &serde_json::Value,
    ) -> String {
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        let signature = signer.key.sign(&signer.rng, input.as_bytes()).unwrap();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    #[test]
    fn issued_tokens_verify_and_name_their_service_account() {
        let signer = Signer::generate().unwrap();
        let pod = ObjectRef::new("builder-7f9", "pod-uid");
        let claims = claims(hour()).bound_to_pod(pod, Some(ObjectRef::new("node-1", "node-uid")));
        let token = signer.issue(&claims).unwrap();
        let verified = signer.verify(&token, ISSUER, &[API]).unwrap();
        assert_eq!(verified, claims);
        assert_eq!(verified.sub, "system:serviceaccount:default:builder");
        assert_eq!(verified.exp - verified.iat, 3600);
        assert_eq!(verified.nbf, verified.iat);
        assert!(uuid::Uuid::parse_str(&verified.jti).is_ok());

        let user = verified.user();
        assert_eq!(user.name, "system:serviceaccount:default:builder");
        assert_eq!(user.uid, "sa-uid");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
        );
        assert_eq!(user.extra[CREDENTIAL_ID_KEY], [format!("JTI={}", claims.jti)]);
        assert_eq!(user.extra[POD_NAME_KEY], ["builder-7f9"]);
        assert_eq!(user.extra[POD_UID_KEY], ["pod-uid"]);
        assert_eq!(user.extra[NODE_NAME_KEY], ["node-1"]);
        assert_eq!(user.extra[NODE_UID_KEY], ["node-uid"]);

        // The wire layout is Kubernetes'.
        let mut parts = token.split('.');
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap())
                .unwrap();
        assert_eq!(header, serde_json::json!({"alg": "ES256", "kid": signer.key_id()}));
        let payload: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap())
                .unwrap();
        assert_eq!(payload["aud"], serde_json::json!([API, "vault"]));
        assert_eq!(
            payload["kubernetes.io"],
            serde_json::json!({
                "namespace": "default",
                "serviceaccount": {"name": "builder", "uid": "sa-uid"},
                "pod": {"name": "builder-7f9", "uid": "pod-uid"},
                "node": {"name": "node-1", "uid": "node-uid"},
            })
        );
        assert_eq!(URL_SAFE_NO_PAD.decode(parts.next().unwrap()).unwrap().len(), 64);
        // An unbound token has no pod and no pod keys.
        let unbound =
            signer.verify(&signer.issue(&self::claims(hour())).unwrap(), ISSUER, &[API]).unwrap();
        assert_eq!(unbound.kubernetes.pod, None);
        assert!(!unbound.user().extra.contains_key(POD_NAME_KEY));
    }

    #[test]
    fn another_tenants_token_has_a_bad_signature() {
        let (a, b) = (Signer::generate().unwrap(), Signer::generate().unwrap());
        let token = b.issue(&claims(hour())).unwrap();
        assert_eq!(a.verify(&token, ISSUER, &[API]), Err(AuthError::BadSignature));
        assert_ne!(a.key_id(), b.key_id());
    }

    #[test]
    fn altered_tokens_have_a_bad_signature() {
        let signer = Signer::generate().unwrap();
        let token = signer.issue(&claims(hour())).unwrap();
        let (input, signature) = token.rsplit_once('.').unwrap();
        let (header, _) = input.split_once('.').unwrap();
        let mut forged = claims(hour());
        forged.sub = service_account_user("kube-system", "admin");
        forged.kubernetes.namespace = "kube-system".into();
        forged.kubernetes.serviceaccount.name = "admin".into();
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        let altered = format!("{header}.{payload}.{signature}");
        assert_eq!(signer.verify(&altered, ISSUER, &[API]), Err(AuthError::BadSignature));
        // A changed, truncated or empty signature, too.
        let mut bytes = URL_SAFE_NO_PAD.decode(signature).unwrap();
        bytes[10] ^= 1;
        let flipped = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(signer.verify(&flipped, ISSUER, &[API]), Err(AuthError::BadSignature));
        let cut = format!("{input}.{}", URL_SAFE_NO_PAD.encode(&bytes[..63]));
        assert_eq!(signer.verify(&cut, ISSUER, &[API]), Err(AuthError::BadSignature));
        assert_eq!(
            signer.verify(&format!("{input}."), ISSUER, &[API]),
            Err(AuthError::BadSignature)
        );
    }

    #[test]
    fn expired_and_future_tokens_are_refused_beyond_the_leeway() {
        let signer = Signer::generate().unwrap();
        let now = SystemTime::now();
        let mut expired = claims(hour());
        expired.iat -= 7200;
        expired.nbf -= 7200;
        expired.exp -= 7200;
        let token = signer.issue(&expired).unwrap();
        assert_eq!(signer.verify(&token, ISSUER, &[API]), Err(AuthError::TokenExpired));

        let token = signer.issue(&claims(hour())).unwrap();
        let after = |secs| now + Duration::from_secs(secs);
        assert!(
            signer.verify_at(&token, ISSUER, &[API], after(3600 + 30)).is_ok(),
            "within the leeway"
        );
        assert_eq!(
            signer.verify_at(&token, ISSUER, &[API], after(3600 + 120)),
            Err(AuthError::TokenExpired)
        );
        let before = |secs| now - Duration::from_secs(secs);
        assert!(signer.verify_at(&token, ISSUER, &[API], before(30)).is_ok(), "within the leeway");
        assert_eq!(
            signer.verify_at(&token, ISSUER, &[API], before(600)),
            Err(AuthError::TokenNotYetValid)
        );
    }

    #[test]
    fn a_token_for_other_audiences_is_refused() {
        let signer = Signer::generate().unwrap();
        let token = signer.issue(&claims(hour())).unwrap();
        assert!(signer.verify(&token, ISSUER, &["vault"]).is_ok());
        assert!(signer.verify(&token, ISSUER, &["other", API]).is_ok());
        let err = signer.verify(&token, ISSUER, &["other"]).unwrap_err();
        assert_eq!(
            err,
            AuthError::AudienceMismatch {
                token: vec![API.into(), "vault".into()],
                accepted: vec!["other".into()]
            }
        );
        assert!(matches!(
            signer.verify(&token, ISSUER, &[]),
            Err(AuthError::AudienceMismatch { .. })
        ));
        // A single-string `aud` is a list of one.
        let mut payload = serde_json::to_value(claims(hour())).unwrap();
        payload["aud"] = serde_json::json!(API);
        let token = sign_raw(&signer, &serde_json::json!({"alg": "ES256"}), &payload);
        assert_eq!(signer.verify(&token, ISSUER, &[API]).unwrap().aud, [API]);
    }

    #[test]
    fn a_token_from_another_issuer_is_refused() {
        let signer = Signer::generate().unwrap();
        let token = signer.issue(&claims(hour())).unwrap();
        let err =
            signer.verify(&token, "https://carrel.example/tenants/other", &[API]).unwrap_err();
        assert_eq!(err, AuthError::WrongIssuer(ISSUER.into()));
    }

    #[test]
    fn garbage_is_a_malformed_token() {
        let signer = Signer::generate().unwrap();
        for garbage in [
            "",
            ".",
            "..",
            "...",
            "a.b",
            "a.b.c",
            "a.b.c.d",
            "not a token",
            "eyJ.eyJ.",
            "\u{1F600}.x.y",
        ] {
            let err = signer.verify(garbage, ISSUER, &[API]).unwrap_err();
            assert!(matches!(err, AuthError::MalformedToken(_)), "{garbage:?}: {err}");
        }
        let payload = serde_json::to_value(claims(hour())).unwrap();
        let malformed = |header: serde_json::Value, payload: &serde_json::Value| {
            let token = sign_raw(&signer, &header, payload);
            let err = signer.verify(&token, ISSUER, &[API]).unwrap_err();
            assert!(matches!(err, AuthError::MalformedToken(_)), "{header} {payload}: {err}");
        };
        // Other algorithms, even with a valid ES256 signature, and unknown critical extensions.
        malformed(serde_json::json!({"alg": "none"}), &payload);
        malformed(serde_json::json!({"alg": "HS256"}), &payload);
        malformed(serde_json::json!({"typ": "JWT"}), &payload);
        malformed(serde_json::json!({"alg": "ES256", "crit": ["exp"]}), &payload);
        // Claims of the wrong type are malformed, not skipped.
        let mut wrong = payload.clone();
        wrong["nbf"] = serde_json::json!("99999999999");
        malformed(serde_json::json!({"alg": "ES256"}), &wrong);
        let mut missing = payload.clone();
        missing.as_object_mut().unwrap().remove("exp");
        malformed(serde_json::json!({"alg": "ES256"}), &missing);
        malformed(serde_json::json!({"alg": "ES256"}), &serde_json::json!([1, 2]));
        // Claims that do not name one service account consistently.
        let mut inconsistent = payload.clone();
        inconsistent["sub"] = serde_json::json!("system:serviceaccount:kube-system:admin");
        malformed(serde_json::json!({"alg": "ES256"}), &inconsistent);
        let mut anonymous = payload.clone();
        anonymous["kubernetes.io"]["serviceaccount"]["uid"] = serde_json::json!("");
        malformed(serde_json::json!({"alg": "ES256"}), &anonymous);
        // An "alg: none" token with no signature at all.
        let unsigned = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        );
        assert!(matches!(
            signer.verify(&unsigned, ISSUER, &[API]),
            Err(AuthError::MalformedToken(_))
        ));
    }

    #[test]
    fn keys_round_trip_through_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let signer = Signer::load_or_generate(dir.path()).unwrap();
        let mode =
            std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = Signer::load_or_generate(dir.path()).unwrap();
        assert_eq!(loaded.key_id(), signer.key_id());
        assert_eq!(loaded.public_key_pem(), signer.public_key_pem());
        assert!(signer.public_key_pem().starts_with("-----BEGIN PUBLIC KEY-----"));
        let token = signer.issue(&claims(hour())).unwrap();
        assert!(loaded.verify(&token, ISSUER, &[API]).is_ok());
        assert!(!format!("{loaded:?}").contains("PRIVATE"));
        // The key id is the base64url SHA-256 of the public key's DER.
        let spki = rustls::pki_types::SubjectPublicKeyInfoDer::from_pem_slice(
            signer.public_key_pem().as_bytes(),
        )
        .unwrap();
        assert_eq!(
            signer.key_id(),
            URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki))
        );
    }

    #[test]
    fn load_rejects_missing_corrupt_and_foreign_keys() {
        let dir = tempfile::tempdir().unwrap();
        let err = Signer::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, CredentialError::Missing { path } if path.ends_with("sa.key")),
            "{err}"
        );
        std::fs::write(dir.path().join(KEY_FILE), "garbage").unwrap();
        let err = Signer::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, CredentialError::Invalid { what, .. } if what.ends_with("sa.key")),
            "{err}"
        );
        // A P-384 key is not an ES256 key.
        let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        let err = Signer::from_pem(&p384.serialize_pem()).unwrap_err();
        assert!(err.to_string().contains("not an ECDSA P-256 private key"), "{err}");
        // A certificate is not a key.
        let ca = crate::auth::ca::TenantCa::generate("a").unwrap();
        assert!(Signer::from_pem(ca.cert_pem()).is_err());
    }
}
