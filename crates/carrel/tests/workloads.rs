//! A tenant of `carrel up` behaves as a cluster with kube-controller-manager does, through each
//! kubectl users run (1.31, 1.33 and the current one, each against a tenant of its own):
//! Deployments roll out, over and back and scale, StatefulSets roll out in order and scale down
//! from the top, DaemonSets run on every node, Jobs complete or fail, deletes cascade,
//! ResourceQuotas bound what is created and report what is used, and `kubectl drain` evicts
//! within PodDisruptionBudgets; autoscalers are made and read in both their versions.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, kubectls, Up};

/// One kubectl binary, against a tenant of its own.
struct Kubectl<'a> {
    up: &'a Up,
    version: &'static str,
    binary: PathBuf,
    kubeconfig: PathBuf,
    /// The tenant's name.
    tenant: String,
}

impl<'a> Kubectl<'a> {
    /// Each kubectl users run, with a new tenant each.
    fn each(up: &'a Up) -> Vec<Kubectl<'a>> {
        Kubectl::each_with(up, &[])
    }

    /// Each kubectl users run, with a new tenant each, created with `extra` (`--gpu 1g.18gb=2`).
    fn each_with(up: &'a Up, extra: &[&str]) -> Vec<Kubectl<'a>> {
        kubectls()
            .into_iter()
            .enumerate()
            .map(|(i, (version, binary))| {
                let tenant = format!("team-{i}");
                let kubeconfig = create(up, &tenant, extra);
                Kubectl { up, version, binary, kubeconfig, tenant }
            })
            .collect()
    }

    /// Standard error of a command that must fail.
    fn refused(&self, args: &[&str]) -> String {
        let output = self.output(args);
        assert!(!output.status.success(), "kubectl {} {args:?} succeeded", self.version);
        String::from_utf8_lossy(&output.stderr).trim_end().to_owned()
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        self.up.kubectl_at(&self.binary, &self.kubeconfig, args)
    }

    /// Standard output of a command that must succeed.
    fn run(&self, args: &[&str]) -> String {
        let output = self.output(args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "kubectl {} {args:?}: {stderr}", self.version);
        ok(output)
    }

    /// Apply `yaml` in the tenant.
    fn apply(&self, yaml: &str) {
        let file = self.up.home.path().join(format!("applied-{}.yaml", self.version));
        std::fs::write(&file, yaml).expect("write manifest");
        self.run(&["apply", "-f", &file.to_string_lossy()]);
    }

    /// ConfigMap `name` in `default`, owned by ConfigMap `owner` (whose uid is read first).
    fn owned_configmap(&self, name: &str, owner: &str) {
        let uid = self.run(&["get", "configmap", owner, "-o", "jsonpath={.metadata.uid}"]);
        self.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  \
             - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}, blockOwnerDeletion: true}}\n"
        ));
    }

    fn exists(&self, name: &str) -> bool {
        self.output(&["get", "configmap", name]).status.success()
    }

    /// Standard output of a command that must succeed, run as the host's admin in the tenant's
    /// host namespace.
    fn on_host(&self, args: &[&str]) -> String {
        let namespace = format!("carrel-{}", self.tenant);
        let mut all = vec!["-n", namespace.as_str()];
        all.extend_from_slice(args);
        ok(self.up.kubectl(&self.up.host_kubeconfig(), &all))
    }
}

#[test]
fn deletes_cascade_in_the_background_in_the_foreground_and_not_when_orphaning() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    for k in &Kubectl::each(&up) {
        cascades(k);
    }
    up.stop();
}

fn cascades(k: &Kubectl<'_>) {
    let within = Duration::from_secs(30);
    for owner in ["background", "foreground", "orphan"] {
        k.run(&["create", "configmap", owner]);
        k.owned_configmap(&format!("of-{owner}"), owner);
    }

    k.run(&["delete", "configmap", "background"]);
    eventually("the background owner's dependent collected", within, || {
        let there = k.exists("of-background");
        (!there, there)
    });

    // kubectl waits for the owner itself to be gone: by then its dependent is.
    k.run(&["delete", "configmap", "foreground", "--cascade=foreground"]);
    assert!(!k.exists("foreground"));
    assert!(!k.exists("of-foreground"), "a foreground delete ends after its dependents");

    k.run(&["delete", "configmap", "orphan", "--cascade=orphan"]);
    assert!(!k.exists("orphan"));
    let refs =
        k.run(&["get", "configmap", "of-orphan", "-o", "jsonpath={.metadata.ownerReferences}"]);
    assert_eq!(refs, "", "the orphan keeps no reference to its deleted owner");
}

#[test]
fn a_deployment_rolls_out_rolls_over_undoes_and_scales_through_kubectl() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    for k in &Kubectl::each(&up) {
        rolls_out(k);
    }
    up.stop();
}

