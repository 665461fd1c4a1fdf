//! `manifests/` and `carrel serve`: what an admin installs on a real cluster.
//!
//! The overlays render with `kubectl kustomize`; every rendered object is accepted by
//! `kubectl apply --dry-run=server` against the embedded host (the Tenant CRD, whose group the
//! embedded host serves itself, is checked in a tenant under another group: structural, and
//! its CEL rules refusing what the host refuses). Then `carrel serve` runs as a process of its
//! own with the arguments the manifests give it, against a host (`carrel up --no-tenants`) it
//! reaches only by a kubeconfig holding a token of the service account the manifests bind to
//! their ClusterRole, and the README's GPU pod walkthrough runs through it; killed with SIGKILL
//! and started again, it serves its tenant with all its data.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use carrel_e2e::{fails, kubectl_path, ok};
use common::pod_view::PodView;
use common::{eventually, host_pod_field, Up, CARREL};
use serde_json::Value;

/// The repository's `manifests/`.
fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests")
}

/// The overlays an admin picks from.
const OVERLAYS: [&str; 2] = ["default", "gpu-operator"];

/// `kubectl kustomize` of an overlay, as JSON objects.
fn render(overlay: &str) -> Vec<Value> {
    let dir = manifests().join("overlays").join(overlay);
    let out = Command::new(kubectl_path("kubectl.1.33"))
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("run kubectl kustomize");
    let text = ok(out);
    text.split("\n---\n")
        .map(|document| serde_yaml::from_str::<Value>(document).expect("a rendered object"))
        .filter(|v| !v.is_null())
        .collect()
}

fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind_of(o) == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// Write `objects` as one YAML stream into the test's home.
fn write_yaml(up: &Up, name: &str, objects: &[&Value]) -> String {
    let mut text = String::new();
    for object in objects {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(object).expect("yaml"));
    }
    let path = up.home.path().join(name);
    std::fs::write(&path, text).expect("write the objects");
    path.to_string_lossy().into_owned()
}

