//! The HTTP layer: paths, query parameters, bodies and media types in; objects, lists, tables,
//! watch streams and `Status` errors out. Served under a base path, so the same router answers at
//! `/` and at `/tenants/<name>/`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::access::{self, PeerCertificates, Security};
use crate::api::{
    decode_event_object, parse_resource_version, Api, DeleteParams, ListParams, Target, Write,
};
use crate::auth::UserInfo;
use crate::discovery;
use crate::fields::{self, FieldValidation};
use crate::flowcontrol::{FlowConfig, FlowControlLayer};
use crate::intake::{PodIntake, Room};
use crate::managed::{self, Owner};
use crate::openapi;
use crate::patch;
use crate::pods::{self, PodLogs};
use crate::rbac::{Attributes, Policy};
use crate::resource::{Registry, ResourceType, Subresource};
use crate::scale::{scale_of, update_scale};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, Cause};
use crate::strict_json;
use crate::table::{self, IncludeObject, TableOptions};
use crate::tenant::Clusters;

/// How often a watch of a custom type checks that the type is still served.
const CUSTOM_WATCH_CHECK: Duration = Duration::from_millis(500);

/// The largest request body accepted, as kube-apiserver's limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The Kubernetes version this server reports (kubectl picks its binary by the minor version).
pub const KUBERNETES_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.0");

/// What the router serves.
#[derive(Debug)]
pub struct Server {
    api: Arc<Api>,
    base: String,
    security: Option<Arc<Security>>,
    /// What discovery lists beside the API's types: the access reviews on a secured cluster.
    discovered_extra: &'static [ResourceType],
    /// Where `pods/<name>/log` reads from.
    pod_logs: std::sync::OnceLock<Arc<dyn PodLogs>>,
    /// The OpenAPI v3 documents of the custom resources, for the registry they were built from.
    custom_openapi: parking_lot::Mutex<Option<CustomOpenApi>>,
    /// The window new pods wait for before they are stored, and the tenant this server serves.
    pod_intake: std::sync::OnceLock<(Arc<PodIntake>, String)>,
}

/// The registry custom OpenAPI documents were built from, and the documents (none when it
/// serves no custom resources).
type CustomOpenApi = (Arc<Registry>, Option<Arc<openapi::V3>>);

impl Server {
    /// Serve `api` under `base` (empty, or a path such as `/tenants/a` without a trailing slash)
    /// to anyone: no authentication, no authorization.
    pub fn new(api: Arc<Api>, base: &str) -> Server {
        Server {
            api,
            base: base.trim_end_matches('/').to_owned(),
            security: None,
            discovered_extra: &[],
            pod_logs: Default::default(),
            custom_openapi: Default::default(),
            pod_intake: Default::default(),
        }
    }

    /// Serve `api` under `base` to the clients `security` authenticates, as RBAC allows.
    pub fn secured(api: Arc<Api>, base: &str, security: Arc<Security>) -> Server {
        Server {
            security: Some(security),
            discovered_extra: access::ACCESS_TYPES,
            ..Server::new(api, base)
        }
    }

    /// What discovery lists now: the API's types, and the access reviews on a secured cluster.
    /// Built for discovery requests only.
    fn discovered(&self) -> Registry {
        self.api.registry().with_extra(self.discovered_extra)
    }

    /// The v3 documents of the custom resources served now, built once per registry.
    fn custom_openapi(&self) -> Option<Arc<openapi::V3>> {
        let registry = self.api.registry();
        let mut cached = self.custom_openapi.lock();
        if let Some((built_for, documents)) = cached.as_ref() {
            if Arc::ptr_eq(built_for, &registry) {
                return documents.clone();
            }
        }
        let documents = openapi::build_custom_v3(registry.is_host(), &registry).map(Arc::new);
        *cached = Some((registry, documents.clone()));
        documents
    }

    /// The API served.
    pub fn api(&self) -> &Arc<Api> {
        &self.api
    }

    /// Serve pod logs from `logs`. Only the first call has an effect; without one, a log
    /// request is 503.
    pub fn set_pod_logs(&self, logs: Arc<dyn PodLogs>) {
        let _ = self.pod_logs.set(logs);
    }

    /// Make new pods of tenant `tenant` wait for room in `intake` before they are stored. Only
    /// the first call has an effect.
    pub fn set_pod_intake(&self, intake: Arc<PodIntake>, tenant: &str) {
        let _ = self.pod_intake.set((intake, tenant.to_owned()));
    }

    /// Whether new pods wait for room in a [`PodIntake`] before they are stored.
    pub fn has_pod_intake(&self) -> bool {
        self.pod_intake.get().is_some()
    }
}

/// Who is asking, on a cluster served with security.
#[derive(Clone, Debug)]
struct Caller {
    user: UserInfo,
    policy: Arc<Policy>,
    security: Arc<Security>,
}

impl Caller {
    fn authorize(&self, attributes: Attributes) -> ApiResult<()> {
        self.security.authorize(&self.policy, &attributes)
    }
}

/// The axum router for a server.
pub fn router(server: Arc<Server>) -> Router {
    Router::new().fallback(dispatch).with_state(server)
}

/// The axum router for every cluster of a listener: `/tenants/<name>/…` goes to that tenant's
/// API (when there is no such tenant, 404 only for host users who may read tenants; 401 for
/// anyone else, as a tenant answers those without its credentials), everything else to the host
/// API; behind flow control with this machine's default limits.
pub fn clusters_router(clusters: Arc<Clusters>) -> Router {
    clusters_router_with(clusters, &FlowConfig::default())
}

/// [`clusters_router`] with flow control's limits from `flow`.
pub fn clusters_router_with(clusters: Arc<Clusters>, flow: &FlowConfig) -> Router {
    let flow_control = FlowControlLayer::new(clusters.clone(), flow);
    Router::new().fallback(dispatch_cluster).with_state(clusters).layer(flow_control)
}

async fn dispatch_cluster(State(clusters): State<Arc<Clusters>>, request: Request) -> Response {
    match clusters.route(request.uri().path()) {
        Some(server) => dispatch(State(server), request).await,
        None => unknown_tenant(&clusters, request).await,
    }
}

