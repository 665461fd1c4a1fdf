//! Access control on requests, for a cluster served with [`Security`]: who is asking (a client
//! certificate from the cluster's CA, or a service-account token it signed), whether they may
//! (RBAC over the cluster's own Roles and bindings), impersonation, escalation checks on RBAC
//! writes, and the review and TokenRequest endpoints built on those.
//!
//! Anonymous requests are refused (401) except for the public paths `/version`, `/healthz`,
//! `/livez` and `/readyz`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, Method};
use k8s_openapi::api::authentication::v1::{TokenRequestSpec, TokenReview};
use k8s_openapi::api::authorization::v1::{
    SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use parking_lot::Mutex;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::api::{Api, ListParams, Target};
use crate::auth::token::{ObjectRef, Signer, TokenClaims};
use crate::auth::token_cache::TokenCache;
use crate::auth::{self, UserInfo};
use crate::object::meta_str;
use crate::rbac::{self, review, Attributes, Policy};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

/// The APIs a secured cluster answers besides its stored resources, as discovery lists them: the
/// access reviews and the token review, each only created.
pub static ACCESS_TYPES: &[ResourceType] = &[
    access_type("authentication.k8s.io", "SelfSubjectReview", "selfsubjectreviews", false),
    access_type("authentication.k8s.io", "TokenReview", "tokenreviews", false),
    access_type(
        "authorization.k8s.io",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        true,
    ),
    access_type(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        false,
    ),
    access_type("authorization.k8s.io", "SelfSubjectRulesReview", "selfsubjectrulesreviews", false),
    access_type("authorization.k8s.io", "SubjectAccessReview", "subjectaccessreviews", false),
];

const fn access_type(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> ResourceType {
    crate::resource::handled(
        (group, "v1"),
        kind,
        plural,
        namespaced,
        &["create"],
        &crate::registry::Plain,
    )
}

/// The paths anyone may read without credentials.
const PUBLIC: &[&str] = &["/version", "/healthz", "/livez", "/readyz"];

/// A client's certificate chain, as the TLS layer saw it: put in each request of the connection.
/// The chain is verified once per CA it is checked against, and that user is reused for the
/// connection's later requests while the chain and the CA are still valid.
#[derive(Clone, Debug)]
pub struct PeerCertificates(Arc<Peer>);

#[derive(Debug)]
struct Peer {
    chain: Vec<CertificateDer<'static>>,
    verified: Mutex<Option<Verified>>,
}

/// A successful verification: against which CA, who, and until when (the earliest expiry of the
/// chain and the CA, in seconds since the epoch).
#[derive(Debug)]
struct Verified {
    ca: Vec<u8>,
    user: UserInfo,
    until: u64,
}

impl PeerCertificates {
    /// The chain a client presented (empty when it presented none).
    pub fn new(chain: Vec<CertificateDer<'static>>) -> PeerCertificates {
        PeerCertificates(Arc::new(Peer { chain, verified: Mutex::new(None) }))
    }

    /// The chain the client presented.
    pub fn chain(&self) -> &[CertificateDer<'static>] {
        &self.0.chain
    }

    /// Whether the client presented no certificate.
    pub fn is_empty(&self) -> bool {
        self.0.chain.is_empty()
    }

    /// The user the chain names, verified against `ca` at `now` (or as verified before, while
    /// nothing in it has expired since).
    pub fn user_for(
        &self,
        ca: &CertificateDer<'_>,
        now: UnixTime,
    ) -> Result<UserInfo, auth::AuthError> {
        let mut verified = self.0.verified.lock();
        if let Some(v) = verified.as_ref() {
            if v.ca == ca.as_ref() && now.as_secs() < v.until {
                return Ok(v.user.clone());
            }
        }
        let user = auth::client_cert::verify(&self.0.chain, ca, now)?;
        let until = self.0.chain.iter().chain([ca]).filter_map(|c| not_after(c)).min();
        if let Some(until) = until {
            *verified = Some(Verified { ca: ca.as_ref().to_vec(), user: user.clone(), until });
        }
        Ok(user)
    }
}

/// When a certificate expires, in seconds since the epoch.
fn not_after(cert: &CertificateDer<'_>) -> Option<u64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    u64::try_from(parsed.validity().not_after.timestamp()).ok()
}

/// How one cluster authenticates and authorizes its requests.
pub struct Security {
    ca: CertificateDer<'static>,
    tokens: Option<Signer>,
    issuer: String,
    policy: Mutex<Option<(u64, Arc<Policy>)>>,
    /// Tokens verified in the last few seconds.
    verified: TokenCache,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

impl Security {
    /// Client certificates must chain to `ca`; service-account tokens are signed (and, through
    /// TokenRequest, issued) by `tokens` with issuer `issuer`, which is also the audience tokens
    /// get by default.
    pub fn new(ca: CertificateDer<'static>, tokens: Option<Signer>, issuer: &str) -> Security {
        Security {
            ca,
            tokens,
            issuer: issuer.to_owned(),
            policy: Mutex::new(None),
            verified: TokenCache::default(),
        }
    }

    /// Who sent a request: a bearer token, else a client certificate, else anonymous. A
    /// credential that does not verify is 401, whatever else the request carries.
    pub fn authenticate(
        &self,
        api: &Api,
        headers: &HeaderMap,
        peer: Option<&PeerCertificates>,
    ) -> ApiResult<UserInfo> {
        let authorization =
            headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if let Some(token) = authorization.and_then(auth::bearer) {
            return self.authenticate_token(api, token, &[self.issuer.as_str()]);
        }
        if let Some(chain) = peer.filter(|c| !c.is_empty()) {
            return chain.user_for(&self.ca, UnixTime::now()).map_err(|e| {
                tracing::debug!(error = %e, "client certificate refused");
                ApiError::unauthorized()
            });
        }
        Ok(UserInfo::anonymous())
    }

    /// The user of a service-account token, if it verifies for one of `audiences` and its
    /// service account still exists with the uid the token names (as of the last
    /// [`TokenCache::TTL`]: a token verified since is taken from the cache).
    fn authenticate_token(
        &self,
        api: &Api,
        token: &str,
        audiences: &[&str],
    ) -> ApiResult<UserInfo> {
        let key = TokenCache::key(token, audiences);
        let now = Instant::now();
        if let Some(user) = self.verified.get(&key, now) {
            return Ok(user);
        }
        let (user, expires) = self.verify_token(api, token, audiences)?;
        self.verified.insert(key, user.clone(), now, expires);
        Ok(user)
    }

    /// [`Security::authenticate_token`] without the cache: the user, and when the token expires.
    fn verify_token(
        &self,
        api: &Api,
        token: &str,
        audiences: &[&str],
    ) -> ApiResult<(UserInfo, SystemTime)> {
        let Some(signer) = &self.tokens else { return Err(ApiError::unauthorized()) };
        let claims = signer.verify(token, &self.issuer, audiences).map_err(|e| {
            tracing::debug!(error = %e, "token refused");
            ApiError::unauthorized()
        })?;
        let sa = &claims.kubernetes.serviceaccount;
        let target = Target {
            rt: core("serviceaccounts"),
            namespace: Some(claims.kubernetes.namespace.clone()),
        };
        match api.get(&target, &sa.name) {
            Ok(found) if meta_str(&found, "uid") == Some(sa.uid.as_str()) => {
                let expires =
                    UNIX_EPOCH + Duration::from_secs(u64::try_from(claims.exp).unwrap_or(0));
                Ok((claims.user(), expires))
            }
            Ok(_) | Err(ApiError::NotFound { .. }) => Err(ApiError::unauthorized()),
            Err(e) => Err(e),
        }
    }

    /// The cluster's RBAC policy if it is built and current: no store access.
    pub fn current_policy(&self, api: &Api) -> Option<Arc<Policy>> {
        let cached = self.policy.lock();
        cached
            .as_ref()
            .filter(|(seen, _)| *seen == api.rbac_generation())
            .map(|(_, policy)| policy.clone())
    }

    /// The cluster's RBAC policy, rebuilt (from the store) when its RBAC objects have changed.
    pub fn policy(&self, api: &Api) -> ApiResult<Arc<Policy>> {
        if let Some(policy) = self.current_policy(api) {
            return Ok(policy);
        }
        let generation = api.rbac_generation();
        let mut cached = self.policy.lock();
        let policy = Arc::new(Policy::new(
            objects::<Role>(api, "roles")?,
            objects::<RoleBinding>(api, "rolebindings")?,
            objects::<ClusterRole>(api, "clusterroles")?,
            objects::<ClusterRoleBinding>(api, "clusterrolebindings")?,
        ));
        *cached = Some((generation, policy.clone()));
        Ok(policy)
    }

    /// The user a request acts as: `Impersonate-User` (with `Impersonate-Group`s) when the
    /// requester may impersonate them, else the requester.
    pub fn impersonate(
        &self,
        policy: &Policy,
        user: UserInfo,
        headers: &HeaderMap,
    ) -> ApiResult<UserInfo> {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_owned)
                .collect()
        };
        let users = values("impersonate-user");
        let groups = values("impersonate-group");
        let Some(target) = users.first() else {
            if groups.is_empty() {
                return Ok(user);
            }
            return Err(ApiError::bad_request(
                "Impersonate-Group requires Impersonate-User to be set as well",
            ));
        };
        let check = |resource: &str, name: &str, namespace: &str| -> ApiResult<()> {
            let attributes = Attributes::resource(user.clone(), "impersonate", "", resource)
                .with_name(name)
                .with_namespace(namespace);
            let decision = policy.authorize(&attributes);
            if decision.allowed {
                Ok(())
            } else {
                Err(rbac::forbidden(&attributes, &decision.reason))
            }
        };
        let mut impersonated = match target.strip_prefix("system:serviceaccount:") {
            Some(rest) => {
                let (namespace, name) = rest.split_once(':').unwrap_or(("", rest));
                check("serviceaccounts", name, namespace)?;
                auth::UserInfo::new(
                    target.clone(),
                    [
                        auth::token::SERVICE_ACCOUNTS_GROUP.to_owned(),
                        format!("{}:{namespace}", auth::token::SERVICE_ACCOUNTS_GROUP),
                    ],
                )
            }
            None => {
                check("users", target, "")?;
                auth::UserInfo::new(target.clone(), Vec::<String>::new())
            }
        };
        for group in groups {
            check("groups", &group, "")?;
            impersonated.groups.push(group);
        }
        Ok(if impersonated.name == auth::ANONYMOUS_USER {
            impersonated
        } else {
            impersonated.with_authenticated_group()
        })
    }

    /// 403 unless RBAC allows `attributes`.
    pub fn authorize(&self, policy: &Policy, attributes: &Attributes) -> ApiResult<()> {
        let decision = policy.authorize(attributes);
        if decision.allowed {
            Ok(())
        } else {
            Err(rbac::forbidden(attributes, &decision.reason))
        }
    }
}

/// Whether anyone may ask for `path` (the cluster-relative path) without credentials.
pub fn is_public(path: &str) -> bool {
    PUBLIC.iter().any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

/// Whether a pod subresource is one of its streams, which RBAC grants with `create`.
pub fn is_pod_stream(subresource: &str) -> bool {
    matches!(subresource, "exec" | "attach" | "portforward")
}

/// The verb of a resource request, as Kubernetes names it.
pub fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

fn core(plural: &str) -> &'static ResourceType {
    crate::resource::built_in("", plural).expect("a core type")
}

/// Every object of an RBAC kind in the cluster, typed.
fn objects<T: DeserializeOwned>(api: &Api, plural: &str) -> ApiResult<Vec<T>> {
    let rt = crate::resource::built_in(rbac::RBAC_GROUP, plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
    let list = api.list(&Target { rt, namespace: None }, &ListParams::default())?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|item| {
            serde_json::from_value(item).map_err(|e| {
                ApiError::internal(format!("a stored {plural} object is unreadable: {e}"))
            })
        })
        .collect()
}

/// `value` as a typed object; 400 if it does not decode.
pub(crate) fn typed<T: DeserializeOwned>(value: &Value) -> ApiResult<T> {
    serde_json::from_value(value.clone())
        .map_err(|e| ApiError::bad_request(format!("the object cannot be decoded: {e}")))
}

/// Refuse a write of an RBAC object that would grant `user` more than they hold (unless they may
/// `escalate` or `bind`): `object` is what would be stored, `old` what was. The checks are the
/// kind's strategy's ([`crate::registry::Strategy::check_escalation`]).
pub fn check_rbac_write(
    policy: &Policy,
    user: &UserInfo,
    rt: &ResourceType,
    namespace: &str,
    object: &Value,
    old: Option<&Value>,
) -> ApiResult<()> {
    rt.strategy.check_escalation(policy, user, namespace, object, old)
}

/// The access-review and token-review endpoints: `POST` of `kind` (in `group`) by `user`, in
/// `namespace` for the local review; the review comes back with its status filled in.
pub fn review(
    api: &Api,
    security: &Security,
    user: &UserInfo,
    resource: &str,
    namespace: Option<&str>,
    body: &Value,
) -> ApiResult<Value> {
    let policy = security.policy(api)?;
    let mut answer = body.clone();
    let status = match resource {
        "selfsubjectaccessreviews" => {
            let r: SelfSubjectAccessReview = typed(body)?;
            serde_json::to_value(review::self_subject_access_review(&policy, user, &r.spec)?)
        }
        "selfsubjectrulesreviews" => {
            let r: SelfSubjectRulesReview = typed(body)?;
            let ns = r.spec.namespace.unwrap_or_default();
            serde_json::to_value(review::self_subject_rules_review(&policy, user, &ns)?)
        }
        "subjectaccessreviews" => {
            let r: SubjectAccessReview = typed(body)?;
            serde_json::to_value(review::subject_access_review(&policy, &r.spec)?)
        }
        "localsubjectaccessreviews" => {
            let mut v = body.clone();
            v["kind"] = json!("SubjectAccessReview");
            let r: SubjectAccessReview = typed(&v)?;
            let ns = namespace.unwrap_or_default();
            serde_json::to_value(review::local_subject_access_review(&policy, ns, &r.spec)?)
        }
        "selfsubjectreviews" => Ok(json!({"userInfo": user})),
        "tokenreviews" => {
            let r: TokenReview = typed(body)?;
            let token = r.spec.token.unwrap_or_default();
            let wanted = r.spec.audiences.unwrap_or_default();
            let audiences: Vec<&str> = if wanted.is_empty() {
                vec![security.issuer.as_str()]
            } else {
                wanted.iter().map(String::as_str).collect()
            };
            Ok(match security.authenticate_token(api, &token, &audiences) {
                Ok(user) => json!({
                    "authenticated": true,
                    "user": user,
                    "audiences": audiences,
                }),
                Err(_) => json!({"authenticated": false, "error": "invalid bearer token"}),
            })
        }
        _ => return Err(ApiError::no_route()),
    }
    .map_err(|e| ApiError::internal(format!("encoding the review: {e}")))?;
    if let Some(root) = answer.as_object_mut() {
        root.insert("status".into(), status);
        root.entry("metadata").or_insert_with(|| json!({}));
    }
    Ok(answer)
}

/// `POST …/serviceaccounts/<name>/token`: a token for the service account, for the audiences and
/// lifetime asked (default: this cluster, one hour; at least ten minutes).
pub fn token_request(
    api: &Api,
    security: &Security,
    namespace: &str,
    name: &str,
    body: &Value,
) -> ApiResult<Value> {
    let Some(signer) = &security.tokens else {
        return Err(ApiError::unsupported("this cluster issues no service account tokens"));
    };
    // Only the spec matters; the rest of a request (an empty status) may not decode as a typed
    // TokenRequest, whose status fields are required.
    let spec: TokenRequestSpec = match body.get("spec") {
        Some(spec) if !spec.is_null() => typed(spec)?,
        _ => TokenRequestSpec::default(),
    };
    let target = Target { rt: core("serviceaccounts"), namespace: Some(namespace.to_owned()) };
    let sa = api.get(&target, name)?;
    let uid = meta_str(&sa, "uid").unwrap_or_default().to_owned();
    let audiences = if spec.audiences.is_empty() {
        vec![security.issuer.clone()]
    } else {
        spec.audiences.clone()
    };
    let seconds = spec.expiration_seconds.unwrap_or(3600);
    if seconds < 600 {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            vec![crate::status::Cause::new(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            )],
        ));
    }
    let lifetime = Duration::from_secs(u64::try_from(seconds).unwrap_or(3600));
    let claims = TokenClaims::new(
        &security.issuer,
        namespace,
        ObjectRef::new(name, uid),
        audiences.clone(),
        SystemTime::now(),
        lifetime,
    );
    let token =
        signer.issue(&claims).map_err(|e| ApiError::internal(format!("signing the token: {e}")))?;
    let expiry = chrono::DateTime::<chrono::Utc>::from(SystemTime::now() + lifetime);
    let mut answer = body.clone();
    answer["metadata"] = json!({"name": name, "namespace": namespace, "creationTimestamp": null});
    answer["spec"]["audiences"] = json!(audiences);
    answer["spec"]["expirationSeconds"] = json!(seconds);
    answer["status"] = json!({
        "token": token,
        "expirationTimestamp": expiry.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;

    use super::*;
    use crate::auth::ca::TenantCa;

    fn chain_of(ca: &TenantCa, user: &str, valid_for: Duration) -> PeerCertificates {
        let (cert, _) = ca.issue_client(user, &["devs"], valid_for).unwrap();
        PeerCertificates::new(vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()])
    }

    #[test]
    fn a_verified_chain_is_reused_only_for_its_ca_and_until_it_expires() {
        let (a, b) = (TenantCa::generate("a").unwrap(), TenantCa::generate("b").unwrap());
        let peer = chain_of(&a, "alice", Duration::from_secs(3600));
        let now = UnixTime::now();
        let user = peer.user_for(a.cert_der(), now).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(peer.user_for(a.cert_der(), now).unwrap(), user);
        // Another CA is checked afresh, and refuses it.
        assert!(peer.user_for(b.cert_der(), now).is_err());
        assert_eq!(peer.user_for(a.cert_der(), now).unwrap(), user);
        // Past the certificate's expiry the cached answer is not used.
        let later = UnixTime::since_unix_epoch(Duration::from_secs(now.as_secs() + 7200));
        assert!(peer.user_for(a.cert_der(), later).is_err());
    }
}
