//! Tenant pods on pinned MIG slices, end to end: `carrel up` with simulated GPU nodes, tenants
//! using real kubectl, the host and `carrel gpu map` checked for what they hold.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use carrel_e2e::{fails, ok};
use common::{create, eventually, host_pod_field, Up};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn gpu_pod(name: &str, resource: &str, count: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: cuda\n    resources:\n      limits:\n        {resource}: {count}\n"
    )
}

fn apply(up: &Up, kubeconfig: &Path, manifest: &str) -> std::process::Output {
    let file = up.home.path().join(format!("m-{}.yaml", rand_suffix()));
    std::fs::write(&file, manifest).expect("write manifest");
    up.kubectl(kubeconfig, &["apply", "-f", &file.to_string_lossy()])
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

fn phase(up: &Up, kubeconfig: &Path, pod: &str) -> String {
    String::from_utf8_lossy(
        &up.kubectl(kubeconfig, &["get", "pod", pod, "-o", "jsonpath={.status.phase}"]).stdout,
    )
    .into_owned()
}

fn wait_phase(up: &Up, kubeconfig: &Path, pod: &str, want: &str) {
    eventually(&format!("pod {pod} {want}"), WAIT, || {
        let p = phase(up, kubeconfig, pod);
        (p == want, p)
    });
}

fn json(out: std::process::Output) -> Value {
    serde_json::from_str(&ok(out)).expect("JSON")
}

/// Held instances of the map: (tenant, namespace, pod, gpu, start, uuid).
fn held(up: &Up) -> Vec<(String, String, String, String, u64, String)> {
    let map = json(up.carrel(&["gpu", "map", "-o", "json"]));
    let mut out = Vec::new();
    for node in map["nodes"].as_array().expect("nodes") {
        for gpu in node["gpus"].as_array().expect("gpus") {
            for i in gpu["instances"].as_array().expect("instances") {
                if let Some(tenant) = i["tenant"].as_str() {
                    out.push((
                        tenant.to_owned(),
                        i["namespace"].as_str().unwrap_or_default().to_owned(),
                        i["pod"].as_str().unwrap_or_default().to_owned(),
                        gpu["uuid"].as_str().unwrap_or_default().to_owned(),
                        i["start"].as_u64().unwrap_or_default(),
                        i["uuid"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn gpu_pods_get_their_own_slices_within_quota() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let a = create(&up, "team-a", &["--gpu", "1g.18gb=3"]);
    let b = create(&up, "team-b", &["--gpu", "mig-1g.18gb=1"]);
    ok(apply(&up, &a, &gpu_pod("a1", "nvidia.com/mig-1g.18gb", 1)));
    ok(apply(&up, &a, &gpu_pod("a2", "nvidia.com/mig-1g.18gb", 2)));
    ok(apply(&up, &b, &gpu_pod("b1", "nvidia.com/mig-1g.18gb", 1)));
    for (k, p) in [(&a, "a1"), (&a, "a2"), (&b, "b1")] {
        wait_phase(&up, k, p, "Running");
    }

    // Four slices, four distinct places, each held by the pod that asked.
    let held = held(&up);
    assert_eq!(held.len(), 4, "{held:?}");
    let places: BTreeSet<(String, u64)> = held.iter().map(|h| (h.3.clone(), h.4)).collect();
    assert_eq!(places.len(), 4, "{held:?}");
    let holders: Vec<(&str, &str)> = held.iter().map(|h| (h.0.as_str(), h.2.as_str())).collect();
    assert_eq!(holders, [("team-a", "a1"), ("team-a", "a2"), ("team-a", "a2"), ("team-b", "b1")]);

    // The host pod is pinned to its devices through CDI, without nvidia.com resources.
    let host = up.host_kubeconfig();
    // Each tenant's usage is counted from its claims.
    for (tenant, want) in [("team-a", "{\"1g.18gb\":3}"), ("team-b", "{\"1g.18gb\":1}")] {
        eventually(&format!("{tenant}'s usage"), WAIT, || {
            let out =
                up.kubectl(&host, &["get", "tenant", tenant, "-o", "jsonpath={.status.gpuUsage}"]);
            let usage = String::from_utf8_lossy(&out.stdout).into_owned();
            (usage == want, usage)
        });
    }
    let hp = json(
        up.kubectl(&host, &["get", "pod", "a2-x-default", "-n", "carrel-team-a", "-o", "json"]),
    );
    let cdi = hp["metadata"]["annotations"]["cdi.k8s.io/carrel-gpu"].as_str().expect("CDI");
    let mut mine: Vec<String> =
        held.iter().filter(|h| h.2 == "a2").map(|h| format!("nvidia.com/gpu={}", h.5)).collect();
    mine.sort();
    let mut named: Vec<&str> = cdi.split(',').collect();
    named.sort();
    assert_eq!(named, mine.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(held.iter().all(|h| h.5.starts_with("MIG-")), "{held:?}");
    assert_eq!(hp["spec"]["nodeName"], "carrel-sim-0");
    assert!(!hp["spec"].to_string().contains("nvidia.com"), "{}", hp["spec"]);
    assert_eq!(hp["spec"]["automountServiceAccountToken"], false);
    // No NVIDIA_* variable but the one NVIDIA documents for CDI-only selection (beside the
    // `KUBERNETES_*` family naming the tenant's API).
    assert_eq!(
        without_api_env(&hp["spec"]["containers"][0]["env"]),
        serde_json::json!([{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]),
        "{hp}"
    );

    // The next pod over quota is refused, naming profile, usage and quota.
    let err = fails(apply(&up, &a, &gpu_pod("a3", "nvidia.com/mig-1g.18gb", 1)));
    assert!(
        err.contains("exceeded GPU quota: requested: nvidia.com/mig-1g.18gb=1, used: nvidia.com/mig-1g.18gb=3, limited: nvidia.com/mig-1g.18gb=3"),
        "{err}"
    );

    // Each tenant sees its own pods, and one node that shows its own quota.
    assert_eq!(ok(up.kubectl(&b, &["get", "pods", "-o", "name"])), "pod/b1\n");
    let nodes = json(up.kubectl(&b, &["get", "nodes", "-o", "json"]));
    let items = nodes["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{nodes}");
    assert_eq!(items[0]["metadata"]["name"], "carrel-sim-0");
    assert_eq!(items[0]["status"]["allocatable"]["nvidia.com/mig-1g.18gb"], "1");
    let node_a = ok(up.kubectl(
        &a,
        &[
            "get",
            "node",
            "carrel-sim-0",
            "-o",
            "jsonpath={.status.allocatable.nvidia\\.com/mig-1g\\.18gb}",
        ],
    ));
    assert_eq!(node_a, "3");
    // A new quota shows on the node at once.
    ok(up.kubectl(
        &host,
        &[
            "patch",
            "tenant",
            "team-b",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"gpuQuota":{"mig-1g.18gb":2}}}"#,
        ],
    ));
    eventually("team-b's node shows its new quota", WAIT, || {
        let n = ok(up.kubectl(
            &b,
            &[
                "get",
                "node",
                "carrel-sim-0",
                "-o",
                "jsonpath={.status.allocatable.nvidia\\.com/mig-1g\\.18gb}",
            ],
        ));
        (n == "2", n)
    });
    assert_eq!(
        ok(up.kubectl(&b, &["get", "pod", "b1", "-o", "jsonpath={.spec.nodeName}"])),
        "carrel-sim-0"
    );

    // Logs come from the host pod.
    let logs = ok(up.kubectl(&a, &["logs", "a1"]));
    assert!(logs.contains("started on carrel-sim-0"), "{logs}");

    // Deleting a pod frees its slices; the host pod and its claims go with it.
    ok(up.kubectl(&a, &["delete", "pod", "a2"]));
    eventually("a2's slices freed", WAIT, || {
        let h = self::held(&up);
        (h.len() == 2, h)
    });
    eventually("a2's host pod gone", WAIT, || {
        let out = up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "name"]);
        let names = String::from_utf8_lossy(&out.stdout).into_owned();
        (names == "pod/a1-x-default\n", names)
    });
    let leases = ok(up.kubectl(&host, &["get", "leases", "-n", "carrel", "-o", "name"]));
    assert_eq!(leases.lines().count(), 2, "{leases}");

    // A host pod deleted under its tenant shows as Failed with the reason.
    ok(up.kubectl(&host, &["delete", "pod", "a1-x-default", "-n", "carrel-team-a"]));
    wait_phase(&up, &a, "a1", "Failed");
    let reason = ok(up.kubectl(&a, &["get", "pod", "a1", "-o", "jsonpath={.status.reason}"]));
    assert_eq!(reason, "HostPodDeleted");
    eventually("a1's slice freed", WAIT, || {
        let h = self::held(&up);
        (h.len() == 1, h)
    });
}

#[test]
fn a_freed_slice_goes_to_another_tenant_and_unsafe_pods_never_reach_the_host() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let a = create(&up, "team-a", &["--gpu", "7g.141gb=1"]);
    let b = create(&up, "team-b", &["--gpu", "7g.141gb=1"]);
    ok(apply(&up, &a, &gpu_pod("whole", "nvidia.com/gpu", 1)));
    wait_phase(&up, &a, "whole", "Running");
    ok(apply(&up, &b, &gpu_pod("waits", "nvidia.com/mig-7g.141gb", 1)));
    // The only GPU is taken: b's pod waits, and says why.
    let message = eventually("b's pod unschedulable", WAIT, || {
        let m = ok(up.kubectl(
            &b,
            &[
                "get",
                "pod",
                "waits",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ],
        ));
        (!m.is_empty(), m)
    });
    assert!(message.contains("7g.141gb"), "{message}");
    assert_eq!(phase(&up, &b, "waits"), "Pending");
    let events = ok(up.kubectl(&b, &["get", "events", "-o", "jsonpath={.items[*].reason}"]));
    assert!(events.contains("FailedScheduling"), "{events}");
    ok(up.kubectl(&a, &["delete", "pod", "whole"]));
    wait_phase(&up, &b, "waits", "Running");
    let held = held(&up);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].0.as_str(), held[0].2.as_str()), ("team-b", "waits"));

    let refused = [
        (
            "privileged",
            "    securityContext:\n      privileged: true\n",
            "privileged (container \"main\" must not set securityContext.privileged=true)",
        ),
        (
            "env",
            "    env:\n    - name: NVIDIA_VISIBLE_DEVICES\n      value: all\n",
            "container \"main\" sets NVIDIA_VISIBLE_DEVICES",
        ),
    ];
    for (name, extra, why) in refused {
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: x\n{extra}"
        );
        let err = fails(apply(&up, &a, &manifest));
        assert!(err.contains("forbidden") && err.contains(why), "{err}");
    }
    let host_path = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: hostpath\nspec:\n  containers:\n  - name: main\n    image: x\n  volumes:\n  - name: root\n    hostPath:\n      path: /\n";
    let err = fails(apply(&up, &a, host_path));
    assert!(
        err.contains(
            "violates PodSecurity \"baseline:latest\": hostPath volumes (volume \"root\")"
        ),
        "{err}"
    );
    let host = up.host_kubeconfig();
    let host_pods = ok(up.kubectl(&host, &["get", "pods", "-A", "-o", "name"]));
    assert_eq!(host_pods, "pod/waits-x-default\n", "nothing refused reached the host");
}

#[test]
fn killing_carrel_up_loses_no_pod_and_duplicates_nothing() {
    let data = tempfile::tempdir().unwrap();
    let args = ["--sim-nodes", "2", "--sim-gpus", "h200x1"];
    let up = Up::start_args(data.path(), &args);
    let a = create(&up, "team-a", &["--gpu", "1g.18gb=4"]);
    for i in 0..3 {
        ok(apply(&up, &a, &gpu_pod(&format!("p{i}"), "nvidia.com/mig-1g.18gb", 1)));
    }
    ok(apply(&up, &a, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cpu\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    for p in ["p0", "p1", "p2", "cpu"] {
        wait_phase(&up, &a, p, "Running");
    }
    // A CPU pod is scheduled by the embedded host onto a simulated node.
    let node = ok(up.kubectl(&a, &["get", "pod", "cpu", "-o", "jsonpath={.spec.nodeName}"]));
    assert!(node.starts_with("carrel-sim-"), "{node}");
    let before = held(&up);
    // A pod created right before the kill, maybe half synced.
    ok(apply(&up, &a, &gpu_pod("late", "nvidia.com/mig-1g.18gb", 1)));
    up.kill9();

    // The restarted server listens on another port: the tenant's kubeconfig is fetched again.
    let up = Up::start_args(data.path(), &args);
    let a2 = up.home.path().join("team-a-again.kubeconfig");
    std::fs::write(&a2, ok(up.carrel(&["tenant", "kubeconfig", "team-a"]))).unwrap();
    for p in ["p0", "p1", "p2", "cpu", "late"] {
        wait_phase(&up, &a2, p, "Running");
    }
    let after = held(&up);
    assert_eq!(after.len(), 4, "{after:?}");
    for h in &before {
        assert!(
            after.contains(h) || after.iter().any(|x| x.2 == h.2 && x.3 == h.3 && x.4 == h.4),
            "{h:?} moved: {after:?}"
        );
    }
    let host = up.host_kubeconfig();
    let host_pods = ok(up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "name"]));
    let mut names: Vec<&str> = host_pods.lines().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "pod/cpu-x-default",
            "pod/late-x-default",
            "pod/p0-x-default",
            "pod/p1-x-default",
            "pod/p2-x-default"
        ]
    );
    // Every claim Lease belongs to a live pod.
    let leases = json(up.kubectl(&host, &["get", "leases", "-n", "carrel", "-o", "json"]));
    for lease in leases["items"].as_array().expect("items") {
        let pod = lease["metadata"]["labels"]["gpu.carrel.dev/host-pod"].as_str().expect("holder");
        assert!(names.contains(&format!("pod/{pod}").as_str()), "orphaned claim of {pod}");
    }
    assert_eq!(leases["items"].as_array().map(Vec::len), Some(4));
}