/// A request under `/tenants/<name>/` for a tenant that is not served. It is answered as a
/// served tenant would answer whoever lacks its credentials (401; public paths as the host
/// answers them), so that a tenant's existence is not told to anyone: only a host user who may
/// read the tenant learns it is not there (404).
async fn unknown_tenant(clusters: &Clusters, mut request: Request) -> Response {
    let path = request.uri().path();
    let rest = path.strip_prefix(crate::tenant::clusters::TENANTS_PREFIX).unwrap_or(path);
    let (name, relative) = rest.split_once('/').unwrap_or((rest, ""));
    let (name, relative) = (name.to_owned(), format!("/{relative}"));
    let not_found = ApiError::not_found(crate::tenant::types::GROUP, "tenants", &name);
    let host = clusters.host();
    let Some(security) = &host.security else { return not_found.into_response() };
    let headers = request.headers();
    let has_credentials = headers.contains_key(header::AUTHORIZATION)
        || request.extensions().get::<PeerCertificates>().is_some_and(|p| !p.is_empty());
    if !has_credentials && access::is_public(&relative) {
        let target = match request.uri().query() {
            Some(query) => format!("{relative}?{query}"),
            None => relative,
        };
        if let Ok(uri) = target.parse() {
            *request.uri_mut() = uri;
            return dispatch(State(host.clone()), request).await;
        }
    }
    let peer = request.extensions().get::<PeerCertificates>().cloned();
    let tenant_path = format!("/apis/{}/tenants/{name}", crate::tenant::types::GROUP);
    let caller = match identify(&host.api, security, headers, peer, &tenant_path, "").await {
        Ok(caller) => caller,
        Err(_) => return ApiError::unauthorized().into_response(),
    };
    let attributes = Attributes {
        user: caller.user.clone(),
        verb: "get".into(),
        resource_request: true,
        api_group: crate::tenant::types::GROUP.into(),
        api_version: crate::tenant::types::VERSION.into(),
        resource: "tenants".into(),
        name,
        ..Attributes::default()
    };
    match caller.authorize(attributes) {
        Ok(()) => not_found.into_response(),
        Err(_) => ApiError::unauthorized().into_response(),
    }
}

/// Query parameters, in order.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(raw: Option<&str>) -> Query {
        Query(
            form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// What a resource path names.
#[derive(Debug)]
struct ResourcePath {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    legacy_watch: bool,
}

async fn dispatch(State(server): State<Arc<Server>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path();
    let query = Query::parse(parts.uri.query());
    let caller = match &server.security {
        None => None,
        Some(security) => {
            let peer = parts.extensions.get::<PeerCertificates>().cloned();
            match identify(&server.api, security, &parts.headers, peer, path, &server.base).await {
                Ok(caller) => Some(caller),
                Err(e) => return e.into_response(),
            }
        }
    };
    let result =
        route(&server, caller.as_ref(), &parts.method, path, &query, &parts.headers, body).await;
    let response = result.unwrap_or_else(IntoResponse::into_response);
    tracing::debug!(method = %parts.method, %path, status = response.status().as_u16(), "request");
    response
}

/// Authenticate a request (401 for bad credentials, and for anonymous requests beyond the
/// public paths), and apply impersonation.
async fn identify(
    api: &Arc<Api>,
    security: &Arc<Security>,
    headers: &HeaderMap,
    peer: Option<PeerCertificates>,
    path: &str,
    base: &str,
) -> ApiResult<Caller> {
    let relative = path.strip_prefix(base).unwrap_or(path).to_owned();
    let identify = move |api: &Api, security: Arc<Security>, headers: &HeaderMap| {
        let user = security.authenticate(api, headers, peer.as_ref())?;
        if user.name == crate::auth::ANONYMOUS_USER && !access::is_public(&relative) {
            return Err(ApiError::unauthorized());
        }
        let policy = security.policy(api)?;
        let user = security.impersonate(&policy, user, headers)?;
        Ok(Caller { user, policy, security })
    };
    // Without a bearer token (whose service account is looked up) and with the policy current,
    // nothing here reads the store: stay on the async worker.
    let token = headers.contains_key(header::AUTHORIZATION);
    if !token && security.current_policy(api).is_some() {
        return identify(api, security.clone(), headers);
    }
    let (api, security, headers) = (api.clone(), security.clone(), headers.clone());
    blocking(move || identify(&api, security, &headers)).await
}

fn strip_base<'a>(server: &Server, path: &'a str) -> Option<&'a str> {
    if server.base.is_empty() {
        return Some(path);
    }
    let rest = path.strip_prefix(&server.base)?;
    if rest.is_empty() || rest.starts_with('/') {
        Some(rest)
    } else {
        None
    }
}

fn json_response(code: StatusCode, value: &Value) -> Response {
    json_bytes_response(code, serde_json::to_vec(value).unwrap_or_default())
}

