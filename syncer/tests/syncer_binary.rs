//! The `carrel-syncer` binary as an admin runs it: against a host and a tenant API given by
//! kubeconfig files, until SIGTERM.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;

use common::server;

const SYNCER: &str = env!("CARGO_BIN_EXE_carrel-syncer");

fn write_kubeconfig(path: &Path, addr: SocketAddr) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    );
    std::fs::write(path, text).expect("kubeconfig");
}

fn client(addr: SocketAddr) -> kube::Client {
    let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
    kube::Client::try_from(config).expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_syncs_a_tenant_until_told_to_stop() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_tenant_dir, tenant_addr) = server(false, None).await;
    let (host, tenant) = (client(host_addr), client(tenant_addr));
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "carrel-t"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.expect("host namespace");

    let files = tempfile::tempdir().expect("tempdir");
    let (host_file, tenant_file) = (files.path().join("host"), files.path().join("tenant"));
    write_kubeconfig(&host_file, host_addr);
    write_kubeconfig(&tenant_file, tenant_addr);
    let mut child = Command::new(SYNCER)
        .args(["--tenant", "t", "--resync-seconds", "1", "--tenant-kubeconfig"])
        .arg(&tenant_file)
        .arg("--host-kubeconfig")
        .arg(&host_file)
        .stderr(Stdio::null())
        .spawn()
        .expect("start carrel-syncer");

    let pods: Api<Pod> = Api::namespaced(tenant, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.expect("tenant pod");
    let host_pods: Api<Pod> = Api::namespaced(host, "carrel-t");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names: Vec<String> = host_pods
            .list(&ListParams::default())
            .await
            .expect("host pods")
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        if names == ["web-x-default"] {
            break;
        }
        assert!(Instant::now() < deadline, "host pods {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("carrel-syncer did not stop on SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(SYNCER)
            .args(["--tenant", "t", "--tenant-kubeconfig"])
            .arg(dir.path().join("missing.kubeconfig"))
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run carrel-syncer");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = run(&["--gpu", "lots"]);
    assert!(stderr.contains("--gpu"), "{stderr}");
    let stderr = run(&[]);
    assert!(stderr.contains("missing.kubeconfig"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
