//! Tenants' Ingresses on the host, against real in-process API servers: an Ingress is carried
//! with its backends and TLS Secret named by their host names, the Secret copied; a host another
//! tenant holds is refused with a Warning Event and taken over once that tenant lets it go; the
//! host's load balancer status comes up; the host's IngressClasses are mirrored in the tenant;
//! a deleted Ingress leaves the host and releases its hosts. The syncers never resync here:
//! what happens follows from changes alone.

mod common;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Secret};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, create, eventually, server};

fn ingress(name: &str, host: &str, annotations: Value) -> Value {
    json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "ingressClassName": "nginx",
            "rules": [{"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}],
            "tls": [{"hosts": [host], "secretName": "web-tls"}],
        },
    })
}

async fn warnings(client: &kube::Client, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = events.list(&ListParams::default()).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_are_carried_and_a_host_has_one_tenant() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_a_dir, a_addr) = server(false, None).await;
    let (_b_dir, b_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let (a, b) = (client(a_addr.port()), client(b_addr.port()));
    let host_namespaces: Api<Namespace> = Api::all(host.clone());
    for ns in ["carrel-a", "carrel-b"] {
        create(&host_namespaces, json!({"metadata": {"name": ns}})).await;
    }
    if host_namespaces.get_opt("carrel").await.expect("get").is_none() {
        create(&host_namespaces, json!({"metadata": {"name": "carrel"}})).await;
    }
    let classes: Api<IngressClass> = Api::all(host.clone());
    create(
        &classes,
        json!({"metadata": {"name": "nginx",
            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
            "spec": {"controller": "k8s.io/ingress-nginx",
                "parameters": {"kind": "ConfigMap", "name": "nginx", "namespace": "ingress", "scope": "Namespace"}}}),
    )
    .await;
    let shared = HostWatch::new(host.clone());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut runs = Vec::new();
    for (tenant, api) in [("a", &a), ("b", &b)] {
        // No resync within the test: every pass is one a change asked for (a release included).
        let config = carrel_syncer::Config { resync: Duration::from_secs(3600), ..config(tenant) };
        let syncer = Syncer::new(api.clone(), &shared, config);
        let stop_rx = stop_rx.clone();
        runs.push(tokio::spawn(async move { syncer.run(stop_rx).await }));
    }

    // The host's class is shown to each tenant, as the default, without the host's parameters.
    let mirrored = eventually("the host IngressClass mirrored in tenant a", || async {
        Api::<IngressClass>::all(a.clone()).get_opt("nginx").await.expect("get")
    })
    .await;
    let spec = mirrored.spec.clone().expect("spec");
    assert_eq!(spec.controller.as_deref(), Some("k8s.io/ingress-nginx"));
    assert!(spec.parameters.is_none());
    let annotations = mirrored.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("ingressclass.kubernetes.io/is-default-class").map(String::as_str),
        Some("true")
    );

    // Tenant a's Ingress: on the host with its backend and Secret under their host names, the
    // Secret copied; a snippet annotation is left behind, and said so.
    let a_secrets: Api<Secret> = Api::namespaced(a.clone(), "default");
    create(
        &a_secrets,
        json!({"metadata": {"name": "web-tls"}, "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": "cert", "tls.key": "key"}}),
    )
    .await;
    let a_ingresses: Api<Ingress> = Api::namespaced(a.clone(), "default");
    let annotations = json!({
        "nginx.ingress.kubernetes.io/rewrite-target": "/",
        "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers x;",
    });
    create(&a_ingresses, ingress("web", "app.example.com", annotations)).await;
    let a_host: Api<Ingress> = Api::namespaced(host.clone(), "carrel-a");
    let on_host = eventually("tenant a's Ingress on the host", || async {
        a_host.get_opt("web-x-default").await.expect("get")
    })
    .await;
    let spec = on_host.spec.clone().expect("spec");
    let rule = &spec.rules.as_ref().expect("rules")[0];
    assert_eq!(rule.host.as_deref(), Some("app.example.com"));
    let backend = rule.http.as_ref().expect("http").paths[0].backend.service.clone().expect("svc");
    assert_eq!(backend.name, "web-x-default");
    assert_eq!(
        spec.tls.as_ref().expect("tls")[0].secret_name.as_deref(),
        Some("web-tls-x-default")
    );
    assert_eq!(spec.ingress_class_name.as_deref(), Some("nginx"));
    let carried = on_host.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        carried.get("nginx.ingress.kubernetes.io/rewrite-target").map(String::as_str),
        Some("/")
    );
    assert!(!carried.contains_key("nginx.ingress.kubernetes.io/configuration-snippet"));
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), "carrel-a");
    eventually("the TLS Secret copied", || async {
        host_secrets.get_opt("web-tls-x-default").await.expect("get")
    })
    .await;
    eventually("the snippet left behind, said on the Ingress", || async {
        let said = warnings(&a, "AnnotationNotCarried").await;
        said.iter().any(|m| m.contains("configuration-snippet")).then_some(())
    })
    .await;

    // Tenant b asks for the same host (and for one under it through a wildcard of a's):
    // refused, said on its Ingress, nothing on the host.
    let b_ingresses: Api<Ingress> = Api::namespaced(b.clone(), "default");
    create(&b_ingresses, ingress("web", "app.example.com", json!({}))).await;
    eventually("b told the host is another tenant's", || async {
        let said = warnings(&b, "NotCarried").await;
        said.iter()
            .any(|m| m.contains("\"app.example.com\" is held by another tenant"))
            .then_some(())
    })
    .await;
    let b_host: Api<Ingress> = Api::namespaced(host.clone(), "carrel-b");
    assert!(b_host.get_opt("web-x-default").await.expect("get").is_none());
    create(&a_ingresses, ingress("wild", "*.apps.example.com", json!({}))).await;
    eventually("a's wildcard on the host", || async {
        a_host.get_opt("wild-x-default").await.expect("get")
    })
    .await;
    create(&b_ingresses, ingress("under", "x.apps.example.com", json!({}))).await;
    eventually("b told the host is under a's wildcard", || async {
        let said = warnings(&b, "NotCarried").await;
        said.iter().any(|m| m.contains("\"x.apps.example.com\"")).then_some(())
    })
    .await;
    assert!(b_host.get_opt("under-x-default").await.expect("get").is_none());

    // The host's load balancer comes up to a's Ingress.
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}]}}});
    a_host
        .patch_status("web-x-default", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("host status");
    eventually("the load balancer shown to tenant a", || async {
        let web = a_ingresses.get("web").await.expect("get");
        let points = web.status?.load_balancer?.ingress?;
        (points.first()?.ip.as_deref() == Some("203.0.113.9")).then_some(())
    })
    .await;

    // A host Ingress changed under the syncer is set back.
    let changed = json!({"spec": {"ingressClassName": "other"}});
    a_host
        .patch("web-x-default", &PatchParams::default(), &Patch::Merge(&changed))
        .await
        .expect("patch");
    eventually("the host Ingress set back", || async {
        let web = a_host.get("web-x-default").await.expect("get");
        (web.spec?.ingress_class_name.as_deref() == Some("nginx")).then_some(())
    })
    .await;

    // a lets the host go: its host Ingress leaves, its claim is released, and b's Ingress is
    // carried.
    a_ingresses.delete("web", &DeleteParams::default()).await.expect("delete");
    eventually("b's Ingress carried once the host is free", || async {
        b_host.get_opt("web-x-default").await.expect("get")
    })
    .await;
    assert!(a_host.get_opt("web-x-default").await.expect("get").is_none());
    let claims: Api<Lease> = Api::namespaced(host.clone(), "carrel");
    let held: Vec<(String, String)> = claims
        .list(&ListParams::default().labels("ingress.carrel.dev/tenant"))
        .await
        .expect("claims")
        .items
        .into_iter()
        .map(|l| {
            let a = l.metadata.annotations.unwrap_or_default();
            let l = l.metadata.labels.unwrap_or_default();
            (a["ingress.carrel.dev/host"].clone(), l["ingress.carrel.dev/tenant"].clone())
        })
        .collect();
    let mut held = held;
    held.sort();
    assert_eq!(
        held,
        [
            ("*.apps.example.com".to_owned(), "a".to_owned()),
            ("app.example.com".to_owned(), "b".to_owned()),
        ]
    );

    stop.send(true).expect("stop");
    for run in runs {
        run.await.expect("syncer");
    }
}
