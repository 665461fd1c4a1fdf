//! One call of an admission webhook: an `AdmissionReview` POSTed over TLS to the webhook's
//! address, its answer read back, as kube-apiserver's webhook client makes it.
//!
//! The address is a URL (`clientConfig.url`) or a Service of the tenant (`clientConfig.service`),
//! which a [`ServiceResolver`] turns into somewhere to dial, while TLS verifies the name
//! `<service>.<namespace>.svc` against the webhook's `caBundle` (the machine's trust roots
//! without one). Every address dialled passes the [`Egress`] policy first. The whole call,
//! connection included, is bounded by the webhook's `timeoutSeconds`. Nothing of an answer that
//! is not an `AdmissionReview` is repeated to the client: the address is the tenant's choice,
//! what answers there may not be.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{self, header, Method, Request, Uri};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use super::egress::Egress;

/// The most of a webhook's answer read: kube-apiserver's limit on a request body.
pub const MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;

/// Where a webhook is called: `clientConfig`, its `service` already read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`: `https://host[:port]/path`.
    Url(String),
    /// `clientConfig.service`: a Service of the cluster, its port and the path on it.
    Service { namespace: String, name: String, port: u16, path: Option<String> },
}

impl Endpoint {
    /// A `clientConfig`'s endpoint (admission or conversion): its Service (its port 443 unless
    /// it says), else its URL; `None` for one with neither.
    pub fn of(
        url: Option<&str>,
        service: Option<(&str, &str, Option<i32>, Option<&str>)>,
    ) -> Option<Endpoint> {
        match (url, service) {
            (_, Some((namespace, name, port, path))) => Some(Endpoint::Service {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                port: port.and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
                path: path.map(str::to_owned),
            }),
            (Some(url), None) => Some(Endpoint::Url(url.to_owned())),
            (None, None) => None,
        }
    }
}

/// Where a Service of the cluster is reached from the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceAddress {
    /// Its cluster IP (carried by the host's service proxy).
    Ip(IpAddr),
    /// The DNS name an `ExternalName` Service names.
    Name(String),
}

/// Reads a cluster's Services for the calls of its webhooks.
pub trait ServiceResolver: Send + Sync {
    /// Where Service `namespace/name` answers; `Err` says why it cannot be reached (no such
    /// Service, a headless one).
    fn resolve(&self, namespace: &str, name: &str) -> Result<ServiceAddress, String>;
}

/// What one call needs of a webhook.
#[derive(Clone, Debug)]
pub struct Hook {
    /// Its name, as errors report it.
    pub name: String,
    pub endpoint: Endpoint,
    /// `clientConfig.caBundle`, PEM; `None` trusts the machine's roots.
    pub ca_bundle: Option<Vec<u8>>,
    /// `timeoutSeconds`.
    pub timeout: Duration,
}

/// Why a call gave no usable answer, in the words kube-apiserver's `ErrCallingWebhook` uses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// The webhook could not be reached, or did not answer in time.
    #[error("failed calling webhook \"{hook}\": failed to call webhook: Post \"{url}\": {reason}")]
    Call { hook: String, url: String, reason: String },
    /// It answered, but not with an `AdmissionReview` answering this request.
    #[error("failed calling webhook \"{hook}\": received invalid webhook response: {reason}")]
    Response { hook: String, reason: String },
}

impl CallError {
    /// What went wrong, without the webhook's name: `Post "<url>": <reason>` for a call, the
    /// reason for an answer (as a conversion error reports it).
    pub fn cause(&self) -> String {
        match self {
            CallError::Call { url, reason, .. } => format!("Post \"{url}\": {reason}"),
            CallError::Response { reason, .. } => reason.clone(),
        }
    }
}

/// The answer of a webhook: the `response` of its review, whose `uid` has been checked against
/// the request's.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer(pub Value);

