//! The manager's tests: each runs a host API in this process, which the manager reaches through
//! a socket-free kube client (`carrel_apiserver::local_client`) as it would any host, and serves
//! its tenants on the listener's clusters.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use carrel_apiserver::api::{Api, DeleteParams, Target, Write};
use carrel_apiserver::http::Clusters;
use carrel_apiserver::http::{clusters_router, router};
use carrel_apiserver::local_client;
use carrel_apiserver::object::{finalizers, is_deleting};
use carrel_apiserver::registry::carrel::tenants::TENANTS;
use carrel_apiserver::resource::ResourceType;
use carrel_apiserver::tenant::descriptors::Descriptors;
use carrel_apiserver::Server;
use carrel_store::{Options, Quota, SledStore};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::{
    expires_at, host_namespace, Manager, FINALIZER, KUBECONFIG_SECRET, NOT_OWNED, OWNER_LABEL,
    OWNER_UID, STORE_CONDITION,
};

struct Fixture {
    dir: tempfile::TempDir,
    host: Arc<Api>,
    clusters: Arc<Clusters>,
    manager: Manager,
}

/// The tenants of the host.
fn tenants() -> Target<'static> {
    Target { rt: &TENANTS, namespace: None }
}

/// A core resource type of the host.
fn rt(plural: &str) -> &'static ResourceType {
    carrel_apiserver::resource::built_in("", plural).expect("a core type")
}

fn fixture_in(dir: tempfile::TempDir) -> Fixture {
    // A host of an earlier fixture in `dir` lets go of its store once its client's task ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let store = loop {
        match SledStore::open(dir.path().join("host"), Options::create()) {
            Ok(store) => break store,
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "the host store is still open");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("opening the host store: {e}"),
        }
    };
    let host = Arc::new(Api::host(Arc::new(store)).unwrap());
    let server = Arc::new(Server::new(host.clone(), ""));
    let clusters = Arc::new(Clusters::new(server.clone()));
    let client = local_client::client(router(server), None, "default");
    let manager =
        Manager::new(client, clusters.clone(), dir.path(), "https://127.0.0.1:6443", None);
    Fixture { dir, host, clusters, manager }
}

fn create(f: &Fixture, name: &str, spec: Value) {
    let body = json!({"apiVersion": "carrel.dev/v1alpha1", "kind": "Tenant",
                      "metadata": {"name": name}, "spec": spec});
    f.host
        .create(&Target { rt: &TENANTS, namespace: None }, body, &Write::by("test", false))
        .unwrap();
}