fn rolls_out(k: &Kubectl<'_>) {
    k.run(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let ready = k.run(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.status.readyReplicas}/{.status.availableReplicas}",
    ]);
    assert_eq!(ready, "2/2");
    let first_rs = k.run(&["get", "rs", "-l", "app=web", "-o", "name"]);
    assert_eq!(first_rs.lines().count(), 1, "{first_rs}");

    // A new image rolls the pods over to a second ReplicaSet.
    k.run(&["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let images = k.run(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    ]);
    assert_eq!(images.split_whitespace().filter(|i| *i == "nginx:1.28").count(), 2, "{images}");
    let history = k.run(&["rollout", "history", "deployment/web"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    // Undo goes back to the first template, and its ReplicaSet.
    k.run(&["rollout", "undo", "deployment/web"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let image = k.run(&[
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "nginx:1.27");
    let all_rs = k.run(&["get", "rs", "-l", "app=web", "-o", "name"]);
    assert_eq!(all_rs.lines().count(), 2, "undo reuses the first ReplicaSet: {all_rs}");

    k.run(&["scale", "deployment/web", "--replicas=3"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    eventually("three pods", Duration::from_secs(60), || {
        let n = k
            .run(&[
                "get",
                "pods",
                "-l",
                "app=web",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ])
            .lines()
            .count();
        (n == 3, n)
    });

    // Deleting it takes its ReplicaSets and pods with it.
    k.run(&["delete", "deployment", "web"]);
    eventually("its pods gone", Duration::from_secs(60), || {
        let left = k.run(&["get", "pods,rs", "-l", "app=web", "-o", "name"]);
        (left.is_empty(), left)
    });
}

const STATEFULSET: &str = "apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: \"nginx:1.27\"}]
";

/// A StatefulSet with a volume claim template: each pod mounts a claim of its own, which the
/// syncer carries to the host as a host claim of the tenant's, bound by the host's provisioner.
const CLAIMED: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: postgres}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
";

#[test]
fn a_statefulset_rolls_out_in_order_scales_down_from_the_top_and_undoes_through_kubectl() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    for k in &Kubectl::each(&up) {
        stateful(k);
    }
    up.stop();
}

/// The names of the pods labelled `app=<app>`, sorted, each with whether it is terminating.
fn stateful_pods(k: &Kubectl<'_>, app: &str) -> Vec<(String, bool)> {
    let out = k.run(&[
        "get",
        "pods",
        "-l",
        &format!("app={app}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ]);
    let mut pods: Vec<(String, bool)> = out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, deleting)| (name.to_owned(), !deleting.is_empty()))
        .collect();
    pods.sort();
    pods
}

fn stateful(k: &Kubectl<'_>) {
    let within = Duration::from_secs(60);
    k.apply(STATEFULSET);
    k.run(&["rollout", "status", "statefulset/web", "--timeout=120s"]);
    let pods: Vec<String> = stateful_pods(k, "web").into_iter().map(|(name, _)| name).collect();
    assert_eq!(pods, ["web-0", "web-1", "web-2"]);
    let identity = k.run(&[
        "get",
        "pod",
        "web-1",
        "-o",
        "jsonpath={.spec.hostname}.{.spec.subdomain} {.metadata.labels.apps\\.kubernetes\\.io/pod-index}",
    ]);
    assert_eq!(identity, "web-1.web 1");
    let ready = k.run(&["get", "statefulset", "web", "-o", "jsonpath={.status.readyReplicas}"]);
    assert_eq!(ready, "3");

    // A new image replaces the pods, highest ordinal first; undo brings the first back.
    k.run(&["set", "image", "statefulset/web", "nginx=nginx:1.28"]);
    k.run(&["rollout", "status", "statefulset/web", "--timeout=120s"]);
    let images = |k: &Kubectl<'_>| {
        k.run(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ])
    };
    assert_eq!(images(k), "nginx:1.28 nginx:1.28 nginx:1.28");
    let history = k.run(&["rollout", "history", "statefulset/web"]);
    let revisions: Vec<&str> =
        history.lines().skip(2).filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    k.run(&["rollout", "undo", "statefulset/web"]);
    k.run(&["rollout", "status", "statefulset/web", "--timeout=120s"]);
    eventually("the first image back on every pod", within, || {
        let images = images(k);
        (images == "nginx:1.27 nginx:1.27 nginx:1.27", images)
    });
    let revisions = k.run(&["get", "controllerrevisions", "-l", "app=web", "-o", "name"]);
    assert_eq!(revisions.lines().count(), 2, "undo reuses the first revision: {revisions}");

    // Scaled to one, web-2 goes before web-1 does.
    k.run(&["scale", "statefulset/web", "--replicas=1"]);
    eventually("web-2, then web-1, gone", within, || {
        let pods = stateful_pods(k, "web");
        let has = |name: &str| pods.iter().find(|(n, _)| n == name).map(|(_, deleting)| *deleting);
        if has("web-2").is_some() {
            assert_eq!(has("web-1"), Some(false), "web-1 went before web-2: {pods:?}");
        }
        (pods == [("web-0".to_owned(), false)], pods)
    });
    k.run(&["rollout", "status", "statefulset/web", "--timeout=60s"]);

    // With a volume claim template: each pod gets a claim of its own, bound on the host, and
    // the set rolls out; the claims are retained when the set goes.
    k.apply(CLAIMED);
    k.run(&["rollout", "status", "statefulset/db", "--timeout=120s"]);
    let pods: Vec<String> = stateful_pods(k, "db").into_iter().map(|(name, _)| name).collect();
    assert_eq!(pods, ["db-0", "db-1", "db-2"]);
    let phases = || {
        k.run(&[
            "get",
            "pvc",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        ])
    };
    eventually("every claim bound", within, || {
        let seen = phases();
        (seen.trim() == "data-db-0=Bound data-db-1=Bound data-db-2=Bound", seen)
    });
    // As kind or k3s show it: the volume named for the claim, the default class, its size.
    let uid = k.run(&["get", "pvc", "data-db-0", "-o", "jsonpath={.metadata.uid}"]);
    let row = k.run(&["get", "pvc", "data-db-0", "--no-headers"]);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[..6],
        ["data-db-0", "Bound", &format!("pvc-{uid}"), "1Gi", "RWO", "standard"],
        "{row}"
    );
    let classes = k.run(&["get", "storageclass", "--no-headers"]);
    assert!(classes.starts_with("standard (default)"), "{classes}");
    let mounted = k.run(&[
        "get",
        "pod",
        "db-1",
        "-o",
        "jsonpath={.spec.volumes[0].persistentVolumeClaim.claimName}",
    ]);
    assert_eq!(mounted, "data-db-1");
    // On the host: the tenant's three host claims in its host namespace, bound.
    let host_claims = || {
        k.on_host(&[
            "get",
            "pvc",
            "-l",
            &format!("carrel.dev/tenant={}", k.tenant),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}",
        ])
    };
    assert_eq!(
        host_claims().trim(),
        "data-db-0-x-default=Bound data-db-1-x-default=Bound data-db-2-x-default=Bound"
    );
    let host_mount = k.on_host(&[
        "get",
        "pod",
        "db-1-x-default",
        "-o",
        "jsonpath={.spec.volumes[0].persistentVolumeClaim.claimName}",
    ]);
    assert_eq!(host_mount, "data-db-1-x-default");

    k.run(&["delete", "statefulset", "db", "web"]);
    eventually("the sets' pods gone", within, || {
        let left = [stateful_pods(k, "web"), stateful_pods(k, "db")].concat();
        (left.is_empty(), left)
    });
    let claims = k.run(&["get", "pvc", "-o", "name"]);
    assert_eq!(claims.lines().count(), 3, "retained: {claims}");
    // A claim deleted after its pod leaves the host too; the others stay.
    k.run(&["delete", "pvc", "data-db-2"]);
    eventually("its host claim gone", within, || {
        let seen = host_claims();
        (seen.trim() == "data-db-0-x-default=Bound data-db-1-x-default=Bound", seen)
    });
}

#[test]
fn drain_evicts_a_deployment_within_its_disruption_budget() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "2"]);
    for k in &Kubectl::each(&up) {
        drains(k);
    }
    up.stop();
}

