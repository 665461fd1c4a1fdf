//! What a request is: long-running or not, a pod create or not, and how many seats it takes.

use axum::http::Method;

/// Whether a request is long-running, by kube-apiserver's rules for the verbs and subresources
/// served here: a watch (`GET …/watch/…`, or `GET` with `watch=true` or `watch=1`), or a pod's
/// log or streams (`exec`, `attach`, `portforward`; any verb). `path` is within the cluster.
pub fn is_long_running(method: &Method, path: &str, query: Option<&str>) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resource = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    if matches!(resource, ["namespaces", _, "pods", _, "exec" | "attach" | "portforward"]) {
        return true;
    }
    if method != Method::GET {
        return false;
    }
    if resource.first() == Some(&"watch") {
        return true;
    }
    let log = matches!(resource, ["namespaces", _, "pods", _, "log"]);
    let watch = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .filter(|(k, _)| k == "watch")
        .last()
        .is_some_and(|(_, v)| v == "true" || v == "1");
    log || watch
}

/// Whether a request creates a pod (`POST …/namespaces/<ns>/pods`); `path` is within the
/// cluster.
pub fn is_pod_create(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    method == Method::POST && matches!(segments.as_slice(), ["api", "v1", "namespaces", _, "pods"])
}

/// Objects one seat is reckoned to read in a LIST, as APF's list work estimator reckons.
pub const OBJECTS_PER_SEAT: u64 = 100;

/// The seats a request takes (APF's width): a LIST one for every [`OBJECTS_PER_SEAT`] objects it
/// may read, anything else one. The level clamps it to a flow's share.
///
/// `objects` counts what the cluster stores (asked only for a LIST), all kinds together: the most one LIST can read. A
/// `limit` without a selector bounds the read further; with a selector the store reads on until
/// `limit` objects match, so the bound is the cluster's. The estimate errs high for a kind with
/// few objects beside many of another kind; the cost of that falls on the same tenant's own
/// share. `path` is within the cluster.
pub fn width(
    method: &Method,
    path: &str,
    query: Option<&str>,
    objects: impl FnOnce() -> u64,
) -> usize {
    if method != Method::GET || !is_collection(path) || is_long_running(method, path, query) {
        return 1;
    }
    let mut limit = None;
    let mut selector = false;
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "limit" => limit = value.parse::<u64>().ok().filter(|&l| l > 0),
            "labelSelector" | "fieldSelector" => selector |= !value.is_empty(),
            _ => {}
        }
    }
    let objects = objects();
    let read = match limit {
        Some(limit) if !selector => limit.min(objects),
        _ => objects,
    };
    usize::try_from(read.div_ceil(OBJECTS_PER_SEAT)).unwrap_or(usize::MAX).max(1)
}

/// Whether `path` (within a cluster) names a collection: `…/<resource>` or
/// `…/namespaces/<ns>/<resource>` under an API group version.
fn is_collection(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resource = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return false,
    };
    matches!(resource, [_] | ["namespaces", _, _])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_running_requests_are_watches_logs_and_streams() {
        let get = Method::GET;
        let cases = [
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=true"), true),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=1"), true),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=false"), false),
            (&get, "/api/v1/namespaces/d/configmaps", Some("watch=true&watch=false"), false),
            (&get, "/api/v1/watch/namespaces/d/configmaps", None, true),
            (&get, "/apis/apps/v1/watch/deployments", None, true),
            (&get, "/apis/apps/v1/deployments", Some("limit=5"), false),
            (&get, "/api/v1/namespaces/d/pods/p/log", Some("follow=true"), true),
            (&get, "/api/v1/namespaces/d/pods/p/log", None, true),
            (&get, "/api/v1/namespaces/d/pods/p", None, false),
            (&get, "/api/v1/namespaces/d/pods/p/exec", Some("command=ls"), true),
            (&Method::POST, "/api/v1/namespaces/d/pods/p/exec", Some("command=ls"), true),
            (&Method::POST, "/api/v1/namespaces/d/pods/p/portforward", Some("ports=80"), true),
            (&get, "/api/v1/namespaces/d/pods/p/attach", None, true),
            (&Method::POST, "/api/v1/namespaces/d/configmaps", Some("watch=true"), false),
            (&get, "/healthz", Some("watch=true"), false),
            (&get, "/version", None, false),
        ];
        for (method, path, query, want) in cases {
            assert_eq!(is_long_running(method, path, query), want, "{method} {path}?{query:?}");
        }
    }
    #[test]
    fn lists_take_a_seat_for_every_hundred_objects_they_may_read() {
        let get = Method::GET;
        let cases = [
            // A LIST reads at most what the cluster stores.
            (&get, "/api/v1/namespaces/d/configmaps", None, 1_000, 10),
            (&get, "/api/v1/configmaps", None, 1_001, 11),
            (&get, "/apis/apps/v1/namespaces/d/deployments", None, 30, 1),
            (&get, "/api/v1/namespaces", None, 250, 3),
            (&get, "/api/v1/pods", None, 0, 1),
            // A limit bounds it, unless a selector makes the store read on for matches.
            (&get, "/api/v1/configmaps", Some("limit=500"), 10_000, 5),
            (&get, "/api/v1/configmaps", Some("limit=500"), 120, 2),
            (&get, "/api/v1/configmaps", Some("limit=0"), 10_000, 100),
            (&get, "/api/v1/configmaps", Some("limit=500&labelSelector=a%3Db"), 10_000, 100),
            (&get, "/api/v1/configmaps", Some("limit=500&fieldSelector="), 10_000, 5),
            // Anything else is one seat.
            (&get, "/api/v1/namespaces/d/configmaps/c", None, 10_000, 1),
            (&get, "/api/v1/namespaces/d", None, 10_000, 1),
            (&get, "/api/v1/namespaces/d/pods/p/status", None, 10_000, 1),
            (&get, "/api/v1/configmaps", Some("watch=true"), 10_000, 1),
            (&get, "/api/v1/watch/configmaps", None, 10_000, 1),
            (&get, "/apis", None, 10_000, 1),
            (&get, "/version", None, 10_000, 1),
            (&Method::POST, "/api/v1/namespaces/d/configmaps", None, 10_000, 1),
            (&Method::DELETE, "/api/v1/namespaces/d/configmaps", None, 10_000, 1),
        ];
        for (method, path, query, objects, want) in cases {
            assert_eq!(width(method, path, query, || objects), want, "{method} {path}?{query:?}");
        }
    }

    #[test]
    fn pod_creates_are_posts_to_a_namespaces_pods() {
        assert!(is_pod_create(&Method::POST, "/api/v1/namespaces/d/pods"));
        assert!(!is_pod_create(&Method::GET, "/api/v1/namespaces/d/pods"));
        assert!(!is_pod_create(&Method::POST, "/api/v1/namespaces/d/pods/p/binding"));
        assert!(!is_pod_create(&Method::POST, "/api/v1/namespaces/d/configmaps"));
        assert!(!is_pod_create(&Method::POST, "/apis/apps/v1/namespaces/d/deployments"));
    }
}