#[test]
fn simulated_pods_finish_as_told_and_their_logs_reach_the_tenant() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let t = create(&up, "team-a", &[]);
    let job = |name: &str, code: u32| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  annotations:\n    sim.carrel.dev/run-seconds: \"1\"\n    sim.carrel.dev/exit-code: \"{code}\"\n    sim.carrel.dev/log: \"epoch 1\\nepoch 2\"\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: x\n"
        )
    };
    ok(apply(&up, &t, &job("good", 0)));
    ok(apply(&up, &t, &job("bad", 3)));
    wait_phase(&up, &t, "good", "Running");
    // Followed while it runs, the log ends when the container does.
    let followed = ok(up.kubectl(&t, &["logs", "-f", "good"]));
    assert!(followed.contains("epoch 1\nepoch 2"), "{followed}");
    wait_phase(&up, &t, "good", "Succeeded");
    wait_phase(&up, &t, "bad", "Failed");
    let code = ok(up.kubectl(
        &t,
        &[
            "get",
            "pod",
            "bad",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}",
        ],
    ));
    assert_eq!(code, "3");
    let logs = ok(up.kubectl(&t, &["logs", "bad", "--tail", "1"]));
    assert_eq!(logs, "epoch 2\n");
    let err = fails(up.kubectl(&t, &["logs", "good", "-c", "nope"]));
    assert!(err.contains("container nope is not valid for pod good"), "{err}");

    // A field naming what only the tenant's cluster has runs without it, and the tenant is told.
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sandboxed\nspec:\n  runtimeClassName: gvisor\n  containers:\n  - name: main\n    image: x\n"));
    wait_phase(&up, &t, "sandboxed", "Running");
    let events = ok(up.kubectl(
        &t,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=sandboxed",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    ));
    assert!(events.contains("the host pod runs without runtimeClassName"), "{events}");
    // A volume whose source the syncer does not carry is refused: on the host it would name the
    // host's Endpoints of that name.
    let err = fails(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: stateful\nspec:\n  containers:\n  - name: main\n    image: x\n  volumes:\n  - name: data\n    glusterfs:\n      endpoints: gluster\n      path: data\n"));
    assert!(
        err.contains("forbidden")
            && err.contains("spec.volumes[0].glusterfs.endpoints: Endpoints \"gluster\""),
        "{err}"
    );
    // A pod name with dots makes a valid host pod too.
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web.v2\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    wait_phase(&up, &t, "web.v2", "Running");
}

/// The message of pod `pod`'s `PodScheduled` condition, once it has one.
fn why_waiting(up: &Up, kubeconfig: &Path, pod: &str, want: &str) -> String {
    eventually(&format!("pod {pod} says why it waits"), WAIT, || {
        let m = ok(up.kubectl(
            kubeconfig,
            &[
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].message}",
            ],
        ));
        (m.contains(want), m)
    })
}

