//! A tenant of `carrel up` behaves as a cluster with kube-controller-manager does: through its
//! own kubectl, deletes cascade (garbage collection).

mod common;

use std::path::Path;
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, Up};

fn kubectl(up: &Up, kubeconfig: &Path, args: &[&str]) -> String {
    ok(up.kubectl(kubeconfig, args))
}

/// Apply `yaml` in the tenant.
fn apply(up: &Up, kubeconfig: &Path, yaml: &str) {
    let file = up.home.path().join("applied.yaml");
    std::fs::write(&file, yaml).expect("write manifest");
    kubectl(up, kubeconfig, &["apply", "-f", &file.to_string_lossy()]);
}

/// ConfigMap `name` in `default`, owned by ConfigMap `owner` (whose uid is read first).
fn owned_configmap(up: &Up, kubeconfig: &Path, name: &str, owner: &str) {
    let uid =
        kubectl(up, kubeconfig, &["get", "configmap", owner, "-o", "jsonpath={.metadata.uid}"]);
    apply(
        up,
        kubeconfig,
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  ownerReferences:\n  \
             - {{apiVersion: v1, kind: ConfigMap, name: {owner}, uid: {uid}, blockOwnerDeletion: true}}\n"
        ),
    );
}

fn exists(up: &Up, kubeconfig: &Path, name: &str) -> bool {
    up.kubectl(kubeconfig, &["get", "configmap", name]).status.success()
}

#[test]
fn deletes_cascade_in_the_background_in_the_foreground_and_not_when_orphaning() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let kc = create(&up, "team-a", &[]);
    let within = Duration::from_secs(30);
    for owner in ["background", "foreground", "orphan"] {
        kubectl(&up, &kc, &["create", "configmap", owner]);
        owned_configmap(&up, &kc, &format!("of-{owner}"), owner);
    }

    kubectl(&up, &kc, &["delete", "configmap", "background"]);
    eventually("the background owner's dependent collected", within, || {
        let there = exists(&up, &kc, "of-background");
        (!there, there)
    });

    // kubectl waits for the owner itself to be gone: by then its dependent is.
    kubectl(&up, &kc, &["delete", "configmap", "foreground", "--cascade=foreground"]);
    assert!(!exists(&up, &kc, "foreground"));
    assert!(!exists(&up, &kc, "of-foreground"), "a foreground delete ends after its dependents");

    kubectl(&up, &kc, &["delete", "configmap", "orphan", "--cascade=orphan"]);
    assert!(!exists(&up, &kc, "orphan"));
    let refs = kubectl(
        &up,
        &kc,
        &["get", "configmap", "of-orphan", "-o", "jsonpath={.metadata.ownerReferences}"],
    );
    assert_eq!(refs, "", "the orphan keeps no reference to its deleted owner");
    up.stop();
}

#[test]
fn a_deployment_rolls_out_rolls_over_undoes_and_scales_through_kubectl() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let kc = create(&up, "team-a", &[]);
    kubectl(&up, &kc, &["create", "deployment", "web", "--image=nginx:1.27", "--replicas=2"]);
    kubectl(&up, &kc, &["rollout", "status", "deployment/web", "--timeout=90s"]);
    let ready = kubectl(
        &up,
        &kc,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}/{.status.availableReplicas}",
        ],
    );
    assert_eq!(ready, "2/2");
    let first_rs = kubectl(&up, &kc, &["get", "rs", "-l", "app=web", "-o", "name"]);
    assert_eq!(first_rs.lines().count(), 1, "{first_rs}");

    // A new image rolls the pods over to a second ReplicaSet.
    kubectl(&up, &kc, &["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    kubectl(&up, &kc, &["rollout", "status", "deployment/web", "--timeout=90s"]);
    let images = kubectl(
        &up,
        &kc,
        &["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].spec.containers[0].image}"],
    );
    assert_eq!(images.split_whitespace().filter(|i| *i == "nginx:1.28").count(), 2, "{images}");
    let history = kubectl(&up, &kc, &["rollout", "history", "deployment/web"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    // Undo goes back to the first template, and its ReplicaSet.
    kubectl(&up, &kc, &["rollout", "undo", "deployment/web"]);
    kubectl(&up, &kc, &["rollout", "status", "deployment/web", "--timeout=90s"]);
    let image = kubectl(
        &up,
        &kc,
        &["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}"],
    );
    assert_eq!(image, "nginx:1.27");
    let all_rs = kubectl(&up, &kc, &["get", "rs", "-l", "app=web", "-o", "name"]);
    assert_eq!(all_rs.lines().count(), 2, "undo reuses the first ReplicaSet: {all_rs}");

    kubectl(&up, &kc, &["scale", "deployment/web", "--replicas=3"]);
    kubectl(&up, &kc, &["rollout", "status", "deployment/web", "--timeout=90s"]);
    eventually("three pods", Duration::from_secs(60), || {
        let n = kubectl(
            &up,
            &kc,
            &[
                "get",
                "pods",
                "-l",
                "app=web",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ],
        )
        .lines()
        .count();
        (n == 3, n)
    });

    // Deleting it takes its ReplicaSets and pods with it.
    kubectl(&up, &kc, &["delete", "deployment", "web"]);
    eventually("its pods gone", Duration::from_secs(60), || {
        let left = kubectl(&up, &kc, &["get", "pods,rs", "-l", "app=web", "-o", "name"]);
        (left.is_empty(), left)
    });
    up.stop();
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
    let kc = create(&up, "team-a", &[]);
    apply(&up, &kc, &JOB.replace("EXIT", "0"));
    kubectl(&up, &kc, &["wait", "--for=condition=complete", "job/work", "--timeout=90s"]);
    let succeeded =
        kubectl(&up, &kc, &["get", "job", "work", "-o", "jsonpath={.status.succeeded}"]);
    assert_eq!(succeeded, "3");

    apply(&up, &kc, &JOB.replace("name: work", "name: failing").replace("EXIT", "1"));
    kubectl(&up, &kc, &["wait", "--for=condition=failed", "job/failing", "--timeout=90s"]);
    let reason = kubectl(
        &up,
        &kc,
        &[
            "get",
            "job",
            "failing",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}",
        ],
    );
    assert_eq!(reason, "BackoffLimitExceeded");
    up.stop();
}
