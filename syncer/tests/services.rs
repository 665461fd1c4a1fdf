//! A tenant's Services on the host, against real in-process API servers: a Service that selects
//! pods has a host Service selecting its host pods, on the tenant's own cluster IP and node
//! ports; where the host has given that address to another, the tenant Service is made again
//! with the host's; a load balancer's status comes up; a host Service leaves with its tenant
//! Service; Services that select nothing stay in the tenant.

mod common;

use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, create, eventually, server};

fn ip(service: &Service) -> String {
    service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).unwrap_or_default()
}

fn node_ports(service: &Service) -> Vec<Option<i32>> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap_or_default();
    ports.iter().map(|p| p.node_port).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_services_are_carried_to_the_host_on_the_addresses_the_host_gives() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_tenant_dir, tenant_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let tenant = client(tenant_addr.port());
    let host_namespaces: Api<Namespace> = Api::all(host.clone());
    create(&host_namespaces, json!({"metadata": {"name": "carrel-t"}})).await;
    create(&host_namespaces, json!({"metadata": {"name": "elsewhere"}})).await;
    let shared = HostWatch::new(host.clone());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let syncer = Syncer::new(tenant.clone(), &shared, config("t"));
    let run = tokio::spawn(async move { syncer.run(stop_rx).await });
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

    // A Service that selects nothing (as `kubernetes`) stays in the tenant; a deleted one
    // leaves the host.
    create(&services, json!({"metadata": {"name": "manual"}, "spec": {"ports": [{"port": 9000}]}}))
        .await;
    services.delete("web", &DeleteParams::default()).await.expect("delete");
    eventually("only db on the host", || async {
        let names: Vec<String> = host_services
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect();
        (names == ["db-x-default"]).then_some(())
    })
    .await;

    stop.send(true).expect("stop");
    run.await.expect("syncer");
}