/// Call `hook` with `review` (an `admission.k8s.io/v1` `AdmissionReview`, or an
/// `apiextensions.k8s.io/v1` `ConversionReview`, with its `request`): the answer must be a review
/// of the same kind answering it.
pub async fn call(
    hook: &Hook,
    review: &Value,
    egress: Egress,
    services: &dyn ServiceResolver,
) -> Result<Answer, CallError> {
    let target = match Target::of(hook, services) {
        Ok(target) => target,
        Err(reason) => {
            return Err(CallError::Call { hook: hook.name.clone(), url: shown_url(hook), reason })
        }
    };
    let url = target.url.to_string();
    let failed =
        |reason: String| CallError::Call { hook: hook.name.clone(), url: url.clone(), reason };
    let body = serde_json::to_vec(review).map_err(|e| failed(e.to_string()))?;
    let exchange = exchange(&target, hook.ca_bundle.as_deref(), body, egress);
    let (status, bytes) = match tokio::time::timeout(hook.timeout, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(reason)) => return Err(failed(reason)),
        Err(_) => return Err(failed("context deadline exceeded".into())),
    };
    let invalid = |reason: String| CallError::Response { hook: hook.name.clone(), reason };
    if !status.is_success() {
        return Err(failed(format!(
            "the server responded with the status code {}",
            status.as_u16()
        )));
    }
    let answer: Value = serde_json::from_slice(&bytes)
        .map_err(|_| invalid("the response body is not a JSON AdmissionReview".into()))?;
    let (api_version, kind) = (answer["apiVersion"].as_str(), answer["kind"].as_str());
    let (sent_version, sent_kind) = (review["apiVersion"].as_str(), review["kind"].as_str());
    if api_version != sent_version || kind != sent_kind {
        return Err(invalid(format!(
            "expected webhook response of {}, Kind={}, got {}, Kind={}",
            sent_version.unwrap_or("/"),
            sent_kind.unwrap_or_default(),
            api_version.unwrap_or("/"),
            kind.unwrap_or_default()
        )));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err(invalid("webhook response was absent".into()));
    };
    let (sent, got) = (review["request"]["uid"].as_str(), response["uid"].as_str());
    if sent != got {
        return Err(invalid(format!(
            "expected response.uid={:?}, got {:?}",
            sent.unwrap_or_default(),
            got.unwrap_or_default()
        )));
    }
    Ok(Answer(response.clone()))
}

/// A webhook's URL as errors show it before it could be resolved.
fn shown_url(hook: &Hook) -> String {
    match &hook.endpoint {
        Endpoint::Url(url) => url.clone(),
        Endpoint::Service { namespace, name, port, path } => {
            format!("https://{name}.{namespace}.svc:{port}{}", path.as_deref().unwrap_or_default())
        }
    }
}

/// Where one call goes: the URL requested (with kube-apiserver's `?timeout=`), the host to
/// resolve and dial, and the name TLS verifies.
struct Target {
    url: Uri,
    dial: Dial,
    port: u16,
    server_name: ServerName<'static>,
}

enum Dial {
    Ip(IpAddr),
    Name(String),
}

impl Target {
    fn of(hook: &Hook, services: &dyn ServiceResolver) -> Result<Target, String> {
        let timeout = format!("timeout={}s", hook.timeout.as_secs().max(1));
        match &hook.endpoint {
            Endpoint::Url(url) => {
                let uri: Uri = url.parse().map_err(|e| format!("{e}"))?;
                if uri.scheme_str() != Some("https") {
                    return Err("unsupported protocol scheme".into());
                }
                let host = uri.host().ok_or("no host in the URL")?;
                let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
                let port = uri.port_u16().unwrap_or(443);
                let path = uri.path();
                let query = match uri.query() {
                    Some(q) => format!("{q}&{timeout}"),
                    None => timeout,
                };
                let url = format!("https://{}{path}?{query}", uri.authority().ok_or("no host")?);
                let server_name = ServerName::try_from(host.clone()).map_err(|e| format!("{e}"))?;
                let dial = match host.parse::<IpAddr>() {
                    Ok(ip) => Dial::Ip(ip),
                    Err(_) => Dial::Name(host),
                };
                Ok(Target {
                    url: url.parse().map_err(|e| format!("{e}"))?,
                    dial,
                    port,
                    server_name,
                })
            }
            Endpoint::Service { namespace, name, port, path } => {
                let host = format!("{name}.{namespace}.svc");
                let path = path.as_deref().unwrap_or("/");
                let url = format!("https://{host}:{port}{path}?{timeout}");
                let dial = match services.resolve(namespace, name)? {
                    ServiceAddress::Ip(ip) => Dial::Ip(ip),
                    ServiceAddress::Name(name) => Dial::Name(name),
                };
                let server_name = ServerName::try_from(host).map_err(|e| format!("{e}"))?;
                Ok(Target {
                    url: url.parse().map_err(|e| format!("{e}"))?,
                    dial,
                    port: *port,
                    server_name,
                })
            }
        }
    }

