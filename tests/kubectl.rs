//! Real kubectl against a real Carrel API server, under the root and under a tenant-style base
//! path. kubectl 1.31 sends JSON request bodies.

use carrel_e2e::{fails, ok, TestServer};

const K31: &str = "kubectl.1.31";

#[test]
fn system_namespaces_and_default_service_accounts_exist() {
    let server = TestServer::start("");
    let out = ok(server.kubectl(K31, &["get", "namespaces", "-o", "name"]));
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(out.contains(&format!("namespace/{ns}\n")), "{ns} missing from {out}");
    }
    let out =
        ok(server.kubectl(K31, &["get", "serviceaccounts", "-n", "kube-system", "-o", "name"]));
    assert_eq!(out, "serviceaccount/default\n");
}

#[test]
fn configmaps_round_trip_with_labels_and_selectors() {
    let server = TestServer::start("/tenants/a");
    ok(server.kubectl(K31, &["create", "configmap", "one", "--from-literal=a=b"]));
    ok(server.kubectl(K31, &["create", "configmap", "two", "--from-literal=c=d"]));
    ok(server.kubectl(K31, &["label", "configmap", "one", "tier=web"]));
    let out = ok(server.kubectl(K31, &["get", "configmaps", "-l", "tier=web", "-o", "name"]));
    assert_eq!(out, "configmap/one\n");
    let out = ok(server.kubectl(K31, &["get", "configmaps", "-l", "tier!=web", "-o", "name"]));
    assert!(out.contains("configmap/two") && !out.contains("configmap/one"), "{out}");
    let out = ok(server.kubectl(K31, &["get", "configmap", "one", "-o", "jsonpath={.data.a}"]));
    assert_eq!(out, "b");
    // The table kubectl prints has the columns kube-apiserver gives configmaps.
    let out = ok(server.kubectl(K31, &["get", "configmaps"]));
    assert!(out.starts_with("NAME"), "{out}");
    assert!(out.lines().next().unwrap().contains("DATA"), "{out}");
    ok(server.kubectl(K31, &["delete", "configmap", "one"]));
    let err = fails(server.kubectl(K31, &["get", "configmap", "one"]));
    assert!(err.contains("configmaps \"one\" not found"), "{err}");
}

#[test]
fn deployments_scale_and_patch() {
    let server = TestServer::start("");
    let manifest = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"replicas":2,"selector":{"matchLabels":{"app":"web"}},
        "template":{"metadata":{"labels":{"app":"web"}},
        "spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}}}"#;
    ok(server.kubectl_with_input(K31, &["create", "-f", "-", "--validate=false"], Some(manifest)));
    ok(server.kubectl(K31, &["scale", "deployment", "web", "--replicas=5"]));
    let out = ok(server.kubectl(
        K31,
        &["get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"],
    ));
    assert_eq!(out, "5 2", "scaling changes the spec, so the generation moves");
    ok(server.kubectl(
        K31,
        &[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"metadata":{"annotations":{"a":"b"}}}"#,
        ],
    ));
    ok(server.kubectl(
        K31,
        &[
            "patch",
            "deployment",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/replicas","value":1}]"#,
        ],
    ));
    let out = ok(server.kubectl(
        K31,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.replicas} {.metadata.generation} {.metadata.annotations.a}",
        ],
    ));
    assert_eq!(out, "1 3 b", "an annotation alone does not bump the generation");
    let out = ok(server.kubectl(K31, &["get", "deployments", "-o", "wide"]));
    assert!(out.contains("nginx:1.27") && out.contains("app=web"), "{out}");
}

