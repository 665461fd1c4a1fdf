//! The DaemonSet controller against an in-process API: nodes are Node objects the test writes,
//! and the test plays the kubelets (`set_pod`); no scheduler binds the pods, so each stays on
//! the node its affinity names.

mod common;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use carrel_controllers::daemonset::decide::{target_node, HASH_LABEL, TEMPLATE_GENERATION_LABEL};
use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

fn daemonset(name: &str, extra: Value) -> DaemonSet {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "agent:1"}]},
            },
        },
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

async fn add_node(client: &Client, name: &str, extra: Value) {
    let mut v = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}});
    merge(&mut v, extra);
    let node: Node = serde_json::from_value(v).unwrap();
    Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.unwrap();
}

/// The daemon pods of `app` by the node each is for.
async fn by_node(client: &Client, app: &str) -> BTreeMap<String, Vec<Pod>> {
    let mut out: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for pod in pods(client, NS, &format!("app={app}")).await {
        out.entry(target_node(&pod).unwrap_or_default()).or_default().push(pod);
    }
    out
}

/// Wait until `app` has one pod on each of `nodes` and on no other node.
async fn one_on_each(client: &Client, app: &str, nodes: &[&str]) -> BTreeMap<String, Pod> {
    until(&format!("one {app} pod on each of {nodes:?}"), || async {
        let found = by_node(client, app).await;
        let keys: Vec<&str> = found.keys().map(String::as_str).collect();
        (keys == nodes && found.values().all(|p| p.len() == 1))
            .then(|| found.into_iter().map(|(n, mut p)| (n, p.remove(0))).collect())
    })
    .await
}

async fn events(client: &Client, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let all = api.list(&ListParams::default()).await.expect("list events").items;
    all.into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        })
        .collect()
}

async fn all_ready(client: &Client, app: &str) {
    for pod in pods(client, NS, &format!("app={app}")).await {
        set_pod(client, NS, &pod.name_any(), "Running", true).await;
    }
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn a_pod_per_node_bound_by_affinity_with_its_revision_and_events() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    add_node(&client, "n1", json!({})).await;
    add_node(&client, "n2", json!({})).await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let created = api.create(&PostParams::default(), &daemonset("agent", json!({}))).await.unwrap();
    let uid = created.uid().unwrap();

    let made = one_on_each(&client, "agent", &["n1", "n2"]).await;
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let history = revisions.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(history.len(), 1, "{history:?}");
    let revision = &history[0];
    let hash = label_of(revision).to_owned();
    assert_eq!(revision.name_any(), format!("agent-{hash}"));
    assert_eq!(revision.revision, 1);
    let owner = carrel_controllers::owners::controller_of(&revision.metadata).unwrap();
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("DaemonSet", uid.as_str()));
    assert_eq!(
        revision.data.as_ref().unwrap().0["spec"]["template"]["$patch"],
        "replace",
        "the data restores the template"
    );

    for (node, pod) in &made {
        assert!(pod.name_any().starts_with("agent-"), "{}", pod.name_any());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name, None, "placed by affinity, not bound");
        assert_eq!(
            serde_json::to_value(&spec.affinity).unwrap(),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}})
        );
        let tolerations: Vec<String> = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| format!("{}:{}", t.key.as_deref().unwrap(), t.effect.as_deref().unwrap()))
            .collect();
        assert_eq!(
            tolerations,
            [
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/unreachable:NoExecute",
                "node.kubernetes.io/disk-pressure:NoSchedule",
                "node.kubernetes.io/memory-pressure:NoSchedule",
                "node.kubernetes.io/pid-pressure:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule",
            ]
        );
        assert_eq!(label(pod, HASH_LABEL), Some(hash.as_str()));
        assert_eq!(label(pod, TEMPLATE_GENERATION_LABEL), Some("1"));
        let r = carrel_controllers::owners::controller_of(&pod.metadata).unwrap();
        assert_eq!((r.kind.as_str(), r.uid.as_str()), ("DaemonSet", uid.as_str()));
        assert_eq!(r.block_owner_deletion, Some(true));
    }
    until("a SuccessfulCreate event per pod", || async {
        let e = events(&client, "agent", "SuccessfulCreate").await;
        made.values()
            .all(|p| {
                let want = format!("Created pod: {}", p.name_any());
                e.iter().any(|e| e.message.as_deref() == Some(want.as_str()))
            })
            .then_some(())
    })
    .await;
}

fn label_of(revision: &ControllerRevision) -> &str {
    revision.metadata.labels.as_ref().unwrap().get(HASH_LABEL).unwrap()
}