fn node_of(up: &Up, kubeconfig: &Path, pod: &str) -> String {
    ok(up.kubectl(kubeconfig, &["get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"]))
}

#[test]
fn pods_go_only_where_their_selector_affinity_and_tolerations_allow() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "2", "--sim-gpus", "h200x1"]);
    let t = create(&up, "team-a", &["--gpu", "1g.18gb=6"]);
    let host = up.host_kubeconfig();
    let limits = |gpu: bool| {
        if gpu {
            "    resources:\n      limits:\n        nvidia.com/mig-1g.18gb: 1\n"
        } else {
            ""
        }
    };
    let selected = |name: &str, node: &str, gpu: bool| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  nodeSelector:\n    kubernetes.io/hostname: {node}\n  containers:\n  - name: main\n    image: x\n{}",
            limits(gpu)
        )
    };
    let affine = |name: &str, op: &str, node: &str, gpu: bool| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions:\n          - key: kubernetes.io/hostname\n            operator: {op}\n            values: [{node}]\n  containers:\n  - name: main\n    image: x\n{}",
            limits(gpu)
        )
    };
    // nodeSelector and required node affinity, for GPU pods (the syncer's allocator) and plain
    // ones (the host's scheduler) alike.
    ok(apply(&up, &t, &selected("gpu", "carrel-sim-1", true)));
    ok(apply(&up, &t, &selected("plain", "carrel-sim-1", false)));
    ok(apply(&up, &t, &affine("gpu-affine", "NotIn", "carrel-sim-0", true)));
    ok(apply(&up, &t, &affine("plain-affine", "In", "carrel-sim-1", false)));
    for name in ["gpu", "plain", "gpu-affine", "plain-affine"] {
        wait_phase(&up, &t, name, "Running");
        assert_eq!(node_of(&up, &t, name), "carrel-sim-1", "{name}");
    }
    // Where no node will do, the pod waits and says why in kube-scheduler's words, with a
    // FailedScheduling event.
    let nowhere = "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.";
    ok(apply(&up, &t, &selected("nowhere", "no-such-node", true)));
    ok(apply(&up, &t, &affine("nowhere-plain", "In", "no-such-node", false)));
    for name in ["nowhere", "nowhere-plain"] {
        assert_eq!(why_waiting(&up, &t, name, "0/2"), nowhere, "{name}");
        assert_eq!(phase(&up, &t, name), "Pending");
        eventually(&format!("a FailedScheduling event for {name}"), WAIT, || {
            let events = ok(up.kubectl(
                &t,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    &format!("involvedObject.name={name},reason=FailedScheduling"),
                    "-o",
                    "jsonpath={.items[*].message}",
                ],
            ));
            (events.contains("node(s) didn't match"), events)
        });
    }
    // A cordoned node takes no new pod, GPU or plain; uncordoned, it takes them again.
    ok(up.kubectl(&host, &["cordon", "carrel-sim-1"]));
    let shown = |path: &str| {
        ok(up.kubectl(&t, &["get", "node", "carrel-sim-1", "-o", &format!("jsonpath={{{path}}}")]))
    };
    eventually("the tenant's node shows the cordon", WAIT, || {
        let u = shown(".spec.unschedulable");
        (u == "true", u)
    });
    ok(apply(&up, &t, &selected("gpu-cordoned", "carrel-sim-1", true)));
    ok(apply(&up, &t, &selected("plain-cordoned", "carrel-sim-1", false)));
    for name in ["gpu-cordoned", "plain-cordoned"] {
        let why = why_waiting(&up, &t, name, "unschedulable");
        assert_eq!(
            why,
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 \
             node(s) were unschedulable.",
            "{name}"
        );
    }
    ok(up.kubectl(&host, &["uncordon", "carrel-sim-1"]));
    eventually("the tenant's node shows the cordon lifted", WAIT, || {
        let u = shown(".spec.unschedulable");
        (u.is_empty(), u)
    });
    for name in ["gpu-cordoned", "plain-cordoned"] {
        wait_phase(&up, &t, name, "Running");
        assert_eq!(node_of(&up, &t, name), "carrel-sim-1", "{name}");
    }
    // A GPU taint keeps plain pods off a node; GPU pods tolerate it, as Kubernetes'
    // ExtendedResourceToleration makes them. The tenant sees the taint on its node.
    ok(up.kubectl(&host, &["taint", "nodes", "carrel-sim-1", "nvidia.com/gpu=present:NoSchedule"]));
    eventually("the tenant's node shows the taint", WAIT, || {
        let taint = shown(".spec.taints[*].key");
        (taint == "nvidia.com/gpu", taint)
    });
    ok(apply(&up, &t, &selected("gpu-tainted", "carrel-sim-1", true)));
    ok(apply(&up, &t, &selected("plain-tainted", "carrel-sim-1", false)));
    wait_phase(&up, &t, "gpu-tainted", "Running");
    assert_eq!(node_of(&up, &t, "gpu-tainted"), "carrel-sim-1");
    let why = why_waiting(&up, &t, "plain-tainted", "taint");
    assert_eq!(
        why,
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) \
         had untolerated taint {nvidia.com/gpu: present}."
    );
    assert_eq!(phase(&up, &t, "plain-tainted"), "Pending");
}

