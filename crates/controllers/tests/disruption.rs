//! The disruption controller against an in-process API: PodDisruptionBudget statuses from the
//! pods and their controllers, and the eviction subresource reading and taking from them.

mod common;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

fn budget(name: &str, app: &str, budget: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = budget;
    spec["selector"] = json!({"matchLabels": {"app": app}});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn replicaset(name: &str, replicas: i32) -> ReplicaSet {
    common::workload(name, replicas, name)
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    common::workload(name, replicas, name)
}

/// The budget's status once `check` holds of it.
async fn status_when(
    client: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&PodDisruptionBudgetStatus) -> bool,
) -> PodDisruptionBudgetStatus {
    let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    until(what, || async {
        let status = api.get(name).await.ok()?.status?;
        check(&status).then_some(status)
    })
    .await
}

/// The `DisruptionAllowed` condition's status and reason.
fn condition(status: &PodDisruptionBudgetStatus) -> Option<(String, String)> {
    let c = status.conditions.iter().flatten().find(|c| c.type_ == "DisruptionAllowed")?;
    Some((c.status.clone(), c.reason.clone()))
}

fn is(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_owned(), reason.to_owned()))
}

/// Play kubelet: every pod of `app` running and ready.
async fn all_ready(client: &Client, app: &str, n: usize) -> Vec<Pod> {
    let made = until(&format!("{n} pods of {app}"), || async {
        let p = pods(client, NS, &format!("app={app}")).await;
        (p.len() == n).then_some(p)
    })
    .await;
    for pod in &made {
        set_pod(client, NS, &pod.name_any(), "Running", true).await;
    }
    made
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

fn code(error: &kube::Error) -> u16 {
    match error {
        kube::Error::Api(status) => status.code,
        _ => 0,
    }
}

#[tokio::test]
async fn a_budget_allows_what_is_healthy_beyond_its_minimum_and_evictions_take_from_it() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let rs: Api<ReplicaSet> = Api::namespaced(client.clone(), NS);
    rs.create(&PostParams::default(), &replicaset("web", 3)).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    budgets
        .create(&PostParams::default(), &budget("web", "web", json!({"minAvailable": 2})))
        .await
        .unwrap();

    // Not ready yet: nothing may be disrupted.
    let s = status_when(&client, "web", "3 pods expected", |s| s.expected_pods == 3).await;
    assert_eq!((s.current_healthy, s.desired_healthy, s.disruptions_allowed), (0, 2, 0));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(condition(&s), is("False", "InsufficientPods"));

    let made = all_ready(&client, "web", 3).await;
    let s = status_when(&client, "web", "3 healthy", |s| s.current_healthy == 3).await;
    assert_eq!(s.disruptions_allowed, 1);
    assert_eq!(condition(&s), is("True", "SufficientPods"));

    // One eviction takes the one disruption allowed; the next is refused.
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let (first, second) = (made[0].name_any(), made[1].name_any());
    pod_api.evict(&first, &EvictParams::default()).await.expect("evicted");
    assert!(pod_api.get_opt(&first).await.unwrap().is_none(), "the evicted pod is gone");
    let refused = pod_api.evict(&second, &EvictParams::default()).await.expect_err("refused");
    assert_eq!(code(&refused), 429, "{refused}");
    assert!(refused.to_string().contains("would violate the pod's disruption budget"), "{refused}");
    assert!(pod_api.get_opt(&second).await.unwrap().is_some());

    // The ReplicaSet replaces the pod; once it is ready, one disruption is allowed again, and the
    // evicted pod, gone, is no longer recorded.
    let replacement = until("a replacement pod", || async {
        let p = pods(&client, NS, "app=web").await;
        p.into_iter().find(|p| !made.iter().any(|m| m.name_any() == p.name_any()))
    })
    .await;
    set_pod(&client, NS, &replacement.name_any(), "Running", true).await;
    let s = status_when(&client, "web", "healthy again", |s| {
        s.current_healthy == 3 && s.disruptions_allowed == 1
    })
    .await;
    assert_eq!(s.disrupted_pods, None, "{s:?}");
    pod_api.evict(&second, &EvictParams::default()).await.expect("allowed again");
}

