//! The StatefulSet controller against an in-process API, with the tests playing kubelet.

mod common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use carrel_apiserver::admission::{Level, TenantAdmission, TenantPolicy};
use carrel_controllers::statefulset::decide::{POD_INDEX_LABEL, POD_NAME_LABEL, REVISION_LABEL};
use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

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

/// StatefulSet `name` of `replicas` pods labelled `app: <name>`, with a claim template `data`
/// and the headless service `<name>-svc`; `extra` merged in.
fn sts(name: &str, replicas: i32, extra: Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": format!("{name}-svc"),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

async fn create(client: &Client, set: &StatefulSet) -> StatefulSet {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), set).await.expect("create statefulset")
}

async fn patch_set(client: &Client, name: &str, patch: Value) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
}

/// Delete StatefulSet `name`. This API answers a delete that meets a concurrent write (the
/// controller's status) with a conflict, where kube-apiserver retries it: so does this.
async fn delete_set(client: &Client, name: &str) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    for _ in 0..20 {
        match api.delete(name, &DeleteParams::default()).await {
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            result => {
                result.expect("delete statefulset");
                return;
            }
        }
    }
    panic!("deleting {name} kept conflicting");
}

async fn pod_names(client: &Client, app: &str) -> Vec<String> {
    let mut names: Vec<String> =
        pods(client, NS, &format!("app={app}")).await.iter().map(|p| p.name_any()).collect();
    names.sort();
    names
}

async fn get_pod(client: &Client, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), NS).get_opt(name).await.expect("get pod")
}

async fn claim(client: &Client, name: &str) -> Option<PersistentVolumeClaim> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    api.get_opt(name).await.expect("get claim")
}