/// The taint a cordoned node carries.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The names of the nodes `carrel up --sim-nodes 2` simulates.
const SIM_NODES: [&str; 2] = ["carrel-sim-0", "carrel-sim-1"];

/// The ALLOWED DISRUPTIONS `kubectl get pdb` prints for budget `name`.
fn allowed_disruptions(k: &Kubectl<'_>, name: &str) -> String {
    let table = k.run(&["get", "pdb", name]);
    let mut lines = table.lines();
    let header: Vec<&str> =
        lines.next().unwrap_or_default().split("  ").filter(|c| !c.is_empty()).collect();
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    let column = header.iter().position(|c| c.trim() == "ALLOWED DISRUPTIONS");
    column.and_then(|i| row.get(i)).map(|c| (*c).to_owned()).unwrap_or(table)
}

fn pod_names(k: &Kubectl<'_>) -> Vec<String> {
    let names =
        k.run(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.name}"]);
    names.split_whitespace().map(str::to_owned).collect()
}

/// The `app=web` pods as (name, node) pairs.
fn pods_and_nodes(k: &Kubectl<'_>) -> Vec<(String, String)> {
    let path = r#"jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName}{"\n"}{end}"#;
    let pairs = k.run(&["get", "pods", "-l", "app=web", "-o", path]);
    pairs
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(p, n)| (p.to_owned(), n.to_owned()))
        .collect()
}

/// `kubectl drain` with a short timeout, as (success, stdout, stderr).
fn drain(k: &Kubectl<'_>, node: &str, timeout: &str) -> (bool, String, String) {
    let timeout = format!("--timeout={timeout}");
    let args = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", &timeout];
    let drained = k.output(&args);
    (
        drained.status.success(),
        String::from_utf8_lossy(&drained.stdout).into_owned(),
        String::from_utf8_lossy(&drained.stderr).into_owned(),
    )
}

