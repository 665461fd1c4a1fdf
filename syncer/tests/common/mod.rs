//! What the syncer's tests share: real API servers in the test's process.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::time::{Duration, Instant};

use carrel_apiserver::intake::PodIntake;
use kube::api::PostParams;
use kube::Api;
use serde_json::Value;
use tokio::net::TcpListener;

/// A syncer's configuration for `tenant`, in host namespace `carrel-<tenant>`, no GPU quota,
/// resyncing every second.
#[allow(dead_code)] // Not every test binary runs a syncer.
pub fn config(tenant: &str) -> carrel_syncer::Config {
    carrel_syncer::Config {
        tenant: tenant.into(),
        host_namespace: format!("carrel-{tenant}"),
        gpu_quota: Default::default(),
        tenant_ca_pem: None,
        tenant_api: None,
        gpu_runtime_class: None,
        cluster_dns: carrel_syncer::ClusterDns::TenantService,
        resync: Duration::from_secs(1),
    }
}

/// A plain-HTTP client of the server on `port`.
#[allow(dead_code)] // Not every test binary is a client.
pub fn client(port: u16) -> kube::Client {
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().expect("url"));
    kube::Client::try_from(config).expect("client")
}

/// Wait up to 30 s for `check` to give something; fails the test with `what` if it does not.
#[allow(dead_code)] // Not every test binary waits.
pub async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    check: impl Fn() -> F,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Create `object` (JSON) through `api`, as its typed form.
#[allow(dead_code)] // Not every test binary creates objects so.
pub async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object).expect("decodes");
    api.create(&PostParams::default(), &typed).await.expect("create")
}

/// A plain-HTTP API server over a fresh store on 127.0.0.1: the host's, or a tenant's (`t`),
/// whose pod creates wait for room in `intake` when there is one.
pub async fn server(
    host: bool,
    intake: Option<&Arc<PodIntake>>,
) -> (tempfile::TempDir, SocketAddr) {
    let (dir, addr, _) = counting_server(host, intake).await;
    (dir, addr)
}

/// [`server`], and the number of watch requests (`?watch=true`) it has been sent so far.
#[allow(dead_code)] // Not every test binary counts.
pub async fn counting_server(
    host: bool,
    intake: Option<&Arc<PodIntake>>,
) -> (tempfile::TempDir, SocketAddr, Arc<AtomicUsize>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        carrel_store::SledStore::open(dir.path().join("store"), carrel_store::Options::create())
            .expect("store");
    let api = if host {
        carrel_apiserver::Api::host(Arc::new(store))
    } else {
        carrel_apiserver::Api::new(Arc::new(store))
    }
    .expect("api");
    let server = Arc::new(carrel_apiserver::Server::new(Arc::new(api), ""));
    if let (false, Some(intake)) = (host, intake) {
        server.set_pod_intake(intake.clone(), "t");
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let watches = Arc::new(AtomicUsize::new(0));
    let counter = watches.clone();
    let router = carrel_apiserver::router(server).layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let watch = request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
            if watch {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            next.run(request)
        },
    ));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (dir, addr, watches)
}
