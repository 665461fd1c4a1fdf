//! The Endpoints and EndpointSlice controllers against an in-process API: a Service's pods, as a
//! kubelet reports them, in its slices and its Endpoints object.

mod common;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use serde_json::json;

use common::{set_pod_ip, until, Cluster};

const NS: &str = "default";

async fn create_service(client: &Client, name: &str, spec: serde_json::Value) {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    let service =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &service).await.expect("create service");
}

/// A bare pod labelled `app=<app>` whose container has port `web` (9376).
async fn create_pod(client: &Client, name: &str, app: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "nginx",
                                 "ports": [{"name": "web", "containerPort": 9376}]}]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.expect("create pod");
}

/// The endpoints of the Service's slices: (address, ready, port numbers), sorted.
async fn slice_endpoints(client: &Client, service: &str) -> Vec<(String, bool, Vec<i32>)> {
    let mut found = Vec::new();
    for slice in slices(client, service).await {
        let ports: Vec<i32> = slice.ports.iter().flatten().filter_map(|p| p.port).collect();
        for e in &slice.endpoints {
            let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false);
            found.push((e.addresses[0].clone(), ready, ports.clone()));
        }
    }
    found.sort();
    found
}

async fn slices(client: &Client, service: &str) -> Vec<EndpointSlice> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), NS);
    let selector = format!("kubernetes.io/service-name={service}");
    api.list(&ListParams::default().labels(&selector)).await.expect("list slices").items
}

/// The Endpoints object's (ready, not ready) IPs and ports, sorted.
async fn endpoints(client: &Client, service: &str) -> Option<(Vec<String>, Vec<String>, Vec<i32>)> {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let ep = api.get_opt(service).await.expect("get endpoints")?;
    let (mut ready, mut not_ready, mut ports) = (Vec::new(), Vec::new(), Vec::new());
    for subset in ep.subsets.iter().flatten() {
        ready.extend(subset.addresses.iter().flatten().map(|a| a.ip.clone()));
        not_ready.extend(subset.not_ready_addresses.iter().flatten().map(|a| a.ip.clone()));
        ports.extend(subset.ports.iter().flatten().map(|p| p.port));
    }
    ready.sort();
    not_ready.sort();
    ports.sort();
    ports.dedup();
    Some((ready, not_ready, ports))
}

