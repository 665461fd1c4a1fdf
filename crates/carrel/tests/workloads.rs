//! A tenant of `carrel up` behaves as a cluster with kube-controller-manager does, through each
//! kubectl users run (1.31, 1.33 and the current one, each against a tenant of its own):
//! Deployments roll out, over and back and scale, Jobs complete or fail, deletes cascade,
//! autoscalers are made and read in both their versions.

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
        kubectls()
            .into_iter()
            .enumerate()
            .map(|(i, (version, binary))| {
                let kubeconfig = create(up, &format!("team-{i}"), &[]);
                Kubectl { up, version, binary, kubeconfig }
            })
            .collect()
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
