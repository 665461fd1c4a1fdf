//! The ReplicaSet, ReplicationController and Deployment controllers against an in-process API.

mod common;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Event, Pod, ReplicationController};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use carrel_apiserver::admission::{Level, TenantAdmission, TenantPolicy};
use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

fn rs(name: &str, replicas: i32, app: &str) -> ReplicaSet {
    common::workload(name, replicas, app)
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

fn owner_uid(pod: &Pod) -> Option<String> {
    carrel_controllers::owners::controller_of(&pod.metadata).map(|r| r.uid.clone())
}

#[tokio::test]
async fn a_replicaset_creates_its_pods_counts_them_and_deletes_the_surplus() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let created = api.create(&PostParams::default(), &rs("web", 3, "web")).await.unwrap();
    let uid = created.uid().unwrap();

    let made = until("3 pods", || async {
        let p = pods(&client, NS, "app=web").await;
        (p.len() == 3).then_some(p)
    })
    .await;
    for pod in &made {
        assert!(pod.name_any().starts_with("web-"), "{}", pod.name_any());
        let r = carrel_controllers::owners::controller_of(&pod.metadata).unwrap();
        assert_eq!(
            (r.kind.as_str(), r.name.as_str(), r.uid.as_str()),
            ("ReplicaSet", "web", uid.as_str())
        );
        assert_eq!(r.block_owner_deletion, Some(true));
    }
    until("3 SuccessfulCreate events", || async {
        let e = events(&client, "web", "SuccessfulCreate").await;
        let named = made.iter().all(|p| {
            e.iter()
                .any(|e| e.message.as_deref() == Some(&format!("Created pod: {}", p.name_any())))
        });
        named.then_some(())
    })
    .await;
    until("status replicas 3", || async {
        let s = api.get_status("web").await.ok()?.status?;
        (s.replicas == 3 && s.fully_labeled_replicas == Some(3) && s.observed_generation == Some(1))
            .then_some(())
    })
    .await;

    set_pod(&client, NS, &made[0].name_any(), "Running", true).await;
    set_pod(&client, NS, &made[1].name_any(), "Running", true).await;
    until("2 ready and available", || async {
        let s = api.get_status("web").await.ok()?.status?;
        (s.ready_replicas == Some(2) && s.available_replicas == Some(2)).then_some(())
    })
    .await;

    // Scale down through the scale subresource: the pending pod goes first.
    let scale = json!({"spec": {"replicas": 2}});
    api.patch_scale("web", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    let left = until("2 pods", || async {
        let p = pods(&client, NS, "app=web").await;
        (p.len() == 2).then_some(p)
    })
    .await;
    let mut left: Vec<String> = left.iter().map(|p| p.name_any()).collect();
    left.sort();
    let mut ready = vec![made[0].name_any(), made[1].name_any()];
    ready.sort();
    assert_eq!(left, ready, "the pod that was not ready is the one deleted");
    until("SuccessfulDelete event", || async {
        let e = events(&client, "web", "SuccessfulDelete").await;
        let want = format!("Deleted pod: {}", made[2].name_any());
        e.iter().any(|e| e.message.as_deref() == Some(&want)).then_some(())
    })
    .await;
    until("status after scale down", || async {
        let s = api.get_status("web").await.ok()?.status?;
        (s.replicas == 2 && s.ready_replicas == Some(2) && s.observed_generation == Some(2))
            .then_some(())
    })
    .await;

    // A pod that dies is replaced.
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    pod_api.delete(&made[0].name_any(), &DeleteParams::default()).await.unwrap();
    until("a replacement", || async {
        let p = pods(&client, NS, "app=web").await;
        (p.len() == 2 && p.iter().all(|p| p.name_any() != made[0].name_any())).then_some(())
    })
    .await;
}

#[tokio::test]
async fn available_replicas_wait_for_min_ready_seconds() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let mut slow = rs("slow", 1, "slow");
    slow.spec.as_mut().unwrap().min_ready_seconds = Some(2);
    api.create(&PostParams::default(), &slow).await.unwrap();
    let pod = until("a pod", || async { pods(&client, NS, "app=slow").await.pop() }).await;
    set_pod(&client, NS, &pod.name_any(), "Running", true).await;
    until("ready, not yet available", || async {
        let s = api.get_status("slow").await.ok()?.status?;
        (s.ready_replicas == Some(1)).then_some(())
    })
    .await;
    let s = api.get_status("slow").await.unwrap().status.unwrap();
    assert_eq!(s.available_replicas.unwrap_or(0), 0, "available only after 2 s");
    until("available after minReadySeconds", || async {
        let s = api.get_status("slow").await.ok()?.status?;
        (s.available_replicas == Some(1)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_replicaset_adopts_matching_orphans_and_releases_pods_it_no_longer_selects() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "adopt"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    pod_api.create(&PostParams::default(), &orphan).await.unwrap();

    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let created = api.create(&PostParams::default(), &rs("adopt", 2, "adopt")).await.unwrap();
    let uid = created.uid().unwrap();
    until("the orphan adopted and one pod made", || async {
        let p = pods(&client, NS, "app=adopt").await;
        let adopted =
            p.iter().any(|p| p.name_any() == "orphan" && owner_uid(p).as_deref() == Some(&uid));
        (adopted && p.len() == 2 && p.iter().all(|p| owner_uid(p).as_deref() == Some(&uid)))
            .then_some(())
    })
    .await;

    // Relabel the orphan out of the selector: it is released, and replaced.
    let relabel = json!({"metadata": {"labels": {"app": "gone"}}});
    pod_api.patch("orphan", &PatchParams::default(), &Patch::Merge(&relabel)).await.unwrap();
    until("released and replaced", || async {
        let released = pod_api.get("orphan").await.ok()?;
        let p = pods(&client, NS, "app=adopt").await;
        (owner_uid(&released).is_none() && p.len() == 2).then_some(())
    })
    .await;
    assert!(pod_api
        .get("orphan")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap_or_default()
        .is_empty());
}

#[tokio::test]
async fn a_refused_pod_is_a_failed_create_event_and_a_replica_failure() {
    let cluster = Cluster::start().await;
    // Pod Security admission refuses a privileged pod at create time; the ReplicaSet holding its
    // template is valid.
    cluster.server.api().set_admission(Arc::new(TenantAdmission::new(TenantPolicy {
        level: Level::Baseline,
        ..TenantPolicy::default()
    })));
    let client = cluster.client.clone();
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let mut bad = rs("priv", 3, "priv");
    let template = bad.spec.as_mut().unwrap().template.as_mut().unwrap();
    template.spec.as_mut().unwrap().containers[0].security_context =
        Some(serde_json::from_value(json!({"privileged": true})).unwrap());
    api.create(&PostParams::default(), &bad).await.unwrap();

    let failed = until("a FailedCreate event", || async {
        events(&client, "priv", "FailedCreate").await.pop()
    })
    .await;
    let message = failed.message.unwrap();
    assert!(message.starts_with("Error creating: "), "{message}");
    assert!(message.contains("privileged"), "{message}");
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.source.and_then(|s| s.component).as_deref(), Some("replicaset-controller"));
    let condition = until("ReplicaFailure", || async {
        let s = api.get_status("priv").await.ok()?.status?;
        s.conditions?.into_iter().find(|c| c.type_ == "ReplicaFailure")
    })
    .await;
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_deref()),
        ("True", Some("FailedCreate"))
    );
    assert!(condition.message.unwrap_or_default().contains("privileged"));
    assert!(pods(&client, NS, "app=priv").await.is_empty());
}

