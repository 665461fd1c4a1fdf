//! A tenant's PersistentVolumeClaims carried to the host by its syncer, against real in-process
//! API servers and the simulated provisioner: the tenant sees the host's StorageClasses, each
//! tenant claim gets a host claim of its own that the provisioner binds, the tenant claim shows
//! it bound, a pod mounting it mounts the host claim, and the host claim leaves with the tenant
//! claim; the host's own claim of the same name is never touched.

mod common;

use k8s_openapi::api::core::v1::{Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams};
use kube::Api;
use serde_json::{json, Value};

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, create, eventually, server};

fn claim(name: &str, extra: Value) -> Value {
    let mut c = json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        c["spec"][k] = v.clone();
    }
    c
}

async fn host_claim_names(api: &Api<PersistentVolumeClaim>) -> Vec<String> {
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    names.sort();
    names
}

async fn events_about(api: &Api<Event>, name: &str) -> Vec<(String, String)> {
    api.list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_carried_bound_shown_and_deleted_with_the_tenants() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_tenant_dir, tenant_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let tenant = client(tenant_addr.port());
    let namespaces: Api<Namespace> = Api::all(host.clone());
    create(&namespaces, json!({"metadata": {"name": "carrel-t"}})).await;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let provisioner = tokio::spawn(carrel_sim::run_provisioner(host.clone(), stop_rx.clone()));
    let host_claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), "carrel-t");
    // The host's own claim `data`, in the tenant's host namespace: never the tenant's.
    let hosts_own =
        create(&host_claims, claim("data", json!({"storageClassName": "standard"}))).await;
    let shared = HostWatch::new(host.clone());
    let config = config("t");
    let syncer = Syncer::new(tenant.clone(), &shared, config);
    let run = tokio::spawn(async move { syncer.run(stop_rx).await });

    // The tenant sees the host's class, and which is the default.
    let classes: Api<StorageClass> = Api::all(tenant.clone());
    let standard = eventually("the host's class mirrored", || async {
        classes.get_opt("standard").await.expect("get")
    })
    .await;
    let annotations = standard.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("storageclass.kubernetes.io/is-default-class").map(String::as_str),
        Some("true")
    );
    assert_eq!(standard.provisioner, "sim.carrel.dev/local");

    // A claim naming no class is given the default by the tenant API, and carried.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(tenant.clone(), "default");
    let made = create(&claims, claim("data", json!({}))).await;
    let uid = made.metadata.uid.clone().expect("uid");
    assert_eq!(made.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()), Some("standard"));
    let bound = eventually("the tenant claim bound", || async {
        let c = claims.get("data").await.expect("get");
        let phase = c.status.as_ref().and_then(|s| s.phase.clone());
        (phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    let spec = bound.spec.clone().expect("spec");
    assert_eq!(spec.volume_name.as_deref(), Some(format!("pvc-{uid}").as_str()));
    let status = bound.status.clone().expect("status");
    assert_eq!(status.capacity.expect("capacity")["storage"].0, "1Gi");
    assert_eq!(status.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));

    // The host claim is the tenant's own, bound to a volume of its own.
    let host_claim = host_claims.get("data-x-default").await.expect("the host claim");
    let labels = host_claim.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("carrel.dev/tenant").map(String::as_str), Some("t"));
    let recorded = host_claim.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(recorded.get("carrel.dev/tenant-uid"), Some(&uid));
    let host_spec = host_claim.spec.clone().expect("spec");
    assert_eq!(host_spec.storage_class_name.as_deref(), Some("standard"));
    let host_volume = host_spec.volume_name.clone().expect("bound on the host");
    let host_uid = host_claim.metadata.uid.clone().expect("uid");
    assert_eq!(host_volume, format!("pvc-{host_uid}"));
    // The host's own claim `data` is as it was, bound to its own volume.
    let theirs = host_claims.get("data").await.expect("the host's own claim");
    assert!(!theirs.metadata.labels.unwrap_or_default().contains_key("carrel.dev/tenant"));
    assert_eq!(theirs.metadata.uid, hosts_own.metadata.uid);
    assert_ne!(theirs.spec.and_then(|s| s.volume_name), Some(host_volume.clone()));

    // A pod mounting `data` mounts the tenant's host claim.
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
    create(
        &pods,
        json!({"metadata": {"name": "db-0"}, "spec": {
            "containers": [{"name": "db", "image": "postgres",
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        }}),
    )
    .await;
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "carrel-t");
    let host_pod = eventually("the host pod", || async {
        host_pods.get_opt("db-0-x-default").await.expect("get")
    })
    .await;
    let volume = serde_json::to_value(&host_pod.spec.expect("spec").volumes.expect("volumes")[0])
        .expect("volume");
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], "data-x-default");

    // A pod mounting a claim that does not exist waits, as kube-scheduler says.
    create(
        &pods,
        json!({"metadata": {"name": "db-1"}, "spec": {
            "containers": [{"name": "db", "image": "postgres"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-1"}}],
        }}),
    )
    .await;
    let why = eventually("db-1 says why it waits", || async {
        let p = pods.get("db-1").await.expect("get");
        let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.into_iter().find(|c| c.type_ == "PodScheduled").and_then(|c| c.message)
    })
    .await;
    assert_eq!(why, "persistentvolumeclaim \"data-db-1\" not found");
    assert!(host_pods.get_opt("db-1-x-default").await.expect("get").is_none());

    // A claim picking volumes by label is not carried, and the tenant is told why.
    create(&claims, claim("picky", json!({"selector": {"matchLabels": {"disk": "ssd"}}}))).await;
    let tenant_events: Api<Event> = Api::namespaced(tenant.clone(), "default");
    let told = eventually("the refusal told", || async {
        let events = events_about(&tenant_events, "picky").await;
        events.into_iter().find(|(reason, _)| reason == "ClaimNotCarried")
    })
    .await;
    assert!(told.1.contains("spec.selector"), "{told:?}");
    assert_eq!(host_claim_names(&host_claims).await, ["data", "data-x-default"]);

    // A bound claim whose host claim is deleted under it has lost its volume.
    create(&claims, claim("scratch", json!({}))).await;
    eventually("scratch bound", || async {
        let c = claims.get("scratch").await.expect("get");
        (c.spec.and_then(|s| s.volume_name).is_some()
            && c.status.and_then(|s| s.phase).as_deref() == Some("Bound"))
        .then_some(())
    })
    .await;
    host_claims.delete("scratch-x-default", &DeleteParams::default()).await.expect("delete");
    eventually("scratch lost", || async {
        let c = claims.get("scratch").await.expect("get");
        (c.status.and_then(|s| s.phase).as_deref() == Some("Lost")).then_some(())
    })
    .await;
    // The event is recorded after the status is written.
    eventually("the loss told", || async {
        let events = events_about(&tenant_events, "scratch").await;
        events.iter().any(|(reason, _)| reason == "ClaimLost").then_some(())
    })
    .await;

    // Deleting the pod, then the claim: the host claim goes, and its volume with it.
    pods.delete("db-0", &DeleteParams::default()).await.expect("delete the pod");
    claims.delete("data", &DeleteParams::default()).await.expect("delete the claim");
    eventually("the host claim goes", || async {
        host_claims.get_opt("data-x-default").await.expect("get").is_none().then_some(())
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(host.clone());
    eventually("its volume goes", || async {
        volumes.get_opt(&host_volume).await.expect("get").is_none().then_some(())
    })
    .await;
    // The host's own claim stays.
    assert!(host_claims.get_opt("data").await.expect("get").is_some());

    let _ = stop.send(true);
    run.await.expect("the syncer stops");
    provisioner.await.expect("the provisioner stops");
}
