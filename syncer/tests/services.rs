//! A tenant's Services on the host, against real in-process API servers: a Service that selects
//! pods has a host Service selecting its host pods, on the tenant's own cluster IP and node
//! ports; where the host has given that address to another, the tenant Service is made again
//! with the host's; a load balancer's status comes up; a host Service leaves with its tenant
//! Service; a Service that selects nothing is carried selecting nothing, with its hand-written
//! EndpointSlices, minus the addresses a tenant may not point the host at; the tenant's own API
//! and DNS Services stay in the tenant.

mod common;

use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, create, eventually, server};

/// A host, tenant `t` (host namespace `carrel-t`) and its syncer, running.
struct Synced {
    host: kube::Client,
    tenant: kube::Client,
    stop: tokio::sync::watch::Sender<bool>,
    run: tokio::task::JoinHandle<()>,
    _stores: (tempfile::TempDir, tempfile::TempDir),
}

impl Synced {
    async fn start() -> Synced {
        Synced::start_with_nodes(&[]).await
    }

    /// The host has `nodes` before the syncer starts.
    async fn start_with_nodes(nodes: &[serde_json::Value]) -> Synced {
        let (host_dir, host_addr) = server(true, None).await;
        let (tenant_dir, tenant_addr) = server(false, None).await;
        let host = client(host_addr.port());
        let tenant = client(tenant_addr.port());
        let host_namespaces: Api<Namespace> = Api::all(host.clone());
        create(&host_namespaces, json!({"metadata": {"name": "carrel-t"}})).await;
        let host_nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(host.clone());
        for node in nodes {
            create(&host_nodes, node.clone()).await;
        }
        let shared = HostWatch::new(host.clone());
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let syncer = Syncer::new(tenant.clone(), &shared, config("t"));
        let run = tokio::spawn(async move { syncer.run(stop_rx).await });
        Synced { host, tenant, stop, run, _stores: (host_dir, tenant_dir) }
    }

    async fn stop(self) {
        self.stop.send(true).expect("stop");
        self.run.await.expect("syncer");
    }
}

fn ip(service: &Service) -> String {
    service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).unwrap_or_default()
}

