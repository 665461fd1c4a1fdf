//! The watch stream: initial events, then the store's changes through the request's selectors,
//! bookmarks, and the end of a custom type's watches when it stops being served.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::{json, Value};

use crate::api::{decode_event_object, parse_resource_version, Api, ListParams, Target};
use crate::http::table::{self, IncludeObject, TableOptions};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

use super::request::{accept, include_object, list_params, Query};
use super::{blocking, Server};

/// How often a watch of a custom type checks that the type is still served.
pub(super) const CUSTOM_WATCH_CHECK: Duration = Duration::from_millis(500);

pub(super) async fn watch_stream(
    server: &Server,
    rt: ResourceType,
    namespace: Option<String>,
    query: &Query,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let api = server.api.clone();
    let params = list_params(query)?;
    if let Some(fields) = &params.fields {
        fields.check_supported(rt.strategy.field_labels(&rt))?;
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
                    // Every event up to the store's progress has been sent (or filtered out):
                    // a quiet watch's bookmark still names a revision inside the history.
                    let progress = watch.progress().max(last);
                    let bookmark = json!({
                        "kind": rt.kind,
                        "apiVersion": rt.group_version(),
                        "metadata": {"resourceVersion": progress.to_string()},
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
                        let translated = if crate::crd::conversion_webhook(&rt).is_some() {
                            // The conversion webhook is called and waited for off the workers.
                            let (api, rt, params) = (api.clone(), rt.clone(), params.clone());
                            tokio::task::spawn_blocking(move || {
                                crate::admission::webhook::dispatch::on_request_thread(|| {
                                    translate(&api, &rt, &params, &event)
                                })
                            })
                                .await
                                .ok()
                                .flatten()
                        } else {
                            translate(&api, &rt, &params, &event)
                        };
                        let Some((kind, object)) = translated else {
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

pub(super) fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A store event as the watcher sees it through its selectors: a change that moves an object
/// into the selection is ADDED, one that moves it out is DELETED.
pub(super) fn translate(
    api: &Api,
    rt: &ResourceType,
    params: &ListParams,
    event: &carrel_store::Event,
) -> Option<(&'static str, Value)> {
    let object = match api.present(rt, decode_event_object(event).ok()?, event.revision) {
        Ok(object) => object,
        // An object its definition's webhook could not convert: an ERROR event, as
        // kube-apiserver ends a watch whose object cannot be decoded.
        Err(e) => return Some(("ERROR", e.to_status())),
    };
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

pub(super) struct EventEncoder {
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
        let mut line = Vec::with_capacity(256);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(kind.as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        crate::go_json::write(&mut line, object);
        line.extend_from_slice(b"}\n");
        Bytes::from(line)
    }
}