#[test]
fn a_full_node_takes_no_more_pods_until_one_ends() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(
        data.path(),
        &["--sim-nodes", "1", "--sim-gpus", "h200x1", "--sim-max-pods", "2"],
    );
    let t = create(&up, "team-a", &["--gpu", "1g.18gb=2"]);
    let host = up.host_kubeconfig();
    let plain = |name: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: x\n")
    };
    ok(apply(&up, &t, &plain("p1")));
    ok(apply(&up, &t, &plain("p2")));
    let mut ips = BTreeSet::new();
    for name in ["p1", "p2"] {
        wait_phase(&up, &t, name, "Running");
        let ip = ok(up.kubectl(&t, &["get", "pod", name, "-o", "jsonpath={.status.podIP}"]));
        assert!(ip.starts_with("10.128.0."), "{name}: {ip}");
        ips.insert(ip);
    }
    assert_eq!(ips.len(), 2, "distinct pod IPs");
    let node = json(up.kubectl(&t, &["get", "node", "carrel-sim-0", "-o", "json"]));
    assert_eq!(node["status"]["allocatable"]["pods"], "2");

    // The node is full: a plain pod and a GPU pod both wait, saying so.
    ok(apply(&up, &t, &plain("p3")));
    ok(apply(&up, &t, &gpu_pod("g1", "nvidia.com/mig-1g.18gb", 1)));
    for name in ["p3", "g1"] {
        assert_eq!(
            why_waiting(&up, &t, name, "Too many pods"),
            "0/1 nodes are available: 1 Too many pods.",
            "{name}"
        );
    }
    // A pod bound to the full node by name fails, as a kubelet refuses it.
    let direct = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: direct\n  namespace: default\nspec:\n  nodeName: carrel-sim-0\n  containers:\n  - name: main\n    image: x\n";
    ok(apply(&up, &host, direct));
    wait_phase(&up, &host, "direct", "Failed");
    let status = json(up.kubectl(&host, &["get", "pod", "direct", "-o", "json"]))["status"].clone();
    assert_eq!(status["reason"], "OutOfpods", "{status}");
    assert_eq!(
        status["message"],
        "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
    );

    // Room made, the waiting pods run.
    ok(up.kubectl(&t, &["delete", "pod", "p1", "p2"]));
    for name in ["p3", "g1"] {
        wait_phase(&up, &t, name, "Running");
    }
}