#[tokio::test]
async fn node_selector_and_taints_choose_the_nodes() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    add_node(&client, "gpu-1", json!({"metadata": {"labels": {"gpu": "yes"}}})).await;
    add_node(
        &client,
        "gpu-2",
        json!({"metadata": {"labels": {"gpu": "yes"}},
        "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}}),
    )
    .await;
    add_node(&client, "cpu-1", json!({})).await;
    // Node problems do not keep daemon pods off: they tolerate them.
    add_node(
        &client,
        "gpu-3",
        json!({"metadata": {"labels": {"gpu": "yes"}},
        "spec": {"unschedulable": true, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}),
    )
    .await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let selected = json!({"spec": {"template": {"spec": {"nodeSelector": {"gpu": "yes"}}}}});
    api.create(&PostParams::default(), &daemonset("gpus", selected)).await.unwrap();
    let tolerant = json!({"spec": {"template": {"spec": {
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}]}}}});
    api.create(&PostParams::default(), &daemonset("everywhere", tolerant)).await.unwrap();

    one_on_each(&client, "gpus", &["gpu-1", "gpu-3"]).await;
    one_on_each(&client, "everywhere", &["cpu-1", "gpu-1", "gpu-2", "gpu-3"]).await;
    until("the status of the selective one", || async {
        let s = api.get_status("gpus").await.ok()?.status?;
        (s.desired_number_scheduled == 2 && s.current_number_scheduled == 2).then_some(())
    })
    .await;
}

#[tokio::test]
async fn nodes_coming_going_and_changing_move_the_pods() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    add_node(&client, "a", json!({"metadata": {"labels": {"pool": "x"}}})).await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let selected = json!({"spec": {"template": {"spec": {"nodeSelector": {"pool": "x"}}}}});
    api.create(&PostParams::default(), &daemonset("agent", selected)).await.unwrap();
    one_on_each(&client, "agent", &["a"]).await;

    add_node(&client, "b", json!({"metadata": {"labels": {"pool": "x"}}})).await;
    let on_b = one_on_each(&client, "agent", &["a", "b"]).await.remove("b").unwrap();

    // A node that leaves the pool loses its pod; one that joins gets one.
    let nodes: Api<Node> = Api::all(client.clone());
    let leave = json!({"metadata": {"labels": {"pool": "y"}}});
    nodes.patch("a", &PatchParams::default(), &Patch::Merge(&leave)).await.unwrap();
    one_on_each(&client, "agent", &["b"]).await;
    add_node(&client, "c", json!({})).await;
    let join = json!({"metadata": {"labels": {"pool": "x"}}});
    nodes.patch("c", &PatchParams::default(), &Patch::Merge(&join)).await.unwrap();
    one_on_each(&client, "agent", &["b", "c"]).await;

    // A NoExecute taint evicts; a NoSchedule one keeps what runs (misscheduled, then).
    let taint = |effect: &str| json!({"spec": {"taints": [{"key": "k", "effect": effect}]}});
    nodes.patch("c", &PatchParams::default(), &Patch::Merge(&taint("NoExecute"))).await.unwrap();
    one_on_each(&client, "agent", &["b"]).await;
    nodes.patch("b", &PatchParams::default(), &Patch::Merge(&taint("NoSchedule"))).await.unwrap();
    until("b's pod misscheduled, kept", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.number_misscheduled == 1 && s.desired_number_scheduled == 0).then_some(())
    })
    .await;
    let still = one_on_each(&client, "agent", &["b"]).await;
    assert_eq!(still["b"].name_any(), on_b.name_any(), "the pod on b stays");

    // A node that goes takes its (unbound) pod with it.
    nodes
        .patch("c", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": null}})))
        .await
        .unwrap();
    one_on_each(&client, "agent", &["b", "c"]).await;
    nodes.delete("c", &DeleteParams::default()).await.unwrap();
    one_on_each(&client, "agent", &["b"]).await;
    until("SuccessfulDelete events", || async {
        (events(&client, "agent", "SuccessfulDelete").await.len() >= 3).then_some(())
    })
    .await;
    let e = events(&client, "agent", "SuccessfulDelete").await;
    assert!(e.iter().all(|e| e
        .message
        .as_deref()
        .unwrap_or_default()
        .starts_with("Deleted pod: agent-")));
}

#[tokio::test]
async fn status_counts_follow_the_pods() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    for n in ["a", "b", "c"] {
        add_node(&client, n, json!({})).await;
    }
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &daemonset("agent", json!({}))).await.unwrap();
    let made = one_on_each(&client, "agent", &["a", "b", "c"]).await;
    let s = until("all scheduled, none ready", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.current_number_scheduled == 3).then_some(s)
    })
    .await;
    assert_eq!(s.desired_number_scheduled, 3);
    assert_eq!((s.number_ready, s.number_available.unwrap_or(0)), (0, 0));
    assert_eq!(s.number_unavailable, Some(3));
    assert_eq!(s.updated_number_scheduled, Some(3));
    assert_eq!(s.number_misscheduled, 0);
    assert_eq!(s.observed_generation, Some(1));

    set_pod(&client, NS, &made["a"].name_any(), "Running", true).await;
    set_pod(&client, NS, &made["b"].name_any(), "Running", true).await;
    set_pod(&client, NS, &made["c"].name_any(), "Running", false).await;
    let s = until("two ready", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.number_ready == 2).then_some(s)
    })
    .await;
    assert_eq!((s.number_available, s.number_unavailable), (Some(2), Some(1)));
}

