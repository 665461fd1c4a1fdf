//! CustomResourceDefinitions with real kubectl: a definition is served at once (discovery, short
//! names, categories, printer columns, `explain`), objects are read and written in any served
//! version, structural schemas prune, default and validate (CEL rules included), the status and
//! scale subresources work, strategic merge patch is refused and server-side apply merges lists
//! by their schema's keys, and deleting a definition deletes its objects.

use carrel_e2e::{fails, ok, TestServer};
use serde_json::Value;

const KUBECTL: &str = "kubectl";

fn manifest(name: &str) -> String {
    let path = format!("{}/crds/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn apply(server: &TestServer, yaml: &str) -> String {
    ok(server.kubectl_with_input(KUBECTL, &["apply", "-f", "-"], Some(yaml)))
}

fn json(server: &TestServer, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(server.kubectl(KUBECTL, &all))).expect("kubectl prints JSON")
}

/// A server with the training-job definition installed.
fn with_training_jobs() -> TestServer {
    let server = TestServer::start("");
    apply(&server, &manifest("trainingjobs.yaml"));
    server
}

const JOB: &str = r#"
apiVersion: ml.carrel.dev/v1
kind: TrainingJob
metadata:
  name: llama
spec:
  image: registry.example/llama-train:1
  workers: 2
  gpuProfile: 2g.35gb
  ports:
  - name: rendezvous
    port: 29500
"#;

#[test]
fn a_definition_is_established_and_served_at_once() {
    let server = with_training_jobs();
    let crd = json(&server, &["get", "crd", "trainingjobs.ml.carrel.dev"]);
    let conditions = crd["status"]["conditions"].as_array().expect("conditions");
    for wanted in ["NamesAccepted", "Established"] {
        let condition = conditions.iter().find(|c| c["type"] == wanted).expect(wanted);
        assert_eq!(condition["status"], "True", "{wanted}: {condition}");
    }
    assert_eq!(crd["status"]["acceptedNames"]["shortNames"], serde_json::json!(["tj"]));
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));

    let resources = ok(server.kubectl(KUBECTL, &["api-resources", "--api-group=ml.carrel.dev"]));
    assert!(resources.contains("trainingjobs") && resources.contains("tj"), "{resources}");
    let aggregated = ok(server.kubectl(KUBECTL, &["get", "--raw", "/apis"]));
    assert!(aggregated.contains("ml.carrel.dev"), "{aggregated}");

    apply(&server, JOB);
    // The short name, the category, and `all` find it, with the printer columns.
    let by_short = ok(server.kubectl(KUBECTL, &["get", "tj"]));
    let header: Vec<&str> = by_short.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "WORKERS", "PROFILE", "PHASE", "AGE"], "{by_short}");
    let row: Vec<&str> = by_short.lines().nth(1).expect("row").split_whitespace().collect();
    // No phase yet: kubectl leaves the cell blank.
    assert_eq!(&row[..3], ["llama", "2", "2g.35gb"], "{by_short}");
    assert_eq!(row.len(), 4, "{by_short}");
    assert!(row[3].ends_with('s'), "an age, not a timestamp: {by_short}");
    let wide = ok(server.kubectl(KUBECTL, &["get", "tj", "-o", "wide"]));
    assert!(wide.lines().next().unwrap_or_default().contains("IMAGE"), "{wide}");
    assert!(wide.contains("registry.example/llama-train:1"), "{wide}");
    // A category reaches it with the kinds of other categories' members beside it.
    ok(server.kubectl(KUBECTL, &["create", "configmap", "not-in-a-category"]));
    let ml = ok(server.kubectl(KUBECTL, &["get", "ml", "-o", "name"]));
    assert_eq!(ml, "trainingjob.ml.carrel.dev/llama\n", "kubectl get ml");
    // `all` also holds Services, and `default` has the `kubernetes` one, as on any cluster.
    let all = ok(server.kubectl(KUBECTL, &["get", "all", "-o", "name"]));
    assert_eq!(all, "service/kubernetes\ntrainingjob.ml.carrel.dev/llama\n", "kubectl get all");
}

