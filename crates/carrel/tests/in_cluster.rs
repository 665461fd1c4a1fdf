//! A tenant's workloads reach their own tenant's API with in-cluster configuration, as
//! client-go's `rest.InClusterConfig()`, the Python client's `load_incluster_config()` and
//! kube-rs's `Config::incluster()` build it: from the host pod's `KUBERNETES_SERVICE_HOST` and
//! `KUBERNETES_SERVICE_PORT` and its mounted `token` and `ca.crt`, with no path and no server
//! name of their own. The token alone picks the tenant, and only its own.
//!
//! kube-rs reads the mounted files from their fixed path, so its client runs as a pod's process
//! would: this test binary again, in a mount namespace of its own (`unshare`) with the pod's
//! files at `/var/run/secrets/kubernetes.io/serviceaccount`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use base64::Engine;
use carrel_e2e::{fails, kubectl_path, ok};
use common::pod_view::PodView;
use common::{create, eventually, Up};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

impl PodView {
    /// Run this test binary's [`pod_process`] as a process of the pod: in a mount namespace
    /// where its files are where a kubelet mounts them, with its environment.
    fn run(&self, task: &str, arg: &str) -> std::process::Child {
        let mount = "mount -t tmpfs tmpfs /run && mkdir -p \"$MOUNTED\" && cp \"$POD_DIR\"/token \
                     \"$POD_DIR\"/ca.crt \"$POD_DIR\"/namespace \"$MOUNTED\" && exec \"$@\"";
        Command::new("unshare")
            .args(["--mount", "sh", "-c", mount, "sh"])
            .arg(std::env::current_exe().expect("this test binary"))
            .args(["pod_process", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env("MOUNTED", "/var/run/secrets/kubernetes.io/serviceaccount")
            .env("POD_DIR", &self.dir)
            .env("KUBERNETES_SERVICE_HOST", &self.host)
            .env("KUBERNETES_SERVICE_PORT", &self.port)
            .env("CARREL_POD_TASK", task)
            .env("CARREL_POD_ARG", arg)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare (util-linux) runs the pod's process")
    }
}

/// What [`PodView::run`]'s process printed after it exited (its own lines, `pod: …`), or a
/// panic with all it said if it failed or ran past `within`.
fn finished(mut child: std::process::Child, within: Duration) -> Vec<String> {
    let deadline = std::time::Instant::now() + within;
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let Output { status, stdout, stderr } = child.wait_with_output().expect("its output");
    let stdout = String::from_utf8_lossy(&stdout);
    assert!(
        status.success(),
        "the pod's process: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    // (libtest's `test pod_process ... ` may begin the first line.)
    stdout.lines().filter_map(|l| l.split_once("pod: ")).map(|(_, said)| said.to_owned()).collect()
}

/// Tenant `tenant` with pod `operator`, running as service account `operator`, which may
/// `view` the namespace and reconcile Widgets.
fn tenant_with_operator(up: &Up, tenant: &str) -> PathBuf {
    let kubeconfig = create(up, tenant, &[]);
    let kubectl = |args: &[&str]| ok(up.kubectl(&kubeconfig, args));
    let manifest = up.home.path().join(format!("{tenant}-operator.yaml"));
    std::fs::write(&manifest, OPERATOR).unwrap();
    kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let overrides = r#"{"spec":{"serviceAccountName":"operator"}}"#;
    kubectl(&["run", "operator", "--image=x", "--overrides", overrides]);
    eventually("the operator Running", WAIT, || {
        let phase = kubectl(&["get", "pod", "operator", "-o", "jsonpath={.status.phase}"]);
        (phase == "Running", phase)
    });
    kubeconfig
}

/// The operator's service account, what it may do, and the kind it reconciles.
const OPERATOR: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: operator}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: operator-views}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{kind: ServiceAccount, name: operator, namespace: default}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: widget-operator}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch]}
- {apiGroups: [example.com], resources: [widgets/status], verbs: [patch, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: widget-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: widget-operator}
subjects: [{kind: ServiceAccount, name: operator, namespace: default}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {observedSize: {type: integer}}}
"#;

#[test]
fn in_cluster_clients_reach_their_own_tenant_and_only_it() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let a = tenant_with_operator(&up, "team-a");
    let b = create(&up, "team-b", &[]);
    ok(up.kubectl(&b, &["run", "billing", "--image=x"]));
    let binding = ["create", "rolebinding", "views", "--clusterrole=view"];
    ok(up.kubectl(&b, &[&binding[..], &["--serviceaccount=default:default"]].concat()));

    // The host pod names the listener as its Kubernetes API, as a kubelet names the cluster's,
    // and mounts the tenant's token and the CA that verifies the listener.
    let pod = PodView::of(&up, "team-a", "operator");
    let listener = up.listener();
    assert_eq!(
        (pod.host.as_str(), pod.port.as_str()),
        (&*listener.ip().to_string(), &*listener.port().to_string())
    );

    // kubectl, as client-go's in-cluster config: every version.
    let inside = pod.kubeconfig("in-cluster", &pod.server(), &pod.token());
    // By the Service's name, as kube-rs's `Config::incluster_dns()` connects: the serving
    // certificate names `kubernetes.default.svc` as kube-apiserver's does.
    let by_name = pod.kubeconfig("by-name", &pod.server(), &pod.token());
    let text = std::fs::read_to_string(&by_name)
        .unwrap()
        .replace("    server: ", "    tls-server-name: kubernetes.default.svc\n    server: ");
    std::fs::write(&by_name, text).unwrap();
    assert_eq!(ok(up.kubectl(&by_name, &["get", "pods", "-o", "name"])), "pod/operator\n");
    let mut clients = vec![("1.27", kubectl_path("kubectl.1.27"))];
    clients.extend(common::kubectls());
    for (version, kubectl) in &clients {
        let pods = ok(up.kubectl_at(kubectl, &inside, &["get", "pods", "-o", "name"]));
        assert_eq!(pods, "pod/operator\n", "kubectl {version}: the tenant's pods, in its names");
        // (`can-i` exits 1 when the answer is no.)
        let may = up.kubectl_at(kubectl, &inside, &["auth", "can-i", "list", "secrets"]);
        let said = String::from_utf8_lossy(&may.stdout);
        assert_eq!(said.trim(), "no", "kubectl {version}: as the service account, no more");
    }

    // The Python client's `load_incluster_config()`, pointed at the pod's files and variables.
    let python = std::env::var("CARREL_PYTHON").expect("CARREL_PYTHON (scripts/test.sh sets it)");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/in_cluster.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&pod.dir)
        .arg("operator")
        .env("KUBERNETES_SERVICE_HOST", &pod.host)
        .env("KUBERNETES_SERVICE_PORT", &pod.port)
        .output()
        .expect("run python");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // kube-rs's `Config::incluster()`, in a process that sees what the pod sees.
    let listed = finished(pod.run("pods", ""), WAIT);
    assert_eq!(listed, ["operator"], "kube-rs: the tenant's pods");

    // Another tenant's token, at the same address: that tenant, and only it.
    let b_token = ok(up.kubectl(&b, &["create", "token", "default", "--duration=10m"]));
    let other = pod.kubeconfig("other-tenant", &pod.server(), b_token.trim());
    let pods = ok(up.kubectl(&other, &["get", "pods", "-n", "default", "-o", "name"]));
    assert_eq!(pods, "pod/billing\n");

    // A token claiming another tenant than the one that signed it: 401 there, whichever it is.
    let token = pod.token();
    let parts: Vec<&str> = token.trim().split('.').collect();
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut claims: Value = serde_json::from_slice(&engine.decode(parts[1]).unwrap()).unwrap();
    let issuer = claims["iss"].as_str().unwrap().replace("team-a", "team-b");
    claims["iss"] = issuer.into();
    let claims = engine.encode(serde_json::to_vec(&claims).unwrap());
    let forged = format!("{}.{claims}.{}", parts[0], parts[2]);
    let forged = pod.kubeconfig("forged", &pod.server(), &forged);
    let err = fails(up.kubectl(&forged, &["get", "pods"]));
    assert!(err.contains("Unauthorized") || err.contains("provide credentials"), "{err}");
    // Its own token on another tenant's path, and a host token on its tenant's: 401.
    let elsewhere =
        pod.kubeconfig("elsewhere", &format!("{}/tenants/team-b", pod.server()), &token);
    let err = fails(up.kubectl(&elsewhere, &["get", "pods"]));
    assert!(err.contains("Unauthorized") || err.contains("provide credentials"), "{err}");
    let host_token =
        ok(up.kubectl(&up.host_kubeconfig(), &["create", "token", "default", "-n", "default"]));
    let host_token = pod.kubeconfig(
        "host-token",
        &format!("{}/tenants/team-a", pod.server()),
        host_token.trim(),
    );
    let err = fails(up.kubectl(&host_token, &["get", "pods"]));
    assert!(err.contains("Unauthorized") || err.contains("provide credentials"), "{err}");

    // The tenant's `kubernetes` Service and its endpoints name the same address.
    let port = listener.port();
    for (kind, jsonpath, wanted) in [
        ("endpointslice", "{.endpoints[0].addresses[0]}:{.ports[0].port}", listener.to_string()),
        (
            "endpoints",
            "{.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}",
            listener.to_string(),
        ),
        ("service", "{.spec.ports[0].targetPort}", port.to_string()),
    ] {
        let jsonpath = format!("jsonpath={jsonpath}");
        let got = ok(up.kubectl(&a, &["get", kind, "kubernetes", "-o", &jsonpath]));
        assert_eq!(got, wanted, "{kind}");
    }
    up.stop();
}

