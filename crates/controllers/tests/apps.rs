//! The ReplicaSet, ReplicationController and Deployment controllers against an in-process API.

mod common;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Event, Pod, ReplicationController};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use carrel_apiserver::admission::{Level, TenantAdmission, TenantPolicy};
use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

fn rs(name: &str, replicas: i32, app: &str) -> ReplicaSet {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }))
    .unwrap()
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