#[test]
fn kubectl_explain_reads_the_schema() {
    let server = with_training_jobs();
    let explained = ok(server.kubectl(KUBECTL, &["explain", "trainingjobs.spec"]));
    assert!(explained.contains("What to train, and on how many workers."), "{explained}");
    assert!(explained.contains("image") && explained.contains("-required-"), "{explained}");
    let field = ok(server.kubectl(KUBECTL, &["explain", "tj.spec.workers"]));
    assert!(field.contains("How many workers run."), "{field}");
}

#[test]
fn objects_are_read_and_written_in_any_served_version() {
    let server = with_training_jobs();
    apply(&server, JOB);
    // Read in the deprecated version: apiVersion rewritten, with kube-apiserver's warning.
    let old = server
        .kubectl(KUBECTL, &["get", "trainingjobs.v1alpha1.ml.carrel.dev", "llama", "-o", "json"]);
    let stderr = String::from_utf8_lossy(&old.stderr).into_owned();
    let object: Value = serde_json::from_str(&ok(old)).expect("json");
    assert_eq!(object["apiVersion"], "ml.carrel.dev/v1alpha1");
    assert_eq!(object["spec"]["workers"], 2);
    assert!(
        stderr.contains(
            "ml.carrel.dev/v1alpha1 TrainingJob is deprecated; use ml.carrel.dev/v1 TrainingJob"
        ),
        "{stderr}"
    );
    // Written in v1beta1, read back in v1.
    apply(
        &server,
        "apiVersion: ml.carrel.dev/v1beta1\nkind: TrainingJob\nmetadata: {name: beta}\n\
         spec: {image: x, workers: 3}\n",
    );
    let beta = json(&server, &["get", "trainingjobs.v1.ml.carrel.dev", "beta"]);
    assert_eq!(
        (beta["apiVersion"].as_str(), beta["spec"]["workers"].as_i64()),
        (Some("ml.carrel.dev/v1"), Some(3))
    );

    // A new storage version: old objects stay readable, and storedVersions keeps both.
    let moved = manifest("trainingjobs.yaml")
        .replace("    storage: true\n", "    storage: false\n")
        .replacen(
            "  - name: v1beta1\n    served: true\n    storage: false",
            "  - name: v1beta1\n    served: true\n    storage: true",
            1,
        );
    apply(&server, &moved);
    let crd = json(&server, &["get", "crd", "trainingjobs.ml.carrel.dev"]);
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1", "v1beta1"]));
    let llama = json(&server, &["get", "trainingjobs.v1beta1.ml.carrel.dev", "llama"]);
    assert_eq!(llama["spec"]["image"], "registry.example/llama-train:1");
    apply(&server, &JOB.replace("name: llama", "name: after-move"));
    let listed = json(&server, &["get", "trainingjobs.v1.ml.carrel.dev"]);
    let names: Vec<&str> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["after-move", "beta", "llama"]);
    assert!(listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .all(|i| i["apiVersion"] == "ml.carrel.dev/v1"));
}

