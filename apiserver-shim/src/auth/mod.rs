//! Authentication: who a request comes from.
//!
//! Every tenant has its own client CA ([`ca::TenantCa`]) and its own service-account signing key
//! ([`token::Signer`]). One TLS listener serves every tenant under `/tenants/<name>/…`, so the
//! handshake cannot know which CA applies: [`client_cert::AnyClientCert`] lets any client
//! certificate through once the client has proved it holds the certificate's key, and the request
//! layer, which knows the tenant from the path, decides trust with [`client_cert::verify`] against
//! that tenant's CA. Bearer tokens ([`bearer`]) are checked with [`token::Signer::verify`]. Both
//! give a [`UserInfo`], shaped as Kubernetes' `user.Info`.
//!
//! Everything here is pure: no HTTP, no store. The caller supplies the tenant's credentials and,
//! for certificates, the time. An [`AuthError`] is the client's failure (answer 401, keep the
//! detail for the log); a [`CredentialError`] is the server's own (its key files or key material).

pub mod ca;
pub mod client_cert;
mod files;
pub mod token;
pub mod token_cache;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// The user name of requests that carry no credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of requests that carry no credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group every authenticated user is in.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The `extra` key naming the credential a request was authenticated with (`X509SHA256=<hex>` for
/// a client certificate, `JTI=<id>` for a service-account token), as Kubernetes records it.
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Who a request comes from: Kubernetes' `user.Info`. Serialized as `authentication.k8s.io/v1`
/// `UserInfo` (`username`, `uid`, `groups`, `extra`; empty fields left out).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    /// The user name: a certificate's CN, `system:serviceaccount:<ns>:<name>`, or
    /// [`ANONYMOUS_USER`].
    #[serde(rename = "username")]
    pub name: String,
    /// A unique id for the user, when the credential carries one (a service account's uid).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups the user is in, in the order the credential lists them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Anything else the authenticator knows (the credential id, the pod a token is bound to).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user with a name and groups.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        groups: impl IntoIterator<Item = S>,
    ) -> Self {
        UserInfo {
            name: name.into(),
            groups: groups.into_iter().map(Into::into).collect(),
            ..UserInfo::default()
        }
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The user of a request without credentials: `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS_USER.to_owned(),
            groups: vec![UNAUTHENTICATED_GROUP.to_owned()],
            ..UserInfo::default()
        }
    }

    /// Adds `system:authenticated` at the end of the groups, as kube-apiserver does for every
    /// authenticated user: unless the groups already hold it or `system:unauthenticated`.
    pub fn with_authenticated_group(mut self) -> UserInfo {
        let marked =
            self.groups.iter().any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
        if !marked {
            self.groups.push(AUTHENTICATED_GROUP.to_owned());
        }
        self
    }
}

/// Why a request's credentials were refused. Every variant means 401 Unauthorized for the client
/// (except [`AuthError::InvalidCa`], the server's own misconfiguration); the message is for the
/// log and need not be shown to the client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// [`client_cert::verify`] was given an empty chain.
    #[error("no client certificate was presented")]
    NoClientCertificate,
    /// The chain does not lead to the tenant's CA (another CA, self-signed, a bad signature in
    /// the chain, the CA itself presented as the client), or the certificate may not be used for
    /// client authentication.
    #[error("client certificate is not trusted: {0}")]
    UntrustedCertificate(String),
    /// A certificate of the chain is past its `notAfter`.
    #[error("client certificate has expired")]
    CertificateExpired,
    /// A certificate of the chain is before its `notBefore`.
    #[error("client certificate is not valid yet")]
    CertificateNotYetValid,
    /// A certificate could not be parsed.
    #[error("malformed client certificate: {0}")]
    MalformedCertificate(String),
    /// The certificate is trusted but its subject has no common name, so it names no user.
    #[error("client certificate subject has no common name")]
    NoCommonName,
    /// The tenant's CA certificate is not usable as a trust anchor (a server-side problem).
    #[error("the tenant's CA certificate is not a usable trust anchor: {0}")]
    InvalidCa(String),
    /// The token's signature does not verify with this tenant's key (another tenant's key, or a
    /// token altered after signing).
    #[error("token signature is not valid")]
    BadSignature,
    /// The token is past its `exp` (plus the allowed clock skew).
    #[error("token has expired")]
    TokenExpired,
    /// The token's `nbf` or `iat` is in the future (beyond the allowed clock skew).
    #[error("token is not valid yet")]
    TokenNotYetValid,
    /// The token's `iss` is not this tenant's issuer.
    #[error("token issuer {0:?} is not accepted")]
    WrongIssuer(String),
    /// None of the token's audiences is one the server accepts.
    #[error("token audiences {token:?} include none of {accepted:?}")]
    AudienceMismatch {
        /// The token's `aud`.
        token: Vec<String>,
        /// The audiences the server accepts.
        accepted: Vec<String>,
    },
    /// The token is not a well-formed ES256 JWT carrying service-account claims.
    #[error("malformed token: {0}")]
    MalformedToken(String),
}

/// What can go wrong with the server's own credentials: a tenant's CA or signing key, generated,
/// read from or written to its directory.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// A credential file does not exist.
    #[error("{}: no such file", .path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// Reading or writing a credential file failed.
    #[error("{}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A credential is not what it should be (not PEM, the wrong kind of key, a key that does
    /// not match its certificate, …).
    #[error("{what}: {reason}")]
    Invalid {
        /// The file (or the argument) that holds it.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// Generating a key or certificate failed.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Signing a token failed.
    #[error("signing a token failed")]
    Sign,
}

impl CredentialError {
    fn invalid(what: impl Into<String>, reason: impl Into<String>) -> CredentialError {
        CredentialError::Invalid { what: what.into(), reason: reason.into() }
    }
}

/// The token of an `Authorization: Bearer <token>` header value: the scheme is matched without
/// regard to case and surrounding whitespace is trimmed. `None` for another scheme, an empty
/// token, or a value with whitespace inside the token.
pub fn bearer(header_value: &str) -> Option<&str> {
    let (scheme, rest) = header_value.trim().split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return None;
    }
    Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_is_unauthenticated() {
        let anonymous = UserInfo::anonymous();
        assert_eq!(anonymous.name, "system:anonymous");
        assert_eq!(anonymous.groups, ["system:unauthenticated"]);
        // The authenticated group is never added to an unauthenticated user.
        assert_eq!(anonymous.clone().with_authenticated_group(), anonymous);
    }

    #[test]
    fn the_authenticated_group_is_added_once_at_the_end() {
        let user =
            UserInfo { name: "alice".into(), groups: vec!["dev".into()], ..UserInfo::default() }
                .with_authenticated_group();
        assert_eq!(user.groups, ["dev", "system:authenticated"]);
        assert_eq!(user.clone().with_authenticated_group(), user);
        let bare =
            UserInfo { name: "bob".into(), ..UserInfo::default() }.with_authenticated_group();
        assert_eq!(bare.groups, ["system:authenticated"]);
    }

    #[test]
    fn user_info_serializes_as_kubernetes_user_info() {
        let mut user = UserInfo { name: "alice".into(), ..UserInfo::default() };
        assert_eq!(serde_json::to_value(&user).unwrap(), serde_json::json!({"username": "alice"}));
        user.uid = "u1".into();
        user.groups = vec!["g".into()];
        user.extra.insert(CREDENTIAL_ID_KEY.into(), vec!["JTI=x".into()]);
        assert_eq!(
            serde_json::to_value(&user).unwrap(),
            serde_json::json!({
                "username": "alice",
                "uid": "u1",
                "groups": ["g"],
                "extra": {"authentication.kubernetes.io/credential-id": ["JTI=x"]},
            })
        );
    }

    #[test]
    fn bearer_tokens_are_parsed_leniently_but_not_loosely() {
        assert_eq!(bearer("Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer("bearer abc"), Some("abc"));
        assert_eq!(bearer("BEARER\tabc"), Some("abc"));
        assert_eq!(bearer("  Bearer   abc  "), Some("abc"));
        assert_eq!(bearer("Basic YWxpY2U6cHc="), None);
        assert_eq!(bearer("Bearer"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer a b"), None);
        assert_eq!(bearer("Bearerabc"), None);
        assert_eq!(bearer(""), None);
    }
}