#[test]
fn every_overlay_renders_what_a_cluster_needs_and_the_host_accepts_it() {
    let generated = std::fs::read_to_string(manifests().join("base/generated/tenant-crd.yaml"))
        .expect("the generated CRD");
    let generated: Value = serde_yaml::from_str(&generated).expect("the generated CRD reads");
    for overlay in OVERLAYS {
        let objects = render(overlay);
        for (kind, name) in [
            ("Namespace", "carrel-system"),
            ("ServiceAccount", "carrel-apiserver"),
            ("ServiceAccount", "carrel-node-agent"),
            ("ClusterRole", "carrel:apiserver"),
            ("ClusterRole", "carrel:node-agent"),
            ("ClusterRoleBinding", "carrel:apiserver"),
            ("ClusterRoleBinding", "carrel:node-agent"),
            ("StatefulSet", "carrel-apiserver"),
            ("Service", "carrel-apiserver"),
            ("DaemonSet", "carrel-node-agent"),
        ] {
            named(&objects, kind, name);
        }
        // The CRD is the generated one, unchanged by any overlay.
        let crd = named(&objects, "CustomResourceDefinition", "tenants.carrel.dev");
        assert_eq!(crd, &generated, "{overlay}: the CRD is the generated one");
        // No wildcard in any rule.
        for role in objects.iter().filter(|o| kind_of(o).ends_with("Role")) {
            for rule in role["rules"].as_array().expect("rules") {
                for field in ["apiGroups", "resources", "verbs"] {
                    let values = rule[field].as_array().expect("a list");
                    assert!(!values.iter().any(|v| v == "*"), "{overlay}: `*` in {rule}");
                }
            }
        }
        // The API server runs `carrel serve`, probed on its health paths.
        let set = named(&objects, "StatefulSet", "carrel-apiserver");
        let container = &set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["args"][0], "serve", "{overlay}: {container}");
        // Tenants' DNS forwards to the node's resolver, never the host's cluster DNS.
        assert_eq!(set["spec"]["template"]["spec"]["dnsPolicy"], "Default", "{overlay}");
        // Beside the GPU Operator, tenants' GPU pods run with its RuntimeClass.
        let runtime_class = serde_json::json!("--gpu-runtime-class=nvidia");
        let args = container["args"].as_array().expect("args");
        assert_eq!(args.contains(&runtime_class), overlay == "gpu-operator", "{overlay}: {args:?}");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/livez");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        let namespace = named(&objects, "Namespace", "carrel-system");
        assert!(
            namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"].is_string(),
            "{overlay}: the namespace carries a pod security level"
        );
    }

    let data = tempfile::tempdir().expect("data dir");
    let up = Up::start_args(data.path(), &["--sim-nodes", "0"]);
    let host = up.host_kubeconfig();
    for overlay in OVERLAYS {
        let objects = render(overlay);
        // The namespace for real (a dry run creates nothing to put objects in), then the rest
        // as a dry run.
        let namespace = named(&objects, "Namespace", "carrel-system");
        let file = write_yaml(&up, "namespace.yaml", &[namespace]);
        ok(up.kubectl(&host, &["apply", "-f", &file]));
        let rest: Vec<&Value> = objects
            .iter()
            .filter(|o| !matches!(kind_of(o), "Namespace" | "CustomResourceDefinition"))
            .collect();
        let file = write_yaml(&up, &format!("{overlay}.yaml"), &rest);
        let out = ok(up.kubectl(&host, &["apply", "--dry-run=server", "-f", &file]));
        assert_eq!(out.lines().count(), rest.len(), "{overlay}: every object applied:\n{out}");
        assert!(out.lines().all(|l| l.ends_with("(server dry run)")), "{out}");
    }

    // The CRD in a tenant, under a group of its own: a structural schema, defaults and the
    // host's checks as CEL rules.
    let tenant = common::create(&up, "team-a", &["--wait"]);
    let mut crd = generated;
    crd["metadata"]["name"] = "tenants.carrel-test.dev".into();
    crd["spec"]["group"] = "carrel-test.dev".into();
    let file = write_yaml(&up, "crd.yaml", &[&crd]);
    ok(up.kubectl(&tenant, &["apply", "-f", &file]));
    ok(up
        .kubectl(&tenant, &["wait", "--for=condition=Established", "crd/tenants.carrel-test.dev"]));
    let object = |name: &str, spec: &str| {
        format!("{{\"apiVersion\": \"carrel-test.dev/v1alpha1\", \"kind\": \"Tenant\", \"metadata\": {{\"name\": \"{name}\"}}, \"spec\": {spec}}}")
    };
    let create = |name: &str, spec: &str| {
        let file = up.home.path().join(format!("{name}.json"));
        std::fs::write(&file, object(name, spec)).expect("write");
        up.kubectl(&tenant, &["create", "-f", &file.to_string_lossy()])
    };
    ok(create("team-b", r#"{"gpuQuota": {"1g.18gb": 2}, "ttl": "1h30m"}"#));
    let stored =
        ok(up.kubectl(&tenant, &["get", "tenants.carrel-test.dev", "team-b", "-o", "json"]));
    let stored: Value = serde_json::from_str(&stored).expect("json");
    assert_eq!(stored["spec"]["podSecurity"], "baseline", "defaulted: {stored}");
    for (name, spec, why) in [
        ("kube-x", "{}", "is reserved for the host and Carrel"),
        ("team-c", r#"{"ttl": "9000h"}"#, "must be a Go duration between 1s and 8760h"),
        ("team-d", r#"{"ttl": "soon"}"#, "must be a Go duration between 1s and 8760h"),
        ("team-e", r#"{"podSecurity": "privileged"}"#, "Unsupported value: \"privileged\""),
        ("team-f", r#"{"gpuQuota": {"1g.18gb": -1}}"#, "should be greater than or equal to 0"),
    ] {
        let refused = fails(create(name, spec));
        assert!(refused.contains(why), "{name} {spec}: {refused}");
    }
}

/// A `carrel serve` process, killed when dropped.
struct Serve {
    child: Child,
    /// Where it listens, as a URL with no path: tenants' endpoint.
    endpoint: String,
    /// Where tenants' DNS listens, where it serves it.
    dns: Option<std::net::SocketAddr>,
}

impl Serve {
    /// Start `carrel serve` with `args`, its log going to `log`.
    fn start(host_kubeconfig: &Path, args: &[String], log: &Path) -> Serve {
        let mut child = Command::new(CARREL)
            .arg("--host-kubeconfig")
            .arg(host_kubeconfig)
            .args(args)
            .env_remove("CARREL_HOST_KUBECONFIG")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("the log"))
            .spawn()
            .expect("start carrel serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut endpoint, mut dns) = (None, None);
        for line in lines.by_ref() {
            let line = line.expect("a line");
            if let Some(rest) = line.strip_prefix("tenants' DNS: ") {
                let addr = rest.split_whitespace().next().expect("an address");
                dns = Some(addr.parse().expect("the DNS address"));
            }
            if let Some(url) = line.strip_prefix("tenants' endpoint: ") {
                endpoint = Some(url.to_owned());
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        Serve { child, endpoint: endpoint.expect("carrel serve said where it serves"), dns }
    }

    fn kill9(mut self) {
        self.kill9_in_place();
    }

    /// SIGTERM, and wait for it to have stopped.
    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        assert!(sent.success());
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "carrel serve stops cleanly on SIGTERM: {status:?}");
    }

    /// SIGKILL, and wait for it to be gone.
    fn kill9_in_place(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The container of `kind` `name` in the rendered default overlay.
fn container(objects: &[Value], kind: &str, name: &str) -> Value {
    named(objects, kind, name)["spec"]["template"]["spec"]["containers"][0].clone()
}

/// The host pod resolves through the tenants' DNS Service (never the tenant's kube-dns address,
/// the host's own DNS on a real host), and that DNS answers a query with the names of the tenant
/// whose host pod has the address it comes from, and a query from any other address not at all.
fn tenants_dns_answers_each_tenant_pod(up: &Up, serve: &Serve, team: &Path) {
    let host = up.host_kubeconfig();
    let service_ip = ok(up.kubectl(
        &host,
        &[
            "get",
            "service",
            "carrel-dns",
            "-n",
            "carrel-system",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    ));
    let dns =
        host_pod_field(up, "team-a", "train", "{.spec.dnsPolicy} {.spec.dnsConfig.nameservers}");
    assert_eq!(dns, format!("None [\"{service_ip}\"]"));
    let status =
        ok(up.kubectl(&host, &["get", "tenant", "team-a", "-o", "jsonpath={.status.dnsEndpoint}"]));
    assert_eq!(status, format!("{service_ip}:53"));

    // A host pod of team-a's at 127.0.0.9 (a loopback address this machine can send from).
    let web = web_service(up, team);
    dns_probe(up, "team-a", "127.0.0.9");
    let dns = serve.dns.expect("carrel serve serves tenants' DNS");
    eventually("team-a's pod resolves team-a's web", Duration::from_secs(30), || {
        let out = dig_web(dns, "127.0.0.9");
        (String::from_utf8_lossy(&out.stdout).trim() == web, out)
    });
    let stranger = dig_web(dns, "127.0.0.10");
    assert!(!stranger.status.success(), "no answer for an address no tenant pod has: {stranger:?}");
    ok(up.kubectl(&host, &["delete", "pod", "dns-probe", "-n", "carrel-team-a", "--wait=false"]));
}

/// A Service `web` in the tenant of `team`: its cluster IP.
fn web_service(up: &Up, team: &Path) -> String {
    ok(up.kubectl(team, &["create", "service", "clusterip", "web", "--tcp=80"]));
    ok(up.kubectl(team, &["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]))
}

/// A host pod `dns-probe` of `tenant`'s, at address `ip` (one this machine can send from).
fn dns_probe(up: &Up, tenant: &str, ip: &str) {
    let host = up.host_kubeconfig();
    let namespace = format!("carrel-{tenant}");
    let probe = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "dns-probe", "namespace": namespace,
                     "labels": {"carrel.dev/tenant": tenant}},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "probe"}]},
    });
    let file = write_yaml(up, "probe.yaml", &[&probe]);
    ok(up.kubectl(&host, &["apply", "-f", &file]));
    let status = serde_json::json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}}).to_string();
    ok(up.kubectl(
        &host,
        &[
            "patch",
            "pod",
            "dns-probe",
            "-n",
            &namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    ));
}

/// `dig` asking `dns` for `web.default.svc.cluster.local` from address `source`.
fn dig_web(dns: std::net::SocketAddr, source: &str) -> std::process::Output {
    Command::new("dig")
        .args(["+short", "+time=1", "+tries=1", "-b", source])
        .arg(format!("@{}", dns.ip()))
        .args(["-p", &dns.port().to_string(), "web.default.svc.cluster.local", "A"])
        .output()
        .expect("dig (dnsutils) runs")
}

/// A port free on 127.0.0.1 now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("its address").port()
}

/// `container`'s arguments with `$(NAME)` replaced by its environment's values, those from
/// ConfigMaps read from the rendered `objects` and those from the pod's fields as pod
/// `carrel-apiserver-0` in `carrel-system` at 127.0.0.1 has them, as the kubelet expands them.
fn expanded(objects: &[Value], container: &Value) -> Vec<String> {
    expanded_as(objects, container, "carrel-apiserver-0")
}

/// [`expanded`], for the pod named `pod`.
fn expanded_as(objects: &[Value], container: &Value, pod: &str) -> Vec<String> {
    let mut env = Vec::new();
    for variable in container["env"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().expect("a name");
        let field = variable["valueFrom"]["fieldRef"]["fieldPath"].as_str();
        let value = match (variable["value"].as_str(), field) {
            (Some(value), _) => value.to_owned(),
            (None, Some("metadata.name")) => pod.to_owned(),
            (None, Some("metadata.namespace")) => "carrel-system".to_owned(),
            (None, Some("status.podIP")) => "127.0.0.1".to_owned(),
            (None, Some(other)) => panic!("a field this test does not know: {other}"),
            (None, None) => {
                let key = &variable["valueFrom"]["configMapKeyRef"];
                let map = key["name"].as_str().expect("a ConfigMap");
                let map = objects
                    .iter()
                    .find(|o| kind_of(o) == "ConfigMap" && o["metadata"]["name"] == map)
                    .unwrap_or_else(|| panic!("ConfigMap {map} rendered"));
                let value = &map["data"][key["key"].as_str().expect("a key")];
                value.as_str().expect("a value").to_owned()
            }
        };
        env.push((format!("$({name})"), value));
    }
    let args = container["args"].as_array().expect("args");
    args.iter()
        .map(|a| {
            let mut arg = a.as_str().expect("a string argument").to_owned();
            for (reference, value) in &env {
                arg = arg.replace(reference, value);
            }
            arg
        })
        .collect()
}

/// `args` with the value of each `--flag=value` in `values` replaced; every flag replaced must
/// be there.
fn with_values(args: &[String], values: &[(&str, String)]) -> Vec<String> {
    let mut args = args.to_vec();
    for (flag, value) in values {
        let at = args
            .iter()
            .position(|a| a.starts_with(&format!("{flag}=")))
            .unwrap_or_else(|| panic!("the manifests give {flag}: {args:?}"));
        args[at] = format!("{flag}={value}");
    }
    args
}

#[test]
fn carrel_serve_runs_a_gpu_pod_against_a_host_it_reaches_as_the_manifests_allow() {
    let data = tempfile::tempdir().expect("data dir");
    let up = Up::start_args(data.path(), &["--no-tenants", "--sim-nodes", "1"]);
    let objects = render("default");
    let kubeconfig = serve_account(&up, &objects);

    // The manifests' arguments, their variables expanded as the kubelet expands them, with
    // this machine's listener (one port for both runs, as a Service's is) and directory. The
    // endpoint is the load balancer's on a cluster; here it defaults to the listener.
    let container = container(&objects, "StatefulSet", "carrel-apiserver");
    let store = tempfile::tempdir().expect("serve's data dir");
    let args = expanded(&objects, &container);
    let port = free_port();
    let args = with_values(
        &args,
        &[
            ("--listen", format!("127.0.0.1:{port}")),
            ("--dns-listen", "127.0.0.1:0".to_owned()),
            ("--data-dir", store.path().to_string_lossy().into_owned()),
            ("--replica-address", format!("127.0.0.1:{port}")),
        ],
    );
    let args: Vec<String> = args.into_iter().filter(|a| !a.starts_with("--endpoint=")).collect();
    assert!(args.iter().all(|a| !a.contains("$(")), "every variable expanded: {args:?}");
    let log = up.home.path().join("serve.log");
    let serve = Serve::start(&kubeconfig, &args, &log);
    node_agent_runs_as_the_manifests_run_it(&up, &objects);
    walkthrough(&up, &kubeconfig, &args, &log, serve);
}

/// The service account of `carrel serve`, its ClusterRole and binding, and the Services in front
/// of it (their cluster IPs are what host pods are given), as the manifests make them, applied
/// to `up`'s host: a kubeconfig of the host with a token of that account.
fn serve_account(up: &Up, objects: &[Value]) -> PathBuf {
    let host = up.host_kubeconfig();
    let rbac: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            matches!(
                kind_of(o),
                "Namespace" | "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding"
            )
        })
        .chain([
            named(objects, "Service", "carrel-dns"),
            named(objects, "Service", "carrel-apiserver"),
        ])
        .collect();
    let file = write_yaml(up, "rbac.yaml", &rbac);
    ok(up.kubectl(&host, &["apply", "-f", &file]));
    let set = named(objects, "StatefulSet", "carrel-apiserver");
    let account = set["spec"]["template"]["spec"]["serviceAccountName"].as_str().expect("an SA");
    let token = ok(up.kubectl(&host, &["create", "token", account, "-n", "carrel-system"]));
    token_kubeconfig(up, token.trim(), "serve.kubeconfig")
}