async fn events(client: &Client, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let all = api.list(&ListParams::default()).await.expect("list events").items;
    all.into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// Wait for pod `name`, then play its kubelet: Running and Ready.
async fn run_pod(client: &Client, name: &str) {
    until(&format!("pod {name}"), || async { get_pod(client, name).await }).await;
    set_pod(client, NS, name, "Running", true).await;
}

/// A kubelet for every pod of `app`: each pod not yet Running is made Running and Ready.
fn kubelet(client: &Client, app: &str) -> tokio::task::JoinHandle<()> {
    let (client, selector) = (client.clone(), format!("app={app}"));
    tokio::spawn(async move {
        loop {
            for pod in pods(&client, NS, &selector).await {
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                if phase != Some("Running") && pod.metadata.deletion_timestamp.is_none() {
                    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
                    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                    let status = json!({"status": {"phase": "Running", "conditions": [
                        {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
                    let _ = api
                        .patch_status(
                            &pod.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&status),
                        )
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
}

async fn status(client: &Client, name: &str) -> k8s_openapi::api::apps::v1::StatefulSetStatus {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    api.get_status(name).await.expect("get status").status.unwrap_or_default()
}

fn revision_of(pod: &Pod) -> String {
    pod.labels().get(REVISION_LABEL).cloned().unwrap_or_default()
}

fn image_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().containers[0].image.clone().unwrap_or_default()
}

async fn revisions(client: &Client, app: &str) -> Vec<ControllerRevision> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), NS);
    let mut all = api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list revisions")
        .items;
    all.sort_by_key(|r| r.revision);
    all
}

#[tokio::test]
async fn ordered_ready_makes_pods_one_at_a_time_with_their_identity_claims_and_status() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let set = create(&client, &sts("web", 3, json!({}))).await;
    let uid = set.uid().unwrap();

    // Nothing else while web-0 is not Running and Ready (read before it is made so: once it is,
    // web-1 may follow at once).
    until("pod web-0", || async { get_pod(&client, "web-0").await }).await;
    assert_eq!(pod_names(&client, "web").await, ["web-0"]);
    run_pod(&client, "web-0").await;
    let pod = get_pod(&client, "web-0").await.unwrap();
    let labels = pod.labels();
    assert_eq!(labels[POD_NAME_LABEL], "web-0");
    assert_eq!(labels[POD_INDEX_LABEL], "0");
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("web-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("web-svc"));
    let volume = &spec.volumes.as_ref().unwrap()[0];
    assert_eq!(volume.name, "data");
    assert_eq!(volume.persistent_volume_claim.as_ref().unwrap().claim_name, "data-web-0");
    let owner = carrel_controllers::owners::controller_of(&pod.metadata).unwrap();
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("StatefulSet", uid.as_str()));
    assert_eq!(owner.block_owner_deletion, Some(true));

    let data = claim(&client, "data-web-0").await.expect("the claim made before the pod");
    assert_eq!(data.labels()["app"], "web");
    assert!(data.owner_references().is_empty(), "retained by default: no owner");

    // The revision the pods are made from.
    let history = revisions(&client, "web").await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].revision, 1);
    assert_eq!(revision_of(&pod), history[0].name_any());
    assert!(history[0].name_any().starts_with("web-"));
    let revision_owner = carrel_controllers::owners::controller_of(&history[0].metadata).unwrap();
    assert_eq!(revision_owner.uid, uid);

    until("pod web-1", || async { get_pod(&client, "web-1").await }).await;
    assert_eq!(pod_names(&client, "web").await, ["web-0", "web-1"]);
    run_pod(&client, "web-1").await;
    run_pod(&client, "web-2").await;
    until("the status of three ready pods", || async {
        let s = status(&client, "web").await;
        (s.replicas == 3
            && s.ready_replicas == Some(3)
            && s.available_replicas == Some(3)
            && s.current_replicas == Some(3)
            && s.updated_replicas == Some(3)
            && s.observed_generation == Some(1)
            && s.collision_count == Some(0))
        .then_some(s)
    })
    .await;
    let s = status(&client, "web").await;
    assert_eq!(s.current_revision, Some(history[0].name_any()));
    assert_eq!(s.update_revision, s.current_revision);

    let created = events(&client, "web", "SuccessfulCreate").await;
    for i in 0..3 {
        let pod = format!("create Pod web-{i} in StatefulSet web successful");
        let claim = format!("create Claim data-web-{i} Pod web-{i} in StatefulSet web success");
        assert!(created.contains(&pod) && created.contains(&claim), "{created:#?}");
    }
}

#[tokio::test]
async fn scale_down_goes_from_the_highest_ordinal_one_pod_at_a_time() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    // The finalizer keeps each deleted pod terminating until the test lets it go.
    let hold =
        json!({"spec": {"template": {"metadata": {"finalizers": ["test.carrel.dev/hold"]}}}});
    create(&client, &sts("web", 3, hold)).await;
    let _kubelet = kubelet(&client, "web");
    until("three ready pods", || async {
        (status(&client, "web").await.ready_replicas == Some(3)).then_some(())
    })
    .await;

    patch_set(&client, "web", json!({"spec": {"replicas": 1}})).await;
    let deleting = |name: &'static str| {
        let client = client.clone();
        async move {
            get_pod(&client, name).await.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        }
    };
    until("web-2 terminating", || async { deleting("web-2").await.then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!deleting("web-1").await, "web-1 waits for web-2 to be gone");

    let release = json!({"metadata": {"finalizers": null}});
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pod_api.patch("web-2", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    until("web-1 terminating once web-2 is gone", || async {
        deleting("web-1").await.then_some(())
    })
    .await;
    assert!(get_pod(&client, "web-2").await.is_none());
    pod_api.patch("web-1", &PatchParams::default(), &Patch::Merge(&release)).await.unwrap();
    until("one pod left", || async {
        (pod_names(&client, "web").await == ["web-0"]).then_some(())
    })
    .await;
    let deleted = events(&client, "web", "SuccessfulDelete").await;
    assert!(deleted.contains(&"delete Pod web-2 in StatefulSet web successful".to_owned()));
    assert!(deleted.contains(&"delete Pod web-1 in StatefulSet web successful".to_owned()));
    until("the status of one pod", || async {
        let s = status(&client, "web").await;
        (s.replicas == 1 && s.ready_replicas == Some(1) && s.observed_generation == Some(2))
            .then_some(())
    })
    .await;
    // Claims are retained: all three are still there.
    for i in 0..3 {
        assert!(claim(&client, &format!("data-web-{i}")).await.is_some(), "data-web-{i}");
    }
}

#[tokio::test]
async fn parallel_makes_and_removes_all_pods_at_once_and_ordinals_start_at_spec_start() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let extra = json!({"spec": {"podManagementPolicy": "Parallel", "ordinals": {"start": 3}}});
    create(&client, &sts("par", 3, extra)).await;
    until("three pods, none ready", || async {
        (pod_names(&client, "par").await == ["par-3", "par-4", "par-5"]).then_some(())
    })
    .await;
    until("status counts them", || async {
        let s = status(&client, "par").await;
        (s.replicas == 3 && s.ready_replicas.unwrap_or(0) == 0).then_some(())
    })
    .await;
    patch_set(&client, "par", json!({"spec": {"replicas": 0}})).await;
    until("all gone at once, not ready", || async {
        pod_names(&client, "par").await.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn failed_pods_are_replaced_under_their_name() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    create(&client, &sts("fail", 1, json!({}))).await;
    run_pod(&client, "fail-0").await;
    let first = get_pod(&client, "fail-0").await.unwrap().uid();
    set_pod(&client, NS, "fail-0", "Failed", false).await;
    until("a new fail-0", || async {
        let p = get_pod(&client, "fail-0").await?;
        (p.uid() != first).then_some(())
    })
    .await;
    until("the delete told", || async {
        let e = events(&client, "fail", "SuccessfulDelete").await;
        e.contains(&"delete Pod fail-0 in StatefulSet fail successful".to_owned()).then_some(())
    })
    .await;
}

fn retention(when_deleted: &str, when_scaled: &str) -> Value {
    json!({"spec": {
        "podManagementPolicy": "Parallel",
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": when_deleted, "whenScaled": when_scaled},
    }})
}

fn owner_kinds(claim: &PersistentVolumeClaim) -> Vec<(String, String, bool)> {
    claim
        .owner_references()
        .iter()
        .map(|r| (r.kind.clone(), r.name.clone(), r.controller == Some(true)))
        .collect()
}

#[tokio::test]
async fn claims_are_retained_or_deleted_as_the_retention_policy_says() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), NS);

    // whenScaled: Delete: the claim of a pod scaled away goes with its pod.
    create(&client, &sts("scaled", 2, retention("Retain", "Delete"))).await;
    until("two claims", || async {
        (claim(&client, "data-scaled-1").await.is_some()
            && get_pod(&client, "scaled-1").await.is_some())
        .then_some(())
    })
    .await;
    assert!(claim(&client, "data-scaled-1").await.unwrap().owner_references().is_empty());
    patch_set(&client, "scaled", json!({"spec": {"replicas": 1}})).await;
    until("scaled-1's claim collected with it", || async {
        claim(&client, "data-scaled-1").await.is_none().then_some(())
    })
    .await;
    let kept = claim(&client, "data-scaled-0").await.expect("scaled-0's claim stays");
    assert!(kept.owner_references().is_empty());
    // Scaled up again, the pod gets a new claim.
    patch_set(&client, "scaled", json!({"spec": {"replicas": 2}})).await;
    until("a new claim for scaled-1", || async { claim(&client, "data-scaled-1").await }).await;

    // whenDeleted: Delete: the claims are the set's, and go with it.
    create(&client, &sts("owned", 2, retention("Delete", "Retain"))).await;
    let owned = until("claims owned by the set", || async {
        let c = claim(&client, "data-owned-1").await?;
        (!c.owner_references().is_empty()).then_some(c)
    })
    .await;
    assert_eq!(owner_kinds(&owned), [("StatefulSet".into(), "owned".into(), true)]);
    // Scaling does not remove them.
    patch_set(&client, "owned", json!({"spec": {"replicas": 1}})).await;
    until("owned-1 gone", || async { get_pod(&client, "owned-1").await.is_none().then_some(()) })
        .await;
    assert!(claim(&client, "data-owned-1").await.is_some());
    delete_set(&client, "owned").await;
    until("the claims collected with the set", || async {
        let gone = claim(&client, "data-owned-0").await.is_none()
            && claim(&client, "data-owned-1").await.is_none();
        gone.then_some(())
    })
    .await;

    // Retain (the default): the claims outlive both scaling and the set.
    create(&client, &sts("kept", 2, json!({"spec": {"podManagementPolicy": "Parallel"}}))).await;
    until("two claims", || async { claim(&client, "data-kept-1").await }).await;
    patch_set(&client, "kept", json!({"spec": {"replicas": 0}})).await;
    until("no pods", || async { pod_names(&client, "kept").await.is_empty().then_some(()) }).await;
    delete_set(&client, "kept").await;
    until("the set gone", || async { api.get_opt("kept").await.ok()?.is_none().then_some(()) })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in ["data-kept-0", "data-kept-1"] {
        let c = claim(&client, name).await.expect("retained");
        assert!(c.owner_references().is_empty());
    }
}

#[tokio::test]
async fn a_rolling_update_replaces_pods_from_the_top_down_to_the_partition_and_rolls_back() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let partitioned = json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}});
    create(&client, &sts("roll", 3, partitioned)).await;
    let _kubelet = kubelet(&client, "roll");
    until("three ready pods", || async {
        (status(&client, "roll").await.ready_replicas == Some(3)).then_some(())
    })
    .await;
    let first = revisions(&client, "roll").await[0].name_any();

    let image = |image: &str| json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
    patch_set(&client, "roll", image("nginx:2")).await;
    let s = until("roll-2 and roll-1 updated, roll-0 not", || async {
        let s = status(&client, "roll").await;
        (s.updated_replicas == Some(2)
            && s.current_replicas == Some(1)
            && s.ready_replicas == Some(3))
        .then_some(s)
    })
    .await;
    let second = s.update_revision.clone().unwrap();
    assert_ne!(second, first);
    assert_eq!(
        s.current_revision.as_deref(),
        Some(first.as_str()),
        "not complete below the partition"
    );
    let at = |name: &'static str| {
        let client = client.clone();
        async move { get_pod(&client, name).await.map(|p| (revision_of(&p), image_of(&p))) }
    };
    assert_eq!(at("roll-0").await, Some((first.clone(), "nginx:1".into())));
    assert_eq!(at("roll-1").await, Some((second.clone(), "nginx:2".into())));
    assert_eq!(at("roll-2").await, Some((second.clone(), "nginx:2".into())));

    // The partition down to 0: the update completes, and the new revision becomes current.
    patch_set(
        &client,
        "roll",
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
    )
    .await;
    until("all updated and current", || async {
        let s = status(&client, "roll").await;
        (s.current_revision.as_deref() == Some(second.as_str())
            && s.current_replicas == Some(3)
            && s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3))
        .then_some(())
    })
    .await;
    assert_eq!(at("roll-0").await, Some((second.clone(), "nginx:2".into())));
    let history = revisions(&client, "roll").await;
    let numbers: Vec<(String, i64)> = history.iter().map(|r| (r.name_any(), r.revision)).collect();
    assert_eq!(numbers, [(first.clone(), 1), (second.clone(), 2)]);

    // Back to the first template: its revision is reused, renumbered 3.
    patch_set(&client, "roll", image("nginx:1")).await;
    until("rolled back", || async {
        let s = status(&client, "roll").await;
        (s.current_revision.as_deref() == Some(first.as_str())
            && s.updated_replicas == Some(3)
            && s.ready_replicas == Some(3))
        .then_some(())
    })
    .await;
    let history = revisions(&client, "roll").await;
    let numbers: Vec<(String, i64)> = history.iter().map(|r| (r.name_any(), r.revision)).collect();
    assert_eq!(numbers, [(second.clone(), 2), (first.clone(), 3)]);
}