async fn status_of(f: &Fixture, path: &str) -> u16 {
    let router = clusters_router(f.clusters.clone());
    let response = router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_is_served_reported_and_torn_down() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 404);
    create(&f, "team-a", json!({"ttl": "2h"}));
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);
    assert_eq!(status_of(&f, "/api/v1/namespaces/carrel-team-a").await, 200);
    let tenant = f.host.get(&tenants(), "team-a").unwrap();
    assert_eq!(tenant["status"]["phase"], "Ready");
    assert_eq!(tenant["spec"]["podSecurity"], "baseline", "the default level");
    assert_eq!(tenant["status"]["endpoint"], "https://127.0.0.1:6443/tenants/team-a");
    assert!(tenant["status"]["expiresAt"].is_string());
    assert_eq!(finalizers(&tenant), vec![FINALIZER.to_owned()]);
    let secrets = Target { rt: rt("secrets"), namespace: Some("carrel-team-a".into()) };
    let secret = f.host.get(&secrets, KUBECONFIG_SECRET).unwrap();
    assert!(secret["data"]["kubeconfig"].is_string());
    // Reconciling again changes nothing.
    f.manager.reconcile("team-a").await.unwrap();
    let again = f.host.get(&tenants(), "team-a").unwrap();
    assert_eq!(again["metadata"]["resourceVersion"], tenant["metadata"]["resourceVersion"]);

    f.host.delete(&tenants(), "team-a", &DeleteParams::default()).unwrap();
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 404);
    assert!(!f.dir.path().join("tenants/team-a").exists());
    assert_eq!(f.host.get(&tenants(), "team-a").unwrap_err().code(), 404);
    assert_eq!(status_of(&f, "/api/v1/namespaces/carrel-team-a").await, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_without_room_in_the_open_file_limit_fails_clearly_until_there_is() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let f = fixture_in(tempfile::tempdir().unwrap());
    let open = Arc::new(AtomicU64::new(100));
    let counted = open.clone();
    let count: carrel_apiserver::tenant::descriptors::Count =
        Arc::new(move || Ok((counted.load(Ordering::SeqCst), 1024)));
    f.manager.set_descriptors(Descriptors::counted(512, 48, count));
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);

    // The process nears its limit: a new tenant is refused, with the reason in its status.
    open.store(1024 - 512 - 47, Ordering::SeqCst);
    create(&f, "team-b", json!({}));
    f.manager.reconcile("team-b").await.unwrap();
    let tenant = f.host.get(&tenants(), "team-b").unwrap();
    assert_eq!(tenant["status"]["phase"], "Failed", "{tenant}");
    let condition = &tenant["status"]["conditions"][0];
    assert_eq!(condition["reason"], "InsufficientFileDescriptors", "{tenant}");
    let message = condition["message"].as_str().unwrap();
    assert!(message.contains("465 of the process's 1024 file descriptors"), "{message}");
    assert_eq!(status_of(&f, "/tenants/team-b/api/v1/namespaces").await, 404);
    assert!(!f.dir.path().join("tenants/team-b").exists(), "no store was opened");
    // The tenant served keeps being served.
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);
    f.manager.tick().await.unwrap();
    let tenant = f.host.get(&tenants(), "team-b").unwrap();
    assert_eq!(tenant["status"]["phase"], "Failed", "still no room");

    // Room is made: the next tick serves it.
    open.store(300, Ordering::SeqCst);
    f.manager.tick().await.unwrap();
    let tenant = f.host.get(&tenants(), "team-b").unwrap();
    assert_eq!(tenant["status"]["phase"], "Ready", "{tenant}");
    assert_eq!(status_of(&f, "/tenants/team-b/api/v1/namespaces").await, 200);
}

/// `EIO`, on Linux.
const EIO: i32 = 5;

async fn request(f: &Fixture, method: &str, path: &str, body: &str) -> (u16, String) {
    let router = clusters_router(f.clusters.clone());
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
    (code, String::from_utf8_lossy(&bytes.to_bytes()).into_owned())
}

async fn create_config_map(f: &Fixture, tenant: &str, name: &str) -> (u16, String) {
    let path = format!("/tenants/{tenant}/api/v1/namespaces/default/configmaps");
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    request(f, "POST", &path, &body.to_string()).await
}

fn store_condition_of(f: &Fixture, name: &str) -> Value {
    let tenant = f.host.get(&tenants(), name).unwrap();
    let conditions = tenant["status"]["conditions"].as_array().cloned().unwrap_or_default();
    conditions.into_iter().find(|c| c["type"] == STORE_CONDITION).expect("a store condition")
}