fn drains(k: &Kubectl<'_>) {
    let within = Duration::from_secs(60);
    k.run(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    k.run(&["create", "pdb", "web", "--selector=app=web", "--min-available=1"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    eventually("one disruption allowed", within, || {
        let allowed = allowed_disruptions(k, "web");
        (allowed == "1", allowed)
    });
    let before = pods_and_nodes(k);
    assert_eq!(before.len(), 2, "{before:?}");
    let node = before[0].1.clone();
    let nodes = k.run(&["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]);
    // `carrel up`'s two simulated nodes.
    let other = if node == SIM_NODES[0] { SIM_NODES[1] } else { SIM_NODES[0] };
    assert!(SIM_NODES.contains(&node.as_str()), "{node}");
    let on_node: Vec<&String> = before.iter().filter(|(_, n)| *n == node).map(|(p, _)| p).collect();

    // The pods on the node are evicted, one at a time as the budget allows: kubectl retries a
    // refused eviction until the replacement of the one before is ready. The node stays
    // cordoned, so the replacements run on the other node.
    let (drained, stdout, stderr) = drain(k, &node, "120s");
    assert!(drained, "kubectl {} drain {node} (nodes {nodes}): {stdout}\n{stderr}", k.version);
    assert!(stdout.contains(&format!("node/{node} cordoned")), "{stdout}");
    for pod in &on_node {
        assert!(stdout.contains(&format!("pod/{pod} evicted")), "{stdout}");
    }
    assert!(stdout.contains(&format!("node/{node} drained")), "{stdout}");
    let unschedulable = k.run(&["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"]);
    assert_eq!(unschedulable, "true", "the tenant's cordon of its virtual node stays");
    let taint = k.run(&["get", "node", &node, "-o", "jsonpath={.spec.taints[*].key}"]);
    assert!(taint.contains(UNSCHEDULABLE_TAINT), "{taint}");
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let after = pods_and_nodes(k);
    assert!(before.iter().all(|(p, _)| !on_node.contains(&p) || after.iter().all(|(q, _)| q != p)));
    assert!(after.iter().all(|(_, n)| n == other), "the cordoned node is kept free: {after:?}");
    assert_eq!(
        k.on_host(&["get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"])
            .split_whitespace()
            .filter(|n| *n == node)
            .count(),
        0,
        "no host pod of the tenant is left on the drained node"
    );

    // A budget that allows nothing holds a drain back: kubectl retries on the 429 and gives up
    // at its timeout, and the pods stay.
    k.run(&["patch", "pdb", "web", "--type=merge", "-p", "{\"spec\":{\"minAvailable\":2}}"]);
    eventually("no disruption allowed", within, || {
        let allowed = allowed_disruptions(k, "web");
        (allowed == "0", allowed)
    });
    let running = pod_names(k);
    let (drained, _, stderr) = drain(k, other, "8s");
    assert!(!drained, "kubectl {}: {stderr}", k.version);
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{stderr}"
    );
    assert_eq!(pod_names(k), running, "a refused eviction deletes nothing");

    for n in [node.as_str(), other] {
        k.run(&["uncordon", n]);
        let unschedulable = k.run(&["get", "node", n, "-o", "jsonpath={.spec.unschedulable}"]);
        assert_eq!(unschedulable, "", "uncordoned");
    }
    // The cordon's taint goes with it (or the node itself, now that no pod of the tenant runs
    // there and the tenant no longer holds it cordoned).
    eventually("the cordon's taint gone", within, || {
        let shown = k.output(&["get", "node", &node, "-o", "jsonpath={.spec.taints[*].key}"]);
        let taints = String::from_utf8_lossy(&shown.stdout).into_owned();
        let gone = String::from_utf8_lossy(&shown.stderr).contains("NotFound");
        (gone || (shown.status.success() && !taints.contains(UNSCHEDULABLE_TAINT)), taints)
    });
    let ready = k.run(&["get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}"]);
    assert_eq!(ready, "2");
}

const JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: work}
spec:
  completions: 3
  parallelism: 2
  backoffLimit: 1
  template:
    metadata:
      annotations: {sim.carrel.dev/run-seconds: \"0.2\", sim.carrel.dev/exit-code: \"EXIT\"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
";

#[test]
fn a_job_completes_and_a_failing_one_reaches_its_backoff_limit() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    for k in &Kubectl::each(&up) {
        jobs_finish(k);
    }
    up.stop();
}

fn jobs_finish(k: &Kubectl<'_>) {
    k.apply(&JOB.replace("EXIT", "0"));
    k.run(&["wait", "--for=condition=complete", "job/work", "--timeout=90s"]);
    let succeeded = k.run(&["get", "job", "work", "-o", "jsonpath={.status.succeeded}"]);
    assert_eq!(succeeded, "3");

    k.apply(&JOB.replace("name: work", "name: failing").replace("EXIT", "1"));
    k.run(&["wait", "--for=condition=failed", "job/failing", "--timeout=90s"]);
    let reason = k.run(&[
        "get",
        "job",
        "failing",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}",
    ]);
    assert_eq!(reason, "BackoffLimitExceeded");
}

const DAEMONSET: &str = "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: \"busybox:1.36\"}]
";

#[test]
fn a_daemonset_runs_a_pod_on_each_virtual_node_and_rolls_out() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "2"]);
    for k in &Kubectl::each(&up) {
        daemons(k);
    }
    up.stop();
}

