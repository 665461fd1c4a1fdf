//! A tenant of `carrel up` behaves as a cluster with kube-controller-manager does, through each
//! kubectl users run (1.31, 1.33 and the current one, each against a tenant of its own):
//! Deployments roll out, over and back and scale, Jobs complete or fail, deletes cascade,
//! ResourceQuotas bound what is created and report what is used.

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
                let kubeconfig = create(up, &format!("team-{i}"), extra);
                Kubectl { up, version, binary, kubeconfig }
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
        assert!(output.status.success(), "kubectl {} {args:?}", self.version);
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
    let most = std::cell::Cell::new(0usize);
    eventually("all four workers done", Duration::from_secs(120), || {
        let active = k.run(&["get", "job", "train", "-o", "jsonpath={.status.active}"]);
        most.set(most.get().max(active.parse().unwrap_or(0)));
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
    for name in ["one", "two", "three"] {
        k.run(&["create", "configmap", name]);
    }
    assert_eq!(
        k.refused(&["create", "configmap", "four"]),
        "error: failed to create configmap: configmaps \"four\" is forbidden: exceeded quota: q, \
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