    /// The addresses to dial, each allowed by `egress`.
    async fn addresses(&self, egress: Egress) -> Result<Vec<SocketAddr>, String> {
        let found: Vec<SocketAddr> = match &self.dial {
            Dial::Ip(ip) => vec![SocketAddr::new(*ip, self.port)],
            Dial::Name(name) => tokio::net::lookup_host((name.as_str(), self.port))
                .await
                .map_err(|e| format!("dial tcp: lookup {name}: {e}"))?
                .collect(),
        };
        let mut allowed = Vec::with_capacity(found.len());
        let mut refused = None;
        for address in found {
            match egress.refusal(address.ip()) {
                None => allowed.push(address),
                Some(why) => refused = Some(format!("dial tcp {address}: {why} may not be called")),
            }
        }
        match (allowed.is_empty(), refused) {
            (true, Some(refused)) => Err(refused),
            (true, None) => Err("dial tcp: no address".into()),
            (false, _) => Ok(allowed),
        }
    }
}

/// How long a connection to a webhook is kept for the next call (Go's `IdleConnTimeout`, which
/// kube-apiserver's webhook transport keeps).
const IDLE: Duration = Duration::from_secs(90);

/// The most idle connections kept to one webhook.
const IDLE_PER_HOOK: usize = 8;

/// What a connection was made for: where it was dialled, the name verified, what was trusted,
/// the egress policy it was dialled under and the runtime it was made on. A connection is
/// reused only for the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct PoolKey {
    dial: String,
    port: u16,
    server_name: String,
    ca_bundle: Option<Vec<u8>>,
    egress: Egress,
    /// The runtime whose IO driver the connection's socket is registered with: a call drives
    /// its connection itself, which only a call on that runtime can.
    runtime: tokio::runtime::Id,
}

/// A connection to a webhook: the sender of its requests and the connection itself, which is
/// driven by the call that uses it (no task of its own, so a call's bytes go out and come in on
/// the thread that waits for them, with no hand-off between threads).
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Body>,
    io: hyper::client::conn::http1::Connection<
        TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
        Body,
    >,
}

/// The idle connections kept, by what they were made for, each with when it went idle.
type Pool = parking_lot::Mutex<HashMap<PoolKey, Vec<(Connection, Instant)>>>;

/// Idle connections to webhooks, kept for their next call (a webhook is usually called again
/// soon, and a TLS handshake costs more than the call).
fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// An idle connection for `key` still usable, if one is kept.
fn reuse(key: &PoolKey) -> Option<Connection> {
    let mut pool = pool().lock();
    let idle = pool.get_mut(key)?;
    while let Some((mut connection, since)) = idle.pop() {
        // What came in while it was idle (the webhook closing it) is read now: a connection
        // that ended is not used.
        let ended = futures::FutureExt::now_or_never(&mut connection.io).is_some();
        if since.elapsed() < IDLE && !ended && !connection.sender.is_closed() {
            return Some(connection);
        }
    }
    None
}

/// Keep `connection` for the next call to `key`.
fn keep(key: PoolKey, connection: Connection) {
    let mut pool = pool().lock();
    let idle = pool.entry(key).or_default();
    idle.retain(|(c, since)| since.elapsed() < IDLE && !c.sender.is_closed());
    if idle.len() < IDLE_PER_HOOK {
        idle.push((connection, Instant::now()));
    }
}

