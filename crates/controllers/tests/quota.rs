//! The ResourceQuota controller against an in-process API: a quota's status follows its spec and
//! what its namespace uses, and the API server's quota admission bounds what workloads create.

mod common;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

use common::{pods, set_pod, until, Cluster};

const NS: &str = "default";

async fn create_quota(client: &Client, namespace: &str, name: &str, spec: Value) {
    let api: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    let quota = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &quota).await.expect("create quota");
}

/// A quota's `status.used` (or `hard`), as `name=value` pairs in name order.
async fn status_of(client: &Client, namespace: &str, name: &str, field: &str) -> Option<String> {
    let api: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    let quota = serde_json::to_value(api.get(name).await.ok()?).ok()?;
    let map: BTreeMap<String, String> =
        serde_json::from_value(quota["status"][field].clone()).ok()?;
    Some(map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
}

/// Wait until the quota's `status.used` reads `want`.
async fn used_becomes(client: &Client, namespace: &str, name: &str, want: &str) {
    let mut last = None;
    let found = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            last = status_of(client, namespace, name, "used").await;
            if last.as_deref() == Some(want) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(found.is_ok(), "status.used of {name} never became {want}; last {last:?}");
}

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn container(resources: Value) -> Value {
    json!({"name": "c", "image": "x", "resources": resources})
}

#[tokio::test]
async fn the_status_counts_what_the_namespace_uses() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    create_quota(
        &client,
        NS,
        "q",
        json!({"hard": {"pods": "5", "count/pods": "5", "requests.cpu": "4",
                        "limits.memory": "4Gi", "count/configmaps": "3", "services": "1",
                        "requests.nvidia.com/mig-1g.18gb": "2"}}),
    )
    .await;
    until("status.hard", || async {
        let hard = status_of(&client, NS, "q", "hard").await?;
        (hard
            == "count/configmaps=3,count/pods=5,limits.memory=4Gi,pods=5,requests.cpu=4,\
                requests.nvidia.com/mig-1g.18gb=2,services=1")
            .then_some(())
    })
    .await;
    // `default` holds the `kubernetes` Service, which its quota counts as kube-apiserver's does.
    used_becomes(
        &client,
        NS,
        "q",
        "count/configmaps=0,count/pods=0,limits.memory=0,pods=0,requests.cpu=0,\
         requests.nvidia.com/mig-1g.18gb=0,services=1",
    )
    .await;

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let params = PostParams::default();
    let gpu = container(json!({"requests": {"cpu": "500m"},
                               "limits": {"memory": "1Gi", "nvidia.com/mig-1g.18gb": "1"}}));
    pods_api.create(&params, &pod("a", json!({"containers": [gpu]}))).await.unwrap();
    let plain = container(json!({"requests": {"cpu": "250m"}, "limits": {"memory": "512Mi"}}));
    pods_api.create(&params, &pod("b", json!({"containers": [plain]}))).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for name in ["one", "two"] {
        let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        config_maps.create(&params, &cm).await.unwrap();
    }
    used_becomes(
        &client,
        NS,
        "q",
        "count/configmaps=2,count/pods=2,limits.memory=1536Mi,pods=2,requests.cpu=750m,\
         requests.nvidia.com/mig-1g.18gb=1,services=1",
    )
    .await;

    // A finished pod frees its compute resources but stays an object; a deleted ConfigMap goes.
    set_pod(&client, NS, "a", "Succeeded", false).await;
    config_maps.delete("two", &DeleteParams::default()).await.unwrap();
    used_becomes(
        &client,
        NS,
        "q",
        "count/configmaps=1,count/pods=2,limits.memory=512Mi,pods=1,requests.cpu=250m,\
         requests.nvidia.com/mig-1g.18gb=0,services=1",
    )
    .await;

    // A changed limit is followed; a removed one leaves the status.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NS);
    let patch = json!({"spec": {"hard": {"pods": "10", "services": null, "count/pods": null,
                                         "limits.memory": null, "count/configmaps": null,
                                         "requests.nvidia.com/mig-1g.18gb": null}}});
    quotas.patch("q", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    until("the new limits", || async {
        let hard = status_of(&client, NS, "q", "hard").await?;
        (hard == "pods=10,requests.cpu=4").then_some(())
    })
    .await;
    used_becomes(&client, NS, "q", "pods=1,requests.cpu=250m").await;
}

#[tokio::test]
async fn scoped_quotas_count_only_the_pods_their_scopes_take_in() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    create_quota(&client, NS, "batch", json!({"hard": {"pods": "3"}, "scopes": ["Terminating"]}))
        .await;
    create_quota(
        &client,
        NS,
        "high",
        json!({"hard": {"pods": "3"}, "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
    )
    .await;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let params = PostParams::default();
    let plain = json!({"containers": [container(json!({}))]});
    pods_api.create(&params, &pod("plain", plain)).await.unwrap();
    let job = json!({"containers": [container(json!({}))], "activeDeadlineSeconds": 60});
    pods_api.create(&params, &pod("job", job)).await.unwrap();
    used_becomes(&client, NS, "batch", "pods=1").await;
    used_becomes(&client, NS, "high", "pods=0").await;
}

#[tokio::test]
async fn any_served_type_is_counted_and_watched() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    create_quota(&client, NS, "apps", json!({"hard": {"count/deployments.apps": "2"}})).await;
    used_becomes(&client, NS, "apps", "count/deployments.apps=0").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments.create(&PostParams::default(), &deployment("web", 0)).await.unwrap();
    used_becomes(&client, NS, "apps", "count/deployments.apps=1").await;
    deployments.delete("web", &DeleteParams::default()).await.unwrap();
    used_becomes(&client, NS, "apps", "count/deployments.apps=0").await;
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    common::workload(name, replicas, name)
}

async fn failed_creates(client: &Client, namespace: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let all = api.list(&ListParams::default()).await.expect("list events").items;
    all.into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedCreate")
                && e.involved_object.kind.as_deref() == Some("ReplicaSet")
        })
        .collect()
}

#[tokio::test]
async fn a_deployment_over_its_quota_waits_for_room() {
    let cluster = Cluster::start().await;
    let client = cluster.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": "apps"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    create_quota(&client, "apps", "q", json!({"hard": {"pods": "2"}})).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "apps");
    deployments.create(&PostParams::default(), &deployment("web", 3)).await.unwrap();

    let refused =
        until("a FailedCreate event", || async { failed_creates(&client, "apps").await.pop() })
            .await;
    let message = refused.message.unwrap_or_default();
    assert!(message.starts_with("Error creating: pods \"web-"), "{message}");
    assert!(
        message.ends_with(
            "\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{message}"
    );
    assert_eq!(pods(&client, "apps", "app=web").await.len(), 2);
    used_becomes(&client, "apps", "q", "pods=2").await;

    // Room made: the ReplicaSet's retry creates the third pod.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "apps");
    let patch = json!({"spec": {"hard": {"pods": "3"}}});
    quotas.patch("q", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    until("the third pod", || async {
        (pods(&client, "apps", "app=web").await.len() == 3).then_some(())
    })
    .await;
    used_becomes(&client, "apps", "q", "pods=3").await;
    let names: Vec<String> =
        pods(&client, "apps", "app=web").await.iter().map(|p| p.name_any()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
}
