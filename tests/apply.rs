//! Server-side apply with real kubectl: `kubectl apply --server-side`, field managers in
//! `managedFields`, conflicts naming the other manager and the field, `--force-conflicts`, and
//! fields dropped from a configuration removed from the object.

use carrel_e2e::{fails, ok, TestServer};
use serde_json::Value;

const BINARIES: [&str; 2] = ["kubectl.1.31", "kubectl.1.33"];

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
    team: gpu
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
      - name: sidecar
        image: busybox:1.36
"#;

fn json(server: &TestServer, binary: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&ok(server.kubectl(binary, &all))).expect("kubectl prints JSON")
}

fn managers(object: &Value) -> Vec<(String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_owned(),
                        e["operation"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn apply_creates_then_updates_and_prunes_what_the_configuration_drops() {
    for binary in BINARIES {
        let server = TestServer::start("/tenants/ssa");
        let out = ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "-f", "-"],
            Some(DEPLOYMENT),
        ));
        assert!(out.contains("deployment.apps/web serverside-applied"), "{binary}: {out}");
        let live = json(&server, binary, &["get", "deployment", "web"]);
        assert_eq!(managers(&live), vec![("kubectl".to_owned(), "Apply".to_owned())]);
        let fields = &live["metadata"]["managedFields"][0]["fieldsV1"];
        assert_eq!(fields["f:spec"]["f:replicas"], serde_json::json!({}), "{binary}: {fields}");
        assert!(
            fields["f:spec"]["f:template"]["f:spec"]["f:containers"]
                .get(r#"k:{"name":"nginx"}"#)
                .is_some(),
            "{binary}: containers are owned by name: {fields}"
        );
        // Defaults are filled in, and owned by nobody.
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"], "TCP",
            "{binary}"
        );

        // Applying the same configuration again changes nothing.
        let rv = live["metadata"]["resourceVersion"].clone();
        let out = ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "-f", "-"],
            Some(DEPLOYMENT),
        ));
        assert!(out.contains("serverside-applied"), "{out}");
        let again = json(&server, binary, &["get", "deployment", "web"]);
        assert_eq!(
            again["metadata"]["resourceVersion"], rv,
            "{binary}: a no-op apply writes nothing"
        );

        // Dropping the label, the sidecar and the port removes them from the object.
        let smaller = DEPLOYMENT
            .replace("    team: gpu\n", "")
            .replace("      - name: sidecar\n        image: busybox:1.36\n", "")
            .replace("        ports:\n        - containerPort: 80\n", "")
            .replace("replicas: 2", "replicas: 3");
        ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "-f", "-"],
            Some(&smaller),
        ));
        let live = json(&server, binary, &["get", "deployment", "web"]);
        assert_eq!(live["metadata"]["labels"], serde_json::json!({"app": "web"}), "{binary}");
        let containers = live["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{binary}: {containers:?}");
        assert!(containers[0].get("ports").is_none(), "{binary}: {containers:?}");
        assert_eq!(live["spec"]["replicas"], 3);
        assert_eq!(live["metadata"]["generation"], 2, "{binary}: the spec changed once");
    }
}

