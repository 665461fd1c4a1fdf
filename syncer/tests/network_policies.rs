//! A tenant's network isolation on the host, against real in-process API servers: the tenant's
//! host namespace holds the isolation policy, kept in line; a tenant NetworkPolicy appears
//! translated on the host, follows its changes and leaves with it; host pods carry their tenant
//! pods' labels (and follow them), which the translated policies select.

mod common;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, create, eventually, server};

fn spec_of(policy: &NetworkPolicy) -> Value {
    serde_json::to_value(&policy.spec).expect("a spec")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolation_and_tenant_policies_are_kept_on_the_host() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_tenant_dir, tenant_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let tenant = client(tenant_addr.port());
    create(&Api::<Namespace>::all(host.clone()), json!({"metadata": {"name": "carrel-t"}})).await;
    let tenant_namespaces: Api<Namespace> = Api::all(tenant.clone());
    create(&tenant_namespaces, json!({"metadata": {"name": "web", "labels": {"team": "a"}}})).await;
    create(&tenant_namespaces, json!({"metadata": {"name": "api", "labels": {"team": "a"}}})).await;
    let shared = HostWatch::new(host.clone());
    let config = config("t");
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let syncer = Syncer::new(tenant.clone(), &shared, config);
    let run = tokio::spawn(async move { syncer.run(stop_rx).await });
    let host_policies: Api<NetworkPolicy> = Api::namespaced(host.clone(), "carrel-t");

    // The isolation policy: every pod, ingress from the namespace's own pods and Carrel's.
    let isolation = eventually("the isolation policy", || async {
        host_policies.get_opt("carrel-tenant-isolation").await.expect("get")
    })
    .await;
    let from = spec_of(&isolation)["ingress"][0]["from"].clone();
    assert_eq!(spec_of(&isolation)["podSelector"], json!({}));
    assert_eq!(spec_of(&isolation)["policyTypes"], json!(["Ingress"]));
    assert_eq!(from[0], json!({"podSelector": {}}));
    assert_eq!(from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "carrel-apiserver");
    assert_eq!(
        from[1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "carrel-system"
    );

    // Changed on the host: set back. Deleted: made again.
    let patch = json!({"spec": {"ingress": [{"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}});
    host_policies
        .patch("carrel-tenant-isolation", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch");
    eventually("the isolation policy set back", || async {
        let current = host_policies.get("carrel-tenant-isolation").await.expect("get");
        (spec_of(&current) == spec_of(&isolation)).then_some(())
    })
    .await;
    let uid = isolation.metadata.uid.clone();
    host_policies
        .delete("carrel-tenant-isolation", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the isolation policy made again", || async {
        let current = host_policies.get_opt("carrel-tenant-isolation").await.expect("get")?;
        (current.metadata.uid != uid && spec_of(&current) == spec_of(&isolation)).then_some(())
    })
    .await;

    // A tenant policy, translated: its pods and its peers' by their host labels.
    let policies: Api<NetworkPolicy> = Api::namespaced(tenant.clone(), "web");
    create(
        &policies,
        json!({
            "metadata": {"name": "from-team"},
            "spec": {
                "podSelector": {"matchLabels": {"app": "web"}},
                "ingress": [{
                    "from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
                    "ports": [{"port": "http"}],
                }],
            },
        }),
    )
    .await;
    let translated = eventually("the host policy", || async {
        host_policies.get_opt("from-team-x-web").await.expect("get")
    })
    .await;
    let annotations = translated.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("carrel.dev/tenant-namespace").map(String::as_str), Some("web"));
    assert_eq!(annotations.get("carrel.dev/tenant-name").map(String::as_str), Some("from-team"));
    assert_eq!(
        spec_of(&translated),
        json!({
            "podSelector": {"matchLabels": {
                "label.carrel.dev/app": "web",
                "carrel.dev/tenant-namespace": "web",
            }},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchExpressions": [{
                    "key": "carrel.dev/tenant-namespace", "operator": "In", "values": ["api", "web"],
                }]}}],
                "ports": [{"port": "http", "protocol": "TCP"}],
            }],
        })
    );

    // A namespace labelled into the team joins the peers.
    create(&tenant_namespaces, json!({"metadata": {"name": "batch", "labels": {"team": "a"}}}))
        .await;
    eventually("the new namespace among the peers", || async {
        let current = host_policies.get("from-team-x-web").await.expect("get");
        let values = spec_of(&current)["ingress"][0]["from"][0]["podSelector"]["matchExpressions"]
            [0]["values"]
            .clone();
        (values == json!(["api", "batch", "web"])).then_some(())
    })
    .await;

    // A tenant pod's labels reach its host pod, and follow it.
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
    create(
        &pods,
        json!({
            "metadata": {"name": "front", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }),
    )
    .await;
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "carrel-t");
    let label =
        |pod: &Pod, key: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
    let host_pod = eventually("the host pod", || async {
        host_pods.get_opt("front-x-default").await.expect("get")
    })
    .await;
    assert_eq!(label(&host_pod, "label.carrel.dev/app").as_deref(), Some("web"));
    assert_eq!(label(&host_pod, "carrel.dev/tenant-namespace").as_deref(), Some("default"));
    let patch = json!({"metadata": {"labels": {"app": "api", "tier": "front"}}});
    pods.patch("front", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("label");
    eventually("the host pod relabelled", || async {
        let pod = host_pods.get("front-x-default").await.expect("get");
        (label(&pod, "label.carrel.dev/app").as_deref() == Some("api")
            && label(&pod, "label.carrel.dev/tier").as_deref() == Some("front"))
        .then_some(())
    })
    .await;

    // Deleted in the tenant: gone from the host; the isolation policy stays.
    policies.delete("from-team", &DeleteParams::default()).await.expect("delete");
    eventually("the host policy deleted", || async {
        host_policies.get_opt("from-team-x-web").await.expect("get").is_none().then_some(())
    })
    .await;
    assert!(host_policies.get_opt("carrel-tenant-isolation").await.expect("get").is_some());

    // A host policy of someone else's under a tenant policy's host name is left alone.
    let hosts_own = create(
        &host_policies,
        json!({"metadata": {"name": "deny-x-web"}, "spec": {"podSelector": {}}}),
    )
    .await;
    create(&policies, json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = host_policies.get("deny-x-web").await.expect("get");
    assert_eq!(still.metadata.uid, hosts_own.metadata.uid);
    assert_eq!(still.metadata.resource_version, hosts_own.metadata.resource_version);
    policies.delete("deny", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(host_policies.get_opt("deny-x-web").await.expect("get").is_some());

    let _ = stop.send(true);
    run.await.expect("the syncer stops");
}