/// The sorted names kubectl prints for `jsonpath` over `args`.
fn words(k: &Kubectl<'_>, args: &[&str]) -> Vec<String> {
    let mut words: Vec<String> = k.run(args).split_whitespace().map(str::to_owned).collect();
    words.sort();
    words
}

/// The revision numbers `kubectl rollout history daemonset/agent` lists.
fn revisions(k: &Kubectl<'_>) -> Vec<String> {
    let history = k.run(&["rollout", "history", "daemonset/agent"]);
    history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .map(str::to_owned)
        .collect()
}

fn daemons(k: &Kubectl<'_>) {
    // A tenant sees the nodes its pods run on: two replicas, placed on the least loaded of the
    // two simulated nodes, show it both.
    k.run(&["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    k.run(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let nodes = eventually("both simulated nodes seen", Duration::from_secs(60), || {
        let nodes = words(k, &["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]);
        (nodes.len() == 2, nodes)
    });

    k.apply(DAEMONSET);
    k.run(&["rollout", "status", "daemonset/agent", "--timeout=90s"]);
    let on = |k: &Kubectl<'_>| {
        words(k, &["get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[*].spec.nodeName}"])
    };
    assert_eq!(on(k), nodes, "one daemon pod on each node the tenant sees");
    // Each on the node its affinity names: the syncer keeps the affinity on the host pod, and
    // the host's scheduler places it by the node's name, which the virtual node shares.
    let placed = k.run(&[
        "get",
        "pods",
        "-l",
        "app=agent",
        "-o",
        "jsonpath={range .items[*]}{.spec.nodeName}={.spec.affinity.nodeAffinity\
         .requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0]\
         .values[0]}{\"\\n\"}{end}",
    ]);
    for line in placed.lines() {
        let (bound, wanted) = line.split_once('=').unwrap_or_default();
        assert!(!bound.is_empty() && bound == wanted, "{placed}");
    }
    assert_eq!(placed.lines().count(), 2, "{placed}");
    let status = k.run(&[
        "get",
        "daemonset",
        "agent",
        "-o",
        "jsonpath={.status.desiredNumberScheduled}/{.status.numberAvailable}",
    ]);
    assert_eq!(status, "2/2");

    // A new image rolls over node by node; the history has both templates.
    k.run(&["set", "image", "daemonset/agent", "agent=busybox:1.37"]);
    k.run(&["rollout", "status", "daemonset/agent", "--timeout=90s"]);
    let images = eventually("the old pods gone", Duration::from_secs(60), || {
        let images = words(
            k,
            &[
                "get",
                "pods",
                "-l",
                "app=agent",
                "-o",
                "jsonpath={.items[*].spec.containers[0].image}",
            ],
        );
        (images == ["busybox:1.37", "busybox:1.37"], images)
    });
    assert_eq!(images.len(), nodes.len());
    assert_eq!(on(k), nodes);
    assert_eq!(revisions(k), ["1", "2"]);

    // Undo applies the first revision's patch: the first template again, as revision 3.
    k.run(&["rollout", "undo", "daemonset/agent"]);
    k.run(&["rollout", "status", "daemonset/agent", "--timeout=90s"]);
    let image = k.run(&[
        "get",
        "daemonset",
        "agent",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "busybox:1.36");
    assert_eq!(revisions(k), ["2", "3"]);

    k.run(&["delete", "daemonset", "agent"]);
    k.run(&["delete", "deployment", "web"]);
    eventually("their pods gone", Duration::from_secs(60), || {
        let left = k.run(&["get", "pods", "-o", "name"]);
        (left.is_empty(), left)
    });
}

#[test]
fn kubectl_autoscale_makes_an_autoscaler_read_in_v2_and_v1() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    for k in &Kubectl::each(&up) {
        autoscales(k);
    }
    up.stop();
}

fn autoscales(k: &Kubectl<'_>) {
    k.run(&["create", "deployment", "web", "--image=nginx:1.27"]);
    // The current kubectl takes the target as --cpu (and warns on --cpu-percent).
    let cpu = if k.version == "current" { "--cpu=50%" } else { "--cpu-percent=50" };
    let made = k.run(&["autoscale", "deployment", "web", "--min=1", "--max=3", cpu]);
    assert_eq!(
        made, "horizontalpodautoscaler.autoscaling/web autoscaled\n",
        "kubectl {}",
        k.version
    );

    let table = k.run(&["get", "hpa", "web"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]);
    let row = lines.next().unwrap_or_default();
    let cells: Vec<&str> = row.split("   ").map(str::trim).filter(|c| !c.is_empty()).collect();
    assert_eq!(
        cells[..6],
        ["web", "Deployment/web", "cpu: <unknown>/50%", "1", "3", "0"],
        "{table}"
    );

    // By its full name: a short name drops the version (client-go's shortcut expander), so
    // `hpa.v1.autoscaling` reads the preferred v2.
    let v1 = k.run(&[
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "-o",
        "jsonpath={.spec.targetCPUUtilizationPercentage}",
    ]);
    assert_eq!(v1, "50", "kubectl {}", k.version);
    let v2 = k.run(&[
        "get",
        "horizontalpodautoscalers.v2.autoscaling",
        "web",
        "-o",
        "jsonpath={.spec.metrics[0].resource.target.averageUtilization}",
    ]);
    assert_eq!(v2, "50", "kubectl {}", k.version);

    let file = k.up.home.path().join(format!("bad-hpa-{}.yaml", k.version));
    std::fs::write(&file, BAD_HPA).expect("write manifest");
    let refused = k.output(&["create", "-f", &file.to_string_lossy()]);
    assert!(!refused.status.success(), "kubectl {}: an autoscaler of 0 replicas", k.version);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("The HorizontalPodAutoscaler \"bad\" is invalid")
            && stderr.contains("spec.maxReplicas: Invalid value: 0: must be greater than 0"),
        "kubectl {}: {stderr}",
        k.version
    );
}

