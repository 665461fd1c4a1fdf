//! Many tenants' syncers on one shared host side ([`HostWatch`]) against real in-process API
//! servers: each syncer is shown only its own tenant's host objects, the host is watched as
//! many times for five tenants as for one, and a stopped syncer leaves nothing subscribed.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::Api;
use serde_json::json;

use carrel_syncer::{HostWatch, Syncer};
use common::{client, config, counting_server, server};

async fn create_namespace(host: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    namespaces.create(&PostParams::default(), &ns).await.expect("host namespace");
}

/// A host with tenant `t`'s host namespace, tenant `t`'s API, and the shared host side.
struct OneTenant {
    host: kube::Client,
    tenant: kube::Client,
    shared: HostWatch,
    /// The servers' stores, removed when dropped.
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

async fn one_tenant() -> OneTenant {
    let (host_dir, host_addr) = server(true, None).await;
    let (tenant_dir, tenant_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let tenant = client(tenant_addr.port());
    create_namespace(&host, "carrel-t").await;
    let shared = HostWatch::new(host.clone());
    OneTenant { host, tenant, shared, _dirs: (host_dir, tenant_dir) }
}

/// Run `syncer` until `true` is sent.
fn start(syncer: Syncer) -> (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    (stop, tokio::spawn(async move { syncer.run(stop_rx).await }))
}

async fn create_pod(tenant: &kube::Client, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .expect("pod");
    Api::<Pod>::namespaced(tenant.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
}

async fn names<K>(api: &Api<K>) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

/// Wait up to 30 s for `check` to hold.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn host_pods(host: &kube::Client, namespace: &str) -> Vec<String> {
    names(&Api::<Pod>::namespaced(host.clone(), namespace)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_syncer_is_shown_only_its_own_tenants_host_pods() {
    let (_host_dir, host_addr) = server(true, None).await;
    let (_a_dir, a_addr) = server(false, None).await;
    let (_b_dir, b_addr) = server(false, None).await;
    let host = client(host_addr.port());
    let (a, b) = (client(a_addr.port()), client(b_addr.port()));
    create_namespace(&host, "carrel-a").await;
    create_namespace(&host, "carrel-b").await;
    let shared = HostWatch::new(host.clone());
    // What each syncer is shown of the host pods, seen beside it.
    let mut a_view = shared.pods("a", "carrel-a");
    let mut b_view = shared.pods("b", "carrel-b");
    let (stop_a, run_a) = start(Syncer::new(a.clone(), &shared, config("a")));
    let (stop_b, run_b) = start(Syncer::new(b.clone(), &shared, config("b")));

    // Both tenants name their pod alike: the host pods differ only by namespace.
    create_pod(&a, "p").await;
    create_pod(&b, "p").await;
    create_pod(&a, "only-a").await;
    eventually("a's host pods", || async {
        host_pods(&host, "carrel-a").await == ["only-a-x-default", "p-x-default"]
    })
    .await;
    eventually("b's host pod", || async { host_pods(&host, "carrel-b").await == ["p-x-default"] })
        .await;
    // A host event about a's host pod goes up to a's tenant only.
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "only-a.1", "namespace": "carrel-a"},
        "involvedObject": {"kind": "Pod", "namespace": "carrel-a", "name": "only-a-x-default"},
        "reason": "Tested",
        "message": "about a's pod",
        "type": "Normal",
    }))
    .expect("event");
    Api::<Event>::namespaced(host.clone(), "carrel-a")
        .create(&PostParams::default(), &event)
        .await
        .expect("host event");
    let a_events: Api<Event> = Api::namespaced(a.clone(), "default");
    eventually("the event reaches a", || async {
        let list = a_events.list(&ListParams::default()).await.expect("events");
        list.items.iter().any(|e| e.reason.as_deref() == Some("Tested"))
    })
    .await;
    // a's pod leaves: its host pod goes, b's stays.
    Api::<Pod>::namespaced(a.clone(), "default")
        .delete("only-a", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("a's host pod goes", || async {
        host_pods(&host, "carrel-a").await == ["p-x-default"]
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Each view holds its own tenant's host pods, and was only ever sent changes to them.
    let cached = |view: &carrel_syncer::host_watch::Subscription<Pod>| {
        let mut pods: Vec<(String, String)> = view
            .store()
            .state()
            .iter()
            .map(|p| {
                (
                    p.metadata.namespace.clone().unwrap_or_default(),
                    p.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect();
        pods.sort();
        pods
    };
    assert_eq!(cached(&a_view), [("carrel-a".to_owned(), "p-x-default".to_owned())]);
    assert_eq!(cached(&b_view), [("carrel-b".to_owned(), "p-x-default".to_owned())]);
    let mut b_saw = Vec::new();
    while let Some(Some(event)) = b_view.next().now_or_never() {
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) =
            event
        {
            b_saw.push(p);
        }
    }
    assert!(!b_saw.is_empty());
    for p in &b_saw {
        let labels = p.metadata.labels.clone().unwrap_or_default();
        assert_eq!(p.metadata.namespace.as_deref(), Some("carrel-b"), "{p:?}");
        assert_eq!(labels.get("carrel.dev/tenant").map(String::as_str), Some("b"), "{p:?}");
    }
    let mut a_saw_only_a = true;
    while let Some(Some(event)) = a_view.next().now_or_never() {
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) | watcher::Event::Delete(p) =
            event
        {
            a_saw_only_a &= p.metadata.namespace.as_deref() == Some("carrel-a");
        }
    }
    assert!(a_saw_only_a);
    // And each tenant sees only its own: b's pod still runs its course, no event of a's is in b.
    assert_eq!(names(&Api::<Pod>::namespaced(b.clone(), "default")).await, ["p"]);
    let b_events = Api::<Event>::namespaced(b.clone(), "default")
        .list(&ListParams::default())
        .await
        .expect("events");
    assert!(!b_events.items.iter().any(|e| e.reason.as_deref() == Some("Tested")));
    let b_pod = Api::<Pod>::namespaced(b.clone(), "default").get("p").await.expect("b's pod");
    let phase = b_pod.status.and_then(|s| s.phase);
    assert_ne!(phase.as_deref(), Some("Failed"));

    for (stop, run) in [(stop_a, run_a), (stop_b, run_b)] {
        let _ = stop.send(true);
        run.await.expect("the syncer stops");
    }
}

/// The watch requests the host is sent while `n` idle tenants' syncers share one host side.
async fn host_watches_with(n: usize) -> usize {
    let (_host_dir, host_addr, watches) = counting_server(true, None).await;
    let (_tenant_dir, tenant_addr) = server(false, None).await;
    let shared = HostWatch::new(client(host_addr.port()));
    let runs: Vec<_> = (0..n)
        .map(|i| {
            // Idle tenants: one tenant API with nothing in it serves them all.
            let syncer = Syncer::new(client(tenant_addr.port()), &shared, config(&format!("t{i}")));
            start(syncer)
        })
        .collect();
    eventually("every syncer subscribes", || async { shared.subscribed_tenants().len() == n })
        .await;
    eventually("the host is watched", || async { watches.load(Ordering::SeqCst) >= 13 }).await;
    // A few resyncs: nothing watches the host anew.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let count = watches.load(Ordering::SeqCst);
    for (stop, run) in runs {
        let _ = stop.send(true);
        run.await.expect("the syncer stops");
    }
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_watches_do_not_grow_with_tenants() {
    let one = host_watches_with(1).await;
    let five = host_watches_with(5).await;
    // Pods, ConfigMaps, Secrets, PersistentVolumeClaims, NetworkPolicies, Services,
    // EndpointSlices, Ingresses, Events, Nodes, StorageClasses, IngressClasses, claim Leases
    // and host-name claims: one watch each.
    assert_eq!(one, 14, "host watches for one tenant");
    assert_eq!(five, one, "host watches for five tenants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_syncer_leaves_nothing_subscribed() {
    let OneTenant { host, tenant, shared, _dirs } = one_tenant().await;
    let (stop, run) = start(Syncer::new(tenant.clone(), &shared, config("t")));
    create_pod(&tenant, "p").await;
    eventually("the host pod", || async { host_pods(&host, "carrel-t").await == ["p-x-default"] })
        .await;
    assert_eq!(shared.subscribed_tenants(), ["t".to_owned()].into());
    assert_eq!(shared.subscribed_namespaces(), ["carrel-t".to_owned()].into());
    let _ = stop.send(true);
    run.await.expect("the syncer stops");
    assert!(shared.subscribed_tenants().is_empty(), "{:?}", shared.subscribed_tenants());
    assert!(shared.subscribed_namespaces().is_empty());

    // While no syncer runs, the tenant pod goes; the shared cache still holds its host pod, and
    // the next syncer, shown it as it starts, deletes it.
    Api::<Pod>::namespaced(tenant.clone(), "default")
        .delete("p", &DeleteParams::default())
        .await
        .expect("delete");
    assert_eq!(shared.cached_pod_partitions().len(), 1);
    let (stop, run) = start(Syncer::new(tenant.clone(), &shared, config("t")));
    eventually("the host pod goes", || async { host_pods(&host, "carrel-t").await.is_empty() })
        .await;
    let _ = stop.send(true);
    run.await.expect("the syncer stops");
    assert!(shared.subscribed_tenants().is_empty());
    eventually("nothing is cached for the tenant", || async {
        shared.cached_pod_partitions().is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_taken_up_on_the_shared_host_side_give_their_room_back() {
    use std::sync::Arc;

    use carrel_apiserver::intake::PodIntake;
    use carrel_syncer::taken_up;
    // One pod at a time, and no room given back by time: each create after the first waits
    // until the watch beside the syncer, shown the host pods by the shared host side, reports
    // the pod before it taken up.
    let intake = Arc::new(PodIntake::new(1, Duration::from_secs(3600)));
    let (_host_dir, host_addr) = server(true, Some(&intake)).await;
    let (_tenant_dir, tenant_addr) = server(false, Some(&intake)).await;
    let host = client(host_addr.port());
    let tenant = client(tenant_addr.port());
    create_namespace(&host, "carrel-t").await;
    let shared = HostWatch::new(host.clone());
    let settled = intake.clone();
    let watch = tokio::spawn(taken_up::watch_shared(
        "t".into(),
        tenant.clone(),
        shared.clone(),
        "carrel-t".into(),
        move |namespace, name| settled.settled("t", namespace, name),
    ));
    let (stop, run) = start(Syncer::new(tenant.clone(), &shared, config("t")));
    for name in ["one", "two", "three"] {
        let created = tokio::time::timeout(Duration::from_secs(30), create_pod(&tenant, name));
        assert!(created.await.is_ok(), "creating {name} waited 30 s for room in the window");
    }
    eventually("the host pods", || async { host_pods(&host, "carrel-t").await.len() == 3 }).await;
    let _ = stop.send(true);
    run.await.expect("the syncer stops");
    watch.abort();
    let _ = watch.await;
    assert!(shared.subscribed_tenants().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_change_for_a_tenant_without_a_running_syncer_is_told() {
    let OneTenant { host, tenant, shared, _dirs } = one_tenant().await;
    let told = std::sync::Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let record = told.clone();
    shared.on_unheard(move |tenant| record.lock().push(tenant.to_owned()));
    let (stop, run) = start(Syncer::new(tenant.clone(), &shared, config("t")));
    create_pod(&tenant, "p").await;
    eventually("the host pod", || async { host_pods(&host, "carrel-t").await == ["p-x-default"] })
        .await;
    // Heard by the syncer: nothing told.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(told.lock().is_empty(), "{:?}", told.lock());
    let _ = stop.send(true);
    run.await.expect("the syncer stops");

    // The host pod changes while no syncer runs for its tenant: told, with the tenant.
    let host_pods_api = Api::<Pod>::namespaced(host.clone(), "carrel-t");
    let patch = json!({"metadata": {"annotations": {"changed": "on the host"}}});
    host_pods_api
        .patch("p-x-default", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .expect("patch the host pod");
    eventually("the change told", || async { told.lock().iter().any(|t| t == "t") }).await;
}
