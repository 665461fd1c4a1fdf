//! The `carrel-apiserver` binary as a user runs it: a generated CA, a kubeconfig written for its
//! admin, clients authenticated by certificate and anonymous requests refused.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// The versioned kubectl beside the `/usr/bin/kubectl` dispatcher.
fn kubectl() -> std::path::PathBuf {
    let dispatcher = std::fs::canonicalize("/usr/bin/kubectl").expect("kubectl is installed");
    dispatcher.parent().expect("a directory").join("kubectl.1.33")
}

#[test]
fn the_binary_serves_its_admin_and_refuses_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_carrel-apiserver"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--write-kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start carrel-apiserver");
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().expect("a line").expect("UTF-8");
    let url = line.strip_prefix("listening on ").expect("the URL line").to_owned();
    let run = |args: &[&str]| {
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env("HOME", dir.path())
            .output()
            .expect("kubectl")
    };
    let out = run(&["get", "namespaces", "-o", "name"]);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    let whoami = String::from_utf8_lossy(&run(&["auth", "whoami"]).stdout).into_owned();
    let anonymous = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &format!("{url}/api/v1/namespaces")])
        .output()
        .expect("curl");
    let healthz = Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &format!("{url}/healthz")])
        .output()
        .expect("curl");
    let _ = child.kill();
    let _ = child.wait();
    assert!(listed.contains("namespace/kube-system"), "{listed}");
    assert!(whoami.contains("carrel-admin") && whoami.contains("system:masters"), "{whoami}");
    assert_eq!(String::from_utf8_lossy(&anonymous.stdout), "401");
    assert_eq!(String::from_utf8_lossy(&healthz.stdout), "200");
}