#[test]
fn schemas_prune_default_and_validate_with_field_paths() {
    let server = with_training_jobs();
    // Unknown fields are dropped with a warning, and refused under --validate=strict.
    let out = server.kubectl_with_input(
        KUBECTL,
        &["create", "--validate=warn", "-f", "-"],
        Some("apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: lax}\nspec: {image: x, colour: red}\n"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    assert!(stderr.contains("unknown field \"spec.colour\""), "{stderr}");
    let lax = json(&server, &["get", "tj", "lax"]);
    assert!(lax["spec"].get("colour").is_none(), "{lax}");
    // Defaults, at depth and in list items.
    assert_eq!(
        (lax["spec"]["workers"].as_i64(), lax["spec"]["gpuProfile"].as_str()),
        (Some(1), Some("1g.18gb"))
    );
    apply(&server, JOB);
    let job = json(&server, &["get", "tj", "llama"]);
    assert_eq!(job["spec"]["ports"][0]["protocol"], "TCP");
    let strict = fails(server.kubectl_with_input(
        KUBECTL,
        &["create", "--validate=strict", "-f", "-"],
        Some("apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: strict}\nspec: {image: x, colour: red}\n"),
    ));
    assert!(strict.contains("unknown field \"spec.colour\""), "{strict}");

    // Invalid values: 422 naming each field.
    let bad = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some(
            "apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: bad}\nspec:\n  workers: 100\n  gpuProfile: 9g.999gb\n  checkpointBucket: gs://nope\n  ports: [{name: a, port: 70000}]\n  env: {A: 1}\n",
        ),
    ));
    for expected in [
        "is invalid",
        "spec.image: Required value",
        "spec.workers: Invalid value: 100",
        "spec.gpuProfile: Unsupported value: \"9g.999gb\"",
        "spec.checkpointBucket: Invalid value: \"gs://nope\"",
        "spec.ports[0].port: Invalid value: 70000",
        "spec.env.A: Invalid value: \"integer\"",
    ] {
        assert!(bad.contains(expected), "missing {expected:?} in {bad}");
    }
    let wrong_type = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some("apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: typed}\nspec: {image: x, workers: many}\n"),
    ));
    assert!(wrong_type.contains("spec.workers: Invalid value: \"string\""), "{wrong_type}");
    // Nothing invalid was stored.
    let names = ok(server.kubectl(KUBECTL, &["get", "tj", "-o", "name"]));
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        ["trainingjob.ml.carrel.dev/lax", "trainingjob.ml.carrel.dev/llama"]
    );
}

#[test]
fn cel_rules_are_evaluated_with_their_messages() {
    let server = TestServer::start("");
    apply(&server, &manifest("inferenceservices.yaml"));
    let service =
        "apiVersion: serving.carrel.dev/v1\nkind: InferenceService\nmetadata: {name: chat}\n\
                   spec: {model: llama-70b, minReplicas: 1, maxReplicas: 4, gpus: 2}\n";
    apply(&server, service);
    let bounds = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some(&service.replace("minReplicas: 1", "minReplicas: 5")),
    ));
    assert!(bounds.contains("minReplicas must not exceed maxReplicas"), "{bounds}");
    let gpus = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some(&service.replace("gpus: 2", "gpus: 9")),
    ));
    assert!(
        gpus.contains("spec.gpus") && gpus.contains("between 0 and 8 GPUs per replica"),
        "{gpus}"
    );
    // A transition rule: the model may not change once set.
    let model = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some(&service.replace("llama-70b", "mistral-7b")),
    ));
    assert!(model.contains("spec.model") && model.contains("model is immutable"), "{model}");
    let stored = json(&server, &["get", "isvc", "chat"]);
    assert_eq!(
        (stored["spec"]["model"].as_str(), stored["spec"]["minReplicas"].as_i64()),
        (Some("llama-70b"), Some(1))
    );
}