/// The `reason: message` of the events about `pod`, once they include every one of `want`.
fn events_of(up: &Up, kubeconfig: &Path, pod: &str, want: &[&str]) -> Vec<String> {
    eventually(&format!("the events of {pod}"), WAIT, || {
        let list = json(up.kubectl(
            kubeconfig,
            &[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={pod}"),
                "-o",
                "json",
            ],
        ));
        let said: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["reason"].as_str().unwrap_or(""),
                    e["message"].as_str().unwrap_or("")
                )
            })
            .collect();
        (want.iter().all(|w| said.iter().any(|s| s == w)), said)
    })
}

#[test]
fn a_tenant_sees_its_pods_scheduled_started_and_backing_off_in_its_own_names() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let t = create(&up, "team-a", &["--gpu", "1g.18gb=1"]);
    let started = [
        "Pulled: Container image \"x\" already present on machine",
        "Created: Created container: main",
        "Started: Started container main",
    ];
    // A plain pod, placed by the host's scheduler, and a GPU pod, placed by the syncer.
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    ok(apply(
        &up,
        &t,
        &gpu_pod("train", "nvidia.com/mig-1g.18gb", 1).replace("image: cuda", "image: x"),
    ));
    for pod in ["web", "train"] {
        let scheduled = format!("Scheduled: Successfully assigned default/{pod} to carrel-sim-0");
        let mut want = vec![scheduled.as_str()];
        want.extend(started);
        let said = events_of(&up, &t, pod, &want);
        assert!(!said.iter().any(|s| s.contains("carrel-team-a") || s.contains("-x-")), "{said:?}");
    }
    // A container that keeps failing backs off, and the message names the tenant's pod.
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: flaky\n  annotations:\n    sim.carrel.dev/run-seconds: \"0.1\"\n    sim.carrel.dev/exit-code: \"1\"\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    let uid = eventually("flaky's UID", WAIT, || {
        let u = ok(up.kubectl(&t, &["get", "pod", "flaky", "-o", "jsonpath={.metadata.uid}"]));
        (!u.is_empty(), u)
    });
    let backoff =
        format!("BackOff: Back-off restarting failed container main in pod flaky_default({uid})");
    events_of(&up, &t, "flaky", &[&backoff]);
    // Deleting a running pod stops its containers.
    ok(up.kubectl(&t, &["delete", "pod", "web"]));
    let host = up.host_kubeconfig();
    eventually("the kubelet says it stopped web's container", WAIT, || {
        let messages = ok(up.kubectl(
            &host,
            &[
                "get",
                "events",
                "-n",
                "carrel-team-a",
                "--field-selector",
                "involvedObject.name=web-x-default,reason=Killing",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        ));
        (messages == "Stopping container main", messages)
    });
}

