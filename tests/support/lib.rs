//! Support for end-to-end tests: a real API server on 127.0.0.1 and the real kubectl binaries.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use carrel_apiserver::kubeconfig;
use carrel_apiserver::tls::Certificates;
use carrel_apiserver::{router, Api, Server};
use carrel_store::{Options, SledStore};

pub mod webhooks;

/// A running API server over a fresh store, stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// The server's URL, with its base path.
    pub url: String,
    /// Where the kubeconfig, the store and kubectl's cache live.
    pub dir: tempfile::TempDir,
    /// The server's store, for tests that reach under the API (to compact it, say).
    pub store: Arc<SledStore>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestServer {
    /// Start a server under `base` (empty for the root) on a free port, on plain HTTP.
    pub fn start(base: &str) -> TestServer {
        TestServer::start_with(base, false)
    }

    /// Start a server under `base` on a free port over TLS, with HTTP/2 offered through ALPN.
    pub fn start_tls(base: &str) -> TestServer {
        TestServer::start_with(base, true)
    }

    fn start_with(base: &str, tls: bool) -> TestServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            Arc::new(SledStore::open(dir.path().join("store"), Options::create()).expect("store"));
        let shared: Arc<dyn carrel_store::Store> = store.clone();
        let api = Arc::new(Api::new(shared).expect("bootstrap"));
        let server = Arc::new(Server::new(api, base));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let certs = tls.then(|| {
            Certificates::generate(&["127.0.0.1".into(), "localhost".into()]).expect("certificates")
        });
        let config = certs.as_ref().map(|c| c.server_config().expect("TLS configuration"));
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
                addr_tx.send(listener.local_addr().expect("address")).expect("report address");
                let stop = async {
                    let _ = stop.await;
                };
                match config {
                    Some(config) => {
                        carrel_apiserver::tls::serve(listener, config, router(server), stop).await
                    }
                    None => axum::serve(listener, router(server))
                        .with_graceful_shutdown(stop)
                        .await
                        .expect("serve"),
                }
            });
        });
        let addr = addr_rx.recv().expect("server address");
        let scheme = if tls { "https" } else { "http" };
        let url = format!("{scheme}://{addr}{base}");
        let test = TestServer { url, dir, store, shutdown: Some(shutdown), thread: Some(thread) };
        let ca = certs.as_ref();
        std::fs::write(test.kubeconfig(), kubeconfig::admin(&test.url, ca)).expect("kubeconfig");
        if let Some(certs) = &certs {
            std::fs::write(test.dir.path().join("ca.pem"), &certs.ca_pem).expect("ca.pem");
        }
        test
    }

    /// The kubeconfig file for this server (no credentials: authentication comes later).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Run a kubectl binary (`kubectl.1.31`, or `kubectl` for the dispatcher) with `args`,
    /// with a fresh home and discovery cache.
    pub fn kubectl(&self, binary: &str, args: &[&str]) -> Output {
        self.kubectl_with_input(binary, args, None)
    }

    /// As [`TestServer::kubectl`], with `input` on standard input.
    pub fn kubectl_with_input(&self, binary: &str, args: &[&str], input: Option<&str>) -> Output {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let mut command = Command::new(kubectl_path(binary));
        command
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("HOME", &home)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap_or_else(|e| panic!("running {binary}: {e}"));
        if let Some(input) = input {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Where a kubectl binary lives: the versioned ones sit beside the dispatcher that
/// `/usr/bin/kubectl` links to.
pub fn kubectl_path(binary: &str) -> PathBuf {
    let dispatcher =
        std::fs::canonicalize("/usr/bin/kubectl").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    if binary == "kubectl" {
        return dispatcher;
    }
    dispatcher.parent().unwrap_or(Path::new("/usr/bin")).join(binary)
}

/// Standard output of a command that must have succeeded.
pub fn ok(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "command failed: {}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Standard error of a command that must have failed.
pub fn fails(output: Output) -> String {
    assert!(
        !output.status.success(),
        "command succeeded but should have failed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}