fn json_bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (code, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Whether the client takes the object itself as JSON (not a Table, not metadata only).
fn wants_plain_json(headers: &HeaderMap) -> bool {
    let accept = accept(headers);
    !table::wants_table(accept) && !wants_partial_metadata(accept)
}

fn text(body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn accept(headers: &HeaderMap) -> &str {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("")
}

async fn route(
    server: &Server,
    caller: Option<&Caller>,
    method: &Method,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let rest = match strip_base(server, path) {
        Some(rest) => rest,
        // Health probes answer without the prefix too (`kubectl get --raw /healthz`).
        None if is_health(path) => path,
        None => return Err(ApiError::no_route()),
    };
    let rest = if rest.is_empty() { "/" } else { rest };
    let segments: Vec<&str> = rest.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let discovery_get = |value: Option<Value>| -> ApiResult<Response> {
        if method != Method::GET {
            return Err(ApiError::method_not_allowed("discovery is read-only"));
        }
        value.map(|v| json_response(StatusCode::OK, &v)).ok_or_else(ApiError::no_route)
    };
    let body = match caller {
        None => body,
        Some(caller) => {
            let body =
                match access_endpoint(server, caller, method, &segments, headers, body).await? {
                    Endpoint::Answered(response) => return Ok(response),
                    Endpoint::NotOurs(body) => body,
                };
            let resource_request =
                matches!(segments.as_slice(), ["api", "v1", _, ..] | ["apis", _, _, _, ..]);
            if !resource_request {
                let verb = method.as_str().to_ascii_lowercase();
                caller.authorize(Attributes::non_resource(caller.user.clone(), verb, rest))?;
            }
            body
        }
    };
    match segments.as_slice() {
        ["version"] => {
            let (major, minor, git) = KUBERNETES_VERSION;
            discovery_get(Some(json!({
                "major": major,
                "minor": minor,
                "gitVersion": git,
                "gitCommit": "carrel",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.24.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            })))
        }
        ["readyz", rest @ ..] if rest.len() <= 1 => crate::health::readyz(
            &server.api,
            rest.first().copied(),
            query.get("verbose").is_some(),
        ),
        ["metrics"] if server.base.is_empty() && *method == Method::GET => {
            Ok(crate::health::metrics(&server.api))
        }
        [probe, ..] if matches!(*probe, "healthz" | "livez" | "readyz") => Ok(text("ok")),
        ["api"] => {
            if discovery::wants_aggregated(accept(headers)) {
                Ok(aggregated(discovery::aggregated(&server.discovered(), true)))
            } else {
                discovery_get(Some(discovery::api_versions("127.0.0.1")))
            }
        }
        ["apis"] => {
            if discovery::wants_aggregated(accept(headers)) {
                Ok(aggregated(discovery::aggregated(&server.discovered(), false)))
            } else {
                discovery_get(Some(discovery::api_group_list(&server.discovered())))
            }
        }
        ["api", "v1"] => {
            discovery_get(discovery::api_resource_list(&server.discovered(), "", "v1"))
        }
        ["apis", group] => discovery_get(discovery::api_group(&server.discovered(), group)),
        ["apis", group, version] => {
            discovery_get(discovery::api_resource_list(&server.discovered(), group, version))
        }
        ["api", "v1", rest @ ..] => {
            let path = resource_path(server, "", "v1", rest)?;
            authorize_resource(caller, method, &path, query)?;
            resource(server, caller, method, path, query, headers, body).await
        }
        ["apis", group, version, rest @ ..] => {
            let path = resource_path(server, group, version, rest)?;
            authorize_resource(caller, method, &path, query)?;
            let deprecation = path.rt.custom.as_ref().and_then(|c| c.deprecation_warning.clone());
            let response = resource(server, caller, method, path, query, headers, body).await?;
            Ok(with_warnings(response, deprecation.as_slice()))
        }
        ["openapi", rest @ ..] => openapi(server, method, rest, query, headers).await,
        _ => Err(ApiError::no_route()),
    }
}

/// 403 unless the caller (if the cluster has security) may make this resource request.
fn authorize_resource(
    caller: Option<&Caller>,
    method: &Method,
    path: &ResourcePath,
    query: &Query,
) -> ApiResult<()> {
    let Some(caller) = caller else { return Ok(()) };
    let watch = path.legacy_watch || query.flag("watch");
    let verb = access::verb(method, path.name.is_some(), watch);
    let mut attributes =
        Attributes::resource(caller.user.clone(), verb, path.rt.group, path.rt.plural);
    attributes.api_version = path.rt.version.to_owned();
    if let Some(ns) = &path.namespace {
        attributes.namespace = ns.clone();
    } else if path.rt.group.is_empty() && path.rt.plural == "namespaces" {
        // A namespace is in itself, as kube-apiserver's request info has it.
        attributes.namespace = path.name.clone().unwrap_or_default();
    }
    if let Some(name) = &path.name {
        attributes.name = name.clone();
    }
    if let Some(sub) = &path.subresource {
        attributes.subresource = sub.clone();
    }
    caller.authorize(attributes)
}

/// What [`access_endpoint`] did with a request.
enum Endpoint {
    /// It was an access-review or TokenRequest call, answered.
    Answered(Response),
    /// It was not: the body comes back.
    NotOurs(Body),
}

/// The access-review endpoints (`authorization.k8s.io`, `authentication.k8s.io`) and the
/// `serviceaccounts/<name>/token` subresource, on a cluster with security.
async fn access_endpoint(
    server: &Server,
    caller: &Caller,
    method: &Method,
    segments: &[&str],
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Endpoint> {
    let (group, resource, namespace, name) = match segments {
        ["apis", group @ ("authorization.k8s.io" | "authentication.k8s.io"), "v1", resource] => {
            (*group, *resource, None, None)
        }
        ["apis", "authorization.k8s.io", "v1", "namespaces", ns, "localsubjectaccessreviews"] => {
            ("authorization.k8s.io", "localsubjectaccessreviews", Some(*ns), None)
        }
        ["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] => {
            ("", "serviceaccounts", Some(*ns), Some(*name))
        }
        _ => return Ok(Endpoint::NotOurs(body)),
    };
    let known = matches!(
        resource,
        "selfsubjectaccessreviews"
            | "selfsubjectrulesreviews"
            | "subjectaccessreviews"
            | "localsubjectaccessreviews"
            | "selfsubjectreviews"
            | "tokenreviews"
            | "serviceaccounts"
    );
    if !known {
        return Err(ApiError::no_route());
    }
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(format!("{resource} only accept POST (create)")));
    }
    let mut attributes = Attributes::resource(caller.user.clone(), "create", group, resource);
    if let Some(ns) = namespace {
        attributes.namespace = ns.to_owned();
    }
    if let Some(name) = name {
        attributes.name = name.to_owned();
        attributes.subresource = "token".to_owned();
    }
    caller.authorize(attributes)?;
    let object = decode_body(headers, &read_body(body).await?)?;
    let api = server.api.clone();
    let caller = caller.clone();
    let resource = resource.to_owned();
    let namespace = namespace.map(str::to_owned);
    let name = name.map(str::to_owned);
    let answer = blocking(move || match name {
        Some(name) => access::token_request(
            &api,
            &caller.security,
            namespace.as_deref().unwrap_or_default(),
            &name,
            &object,
        ),
        None => access::review(
            &api,
            &caller.security,
            &caller.user,
            &resource,
            namespace.as_deref(),
            &object,
        ),
    })
    .await?;
    Ok(Endpoint::Answered(json_response(StatusCode::CREATED, &answer)))
}

/// `/openapi/v3…` and `/openapi/v2`; a redirect to the current hash keeps the base path.
async fn openapi(
    server: &Server,
    method: &Method,
    segments: &[&str],
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed("the OpenAPI documents are read-only"));
    }
    // The documents are built on first use, off the async workers.
    let host = server.api.registry().is_host();
    if segments.first() == Some(&"v2") {
        blocking(move || {
            openapi::v2(host);
            Ok(())
        })
        .await?;
    } else {
        blocking(move || {
            openapi::v3(host);
            Ok(())
        })
        .await?;
    }
    let custom = match segments.first() {
        Some(&"v3") => server.custom_openapi(),
        _ => None,
    };
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok());
    let header =
        |value: &str| HeaderValue::from_str(value).map_err(|e| ApiError::internal(e.to_string()));
    let hash = query.get("hash");
    match openapi::answer_with(
        host,
        custom.as_deref(),
        segments,
        hash,
        accept(headers),
        if_none_match,
    ) {
        openapi::Answer::Body { body, content_type, etag, immutable } => {
            let mut response = (StatusCode::OK, body.to_vec()).into_response();
            let h = response.headers_mut();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            if let Some(etag) = etag {
                h.insert(header::ETAG, header(&format!("\"{etag}\""))?);
            }
            if immutable {
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, immutable"));
                let expires = chrono::Utc::now() + chrono::Duration::days(365);
                h.insert(
                    header::EXPIRES,
                    header(&expires.format("%a, %d %b %Y %H:%M:%S GMT").to_string())?,
                );
                h.insert(header::VARY, HeaderValue::from_static("Accept"));
            }
            Ok(response)
        }
        openapi::Answer::Redirect(to) => {
            let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
            response
                .headers_mut()
                .insert(header::LOCATION, header(&format!("{}{to}", server.base))?);
            Ok(response)
        }
        openapi::Answer::NotModified => Ok(StatusCode::NOT_MODIFIED.into_response()),
        openapi::Answer::NotFound => Err(ApiError::no_route()),
    }
}