/// The README's walkthrough through `serve`, started with `args` as the host's `kubeconfig`
/// allows, then `serve` killed and started again.
fn walkthrough(up: &Up, kubeconfig: &Path, args: &[String], log: &Path, serve: Serve) {
    let host = up.host_kubeconfig();
    let team = common::create(up, "team-a", &["--gpu", "1g.18gb=1", "--wait"]);
    let tenant =
        ok(up.kubectl(&host, &["get", "tenant", "team-a", "-o", "jsonpath={.status.endpoint}"]));
    assert!(tenant.starts_with(&serve.endpoint), "{tenant} is served by {}", serve.endpoint);
    common::apply(up, &team, "train", TRAIN);
    common::wait_running(up, &team, "train");
    let node = ok(up.kubectl(&team, &["get", "pod", "train", "-o", "jsonpath={.spec.nodeName}"]));
    assert_eq!(node, "carrel-sim-0");
    let host_pod = ok(up.kubectl(
        &host,
        &["get", "pods", "-n", "carrel-team-a", "-o", "jsonpath={.items[*].metadata.annotations}"],
    ));
    assert!(
        host_pod.contains("nvidia.com/gpu=MIG-"),
        "the host pod names its MIG device: {host_pod}"
    );
    tenants_dns_answers_each_tenant_pod(up, &serve, &team);
    // The pod's in-cluster configuration names carrel serve, which serves its token's tenant.
    // The pod's KUBERNETES_SERVICE_* name the Service carrel-apiserver's cluster IP, and so do
    // the tenant's `kubernetes` Service's endpoints; connecting to the listener stands for the
    // Service's forwarding, which this machine has no proxy for.
    let pod = PodView::of(up, "team-a", "train");
    let api_ip = ok(up.kubectl(
        &host,
        &[
            "get",
            "service",
            "carrel-apiserver",
            "-n",
            "carrel-system",
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
    ));
    assert_eq!(pod.server(), format!("https://{api_ip}:443"));
    let endpoints = ok(up.kubectl(
        &team,
        &[
            "get",
            "endpointslice",
            "kubernetes",
            "-n",
            "default",
            "-o",
            "jsonpath={.endpoints[*].addresses[*]}",
        ],
    ));
    assert_eq!(endpoints, api_ip);
    let in_cluster = pod.kubeconfig("in-cluster", &serve.endpoint, &pod.token());
    let user = ok(
        up.kubectl(&in_cluster, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
    );
    assert_eq!(user, "system:serviceaccount:default:default");
    ok(up.kubectl(
        &team,
        &[
            "create",
            "rolebinding",
            "view",
            "--clusterrole=view",
            "--serviceaccount=default:default",
        ],
    ));
    let pods = ok(up.kubectl(&in_cluster, &["get", "pods", "-o", "name"]));
    assert_eq!(pods, "pod/train\n");

    // The tenant by its TLS server name alone, at an address of the admin's choosing: the
    // listener's root, with no path.
    let root = serve.endpoint.clone();
    let by_name = ok(up.carrel(&["tenant", "kubeconfig", "team-a", "--endpoint", &root]));
    assert!(by_name.contains("tls-server-name: team-a.tenants.carrel.local"), "{by_name}");
    assert!(by_name.contains(&format!("server: {root}\n")), "{by_name}");
    let by_name_file = up.home.path().join("by-name.kubeconfig");
    std::fs::write(&by_name_file, by_name).expect("write");
    let namespaces = ok(up.kubectl(&by_name_file, &["get", "pods", "-o", "name"]));
    assert_eq!(namespaces, "pod/train\n");
    let refused = fails(up.carrel(&["tenant", "kubeconfig", "team-a", "--endpoint", "http://x"]));
    assert!(refused.contains("is not an https:// URL"), "{refused}");

    let watch = Watch::start(&team);
    ok(up.kubectl(&team, &["create", "configmap", "kept", "--from-literal=a=1"]));
    let log_text = std::fs::read_to_string(log).expect("the log");
    assert!(!log_text.to_lowercase().contains("forbidden"), "refused by the host:\n{log_text}");
    watch.wait_for("kept");

    // Killed and started again over the same volume: the tenant is served with its data, and
    // a client that watched throughout sees every change once.
    serve.kill9();
    let serve = Serve::start(kubeconfig, args, log);
    eventually("the tenant served again", Duration::from_secs(30), || {
        let out = up.kubectl(&team, &["get", "configmap", "kept", "-o", "jsonpath={.data.a}"]);
        (String::from_utf8_lossy(&out.stdout) == "1", out)
    });
    ok(up.kubectl(&team, &["create", "configmap", "after", "--from-literal=b=2"]));
    watch.wait_for("after");
    watch.assert_no_event_twice();
    ok(up.kubectl(&team, &["delete", "pod", "train", "--wait=true"]));
    eventually("the host pod gone", Duration::from_secs(30), || {
        let out = ok(up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "name"]));
        (out.is_empty(), out)
    });
    drop(serve);
}

