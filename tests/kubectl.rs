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
fn get_watch_streams_changes_as_table_rows() {
    let server = TestServer::start("");
    let kubeconfig = server.kubeconfig();
    let home = server.dir.path().join("home-watch");
    let mut watcher = std::process::Command::new(carrel_e2e::kubectl_path(K31))
        .args(["get", "pods", "-w", "--request-timeout=20s"])
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
    ok(server.kubectl(K31, &["run", "seen", "--image=nginx:1.27"]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let (mut header, mut row) = (None, None);
    while std::time::Instant::now() < deadline && row.is_none() {
        match lines_rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(line) if line.starts_with("NAME") => header = Some(line),
            Ok(line) if line.starts_with("seen ") => row = Some(line),
            _ => {}
        }
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
    let row = row.expect("kubectl get -w did not print the new pod");
    // The watch is served as Table rows: the columns kubectl users know for pods.
    let header = header.expect("kubectl get -w printed no header");
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"], "{header}");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..4], ["seen", "0/1", "Pending", "0"], "{row}");
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

// kubectl 1.32 and later send typed creates as protobuf (`application/vnd.kubernetes.protobuf`).

const K33: &str = "kubectl.1.33";

/// The typed creates kubectl sends as protobuf, then what the server stored.
fn protobuf_typed_creates(binary: &str) {
    let server = TestServer::start("/tenants/a");
    let run = |args: &[&str]| ok(server.kubectl(binary, args));
    let get = |what: &str| -> serde_json::Value {
        serde_json::from_str(&run(&["get", what, "-o", "json"])).expect("JSON")
    };
    run(&["create", "configmap", "x", "--from-literal=a=b"]);
    run(&["create", "secret", "generic", "s", "--from-literal=p=q"]);
    run(&["create", "namespace", "n"]);
    run(&["create", "serviceaccount", "sa"]);
    run(&["create", "deployment", "d", "--image=nginx"]);
    run(&["create", "deployment", "none", "--image=nginx:1.27", "--replicas=0"]);
    run(&["create", "job", "j", "--image=busybox", "--", "echo", "hi"]);
    run(&["create", "role", "reader", "--verb=get", "--resource=pods"]);
    run(&["create", "rolebinding", "rb", "--role=reader", "--serviceaccount=default:sa"]);

    assert_eq!(get("configmap/x")["data"], serde_json::json!({"a": "b"}));
    let secret = get("secret/s");
    assert_eq!((&secret["data"]["p"], &secret["type"]), (&"cQ==".into(), &"Opaque".into()));
    assert_eq!(get("namespace/n")["status"]["phase"], "Active");
    assert_eq!(get("serviceaccount/sa")["metadata"]["name"], "sa");
    let deployment = get("deployment/d");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["metadata"]["generation"], 1);
    let pod_spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod_spec["containers"][0]["image"], "nginx");
    // Go sends empty strings for unset fields; they must not stop defaulting.
    assert_eq!(pod_spec["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(pod_spec["containers"][0]["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(pod_spec["restartPolicy"], "Always");
    assert_eq!(pod_spec["schedulerName"], "default-scheduler");
    assert_eq!(get("deployment/none")["spec"]["replicas"], 0, "an explicit zero stays");
    let job = get("job/j");
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    // (The test helper's own flags follow `--` too.)
    assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["command"][0], "echo");
    assert_eq!(job["spec"]["backoffLimit"], 6);
    assert_eq!(
        get("role/reader")["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    );
    let binding = get("rolebinding/rb");
    assert_eq!(binding["roleRef"]["name"], "reader");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}])
    );
}

#[test]
fn protobuf_typed_creates_with_kubectl_1_33() {
    protobuf_typed_creates(K33);
}

#[test]
fn protobuf_typed_creates_through_the_dispatcher() {
    // The server reports v1.33, so the dispatcher runs kubectl 1.33.
    protobuf_typed_creates("kubectl");
}