/// Poll until `path` answers `code`; the deadline only guards against a hang.
async fn eventually_answers(f: &Fixture, path: &str, code: u16) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let (got, body) = request(f, "GET", path, "").await;
        if got == code {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "{path} still answers {got}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_tenant_store_is_reported_and_reopened() {
    use carrel_store::failpoints::{self, Fault, FaultPoint};
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(store_condition_of(&f, "team-a")["status"], "True");
    assert_eq!(request(&f, "GET", "/tenants/team-a/readyz", "").await, (200, "ok".into()));
    assert_eq!(create_config_map(&f, "team-a", "before").await.0, 201);

    // A sync error: the write is refused and the store fails.
    let store = f.dir.path().join("tenants/team-a/store");
    failpoints::inject(&store, Fault::new(FaultPoint::WalSync, EIO, None));
    let (code, body) = create_config_map(&f, "team-a", "during").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("\"reason\":\"InternalError\""), "{body}");

    let (code, body) = request(&f, "GET", "/tenants/team-a/readyz", "").await;
    assert_eq!(code, 500);
    assert!(body.starts_with("[+]ping ok\n[-]store failed: "), "{body}");
    assert!(body.contains("Input/output error"), "{body}");
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert_eq!(request(&f, "GET", "/tenants/team-a/readyz/store", "").await.0, 500);
    // The process (the host's store) is still ready.
    assert_eq!(request(&f, "GET", "/readyz", "").await, (200, "ok".into()));
    let (code, metrics) = request(&f, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    let failures: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("carrel_store_failures_total "))
        .expect("the failure counter")
        .parse()
        .unwrap();
    assert!(failures >= 1, "{metrics}");
    assert!(metrics.contains("carrel_host_store_failed 0"), "{metrics}");

    f.manager.tick().await.unwrap();
    let condition = store_condition_of(&f, "team-a");
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "StoreFailed");
    assert!(condition["message"].as_str().unwrap().contains("Input/output error"));

    // The cause goes away: the store reopens itself, replaying its log.
    failpoints::clear(&store);
    assert_eq!(eventually_answers(&f, "/tenants/team-a/readyz", 200).await, "ok");
    let path = "/tenants/team-a/api/v1/namespaces/default/configmaps/before";
    assert_eq!(request(&f, "GET", path, "").await.0, 200, "an acknowledged write is kept");
    assert_eq!(create_config_map(&f, "team-a", "after").await.0, 201);
    f.manager.tick().await.unwrap();
    assert_eq!(store_condition_of(&f, "team-a")["status"], "True");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_passing_store_error_is_a_503_and_the_tenant_stays_ready() {
    use carrel_store::failpoints::{self, Fault, FaultPoint};
    /// `EMFILE`, on Linux.
    const EMFILE: i32 = 24;
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    let store = f.dir.path().join("tenants/team-a/store");
    failpoints::inject(&store, Fault::new(FaultPoint::WalWrite, EMFILE, None));
    let (code, body) = create_config_map(&f, "team-a", "during").await;
    assert_eq!(code, 503, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["reason"], "ServiceUnavailable");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    assert!(status["message"].as_str().unwrap().contains("os error 24"), "{body}");
    assert_eq!(request(&f, "GET", "/tenants/team-a/readyz", "").await, (200, "ok".into()));
    f.manager.tick().await.unwrap();
    assert_eq!(store_condition_of(&f, "team-a")["status"], "True");

    failpoints::clear(&store);
    assert_eq!(create_config_map(&f, "team-a", "after").await.0, 201);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_host_store_makes_the_process_unready_until_it_reopens() {
    use carrel_store::failpoints::{self, Fault, FaultPoint};
    let f = fixture_in(tempfile::tempdir().unwrap());
    let store = f.dir.path().join("host");
    failpoints::inject(&store, Fault::new(FaultPoint::WalSync, EIO, None));
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
    assert_eq!(request(&f, "POST", "/api/v1/namespaces", &body.to_string()).await.0, 500);
    let (code, body) = request(&f, "GET", "/readyz?verbose", "").await;
    assert_eq!(code, 500);
    assert!(body.contains("[-]store failed: "), "{body}");
    let (_, metrics) = request(&f, "GET", "/metrics", "").await;
    assert!(metrics.contains("carrel_host_store_failed 1"), "{metrics}");

    failpoints::clear(&store);
    eventually_answers(&f, "/readyz", 200).await;
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "m"}});
    assert_eq!(request(&f, "POST", "/api/v1/namespaces", &body.to_string()).await.0, 201);
    let (code, body) = request(&f, "GET", "/readyz?verbose", "").await;
    assert_eq!((code, body.as_str()), (200, "[+]ping ok\n[+]store ok\nreadyz check passed\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_tenant_is_deleted_and_a_restart_serves_the_rest_again() {
    let mut f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "short", json!({"ttl": "1m"}));
    create(&f, "kept", json!({}));
    // Two minutes on, the shortest TTL has passed.
    f.manager.clock = || chrono::Utc::now() + chrono::Duration::minutes(2);
    f.manager.resume().await.unwrap();
    // The expired tenant is marked for deletion; the next reconcile tears it down.
    f.manager.reconcile("short").await.unwrap();
    assert_eq!(f.host.get(&tenants(), "short").unwrap_err().code(), 404);
    assert_eq!(f.clusters.names(), vec!["kept".to_owned()]);

    // Something written in the tenant survives a restart of everything.
    let kept = f.clusters.tenant("kept").unwrap();
    let router = router(kept);
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#;
    let request = Request::post("/tenants/kept/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    assert_eq!(router.oneshot(request).await.unwrap().status().as_u16(), 201);
    let Fixture { dir, host, clusters, manager } = f;
    drop((host, clusters, manager));
    let f = fixture_in(dir);
    f.manager.resume().await.unwrap();
    assert_eq!(f.clusters.names(), vec!["kept".to_owned()]);
    assert_eq!(status_of(&f, "/tenants/kept/api/v1/namespaces/default/configmaps/c").await, 200);
}

fn namespaces(_: &Fixture) -> Target<'static> {
    Target { rt: rt("namespaces"), namespace: None }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_namespace_the_tenant_did_not_create_is_neither_used_nor_deleted() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    // Made beforehand by someone else, one even with the tenant's label, one recording
    // another tenant's UID.
    let theirs = [
        json!({"metadata": {"name": "carrel-x"}}),
        json!({"metadata": {"name": "carrel-y", "labels": {OWNER_LABEL: "y"}}}),
        json!({"metadata": {"name": "carrel-z", "annotations": {OWNER_UID: "not-z"}}}),
    ];
    for ns in theirs {
        f.host.create(&namespaces(&f), ns, &Write::by("someone", false)).unwrap();
    }
    for name in ["x", "y", "z"] {
        create(&f, name, json!({}));
        f.manager.reconcile(name).await.unwrap();
        let tenant = f.host.get(&tenants(), name).unwrap();
        assert_eq!(tenant["status"]["phase"], "Failed", "{tenant}");
        assert_eq!(tenant["status"]["conditions"][0]["reason"], NOT_OWNED);
        assert_eq!(tenant["status"]["conditions"][0]["status"], "False");
        assert_eq!(status_of(&f, &format!("/tenants/{name}/api/v1/namespaces")).await, 404);
        let secrets = Target { rt: rt("secrets"), namespace: Some(host_namespace(name)) };
        assert_eq!(f.host.get(&secrets, KUBECONFIG_SECRET).unwrap_err().code(), 404);

        f.host.delete(&tenants(), name, &DeleteParams::default()).unwrap();
        f.manager.reconcile(name).await.unwrap();
        assert_eq!(f.host.get(&tenants(), name).unwrap_err().code(), 404);
        let ns = f.host.get(&namespaces(&f), &host_namespace(name)).unwrap();
        assert!(!is_deleting(&ns), "{ns}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_namespace_records_its_tenant_and_goes_with_it_only() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    let tenant = f.host.get(&tenants(), "team-a").unwrap();
    let ns = f.host.get(&namespaces(&f), "carrel-team-a").unwrap();
    assert_eq!(ns["metadata"]["annotations"][OWNER_UID], tenant["metadata"]["uid"]);
    assert_eq!(ns["metadata"]["labels"][OWNER_LABEL], "team-a");
    // Once the namespace is someone else's (made again under the name), deleting the tenant
    // leaves it.
    f.host.delete(&namespaces(&f), "carrel-team-a", &DeleteParams::default()).unwrap();
    let again = json!({"metadata": {"name": "carrel-team-a", "annotations": {OWNER_UID: "other"}}});
    f.host.create(&namespaces(&f), again, &Write::by("someone", false)).unwrap();
    f.host.delete(&tenants(), "team-a", &DeleteParams::default()).unwrap();
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(f.host.get(&tenants(), "team-a").unwrap_err().code(), 404);
    let ns = f.host.get(&namespaces(&f), "carrel-team-a").unwrap();
    assert_eq!(ns["metadata"]["annotations"][OWNER_UID], "other");
}

#[test]
fn expiry_is_always_rfc3339() {
    for (ttl, seconds) in
        [("1ns", 1), ("2562048h", 8760 * 3600), ("99999999h", 8760 * 3600), ("2h", 7200)]
    {
        let tenant = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"ttl": ttl}});
        let expiry = expires_at(&tenant).unwrap();
        let created = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap();
        assert_eq!((expiry - created.with_timezone(&chrono::Utc)).num_seconds(), seconds, "{ttl}");
        let text = expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        assert!(chrono::DateTime::parse_from_rfc3339(&text).is_ok(), "{text}");
    }
}