/// Whether `path` (within a cluster) is a health probe or the version.
pub(crate) fn is_health(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(first, "healthz" | "livez" | "readyz" | "version")
}

fn aggregated(value: Value) -> Response {
    let mut response = json_response(StatusCode::OK, &value);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE));
    response
}

fn resource_path(
    server: &Server,
    group: &str,
    version: &str,
    segments: &[&str],
) -> ApiResult<ResourcePath> {
    let registry = server.api.registry();
    let (legacy_watch, segments) = match segments {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, segments),
    };
    let lookup =
        |plural: &str| registry.get(group, version, plural).cloned().ok_or_else(ApiError::no_route);
    let owned = |s: &&str| s.to_string();
    let path = match segments {
        // /namespaces/<ns>/status and /finalize are the namespace's own subresources.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => ResourcePath {
            rt: lookup("namespaces")?,
            namespace: None,
            name: Some(name.to_string()),
            subresource: Some(sub.to_string()),
            legacy_watch,
        },
        ["namespaces", ns, plural, rest @ ..] => {
            let rt = lookup(plural)?;
            if !rt.namespaced {
                return Err(ApiError::no_route());
            }
            if rest.len() > 2 {
                return Err(ApiError::no_route());
            }
            ResourcePath {
                rt,
                namespace: Some(ns.to_string()),
                name: rest.first().map(owned),
                subresource: rest.get(1).map(owned),
                legacy_watch,
            }
        }
        [plural, rest @ ..] if rest.len() <= 2 => {
            let rt = lookup(plural)?;
            if rt.namespaced && !rest.is_empty() {
                // A namespaced object must be named with its namespace.
                return Err(ApiError::no_route());
            }
            ResourcePath {
                rt,
                namespace: None,
                name: rest.first().map(owned),
                subresource: rest.get(1).map(owned),
                legacy_watch,
            }
        }
        _ => return Err(ApiError::no_route()),
    };
    Ok(path)
}

fn subresource_of(path: &ResourcePath) -> ApiResult<Option<Subresource>> {
    match path.subresource.as_deref() {
        None => Ok(None),
        Some(sub) => {
            let found = path.rt.subresources.iter().find(|s| s.name() == sub).copied();
            found.map(Some).ok_or_else(ApiError::no_route)
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::MultiThread {
        // The worker thread becomes a blocking thread for the call and hands its other tasks
        // to a fresh worker: no round trip through the blocking pool for the common case of a
        // store call that does not wait long.
        return tokio::task::block_in_place(f);
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("request task failed: {e}")))?
}

async fn read_body(body: Body) -> ApiResult<Bytes> {
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.map_err(|e| {
        if let Some(timeout) = crate::listener::BodyTimeout::find(&e) {
            return ApiError::timeout(timeout.to_string());
        }
        ApiError::too_large(format!(
            "the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
        ))
    })
}

/// Decode a request body by its Content-Type.
fn decode_body(headers: &HeaderMap, body: &[u8]) -> ApiResult<Value> {
    decode_body_checked(headers, body).map(|(value, _)| value)
}

/// Decode a request body by its Content-Type, with the paths of any duplicate JSON fields (YAML
/// refuses duplicate keys itself; protobuf cannot carry them).
fn decode_body_checked(headers: &HeaderMap, body: &[u8]) -> ApiResult<(Value, Vec<String>)> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" | "" => strict_json::parse(body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            crate::decode::yaml(body, "the request body").map(|v| (v, Vec::new()))
        }
        crate::protobuf::MEDIA_TYPE => {
            crate::protobuf::decode_request(body).map(|v| (v, Vec::new()))
        }
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

fn dry_run(query: &Query) -> ApiResult<bool> {
    match query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid dryRun value {other:?}: only \"All\" is supported"
        ))),
    }
}

/// The field manager of a write: `fieldManager`, else from the User-Agent; `options` names the
/// request's options kind for errors.
fn field_manager(query: &Query, headers: &HeaderMap, options: &str) -> ApiResult<String> {
    let agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok());
    let manager = managed::manager_of(query.get("fieldManager"), agent);
    managed::validate_manager(options, &manager)?;
    Ok(manager)
}

/// How a create or update is made: dry run or not, and by which field manager.
fn write_of(
    query: &Query,
    headers: &HeaderMap,
    options: &str,
    sub: Option<Subresource>,
) -> ApiResult<Write> {
    Ok(Write {
        dry_run: dry_run(query)?,
        owner: Owner::Update {
            manager: field_manager(query, headers, options)?,
            subresource: sub.map(Subresource::name),
        },
    })
}