/// A kube client from a kubeconfig file.
async fn kube_client(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

#[test]
fn with_no_syncers_a_syncer_run_apart_brings_tenant_pods_to_the_host() {
    let data = tempfile::tempdir().unwrap();
    let up =
        Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1", "--no-syncers"]);
    let host = up.host_kubeconfig();
    let t = create(&up, "team-a", &["--gpu", "1g.18gb=1"]);
    let mut manifest = gpu_pod("train", "nvidia.com/mig-1g.18gb", 1);
    manifest = manifest.replace(
        "metadata:\n  name: train\n",
        "metadata:\n  name: train\n  annotations:\n    sim.carrel.dev/log: \"step 1\"\n",
    );
    ok(apply(&up, &t, &manifest));
    // The pod is stored in the tenant (no window holds it) and nothing inside `carrel up`
    // takes it to the host.
    std::thread::sleep(Duration::from_secs(1));
    let host_pods = ok(up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "name"]));
    assert_eq!(host_pods, "");
    assert_eq!(phase(&up, &t, "train"), "Pending");
    assert!(held(&up).is_empty());

    // A syncer of its own, as `carrel-syncer` runs one, does.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let syncer = rt.spawn({
        let (t, host) = (t.clone(), host.clone());
        async move {
            let config = carrel_syncer::Config {
                tenant: "team-a".into(),
                host_namespace: "carrel-team-a".into(),
                gpu_quota: carrel_gpu::requests::parse_quota(&["1g.18gb=1"]).expect("quota"),
                tenant_ca_pem: None,
                tenant_api: None,
                gpu_runtime_class: Some("nvidia".into()),
                cluster_dns: carrel_syncer::ClusterDns::TenantService,
                resync: Duration::from_secs(10),
            };
            let syncer = carrel_syncer::Syncer::standalone(
                kube_client(&t).await,
                kube_client(&host).await,
                config,
            );
            syncer.run(stop_rx).await;
        }
    });
    wait_phase(&up, &t, "train", "Running");
    let annotations = host_pod_field(&up, "team-a", "train", "{.metadata.annotations}");
    assert!(annotations.contains("cdi.k8s.io/"), "{annotations}");
    // The handler that injects what the annotation names, as the syncer was told.
    assert_eq!(host_pod_field(&up, "team-a", "train", "{.spec.runtimeClassName}"), "nvidia");
    let held = held(&up);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!((held[0].0.as_str(), held[0].2.as_str()), ("team-a", "train"));
    // The tenant's pod logs come from the host whoever syncs.
    assert_eq!(ok(up.kubectl(&t, &["logs", "train", "--tail", "1"])), "step 1\n");
    let _ = stop.send(true);
    rt.block_on(syncer).expect("the syncer stops");
}

