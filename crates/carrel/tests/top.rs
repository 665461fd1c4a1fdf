//! `kubectl top` in tenants, end to end: `carrel up` with one simulated node, whose kubelet's
//! usage the host serves as `metrics.k8s.io`, and each tenant's own metrics API reading the
//! host's back in its names. Real kubectl of several versions and the official Python client
//! read a tenant's pods' usage, and its node's usage as the sum of its own pods' only; another
//! tenant sees none of it, and RBAC decides who may read it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use carrel_e2e::{fails, kubectl_path, ok};
use common::{apply, create, kubectls, python_args, wait_running, Up};

/// The simulated node all the pods run on.
const NODE: &str = "carrel-sim-0";

/// A pod whose containers use what its annotations say.
const BUSY: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: busy\n  labels:\n    app: busy\n  annotations:\n    sim.carrel.dev/cpu-usage: 250m\n    sim.carrel.dev/memory-usage: 64Mi\nspec:\n  containers:\n  - name: main\n    image: x\n";

/// A pod of two containers using half of what each requests: 100m and 64Mi, then 1m and 4Mi.
const QUIET: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: quiet\nspec:\n  containers:\n  - name: main\n    image: x\n    resources:\n      requests:\n        cpu: 200m\n        memory: 128Mi\n  - name: sidecar\n    image: x\n";

/// Another tenant's pod on the same node, using far more.
const HOG: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hog\n  annotations:\n    sim.carrel.dev/cpu-usage: \"4\"\n    sim.carrel.dev/memory-usage: 8Gi\nspec:\n  containers:\n  - name: main\n    image: x\n";

/// A pod no node takes: it exists, but has no metrics.
const WAITING: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: waiting\nspec:\n  nodeSelector:\n    nowhere: \"true\"\n  containers:\n  - name: main\n    image: x\n";

/// kubectl's columns, each row by its header (`NAME`, `CPU(cores)`, …).
fn rows(out: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let headers: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    lines
        .map(|line| {
            headers
                .iter()
                .zip(line.split_whitespace())
                .map(|(h, cell)| ((*h).to_owned(), cell.to_owned()))
                .collect()
        })
        .collect()
}

/// `(name, cpu, memory)` of each row of `kubectl top`, by the column `name` is in.
fn usage(out: &str, name: &str) -> Vec<(String, String, String)> {
    rows(out)
        .into_iter()
        .map(|r| {
            let cell = |h: &str| r.get(h).cloned().unwrap_or_default();
            (cell(name), cell("CPU(cores)"), cell("MEMORY(bytes)"))
        })
        .collect()
}

fn row(name: &str, cpu: &str, memory: &str) -> (String, String, String) {
    (name.to_owned(), cpu.to_owned(), memory.to_owned())
}