/// `PatchOptions`: server-side apply needs a field manager and alone may force.
fn patch_options(
    query: &Query,
    headers: &HeaderMap,
    kind: patch::PatchKind,
) -> ApiResult<patch::PatchOptions> {
    let apply = kind == patch::PatchKind::Apply;
    let invalid = |field: &str, reason: &'static str, message: &str| {
        ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::new(reason, field, message)],
        )
    };
    let force = match query.get("force") {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid force value {other:?}: must be true or false"
            )))
        }
    };
    if force && !apply {
        return Err(invalid(
            "force",
            "FieldValueForbidden",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    if apply && query.get("fieldManager").is_none_or(str::is_empty) {
        return Err(invalid(
            "fieldManager",
            "FieldValueRequired",
            "Required value: is required for apply patch",
        ));
    }
    Ok(patch::PatchOptions {
        dry_run: dry_run(query)?,
        validation: FieldValidation::parse(query.get("fieldValidation"))?,
        manager: field_manager(query, headers, "PatchOptions")?,
        force,
    })
}

fn list_params(query: &Query) -> ApiResult<ListParams> {
    let limit = match query.get("limit") {
        None | Some("") | Some("0") => None,
        Some(l) => Some(l.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!("invalid limit {l:?}: must be a non-negative integer"))
        })?),
    };
    Ok(ListParams {
        labels: query.get("labelSelector").map(LabelSelector::parse).transpose()?,
        fields: query.get("fieldSelector").map(FieldSelector::parse).transpose()?,
        limit,
        continue_token: query.get("continue").filter(|c| !c.is_empty()).map(str::to_owned),
        // Only a list reads `resourceVersion` this way (see `list_version`); a watch reads it
        // itself, and its initial list shows the most recent state.
        version: crate::api::ListVersion::MostRecent,
    })
}

/// Which state a list shows: `resourceVersion` and `resourceVersionMatch`, checked as
/// kube-apiserver checks `ListOptions` (422 Invalid) and read as its storage reads them.
fn list_version(query: &Query, params: &ListParams) -> ApiResult<crate::api::ListVersion> {
    use crate::api::ListVersion;
    use crate::status::Cause;
    let rv = query.get("resourceVersion").unwrap_or_default();
    let matching = query.get("resourceVersionMatch").unwrap_or_default();
    let continuing = params.continue_token.is_some();
    if !matching.is_empty() {
        let field = "resourceVersionMatch";
        let forbidden =
            |why: &str| Cause::new("FieldValueForbidden", field, format!("Forbidden: {why}"));
        let mut causes = Vec::new();
        if rv.is_empty() {
            causes.push(forbidden(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if continuing {
            causes.push(forbidden("resourceVersionMatch is forbidden when continue is provided"));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                field,
                format!("Unsupported value: \"{matching}\": supported values: \"Exact\", \"NotOlderThan\", \"\""),
            ));
        }
        if matching == "Exact" && rv == "0" {
            causes.push(forbidden(
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
        }
    }
    if rv.is_empty() {
        return Ok(ListVersion::MostRecent);
    }
    if continuing {
        // The token carries its list's revision; "0" is tolerated, as kube-apiserver does.
        if rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(ListVersion::MostRecent);
    }
    let revision = parse_resource_version(rv)?;
    Ok(match matching {
        "Exact" => ListVersion::Exact(revision),
        _ if revision == 0 => ListVersion::Any,
        "NotOlderThan" => ListVersion::NotOlderThan(revision),
        // Unset: kube-apiserver's legacy reading, exact for a paginated list.
        _ if params.limit.is_some() => ListVersion::Exact(revision),
        _ => ListVersion::NotOlderThan(revision),
    })
}

fn respond_object(
    code: StatusCode,
    rt: &ResourceType,
    object: Value,
    headers: &HeaderMap,
    query: &Query,
) -> Response {
    let accept = accept(headers);
    if table::wants_table(accept) {
        let options = TableOptions { include_object: include_object(query), no_headers: false };
        let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
        let t = table::table(rt, &[object], metadata, table::table_version(accept), options);
        return json_response(code, &t);
    }
    if wants_partial_metadata(accept) {
        return json_response(code, &partial_metadata(&object));
    }
    json_response(code, &object)
}

fn include_object(query: &Query) -> IncludeObject {
    match query.get("includeObject") {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    }
}

fn wants_partial_metadata(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        first.contains("as=PartialObjectMetadata") && first.contains("g=meta.k8s.io")
    })
}

fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or(json!({})),
    })
}

/// Room in the server's pod intake for a pod about to be stored (none without an intake);
/// dropping it gives it back.
async fn pod_room(server: &Server) -> Option<(&PodIntake, &str, Room)> {
    let (intake, tenant) = server.pod_intake.get()?;
    Some((intake, tenant, intake.enter(tenant).await))
}

/// Keep `room` until the syncer takes up the pod `created`.
fn hold_pod_room(room: Option<(&PodIntake, &str, Room)>, created: &Value) {
    if let Some((intake, tenant, room)) = room {
        let at = |p: &str| created.pointer(p).and_then(Value::as_str).unwrap_or_default();
        intake.hold(tenant, at("/metadata/namespace"), at("/metadata/name"), room);
    }
}

/// Whether `rt` is the core group's pods.
fn is_pod(rt: &ResourceType) -> bool {
    rt.group.is_empty() && rt.plural == "pods"
}