#[test]
fn pod_tokens_are_renewed_before_they_expire_and_removed_once_unused() {
    use base64::Engine;
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let host = up.host_kubeconfig();
    let t = create(&up, "team-a", &[]);
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    wait_phase(&up, &t, "web", "Running");
    let secret_name = "default-x-default.sa-token";
    let read = || {
        let s = json(
            up.kubectl(&host, &["get", "secret", "-n", "carrel-team-a", secret_name, "-o", "json"]),
        );
        let token = s["data"]["token"].as_str().expect("a token").to_owned();
        let expires = s["metadata"]["annotations"]["carrel.dev/token-expires"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .expect("an expiry");
        (token, expires)
    };
    let (first, expires) = read();
    let day = chrono::Utc::now() + chrono::Duration::hours(23);
    assert!(expires > day, "{expires}");

    // With most of its life gone, the token is renewed, as a kubelet refreshes a projected one.
    let soon = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    ok(up.kubectl(
        &host,
        &[
            "annotate",
            "--overwrite",
            "secret",
            "-n",
            "carrel-team-a",
            secret_name,
            &format!("carrel.dev/token-expires={soon}"),
        ],
    ));
    let (renewed, expires) = eventually("the token renewed", WAIT, || {
        let (token, expires) = read();
        (token != first && expires > day, (token, expires))
    });
    assert!(expires > day);
    // The new token is the service account's, to the tenant API.
    let token = base64::engine::general_purpose::STANDARD.decode(&renewed).expect("base64");
    let review = up.home.path().join("review.json");
    std::fs::write(
        &review,
        serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": String::from_utf8(token).unwrap()}}).to_string(),
    )
    .unwrap();
    let who = ok(up.kubectl(
        &t,
        &["create", "-f", &review.to_string_lossy(), "-o", "jsonpath={.status.user.username}"],
    ));
    assert_eq!(who, "system:serviceaccount:default:default");

    // No pod uses it any more: it leaves the host.
    ok(up.kubectl(&t, &["delete", "pod", "web", "--wait=false"]));
    eventually("the token Secret removed", WAIT, || {
        let out = up.kubectl(&host, &["get", "secret", "-n", "carrel-team-a", secret_name]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (err.contains("NotFound"), err)
    });
}

#[test]
fn no_tenant_takes_carrels_namespace_or_a_host_namespace_made_by_someone_else() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let host = up.host_kubeconfig();
    let a = create(&up, "team-a", &["--gpu", "1g.18gb=1"]);
    ok(apply(&up, &a, &gpu_pod("a1", "nvidia.com/mig-1g.18gb", 1)));
    wait_phase(&up, &a, "a1", "Running");
    let leases = || ok(up.kubectl(&host, &["get", "leases", "-n", "carrel", "-o", "name"]));
    let before = leases();
    assert!(!before.trim().is_empty(), "team-a's claim");

    // Reserved names are refused, by the CLI and by the host API (422 Invalid).
    for name in ["system", "carrel", "host", "default", "kube-system", "kube-node-lease", "kube-x"]
    {
        let err = fails(up.carrel(&["tenant", "create", name]));
        assert!(err.contains("reserved"), "{name}: {err}");
    }
    let file = up.home.path().join("system.yaml");
    std::fs::write(
        &file,
        "apiVersion: carrel.dev/v1alpha1\nkind: Tenant\nmetadata:\n  name: system\n",
    )
    .unwrap();
    let err = fails(up.kubectl(&host, &["create", "-f", &file.to_string_lossy()]));
    assert!(err.contains("is invalid") && err.contains("reserved"), "{err}");
    let tenants = ok(up.kubectl(&host, &["get", "tenants", "-o", "name"]));
    assert_eq!(tenants.trim(), "tenant.carrel.dev/team-a");
    // Carrel's namespace and the other tenant's claims are untouched.
    ok(up.kubectl(&host, &["get", "namespace", "carrel"]));
    assert_eq!(leases(), before);
    assert_eq!(phase(&up, &a, "a1"), "Running");

    // A host namespace `carrel-x` made by someone else is neither adopted nor deleted.
    ok(up.kubectl(&host, &["create", "namespace", "carrel-x"]));
    ok(up.kubectl(
        &host,
        &["create", "configmap", "theirs", "-n", "carrel-x", "--from-literal=k=v"],
    ));
    let err = fails(up.carrel(&["tenant", "create", "x", "--wait"]));
    assert!(err.contains("does not record this tenant's UID"), "{err}");
    let reason = ok(up
        .kubectl(&host, &["get", "tenants", "x", "-o", "jsonpath={.status.conditions[0].reason}"]));
    assert_eq!(reason, "HostNamespaceNotOwned");
    let err = fails(up.carrel(&["tenant", "kubeconfig", "x"]));
    assert!(err.contains("was not created for tenant x"), "{err}");
    ok(up.carrel(&["tenant", "delete", "x", "--wait"]));
    let kept = ok(up.kubectl(
        &host,
        &["get", "configmap", "theirs", "-n", "carrel-x", "-o", "jsonpath={.data.k}"],
    ));
    assert_eq!(kept, "v");
    let ns = json(up.kubectl(&host, &["get", "namespace", "carrel-x", "-o", "json"]));
    assert!(ns["metadata"]["deletionTimestamp"].is_null(), "{ns}");
    assert_eq!(leases(), before);
    assert_eq!(phase(&up, &a, "a1"), "Running");
}

#[test]
fn tenant_objects_that_once_shared_a_host_name_map_apart() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let host = up.host_kubeconfig();
    let t = create(&up, "team-a", &[]);
    // Pod `a-x` in `b` and pod `a` in `x-b` both read `a-x-x-b`; so did their accounts' token
    // Secrets.
    for (namespace, name) in [("b", "a-x"), ("x-b", "a")] {
        ok(up.kubectl(&t, &["create", "namespace", namespace]));
        ok(up.kubectl(&t, &["create", "serviceaccount", name, "-n", namespace]));
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  serviceAccountName: {name}\n  containers:\n  - name: main\n    image: x\n"
        );
        ok(apply(&up, &t, &pod));
    }
    for (namespace, name) in [("b", "a-x"), ("x-b", "a")] {
        eventually(&format!("pod {namespace}/{name} Running"), WAIT, || {
            let p = String::from_utf8_lossy(
                &up.kubectl(
                    &t,
                    &["get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}"],
                )
                .stdout,
            )
            .into_owned();
            (p == "Running", p)
        });
    }
    let pods = json(up.kubectl(&host, &["get", "pods", "-n", "carrel-team-a", "-o", "json"]));
    let pods = pods["items"].as_array().expect("items").clone();
    assert_eq!(pods.len(), 2, "{pods:?}");
    let secrets = json(up.kubectl(&host, &["get", "secrets", "-n", "carrel-team-a", "-o", "json"]));
    let mut tokens = BTreeSet::new();
    for secret in secrets["items"].as_array().expect("items") {
        let a = &secret["metadata"]["annotations"];
        if let Some(account) = a["carrel.dev/tenant-service-account"].as_str() {
            let namespace = a["carrel.dev/tenant-namespace"].as_str().unwrap_or_default();
            let name = secret["metadata"]["name"].as_str().unwrap_or_default();
            tokens.insert((namespace.to_owned(), account.to_owned(), name.to_owned()));
        }
    }
    let mut seen = BTreeSet::new();
    for pod in &pods {
        let a = &pod["metadata"]["annotations"];
        let (namespace, name) = (
            a["carrel.dev/tenant-namespace"].as_str().unwrap_or_default(),
            a["carrel.dev/tenant-name"].as_str().unwrap_or_default(),
        );
        seen.insert((namespace.to_owned(), name.to_owned()));
        // Each mounts its own account's token.
        let volume = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "carrel-tenant-token")
            .expect("a token volume");
        let secret = volume["secret"]["secretName"].as_str().unwrap_or_default().to_owned();
        assert!(
            tokens.contains(&(namespace.to_owned(), name.to_owned(), secret.clone())),
            "{namespace}/{name} mounts {secret}; tokens: {tokens:?}"
        );
    }
    let want: BTreeSet<(String, String)> =
        [("b", "a-x"), ("x-b", "a")].iter().map(|(n, p)| (n.to_string(), p.to_string())).collect();
    assert_eq!(seen, want);
    assert_eq!(tokens.len(), 2, "{tokens:?}");
}

/// The host pod of tenant pod `default/name`, once the syncer made it.
fn host_pod_of(up: &Up, name: &str) -> Value {
    let host = up.host_kubeconfig();
    eventually(&format!("host pod of {name}"), WAIT, || {
        let out = up.kubectl(&host, &["get", "pods", "-A", "-o", "json"]);
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let found = list["items"].as_array().into_iter().flatten().find(|p| {
            p.pointer("/metadata/annotations/carrel.dev~1tenant-name").and_then(Value::as_str)
                == Some(name)
        });
        (found.is_some(), found.cloned().unwrap_or_default())
    })
}

