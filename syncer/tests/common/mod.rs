//! What the syncer's tests share: real API servers in the test's process.

use std::net::SocketAddr;
use std::sync::Arc;

use carrel_apiserver::intake::PodIntake;
use tokio::net::TcpListener;

/// A plain-HTTP API server over a fresh store on 127.0.0.1: the host's, or a tenant's (`t`),
/// whose pod creates wait for room in `intake` when there is one.
pub async fn server(
    host: bool,
    intake: Option<&Arc<PodIntake>>,
) -> (tempfile::TempDir, SocketAddr) {
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
    tokio::spawn(async move {
        let _ = axum::serve(listener, carrel_apiserver::router(server)).await;
    });
    (dir, addr)
}