async fn resource(
    server: &Server,
    caller: Option<&Caller>,
    method: &Method,
    path: ResourcePath,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let api = server.api.clone();
    let rt = path.rt.clone();
    if is_pod(&rt) {
        if let (Some(sub), Some(name), Some(namespace)) =
            (path.subresource.as_deref(), &path.name, &path.namespace)
        {
            match (sub, method) {
                ("binding", &Method::POST) => {
                    let binding = decode_body(headers, &read_body(body).await?)?;
                    let (name, namespace) = (name.clone(), namespace.clone());
                    let status = blocking(move || {
                        let target = Target { rt: &rt, namespace: Some(namespace) };
                        pods::bind(&api, &target, &name, &binding)
                    })
                    .await?;
                    return Ok(json_response(StatusCode::CREATED, &status));
                }
                ("log", &Method::GET) => return pod_log(server, namespace, name, query).await,
                ("binding" | "log", _) => {
                    return Err(ApiError::method_not_allowed(format!(
                        "pods/{sub} does not accept {method}"
                    )))
                }
                (
                    "exec"
                    | "attach"
                    | "portforward"
                    | "proxy"
                    | "eviction"
                    | "ephemeralcontainers",
                    _,
                ) => {
                    return Err(ApiError::method_not_allowed(format!(
                        "pods/{sub} is not supported by this server: a pod's containers are \
                         reached through the host cluster that runs them"
                    )))
                }
                _ => {}
            }
        }
    }
    let sub = subresource_of(&path)?;
    if sub.is_none() && path.subresource.is_some() {
        return Err(ApiError::no_route());
    }
    if rt.namespaced && path.namespace.is_none() && method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{} must be written through a namespace",
            rt.plural
        )));
    }
    let namespace = path.namespace.clone();
    let watch = path.legacy_watch || query.flag("watch");
    match (method.clone(), path.name.clone()) {
        (Method::GET, None) if watch => watch_stream(server, rt, namespace, query, headers).await,
        (Method::GET, None) => {
            let mut params = list_params(query)?;
            params.version = list_version(query, &params)?;
            let rt2 = rt.clone();
            if wants_plain_json(headers)
                && !accept(headers).contains("as=PartialObjectMetadataList")
            {
                let bytes = blocking(move || {
                    let target = Target { rt: &rt2, namespace };
                    api.list_json(&target, &params)
                })
                .await?;
                return Ok(json_bytes_response(StatusCode::OK, bytes));
            }
            let list = blocking(move || {
                let target = Target { rt: &rt2, namespace };
                api.list(&target, &params)
            })
            .await?;
            let accept = accept(headers);
            if table::wants_table(accept) {
                let items = list["items"].as_array().map(Vec::as_slice).unwrap_or_default();
                let options =
                    TableOptions { include_object: include_object(query), no_headers: false };
                let t = table::table(
                    &rt,
                    items,
                    list["metadata"].clone(),
                    table::table_version(accept),
                    options,
                );
                return Ok(json_response(StatusCode::OK, &t));
            }
            if accept.contains("as=PartialObjectMetadataList") {
                let items: Vec<Value> = list["items"]
                    .as_array()
                    .map(|a| a.iter().map(partial_metadata).collect())
                    .unwrap_or_default();
                return Ok(json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "PartialObjectMetadataList",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": list["metadata"],
                        "items": items,
                    }),
                ));
            }
            Ok(json_response(StatusCode::OK, &list))
        }
        (Method::GET, Some(name)) if sub.is_none() && wants_plain_json(headers) => {
            let rt2 = rt.clone();
            let bytes =
                blocking(move || api.get_json(&Target { rt: &rt2, namespace }, &name)).await?;
            Ok(json_bytes_response(StatusCode::OK, bytes))
        }
        (Method::GET, Some(name)) => {
            let rt2 = rt.clone();
            let object = blocking(move || api.get(&Target { rt: &rt2, namespace }, &name)).await?;
            let object = match sub {
                Some(Subresource::Scale) => scale_of(&rt, &object),
                _ => object,
            };
            Ok(respond_object(StatusCode::OK, &rt, object, headers, query))
        }
        (Method::POST, None) => {
            refuse_protobuf(&rt, headers)?;
            let write = write_of(query, headers, "CreateOptions", sub)?;
            let validation = FieldValidation::parse(query.get("fieldValidation"))?;
            let (mut object, duplicates) = decode_body_checked(headers, &read_body(body).await?)?;
            let warnings = fields::prune(&rt, &mut object, validation, &duplicates)?;
            guard_rbac_write(caller, &api, &rt, namespace.as_deref(), &object, None)?;
            let room = if is_pod(&rt) && sub.is_none() && !write.dry_run {
                pod_room(server).await
            } else {
                None
            };
            let rt2 = rt.clone();
            let created =
                blocking(move || api.create(&Target { rt: &rt2, namespace }, object, &write))
                    .await?;
            hold_pod_room(room, &created);
            let response = respond_object(StatusCode::CREATED, &rt, created, headers, query);
            Ok(with_warnings(response, &warnings))
        }
        (Method::PUT, Some(name)) => {
            refuse_protobuf(&rt, headers)?;
            let write = write_of(query, headers, "UpdateOptions", sub)?;
            let validation = FieldValidation::parse(query.get("fieldValidation"))?;
            let (mut object, duplicates) = decode_body_checked(headers, &read_body(body).await?)?;
            let warnings = match sub {
                Some(Subresource::Scale) => Vec::new(),
                _ => fields::prune(&rt, &mut object, validation, &duplicates)?,
            };
            guard_rbac_write(caller, &api, &rt, namespace.as_deref(), &object, Some(&name))?;
            let rt2 = rt.clone();
            let updated = blocking(move || {
                let target = Target { rt: &rt2, namespace };
                match sub {
                    Some(Subresource::Scale) => update_scale(&api, &target, &name, object, &write),
                    _ => api.update(&target, &name, object, sub, &write),
                }
            })
            .await?;
            let updated = match sub {
                Some(Subresource::Scale) => scale_of(&rt, &updated),
                _ => updated,
            };
            let response = respond_object(StatusCode::OK, &rt, updated, headers, query);
            Ok(with_warnings(response, &warnings))
        }
        (Method::PATCH, Some(name)) => {
            let kind = patch::PatchKind::from_content_type(
                headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or(""),
            )?;
            let options = patch_options(query, headers, kind)?;
            let raw = read_body(body).await?;
            if caller.is_some() && rt.group == crate::rbac::RBAC_GROUP {
                // What the patch would store is what must not escalate: find it without storing.
                let (api2, rt2, ns2, name2, raw2) =
                    (api.clone(), rt.clone(), namespace.clone(), name.clone(), raw.clone());
                let dry = patch::PatchOptions { dry_run: true, ..options.clone() };
                let would = blocking(move || {
                    let target = Target { rt: &rt2, namespace: ns2 };
                    patch::patch(&api2, &target, &name2, sub, kind, &raw2, &dry)
                })
                .await?;
                guard_rbac_write(
                    caller,
                    &api,
                    &rt,
                    namespace.as_deref(),
                    &would.object,
                    Some(&name),
                )?;
            }
            // Server-side apply creates what does not exist: a new pod waits for room as a POSTed
            // one does.
            let room = if kind == patch::PatchKind::Apply
                && is_pod(&rt)
                && sub.is_none()
                && !options.dry_run
                && server.pod_intake.get().is_some()
            {
                let (api2, rt2, ns2, name2) =
                    (api.clone(), rt.clone(), namespace.clone(), name.clone());
                let exists =
                    blocking(move || api2.get(&Target { rt: &rt2, namespace: ns2 }, &name2))
                        .await
                        .is_ok();
                if exists {
                    None
                } else {
                    pod_room(server).await
                }
            } else {
                None
            };
            let rt2 = rt.clone();
            let patched = blocking(move || {
                let target = Target { rt: &rt2, namespace };
                patch::patch(&api, &target, &name, sub, kind, &raw, &options)
            })
            .await?;
            if patched.created {
                hold_pod_room(room, &patched.object);
            }
            let object = match sub {
                Some(Subresource::Scale) => scale_of(&rt, &patched.object),
                _ => patched.object,
            };
            let code = if patched.created { StatusCode::CREATED } else { StatusCode::OK };
            let response = respond_object(code, &rt, object, headers, query);
            Ok(with_warnings(response, &patched.warnings))
        }
        (Method::DELETE, name) => {
            let raw = read_body(body).await?;
            let mut params = delete_params(headers, &raw)?;
            params.dry_run |= dry_run(query)?;
            if let Some(g) = query.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
                params.grace_period_seconds = Some(g.parse().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid gracePeriodSeconds {g:?}: must be an integer"
                    ))
                })?);
            }
            if let Some(p) = query.get("propagationPolicy") {
                params.propagation_policy = Some(p.to_owned());
            }
            let rt2 = rt.clone();
            match name {
                Some(name) => {
                    let deleted = blocking(move || {
                        api.delete(&Target { rt: &rt2, namespace }, &name, &params)
                    })
                    .await?;
                    Ok(respond_object(StatusCode::OK, &rt, deleted, headers, query))
                }
                None => {
                    let list = list_params(query)?;
                    let deleted = blocking(move || {
                        api.delete_collection(&Target { rt: &rt2, namespace }, &list, &params)
                    })
                    .await?;
                    Ok(json_response(StatusCode::OK, &deleted))
                }
            }
        }
        (m, _) => Err(ApiError::method_not_allowed(format!("{m} is not supported on this path"))),
    }
}

