//! Webhooks in tenants, end to end: `carrel up` with two tenants, admission webhook
//! configurations and a definition converted by a webhook applied with real kubectl, and a
//! webhook server of this test (TLS with its own CA on a loopback port) that labels, refuses,
//! warns and converts, reached by URL and by a Service of the tenant. One tenant's webhooks never
//! see another's requests.

mod common;

use std::time::Duration;

use base64::Engine;
use carrel_e2e::webhooks::{convert_shirts, shirts_definition, WebhookServer};
use carrel_e2e::{fails, ok};
use common::{apply, create, eventually, kubectls, Up};
use serde_json::{json, Value};

/// The webhook server's answers: `/label` adds the label `mutated: "yes"`, `/deny` refuses
/// objects whose name starts with `bad`, `/warn` allows with a warning, `/slow` allows after
/// 1.5 s; a ConversionReview converts shirts.
fn answer(path: &str, review: &Value) -> Value {
    let request = &review["request"];
    if review["kind"] == "ConversionReview" {
        return convert_shirts(request);
    }
    let mut response = json!({"uid": request["uid"], "allowed": true});
    match path {
        "/label" => {
            let patch = match request.pointer("/object/metadata/labels") {
                Some(_) => {
                    json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
                }
                None => {
                    json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
                }
            };
            response["patchType"] = json!("JSONPatch");
            response["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
        }
        "/deny" => {
            let name = request["name"].as_str().unwrap_or_default();
            if name.starts_with("bad") {
                response["allowed"] = json!(false);
                response["status"] = json!({"message": format!("{name} is a bad name")});
            }
        }
        "/warn" => response["warnings"] = json!(["hooks saw this"]),
        "/slow" => std::thread::sleep(Duration::from_millis(1500)),
        _ => {}
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

fn serve() -> Hooks {
    WebhookServer::start(answer)
}

type Hooks = WebhookServer;

/// The configurations of tenant A: a mutating webhook on configmaps and pods by URL, a
/// refusing one by URL and a warning one by the Service `default/hooks`.
fn manifests(hooks: &Hooks) -> String {
    let (port, ca) = (hooks.port, hooks.ca_bundle());
    format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: label
webhooks:
- name: label.hooks.test
  clientConfig:
    url: https://127.0.0.1:{port}/label
    caBundle: {ca}
  rules:
  - operations: [CREATE]
    apiGroups: [\"\"]
    apiVersions: [v1]
    resources: [configmaps, pods]
  sideEffects: None
  admissionReviewVersions: [v1]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: checks
webhooks:
- name: deny.hooks.test
  clientConfig:
    url: https://127.0.0.1:{port}/deny
    caBundle: {ca}
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: [\"\"]
    apiVersions: [v1]
    resources: [configmaps]
  sideEffects: None
  admissionReviewVersions: [v1]
- name: warn.hooks.test
  clientConfig:
    service:
      namespace: default
      name: hooks
      port: {port}
      path: /warn
    caBundle: {ca}
  rules:
  - operations: [CREATE]
    apiGroups: [\"\"]
    apiVersions: [v1]
    resources: [configmaps]
  sideEffects: NoneOnDryRun
  admissionReviewVersions: [v1, v1beta1]
---
apiVersion: v1
kind: Service
metadata:
  name: hooks
  namespace: default
spec:
  type: ExternalName
  externalName: localhost
"
    )
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn webhooks_label_refuse_and_warn_through_every_kubectl_and_only_in_their_tenant() {
    let hooks = serve();
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &[]);
    let a = create(&up, "team-a", &[]);
    let b = create(&up, "team-b", &[]);
    apply(&up, &a, "hooks", &manifests(&hooks));
    let listed = ok(up.kubectl(&a, &["get", "validatingwebhookconfigurations"]));
    assert!(listed.starts_with("NAME") && listed.contains("checks   2 "), "{listed}");

    for (i, (version, kubectl)) in kubectls().iter().enumerate() {
        let name = format!("cm-{i}");
        let out = up.kubectl_at(kubectl, &a, &["create", "configmap", &name, "--from-literal=k=v"]);
        assert!(out.status.success(), "kubectl {version}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("Warning: hooks saw this"),
            "kubectl {version}: {}",
            stderr(&out)
        );
        let label = ok(up.kubectl_at(
            kubectl,
            &a,
            &["get", "configmap", &name, "-o", "jsonpath={.metadata.labels.mutated}"],
        ));
        assert_eq!(label, "yes", "kubectl {version}: patched by the mutating webhook");

        let bad = format!("bad-{i}");
        let out = up.kubectl_at(kubectl, &a, &["create", "configmap", &bad, "--from-literal=k=v"]);
        assert_eq!(out.status.code(), Some(1), "kubectl {version}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim(),
            format!(
                "error: failed to create configmap: configmaps \"{bad}\" is forbidden: admission \
                 webhook \"deny.hooks.test\" denied the request: {bad} is a bad name"
            ),
            "kubectl {version}"
        );
    }
    // What the webhooks were sent: the request as kube-apiserver sends it.
    let review = hooks.last("/deny");
    let request = &review["request"];
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(request["object"]["metadata"]["labels"]["mutated"], "yes", "mutated first");
    assert!(request["userInfo"]["username"].as_str().is_some_and(|u| !u.is_empty()), "{request}");

    // A dry run: called, as a webhook without side effects on dry runs, and nothing stored.
    let out = ok(up.kubectl(
        &a,
        &["create", "configmap", "dry", "--from-literal=k=v", "--dry-run=server", "-o", "name"],
    ));
    assert_eq!(out.trim(), "configmap/dry");
    assert_eq!(hooks.last("/warn")["request"]["dryRun"], true);
    fails(up.kubectl(&a, &["get", "configmap", "dry"]));

    // Pods made by a Deployment's controllers pass through the mutating webhook too.
    ok(up.kubectl(&a, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]));
    eventually("the Deployment's pods, labelled", Duration::from_secs(30), || {
        let out = up.kubectl(
            &a,
            &[
                "get",
                "pods",
                "-l",
                "app=web,mutated=yes",
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
        );
        let names = String::from_utf8_lossy(&out.stdout).into_owned();
        (names.split_whitespace().count() == 2, names)
    });

    // The other tenant has no webhooks: nothing is called, labelled or refused.
    let before = hooks.count("/deny") + hooks.count("/label") + hooks.count("/warn");
    let out = up.kubectl(&b, &["create", "configmap", "bad-b", "--from-literal=k=v"]);
    assert!(out.status.success() && !stderr(&out).contains("Warning"), "{}", stderr(&out));
    let label =
        ok(up.kubectl(&b, &["get", "configmap", "bad-b", "-o", "jsonpath={.metadata.labels}"]));
    assert_eq!(label, "");
    assert_eq!(hooks.count("/deny") + hooks.count("/label") + hooks.count("/warn"), before);

    // A webhook that cannot be reached fails closed by default, with kube-apiserver's words;
    // its configuration can still be removed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let unreachable = format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: unreachable
webhooks:
- name: gone.hooks.test
  clientConfig:
    url: https://127.0.0.1:{closed}/
    caBundle: {}
  rules:
  - operations: [CREATE]
    apiGroups: [\"\"]
    apiVersions: [v1]
    resources: [secrets]
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 2
",
        hooks.ca_bundle()
    );
    apply(&up, &a, "unreachable", &unreachable);
    let out = fails(up.kubectl(&a, &["create", "secret", "generic", "s", "--from-literal=k=v"]));
    assert!(
        out.contains(&format!(
            "Internal error occurred: failed calling webhook \"gone.hooks.test\": failed to call \
             webhook: Post \"https://127.0.0.1:{closed}/?timeout=2s\": dial tcp"
        )),
        "{out}"
    );
    ok(up.kubectl(&a, &["delete", "validatingwebhookconfiguration", "unreachable"]));
    ok(up.kubectl(&a, &["create", "secret", "generic", "s", "--from-literal=k=v"]));

    // One that answers after its timeout: fails closed, then, ignored, admits.
    let slow = |policy: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: slow
webhooks:
- name: slow.hooks.test
  clientConfig:
    url: https://127.0.0.1:{}/slow
    caBundle: {}
  rules:
  - operations: [CREATE]
    apiGroups: [\"\"]
    apiVersions: [v1]
    resources: [serviceaccounts]
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 1
  failurePolicy: {policy}
",
            hooks.port,
            hooks.ca_bundle()
        )
    };
    apply(&up, &a, "slow", &slow("Fail"));
    let out = fails(up.kubectl(&a, &["create", "serviceaccount", "late"]));
    assert!(
        out.contains(&format!(
            "failed calling webhook \"slow.hooks.test\": failed to call webhook: Post \
             \"https://127.0.0.1:{}/slow?timeout=1s\": context deadline exceeded",
            hooks.port
        )),
        "{out}"
    );
    apply(&up, &a, "slow", &slow("Ignore"));
    ok(up.kubectl(&a, &["create", "serviceaccount", "late"]));
    assert_eq!(hooks.count("/slow"), 2, "called both times");

    // An aggregated API's registration, as metrics servers and adapters ship it: stored, and
    // shown as not forwarded to its Service.
    apply(
        &up,
        &a,
        "apiservice",
        "apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.custom.metrics.k8s.io
spec:
  group: custom.metrics.k8s.io
  version: v1beta1
  service: {namespace: monitoring, name: adapter}
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
",
    );
    let listed = ok(up.kubectl(&a, &["get", "apiservices"]));
    let line = listed.lines().find(|l| l.starts_with("v1beta1.custom.metrics.k8s.io")).unwrap();
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[1..4], ["monitoring/adapter", "False", "(NotProxied)"], "{listed}");
    // A request for it is refused as kube-aggregator refuses an unavailable API, saying why.
    let raw = ["get", "--raw", "/apis/custom.metrics.k8s.io/v1beta1/namespaces/a/pods/*/load"];
    let out = fails(up.kubectl(&a, &raw));
    assert!(
        out.contains("ServiceUnavailable")
            && out.contains("served by Service monitoring/adapter, and this server does not proxy"),
        "{out}"
    );

    // A configuration kube-apiserver refuses is refused.
    let file = up.home.path().join("bad.yaml");
    std::fs::write(
        &file,
        unreachable
            .replace("gone.hooks.test", "gone")
            .replace("sideEffects: None", "sideEffects: Some"),
    )
    .unwrap();
    let out = fails(up.kubectl(&a, &["create", "-f", &file.to_string_lossy()]));
    assert!(
        out.contains("The ValidatingWebhookConfiguration \"unreachable\" is invalid")
            && out.contains("webhooks[0].name: Invalid value: \"gone\": should be a domain with at least three segments separated by dots")
            && out.contains("webhooks[0].sideEffects: Unsupported value: \"Some\""),
        "{out}"
    );
    up.stop();
}

/// Shirts in two versions, converted by the test's webhook through the Service `default/hooks`
/// (a definition in JSON, which is YAML too, and the Service).
fn shirts(hooks: &Hooks) -> String {
    let by_service = json!({
        "service": {"namespace": "default", "name": "hooks", "port": hooks.port, "path": "/convert"},
        "caBundle": hooks.ca_bundle(),
    });
    format!(
        "{}
---
apiVersion: v1
kind: Service
metadata:
  name: hooks
  namespace: default
spec:
  type: ExternalName
  externalName: localhost
",
        shirts_definition(by_service)
    )
}

#[test]
fn a_webhook_converts_custom_resources_for_kubectl_and_the_python_client() {
    let hooks = serve();
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &[]);
    let a = create(&up, "team-a", &[]);
    apply(&up, &a, "shirts", &shirts(&hooks));
    eventually("shirts served", Duration::from_secs(10), || {
        let out = up.kubectl(&a, &["get", "shirts.v2.wear.carrel.dev"]);
        (out.status.success(), stderr(&out))
    });
    apply(
        &up,
        &a,
        "red",
        "apiVersion: wear.carrel.dev/v1\nkind: Shirt\nmetadata: {name: red, namespace: default}\nspec: {color: red}\n",
    );
    apply(
        &up,
        &a,
        "blue",
        "apiVersion: wear.carrel.dev/v2\nkind: Shirt\nmetadata: {name: blue, namespace: default}\nspec: {colour: blue}\n",
    );
    for (version, kubectl) in kubectls() {
        for (api_version, field) in [("v1", "color"), ("v2", "colour")] {
            let resource = format!("shirts.{api_version}.wear.carrel.dev");
            for name in ["red", "blue"] {
                let jsonpath = format!("jsonpath={{.apiVersion}} {{.spec.{field}}}");
                let got =
                    ok(up.kubectl_at(&kubectl, &a, &["get", &resource, name, "-o", &jsonpath]));
                assert_eq!(
                    got,
                    format!("wear.carrel.dev/{api_version} {name}"),
                    "kubectl {version}"
                );
            }
        }
    }
    assert!(hooks.count("/convert") > 0);
    common::python("conversion.py", &a);
    up.stop();
}
