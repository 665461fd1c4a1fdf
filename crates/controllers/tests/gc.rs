//! The garbage collector against an in-process cluster: background, orphan and foreground
//! deletion, dangling owners, several owners, cluster-scoped owners.

mod common;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::Client;
use serde_json::json;

use common::{until, Cluster};

fn configmaps(client: &Client) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), "default")
}

/// A reference to ConfigMap `owner` (as created), blocking its foreground deletion or not.
fn owned_by(owner: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap(),
        uid: owner.metadata.uid.clone().unwrap(),
        block_owner_deletion: Some(block),
        controller: None,
    }
}

async fn create(
    client: &Client,
    name: &str,
    owners: Vec<OwnerReference>,
    finalizers: &[&str],
) -> ConfigMap {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners, "finalizers": finalizers},
    }))
    .unwrap();
    configmaps(client).create(&PostParams::default(), &cm).await.unwrap()
}

async fn gone(client: &Client, name: &str) -> bool {
    configmaps(client).get_opt(name).await.unwrap().is_none()
}

fn with(policy: PropagationPolicy) -> DeleteParams {
    DeleteParams { propagation_policy: Some(policy), ..DeleteParams::default() }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_delete_collects_the_dependents_once_every_owner_is_gone() {
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let a = create(c, "owner-a", vec![], &[]).await;
    let b = create(c, "owner-b", vec![], &[]).await;
    create(c, "only-a", vec![owned_by(&a, false)], &[]).await;
    create(c, "a-and-b", vec![owned_by(&a, false), owned_by(&b, false)], &[]).await;

    configmaps(c).delete("owner-a", &with(PropagationPolicy::Background)).await.unwrap();
    until("the dependent of a alone collected", || async { gone(c, "only-a").await.then_some(()) })
        .await;
    // The one b still owns stays, without its reference to a.
    let kept = until("the reference to a removed", || async {
        let cm = configmaps(c).get("a-and-b").await.unwrap();
        (cm.metadata.owner_references.as_ref().map(Vec::len) == Some(1)).then_some(cm)
    })
    .await;
    assert_eq!(kept.metadata.owner_references.unwrap()[0].uid, b.metadata.uid.unwrap());

    configmaps(c).delete("owner-b", &DeleteParams::default()).await.unwrap();
    until("the last dependent collected", || async { gone(c, "a-and-b").await.then_some(()) })
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dependent_whose_owner_never_existed_is_collected_and_one_of_an_unserved_kind_is_not() {
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let ghost = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "0b6c5d0e-0000-4000-8000-000000000001".into(),
        ..OwnerReference::default()
    };
    let unknown = OwnerReference {
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        ..ghost.clone()
    };
    create(c, "of-ghost", vec![ghost.clone()], &[]).await;
    create(c, "of-widget", vec![unknown], &[]).await;
    until("the dependent of a missing owner collected", || async {
        gone(c, "of-ghost").await.then_some(())
    })
    .await;
    // A ConfigMap named "ghost" now is another object: it is not the owner.
    create(c, "ghost", vec![], &[]).await;
    create(c, "of-old-ghost", vec![ghost], &[]).await;
    until("the dependent of a replaced owner collected", || async {
        gone(c, "of-old-ghost").await.then_some(())
    })
    .await;
    assert!(!gone(c, "of-widget").await, "an owner of a kind not served decides nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_named_in_a_version_it_is_not_watched_in_is_known() {
    // Autoscalers are watched in autoscaling/v2; a reference may name them in autoscaling/v1.
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let autoscalers: Api<HorizontalPodAutoscaler> = Api::namespaced(c.clone(), "default");
    let hpa: HorizontalPodAutoscaler = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 3},
    }))
    .unwrap();
    let hpa = autoscalers.create(&PostParams::default(), &hpa).await.unwrap();
    let owner = OwnerReference {
        api_version: "autoscaling/v1".into(),
        kind: "HorizontalPodAutoscaler".into(),
        name: "web".into(),
        uid: hpa.metadata.uid.clone().unwrap(),
        ..OwnerReference::default()
    };
    create(c, "of-web", vec![owner], &[]).await;
    autoscalers.delete("web", &DeleteParams::default()).await.unwrap();
    until("the dependent of the autoscaler collected", || async {
        gone(c, "of-web").await.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphaning_delete_keeps_the_dependents_without_their_reference() {
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let owner = create(c, "owner", vec![], &[]).await;
    create(c, "dependent", vec![owned_by(&owner, true)], &[]).await;
    let marked = configmaps(c).delete("owner", &with(PropagationPolicy::Orphan)).await.unwrap();
    let marked = marked.left().expect("an orphaning delete marks the owner first");
    assert!(marked.metadata.finalizers.unwrap().contains(&"orphan".to_owned()));
    until("the owner gone", || async { gone(c, "owner").await.then_some(()) }).await;
    let dependent = configmaps(c).get("dependent").await.unwrap();
    assert!(dependent.metadata.owner_references.unwrap_or_default().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_delete_waits_for_the_dependents_that_block_it() {
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let owner = create(c, "owner", vec![], &[]).await;
    // A dependent held by a finalizer of its own, blocking the owner; one that does not block.
    create(c, "blocking", vec![owned_by(&owner, true)], &["example.com/hold"]).await;
    create(c, "free", vec![owned_by(&owner, false)], &[]).await;
    configmaps(c).delete("owner", &with(PropagationPolicy::Foreground)).await.unwrap();

    until("the dependents deleted", || async {
        let blocking = configmaps(c).get("blocking").await.unwrap();
        (blocking.metadata.deletion_timestamp.is_some() && gone(c, "free").await).then_some(())
    })
    .await;
    let waiting = configmaps(c).get("owner").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(waiting.metadata.finalizers, Some(vec!["foregroundDeletion".to_owned()]));

    let release = json!({"metadata": {"finalizers": null}});
    configmaps(c)
        .patch("blocking", &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    until("the owner gone after its blocking dependent", || async {
        gone(c, "owner").await.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_scoped_owner_collects_its_namespaced_dependents() {
    let cluster = Cluster::start().await;
    let c = &cluster.client;
    let roles: Api<ClusterRole> = Api::all(c.clone());
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let role = roles.create(&PostParams::default(), &role).await.unwrap();
    let reference = OwnerReference {
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: "ClusterRole".into(),
        name: "owner".into(),
        uid: role.metadata.uid.unwrap(),
        ..OwnerReference::default()
    };
    create(c, "dependent", vec![reference], &[]).await;
    roles.delete("owner", &DeleteParams::default()).await.unwrap();
    until("the dependent collected", || async { gone(c, "dependent").await.then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn propagation_and_orphan_dependents_together_are_refused() {
    let cluster = Cluster::without_controllers();
    let c = &cluster.client;
    create(c, "owner", vec![], &[]).await;
    let both = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    let request = kube::core::Request::new("/api/v1/namespaces/default/configmaps");
    let mut body = serde_json::to_value(&both).unwrap();
    body["orphanDependents"] = json!(true);
    let mut req = request.delete("owner", &DeleteParams::default()).unwrap();
    *req.body_mut() = serde_json::to_vec(&body).unwrap();
    let err = c.request::<serde_json::Value>(req).await.unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("expected a 422, got {other:?}"),
    }
    assert!(!gone(c, "owner").await);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_end_when_told_to_stop() {
    let cluster = Cluster::without_controllers();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(carrel_controllers::run(cluster.client.clone(), stopped));
    // Working first: a dependent of a missing owner is collected.
    let ghost = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "ghost".into(),
        uid: "0b6c5d0e-0000-4000-8000-000000000002".into(),
        ..OwnerReference::default()
    };
    create(&cluster.client, "of-ghost", vec![ghost], &[]).await;
    until("collected", || async { gone(&cluster.client, "of-ghost").await.then_some(()) }).await;
    stop.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), running)
        .await
        .expect("the controllers ended")
        .unwrap();
}
