//! The pod subresources the HTTP side answers itself: `binding` (the scheduler's), `eviction` (a
//! delete its PodDisruptionBudget allows, [`eviction`](crate::registry::core::pods::eviction)),
//! `log` (from the cluster's [`pods::PodLogs`]), the streams `exec`, `attach` and `portforward`
//! (through the cluster's [`PodStreams`](streams::PodStreams)), and the refusal of the rest.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;

use crate::api::Target;
use crate::http::request::{decode_body, dry_run, read_body, Query};
use crate::http::response::json_response;
use crate::http::{blocking, Server, Upgrade};
use crate::registry::core::pods::{eviction as evictions, subresources as pods};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::streams::{self, spdy, websocket, Action};
use hyper_util::rt::TokioIo;

/// Whether `rt` is the core group's pods.
pub(in crate::http) fn is_pod(rt: &ResourceType) -> bool {
    rt.strategy.is_pod()
}

/// `POST pods/<name>/binding`: place the pod on a node.
pub(super) async fn binding(
    server: &Server,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let api = server.api.clone();
    let rt = rt.clone();
    let binding = decode_body(headers, &read_body(body).await?)?;
    let (name, namespace) = (name.to_owned(), namespace.to_owned());
    let status = blocking(move || {
        let target = Target { rt: &rt, namespace: Some(namespace) };
        pods::bind(&api, &target, &name, &binding)
    })
    .await?;
    Ok(json_response(StatusCode::CREATED, &status))
}

/// `POST pods/<name>/eviction`: delete the pod if its PodDisruptionBudget allows; the answer's
/// code is the `Status`'s (201, or 500 for a pod more than one budget selects).
pub(super) async fn eviction(
    server: &Server,
    namespace: &str,
    name: &str,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let dry_run = dry_run(query)?;
    let eviction = decode_body(headers, &read_body(body).await?)?;
    let api = server.api.clone();
    let (name, namespace) = (name.to_owned(), namespace.to_owned());
    let status =
        blocking(move || evictions::evict(&api, &namespace, &name, &eviction, dry_run)).await?;
    let code = status["code"].as_u64().and_then(|c| u16::try_from(c).ok());
    let code = code.and_then(|c| StatusCode::from_u16(c).ok()).unwrap_or(StatusCode::CREATED);
    Ok(json_response(code, &status))
}

/// The refusal of pod subresource `sub` with `method`, if this server refuses it: a wrong verb
/// for `binding`, `eviction` or `log`, and the subresources that reach a container.
pub(super) fn refused(sub: &str, method: &Method) -> Option<ApiError> {
    match sub {
        "binding" | "eviction" | "log" => {
            Some(ApiError::method_not_allowed(format!("pods/{sub} does not accept {method}")))
        }
        "exec" | "attach" | "portforward" => {
            Some(ApiError::method_not_allowed(format!("pods/{sub} does not accept {method}")))
        }
        "proxy" => Some(ApiError::method_not_allowed(format!(
            "pods/{sub} is not supported by this server: a pod's containers are reached \
             through the host cluster that runs them"
        ))),
        _ => None,
    }
}

/// `GET pods/<name>/log`: plain text from the cluster's [`pods::PodLogs`].
pub(super) async fn log(
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

/// The pod a stream request names, and which stream.
pub(super) struct Connect<'a> {
    pub(super) namespace: &'a str,
    pub(super) name: &'a str,
    pub(super) sub: &'a str,
}