#[test]
fn status_and_scale_subresources() {
    let server = with_training_jobs();
    apply(&server, JOB);
    let before = json(&server, &["get", "tj", "llama"]);
    assert_eq!(before["metadata"]["generation"], 1);
    // Status written through /status; the spec is untouched and generation does not move.
    ok(server.kubectl(
        KUBECTL,
        &[
            "patch",
            "tj",
            "llama",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running","workers":2},"spec":{"workers":9}}"#,
        ],
    ));
    let after = json(&server, &["get", "tj", "llama"]);
    assert_eq!(after["status"]["phase"], "Running");
    assert_eq!(
        (after["spec"]["workers"].as_i64(), after["metadata"]["generation"].as_i64()),
        (Some(2), Some(1))
    );
    // A spec update through the object leaves the status alone and bumps generation.
    ok(server.kubectl(
        KUBECTL,
        &[
            "patch",
            "tj",
            "llama",
            "--type=merge",
            "-p",
            r#"{"spec":{"workers":3},"status":{"phase":"Lost"}}"#,
        ],
    ));
    let updated = json(&server, &["get", "tj", "llama"]);
    assert_eq!(updated["status"]["phase"], "Running");
    assert_eq!(
        (updated["spec"]["workers"].as_i64(), updated["metadata"]["generation"].as_i64()),
        (Some(3), Some(2))
    );
    // kubectl scale goes through /scale, at the definition's paths.
    ok(server.kubectl(KUBECTL, &["scale", "tj", "llama", "--replicas=6"]));
    let scale: Value = serde_json::from_str(&ok(server.kubectl(
        KUBECTL,
        &["get", "--raw", "/apis/ml.carrel.dev/v1/namespaces/default/trainingjobs/llama/scale"],
    )))
    .expect("json");
    assert_eq!(
        (scale["spec"]["replicas"].as_i64(), scale["status"]["replicas"].as_i64()),
        (Some(6), Some(2))
    );
    let printed = ok(server.kubectl(KUBECTL, &["get", "tj", "llama", "--no-headers"]));
    assert!(
        printed.split_whitespace().nth(1) == Some("6") && printed.contains("Running"),
        "{printed}"
    );
}

#[test]
fn strategic_merge_is_refused_and_server_side_apply_merges_by_list_keys() {
    let server = with_training_jobs();
    apply(&server, JOB);
    let refused = fails(
        server.kubectl(KUBECTL, &["patch", "tj", "llama", "-p", r#"{"spec":{"workers":4}}"#]),
    );
    assert!(
        refused.contains("application/strategic-merge-patch+json is not supported"),
        "{refused}"
    );

    let mine = "apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: shared}\n\
                spec:\n  image: x\n  ports:\n  - {name: metrics, port: 9090}\n";
    let theirs = "apiVersion: ml.carrel.dev/v1\nkind: TrainingJob\nmetadata: {name: shared}\n\
                  spec:\n  ports:\n  - {name: rendezvous, port: 29500}\n  - {name: metrics, protocol: UDP, port: 9091}\n";
    ok(server.kubectl_with_input(
        KUBECTL,
        &["apply", "--server-side", "--field-manager=mine", "-f", "-"],
        Some(mine),
    ));
    ok(server.kubectl_with_input(
        KUBECTL,
        &["apply", "--server-side", "--field-manager=theirs", "-f", "-"],
        Some(theirs),
    ));
    let shared = json(&server, &["get", "tj", "shared"]);
    let ports: Vec<(String, String)> = shared["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().into(),
                p["protocol"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("metrics".into(), "TCP".into()),
            ("rendezvous".into(), "TCP".into()),
            ("metrics".into(), "UDP".into())
        ],
        "items merge by name and protocol: {shared}"
    );
    // A conflicting apply names the other manager.
    let conflict = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "--server-side", "--field-manager=theirs", "-f", "-"],
        Some(&theirs.replace("port: 29500", "port: 1").replace("spec:\n", "spec:\n  image: y\n")),
    ));
    assert!(conflict.contains("conflict") && conflict.contains("mine"), "{conflict}");
}