#[tokio::test]
async fn a_failed_pod_is_replaced_with_a_warning() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    add_node(&client, "a", json!({})).await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &daemonset("agent", json!({}))).await.unwrap();
    let first = one_on_each(&client, "agent", &["a"]).await.remove("a").unwrap();
    set_pod(&client, NS, &first.name_any(), "Failed", false).await;
    let second = until("a replacement", || async {
        let mut p = by_node(&client, "agent").await.remove("a")?;
        (p.len() == 1 && p[0].name_any() != first.name_any()).then(|| p.remove(0))
    })
    .await;
    assert!(second.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|p| p == "Pending"));
    let warning = until("FailedDaemonPod", || async {
        events(&client, "agent", "FailedDaemonPod").await.pop()
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(
        warning.message.as_deref(),
        Some(
            format!(
                "Found failed daemon pod {NS}/{} on node a, will try to kill it",
                first.name_any()
            )
            .as_str()
        )
    );
    assert_eq!(warning.source.and_then(|s| s.component).as_deref(), Some("daemonset-controller"));
}

#[tokio::test]
async fn a_rolling_update_replaces_pods_one_unavailable_at_a_time() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    for n in ["a", "b", "c"] {
        add_node(&client, n, json!({})).await;
    }
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &daemonset("agent", json!({}))).await.unwrap();
    let first = one_on_each(&client, "agent", &["a", "b", "c"]).await;
    all_ready(&client, "agent").await;
    until("available", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.number_available == Some(3)).then_some(())
    })
    .await;
    let old_hash = label(&first["a"], HASH_LABEL).unwrap().to_owned();

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:2"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Strategic(&image)).await.unwrap();
    // maxUnavailable 1: never more than one node without an available pod; the test's kubelet
    // makes each new pod ready as it comes.
    until("every pod replaced", || async {
        let found = by_node(&client, "agent").await;
        let mut unavailable = 0;
        let mut new = 0;
        for node in ["a", "b", "c"] {
            let pods = found.get(node).cloned().unwrap_or_default();
            let ready = pods
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
            if !ready {
                unavailable += 1;
            }
            for p in &pods {
                if label(p, HASH_LABEL) != Some(old_hash.as_str()) {
                    new += 1;
                    if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
                        set_pod(&client, NS, &p.name_any(), "Running", true).await;
                    }
                }
            }
        }
        assert!(unavailable <= 1, "{unavailable} nodes without a ready pod: {found:?}");
        (new == 3 && found.values().all(|p| p.len() == 1)).then_some(())
    })
    .await;
    let s = until("the rollout done", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.updated_number_scheduled == Some(3) && s.number_available == Some(3)).then_some(s)
    })
    .await;
    assert_eq!(s.observed_generation, Some(2));
    let now = by_node(&client, "agent").await;
    for pod in now.values().flatten() {
        assert_eq!(label(pod, TEMPLATE_GENERATION_LABEL), Some("2"));
        assert_eq!(pod.spec.as_ref().unwrap().containers[0].image.as_deref(), Some("agent:2"));
    }
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let mut history: Vec<(i64, String)> = revisions
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| (r.revision, label_of(r).to_owned()))
        .collect();
    history.sort();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0], (1, old_hash.clone()));
    assert_eq!(history[1].0, 2);

    // Back to the first template: its revision becomes the newest, and no third is made.
    let back = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Strategic(&back)).await.unwrap();
    until("the first revision renumbered 3", || async {
        let items = revisions.list(&ListParams::default()).await.ok()?.items;
        let first = items.iter().find(|r| label_of(r) == old_hash)?;
        (items.len() == 2 && first.revision == 3).then_some(())
    })
    .await;
}

#[tokio::test]
async fn on_delete_waits_for_pods_to_be_deleted() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    add_node(&client, "a", json!({})).await;
    add_node(&client, "b", json!({})).await;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    let on_delete = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
    api.create(&PostParams::default(), &daemonset("agent", on_delete)).await.unwrap();
    let first = one_on_each(&client, "agent", &["a", "b"]).await;
    all_ready(&client, "agent").await;

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "agent:2"}]}}}});
    api.patch("agent", &PatchParams::default(), &Patch::Strategic(&image)).await.unwrap();
    let s = until("the new generation observed", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.observed_generation == Some(2)).then_some(s)
    })
    .await;
    assert_eq!(s.updated_number_scheduled.unwrap_or(0), 0, "nothing replaced by itself");
    let same = one_on_each(&client, "agent", &["a", "b"]).await;
    assert_eq!(same["a"].name_any(), first["a"].name_any());

    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pod_api.delete(&first["a"].name_any(), &DeleteParams::default()).await.unwrap();
    let replaced = until("a's pod replaced with the new template", || async {
        let found = one_on_each(&client, "agent", &["a", "b"]).await;
        (found["a"].name_any() != first["a"].name_any()).then_some(found)
    })
    .await;
    let image = |p: &Pod| p.spec.as_ref().unwrap().containers[0].image.clone().unwrap_or_default();
    assert_eq!(image(&replaced["a"]), "agent:2");
    assert_eq!(image(&replaced["b"]), "agent:1");
    until("one updated", || async {
        let s = api.get_status("agent").await.ok()?.status?;
        (s.updated_number_scheduled == Some(1)).then_some(())
    })
    .await;
}