#[tokio::test]
async fn a_replication_controller_keeps_its_pods_too() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<ReplicationController> = Api::namespaced(client.clone(), NS);
    let rc: ReplicationController = serde_json::from_value(json!({
        "metadata": {"name": "legacy"},
        "spec": {
            "replicas": 2,
            "selector": {"app": "legacy"},
            "template": {
                "metadata": {"labels": {"app": "legacy"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &rc).await.unwrap();
    let made = until("2 pods", || async {
        let p = pods(&client, NS, "app=legacy").await;
        (p.len() == 2).then_some(p)
    })
    .await;
    for pod in &made {
        let r = carrel_controllers::owners::controller_of(&pod.metadata).unwrap();
        assert_eq!((r.api_version.as_str(), r.kind.as_str()), ("v1", "ReplicationController"));
        assert_eq!(Some(&r.uid), created.uid().as_ref());
    }
    set_pod(&client, NS, &made[0].name_any(), "Running", true).await;
    until("status", || async {
        let s = api.get_status("legacy").await.ok()?.status?;
        (s.replicas == 2 && s.ready_replicas == Some(1) && s.available_replicas == Some(1))
            .then_some(())
    })
    .await;
    let e = until("events", || async { events(&client, "legacy", "SuccessfulCreate").await.pop() })
        .await;
    assert_eq!(e.source.and_then(|s| s.component).as_deref(), Some("replication-controller"));
    api.patch_scale(
        "legacy",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 0}})),
    )
    .await
    .unwrap();
    until("no pods", || async { pods(&client, NS, "app=legacy").await.is_empty().then_some(()) })
        .await;
}

// Deployments.

fn deployment(name: &str, replicas: i32, image: &str, strategy: serde_json::Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }))
    .unwrap()
}

