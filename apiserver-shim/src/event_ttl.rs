//! Events expire, as kube-apiserver's `--event-ttl` (one hour by default) makes them: an Event
//! (`v1` or `events.k8s.io/v1`) last written more than the TTL ago is deleted. Without this, every
//! pod's `Scheduled`, `Pulled`, `Created` and `Started` would stay in the store for good.
//!
//! When an Event was last written is read from the Event itself: the latest of its
//! `series.lastObservedTime`, `lastTimestamp`, `eventTime` and `creationTimestamp` (the server's
//! time of its creation, so an Event sent with old times still lives an hour). A delete is
//! made on the `resourceVersion` read, so an Event written again meanwhile is left alone.

use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::api::{Api, DeleteParams, ListParams, Target};
use crate::resource::built_in;
use crate::status::{ApiError, ApiResult};

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// When `event` was last written, as far as it says.
pub fn last_written(event: &Value) -> Option<DateTime<Utc>> {
    [
        "/series/lastObservedTime",
        "/lastTimestamp",
        "/eventTime",
        "/deprecatedLastTimestamp",
        "/metadata/creationTimestamp",
    ]
    .iter()
    .filter_map(|p| event.pointer(p).and_then(Value::as_str))
    .filter_map(|t| DateTime::parse_from_rfc3339(t).ok())
    .map(|t| t.with_timezone(&Utc))
    .max()
}

/// Delete the Events of `api` last written more than `ttl` before `now`; how many went.
pub fn expire(api: &Api, ttl: Duration, now: DateTime<Utc>) -> ApiResult<usize> {
    let Ok(ttl) = chrono::Duration::from_std(ttl) else { return Ok(0) };
    let cutoff = now - ttl;
    let mut expired = 0;
    for group in ["", "events.k8s.io"] {
        let Some(rt) = built_in(group, "events") else { continue };
        let target = Target { rt, namespace: None };
        let list = api.list(&target, &ListParams::default())?;
        for event in list["items"].as_array().into_iter().flatten() {
            if last_written(event).is_none_or(|t| t >= cutoff) {
                continue;
            }
            let meta = &event["metadata"];
            let (Some(namespace), Some(name)) = (meta["namespace"].as_str(), meta["name"].as_str())
            else {
                continue;
            };
            let target = Target { rt, namespace: Some(namespace.to_owned()) };
            let params = DeleteParams {
                resource_version: meta["resourceVersion"].as_str().map(str::to_owned),
                ..DeleteParams::default()
            };
            match api.delete(&target, name, &params) {
                Ok(_) => expired += 1,
                // Gone, or written again since the list: not for now.
                Err(
                    ApiError::NotFound { .. }
                    | ApiError::AlreadyExists { .. }
                    | ApiError::Conflict { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(expired)
}

/// Expire `api`'s Events every `every` until the `Api` is dropped.
pub async fn keep_expiring(api: Weak<Api>, ttl: Duration, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(api) = api.upgrade() else { return };
        let swept = tokio::task::spawn_blocking(move || expire(&api, ttl, Utc::now())).await;
        match swept {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::debug!(events = n, "expired events"),
            Ok(Err(e)) => tracing::warn!(error = %e.message(), "expiring events"),
            Err(e) => tracing::warn!(error = %e, "expiring events"),
        }
    }
}

/// Start expiring `api`'s Events with kube-apiserver's default TTL, looked at every minute,
/// on the current Tokio runtime (outside one, nothing is started).
pub fn start(api: &Arc<Api>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            let task = keep_expiring(Arc::downgrade(api), DEFAULT_TTL, Duration::from_secs(60));
            runtime.spawn(task);
        }
        Err(_) => tracing::warn!("no async runtime: events will not expire"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::api::Write;

    fn event(api: &Api, group: &str, name: &str, last: &str) {
        let rt = built_in(group, "events").unwrap();
        let target = Target { rt, namespace: Some("default".into()) };
        let body = if group.is_empty() {
            json!({"metadata": {"name": name}, "involvedObject": {"kind": "Pod", "name": "p"},
                   "reason": "Started", "message": "m", "lastTimestamp": last})
        } else {
            json!({"metadata": {"name": name}, "eventTime": last, "reportingController": "c",
                   "reportingInstance": "i", "action": "a", "reason": "r", "type": "Normal",
                   "regarding": {"kind": "Pod", "name": "p"}})
        };
        api.create(&target, body, &Write::by("test", false)).unwrap();
    }

    fn names(api: &Api, group: &str) -> Vec<String> {
        let rt = built_in(group, "events").unwrap();
        let list = api.list(&Target { rt, namespace: None }, &ListParams::default()).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn events_older_than_the_ttl_go_and_the_rest_stay() {
        let (_dir, api) = crate::api::scratch();
        let created = Utc::now();
        let at = |minutes: i64| {
            (created + chrono::Duration::minutes(minutes))
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        };
        // Written now; and one seen again half an hour from now (its lastTimestamp).
        event(&api, "", "old", &at(-5));
        event(&api, "", "recent", &at(30));
        event(&api, "events.k8s.io", "old-v1", &at(0));
        let hour_on = created + chrono::Duration::minutes(61);
        assert_eq!(expire(&api, DEFAULT_TTL, hour_on).unwrap(), 2);
        assert_eq!(names(&api, ""), ["recent"]);
        assert!(names(&api, "events.k8s.io").is_empty());
        // Nothing more to do at the same time; the last gone an hour after it was seen.
        assert_eq!(expire(&api, DEFAULT_TTL, hour_on).unwrap(), 0);
        let later = created + chrono::Duration::minutes(91);
        assert_eq!(expire(&api, DEFAULT_TTL, later).unwrap(), 1);
        assert!(names(&api, "").is_empty());
    }

    #[test]
    fn the_time_an_event_was_last_written_is_its_latest_timestamp() {
        let e = json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "lastTimestamp": "2026-01-01T02:00:00Z",
            "series": {"lastObservedTime": "2026-01-01T03:00:00.000000Z"},
        });
        assert_eq!(last_written(&e).unwrap().to_rfc3339(), "2026-01-01T03:00:00+00:00");
        assert_eq!(last_written(&json!({"metadata": {}})), None);
    }
}
