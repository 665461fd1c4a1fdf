//! Every namespace holds `kube-root-ca.crt`, as the root CA publisher keeps it.

mod common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use carrel_controllers::root_ca::{CONFIG_MAP, DESCRIPTION, DESCRIPTION_ANNOTATION, KEY};
use carrel_controllers::Options;
use common::{until, Cluster};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

async fn published(client: &kube::Client, ns: &str) -> Option<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let map = api.get_opt(CONFIG_MAP).await.ok()??;
    (map.data.as_ref()?.get(KEY).map(String::as_str) == Some(CA)).then_some(map)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_namespace_holds_the_root_ca_which_comes_back_when_deleted_or_changed() {
    let cluster = Cluster::start_with(Options { root_ca: Some(CA.to_owned()) }).await;
    let client = &cluster.client;
    let map = until("published in default", || published(client, "default")).await;
    assert_eq!(
        map.annotations().get(DESCRIPTION_ANNOTATION).map(String::as_str),
        Some(DESCRIPTION)
    );
    assert_eq!(map.data.as_ref().map(BTreeMap::len), Some(1));

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team = serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns");
    namespaces.create(&PostParams::default(), &team).await.expect("namespace");
    until("published in a new namespace", || published(client, "team")).await;

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    api.delete(CONFIG_MAP, &DeleteParams::default()).await.expect("delete");
    until("published again once deleted", || published(client, "team")).await;

    let changed = json!({"data": {KEY: "not a CA"}});
    api.patch(CONFIG_MAP, &PatchParams::default(), &Patch::Merge(&changed)).await.expect("patch");
    until("put back once changed", || published(client, "team")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_ca_nothing_is_published() {
    let cluster = Cluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    // The other controllers are running by now: a publisher would have written it.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(api.get_opt(CONFIG_MAP).await.expect("get").is_none());
}