/// One replica of the manifests' StatefulSet, as pod `carrel-apiserver-<index>`: its own port
/// and volume, every replica's kubeconfigs naming `endpoint` (the Service in front of them,
/// which here is replica 0's port).
struct Replica {
    args: Vec<String>,
    log: PathBuf,
    _store: tempfile::TempDir,
}

impl Replica {
    fn new(up: &Up, objects: &[Value], index: usize, port: u16, endpoint: u16) -> Replica {
        let container = container(objects, "StatefulSet", "carrel-apiserver");
        let store = tempfile::tempdir().expect("a replica's volume");
        let args = with_values(
            &expanded_as(objects, &container, &format!("carrel-apiserver-{index}")),
            &[
                ("--listen", format!("127.0.0.1:{port}")),
                ("--dns-listen", "127.0.0.1:0".to_owned()),
                ("--data-dir", store.path().to_string_lossy().into_owned()),
                ("--replica-address", format!("127.0.0.1:{port}")),
                ("--endpoint", format!("https://127.0.0.1:{endpoint}")),
            ],
        );
        let log = up.home.path().join(format!("replica-{index}.log"));
        Replica { args, log, _store: store }
    }

    fn start(&self, kubeconfig: &Path) -> Serve {
        Serve::start(kubeconfig, &self.args, &self.log)
    }
}