fn rolling(surge: serde_json::Value, unavailable: serde_json::Value) -> serde_json::Value {
    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

async fn replicasets(client: &Client, app: &str) -> Vec<ReplicaSet> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    let mut rss =
        api.list(&ListParams::default().labels(&format!("app={app}"))).await.unwrap().items;
    rss.sort_by_key(|rs| rs.name_any());
    rss
}

fn image_of(rs: &ReplicaSet) -> String {
    let t = rs.spec.as_ref().unwrap().template.as_ref().unwrap();
    t.spec.as_ref().unwrap().containers[0].image.clone().unwrap()
}

fn annotation(meta: &kube::core::ObjectMeta, key: &str) -> Option<String> {
    meta.annotations.as_ref().and_then(|a| a.get(key)).cloned()
}

fn size(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

/// What `kubectl rollout status` says: `Ok(true)` when rolled out, `Ok(false)` while waiting,
/// `Err` once the progress deadline passed (`DeploymentStatusViewer.Status`).
fn rollout_status(d: &Deployment) -> Result<bool, String> {
    let Some(status) = d.status.as_ref() else { return Ok(false) };
    if d.metadata.generation > status.observed_generation {
        return Ok(false);
    }
    let progressing = status.conditions.iter().flatten().find(|c| c.type_ == "Progressing");
    if progressing.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded")) {
        return Err(format!("deployment {:?} exceeded its progress deadline", d.name_any()));
    }
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    Ok(updated >= want
        && status.replicas.unwrap_or(0) <= updated
        && status.available_replicas.unwrap_or(0) >= updated)
}

/// Mark every pod of `app` ready until the Deployment has rolled out.
async fn roll_out(client: &Client, name: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    until("the rollout to finish", || async {
        for pod in pods(client, NS, &format!("app={name}")).await {
            if !carrel_controllers::pods::is_ready(&pod) {
                set_pod(client, NS, &pod.name_any(), "Running", true).await;
            }
        }
        let d = api.get(name).await.ok()?;
        (rollout_status(&d) == Ok(true)).then_some(d)
    })
    .await
}

fn condition(d: &Deployment, kind: &str) -> Option<(String, String)> {
    let c = d.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

async fn set_image(client: &Client, name: &str, image: &str) {
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}});
    api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch)).await.unwrap();
}

