//! Idle tenants under `carrel up --tenant-idle-after`: a tenant no request reaches closes its
//! store and stops its syncer (it holds no file), its next request opens it with everything it
//! had, and a change on the host side for it (one of its host pods) opens it too, so that its
//! syncer brings the change up.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, Up};

const WAIT: Duration = Duration::from_secs(30);

/// The files of `tenant`'s store that the process holds open.
fn store_files(up: &Up, tenant: &str) -> usize {
    let dir: PathBuf = up.data.join("tenants").join(tenant);
    let entries = std::fs::read_dir(format!("/proc/{}/fd", up.pid())).expect("descriptors");
    entries
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(&dir))
        .count()
}

fn apply(up: &Up, kubeconfig: &Path, name: &str, manifest: &str) {
    let file = up.home.path().join(format!("{name}.yaml"));
    std::fs::write(&file, manifest).expect("write manifest");
    ok(up.kubectl(kubeconfig, &["apply", "-f", &file.to_string_lossy()]));
}

fn gpu_pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: cuda\n    resources:\n      limits:\n        nvidia.com/mig-1g.18gb: 1\n"
    )
}

fn phase(up: &Up, kubeconfig: &Path, pod: &str) -> String {
    let out = up.kubectl(kubeconfig, &["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_running(up: &Up, kubeconfig: &Path, pod: &str) {
    eventually(&format!("pod {pod} Running"), WAIT, || {
        let p = phase(up, kubeconfig, pod);
        (p == "Running", p)
    });
}

/// Wait, sending the tenant no request, until its store is closed.
fn wait_closed(up: &Up, tenant: &str) {
    eventually(&format!("tenant {tenant} closed while idle"), WAIT, || {
        let open = store_files(up, tenant);
        (open == 0, open)
    });
}

#[test]
fn an_idle_tenant_holds_no_file_and_opens_again_for_its_requests_and_its_host_pods() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--sim-nodes", "1", "--sim-gpus", "h200x1", "--tenant-idle-after", "1s"];
    let up = Up::start_args(data.path(), &args);
    let team = create(&up, "team-a", &["--gpu", "1g.18gb=2"]);
    apply(&up, &team, "first", &gpu_pod("first"));
    wait_running(&up, &team, "first");
    assert!(store_files(&up, "team-a") > 0, "an open tenant holds its store's files");
    wait_closed(&up, "team-a");

    // Its next request opens it: everything is there.
    wait_running(&up, &team, "first");
    ok(up.kubectl(&team, &["create", "configmap", "made-after"]));
    // Its syncer runs again: a new pod reaches the host and runs.
    apply(&up, &team, "second", &gpu_pod("second"));
    wait_running(&up, &team, "second");
    wait_closed(&up, "team-a");

    // A change to one of its host pods, with no request to the tenant, opens it, and its
    // syncer brings the change up: the host pod deleted under it, the tenant pod fails.
    let host = up.host_kubeconfig();
    let host_pods = ok(up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "name"]));
    let first = host_pods.lines().find(|l| l.contains("first")).expect("the first host pod");
    ok(up.kubectl(&host, &["delete", first, "-n", "carrel-team-a", "--wait=false"]));
    eventually("the tenant opened by the host change", WAIT, || {
        let open = store_files(&up, "team-a");
        (open > 0, open)
    });
    eventually("the tenant pod failed", WAIT, || {
        let p = phase(&up, &team, "first");
        (p == "Failed", p)
    });
    wait_running(&up, &team, "second");
    // And once idle again, it closes again.
    wait_closed(&up, "team-a");
    up.stop();
}

/// The host `Tenant`'s `status.nextWakeTime` (empty when none), read from the host: no request
/// reaches the tenant.
fn next_wake(up: &Up, tenant: &str) -> String {
    let host = up.host_kubeconfig();
    let path = "jsonpath={.status.nextWakeTime}";
    ok(up.kubectl(&host, &["get", "tenant", tenant, "-o", path]))
}

const EXPIRING_JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: brief}
spec:
  ttlSecondsAfterFinished: 20
  template:
    metadata:
      annotations: {sim.carrel.dev/run-seconds: \"0.2\"}
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox}]
";

#[test]
fn an_idle_tenant_opens_when_its_controllers_are_due_even_after_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--sim-nodes", "1", "--sim-gpus", "h200x1", "--tenant-idle-after", "1s"];
    let up = Up::start_args(data.path(), &args);
    let team = create(&up, "team-a", &[]);
    apply(&up, &team, "brief", EXPIRING_JOB);
    eventually("the job complete", WAIT, || {
        let path = "jsonpath={.status.conditions[?(@.type==\"Complete\")].status}";
        let out = up.kubectl(&team, &["get", "job", "brief", "-o", path]);
        let complete = String::from_utf8_lossy(&out.stdout).into_owned();
        (complete == "True", complete)
    });
    wait_closed(&up, "team-a");

    // Closed, its TTL controller is due when the Job expires: the host object says when.
    let due = eventually("the next wake-up recorded", WAIT, || {
        let at = next_wake(&up, "team-a");
        (!at.is_empty(), at)
    });
    let due = chrono::DateTime::parse_from_rfc3339(&due).expect("an RFC 3339 time");
    assert!(due > chrono::Utc::now(), "{due} is to come");

    // A restart serves the tenant closed, and opens it at that time, with no request.
    up.stop();
    let up = Up::start_args(data.path(), &args);
    // (Its host pod's state, listed as the host side starts, may open it a moment.)
    wait_closed(&up, "team-a");
    let still = chrono::DateTime::parse_from_rfc3339(&next_wake(&up, "team-a")).expect("kept");
    assert_eq!(still, due, "still due then");
    assert!(due > chrono::Utc::now(), "the test is slower than the job's TTL: {due}");
    eventually("the tenant opened when due", Duration::from_secs(40), || {
        let open = store_files(&up, "team-a");
        (open > 0, open)
    });
    // Its TTL controller deleted the Job (in the foreground: the Job may still show, being
    // deleted, until its garbage collector next runs); closed again, nothing more is due.
    wait_closed(&up, "team-a");
    eventually("nothing due any more", WAIT, || {
        let at = next_wake(&up, "team-a");
        (at.is_empty(), at)
    });
    let team = up.home.path().join("team-a.kubeconfig");
    std::fs::write(&team, ok(up.carrel(&["tenant", "kubeconfig", "team-a"]))).expect("write");
    let path = "jsonpath={.metadata.deletionTimestamp}";
    let deleted = up.kubectl(&team, &["get", "job", "brief", "-o", path]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&deleted.stdout).into_owned(),
        String::from_utf8_lossy(&deleted.stderr).into_owned(),
    );
    assert!(
        !stdout.is_empty() || stderr.contains("NotFound"),
        "the job deleted: {stdout} {stderr}"
    );
    eventually("the job gone", WAIT, || {
        let out = up.kubectl(&team, &["get", "job", "brief"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (stderr.contains("NotFound"), stderr)
    });
    up.stop();
}