#[test]
fn deleting_a_definition_deletes_its_objects() {
    let server = with_training_jobs();
    apply(&server, JOB);
    apply(&server, &JOB.replace("name: llama", "name: second"));
    // A watch open across the deletion sees the objects go, then ends (long before its timeout).
    let watch = std::process::Command::new(carrel_e2e::kubectl_path(KUBECTL))
        .args([
            "get",
            "--raw",
            "/apis/ml.carrel.dev/v1/namespaces/default/trainingjobs?watch=1&timeoutSeconds=120",
        ])
        .env("KUBECONFIG", server.kubeconfig())
        .env("HOME", server.dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("watch");
    std::thread::sleep(std::time::Duration::from_millis(500));
    ok(server.kubectl(KUBECTL, &["delete", "crd", "trainingjobs.ml.carrel.dev"]));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done_tx.send(watch.wait_with_output());
    });
    let output = done_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the watch ended with its type")
        .expect("watch output");
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect();
    let deleted: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "DELETED")
        .filter_map(|e| e["object"]["metadata"]["name"].as_str())
        .collect();
    assert_eq!(deleted.len(), 2, "{events:?}");
    let crds = ok(server.kubectl(KUBECTL, &["get", "crd", "-o", "name"]));
    assert!(crds.trim().is_empty(), "{crds}");
    let gone =
        fails(server.kubectl(KUBECTL, &["get", "--raw", "/apis/ml.carrel.dev/v1/trainingjobs"]));
    assert!(gone.contains("NotFound") || gone.contains("not found"), "{gone}");
    // Defined again, the type starts empty.
    apply(&server, &manifest("trainingjobs.yaml"));
    let listed = json(&server, &["get", "tj"]);
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "{listed}");
}

#[test]
fn invalid_definitions_are_refused_with_reasons() {
    let server = TestServer::start("");
    let refused = fails(server.kubectl_with_input(
        KUBECTL,
        &["apply", "-f", "-"],
        Some(&manifest("nonstructural.yaml")),
    ));
    assert!(
        refused.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value"
        ),
        "{refused}"
    );
    assert!(refused.contains("additionalProperties"), "{refused}");
    let misnamed = manifest("trainingjobs.yaml")
        .replace("name: trainingjobs.ml.carrel.dev", "name: jobs.ml.carrel.dev");
    let refused = fails(server.kubectl_with_input(KUBECTL, &["apply", "-f", "-"], Some(&misnamed)));
    assert!(refused.contains("metadata.name: Invalid value: \"jobs.ml.carrel.dev\": must be spec.names.plural+\".\"+spec.group"), "{refused}");
    let two_storage =
        manifest("trainingjobs.yaml").replace("    storage: false\n", "    storage: true\n");
    let refused =
        fails(server.kubectl_with_input(KUBECTL, &["apply", "-f", "-"], Some(&two_storage)));
    assert!(
        refused.contains("must have exactly one version marked as storage version"),
        "{refused}"
    );
    let crds = ok(server.kubectl(KUBECTL, &["get", "crd", "-o", "name"]));
    assert!(crds.trim().is_empty(), "nothing stored: {crds}");
}

#[test]
fn watches_show_objects_in_the_version_watched() {
    let server = with_training_jobs();
    apply(&server, JOB);
    let path =
        "/apis/ml.carrel.dev/v1alpha1/namespaces/default/trainingjobs?watch=1&timeoutSeconds=1";
    let events = ok(server.kubectl(KUBECTL, &["get", "--raw", path]));
    let first: Value =
        serde_json::from_str(events.lines().next().expect("an event")).expect("json");
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["apiVersion"], "ml.carrel.dev/v1alpha1");
    assert_eq!(first["object"]["metadata"]["name"], "llama");
}

#[test]
fn selectable_fields_select_with_kubectl_get_field_selector() {
    let server = TestServer::start("");
    let crd = manifest("shirts.yaml");
    let (definition, shirts) = crd.split_once("\n---\n").expect("a definition, then shirts");
    apply(&server, definition);
    apply(&server, shirts);
    let names = |selector: &str| {
        let out =
            ok(server
                .kubectl(KUBECTL, &["get", "shirts", "--field-selector", selector, "-o", "name"]));
        out.lines().map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(
        names("spec.color=blue"),
        ["shirt.stable.example.com/example1", "shirt.stable.example.com/example2"]
    );
    assert_eq!(names("spec.color=blue,spec.size=M"), ["shirt.stable.example.com/example2"]);
    assert_eq!(names("spec.size!=M"), ["shirt.stable.example.com/example1"]);
    let err =
        fails(server.kubectl(KUBECTL, &["get", "shirts", "--field-selector", "spec.price=1"]));
    assert!(err.contains("field label not supported: spec.price"), "{err}");
}