#[tokio::test]
async fn a_deployment_makes_a_hashed_replicaset_and_becomes_available() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let d = api
        .create(&PostParams::default(), &deployment("web", 2, "nginx:1", json!({})))
        .await
        .unwrap();

    let rs = until("a ReplicaSet", || async { replicasets(&client, "web").await.pop() }).await;
    let hash = rs.labels().get("pod-template-hash").cloned().expect("hash label");
    assert_eq!(rs.name_any(), format!("web-{hash}"));
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(spec.selector.match_labels.as_ref().unwrap().get("pod-template-hash"), Some(&hash));
    let labels =
        spec.template.as_ref().unwrap().metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert_eq!(labels.get("pod-template-hash"), Some(&hash));
    assert_eq!(size(&rs), 2);
    assert_eq!(annotation(&rs.metadata, "deployment.kubernetes.io/revision").as_deref(), Some("1"));
    assert_eq!(
        annotation(&rs.metadata, "deployment.kubernetes.io/desired-replicas").as_deref(),
        Some("2")
    );
    // 25% of 2 rounds up to 1.
    assert_eq!(
        annotation(&rs.metadata, "deployment.kubernetes.io/max-replicas").as_deref(),
        Some("3")
    );
    let owner = carrel_controllers::owners::controller_of(&rs.metadata).unwrap();
    assert_eq!((owner.kind.as_str(), owner.uid.clone()), ("Deployment", d.uid().unwrap()));

    let made = until("2 pods", || async {
        let p = pods(&client, NS, &format!("app=web,pod-template-hash={hash}")).await;
        (p.len() == 2).then_some(p)
    })
    .await;
    let pending = api.get("web").await.unwrap();
    assert_eq!(rollout_status(&pending), Ok(false));
    for pod in &made {
        set_pod(&client, NS, &pod.name_any(), "Running", true).await;
    }
    let done = until("available", || async {
        let d = api.get("web").await.ok()?;
        let s = d.status.clone()?;
        let complete =
            condition(&d, "Progressing") == Some(("True".into(), "NewReplicaSetAvailable".into()));
        (complete && s.available_replicas == Some(2)).then_some(d)
    })
    .await;
    let s = done.status.clone().unwrap();
    assert_eq!(
        (s.replicas, s.updated_replicas, s.ready_replicas, s.unavailable_replicas.unwrap_or(0)),
        (Some(2), Some(2), Some(2), 0)
    );
    assert_eq!(s.observed_generation, done.metadata.generation);
    assert_eq!(
        condition(&done, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(rollout_status(&done), Ok(true));
    assert_eq!(
        annotation(&done.metadata, "deployment.kubernetes.io/revision").as_deref(),
        Some("1")
    );
    let scaled = events(&client, "web", "ScalingReplicaSet").await;
    let want = format!("Scaled up replica set web-{hash} from 0 to 2");
    assert!(scaled.iter().any(|e| e.message.as_deref() == Some(&want)), "{scaled:?}");

    // kubectl scale: through the scale subresource.
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    until("the ReplicaSet scaled to 4", || async {
        let rs = replicasets(&client, "web").await.pop()?;
        let annotated = annotation(&rs.metadata, "deployment.kubernetes.io/desired-replicas");
        (size(&rs) == 4 && annotated.as_deref() == Some("4")).then_some(())
    })
    .await;
    until("the scale event", || async {
        let want = format!("Scaled up replica set web-{hash} to 4 from 2");
        let e = events(&client, "web", "ScalingReplicaSet").await;
        e.iter().any(|e| e.message.as_deref() == Some(&want)).then_some(())
    })
    .await;
    let d = roll_out(&client, "web").await;
    assert_eq!(d.status.unwrap().available_replicas, Some(4));
    assert_eq!(replicasets(&client, "web").await.len(), 1, "a scale is no new revision");
}

#[tokio::test]
async fn an_image_update_rolls_within_max_surge_and_max_unavailable() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let d = deployment("roll", 3, "nginx:1", rolling(json!(1), json!(0)));
    api.create(&PostParams::default(), &d).await.unwrap();
    roll_out(&client, "roll").await;
    set_image(&client, "roll", "nginx:2").await;

    let old_sizes = std::sync::Mutex::new(Vec::new());
    until("the new ReplicaSet to take over", || async {
        let rss = replicasets(&client, "roll").await;
        let all = pods(&client, NS, "app=roll").await;
        let total: i32 = rss.iter().map(size).sum();
        let ready = all.iter().filter(|p| carrel_controllers::pods::is_ready(p)).count();
        assert!(total <= 4, "replicas {total} above 3 + maxSurge 1");
        assert!(ready >= 3, "{ready} ready, below 3 - maxUnavailable 0");
        let old = rss.iter().find(|rs| image_of(rs) == "nginx:1")?;
        let new = rss.iter().find(|rs| image_of(rs) == "nginx:2")?;
        {
            let mut seen = old_sizes.lock().unwrap();
            if seen.last() != Some(&size(old)) {
                seen.push(size(old));
            }
        }
        // A kubelet: one new pod ready at a time.
        let hash = new.labels().get("pod-template-hash")?.clone();
        let waiting = all.iter().find(|p| {
            p.labels().get("pod-template-hash") == Some(&hash)
                && !carrel_controllers::pods::is_ready(p)
        });
        if let Some(p) = waiting {
            set_pod(&client, NS, &p.name_any(), "Running", true).await;
        }
        let d = api.get("roll").await.ok()?;
        (size(old) == 0 && size(new) == 3 && rollout_status(&d) == Ok(true)).then_some(())
    })
    .await;
    assert_eq!(
        *old_sizes.lock().unwrap(),
        vec![3, 2, 1, 0],
        "the old ReplicaSet scaled down step by step"
    );
    let d = api.get("roll").await.unwrap();
    assert_eq!(annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(), Some("2"));
    let s = d.status.unwrap();
    assert_eq!((s.replicas, s.updated_replicas, s.available_replicas), (Some(3), Some(3), Some(3)));
    let e = events(&client, "roll", "ScalingReplicaSet").await;
    assert!(e.iter().any(|e| e.message.as_deref().is_some_and(|m| m
        .starts_with("Scaled down replica set roll-")
        && m.ends_with(" to 2 from 3"))));
}