/// A request to a served tenant's API: the status code and the body.
async fn send(f: &Fixture, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let router = clusters_router(f.clusters.clone());
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let code = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn config_map(name: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"d": data}})
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tenant_spec_limits_bound_what_its_api_stores() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "small", json!({}));
    f.manager.reconcile("small").await.unwrap();
    let store = f.clusters.tenant("small").unwrap().api().store().clone();
    assert_eq!(
        store.quota(),
        Quota {
            objects: carrel_apiserver::tenant::types::DEFAULT_OBJECT_LIMIT,
            bytes: carrel_apiserver::tenant::types::DEFAULT_BYTES_LIMIT
        },
        "unset limits are the defaults"
    );

    // The admin bounds the tenant to two more objects than its bootstrap holds.
    let held = store.usage().objects;
    let mut tenant = f.host.get(&tenants(), "small").unwrap();
    tenant["spec"]["limits"] = json!({"objects": held + 2});
    f.host.update(&tenants(), "small", tenant, None, &Write::by("test", false)).unwrap();
    f.manager.reconcile("small").await.unwrap();
    assert_eq!(store.quota().objects, held + 2);

    let configmaps = "/tenants/small/api/v1/namespaces/default/configmaps";
    for name in ["a", "b"] {
        assert_eq!(send(&f, "POST", configmaps, Some(config_map(name, "x"))).await.0, 201);
    }
    let (code, status) = send(&f, "POST", configmaps, Some(config_map("c", "x"))).await;
    assert_eq!(code, 403);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["code"], 403);
    let limit = held + 2;
    assert_eq!(
        status["message"],
        format!(
            "configmaps \"c\" is forbidden: exceeded quota: tenant-objects, requested: count=1, used: count={limit}, limited: count={limit}"
        )
    );
    assert_eq!(send(&f, "GET", &format!("{configmaps}/c"), None).await.0, 404);
    // Deleting makes room again.
    assert_eq!(send(&f, "DELETE", &format!("{configmaps}/a"), None).await.0, 200);
    assert_eq!(send(&f, "POST", configmaps, Some(config_map("c", "x"))).await.0, 201);

    // A bytes bound: a ConfigMap that would pass it is refused, with the bytes it asked for.
    let usage = store.usage();
    let mut tenant = f.host.get(&tenants(), "small").unwrap();
    tenant["spec"]["limits"] = json!({"bytes": usage.bytes + 1000});
    f.host.update(&tenants(), "small", tenant, None, &Write::by("test", false)).unwrap();
    f.manager.reconcile("small").await.unwrap();
    assert_eq!(store.quota().objects, carrel_apiserver::tenant::types::DEFAULT_OBJECT_LIMIT);
    let (code, status) =
        send(&f, "POST", configmaps, Some(config_map("big", &"x".repeat(2000)))).await;
    assert_eq!(code, 403);
    assert_eq!(status["reason"], "Forbidden");
    let message = status["message"].as_str().unwrap();
    let prefix =
        "configmaps \"big\" is forbidden: exceeded quota: tenant-objects, requested: bytes=";
    assert!(message.starts_with(prefix), "{message}");
    assert!(
        message.ends_with(&format!(
            ", used: bytes={}, limited: bytes={}",
            usage.bytes,
            usage.bytes + 1000
        )),
        "{message}"
    );
    assert_eq!(send(&f, "POST", configmaps, Some(config_map("small", "x"))).await.0, 201);
    // Limits the server could not apply are refused when the Tenant is written.
    let bad = json!({"apiVersion": "carrel.dev/v1alpha1", "kind": "Tenant",
                     "metadata": {"name": "bad"}, "spec": {"limits": {"objects": -1, "bytes": "1.5"}}});
    let err = f
        .host
        .create(&Target { rt: &TENANTS, namespace: None }, bad, &Write::by("test", false))
        .unwrap_err();
    assert_eq!((err.code(), err.reason()), (422, "Invalid"), "{err:?}");
    let message = err.to_status()["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("spec.limits.objects") && message.contains("spec.limits.bytes"),
        "{message}"
    );
    // The host API is not bounded by any tenant's limits.
    assert_eq!(f.host.store().quota(), Quota::UNLIMITED);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_secured_host_the_service_accounts_rules_allow_all_the_manager_does() {
    use carrel_apiserver::access::Security;
    use carrel_apiserver::auth::token::Signer;
    const ISSUER: &str = "https://kubernetes.default.svc";
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("host"), Options::create()).unwrap();
    let host = Arc::new(Api::host(Arc::new(store)).unwrap());
    let pki = dir.path().join("pki");
    let signer = Signer::load_or_generate(&pki).unwrap();
    let no_certificates = rustls::pki_types::CertificateDer::from(Vec::new());
    let security = Security::new(no_certificates, Some(signer), ISSUER);
    let server = Arc::new(Server::secured(host.clone(), "", Arc::new(security)));
    let clusters = Arc::new(Clusters::new(server.clone()));
    let tokens = (Signer::load(&pki).unwrap(), ISSUER);
    let client = crate::in_process_client(server, Some(tokens)).unwrap();
    let manager =
        Manager::new(client, clusters.clone(), dir.path(), "https://127.0.0.1:6443", None);
    let f = Fixture { dir, host, clusters, manager };

    create(&f, "team-a", json!({"ttl": "2h"}));
    f.manager.reconcile("team-a").await.unwrap();
    let tenant = f.host.get(&tenants(), "team-a").unwrap();
    assert_eq!(tenant["status"]["phase"], "Ready", "{tenant}");
    f.manager.tick().await.unwrap();
    f.host.delete(&tenants(), "team-a", &DeleteParams::default()).unwrap();
    f.manager.reconcile("team-a").await.unwrap();
    assert_eq!(f.host.get(&tenants(), "team-a").unwrap_err().code(), 404);
    assert!(f.clusters.names().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_tenant_is_bootstrapped_in_one_commit_and_a_restart_writes_nothing() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    let store = f.clusters.tenant("team-a").unwrap().api().store().clone();
    let stats = store.commit_stats();
    assert_eq!(stats.commits, 1, "the bootstrap is one durable commit: {stats:?}");
    assert_eq!(stats.revisions, store.current_revision());
    assert_eq!(stats.revisions, store.usage().objects, "each object written once");
    let revision = store.current_revision();
    for path in ["namespaces/kube-system", "namespaces/default/serviceaccounts/default"] {
        assert_eq!(status_of(&f, &format!("/tenants/team-a/api/v1/{path}")).await, 200, "{path}");
    }
    drop(store);

    let Fixture { dir, host, clusters, manager } = f;
    drop((host, clusters, manager));
    let f = fixture_in(dir);
    f.manager.resume().await.unwrap();
    let store = f.clusters.tenant("team-a").unwrap().api().store().clone();
    assert_eq!(store.commit_stats().commits, 0, "nothing missing, nothing written");
    assert_eq!(store.current_revision(), revision);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secured_tenant_gets_its_credentials_and_its_kubeconfig_carries_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path().join("host"), Options::create()).unwrap();
    let host = Arc::new(Api::host(Arc::new(store)).unwrap());
    let server = Arc::new(Server::new(host.clone(), ""));
    let clusters = Arc::new(Clusters::new(server.clone()));
    let client = local_client::client(router(server), None, "default");
    let server_ca = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";
    let manager = Manager::new(
        client,
        clusters.clone(),
        dir.path(),
        "https://127.0.0.1:6443",
        Some(server_ca.to_owned()),
    );
    let f = Fixture { dir, host, clusters, manager };
    create(&f, "team-a", json!({}));
    f.manager.reconcile("team-a").await.unwrap();
    let tenant = f.host.get(&tenants(), "team-a").unwrap();
    assert_eq!(tenant["status"]["phase"], "Ready", "{tenant}");
    let pki = f.dir.path().join("tenants/team-a/pki");
    for file in ["ca.crt", "ca.key", "sa.key", "admin.crt", "admin.key"] {
        assert!(pki.join(file).is_file(), "{file}");
    }
    let secrets = Target { rt: rt("secrets"), namespace: Some("carrel-team-a".into()) };
    let secret = f.host.get(&secrets, KUBECONFIG_SECRET).unwrap();
    let encoded = secret["data"]["kubeconfig"].as_str().unwrap();
    use base64::Engine;
    let kubeconfig = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
    let kubeconfig = String::from_utf8(kubeconfig).unwrap();
    assert!(kubeconfig.contains("client-certificate-data"), "{kubeconfig}");
    // The tenant authenticates: a request without a credential is not served.
    assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 401);
    assert_eq!(f.clusters.tenant("team-a").unwrap().api().store().commit_stats().commits, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_in_process_admin_client_is_the_admin_certificates_user_and_creates_and_watches_pods() {
    use carrel_apiserver::auth::ca::TenantCa;
    use carrel_apiserver::auth::client_cert;
    use futures::StreamExt;
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{PostParams, WatchEvent, WatchParams};
    use rustls::pki_types::{pem::PemObject, CertificateDer, UnixTime};

    use crate::tenant_cluster::{open, TenantDir};

    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantDir::new(dir.path(), "team-a");
    let opened = open(tenant.clone(), Quota::default(), true, Default::default()).await.unwrap();
    let client = crate::admin_client(opened.server.clone());

    // The user the admin kubeconfig's certificate authenticates as.
    let kubeconfig = crate::identity::admin_kubeconfig(
        "team-a",
        &crate::identity::Endpoint { url: "https://x", server_ca_pem: Some("ca"), by_name: None },
        &tenant.pki(),
    )
    .unwrap();
    assert!(kubeconfig.contains("client-certificate-data"), "{kubeconfig}");
    let ca = TenantCa::load_or_generate(&tenant.pki(), "team-a").unwrap();
    let (cert, _) = ca
        .load_or_issue_client(
            &tenant.pki(),
            "admin",
            crate::ADMIN_USER,
            &[crate::ADMIN_GROUP],
            crate::identity::ADMIN_VALIDITY,
        )
        .unwrap();
    let chain = [CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
    let certified = client_cert::verify(&chain, ca.cert_der(), UnixTime::now()).unwrap();
    let user = crate::admin_user();
    assert_eq!((&certified.name, &certified.groups), (&user.name, &user.groups));
    // Who the in-process client is, as the tenant's API says.
    let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    let review = reviews.create(&PostParams::default(), &Default::default()).await.unwrap();
    let info = review.status.and_then(|s| s.user_info).unwrap();
    assert_eq!(info.username.as_ref(), Some(&user.name));
    assert_eq!(info.groups.as_ref(), Some(&user.groups));

    // Pods created, and watched, through the tenant's whole stack (admission included).
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, "default");
    let version = pods.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();
    let events = pods.watch(&WatchParams::default().timeout(30), &version).await.unwrap();
    let mut events = std::pin::pin!(events);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap();
    match event {
        Some(Ok(WatchEvent::Added(pod))) => {
            assert_eq!(pod.metadata.name.as_deref(), Some("train"))
        }
        other => panic!("{other:?}"),
    }
    // A pod the tenant's admission refuses is refused to it too.
    let privileged: Pod = serde_json::from_value(json!({
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "securityContext": {"privileged": true}}]},
    }))
    .unwrap();
    match pods.create(&PostParams::default(), &privileged).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("a privileged pod: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manager_stopped_before_its_first_list_stops() {
    let f = fixture_in(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({}));
    let manager = Arc::new(f.manager);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Stopped at once: before the controller has listed the tenants.
    let _ = stop.send(true);
    let run = tokio::spawn(manager.run(Duration::from_millis(50), stopped));
    tokio::time::timeout(Duration::from_secs(10), run).await.expect("the manager stops").unwrap();
}