/// The replica serving tenant `name`, as its status says.
fn replica_of(up: &Up, name: &str) -> String {
    let path = ["get", "tenant", name, "-o", "jsonpath={.status.replica}"];
    ok(up.kubectl(&up.host_kubeconfig(), &path))
}

#[test]
fn tenants_spread_over_replicas_reach_theirs_through_any_and_move_with_a_watch_throughout() {
    let data = tempfile::tempdir().expect("data dir");
    let up = Up::start_args(data.path(), &["--no-tenants", "--sim-nodes", "1"]);
    let host = up.host_kubeconfig();
    let objects = render("default");
    let kubeconfig = serve_account(&up, &objects);
    let front = free_port();
    let replicas: Vec<Replica> = (0..3)
        .map(|i| Replica::new(&up, &objects, i, if i == 0 { front } else { free_port() }, front))
        .collect();
    let (r0, mut r1) = (replicas[0].start(&kubeconfig), replicas[1].start(&kubeconfig));
    eventually("both replicas' Leases", Duration::from_secs(30), || {
        let path =
            ["get", "leases", "-n", "carrel-system", "-l", "carrel.dev/replica", "-o", "name"];
        let out = ok(up.kubectl(&host, &path));
        (out.lines().count() == 2, out)
    });

    // New tenants are spread by count; each one's kubeconfig names the front door (replica 0),
    // which serves those of replica 1 by forwarding, the client's own certificate with them.
    let teams: Vec<(String, PathBuf)> = (0..4)
        .map(|i| {
            let name = format!("team-{i}");
            let kubeconfig = common::create(&up, &name, &["--wait"]);
            (name, kubeconfig)
        })
        .collect();
    let listed = ok(up.carrel(&["tenant", "list"]));
    assert!(listed.lines().next().is_some_and(|h| h.ends_with("REPLICA")), "{listed}");
    let mut placed: Vec<String> = teams.iter().map(|(name, _)| replica_of(&up, name)).collect();
    placed.sort();
    assert_eq!(
        placed,
        ["carrel-apiserver-0", "carrel-apiserver-0", "carrel-apiserver-1", "carrel-apiserver-1"]
    );
    let (away, away_config) = teams
        .iter()
        .find(|(name, _)| replica_of(&up, name) == "carrel-apiserver-1")
        .expect("a tenant of replica 1");
    for (name, team) in &teams {
        let config = std::fs::read_to_string(team).expect("the kubeconfig");
        assert!(config.contains(&format!("https://127.0.0.1:{front}/tenants/{name}")), "{config}");
        let user =
            ok(up.kubectl(team, &["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]));
        assert_eq!(user, "carrel-admin", "{name}, by certificate");
        ok(up.kubectl(team, &["create", "configmap", "first", "--from-literal=a=1"]));
    }
    // A token of the tenant (its issuer names it) reaches it through the front door too.
    let token = ok(up.kubectl(away_config, &["create", "token", "default"]));
    let path = format!(
        "https://127.0.0.1:{front}/tenants/{away}/api/v1/namespaces/default/configmaps/first"
    );
    let by_token = Command::new("curl")
        .args(["-sk", "-H", &format!("Authorization: Bearer {}", token.trim()), &path])
        .output()
        .expect("curl");
    let by_token = String::from_utf8_lossy(&by_token.stdout).into_owned();
    assert!(by_token.contains("forbidden"), "authenticated as the tenant's account: {by_token}");
    assert!(by_token.contains("system:serviceaccount:default:default"), "{by_token}");
    // A client cannot pass a certificate off as forwarded: only a replica's connection may.
    let admin: Value =
        serde_yaml::from_str(&std::fs::read_to_string(away_config).expect("read")).expect("yaml");
    let cert = admin["users"][0]["user"]["client-certificate-data"].as_str().expect("a cert");
    let pem = String::from_utf8(base64_decode(cert)).expect("pem");
    let der: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let forged = Command::new("curl")
        .args(["-sk", "-H", &format!("X-Carrel-Forwarded-Certificates: {der}"), &path])
        .output()
        .expect("curl");
    let forged = String::from_utf8_lossy(&forged.stdout).into_owned();
    assert!(forged.contains("\"code\":401"), "{forged}");

    // A pod's streams pass through the front door: exec upgrades its connection.
    common::apply(&up, away_config, "shell", SHELL);
    common::wait_running(&up, away_config, "shell");
    let said = ok(up.kubectl(away_config, &["exec", "shell", "--", "echo", "through"]));
    assert_eq!(said, "through\n");

    // Its pods' DNS queries reach whichever replica the DNS Service picks: replica 0 relays
    // them to replica 1, which answers with the tenant's names.
    let web = web_service(&up, away_config);
    dns_probe(&up, away, "127.0.0.11");
    for (replica, serve) in [("0", &r0), ("1", &r1)] {
        let dns = serve.dns.expect("tenants' DNS");
        eventually(
            &format!("{away}'s pod resolves web at replica {replica}"),
            Duration::from_secs(30),
            || {
                let out = dig_web(dns, "127.0.0.11");
                (String::from_utf8_lossy(&out.stdout).trim() == web, out)
            },
        );
    }

    // Moved to replica 0 while a client watches through the front door: nothing lost, nothing
    // twice, and what was written before is there.
    let watch = Watch::start(away_config);
    watch.wait_for("first");
    let moved = ok(up.carrel(&["tenant", "move", away, "--to", "carrel-apiserver-0"]));
    assert_eq!(moved, format!("tenant/{away} moved to replica carrel-apiserver-0\n"));
    assert_eq!(replica_of(&up, away), "carrel-apiserver-0");
    ok(up.kubectl(away_config, &["create", "configmap", "after-move", "--from-literal=b=2"]));
    watch.wait_for("after-move");
    watch.assert_no_event_twice();
    let kept =
        ok(up.kubectl(away_config, &["get", "configmap", "first", "-o", "jsonpath={.data.a}"]));
    assert_eq!(kept, "1");

    // Replica 1 killed with SIGKILL and started again over its volume: its tenants are served
    // again, with their data, and a client watching one through the front door throughout
    // misses nothing and sees nothing twice.
    let (other, other_config) = teams
        .iter()
        .find(|(name, _)| replica_of(&up, name) == "carrel-apiserver-1")
        .expect("replica 1 still serves a tenant");
    let watch = Watch::start(other_config);
    watch.wait_for("first");
    r1.kill9_in_place();
    r1 = replicas[1].start(&kubeconfig);
    eventually("replica 1's tenant served again", Duration::from_secs(60), || {
        let out =
            up.kubectl(other_config, &["get", "configmap", "first", "-o", "jsonpath={.data.a}"]);
        (String::from_utf8_lossy(&out.stdout) == "1", out)
    });
    ok(up.kubectl(other_config, &["create", "configmap", "after-restart", "--from-literal=c=3"]));
    watch.wait_for("after-restart");
    watch.assert_no_event_twice();
    assert_eq!(replica_of(&up, other), "carrel-apiserver-1");

    // A replica added takes the next tenant: it has the fewest.
    let r2 = replicas[2].start(&kubeconfig);
    eventually("the third replica's Lease", Duration::from_secs(30), || {
        let path =
            ["get", "leases", "-n", "carrel-system", "-l", "carrel.dev/replica", "-o", "name"];
        let out = ok(up.kubectl(&host, &path));
        (out.lines().count() == 3, out)
    });
    let newest = common::create(&up, "team-new", &["--wait"]);
    assert_eq!(replica_of(&up, "team-new"), "carrel-apiserver-2");
    ok(up.kubectl(&newest, &["get", "namespaces"]));

    // A replica stopped as Kubernetes stops it (SIGTERM) gives its Leases up at once.
    let mut r2 = r2;
    r2.terminate();
    let holder = |lease: &str| {
        let path =
            ["get", "lease", lease, "-n", "carrel-system", "-o", "jsonpath={.spec.holderIdentity}"];
        ok(up.kubectl(&host, &path))
    };
    assert_eq!(holder("carrel-replica-carrel-apiserver-2"), "");
    assert_eq!(holder("carrel-replica-carrel-apiserver-0"), "carrel-apiserver-0");
    for replica in &replicas {
        let text = std::fs::read_to_string(&replica.log).expect("the log");
        assert!(!text.to_lowercase().contains("forbidden"), "refused by the host:\n{text}");
    }
    drop((r0, r1));
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).expect("base64")
}

const SHELL: &str = "apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  containers:
  - name: main
    image: busybox
    command: [sleep, infinity]
";

/// A kube-rs watcher of a tenant's ConfigMaps in `default`, run on a thread of its own, with
/// every event it delivered: `(applied or listed again, name, resourceVersion)`.
struct Watch {
    seen: std::sync::Arc<std::sync::Mutex<Vec<(bool, String, String)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Watch {
    fn start(kubeconfig: &Path) -> Watch {
        use futures::StreamExt;
        use kube::runtime::watcher::{self, Event};
        use kube::runtime::WatchStreamExt;
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kubeconfig = kubeconfig.to_owned();
        let record = seen.clone();
        runtime.spawn(async move {
            let client = common::kube_client(&kubeconfig).await;
            let maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(client, "default");
            let mut events =
                watcher::watcher(maps, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let (applied, map) = match event {
                    Ok(Event::Apply(map)) => (true, map),
                    Ok(Event::InitApply(map)) => (false, map),
                    _ => continue,
                };
                let name = map.metadata.name.unwrap_or_default();
                let version = map.metadata.resource_version.unwrap_or_default();
                record.lock().expect("the record").push((applied, name, version));
            }
        });
        Watch { seen, _runtime: runtime }
    }

    /// Wait until ConfigMap `name` was seen.
    fn wait_for(&self, name: &str) {
        eventually(&format!("configmap {name} watched"), Duration::from_secs(30), || {
            let seen = self.seen.lock().expect("the record").clone();
            (seen.iter().any(|(_, n, _)| n == name), seen)
        });
    }

    /// No change was delivered twice as a change (a relist after a 410 lists what exists again,
    /// as Kubernetes clients expect).
    fn assert_no_event_twice(&self) {
        let seen = self.seen.lock().expect("the record").clone();
        let mut applied: Vec<_> = seen.iter().filter(|(a, _, _)| *a).collect();
        let count = applied.len();
        applied.sort();
        applied.dedup();
        assert_eq!(applied.len(), count, "a change delivered twice: {seen:?}");
    }
}

/// `carrel-node-agent` as the manifests' DaemonSet runs it, with the simulated GPUs in place of
/// NVML and this machine's directories, as the manifests' ServiceAccount: it publishes a node's
/// MIG inventory on the host and serves its metrics, refused nothing.
fn node_agent_runs_as_the_manifests_run_it(up: &Up, objects: &[Value]) {
    let binary = Path::new(CARREL).with_file_name("carrel-node-agent");
    assert!(
        binary.exists(),
        "{} is built with the workspace: run `cargo test --workspace`",
        binary.display()
    );
    let host = up.host_kubeconfig();
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": "gpu-extra"}});
    let file = write_yaml(up, "node.yaml", &[&node]);
    ok(up.kubectl(&host, &["apply", "-f", &file]));
    let set = named(objects, "DaemonSet", "carrel-node-agent");
    let account = set["spec"]["template"]["spec"]["serviceAccountName"].as_str().expect("an SA");
    let token = ok(up.kubectl(&host, &["create", "token", account, "-n", "carrel-system"]));
    let kubeconfig = token_kubeconfig(up, token.trim(), "node-agent.kubeconfig");
    let mut container = container(objects, "DaemonSet", "carrel-node-agent");
    container["env"] = serde_json::json!([{"name": "NODE_NAME", "value": "gpu-extra"}]);
    let cdi = up.home.path().join("cdi");
    let args = with_values(
        &expanded(objects, &container),
        &[
            ("--backend", "sim".to_owned()),
            ("--cdi-dir", cdi.to_string_lossy().into_owned()),
            ("--metrics-listen", "127.0.0.1:0".to_owned()),
        ],
    );
    let log = up.home.path().join("node-agent.log");
    let mut agent = Command::new(&binary)
        .args(&args)
        .args(["--sim-gpus", "h100-80gbx1:mig=1g.10gb*7", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("NO_COLOR", "1")
        .stderr(std::fs::File::create(&log).expect("the log"))
        .spawn()
        .expect("start carrel-node-agent");
    eventually("gpu-extra's MIG inventory published", Duration::from_secs(30), || {
        let out = up.kubectl(
            &host,
            &[
                "get",
                "node",
                "gpu-extra",
                "-o",
                "jsonpath={.status.allocatable.nvidia\\.com/mig-1g\\.10gb}",
            ],
        );
        (String::from_utf8_lossy(&out.stdout) == "7", out)
    });
    let text = std::fs::read_to_string(&log).expect("the log");
    let metrics = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("metrics="))
        .unwrap_or_else(|| panic!("the agent says where its metrics are:\n{text}"));
    let out = Command::new("curl").args(["-sf", &format!("http://{metrics}/metrics")]).output();
    let body = ok(out.expect("run curl"));
    assert!(body.contains("gpu-extra"), "metrics of the node: {body}");
    let _ = agent.kill();
    let _ = agent.wait();
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(!text.to_lowercase().contains("forbidden"), "refused by the host:\n{text}");
    ok(up.kubectl(&host, &["delete", "node", "gpu-extra"]));
}

const TRAIN: &str = "apiVersion: v1
kind: Pod
metadata: {name: train}
spec:
  containers:
  - name: main
    image: nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04
    resources:
      limits: {nvidia.com/mig-1g.18gb: 1}
";

/// A kubeconfig of the host, written as `file`, that authenticates with `token` only.
fn token_kubeconfig(up: &Up, token: &str, file: &str) -> PathBuf {
    let admin = std::fs::read_to_string(up.host_kubeconfig()).expect("the host kubeconfig");
    let admin: Value = serde_yaml::from_str(&admin).expect("yaml");
    let cluster = &admin["clusters"][0]["cluster"];
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "host", "cluster": cluster}],
        "users": [{"name": "carrel-apiserver", "user": {"token": token}}],
        "contexts": [{"name": "host", "context": {"cluster": "host", "user": "carrel-apiserver"}}],
        "current-context": "host",
    });
    let path = up.home.path().join(file);
    std::fs::write(&path, serde_yaml::to_string(&kubeconfig).expect("yaml")).expect("write");
    path
}