#[test]
fn kubectl_top_shows_a_tenant_its_own_pods_and_its_own_load_on_its_nodes() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let a = create(&up, "team-a", &[]);
    let b = create(&up, "team-b", &[]);
    apply(&up, &a, "busy", BUSY);
    apply(&up, &a, "quiet", QUIET);
    apply(&up, &a, "waiting", WAITING);
    apply(&up, &b, "hog", HOG);
    for pod in ["busy", "quiet"] {
        wait_running(&up, &a, pod);
    }
    wait_running(&up, &b, "hog");

    let mut clients = vec![("1.27", kubectl_path("kubectl.1.27"))];
    clients.extend(kubectls());
    for (version, kubectl) in &clients {
        let run = |kubeconfig: &Path, args: &[&str]| up.kubectl_at(kubectl, kubeconfig, args);
        // The tenant's pods, sorted, each its own usage.
        let top = ok(run(&a, &["top", "pod"]));
        assert_eq!(
            usage(&top, "NAME"),
            [row("busy", "250m", "64Mi"), row("quiet", "101m", "68Mi")],
            "kubectl {version}:\n{top}"
        );
        // Per container, by name and by label.
        let top = ok(run(&a, &["top", "pod", "quiet", "--containers"]));
        let containers: Vec<(String, String, String, String)> = rows(&top)
            .into_iter()
            .map(|r| {
                let cell = |h: &str| r.get(h).cloned().unwrap_or_default();
                (cell("POD"), cell("NAME"), cell("CPU(cores)"), cell("MEMORY(bytes)"))
            })
            .collect();
        assert_eq!(
            containers,
            [
                ("quiet".into(), "main".into(), "100m".into(), "64Mi".into()),
                ("quiet".into(), "sidecar".into(), "1m".into(), "4Mi".into())
            ],
            "kubectl {version}:\n{top}"
        );
        let top = ok(run(&a, &["top", "pod", "-l", "app=busy"]));
        assert_eq!(usage(&top, "NAME"), [row("busy", "250m", "64Mi")], "kubectl {version}");
        // The node: the sum of this tenant's pods there, not the other tenant's 4 cores.
        let top = ok(run(&a, &["top", "node"]));
        assert_eq!(usage(&top, "NAME"), [row(NODE, "351m", "132Mi")], "kubectl {version}:\n{top}");
        // The other tenant sees its own pod only, in every namespace.
        let top = ok(run(&b, &["top", "pod", "-A"]));
        let theirs: Vec<(String, String)> =
            rows(&top).into_iter().map(|r| (r["NAMESPACE"].clone(), r["NAME"].clone())).collect();
        assert_eq!(theirs, [("default".to_owned(), "hog".to_owned())], "kubectl {version}:\n{top}");
        let top = ok(run(&b, &["top", "node"]));
        assert_eq!(
            usage(&top, "NAME"),
            [row(NODE, "4000m", "8192Mi")],
            "kubectl {version}:\n{top}"
        );
        // Names without metrics, in metrics-server's words.
        let err = fails(run(&a, &["top", "pod", "waiting"]));
        assert!(
            err.contains("podmetrics.metrics.k8s.io \"default/waiting\" not found"),
            "kubectl {version}: {err}"
        );
        let err = fails(run(&a, &["top", "pod", "hog"]));
        assert!(err.contains("pods \"hog\" not found"), "kubectl {version}: {err}");
    }

    // The host's own view: the node's whole load, its system's share included.
    let top = ok(up.kubectl(&up.host_kubeconfig(), &["top", "node"]));
    let host = usage(&top, "NAME");
    assert_eq!(host.len(), 1, "{top}");
    let millicores: u64 = host[0].1.trim_end_matches('m').parse().expect("millicores");
    assert!(millicores >= 100 + 250 + 101 + 4000, "{top}");

    // RBAC decides: a user who may read pods but not their metrics is refused, then allowed.
    ok(up.kubectl(&a, &["create", "role", "pod-reader", "--verb=get,list", "--resource=pods"]));
    ok(up
        .kubectl(&a, &["create", "rolebinding", "jane-reads", "--role=pod-reader", "--user=jane"]));
    let err = fails(up.kubectl(&a, &["top", "pod", "--as", "jane"]));
    assert!(
        err.contains("pods.metrics.k8s.io is forbidden: User \"jane\" cannot list resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\""),
        "{err}"
    );
    ok(up.kubectl(
        &a,
        &["create", "role", "top", "--verb=get,list", "--resource=pods.metrics.k8s.io"],
    ));
    ok(up.kubectl(&a, &["create", "rolebinding", "jane-tops", "--role=top", "--user=jane"]));
    let top = ok(up.kubectl(&a, &["top", "pod", "--as", "jane"]));
    assert_eq!(usage(&top, "NAME").len(), 2, "{top}");
    let err = fails(up.kubectl(&a, &["top", "node", "--as", "jane"]));
    assert!(
        err.contains("cannot list resource \"nodes\" in API group \"metrics.k8s.io\""),
        "{err}"
    );
    // Whoever may view may read metrics, as metrics-server's installation grants it.
    ok(up.kubectl(&a, &["create", "rolebinding", "bob-views", "--clusterrole=view", "--user=bob"]));
    let top = ok(up.kubectl(&a, &["top", "pod", "--as", "bob"]));
    assert_eq!(usage(&top, "NAME").len(), 2, "{top}");

    // The official Python client, as a custom resource.
    python_args("top.py", &a, &["busy", "250m", "64Mi"]);
}