/// Where `proto` differs from `json`: only extra zeros and falses are allowed (Go writes every
/// non-pointer field, and protobuf cannot tell `0` from unset, so they stay).
fn protobuf_differences(
    json: &serde_json::Value,
    proto: &serde_json::Value,
    at: &str,
) -> Vec<String> {
    use serde_json::Value;
    match (json, proto) {
        (Value::Object(a), Value::Object(b)) => {
            let mut out = Vec::new();
            for (k, v) in b {
                match a.get(k) {
                    Some(w) => out.extend(protobuf_differences(w, v, &format!("{at}.{k}"))),
                    None if v == &Value::from(0) || v == &Value::Bool(false) => {}
                    None => out.push(format!("{at}.{k}: only protobuf has {v}")),
                }
            }
            out.extend(
                a.iter()
                    .filter(|(k, _)| !b.contains_key(*k))
                    .map(|(k, v)| format!("{at}.{k}: only JSON has {v}")),
            );
            out
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .flat_map(|(i, (v, w))| protobuf_differences(v, w, &format!("{at}[{i}]")))
            .collect(),
        _ if json == proto => Vec::new(),
        _ => vec![format!("{at}: JSON has {json}, protobuf {proto}")],
    }
}

#[test]
fn protobuf_creates_store_what_json_creates_store() {
    let server = TestServer::start("");
    let creates: &[&[&str]] = &[
        &["create", "configmap", "x", "--from-literal=a=b", "--from-literal=empty="],
        &["create", "secret", "generic", "s", "--from-literal=p=q"],
        &[
            "create",
            "secret",
            "docker-registry",
            "reg",
            "--docker-username=u",
            "--docker-password=p",
        ],
        &["create", "serviceaccount", "sa"],
        &["create", "deployment", "d", "--image=nginx", "--port=80", "--replicas=3"],
        &["create", "role", "r", "--verb=get,list", "--resource=pods,deployments.apps"],
        &["create", "rolebinding", "rb", "--role=r", "--user=alice", "--serviceaccount=x:sa"],
        &["create", "service", "clusterip", "svc", "--tcp=80:8080"],
        &["create", "cronjob", "cj", "--image=busybox", "--schedule=*/5 * * * *"],
        &["create", "poddisruptionbudget", "pdb", "--selector=a=b", "--min-available=50%"],
        &["create", "ingress", "ing", "--rule=foo.com/bar=svc1:8080", "--class=nginx"],
        &["create", "quota", "q", "--hard=cpu=1,memory=1Gi,pods=2"],
    ];
    let objects = [
        "configmap/x",
        "secret/s",
        "secret/reg",
        "serviceaccount/sa",
        "deployment/d",
        "role/r",
        "rolebinding/rb",
        "service/svc",
        "cronjob/cj",
        "pdb/pdb",
        "ingress/ing",
        "quota/q",
    ];
    let mut stored = Vec::new();
    for (binary, namespace) in [(K31, "json"), (K33, "proto")] {
        ok(server.kubectl(K31, &["create", "namespace", namespace]));
        for args in creates {
            ok(server.kubectl(binary, &[args, &["-n", namespace][..]].concat()));
        }
        let got: Vec<serde_json::Value> = objects
            .iter()
            .map(|what| {
                let out = ok(server.kubectl(K31, &["get", what, "-n", namespace, "-o", "json"]));
                let mut object: serde_json::Value = serde_json::from_str(&out).expect("JSON");
                let metadata = object["metadata"].as_object_mut().expect("metadata");
                for volatile in ["uid", "creationTimestamp", "resourceVersion", "namespace"] {
                    metadata.remove(volatile);
                }
                // Each Service is given an address of its own, at random as kube-apiserver does.
                if let Some(spec) =
                    object["spec"].as_object_mut().filter(|_| what.starts_with("service/"))
                {
                    spec.remove("clusterIP");
                    spec.remove("clusterIPs");
                }
                object
            })
            .collect();
        stored.push(got);
    }
    for ((what, json), proto) in objects.iter().zip(&stored[0]).zip(&stored[1]) {
        let differences = protobuf_differences(json, proto, what);
        assert!(differences.is_empty(), "{}", differences.join("\n"));
    }
}

/// A Deployment manifest whose replica count sits under `replicas_field`.
fn openapi_deployment(name: &str, replicas_field: &str) -> String {
    format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}"}},
        "spec":{{"{replicas_field}":2,"selector":{{"matchLabels":{{"app":"{name}"}}}},
        "template":{{"metadata":{{"labels":{{"app":"{name}"}}}},
        "spec":{{"containers":[{{"name":"nginx","image":"nginx:1.27","ports":[{{"containerPort":80}}]}}]}}}}}}}}"#
    )
}