/// Custom resources are JSON (or YAML): kube-apiserver has no protobuf for them.
fn refuse_protobuf(rt: &ResourceType, headers: &HeaderMap) -> ApiResult<()> {
    let content_type =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if rt.is_custom() && content_type.starts_with(crate::protobuf::MEDIA_TYPE) {
        return Err(ApiError::unsupported(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml (got {content_type:?})"
        )));
    }
    Ok(())
}

/// On a cluster with security, refuse an RBAC write that would grant more than the caller holds
/// (`name` is the object replaced, for an update).
fn guard_rbac_write(
    caller: Option<&Caller>,
    api: &Api,
    rt: &ResourceType,
    namespace: Option<&str>,
    object: &Value,
    name: Option<&str>,
) -> ApiResult<()> {
    let Some(caller) = caller else { return Ok(()) };
    if rt.group != crate::rbac::RBAC_GROUP {
        return Ok(());
    }
    let old = match name {
        Some(name) => {
            match api.get(&Target { rt, namespace: namespace.map(str::to_owned) }, name) {
                Ok(old) => Some(old),
                Err(ApiError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            }
        }
        None => None,
    };
    let mut object = object.clone();
    if object.pointer("/metadata/name").is_none() {
        if let Some(name) = name {
            object["metadata"]["name"] = json!(name);
        }
    }
    access::check_rbac_write(
        &caller.policy,
        &caller.user,
        rt,
        namespace.unwrap_or_default(),
        &object,
        old.as_ref(),
    )
}

/// Add a `Warning: 299 - "…"` header per warning, as kube-apiserver sends them.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for warning in warnings {
        let escaped = warning.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

fn delete_params(headers: &HeaderMap, raw: &[u8]) -> ApiResult<DeleteParams> {
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(DeleteParams::default());
    }
    let body = decode_body(headers, raw)?;
    let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    Ok(DeleteParams {
        uid: string(body.pointer("/preconditions/uid")),
        resource_version: string(body.pointer("/preconditions/resourceVersion")),
        dry_run: body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All")),
        grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
        propagation_policy: string(body.get("propagationPolicy")),
    })
}