#[tokio::test]
async fn recreate_removes_the_old_pods_before_making_new_ones() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let d = deployment("re", 2, "nginx:1", json!({"type": "Recreate"}));
    api.create(&PostParams::default(), &d).await.unwrap();
    roll_out(&client, "re").await;
    let old = replicasets(&client, "re").await.pop().unwrap();
    let old_hash = old.labels().get("pod-template-hash").unwrap().clone();
    set_image(&client, "re", "nginx:2").await;

    until("the new pods", || async {
        let all = pods(&client, NS, "app=re").await;
        let old_pods =
            all.iter().filter(|p| p.labels().get("pod-template-hash") == Some(&old_hash)).count();
        let new_pods = all.len() - old_pods;
        let rss = replicasets(&client, "re").await;
        let new_rs = rss.iter().any(|rs| image_of(rs) == "nginx:2");
        assert!(!(new_rs && old_pods > 0), "a new ReplicaSet while {old_pods} old pods remain");
        (new_pods == 2).then_some(())
    })
    .await;
    let d = roll_out(&client, "re").await;
    assert_eq!(d.status.unwrap().updated_replicas, Some(2));
}

#[tokio::test]
async fn a_paused_deployment_does_not_roll_out_until_resumed() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &deployment("p", 1, "nginx:1", json!({}))).await.unwrap();
    roll_out(&client, "p").await;
    // kubectl rollout pause.
    api.patch("p", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"paused": true}})))
        .await
        .unwrap();
    until("Progressing DeploymentPaused", || async {
        let d = api.get("p").await.ok()?;
        (condition(&d, "Progressing") == Some(("Unknown".into(), "DeploymentPaused".into())))
            .then_some(())
    })
    .await;
    set_image(&client, "p", "nginx:2").await;
    until("the change observed", || async {
        let d = api.get("p").await.ok()?;
        (d.status?.observed_generation == d.metadata.generation).then_some(())
    })
    .await;
    assert_eq!(replicasets(&client, "p").await.len(), 1, "no new ReplicaSet while paused");
    // kubectl rollout resume.
    api.patch("p", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"paused": false}})))
        .await
        .unwrap();
    let d = roll_out(&client, "p").await;
    let rss = replicasets(&client, "p").await;
    assert_eq!(rss.len(), 2);
    assert!(rss.iter().any(|rs| image_of(rs) == "nginx:2" && size(rs) == 1));
    assert_eq!(annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(), Some("2"));
}