#[tokio::test]
async fn max_unavailable_replaces_several_pods_at_once() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let strategy = json!({"spec": {"podManagementPolicy": "Parallel",
        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}});
    create(&client, &sts("wide", 4, strategy)).await;
    until("four pods", || async { (pod_names(&client, "wide").await.len() == 4).then_some(()) })
        .await;
    for i in 0..4 {
        set_pod(&client, NS, &format!("wide-{i}"), "Running", true).await;
    }
    until("four ready", || async {
        (status(&client, "wide").await.ready_replicas == Some(4)).then_some(())
    })
    .await;
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}});
    patch_set(&client, "wide", image).await;
    // No kubelet: the two replaced pods stay Pending, and the others wait.
    until("wide-3 and wide-2 replaced", || async {
        let p = pods(&client, NS, "app=wide").await;
        let new: Vec<String> =
            p.iter().filter(|p| image_of(p) == "nginx:2").map(|p| p.name_any()).collect();
        (new.len() == 2).then_some(new)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut new: Vec<String> = pods(&client, NS, "app=wide")
        .await
        .iter()
        .filter(|p| image_of(p) == "nginx:2")
        .map(|p| p.name_any())
        .collect();
    new.sort();
    assert_eq!(new, ["wide-2", "wide-3"]);
}

#[tokio::test]
async fn on_delete_replaces_a_pod_only_once_it_is_deleted() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let on_delete = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
    create(&client, &sts("od", 2, on_delete)).await;
    let _kubelet = kubelet(&client, "od");
    until("two ready pods", || async {
        (status(&client, "od").await.ready_replicas == Some(2)).then_some(())
    })
    .await;
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}});
    patch_set(&client, "od", image).await;
    let s = until("a new update revision", || async {
        let s = status(&client, "od").await;
        (s.update_revision != s.current_revision && s.observed_generation == Some(2)).then_some(s)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for name in ["od-0", "od-1"] {
        assert_eq!(image_of(&get_pod(&client, name).await.unwrap()), "nginx:1", "{name} untouched");
    }
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete("od-1", &DeleteParams::default())
        .await
        .unwrap();
    until("od-1 made again at the new revision", || async {
        let p = get_pod(&client, "od-1").await?;
        (image_of(&p) == "nginx:2" && Some(revision_of(&p)) == s.update_revision).then_some(())
    })
    .await;
    until("counted", || async {
        let s = status(&client, "od").await;
        (s.updated_replicas == Some(1)
            && s.current_replicas == Some(1)
            && s.ready_replicas == Some(2))
        .then_some(())
    })
    .await;
    assert_eq!(image_of(&get_pod(&client, "od-0").await.unwrap()), "nginx:1");
}

#[tokio::test]
async fn a_refused_pod_is_a_failed_create_event() {
    let cluster = Cluster::start().await;
    // A tenant's admission refuses a privileged pod (its claims' volumes it lets through).
    cluster.server.api().set_admission(Arc::new(TenantAdmission::new(TenantPolicy {
        level: Level::Baseline,
        ..TenantPolicy::default()
    })));
    let client = cluster.client.clone();
    let privileged = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "c", "image": "nginx:1", "securityContext": {"privileged": true}}
    ]}}}});
    create(&client, &sts("refused", 1, privileged)).await;
    let failed = until("a FailedCreate event", || async {
        events(&client, "refused", "FailedCreate").await.pop()
    })
    .await;
    assert!(
        failed.starts_with("create Pod refused-0 in StatefulSet refused failed error: "),
        "{failed}"
    );
    assert!(failed.contains("privileged"), "{failed}");
    assert!(claim(&client, "data-refused-0").await.is_some(), "the claim is made first");
    assert!(get_pod(&client, "refused-0").await.is_none());
}