#[test]
fn pods_get_defaults_and_pending() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["run", "p1", "--image=busybox", "--restart=Never"]));
    let out = ok(server.kubectl(
        K31,
        &["get", "pod", "p1", "-o", "jsonpath={.status.phase} {.spec.dnsPolicy} {.spec.schedulerName} {.spec.terminationGracePeriodSeconds}"],
    ));
    assert_eq!(out, "Pending ClusterFirst default-scheduler 30");
    let out = ok(server.kubectl(K31, &["get", "pods"]));
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert!(out.contains("Pending"), "{out}");
    let out = ok(server.kubectl(K31, &["get", "pods", "--field-selector", "status.phase=Running"]));
    assert!(!out.contains("p1"), "{out}");
    ok(server.kubectl(K31, &["delete", "pod", "p1"]));
}

#[test]
fn deleting_a_namespace_deletes_what_is_in_it() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "namespace", "team"]));
    ok(server.kubectl(K31, &["create", "configmap", "c", "-n", "team", "--from-literal=a=b"]));
    ok(server.kubectl(K31, &["delete", "namespace", "team"]));
    let err = fails(server.kubectl(K31, &["get", "namespace", "team"]));
    assert!(err.contains("not found"), "{err}");
    let err = fails(
        server.kubectl(K31, &["create", "configmap", "d", "-n", "team", "--from-literal=a=b"]),
    );
    assert!(err.contains("namespaces \"team\" not found"), "{err}");
    let err = fails(server.kubectl(K31, &["delete", "namespace", "default"]));
    assert!(err.contains("may not be deleted"), "{err}");
}

#[test]
fn bad_input_is_refused_with_clear_errors() {
    let server = TestServer::start("");
    let bad_name = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#;
    let err = fails(server.kubectl_with_input(
        K31,
        &["create", "-f", "-", "--validate=false"],
        Some(bad_name),
    ));
    assert!(err.contains("is invalid") && err.contains("metadata.name"), "{err}");
    let no_image = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c"}]}}"#;
    let err = fails(server.kubectl_with_input(
        K31,
        &["create", "-f", "-", "--validate=false"],
        Some(no_image),
    ));
    assert!(err.contains("spec.containers[0].image"), "{err}");
    let err = fails(server.kubectl(K31, &["get", "pods", "-l", "a in (b"]));
    assert!(err.contains("unable to parse requirement") || err.contains("found"), "{err}");
    let out = ok(server.kubectl(K31, &["get", "pods", "-o", "name"]));
    assert_eq!(out, "", "nothing was created");
}