/// `GET`/`POST pods/<name>/exec`, `attach` or `portforward`: checked as kube-apiserver checks
/// them, connected through the cluster's [`PodStreams`] before the client's connection is
/// upgraded (so that a refusal is an ordinary answer), then served over the upgraded
/// connection in the protocol the client chose: WebSocket, SPDY/3.1, or (port forwarding from
/// kubectl 1.31 on) SPDY tunnelled in WebSocket.
///
/// [`PodStreams`]: streams::PodStreams
pub(super) async fn connect(
    server: &Server,
    pod: Connect<'_>,
    query: &Query,
    headers: &HeaderMap,
    upgrade: Upgrade,
) -> ApiResult<Response> {
    let action = match pod.sub {
        "exec" => Some(Action::Exec),
        "attach" => Some(Action::Attach),
        _ => None,
    };
    let options = action.map(|a| streams::StreamOptions::parse(a, query.pairs())).transpose()?;
    let api = server.api.clone();
    let rt = crate::resource::built_in("", "pods").cloned().ok_or_else(ApiError::no_route)?;
    let (namespace, name) = (pod.namespace.to_owned(), pod.name.to_owned());
    let found =
        blocking(move || api.get(&Target { rt: &rt, namespace: Some(namespace) }, &name)).await?;
    let container = options.as_ref().and_then(|o| o.container.as_deref());
    let what = if pod.sub == "portforward" { "port-forward" } else { pod.sub };
    streams::check_pod(&found, container, what)?;
    let spdy = match headers.get(header::UPGRADE).map(|v| v.to_str().unwrap_or_default()) {
        None => return Err(ApiError::bad_request("Upgrade request required")),
        Some(_) if websocket::is_upgrade(headers) => false,
        Some(_) if spdy::is_upgrade(headers) => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unable to upgrade connection: protocol {other:?} is not served; pod streams \
                 are served over WebSocket and {}",
                spdy::UPGRADE
            )))
        }
    };
    let Some(backend) = server.pod_streams.get().cloned() else {
        return Err(ApiError::unavailable("no kubelet serves pod streams on this cluster"));
    };
    let Some(on_upgrade) = upgrade.on else {
        return Err(ApiError::bad_request("this connection cannot be upgraded"));
    };
    let ended = async move {
        match upgrade.held {
            Some(held) => held.ended().await,
            None => futures::future::pending().await,
        }
    };
    let namespace = pod.namespace.to_owned();
    if let (Some(action), Some(options)) = (action, options) {
        let (response, protocol) = if spdy {
            let (response, protocol) = spdy::accept(headers, spdy::SESSION_PROTOCOLS)?;
            (response, Protocol::Spdy(protocol))
        } else {
            let accepted = websocket::accept(headers, websocket::SESSION_PROTOCOLS)?;
            (accepted.response, Protocol::WebSocket(accepted.version))
        };
        let session = backend.session(&namespace, &found, action, options).await?;
        tokio::spawn(async move {
            let Ok(io) = on_upgrade.await else { return };
            let io = TokioIo::new(io);
            match protocol {
                Protocol::Spdy(protocol) => spdy::serve_session(io, protocol, session, ended).await,
                Protocol::WebSocket(version) => {
                    let ws = websocket::server(io).await;
                    websocket::serve_session(ws, version, session, ended).await;
                }
            }
        });
        return Ok(response);
    }
    // Port forwarding: SPDY opens a connection per pair of streams it names a port in; the
    // WebSocket protocols name their ports in the query and connect them all now.
    let forward = move |port: u16| backend.forward(&namespace, &found, port);
    if spdy {
        let (response, _) = spdy::accept(headers, &[spdy::PORT_FORWARD_PROTOCOL])?;
        tokio::spawn(async move {
            let Ok(io) = on_upgrade.await else { return };
            spdy::serve_ports(TokioIo::new(io), forward, ended).await;
        });
        return Ok(response);
    }
    let accepted = websocket::accept(headers, websocket::PORT_FORWARD_PROTOCOLS)?;
    if accepted.protocol == Some(spdy::TUNNELLED_PORT_FORWARD) {
        tokio::spawn(async move {
            let Ok(io) = on_upgrade.await else { return };
            let ws = websocket::server(TokioIo::new(io)).await;
            spdy::serve_ports(websocket::tunnel(ws), forward, ended).await;
        });
        return Ok(accepted.response);
    }
    let mut forwarded = Vec::new();
    for port in streams::ports(query.pairs())? {
        forwarded.push((port, forward(port).await?));
    }
    tokio::spawn(async move {
        let Ok(io) = on_upgrade.await else { return };
        let ws = websocket::server(TokioIo::new(io)).await;
        websocket::serve_ports(ws, forwarded, ended).await;
    });
    Ok(accepted.response)
}

/// The protocol a session is served in.
enum Protocol {
    Spdy(&'static str),
    WebSocket(websocket::Version),
}