#[tokio::test]
async fn percents_and_max_unavailable_count_the_controllers_scale() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments.create(&PostParams::default(), &deployment("api", 4)).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let max = budget("api", "api", json!({"maxUnavailable": "30%"}));
    budgets.create(&PostParams::default(), &max).await.unwrap();

    // Only two pods are ready, but the Deployment expects four: 30% of 4 is 2 (rounded up).
    let made = until("4 pods", || async {
        let p = pods(&client, NS, "app=api").await;
        (p.len() == 4).then_some(p)
    })
    .await;
    for pod in &made[..2] {
        set_pod(&client, NS, &pod.name_any(), "Running", true).await;
    }
    let s = status_when(&client, "api", "2 of 4 healthy", |s| s.current_healthy == 2).await;
    assert_eq!((s.expected_pods, s.desired_healthy, s.disruptions_allowed), (4, 2, 0));
    for pod in &made[2..] {
        set_pod(&client, NS, &pod.name_any(), "Running", true).await;
    }
    let s = status_when(&client, "api", "4 healthy", |s| s.current_healthy == 4).await;
    assert_eq!(s.disruptions_allowed, 2);

    // A change of the budget moves its generation, and the status follows.
    let patch = json!({"spec": {"maxUnavailable": null, "minAvailable": "50%"}});
    budgets.patch("api", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let s =
        status_when(&client, "api", "the new spec observed", |s| s.observed_generation == Some(2))
            .await;
    assert_eq!((s.expected_pods, s.desired_healthy, s.disruptions_allowed), (4, 2, 2));

    // Scaling the Deployment changes what is expected.
    let scale = json!({"spec": {"replicas": 6}});
    deployments.patch("api", &PatchParams::default(), &Patch::Merge(&scale)).await.unwrap();
    let s = status_when(&client, "api", "6 expected", |s| s.expected_pods == 6).await;
    assert_eq!(s.desired_healthy, 3);
}

#[tokio::test]
async fn a_budget_that_cannot_count_fails_safe_and_warns() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    // A pod controlled by a kind without scale.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = configmaps.create(&PostParams::default(), &owner).await.unwrap();
    let odd: Pod = serde_json::from_value(json!({
        "metadata": {"name": "odd", "labels": {"app": "odd"}, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid(),
             "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap();
    pod_api.create(&PostParams::default(), &odd).await.unwrap();
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
    let percent = budget("odd", "odd", json!({"minAvailable": "50%"}));
    budgets.create(&PostParams::default(), &percent).await.unwrap();

    let s = status_when(&client, "odd", "a failed sync", |s| {
        condition(s).is_some_and(|(_, reason)| reason == "SyncFailed")
    })
    .await;
    assert_eq!(s.disruptions_allowed, 0);
    let c = s.conditions.iter().flatten().find(|c| c.type_ == "DisruptionAllowed").unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(c.message, "configmaps does not implement the scale subresource");
    until("a CalculateExpectedPodCountFailed warning", || async {
        let e = events(&client, "odd", "CalculateExpectedPodCountFailed").await;
        e.iter()
            .any(|e| {
                e.message.as_deref()
                    == Some("Failed to calculate the number of expected pods: configmaps does not implement the scale subresource")
            })
            .then_some(())
    })
    .await;

    // An integer budget counts the pods themselves: no controller needed.
    let patch = json!({"spec": {"minAvailable": 0}});
    budgets.patch("odd", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    set_pod(&client, NS, "odd", "Running", true).await;
    let s = status_when(&client, "odd", "synced", |s| {
        condition(s).is_some_and(|(_, reason)| reason == "SufficientPods")
    })
    .await;
    assert_eq!((s.expected_pods, s.current_healthy, s.disruptions_allowed), (1, 1, 1));

    // A budget that selects nothing says so.
    budgets
        .create(&PostParams::default(), &budget("none", "nothing", json!({"minAvailable": 1})))
        .await
        .unwrap();
    let s = status_when(&client, "none", "synced", |s| s.observed_generation == Some(1)).await;
    assert_eq!((s.expected_pods, s.disruptions_allowed), (0, 0));
    until("a NoPods event", || async {
        let e = events(&client, "none", "NoPods").await;
        e.iter().any(|e| e.message.as_deref() == Some("No matching pods found")).then_some(())
    })
    .await;
}