#[test]
fn an_operator_reconciles_its_tenant_with_in_cluster_configuration() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let a = tenant_with_operator(&up, "team-a");
    let pod = PodView::of(&up, "team-a", "operator");

    // The operator watches Widgets from its pod and writes each one's status.
    let operator = pod.run("operator", "big");
    let widget = up.home.path().join("widget.yaml");
    std::fs::write(
        &widget,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: big}\nspec: {size: 7}\n",
    )
    .unwrap();
    ok(up.kubectl(&a, &["apply", "-f", widget.to_str().unwrap()]));
    let said = finished(operator, WAIT);
    assert_eq!(said, ["reconciled big"]);
    let observed =
        ok(up.kubectl(&a, &["get", "widget", "big", "-o", "jsonpath={.status.observedSize}"]));
    assert_eq!(observed, "7");
    up.stop();
}

/// A pod's process, run by [`PodView::run`] only: a kube-rs client with `Config::incluster()`.
/// `CARREL_POD_TASK=pods` prints the pods of its namespace; `operator` watches Widgets, writes
/// `status.observedSize` of each, and ends once it has reconciled the one `CARREL_POD_ARG`
/// names. Lines for the test begin `pod: `.
#[test]
#[ignore = "a pod's process: run inside its mount namespace by the tests above"]
#[allow(clippy::print_stdout)] // What it prints is what the test reads of it.
fn pod_process() {
    use futures::TryStreamExt;
    use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
    use kube::runtime::{watcher, WatchStreamExt};

    let task = std::env::var("CARREL_POD_TASK").expect("run by the in-cluster tests only");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config = kube::Config::incluster().expect("in-cluster configuration");
        let client = kube::Client::try_from(config).expect("a client");
        match task.as_str() {
            "pods" => {
                let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::default_namespaced(client);
                for pod in pods.list(&Default::default()).await.expect("list pods") {
                    println!("pod: {}", pod.metadata.name.unwrap_or_default());
                }
            }
            "operator" => {
                let wanted = std::env::var("CARREL_POD_ARG").unwrap();
                let resource = ApiResource {
                    group: "example.com".into(),
                    version: "v1".into(),
                    api_version: "example.com/v1".into(),
                    kind: "Widget".into(),
                    plural: "widgets".into(),
                };
                let widgets: Api<DynamicObject> = Api::default_namespaced_with(client, &resource);
                let events = watcher(widgets.clone(), watcher::Config::default()).applied_objects();
                futures::pin_mut!(events);
                while let Some(widget) = events.try_next().await.expect("the watch") {
                    let name = widget.metadata.name.clone().unwrap_or_default();
                    let size = widget.data["spec"]["size"].clone();
                    if widget.data["status"]["observedSize"] != size {
                        let status = serde_json::json!({"status": {"observedSize": size}});
                        let patch = Patch::Merge(status);
                        widgets
                            .patch_status(&name, &PatchParams::default(), &patch)
                            .await
                            .expect("the status");
                        println!("pod: reconciled {name}");
                    }
                    if name == wanted {
                        break;
                    }
                }
            }
            other => panic!("no task {other}"),
        }
    });
}
