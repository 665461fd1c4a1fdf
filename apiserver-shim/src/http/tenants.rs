//! Which cluster a request on a listener is for: the tenant its `/tenants/<name>/` path names,
//! else the host; and the answer for a tenant that is not served.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;

use super::clusters::{Forwarded, Route, TENANTS_PREFIX};
use super::{Clusters, Server};
use crate::access::{self, PeerCertificates};
use crate::listener::TlsServerName;
use crate::rbac::Attributes;
use crate::status::ApiError;

use super::gate::{run, Gate, Next, Step};
use super::identity::{identify, Credentials};
use super::Cluster;

/// The tenant-selection layer: the request goes on with its [`Cluster`] in its extensions.
#[derive(Clone, Debug)]
pub(super) struct SelectCluster(pub(super) Arc<Clusters>);

/// The tenant a request names other than by its path: its TLS server name
/// (`<tenant>.<domain>`, the listener's [`Clusters::tenant_domain`]), else the issuer of its bearer token (a tenant's
/// service-account token, as an in-cluster client sends it, with no path prefix and no server
/// name of its own choosing).
fn named_tenant(request: &Request, domain: &str) -> Option<String> {
    if let Some(TlsServerName(name)) = request.extensions().get::<TlsServerName>() {
        let tenant = name.strip_suffix(domain).and_then(|t| t.strip_suffix('.'));
        if let Some(tenant) = tenant.filter(|t| !t.is_empty() && !t.contains('.')) {
            return Some(tenant.to_owned());
        }
    }
    let bearer = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    crate::auth::token::claimed_tenant(crate::auth::bearer(bearer)?)
}

/// A request that names a tenant ([`named_tenant`]) and whose path is not under `/tenants/`:
/// its path as the tenant's (`/api` becomes `/tenants/<tenant>/api`). Clients that drop a
/// kubeconfig's path (`kubectl get --raw` before 1.34) and in-cluster clients reach their tenant
/// so. Only the tenant is chosen so: its credentials are the tenant's to check, as on its path
/// (a token claiming a tenant whose key did not sign it is 401 there).
fn to_named_tenant(request: &mut Request, domain: &str) {
    let path = request.uri().path();
    if path.starts_with(TENANTS_PREFIX) {
        return;
    }
    let Some(tenant) = named_tenant(request, domain) else { return };
    let target = match request.uri().query() {
        Some(query) => format!("{TENANTS_PREFIX}{tenant}{path}?{query}"),
        None => format!("{TENANTS_PREFIX}{tenant}{path}"),
    };
    if let Ok(uri) = target.parse() {
        *request.uri_mut() = uri;
    }
}

impl Gate for SelectCluster {
    fn check(&self, mut request: Request) -> Step {
        crate::peer::admit(&mut request, self.0.replicas().map(|r| &r.ca));
        to_named_tenant(&mut request, self.0.tenant_domain());
        match self.0.route(request.uri().path()) {
            Route::Open(server) => {
                request.extensions_mut().insert(Cluster(server));
                Step::Go(request)
            }
            Route::Dormant(_) | Route::Unknown => Step::Slow(request),
        }
    }

    fn slow<S: Next>(&self, request: Request, next: S) -> BoxFuture<'static, Response> {
        let clusters = self.0.clone();
        Box::pin(async move {
            match clusters.route(request.uri().path()) {
                Route::Open(server) => go(server, request, next).await,
                Route::Dormant(name) => dormant(&clusters, &name, request, next).await,
                Route::Unknown => match forward(&clusters, request) {
                    Forwarded::Answered(answer) => answer.await,
                    Forwarded::NotServed(request) => {
                        unknown_tenant(&clusters, *request, next).await
                    }
                },
            }
        })
    }
}

/// A request for a tenant not served here, forwarded to the replica that serves it: given back
/// where none does.
fn forward(clusters: &Clusters, request: Request) -> Forwarded {
    let Some(replicas) = clusters.replicas() else {
        return Forwarded::NotServed(Box::new(request));
    };
    let path = request.uri().path();
    let Some(rest) = path.strip_prefix(super::clusters::TENANTS_PREFIX) else {
        return Forwarded::NotServed(Box::new(request));
    };
    let name = rest.split('/').next().unwrap_or_default().to_owned();
    replicas.forward.forward(&name, request)
}

async fn go<S: Next>(server: Arc<Server>, mut request: Request, next: S) -> Response {
    request.extensions_mut().insert(Cluster(server));
    run(next, request).await
}

/// A request for a dormant tenant. On a listener that authenticates, one that carries no
/// credentials is answered as for a tenant that is not served, which is what the tenant itself
/// would answer (401, or a public path as the host answers it): a stranger does not open a
/// tenant. Anything else opens the tenant's cluster, then goes on.
async fn dormant<S: Next>(
    clusters: &Arc<Clusters>,
    name: &str,
    request: Request,
    next: S,
) -> Response {
    if clusters.host().security.is_some() && !has_credentials(&request) {
        return unknown_tenant(clusters, request, next).await;
    }
    match clusters.wake(name).await {
        Some(Ok(server)) => go(server, request, next).await,
        Some(Err(e)) => e.into_response(),
        None => unknown_tenant(clusters, request, next).await,
    }
}

/// Whether a request carries a token or a client certificate.
fn has_credentials(request: &Request) -> bool {
    request.headers().contains_key(header::AUTHORIZATION)
        || request.extensions().get::<PeerCertificates>().is_some_and(|p| !p.is_empty())
}

/// A request under `/tenants/<name>/` for a tenant that is not served. It is answered as a
/// served tenant would answer whoever lacks its credentials (401; public paths as the host
/// answers them), so that a tenant's existence is not told to anyone: only a host user who may
/// read the tenant learns it is not there (404).
async fn unknown_tenant<S: Next>(clusters: &Clusters, mut request: Request, next: S) -> Response {
    let path = request.uri().path();
    let rest = path.strip_prefix(super::clusters::TENANTS_PREFIX).unwrap_or(path);
    let (name, relative) = rest.split_once('/').unwrap_or((rest, ""));
    let (name, relative) = (name.to_owned(), format!("/{relative}"));
    let not_found = ApiError::not_found(crate::tenant::types::GROUP, "tenants", &name);
    let host = clusters.host();
    let Some(security) = &host.security else { return not_found.into_response() };
    if !has_credentials(&request) && access::is_public(&relative) {
        let target = match request.uri().query() {
            Some(query) => format!("{relative}?{query}"),
            None => relative,
        };
        if let Ok(uri) = target.parse() {
            *request.uri_mut() = uri;
            request.extensions_mut().insert(Cluster(host.clone()));
            return run(next, request).await;
        }
    }
    // Only the listener's certificates count: an in-process client is a client of one cluster.
    let headers = request.headers();
    let peer = Credentials::Peer(request.extensions().get::<PeerCertificates>().cloned());
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