fn node_ports(service: &Service) -> Vec<Option<i32>> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    ports.iter().map(|p| p.node_port).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_services_are_carried_to_the_host_on_the_addresses_the_host_gives() {
    let synced = Synced::start().await;
    let (host, tenant) = (synced.host.clone(), synced.tenant.clone());
    let host_namespaces: Api<Namespace> = Api::all(host.clone());
    create(&host_namespaces, json!({"metadata": {"name": "elsewhere"}})).await;
    let services: Api<Service> = Api::namespaced(tenant.clone(), "default");
    let host_services: Api<Service> = Api::namespaced(host.clone(), "carrel-t");

    // A LoadBalancer: its host Service on the same cluster IP and node port, selecting the
    // host pods by their carried labels within the tenant namespace.
    let web: Service = create(
        &services,
        json!({"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer",
            "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await;
    let on_host = eventually("the host Service of web", || async {
        host_services.get_opt("web-x-default").await.expect("get")
    })
    .await;
    assert_eq!(ip(&on_host), ip(&web));
    assert_eq!(node_ports(&on_host), node_ports(&web));
    let spec = on_host.spec.clone().expect("spec");
    let selector = spec.selector.expect("selector");
    assert_eq!(selector.get("label.carrel.dev/app").map(String::as_str), Some("web"));
    assert_eq!(selector.get("carrel.dev/tenant-namespace").map(String::as_str), Some("default"));
    assert_eq!(selector.len(), 2);
    assert_eq!(
        spec.ports.expect("ports")[0].target_port,
        web.spec.clone().unwrap().ports.unwrap()[0].target_port
    );

    // The host's load balancer comes up to the tenant.
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}});
    host_services
        .patch_status("web-x-default", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("host status");
    eventually("the load balancer shown to the tenant", || async {
        let web = services.get("web").await.expect("get");
        let ingress = web.status?.load_balancer?.ingress?;
        (ingress.first()?.ip.as_deref() == Some("203.0.113.7")).then_some(())
    })
    .await;

    // An address the host gave another first: the tenant Service is made again on the host's.
    let elsewhere: Api<Service> = Api::namespaced(host.clone(), "elsewhere");
    let taken: Service = create(
        &elsewhere,
        json!({"metadata": {"name": "taken"}, "spec": {"ports": [{"port": 5432}]}}),
    )
    .await;
    let db: Service = create(
        &services,
        json!({"metadata": {"name": "db"}, "spec": {"clusterIP": ip(&taken),
            "selector": {"app": "db"}, "ports": [{"port": 5432}]}}),
    )
    .await;
    let (db_again, db_on_host) = eventually("db made again on the host's address", || async {
        let again = services.get_opt("db").await.expect("get")?;
        let on_host = host_services.get_opt("db-x-default").await.expect("get")?;
        (again.metadata.uid != db.metadata.uid && ip(&again) == ip(&on_host))
            .then_some((again, on_host))
    })
    .await;
    assert_ne!(ip(&db_on_host), ip(&taken));
    assert_eq!(db_again.spec.as_ref().unwrap().selector, db.spec.as_ref().unwrap().selector);

    // A Service that selects nothing is carried selecting nothing; a deleted one leaves the
    // host.
    create(&services, json!({"metadata": {"name": "manual"}, "spec": {"ports": [{"port": 9000}]}}))
        .await;
    services.delete("web", &DeleteParams::default()).await.expect("delete");
    eventually("only db and manual on the host", || async {
        let names: Vec<String> = host_services
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        (names == ["db-x-default", "manual-x-default"]).then_some(())
    })
    .await;

    synced.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selectorless_service_is_carried_with_the_endpoints_it_may_hold() {
    use k8s_openapi::api::core::v1::Event;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    // A host node, whose address and pod range are not the tenant's to point at.
    let node = json!({"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]}});
    let synced = Synced::start_with_nodes(&[node]).await;
    let (host, tenant) = (synced.host.clone(), synced.tenant.clone());
    let services: Api<Service> = Api::namespaced(tenant.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(tenant.clone(), "default");
    let host_services: Api<Service> = Api::namespaced(host.clone(), "carrel-t");
    let host_slices: Api<EndpointSlice> = Api::namespaced(host.clone(), "carrel-t");

    // A database outside the cluster, by hand; one address of the slice is the node's, one
    // another pod's.
    let db: Service = create(
        &services,
        json!({"metadata": {"name": "db"}, "spec": {"ports": [{"name": "pg", "port": 5432}]}}),
    )
    .await;
    create(
        &slices,
        json!({"metadata": {"name": "db-1", "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4", "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["203.0.113.5"], "conditions": {"ready": true}},
                {"addresses": ["192.168.1.10"], "conditions": {"ready": true}},
                {"addresses": ["10.244.1.9"], "conditions": {"ready": true}}]}),
    )
    .await;
    let on_host = eventually("the host Service of db", || async {
        host_services.get_opt("db-x-default").await.expect("get")
    })
    .await;
    assert_eq!(ip(&on_host), ip(&db));
    assert_eq!(on_host.spec.as_ref().and_then(|s| s.selector.clone()), None);
    let slice = eventually("the host slice of db", || async {
        host_slices.get_opt("db-1-x-default").await.expect("get")
    })
    .await;
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("kubernetes.io/service-name").map(String::as_str), Some("db-x-default"));
    assert_eq!(
        labels.get("endpointslice.kubernetes.io/managed-by").map(String::as_str),
        Some("carrel-syncer")
    );
    let addresses: Vec<&String> = slice.endpoints.iter().flat_map(|e| &e.addresses).collect();
    assert_eq!(addresses, ["203.0.113.5"]);
    eventually("the refused address said on the Service", || async {
        let events: Api<Event> = Api::namespaced(tenant.clone(), "default");
        let list = events.list(&Default::default()).await.expect("events");
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("EndpointsNotCarried"))
            .filter(|e| {
                e.message.as_deref().is_some_and(|m| {
                    m.contains("192.168.1.10: a node's address")
                        && m.contains("10.244.1.9: a pod address that is not one of the tenant's")
                })
            })
            .filter(|e| e.involved_object.name.as_deref() == Some("db"))
    })
    .await;

    // The tenant's own API and DNS Services are Carrel's: not carried.
    assert!(host_services.get_opt("kubernetes-x-default").await.expect("get").is_none());

    // The slice changed: the host's follows; deleted: the host's goes.
    let patch = json!({"endpoints": [{"addresses": ["198.51.100.7"]}]});
    slices.patch("db-1", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    eventually("the host slice follows", || async {
        let slice = host_slices.get("db-1-x-default").await.expect("get");
        (slice.endpoints.first()?.addresses == ["198.51.100.7"]).then_some(())
    })
    .await;
    slices.delete("db-1", &DeleteParams::default()).await.expect("delete");
    eventually("the host slice gone", || async {
        host_slices.get_opt("db-1-x-default").await.expect("get").is_none().then_some(())
    })
    .await;

    synced.stop().await;
}