/// What the manager tells of tenants coming, going and closing, in order.
#[derive(Debug, Default)]
struct Told(parking_lot::Mutex<Vec<String>>);

impl crate::TenantHooks for Told {
    fn serving(&self, tenant: &str, _: &Arc<Server>, _: &Value) {
        self.0.lock().push(format!("serving {tenant}"));
    }
    fn gone(&self, tenant: &str) {
        self.0.lock().push(format!("gone {tenant}"));
    }
    fn idle(&self, tenant: &str) {
        self.0.lock().push(format!("idle {tenant}"));
    }
}

const IDLE: Duration = Duration::from_millis(300);

/// A fixture whose manager closes tenants idle for [`IDLE`], telling `told`.
fn idle_fixture(dir: tempfile::TempDir) -> (Fixture, Arc<Manager>, Arc<Told>) {
    let Fixture { dir, host, clusters, manager } = fixture_in(dir);
    let manager = Arc::new(manager);
    manager.close_idle_tenants(IDLE);
    let told = Arc::new(Told::default());
    manager.set_hooks(told.clone());
    // The fixture's own manager is not used: the shared one is.
    let unused = Manager::new(
        local_client::client(router(clusters.host().clone()), None, "default"),
        clusters.clone(),
        dir.path(),
        "https://127.0.0.1:6443",
        None,
    );
    (Fixture { dir, host, clusters, manager: unused }, manager, told)
}