#[test]
fn conflicts_name_the_other_manager_and_force_takes_the_field_over() {
    for binary in BINARIES {
        let server = TestServer::start("");
        ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "-f", "-"],
            Some(DEPLOYMENT),
        ));
        // Another manager (kubectl scale, an Update) takes spec.replicas.
        ok(server.kubectl(binary, &["scale", "deployment", "web", "--replicas=7"]));
        let err = fails(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "-f", "-"],
            Some(DEPLOYMENT),
        ));
        assert!(err.contains("Apply failed with 1 conflict"), "{binary}: {err}");
        assert!(err.contains(".spec.replicas"), "{binary}: {err}");
        assert!(err.contains("kubectl"), "{binary}: the other manager is named: {err}");
        let live = json(&server, binary, &["get", "deployment", "web"]);
        assert_eq!(live["spec"]["replicas"], 7, "{binary}: a conflict changes nothing");

        // A different field manager that agrees with the live value shares it without conflict.
        let seven = DEPLOYMENT.replace("replicas: 2", "replicas: 7");
        ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "--field-manager=ci", "-f", "-"],
            Some(&seven),
        ));

        // Force takes the field over: the scaler no longer owns it.
        ok(server.kubectl_with_input(
            binary,
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(DEPLOYMENT),
        ));
        let live = json(&server, binary, &["get", "deployment", "web"]);
        assert_eq!(live["spec"]["replicas"], 2, "{binary}");
        let owners: Vec<String> = live["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["fieldsV1"]["f:spec"].get("f:replicas").is_some())
            .map(|e| e["manager"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(owners, vec!["kubectl".to_owned()], "{binary}: {live}");
    }
}

#[test]
fn every_write_records_its_manager() {
    let server = TestServer::start("");
    let k = "kubectl.1.33";
    ok(server.kubectl(k, &["create", "configmap", "settings", "--from-literal=a=1"]));
    ok(server.kubectl(k, &["label", "configmap", "settings", "tier=gpu"]));
    let live = json(&server, k, &["get", "configmap", "settings"]);
    let entries = live["metadata"]["managedFields"].as_array().unwrap();
    let create = entries.iter().find(|e| e["manager"] == "kubectl-create").expect("creator");
    assert_eq!(create["operation"], "Update");
    assert_eq!(create["apiVersion"], "v1");
    assert!(create["fieldsV1"]["f:data"].get("f:a").is_some(), "{create}");
    let label = entries.iter().find(|e| e["manager"] == "kubectl-label").expect("labeller");
    assert!(label["fieldsV1"]["f:metadata"]["f:labels"].get("f:tier").is_some(), "{label}");
    // kubectl hides managedFields unless asked.
    let plain = ok(server.kubectl(k, &["get", "configmap", "settings", "-o", "yaml"]));
    assert!(!plain.contains("managedFields"), "{plain}");
}

#[test]
fn apply_dry_run_and_bad_apply_requests_change_nothing() {
    let server = TestServer::start("");
    let k = "kubectl.1.33";
    let out = ok(server.kubectl_with_input(
        k,
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(DEPLOYMENT),
    ));
    assert!(out.contains("serverside-applied (server dry run)"), "{out}");
    let err = fails(server.kubectl(k, &["get", "deployment", "web"]));
    assert!(err.contains("not found"), "{err}");

    // Unknown fields under Strict (kubectl's default) are refused with their path.
    let typo = DEPLOYMENT.replace("replicas: 2", "replicas: 2\n  replicaz: 3");
    let err =
        fails(server.kubectl_with_input(k, &["apply", "--server-side", "-f", "-"], Some(&typo)));
    assert!(err.contains("unknown field \"spec.replicaz\""), "{err}");
    let err = fails(server.kubectl(k, &["get", "deployment", "web"]));
    assert!(err.contains("not found"), "{err}");
}

/// A request through curl: the HTTP status and the JSON body.
fn request(
    server: &TestServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> (u16, Value) {
    let file = server.dir.path().join("apply-body");
    std::fs::write(&file, body).unwrap();
    let out = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-X", method, "-H"])
        .arg(format!("Content-Type: {content_type}"))
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(format!("{}{path}", server.url))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, code) = text.rsplit_once('\n').expect("status line");
    let value = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    (code.parse().expect("HTTP status"), value)
}

#[test]
fn apply_parameters_and_the_status_subresource() {
    let server = TestServer::start("");
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let apply = "application/apply-patch+yaml";
    let config = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},
        "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}},
        "status":{"replicas":99}}"#;

    // An apply needs a field manager.
    let (code, status) = request(&server, "PATCH", &format!("{deployments}/web"), apply, config);
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "fieldManager", "{status}");
    // Creating through apply answers 201; the status of a configuration for the main resource
    // is not applied (it has a status subresource).
    let (code, created) =
        request(&server, "PATCH", &format!("{deployments}/web?fieldManager=ci"), apply, config);
    assert_eq!(code, 201, "{created}");
    assert!(created.get("status").is_none_or(|s| s.get("replicas").is_none()), "{created}");
    // force is for apply alone; CBOR apply bodies are not understood.
    let merge = "application/merge-patch+json";
    let (code, status) =
        request(&server, "PATCH", &format!("{deployments}/web?force=true"), merge, "{}");
    assert_eq!(code, 422, "{status}");
    let (code, _) = request(
        &server,
        "PATCH",
        &format!("{deployments}/web?fieldManager=ci"),
        "application/apply-patch+cbor",
        "\u{a0}",
    );
    assert_eq!(code, 415);
    // A configuration for another object, or of another kind, is refused.
    let (code, _) =
        request(&server, "PATCH", &format!("{deployments}/other?fieldManager=ci"), apply, config);
    assert_eq!(code, 400);
    let (code, _) = request(
        &server,
        "PATCH",
        &format!("{deployments}/web?fieldManager=ci"),
        apply,
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web"}}"#,
    );
    assert_eq!(code, 400);

    // Applying status through /status: owned with the subresource named, spec untouched.
    let status_config = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"status":{"replicas":1}}"#;
    let (code, updated) = request(
        &server,
        "PATCH",
        &format!("{deployments}/web/status?fieldManager=controller"),
        apply,
        status_config,
    );
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["status"]["replicas"], 1, "{updated}");
    assert_eq!(updated["spec"]["replicas"], 1, "{updated}");
    let entries = updated["metadata"]["managedFields"].as_array().unwrap();
    let controller = entries.iter().find(|e| e["manager"] == "controller").expect("controller");
    assert_eq!(controller["subresource"], "status", "{controller}");
    assert_eq!(controller["fieldsV1"], serde_json::json!({"f:status": {"f:replicas": {}}}));
    assert_eq!(updated["metadata"]["generation"], 1, "a status apply leaves the generation");
}