#[test]
fn openapi_create_and_apply_validate_against_the_served_schemas() {
    for base in ["", "/tenants/a"] {
        let server = TestServer::start(base);
        // No --validate=false: kubectl downloads the schemas and validates client-side.
        ok(server.kubectl_with_input(
            K31,
            &["create", "-f", "-"],
            Some(&openapi_deployment("web", "replicas")),
        ));
        ok(server.kubectl_with_input(
            K31,
            &["apply", "-f", "-"],
            Some(&openapi_deployment("applied", "replicas")),
        ));
        let out = ok(server
            .kubectl(K31, &["get", "deployment", "applied", "-o", "jsonpath={.spec.replicas}"]));
        assert_eq!(out, "2");
        let err = fails(server.kubectl_with_input(
            K31,
            &["create", "-f", "-", "--validate=strict"],
            Some(&openapi_deployment("typo", "replicass")),
        ));
        // The server refuses it (kubectl sends fieldValidation=Strict), naming the field's path.
        assert!(err.contains(r#"unknown field "spec.replicass""#), "{base}: {err}");
        fails(server.kubectl(K31, &["get", "deployment", "typo"]));
    }
}

#[test]
fn openapi_explain_prints_field_docs() {
    for base in ["", "/tenants/a"] {
        let server = TestServer::start(base);
        for binary in [K31, "kubectl.1.33"] {
            let out = ok(server.kubectl(binary, &["explain", "pod.spec.containers"]));
            assert!(out.contains("DESCRIPTION") || out.contains("FIELD"), "{base}: {out}");
            assert!(out.contains("image"), "{base}: {out}");
            let out = ok(server.kubectl(binary, &["explain", "deployment.spec.replicas"]));
            assert!(out.contains("KIND:") && out.contains("Deployment"), "{base}: {out}");
            assert!(out.contains("replicas") && out.contains("<integer>"), "{base}: {out}");
        }
    }
}

#[test]
fn openapi_documents_are_served_by_hash() {
    let server = TestServer::start("");
    let root = ok(server.kubectl(K31, &["get", "--raw", "/openapi/v3"]));
    let root: serde_json::Value = serde_json::from_str(&root).expect("JSON");
    let url = root["paths"]["apis/apps/v1"]["serverRelativeURL"].as_str().expect("apps/v1");
    assert!(url.starts_with("/openapi/v3/apis/apps/v1?hash="), "{url}");
    let doc = ok(server.kubectl(K31, &["get", "--raw", url]));
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("JSON");
    assert_eq!(doc["openapi"], "3.0.0");
    assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
    // A stale hash is redirected to the current one, which client-go follows.
    let doc = ok(server.kubectl(K31, &["get", "--raw", "/openapi/v3/apis/apps/v1?hash=0"]));
    assert!(doc.contains("io.k8s.api.apps.v1.Deployment"));
}

const DEPLOYMENT_V1: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        ports: [{containerPort: 80}]
        env: [{name: A, value: "1"}]
      - name: sidecar
        image: busybox:1.36
"#;

#[test]
fn strategic_merge_apply_patch_edit_and_set_image() {
    let server = TestServer::start("/tenants/a");
    for binary in [K31, "kubectl.1.33"] {
        ok(server.kubectl_with_input(binary, &["apply", "-f", "-"], Some(DEPLOYMENT_V1)));
        // A second apply with a change: kubectl sends a strategic merge patch with
        // $setElementOrder directives and the last-applied annotation.
        let v2 =
            DEPLOYMENT_V1.replace("nginx:1.27", "nginx:1.28").replace("replicas: 2", "replicas: 3");
        ok(server.kubectl_with_input(binary, &["apply", "-f", "-"], Some(&v2)));
        let out = ok(server.kubectl(
            binary,
            &["get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[*].image} {.spec.template.spec.containers[0].ports[0].containerPort}"],
        ));
        assert_eq!(out, "3 nginx:1.28 busybox:1.36 80");
        // kubectl patch's default type is strategic: containers merge by name.
        ok(server.kubectl(
            binary,
            &["patch", "deployment", "web", "-p", r#"{"spec":{"template":{"spec":{"containers":[{"name":"app","env":[{"name":"B","value":"2"}]}]}}}}"#],
        ));
        let out = ok(server.kubectl(
            binary,
            &["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].env[*].name} {.spec.template.spec.containers[1].name}"],
        ));
        assert_eq!(out, "A B sidecar");
        ok(server.kubectl(binary, &["set", "image", "deployment/web", "sidecar=busybox:1.37"]));
        let out = ok(server.kubectl(
            binary,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.template.spec.containers[*].image}",
            ],
        ));
        assert_eq!(out, "nginx:1.28 busybox:1.37");
        ok(server.kubectl(binary, &["delete", "deployment", "web"]));
    }
}

#[test]
fn edit_with_an_editor() {
    let server = TestServer::start("");
    ok(server.kubectl(K31, &["create", "configmap", "edited", "--from-literal=mode=slow"]));
    let home = server.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let output = std::process::Command::new(carrel_e2e::kubectl_path(K31))
        .args(["edit", "configmap", "edited"])
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", &home)
        .env("KUBE_EDITOR", "sed -i s/mode:\\ slow/mode:\\ fast/")
        .output()
        .expect("kubectl edit");
    ok(output);
    let out =
        ok(server.kubectl(K31, &["get", "configmap", "edited", "-o", "jsonpath={.data.mode}"]));
    assert_eq!(out, "fast");
}

#[test]
fn server_side_field_validation() {
    let server = TestServer::start("");
    // `--validate=false` makes kubectl send fieldValidation=Ignore: unknown fields are dropped.
    let manifest = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","colour":"red"},"data":{"a":"b"},"extra":1}"#;
    ok(server.kubectl_with_input(K31, &["create", "-f", "-", "--validate=false"], Some(manifest)));
    let stored = ok(server.kubectl(K31, &["get", "configmap", "c", "-o", "json"]));
    assert!(!stored.contains("colour") && !stored.contains("extra"), "{stored}");
    let post = |name: &str, query: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-i", "-X", "POST", "-H", "Content-Type: application/json", "-d"])
            .arg(manifest.replace("\"c\"", &format!("\"{name}\"")))
            .arg(format!("{}/api/v1/namespaces/default/configmaps{query}", server.url))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Without the parameter (the Python client, curl): Warn, with a Warning header per field.
    let answer = post("warned", "");
    assert!(answer.contains("201 Created"), "{answer}");
    assert!(
        answer.to_lowercase().contains("warning: 299 - \"unknown field \\\"extra\\\"\""),
        "{answer}"
    );
    // Strict is refused with the fields named, and nothing is stored.
    let answer = post("strict", "?fieldValidation=Strict");
    assert!(
        answer.contains("\"code\":400") && answer.contains("strict decoding error"),
        "{answer}"
    );
    assert!(answer.contains("unknown field \\\"metadata.colour\\\""), "{answer}");
    fails(server.kubectl(K31, &["get", "configmap", "strict"]));
    // Duplicate fields: an error under Strict, a warning by default.
    let duplicated = |name: &str, query: &str| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-i", "-X", "POST", "-H", "Content-Type: application/json", "-d"])
            .arg(format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","name":"{name}"}}}}"#
            ))
            .arg(format!("{}/api/v1/namespaces/default/configmaps{query}", server.url))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let answer = duplicated("dup-strict", "?fieldValidation=Strict");
    assert!(answer.contains(r#"duplicate field \"metadata.name\""#), "{answer}");
    fails(server.kubectl(K31, &["get", "configmap", "dup-strict"]));
    let answer = duplicated("dup-warn", "");
    assert!(answer.contains("201 Created"), "{answer}");
    assert!(answer.to_lowercase().contains(r#"duplicate field \"metadata.name\""#), "{answer}");
    let answer = post("bad", "?fieldValidation=Sometimes");
    assert!(answer.contains("\"code\":400"), "{answer}");
}

#[test]
fn bad_bodies_are_status_errors_and_change_nothing() {
    let server = TestServer::start("");
    let post = |content_type: &str, body: &[u8]| {
        let path = server.dir.path().join("body");
        std::fs::write(&path, body).unwrap();
        let out = std::process::Command::new("curl")
            .args(["-s", "-X", "POST", "-H"])
            .arg(format!("Content-Type: {content_type}"))
            .arg("--data-binary")
            .arg(format!("@{}", path.display()))
            .arg(format!("{}/api/v1/namespaces/default/configmaps", server.url))
            .output()
            .expect("curl");
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("not a JSON Status ({e}): {}", String::from_utf8_lossy(&out.stdout))
        });
        assert_eq!(body["kind"], "Status", "{body}");
        (body["code"].as_u64().unwrap(), body["message"].as_str().unwrap_or("").to_owned())
    };
    let cases: Vec<(&str, Vec<u8>, u64)> = vec![
        ("application/json", b"{\"apiVersion\": \"v1\", \"kind\": ".to_vec(), 400),
        ("application/json", b"[1, 2, 3]".to_vec(), 400),
        ("application/yaml", b"metadata: [unclosed".to_vec(), 400),
        ("application/vnd.kubernetes.protobuf", b"k8s\0\x0a\xff\xff".to_vec(), 400),
        ("application/vnd.kubernetes.protobuf", b"not protobuf".to_vec(), 400),
        (
            "application/json",
            br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(),
            400,
        ),
        (
            "application/json",
            br#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(),
            400,
        ),
        // Wrong types: a number where a map of strings is, a string where labels are.
        (
            "application/json",
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":1}}"#
                .to_vec(),
            400,
        ),
        (
            "application/json",
            br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":"a=b"}}"#
                .to_vec(),
            400,
        ),
        ("text/plain", b"hello".to_vec(), 415),
        (
            "application/json",
            {
                let mut big = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":""#.to_vec();
                big.extend(std::iter::repeat_n(b'x', 4 * 1024 * 1024));
                big.extend(br#""}}"#);
                big
            },
            413,
        ),
    ];
    for (content_type, body, code) in cases {
        let (got, message) = post(content_type, &body);
        assert_eq!(
            got,
            code,
            "{content_type} {:?}: {message}",
            String::from_utf8_lossy(&body[..body.len().min(60)])
        );
        assert!(!message.is_empty());
    }
    let out = ok(server.kubectl(K31, &["get", "configmaps", "-o", "name"]));
    assert_eq!(out, "", "nothing was stored");
}

#[test]
fn api_resources_and_diff() {
    let server = TestServer::start("");
    let out = ok(server.kubectl(K31, &["api-resources", "--api-group=apps", "-o", "name"]));
    for r in ["deployments.apps", "replicasets.apps", "statefulsets.apps", "daemonsets.apps"] {
        assert!(out.lines().any(|l| l == r), "{r} missing from {out}");
    }
    let out = ok(server.kubectl(K31, &["api-resources", "--namespaced=false", "-o", "name"]));
    assert!(out.contains("namespaces") && out.contains("nodes") && !out.contains("pods"), "{out}");
    ok(server.kubectl(K31, &["create", "configmap", "cfg", "--from-literal=mode=slow"]));
    let changed = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg"},"data":{"mode":"fast"}}"#;
    let out = server.kubectl_with_input(K31, &["diff", "-f", "-"], Some(changed));
    assert_eq!(out.status.code(), Some(1), "kubectl diff exits 1 when there are differences");
    let diff = String::from_utf8_lossy(&out.stdout);
    assert!(diff.contains("-  mode: slow") && diff.contains("+  mode: fast"), "{diff}");
    let out = ok(server.kubectl(K31, &["get", "configmap", "cfg", "-o", "jsonpath={.data.mode}"]));
    assert_eq!(out, "slow", "diff changes nothing");
}

#[test]
fn status_subresource_and_wait_for_condition() {
    let server = TestServer::start("");
    ok(server.kubectl_with_input(K31, &["apply", "-f", "-"], Some(DEPLOYMENT_V1)));
    // Nothing reconciles deployments here; write the status as a controller would.
    let status = r#"{"status":{"replicas":2,"readyReplicas":2,"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable"}]}}"#;
    ok(server.kubectl(
        K31,
        &["patch", "deployment", "web", "--subresource=status", "--type=merge", "-p", status],
    ));
    ok(server
        .kubectl(K31, &["wait", "--for=condition=Available", "deployment/web", "--timeout=20s"]));
    // The status went through /status only: a spec patch through it changes nothing else, and the
    // main resource does not take status.
    ok(server.kubectl(
        K31,
        &["patch", "deployment", "web", "--type=merge", "-p", r#"{"status":{"readyReplicas":0}}"#],
    ));
    let out = ok(server.kubectl(
        K31,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas} {.metadata.generation}",
        ],
    ));
    assert_eq!(out, "2 1", "status is written through /status only, and it leaves the generation");
    let out = ok(server.kubectl(K31, &["get", "deployment", "web"]));
    assert!(out.lines().nth(1).is_some_and(|l| l.contains("2/2")), "{out}");
}