#[test]
fn no_runtime_or_loader_variable_reaches_a_container_by_env_from_and_references_stay_the_tenants() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let t = create(&up, "team-a", &["--gpu", "1g.18gb=1"]);
    let pod = |name: &str, container: &str, volumes: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: main\n    image: x\n{container}{volumes}"
        )
    };
    ok(up.kubectl(&t, &["create", "configmap", "cfg", "--from-literal=A=1"]));
    ok(up.kubectl(&t, &["create", "configmap", "bad", "--from-literal=LD_PRELOAD=/x.so"]));
    ok(up.kubectl(
        &t,
        &["create", "secret", "generic", "gpus", "--from-literal=NVIDIA_VISIBLE_DEVICES=all"],
    ));

    // Refused in the tenant API: a prefix that makes a refused name, a source holding one, the
    // loader family in env with odd spacing, and in init containers and sidecars.
    let refused = [
        (pod("prefix", "    envFrom:\n    - prefix: NVIDIA_\n      configMapRef:\n        name: cfg\n", ""), "container \"main\" sets envFrom prefix \"NVIDIA_\""),
        (pod("loader", "    envFrom:\n    - configMapRef:\n        name: bad\n", ""), "container \"main\" gets LD_PRELOAD from key \"LD_PRELOAD\" of ConfigMap \"bad\" (envFrom)"),
        (pod("secret", "    envFrom:\n    - secretRef:\n        name: gpus\n", ""), "gets NVIDIA_VISIBLE_DEVICES from key \"NVIDIA_VISIBLE_DEVICES\" of Secret \"gpus\""),
        (pod("spaced", "    env:\n    - name: \" LD_AUDIT\"\n      value: /a.so\n", ""), "container \"main\" sets LD_AUDIT"),
        (pod("sidecar", "  initContainers:\n  - name: side\n    image: x\n    restartPolicy: Always\n    env:\n    - name: LD_LIBRARY_PATH\n      value: /evil\n", ""), "container \"side\" sets LD_LIBRARY_PATH"),
    ];
    for (manifest, why) in refused {
        let err = fails(apply(&up, &t, &manifest));
        assert!(
            err.contains("forbidden") && err.contains(why) && err.contains("(NVIDIA_*, LD_*)"),
            "{err}"
        );
    }

    // A clean source: the host pod gets its keys as explicit entries, never an envFrom; a key
    // added later reaches the host copy but no container.
    ok(apply(&up, &t, &pod("clean", "    envFrom:\n    - configMapRef:\n        name: cfg\n", "")));
    let host = host_pod_of(&up, "clean");
    let c = &host["spec"]["containers"][0];
    assert!(c.get("envFrom").is_none(), "{c}");
    let env = &without_api_env(&c["env"]);
    assert_eq!(env.as_array().map(Vec::len), Some(2), "{env}");
    assert_eq!(env[0]["name"], "A", "{env}");
    // And the device selection NVIDIA documents for CDI-only injection: none by environment.
    assert_eq!(env[1], serde_json::json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}));
    assert!(
        env[0]["valueFrom"]["configMapKeyRef"]["name"].as_str().is_some_and(|n| n != "cfg"),
        "{env}"
    );
    let copy =
        env[0]["valueFrom"]["configMapKeyRef"]["name"].as_str().unwrap_or_default().to_owned();
    let host_ns = host["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
    ok(up.kubectl(
        &t,
        &[
            "patch",
            "configmap",
            "cfg",
            "--type",
            "merge",
            "-p",
            "{\"data\":{\"LD_PRELOAD\":\"/x.so\"}}",
        ],
    ));
    let host_kc = up.host_kubeconfig();
    eventually("the host copy re-synced", WAIT, || {
        let data = ok(up.kubectl(
            &host_kc,
            &["get", "configmap", "-n", &host_ns, &copy, "-o", "jsonpath={.data}"],
        ));
        (data.contains("LD_PRELOAD"), data)
    });
    let again = host_pod_of(&up, "clean");
    assert_eq!(without_api_env(&again["spec"]["containers"][0]["env"]), *env);
    assert!(!again["spec"].to_string().contains("LD_PRELOAD"), "{again}");

    // A Secret named by a volume source is the tenant's own copy, not Carrel's Secret of that
    // name in the host namespace.
    ok(up.kubectl(&t, &["create", "secret", "generic", "admin-kubeconfig", "--from-literal=k=v"]));
    ok(apply(&up, &t, &pod("chap", "", "  volumes:\n  - name: disk\n    iscsi:\n      targetPortal: 10.0.0.1:3260\n      iqn: iqn.2001-04.com.example:disk\n      lun: 0\n      chapAuthSession: true\n      secretRef:\n        name: admin-kubeconfig\n")));
    let host = host_pod_of(&up, "chap");
    let secret = host["spec"]["volumes"][0]["iscsi"]["secretRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!secret.is_empty() && secret != "admin-kubeconfig", "{host}");
    let copied = ok(up.kubectl(
        &host_kc,
        &["get", "secret", "-n", &host_ns, &secret, "-o", "jsonpath={.metadata.annotations}"],
    ));
    assert!(copied.contains("admin-kubeconfig"), "the copy records the tenant's Secret: {copied}");
    // Runtime annotations stay behind.
    ok(apply(&up, &t, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: annotated\n  annotations:\n    io.kubernetes.cri-o.Devices: /dev/nvidia0\n    note: kept\nspec:\n  containers:\n  - name: main\n    image: x\n"));
    let host = host_pod_of(&up, "annotated");
    let annotations = &host["metadata"]["annotations"];
    assert!(annotations.get("io.kubernetes.cri-o.Devices").is_none(), "{annotations}");
    assert_eq!(annotations["note"], "kept");
}

/// A container's `env` without the `KUBERNETES_*` variables that name its tenant's API (each
/// host container has them: `crates/carrel/tests/auth.rs` tests them).
fn without_api_env(env: &serde_json::Value) -> serde_json::Value {
    let entries = env.as_array().cloned().unwrap_or_default();
    let kept = entries
        .into_iter()
        .filter(|e| !e["name"].as_str().is_some_and(|n| n.starts_with("KUBERNETES_")));
    serde_json::Value::Array(kept.collect())
}