#[test]
fn get_watch_streams_changes() {
    let server = TestServer::start("");
    let kubeconfig = server.kubeconfig();
    let home = server.dir.path().join("home-watch");
    let mut watcher = std::process::Command::new(carrel_e2e::kubectl_path(K31))
        .args(["get", "configmaps", "-w", "--request-timeout=20s"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watcher.stdout.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    // Wait until the watch is established (the initial list printed nothing or the header).
    std::thread::sleep(std::time::Duration::from_millis(500));
    ok(server.kubectl(K31, &["create", "configmap", "seen", "--from-literal=a=b"]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut saw = false;
    while std::time::Instant::now() < deadline {
        match lines_rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(line) if line.starts_with("seen ") => {
                saw = true;
                break;
            }
            _ => {}
        }
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert!(saw, "kubectl get -w did not print the new configmap");
}

#[test]
fn kubectl_over_tls_with_http2() {
    let server = TestServer::start_tls("/tenants/a");
    assert!(server.url.starts_with("https://"));
    ok(server.kubectl(K31, &["create", "configmap", "over-tls", "--from-literal=a=b"]));
    let out = ok(server.kubectl(K31, &["get", "configmaps", "-o", "name"]));
    assert!(out.contains("configmap/over-tls"), "{out}");
    // ALPN picks HTTP/2 for a client that offers it, and HTTP/1.1 for one that does not.
    let ca = server.dir.path().join("ca.pem");
    let version = |flag: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_version}", flag, "--cacert"])
            .arg(&ca)
            .arg(format!("{}/version", server.url))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(version("--http2"), "2");
    assert_eq!(version("--http1.1"), "1.1");
    // A client that does not trust the server's CA is refused by the handshake.
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null"])
        .arg(format!("{}/version", server.url))
        .status()
        .expect("curl");
    assert!(!out.success());
}

#[test]
fn finalizers_hold_a_deletion_until_removed() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "configmap", "held", "--from-literal=a=b"]));
    ok(server.kubectl(
        K31,
        &[
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["example.com/hold"]}}"#,
        ],
    ));
    ok(server.kubectl(K31, &["delete", "configmap", "held", "--wait=false"]));
    let out = ok(server.kubectl(
        K31,
        &["get", "configmap", "held", "-o", "jsonpath={.metadata.deletionTimestamp}"],
    ));
    assert!(!out.is_empty(), "a deletion timestamp is set while the finalizer holds");
    // A waiting delete blocks until the finalizer goes; remove it from another client.
    let waiter = std::thread::scope(|scope| {
        let waiting =
            scope.spawn(|| server.kubectl(K31, &["delete", "configmap", "held", "--timeout=20s"]));
        std::thread::sleep(std::time::Duration::from_millis(500));
        ok(server.kubectl(
            K31,
            &[
                "patch",
                "configmap",
                "held",
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
            ],
        ));
        waiting.join().expect("waiting delete")
    });
    ok(waiter);
    let err = fails(server.kubectl(K31, &["get", "configmap", "held"]));
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn typed_creates_and_output_formats() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "job", "j1", "--image=busybox", "--", "echo", "hi"]));
    ok(server.kubectl(K31, &["create", "serviceaccount", "robot"]));
    ok(server.kubectl(K31, &["create", "role", "reader", "--verb=get", "--resource=pods"]));
    ok(server.kubectl(K31, &["create", "secret", "generic", "s1", "--from-literal=p=q"]));
    let out = ok(server.kubectl(K31, &["get", "secret", "s1", "-o", "jsonpath={.data.p} {.type}"]));
    assert_eq!(out, "cQ== Opaque");
    let out = ok(server.kubectl(K31, &["get", "job", "j1", "-o", "json"]));
    let job: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(job["spec"]["backoffLimit"], 6);
    let out = ok(server.kubectl(K31, &["get", "role", "reader", "-o", "yaml"]));
    assert!(out.contains("kind: Role") && out.contains("- get"), "{out}");
    let out = ok(server.kubectl(K31, &["get", "serviceaccounts", "-o", "name"]));
    assert_eq!(out, "serviceaccount/default\nserviceaccount/robot\n");
    let out = ok(server.kubectl(K31, &["api-versions"]));
    for gv in ["v1", "apps/v1", "batch/v1", "rbac.authorization.k8s.io/v1"] {
        assert!(out.lines().any(|l| l == gv), "{gv} missing from {out}");
    }
    let out = ok(server.kubectl(K31, &["describe", "secret", "s1"]));
    assert!(out.contains("Name:") && out.contains("s1") && out.contains("p:"), "{out}");
}

#[test]
fn wait_for_delete_and_dry_run() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "configmap", "gone", "--from-literal=a=b"]));
    ok(server
        .kubectl(K31, &["create", "configmap", "dry", "--from-literal=a=b", "--dry-run=server"]));
    fails(server.kubectl(K31, &["get", "configmap", "dry"]));
    let out = ok(server.kubectl(
        K31,
        &[
            "label",
            "configmap",
            "gone",
            "x=y",
            "--dry-run=server",
            "-o",
            "jsonpath={.metadata.labels.x}",
        ],
    ));
    assert_eq!(out, "y", "a dry run answers with what it would store");
    let out =
        ok(server.kubectl(K31, &["get", "configmap", "gone", "-o", "jsonpath={.metadata.labels}"]));
    assert_eq!(out, "", "and stores nothing");
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            server.kubectl(K31, &["wait", "--for=delete", "configmap/gone", "--timeout=20s"])
        });
        std::thread::sleep(std::time::Duration::from_millis(500));
        ok(server.kubectl(K31, &["delete", "configmap", "gone"]));
        ok(waiting.join().expect("wait"));
    });
}