const BAD_HPA: &str = "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: bad}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 0
";

const GPU_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  completions: 4
  parallelism: 4
  template:
    metadata:
      annotations: {sim.carrel.dev/run-seconds: \"1\"}
    spec:
      restartPolicy: Never
      containers:
      - name: worker
        image: cuda
        resources: {limits: {nvidia.com/mig-1g.18gb: 1}}
";

const GPU_DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: serve}
spec:
  replicas: 2
  selector: {matchLabels: {app: serve}}
  template:
    metadata: {labels: {app: serve}}
    spec:
      containers:
      - name: server
        image: cuda
        resources: {limits: {nvidia.com/mig-1g.18gb: 1}}
";

/// The slices the tenant's pods hold on the host: its claim Leases.
fn claims(up: &Up, tenant: &str) -> usize {
    let out = ok(up.kubectl(
        &up.host_kubeconfig(),
        &[
            "get",
            "leases",
            "-n",
            "carrel",
            "-l",
            &format!("gpu.carrel.dev/tenant={tenant}"),
            "-o",
            "name",
        ],
    ));
    out.lines().count()
}

#[test]
fn gpu_workloads_wait_for_their_quota_and_give_their_slices_back() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let kc = create(&up, "team-gpu", &["--gpu", "1g.18gb=2"]);
    let k = Kubectl {
        up: &up,
        version: "1.33",
        binary: carrel_e2e::kubectl_path("kubectl.1.33"),
        kubeconfig: kc,
        tenant: "team-gpu".into(),
    };

    // Four workers, room for two: two run, the others are refused by the quota until slices
    // free, and all four finish.
    k.apply(GPU_JOB);
    eventually("a create refused by the GPU quota", Duration::from_secs(60), || {
        let events = k.run(&[
            "get",
            "events",
            "--field-selector",
            "reason=FailedCreate",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        (events.contains("quota"), events)
    });
    // The pods holding slices at once, from one list each time (the Job's `status.active` may
    // lag a pod's end by a sync, as kube-controller-manager's does).
    let most = std::cell::Cell::new(0usize);
    eventually("all four workers done", Duration::from_secs(120), || {
        let phases = k.run(&[
            "get",
            "pods",
            "-l",
            "job-name=train",
            "-o",
            "jsonpath={range .items[*]}{.status.phase}{\" \"}{end}",
        ]);
        let holding =
            phases.split_whitespace().filter(|p| !matches!(*p, "Succeeded" | "Failed")).count();
        most.set(most.get().max(holding));
        let done = k.run(&["get", "job", "train", "-o", "jsonpath={.status.succeeded}"]);
        (done == "4", done)
    });
    assert!(most.get() <= 2, "at most the quota's two workers at once, saw {}", most.get());

    // A Deployment holds its slices while it runs and gives them all back when deleted.
    k.apply(GPU_DEPLOYMENT);
    k.run(&["rollout", "status", "deployment/serve", "--timeout=90s"]);
    assert_eq!(claims(&up, "team-gpu"), 2);
    k.run(&["delete", "deployment", "serve"]);
    eventually("the Deployment's slices freed", Duration::from_secs(60), || {
        let held = claims(&up, "team-gpu");
        (held == 0, held)
    });
    up.stop();
}

const INDEXED_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: indexed}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  template:
    metadata:
      annotations: {sim.carrel.dev/run-seconds: \"0.5\"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
";

const HELD_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: held}
spec:
  suspend: true
  template:
    metadata:
      annotations: {sim.carrel.dev/run-seconds: \"0.5\"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
";

const CRON_JOB: &str = "apiVersion: batch/v1
kind: CronJob
metadata: {name: tick}
spec:
  schedule: \"* * * * *\"
  jobTemplate:
    spec:
      template:
        metadata:
          annotations: {sim.carrel.dev/run-seconds: \"0.5\"}
        spec:
          restartPolicy: Never
          containers: [{name: c, image: busybox}]
";

const LIMIT_RANGE: &str = "apiVersion: v1
kind: LimitRange
metadata: {name: bounds}
spec:
  limits:
  - type: Container
    default: {cpu: 200m, memory: 64Mi}
    defaultRequest: {cpu: 100m}
    max: {cpu: \"1\"}
";

const BIG_POD: &str = "apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {cpu: \"2\"}}
";

#[test]
fn indexed_suspended_and_scheduled_jobs_and_limit_ranges_through_kubectl() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let each = Kubectl::each(&up);
    // Every minute: created first, so that the schedule fires while the rest runs.
    for k in &each {
        k.apply(CRON_JOB);
    }
    for k in &each {
        indexed_and_suspended_jobs(k);
        limit_range_defaults_and_bounds(k);
        k.run(&["create", "job", "by-hand", "--from=cronjob/tick"]);
        k.run(&["wait", "--for=condition=complete", "job/by-hand", "--timeout=90s"]);
        let owner =
            k.run(&["get", "job", "by-hand", "-o", "jsonpath={.metadata.ownerReferences[0].kind}"]);
        assert_eq!(owner, "CronJob", "kubectl {}", k.version);
    }
    for k in &each {
        let scheduled = eventually("the CronJob fired", Duration::from_secs(75), || {
            let at =
                k.run(&["get", "cronjob", "tick", "-o", "jsonpath={.status.lastScheduleTime}"]);
            (!at.is_empty(), at)
        });
        assert!(scheduled.ends_with(":00Z"), "on a minute: {scheduled}");
        let jobs = k.run(&["get", "jobs", "-o", "jsonpath={.items[*].metadata.name}"]);
        assert!(jobs.split(' ').any(|j| j.starts_with("tick-")), "kubectl {}: {jobs}", k.version);
    }
    up.stop();
}

fn indexed_and_suspended_jobs(k: &Kubectl<'_>) {
    k.apply(INDEXED_JOB);
    k.run(&["wait", "--for=condition=complete", "job/indexed", "--timeout=90s"]);
    let indexes = k.run(&["get", "job", "indexed", "-o", "jsonpath={.status.completedIndexes}"]);
    assert_eq!(indexes, "0-2", "kubectl {}", k.version);
    let annotations = k.run(&[
        "get",
        "pods",
        "-l",
        "job-name=indexed",
        "-o",
        "jsonpath={range .items[*]}{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}{\" \"}{end}",
    ]);
    let mut seen: Vec<&str> = annotations.split_whitespace().collect();
    seen.sort_unstable();
    assert_eq!(seen, ["0", "1", "2"], "kubectl {}", k.version);
    let env = k.run(&[
        "get",
        "pods",
        "-l",
        "job-name=indexed",
        "-o",
        "jsonpath={.items[0].spec.containers[0].env[?(@.name==\"JOB_COMPLETION_INDEX\")].valueFrom.fieldRef.fieldPath}",
    ]);
    assert_eq!(env, "metadata.annotations['batch.kubernetes.io/job-completion-index']");

    k.apply(HELD_JOB);
    k.run(&["wait", "--for=condition=suspended", "job/held", "--timeout=30s"]);
    let pods = k.run(&["get", "pods", "-l", "job-name=held", "-o", "name"]);
    assert_eq!(pods, "", "a suspended Job starts no pod");
    k.run(&["patch", "job", "held", "--type=merge", "-p", "{\"spec\":{\"suspend\":false}}"]);
    k.run(&["wait", "--for=condition=complete", "job/held", "--timeout=90s"]);
}

fn limit_range_defaults_and_bounds(k: &Kubectl<'_>) {
    k.apply(LIMIT_RANGE);
    k.run(&["run", "bounded", "--image=busybox"]);
    let resources = k.run(&[
        "get",
        "pod",
        "bounded",
        "-o",
        "jsonpath={.spec.containers[0].resources.limits.cpu} {.spec.containers[0].resources.limits.memory} {.spec.containers[0].resources.requests.cpu}",
    ]);
    assert_eq!(resources, "200m 64Mi 100m", "kubectl {}", k.version);
    let file = k.up.home.path().join(format!("big-{}.yaml", k.version));
    std::fs::write(&file, BIG_POD).expect("write manifest");
    let refused = k.output(&["apply", "-f", &file.to_string_lossy()]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(
            "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "kubectl {}: {stderr}",
        k.version
    );
}

#[test]
fn resource_quotas_refuse_creates_over_their_limits_and_report_usage() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    // The tenant's own GPU quota has room for two slices: the ResourceQuota is the tighter bound.
    for k in &Kubectl::each_with(&up, &["--gpu", "1g.18gb=2"]) {
        quotas_bound(k);
    }
    up.stop();
}

/// `kubectl run NAME` of a pod asking for one `1g.18gb` slice.
fn run_gpu_pod(name: &str) -> Vec<String> {
    let overrides = format!(
        r#"{{"spec":{{"containers":[{{"name":"{name}","image":"cuda","resources":{{"limits":{{"nvidia.com/mig-1g.18gb":"1"}}}}}}]}}}}"#
    );
    ["run", name, "--image=cuda", "--restart=Never", &format!("--overrides={overrides}")]
        .map(String::from)
        .to_vec()
}

fn quotas_bound(k: &Kubectl<'_>) {
    let within = Duration::from_secs(60);
    k.run(&[
        "create",
        "quota",
        "q",
        "--hard=pods=2,count/configmaps=3,requests.nvidia.com/mig-1g.18gb=1",
    ]);

    // One slice: the second GPU pod is refused, a plain one fits, a third pod does not.
    let args = run_gpu_pod("a");
    k.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let args = run_gpu_pod("b");
    assert_eq!(
        k.refused(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        "Error from server (Forbidden): pods \"b\" is forbidden: exceeded quota: q, requested: \
         requests.nvidia.com/mig-1g.18gb=1, used: requests.nvidia.com/mig-1g.18gb=1, limited: \
         requests.nvidia.com/mig-1g.18gb=1",
        "kubectl {}",
        k.version
    );
    k.run(&["run", "b", "--image=nginx", "--restart=Never"]);
    assert_eq!(
        k.refused(&["run", "c", "--image=nginx", "--restart=Never"]),
        "Error from server (Forbidden): pods \"c\" is forbidden: exceeded quota: q, requested: \
         pods=1, used: pods=2, limited: pods=2",
        "kubectl {}",
        k.version
    );
    // As on Kubernetes, the namespace's `kube-root-ca.crt` is one of the three.
    eventually("kube-root-ca.crt published", within, || {
        let there = k.output(&["get", "configmap", "kube-root-ca.crt"]).status.success();
        (there, there)
    });
    for name in ["one", "two"] {
        k.run(&["create", "configmap", name]);
    }
    assert_eq!(
        k.refused(&["create", "configmap", "three"]),
        "error: failed to create configmap: configmaps \"three\" is forbidden: exceeded quota: q, \
         requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3",
        "kubectl {}",
        k.version
    );

    // The status reports the usage, in kubectl's views of it too.
    let want = serde_json::json!({"count/configmaps": "3", "pods": "2",
                                  "requests.nvidia.com/mig-1g.18gb": "1"});
    eventually("the quota's usage", within, || {
        let used = k.run(&["get", "quota", "q", "-o", "jsonpath={.status.used}"]);
        let parsed: serde_json::Value = serde_json::from_str(&used).unwrap_or_default();
        (parsed == want, used)
    });
    let described = k.run(&["describe", "quota", "q"]);
    for row in [
        ["count/configmaps", "3", "3"],
        ["pods", "2", "2"],
        ["requests.nvidia.com/mig-1g.18gb", "1", "1"],
    ] {
        let found = described.lines().any(|l| l.split_whitespace().eq(row.iter().copied()));
        assert!(found, "no row {row:?} in kubectl {} describe:\n{described}", k.version);
    }
    let table = k.run(&["get", "quota", "q"]);
    assert!(table.contains("pods: 2/2"), "{table}");

    // A Deployment of three under `pods=2` gets two pods and a refusal on its ReplicaSet, and
    // its third pod once the quota is raised.
    k.run(&["create", "namespace", "apps"]);
    k.run(&["create", "quota", "q", "-n", "apps", "--hard=pods=2"]);
    k.run(&["create", "deployment", "web", "-n", "apps", "--image=nginx", "--replicas=3"]);
    let refusals = eventually("a FailedCreate event on the ReplicaSet", within, || {
        let events = k.run(&[
            "get",
            "events",
            "-n",
            "apps",
            "--field-selector",
            "reason=FailedCreate",
            "-o",
            "jsonpath={range .items[*]}{.involvedObject.kind} {.message}{\"\\n\"}{end}",
        ]);
        (events.lines().any(|l| l.starts_with("ReplicaSet Error creating: pods \"web-")), events)
    });
    assert!(
        refusals.contains(
            "\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{refusals}"
    );
    let pods = || k.run(&["get", "pods", "-n", "apps", "-l", "app=web", "-o", "name"]);
    assert_eq!(pods().lines().count(), 2, "kubectl {}", k.version);
    k.run(&["patch", "quota", "q", "-n", "apps", "-p", r#"{"spec":{"hard":{"pods":"3"}}}"#]);
    eventually("the third pod", within, || {
        let names = pods();
        (names.lines().count() == 3, names)
    });
}