#[tokio::test]
async fn an_undo_reuses_the_old_replicaset_as_the_newest_revision() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &deployment("u", 2, "nginx:1", json!({}))).await.unwrap();
    roll_out(&client, "u").await;
    let first = replicasets(&client, "u").await.pop().unwrap();
    set_image(&client, "u", "nginx:2").await;
    until("revision 2", || async {
        let d = api.get("u").await.ok()?;
        (annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref() == Some("2"))
            .then_some(())
    })
    .await;
    roll_out(&client, "u").await;

    // kubectl rollout undo: the old ReplicaSet's template, less its hash, into the Deployment.
    let mut template = first.spec.clone().unwrap().template.unwrap();
    template.metadata.as_mut().unwrap().labels.as_mut().unwrap().remove("pod-template-hash");
    let patch = json!({"spec": {"template": template}});
    api.patch("u", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    until("the first ReplicaSet at revision 3", || async {
        let rs = replicasets(&client, "u")
            .await
            .into_iter()
            .find(|rs| rs.name_any() == first.name_any())?;
        let revision = annotation(&rs.metadata, "deployment.kubernetes.io/revision");
        (revision.as_deref() == Some("3")).then_some(rs)
    })
    .await;
    let d = roll_out(&client, "u").await;
    let rss = replicasets(&client, "u").await;
    assert_eq!(rss.len(), 2, "no third ReplicaSet");
    let reused = rss.iter().find(|rs| rs.name_any() == first.name_any()).unwrap();
    assert_eq!(size(reused), 2);
    assert_eq!(
        annotation(&reused.metadata, "deployment.kubernetes.io/revision-history").as_deref(),
        Some("1")
    );
    assert_eq!(annotation(&d.metadata, "deployment.kubernetes.io/revision").as_deref(), Some("3"));
    assert!(rss.iter().all(|rs| rs.name_any() == first.name_any() || size(rs) == 0));
}

#[tokio::test]
async fn restarts_make_revisions_and_the_history_limit_prunes_the_oldest() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let mut d = deployment("h", 1, "nginx:1", json!({}));
    d.spec.as_mut().unwrap().revision_history_limit = Some(1);
    api.create(&PostParams::default(), &d).await.unwrap();
    roll_out(&client, "h").await;
    let first = replicasets(&client, "h").await.pop().unwrap();
    for (n, at) in [(2, "2026-01-01T00:00:00Z"), (3, "2026-01-01T00:01:00Z")] {
        // kubectl rollout restart.
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": at}}}}});
        api.patch("h", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        until("the new revision", || async {
            let d = api.get("h").await.ok()?;
            (annotation(&d.metadata, "deployment.kubernetes.io/revision") == Some(n.to_string()))
                .then_some(())
        })
        .await;
        roll_out(&client, "h").await;
    }
    let rss = until("the oldest ReplicaSet pruned", || async {
        let rss = replicasets(&client, "h").await;
        (rss.len() == 2).then_some(rss)
    })
    .await;
    assert!(
        rss.iter().all(|rs| rs.name_any() != first.name_any()),
        "revision 1 is the one deleted"
    );
    let mut revisions: Vec<String> = rss
        .iter()
        .filter_map(|rs| annotation(&rs.metadata, "deployment.kubernetes.io/revision"))
        .collect();
    revisions.sort();
    assert_eq!(revisions, ["2", "3"]);
}

#[tokio::test]
async fn a_rollout_without_progress_exceeds_its_deadline() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let mut d = deployment("stuck", 1, "nginx:1", json!({}));
    d.spec.as_mut().unwrap().progress_deadline_seconds = Some(1);
    api.create(&PostParams::default(), &d).await.unwrap();
    let d = until("ProgressDeadlineExceeded", || async {
        let d = api.get("stuck").await.ok()?;
        (condition(&d, "Progressing") == Some(("False".into(), "ProgressDeadlineExceeded".into())))
            .then_some(d)
    })
    .await;
    let c = d
        .status
        .as_ref()
        .unwrap()
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    let rs = replicasets(&client, "stuck").await.pop().unwrap();
    assert_eq!(
        c.message.as_deref(),
        Some(format!("ReplicaSet {:?} has timed out progressing.", rs.name_any()).as_str())
    );
    assert!(rollout_status(&d).is_err(), "kubectl rollout status fails");
    assert_eq!(
        condition(&d, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
}