/// A new connection to `target`, verified with `ca_bundle`.
async fn connect(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    egress: Egress,
) -> Result<Connection, String> {
    let config = client_config(ca_bundle)?;
    let mut last = String::from("dial tcp: no address");
    let mut stream = None;
    for address in target.addresses(egress).await? {
        match tokio::net::TcpStream::connect(address).await {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("dial tcp {address}: connect: {e}"),
        }
    }
    let stream = stream.ok_or(last)?;
    let _ = stream.set_nodelay(true);
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(target.server_name.clone(), stream)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (sender, io) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    Ok(Connection { sender, io })
}

/// Why an exchange over a connection failed.
enum Failed {
    /// Nothing was sent: the connection was closed before (a kept one the webhook closed
    /// meanwhile); another connection may be tried.
    Unsent(String),
    /// The request went out, or may have.
    Sent(String),
}

/// One request over `connection`, driven to the end of its answer (at most
/// [`MAX_RESPONSE_BYTES`]) together with the connection itself.
async fn send(
    connection: &mut Connection,
    request: Request<Body>,
) -> Result<(http::StatusCode, bytes::Bytes), Failed> {
    let Connection { sender, io } = connection;
    let exchange = async {
        let response = sender.send_request(request).await.map_err(|e| {
            if e.is_canceled() || e.is_closed() {
                Failed::Unsent(e.to_string())
            } else {
                Failed::Sent(e.to_string())
            }
        })?;
        let status = response.status();
        let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_RESPONSE_BYTES)
            .await
            .map_err(|_| {
                Failed::Sent(format!(
                    "the response is longer than {MAX_RESPONSE_BYTES} bytes or cut short"
                ))
            })?;
        Ok((status, bytes))
    };
    tokio::pin!(exchange);
    tokio::select! {
        biased;
        answer = &mut exchange => answer,
        // The connection ended before the answer did: the exchange sees why.
        _ = &mut *io => exchange.await,
    }
}

/// POST `body` to `target` over a kept connection or a new one, and read the answer; the
/// connection is kept again when the answer was read whole and the connection can go on.
async fn exchange(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    body: Vec<u8>,
    egress: Egress,
) -> Result<(http::StatusCode, bytes::Bytes), String> {
    let key = PoolKey {
        dial: match &target.dial {
            Dial::Ip(ip) => ip.to_string(),
            Dial::Name(name) => name.clone(),
        },
        port: target.port,
        server_name: format!("{:?}", target.server_name),
        ca_bundle: ca_bundle.map(<[u8]>::to_vec),
        egress,
        runtime: tokio::runtime::Handle::current().id(),
    };
    let authority = target.url.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
    let body = bytes::Bytes::from(body);
    let request = || {
        Request::builder()
            .method(Method::POST)
            .uri(target.url.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .header(header::HOST, authority.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, */*")
            .body(Body::from(body.clone()))
            .map_err(|e| e.to_string())
    };
    // A kept connection the webhook closed meanwhile fails before anything was sent: then a
    // new one is made.
    if let Some(mut connection) = reuse(&key) {
        match send(&mut connection, request()?).await {
            Ok(answer) => {
                keep_if_ready(key, connection).await;
                return Ok(answer);
            }
            Err(Failed::Sent(reason)) => return Err(reason),
            Err(Failed::Unsent(_)) => {}
        }
    }
    let mut connection = connect(target, ca_bundle, egress).await?;
    match send(&mut connection, request()?).await {
        Ok(answer) => {
            keep_if_ready(key, connection).await;
            Ok(answer)
        }
        Err(Failed::Sent(reason) | Failed::Unsent(reason)) => Err(reason),
    }
}

/// Keep `connection` when it can take another request: its answer was read whole and the
/// webhook did not ask to close it.
async fn keep_if_ready(key: PoolKey, mut connection: Connection) {
    let Connection { sender, io } = &mut connection;
    let ready = tokio::select! {
        biased;
        ready = sender.ready() => ready.is_ok(),
        _ = &mut *io => false,
    };
    if ready {
        keep(key, connection);
    }
}

/// TLS as a webhook client: trusting `ca_bundle` alone, or the machine's roots without one.
fn client_config(ca_bundle: Option<&[u8]>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_bundle.filter(|b| !b.is_empty()) {
        Some(pem) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("caBundle: {e}"))?;
            for cert in certs {
                roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