async fn until_closed(f: &Fixture, name: &str) {
    for _ in 0..500 {
        if f.clusters.tenant(name).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("tenant {name} was not closed while idle");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_tenant_closes_its_store_and_opens_again_with_its_data_and_rules() {
    let (f, manager, told) = idle_fixture(tempfile::tempdir().unwrap());
    create(&f, "team-a", json!({"podSecurity": "restricted"}));
    manager.reconcile("team-a").await.unwrap();
    let configmaps = "/tenants/team-a/api/v1/namespaces/default/configmaps";
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept"}});
    assert_eq!(send(&f, "POST", configmaps, Some(body)).await.0, 201);
    until_closed(&f, "team-a").await;
    // The hooks are told just after the tenant is marked closed.
    for _ in 0..500 {
        if told.0.lock().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*told.0.lock(), ["serving team-a", "idle team-a"]);
    // Its store is closed: nothing in this process holds it.
    let store_dir = f.dir.path().join("tenants/team-a/store");
    let mut opened = None;
    for _ in 0..500 {
        match SledStore::open(&store_dir, Options::create()) {
            Ok(store) => {
                opened = Some(store);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
    drop(opened.expect("the idle tenant's store was let go"));
    // Still Ready, and its next request opens it: its data, and its pod rules.
    assert_eq!(f.host.get(&tenants(), "team-a").unwrap()["status"]["phase"], "Ready");
    let (code, kept) = send(&f, "GET", &format!("{configmaps}/kept"), None).await;
    assert_eq!(code, 200, "{kept}");
    assert_eq!(kept["metadata"]["name"], "kept");
    assert_eq!(told.0.lock().last().map(String::as_str), Some("serving team-a"));
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}]}});
    let pods = "/tenants/team-a/api/v1/namespaces/default/pods";
    let (code, refused) = send(&f, "POST", pods, Some(pod)).await;
    assert_eq!(code, 403, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("restricted"), "{refused}");

    // Closed again, then deleted while closed: torn down all the same.
    until_closed(&f, "team-a").await;
    f.host.delete(&tenants(), "team-a", &DeleteParams::default()).unwrap();
    manager.reconcile("team-a").await.unwrap();
    assert!(!f.clusters.contains("team-a"));
    assert!(!f.dir.path().join("tenants/team-a").exists());
    assert_eq!(send(&f, "GET", configmaps, None).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_mounts_existing_tenants_without_opening_them() {
    let (f, manager, _) = idle_fixture(tempfile::tempdir().unwrap());
    create(&f, "kept", json!({}));
    manager.reconcile("kept").await.unwrap();
    let before = f.host.get(&tenants(), "kept").unwrap();
    let Fixture { dir, host, clusters, manager: unused } = f;
    drop((host, clusters, unused, manager));
    let (f, manager, told) = idle_fixture(dir);
    manager.resume().await.unwrap();
    // Its status, StoreHealthy condition included, is as it was: nothing written.
    let after = f.host.get(&tenants(), "kept").unwrap();
    assert_eq!(after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"]);
    assert_eq!(after["status"]["conditions"][1]["type"], "StoreHealthy");
    assert_eq!(f.clusters.names(), vec!["kept".to_owned()]);
    assert!(f.clusters.tenant("kept").is_none(), "a restart opened the tenant");
    assert!(told.0.lock().is_empty());
    assert_eq!(f.host.get(&tenants(), "kept").unwrap()["status"]["phase"], "Ready");
    assert_eq!(send(&f, "GET", "/tenants/kept/api/v1/namespaces", None).await.0, 200);
    assert!(f.clusters.tenant("kept").is_some());
    assert_eq!(*told.0.lock(), ["serving kept"]);
}