fn owned(ips: &[(&str, bool)], port: i32) -> Vec<(String, bool, Vec<i32>)> {
    ips.iter().map(|(ip, ready)| ((*ip).to_owned(), *ready, vec![port])).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_lists_its_pods_in_a_slice_and_its_endpoints_as_they_change() {
    let cluster = Cluster::start().await;
    let client = &cluster.client;
    create_service(
        client,
        "web",
        json!({"selector": {"app": "web"},
        "ports": [{"port": 80, "targetPort": 8080}]}),
    )
    .await;
    create_pod(client, "web-a", "web").await;
    create_pod(client, "web-b", "web").await;
    create_pod(client, "other", "db").await;
    set_pod_ip(client, NS, "web-a", "10.1.0.1", true).await;
    set_pod_ip(client, NS, "web-b", "10.1.0.2", true).await;
    set_pod_ip(client, NS, "other", "10.1.0.9", true).await;

    let both = owned(&[("10.1.0.1", true), ("10.1.0.2", true)], 8080);
    until("a slice with both pods", || async {
        (slice_endpoints(client, "web").await == both).then_some(())
    })
    .await;
    let made = slices(client, "web").await;
    assert_eq!(made.len(), 1);
    let slice = &made[0];
    assert!(slice.metadata.name.as_deref().unwrap().starts_with("web-"));
    assert_eq!(slice.address_type, "IPv4");
    let labels = slice.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], "endpointslice-controller.k8s.io");
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Service", "web"));
    let target = slice.endpoints[0].target_ref.as_ref().unwrap();
    assert_eq!((target.kind.as_deref(), target.name.as_deref()), (Some("Pod"), Some("web-a")));
    let expected = (strings(&["10.1.0.1", "10.1.0.2"]), vec![], vec![8080]);
    until("the Endpoints object", || async {
        (endpoints(client, "web").await == Some(expected.clone())).then_some(())
    })
    .await;
    let ep: Endpoints = Api::namespaced(client.clone(), NS).get("web").await.unwrap();
    let annotations = ep.metadata.annotations.unwrap_or_default();
    assert!(annotations.contains_key("endpoints.kubernetes.io/last-change-trigger-time"));

    // A pod turning unready stays in the slice, not ready, and moves to notReadyAddresses.
    set_pod_ip(client, NS, "web-b", "10.1.0.2", false).await;
    let one_unready = owned(&[("10.1.0.1", true), ("10.1.0.2", false)], 8080);
    until("web-b not ready in the slice", || async {
        (slice_endpoints(client, "web").await == one_unready).then_some(())
    })
    .await;
    let expected = (strings(&["10.1.0.1"]), strings(&["10.1.0.2"]), vec![8080]);
    until("web-b in notReadyAddresses", || async {
        (endpoints(client, "web").await == Some(expected.clone())).then_some(())
    })
    .await;
    // The same slice was written in place.
    let after = slices(client, "web").await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].metadata.name, slice.metadata.name);

    // A pod deleted leaves the slice and the Endpoints.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    pods.delete("web-a", &now).await.unwrap();
    let left = owned(&[("10.1.0.2", false)], 8080);
    until("web-a gone from the slice", || async {
        (slice_endpoints(client, "web").await == left).then_some(())
    })
    .await;
    let expected = (vec![], strings(&["10.1.0.2"]), vec![8080]);
    until("web-a gone from the Endpoints", || async {
        (endpoints(client, "web").await == Some(expected.clone())).then_some(())
    })
    .await;

    // Deleting the Service deletes its slices (garbage collector) and its Endpoints.
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    services.delete("web", &DeleteParams::default()).await.unwrap();
    until("the slices and Endpoints gone", || async {
        (slices(client, "web").await.is_empty() && endpoints(client, "web").await.is_none())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_target_ports_resolve_per_pod() {
    let cluster = Cluster::start().await;
    let client = &cluster.client;
    create_service(
        client,
        "named",
        json!({"selector": {"app": "named"},
        "ports": [{"name": "http", "port": 80, "targetPort": "web"}]}),
    )
    .await;
    create_pod(client, "named-a", "named").await;
    set_pod_ip(client, NS, "named-a", "10.2.0.1", true).await;
    let want = owned(&[("10.2.0.1", true)], 9376);
    until("the named port resolved", || async {
        (slice_endpoints(client, "named").await == want).then_some(())
    })
    .await;
    let expected = (strings(&["10.2.0.1"]), vec![], vec![9376]);
    until("the named port in the Endpoints", || async {
        (endpoints(client, "named").await == Some(expected.clone())).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_not_ready_addresses_lists_unready_pods_as_ready() {
    let cluster = Cluster::start().await;
    let client = &cluster.client;
    create_service(
        client,
        "peers",
        json!({"selector": {"app": "peers"}, "clusterIP": "None",
        "publishNotReadyAddresses": true, "ports": [{"port": 7000}]}),
    )
    .await;
    create_pod(client, "peers-a", "peers").await;
    set_pod_ip(client, NS, "peers-a", "10.3.0.1", false).await;
    let want = owned(&[("10.3.0.1", true)], 7000);
    until("the unready pod ready in the slice", || async {
        (slice_endpoints(client, "peers").await == want).then_some(())
    })
    .await;
    let expected = (strings(&["10.3.0.1"]), vec![], vec![7000]);
    until("the unready pod in addresses", || async {
        (endpoints(client, "peers").await == Some(expected.clone())).then_some(())
    })
    .await;
    let slice = &slices(client, "peers").await[0];
    assert_eq!(slice.metadata.labels.as_ref().unwrap()["service.kubernetes.io/headless"], "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selectorless_services_endpoints_are_the_users_and_mirrored_as_slices() {
    let cluster = Cluster::start().await;
    let client = &cluster.client;
    create_service(client, "external", json!({"ports": [{"port": 5432}]})).await;
    let api: Api<Endpoints> = Api::namespaced(client.clone(), NS);
    let mine = serde_json::from_value(json!({"metadata": {"name": "external"}, "subsets": [
        {"addresses": [{"ip": "192.0.2.10"}], "notReadyAddresses": [{"ip": "192.0.2.11"}],
         "ports": [{"name": "pg", "port": 5432}]}]}))
    .unwrap();
    api.create(&PostParams::default(), &mine).await.unwrap();
    let mirrored = |want: Vec<(String, bool, Vec<i32>)>| async move {
        let slices = slices(client, "external").await;
        let ours = slices.iter().all(|s| {
            s.metadata.labels.as_ref().unwrap()["endpointslice.kubernetes.io/managed-by"]
                == "endpointslicemirroring-controller.k8s.io"
        });
        (ours && slice_endpoints(client, "external").await == want).then_some(())
    };
    until("the Endpoints mirrored as a slice", || {
        mirrored(vec![
            ("192.0.2.10".into(), true, vec![5432]),
            ("192.0.2.11".into(), false, vec![5432]),
        ])
    })
    .await;
    // The Endpoints stay the user's.
    assert_eq!(endpoints(client, "external").await.unwrap().0, strings(&["192.0.2.10"]));

    // The user changes them: the slice follows.
    let changed = serde_json::from_value(json!({"metadata": {"name": "external"}, "subsets": [
        {"addresses": [{"ip": "192.0.2.20"}], "ports": [{"name": "pg", "port": 5432}]}]}))
    .unwrap();
    let mut current = api.get("external").await.unwrap();
    let Endpoints { subsets, .. } = changed;
    current.subsets = subsets;
    api.replace("external", &PostParams::default(), &current).await.unwrap();
    until("the slice follows", || mirrored(vec![("192.0.2.20".into(), true, vec![5432])])).await;

    // Marked to skip: no slice.
    let mut current = api.get("external").await.unwrap();
    current
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("endpointslice.kubernetes.io/skip-mirror".into(), "true".into());
    api.replace("external", &PostParams::default(), &current).await.unwrap();
    until("no slice once skipped", || async {
        slices(client, "external").await.is_empty().then_some(())
    })
    .await;
}