/// A watch: optional initial events, then changes, as newline-delimited JSON events.
/// `GET pods/<name>/log`: plain text from the cluster's [`PodLogs`].
async fn pod_log(
    server: &Server,
    namespace: &str,
    name: &str,
    query: &Query,
) -> ApiResult<Response> {
    let options = pods::LogOptions::parse(|k| query.get(k).map(str::to_owned))?;
    let api = server.api.clone();
    let rt = crate::resource::built_in("", "pods").cloned().ok_or_else(ApiError::no_route)?;
    let (ns, pod_name) = (namespace.to_owned(), name.to_owned());
    let pod =
        blocking(move || api.get(&Target { rt: &rt, namespace: Some(ns) }, &pod_name)).await?;
    pods::container_of(&pod, &options)?;
    let Some(logs) = server.pod_logs.get() else {
        return Err(ApiError::unavailable("no kubelet serves pod logs on this cluster"));
    };
    let stream = logs.logs(namespace, &pod, options).await?;
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

async fn watch_stream(
    server: &Server,
    rt: ResourceType,
    namespace: Option<String>,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let api = server.api.clone();
    let params = list_params(query)?;
    if let Some(fields) = &params.fields {
        fields.check_supported(rt.group, rt.plural)?;
    }
    let rv = query.get("resourceVersion").unwrap_or_default().to_owned();
    let send_initial = match query.get("sendInitialEvents") {
        Some("true") => {
            if query.get("resourceVersionMatch") != Some("NotOlderThan")
                || !query.flag("allowWatchBookmarks")
            {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "ListOptions",
                    "",
                    vec![crate::status::Cause::new(
                        "FieldValueInvalid",
                        "sendInitialEvents",
                        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan and allowWatchBookmarks",
                    )],
                ));
            }
            true
        }
        Some("false") | None => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!("invalid sendInitialEvents {other:?}")))
        }
    };
    let bookmarks = query.flag("allowWatchBookmarks");
    let timeout = match query.get("timeoutSeconds") {
        None | Some("") => Duration::from_secs(30 * 60),
        Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!(
                "invalid timeoutSeconds {t:?}: must be a non-negative integer"
            ))
        })?),
    };
    let accept = accept(headers).to_owned();
    let as_table = table::wants_table(&accept);
    let table_version = table::table_version(&accept);
    let include = include_object(query);

    // Initial state: for an unset or "0" resourceVersion, or sendInitialEvents, the current
    // objects as ADDED events, then changes after the list's revision.
    let initial = send_initial || rv.is_empty() || rv == "0";
    let (initial_items, start) = if initial {
        let rt2 = rt.clone();
        let ns = namespace.clone();
        let api2 = api.clone();
        let list_params = ListParams { limit: None, continue_token: None, ..params.clone() };
        let mut list =
            blocking(move || api2.list(&Target { rt: &rt2, namespace: ns }, &list_params)).await?;
        let start =
            list["metadata"]["resourceVersion"].as_str().unwrap_or("0").parse::<u64>().unwrap_or(0);
        let items = match list["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        (items, start)
    } else {
        (Vec::new(), parse_resource_version(&rv)?)
    };

    let rt2 = rt.clone();
    let ns = namespace.clone();
    let api2 = api.clone();
    let store_watch =
        blocking(move || api2.watch(&Target { rt: &rt2, namespace: ns }, start)).await;

    let filtering = params.labels.as_ref().is_some_and(|l| !l.is_everything())
        || params.fields.as_ref().is_some_and(|f| !f.is_everything());
    let encoder = EventEncoder { rt: rt.clone(), as_table, table_version, include, first: true };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let mut encoder = encoder;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        for item in initial_items {
            if tx.send(encoder.event("ADDED", &item)).await.is_err() {
                return;
            }
        }
        if send_initial {
            let bookmark = json!({
                "kind": rt.kind,
                "apiVersion": rt.group_version(),
                "metadata": {"resourceVersion": start.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}},
            });
            if tx.send(encoder.raw("BOOKMARK", &bookmark)).await.is_err() {
                return;
            }
        }
        let mut watch = match store_watch {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(encoder.raw("ERROR", &e.to_status())).await;
                return;
            }
        };
        let mut last = start;
        let mut ticker = tokio::time::interval(Duration::from_secs(60));
        ticker.tick().await;
        // A custom type's watches end when its definition stops serving it (deleted, or the
        // version no longer served), as kube-apiserver's do: clients then relist and learn.
        let mut served = tokio::time::interval(CUSTOM_WATCH_CHECK);
        served.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                _ = served.tick(), if rt.is_custom() => {
                    if api.registry().get(rt.group, rt.version, rt.plural).is_none() {
                        return;
                    }
                }
                _ = ticker.tick(), if bookmarks => {
                    let bookmark = json!({
                        "kind": rt.kind,
                        "apiVersion": rt.group_version(),
                        "metadata": {"resourceVersion": last.to_string()},
                    });
                    if tx.send(encoder.raw("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                }
                next = watch.next() => {
                    let event = match next {
                        None => return,
                        Some(Err(e)) => {
                            let status = ApiError::from_store(e, rt.group, rt.plural, "").to_status();
                            let _ = tx.send(encoder.raw("ERROR", &status)).await;
                            return;
                        }
                        Some(Ok(event)) => event,
                    };
                    last = event.revision;
                    let line = if !filtering
                        && !encoder.as_table
                        && crate::crd::shown_as_stored(&rt, &event.value, event.revision)
                    {
                        encoder.stored(&event)
                    } else {
                        let Some((kind, object)) = translate(&api, &rt, &params, &event) else {
                            continue;
                        };
                        encoder.event(kind, &object)
                    };
                    if tx.send(line).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    let stream = tokio_stream_from(rx).map(Ok::<Bytes, std::convert::Infallible>);
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    Ok(response)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A store event as the watcher sees it through its selectors: a change that moves an object
/// into the selection is ADDED, one that moves it out is DELETED.
fn translate(
    api: &Api,
    rt: &ResourceType,
    params: &ListParams,
    event: &carrel_store::Event,
) -> Option<(&'static str, Value)> {
    let object = crate::crd::present(rt, decode_event_object(event).ok()?, event.revision);
    let selected = |o: &Value| api.selected(rt, o, params);
    match event.kind {
        carrel_store::EventKind::Created => selected(&object).then_some(("ADDED", object)),
        carrel_store::EventKind::Deleted => selected(&object).then_some(("DELETED", object)),
        carrel_store::EventKind::Modified => {
            let before = event
                .prev_value
                .as_ref()
                .and_then(|p| serde_json::from_slice::<Value>(p).ok())
                .map(|o| selected(&o))
                .unwrap_or(false);
            match (before, selected(&object)) {
                (true, true) => Some(("MODIFIED", object)),
                (false, true) => Some(("ADDED", object)),
                (true, false) => Some(("DELETED", object)),
                (false, false) => None,
            }
        }
    }
}

struct EventEncoder {
    rt: ResourceType,
    as_table: bool,
    table_version: &'static str,
    include: IncludeObject,
    first: bool,
}

impl EventEncoder {
    fn event(&mut self, kind: &str, object: &Value) -> Bytes {
        if self.as_table {
            let options = TableOptions { include_object: self.include, no_headers: !self.first };
            self.first = false;
            let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
            let t = table::table(
                &self.rt,
                std::slice::from_ref(object),
                metadata,
                self.table_version,
                options,
            );
            return self.raw(kind, &t);
        }
        self.raw(kind, object)
    }

    /// A store event as a JSON watch line, from the stored bytes (no selectors, no Table): no
    /// decoding and re-encoding of the object.
    fn stored(&self, event: &carrel_store::Event) -> Bytes {
        let kind = match event.kind {
            carrel_store::EventKind::Created => "ADDED",
            carrel_store::EventKind::Modified => "MODIFIED",
            carrel_store::EventKind::Deleted => "DELETED",
        };
        let object = event.object();
        match crate::object::splice_resource_version(&object.value, object.mod_revision) {
            Some(spliced) => {
                let mut line = Vec::with_capacity(spliced.len() + 32);
                line.extend_from_slice(b"{\"type\":\"");
                line.extend_from_slice(kind.as_bytes());
                line.extend_from_slice(b"\",\"object\":");
                line.extend_from_slice(&spliced);
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            }
            None => match decode_event_object(event) {
                Ok(object) => self.raw(kind, &object),
                Err(e) => self.raw("ERROR", &e.to_status()),
            },
        }
    }

    fn raw(&self, kind: &str, object: &Value) -> Bytes {
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }
}
