//! The syncer against real in-process API servers: pods go down and back up, and an unreachable
//! host loses and duplicates nothing once it is back. The tenant API makes new pods wait for
//! room in a window of one ([`PodIntake`]) that the watch of pods taken up ([`taken_up`]) gives
//! back as the syncer shows them taken up through the APIs, so the tests here also show that
//! watch at work beside the syncer. Where the syncer shows nothing (an attempt against a host
//! out of reach, a host name taken) the room comes back after a time limit, as in `carrel up`.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use carrel_apiserver::intake::PodIntake;
use carrel_syncer::{taken_up, Syncer};
use common::{client, config, server};

/// One pod at a time between a tenant API and its syncer. Room is never given back by time
/// within a test: a pod not reported taken up would hold every later create up.
fn intake() -> Arc<PodIntake> {
    Arc::new(PodIntake::new(1, Duration::from_secs(3600)))
}

/// One pod at a time, whose room also comes back after two seconds, as in `carrel up`: for the
/// tests whose pods the syncer cannot show taken up through the APIs.
fn intake_with_limit() -> Arc<PodIntake> {
    Arc::new(PodIntake::new(1, Duration::from_secs(2)))
}

/// A TCP proxy that can be cut (every connection dropped, nothing accepted) and restored on the
/// same port: the host seen through it becomes unreachable and comes back.
struct Proxy {
    port: u16,
    target: SocketAddr,
    tasks: Option<JoinSet<()>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let mut p = Proxy { port, target, tasks: None };
        p.serve(listener);
        p
    }

    fn serve(&mut self, listener: TcpListener) {
        let target = self.target;
        let mut tasks = JoinSet::new();
        let (conn_tx, mut conn_rx) = tokio::sync::mpsc::unbounded_channel::<TcpStream>();
        tasks.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = conn_tx.send(stream);
            }
        });
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Some(mut inbound) = conn_rx.recv().await {
                conns.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        self.tasks = Some(tasks);
    }

    fn cut(&mut self) {
        if let Some(mut tasks) = self.tasks.take() {
            tasks.abort_all();
        }
    }

    async fn restore(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("rebinding the proxy: {e}"),
            }
        };
        self.serve(listener);
    }
}

async fn create_namespace(host: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns");
    namespaces.create(&PostParams::default(), &ns).await.expect("host namespace");
}

/// Tenant `t`'s syncer, resyncing every second, and beside it the watch that gives a pod's room
/// in `intake` back once the syncer has taken it up; stop both by sending `true`.
fn start_syncer(
    tenant: kube::Client,
    host: kube::Client,
    intake: Arc<PodIntake>,
) -> (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<()>) {
    let config = config("t");
    let taken_up = taken_up::watch(
        "t".into(),
        tenant.clone(),
        host.clone(),
        "carrel-t".into(),
        move |namespace, name| intake.settled("t", namespace, name),
    );
    let syncer = Syncer::standalone(tenant, host, config);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(async move {
        let taken_up = tokio::spawn(taken_up);
        syncer.run(stop_rx).await;
        taken_up.abort();
    });
    (stop, run)
}

/// A host API with the host namespace `carrel-t`, and a tenant API whose pod creates wait for
/// room in `intake`; both live as long as `_stores`.
struct Clusters {
    intake: Arc<PodIntake>,
    host: kube::Client,
    tenant: kube::Client,
    _stores: (tempfile::TempDir, tempfile::TempDir),
}

async fn clusters(intake: Arc<PodIntake>) -> Clusters {
    let (host_dir, host_addr) = server(true, Some(&intake)).await;
    let (tenant_dir, tenant_addr) = server(false, Some(&intake)).await;
    let host = client(host_addr.port());
    create_namespace(&host, "carrel-t").await;
    Clusters { intake, host, tenant: client(tenant_addr.port()), _stores: (host_dir, tenant_dir) }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .expect("pod")
}

/// Create a tenant pod; it fails the test if its create waits for room the syncer never gives
/// back.
async fn create(pods: &Api<Pod>, name: &str) {
    let (params, pod) = (PostParams::default(), pod(name));
    match tokio::time::timeout(Duration::from_secs(30), pods.create(&params, &pod)).await {
        Ok(created) => {
            created.expect("create");
        }
        Err(_) => panic!("creating {name} waited 30 s for room in the window"),
    }
}

async fn host_pods(host: &kube::Client) -> Vec<String> {
    let api: Api<Pod> = Api::namespaced(host.clone(), "carrel-t");
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().filter_map(|p| p.metadata.name).collect())
        .unwrap_or_default();
    names.sort();
    names
}

async fn eventually_pods(host: &kube::Client, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names = host_pods(host).await;
        if names == want {
            return;
        }
        assert!(Instant::now() < deadline, "host pods {names:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_host_loses_and_duplicates_nothing() {
    // While the host is out of reach the syncer shows nothing of `second`: `third` waits for
    // the time limit.
    let intake = intake_with_limit();
    let (_host_dir, host_addr) = server(true, Some(&intake)).await;
    let (_tenant_dir, tenant_addr) = server(false, Some(&intake)).await;
    let mut proxy = Proxy::start(host_addr).await;
    let direct_host = client(host_addr.port());
    create_namespace(&direct_host, "carrel-t").await;

    let tenant = client(tenant_addr.port());
    let (stop, run) = start_syncer(tenant.clone(), client(proxy.port), intake.clone());

    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
    create(&pods, "first").await;
    eventually_pods(&direct_host, &["first-x-default"]).await;
    let host_pod: Pod = Api::namespaced(direct_host.clone(), "carrel-t")
        .get("first-x-default")
        .await
        .expect("host pod");
    let labels = host_pod.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("carrel.dev/tenant").map(String::as_str), Some("t"));
    let annotations = host_pod.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("carrel.dev/tenant-name").map(String::as_str), Some("first"));

    // The host goes away; the tenant goes on.
    proxy.cut();
    create(&pods, "second").await;
    create(&pods, "third").await;
    pods.delete("first", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(host_pods(&direct_host).await, ["first-x-default"], "nothing reached the host");

    // It comes back: the syncer converges, one host pod per tenant pod.
    proxy.restore().await;
    eventually_pods(&direct_host, &["second-x-default", "third-x-default"]).await;
    // And stays converged: a few resyncs later there is still exactly one of each.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(host_pods(&direct_host).await, ["second-x-default", "third-x-default"]);
    let tenant_pods = pods.list(&ListParams::default()).await.expect("list");
    let phases: Vec<Option<String>> =
        tenant_pods.items.iter().map(|p| p.status.as_ref().and_then(|s| s.phase.clone())).collect();
    assert!(!phases.iter().any(|p| p.as_deref() == Some("Failed")), "{phases:?}");

    let _ = stop.send(true);
    let _ = run.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referenced_config_maps_are_copied_and_kept_current() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let Clusters { intake, host, tenant, _stores } = clusters(intake()).await;
    let (stop, run) = start_syncer(tenant.clone(), host.clone(), intake.clone());
    let maps: Api<ConfigMap> = Api::namespaced(tenant.clone(), "default");
    let settings = |v: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"lr": v}}))
            .expect("cm")
    };
    maps.create(&PostParams::default(), &settings("0.1")).await.expect("create");
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "unused"}})).expect("cm"),
    )
    .await
    .expect("create");
    let with_volume: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}],
            "volumes": [{"name": "s", "configMap": {"name": "settings"}}],
        },
    }))
    .expect("pod");
    Api::<Pod>::namespaced(tenant.clone(), "default")
        .create(&PostParams::default(), &with_volume)
        .await
        .expect("pod");
    let host_maps: Api<ConfigMap> = Api::namespaced(host.clone(), "carrel-t");
    let read = || async {
        host_maps
            .get_opt("settings-x-default")
            .await
            .ok()
            .flatten()
            .and_then(|m| m.data?.get("lr").cloned())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while read().await.as_deref() != Some("0.1") {
        assert!(Instant::now() < deadline, "the ConfigMap was not copied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The copy is made before the host pod that mounts it.
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "carrel-t");
    let host_pod = loop {
        if let Some(pod) = host_pods.get_opt("train-x-default").await.expect("read") {
            break pod;
        }
        assert!(Instant::now() < deadline, "the host pod was not created");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let volume = serde_json::to_value(&host_pod.spec.expect("spec").volumes).expect("json");
    assert_eq!(volume[0]["configMap"]["name"], "settings-x-default");
    // A change in the tenant reaches the copy; an object no pod uses is never copied.
    let mut changed = maps.get("settings").await.expect("get");
    changed.data = Some([("lr".to_owned(), "0.2".to_owned())].into());
    maps.replace("settings", &PostParams::default(), &changed).await.expect("replace");
    while read().await.as_deref() != Some("0.2") {
        assert!(Instant::now() < deadline, "the copy did not follow the change");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(host_maps.get_opt("unused-x-default").await.expect("get").is_none());

    // A host event about the host pod becomes the tenant's event about its pod.
    use k8s_openapi::api::core::v1::Event;
    let host_uid = Api::<Pod>::namespaced(host.clone(), "carrel-t")
        .get("train-x-default")
        .await
        .expect("pod")
        .metadata
        .uid;
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "train-x-default.1", "namespace": "carrel-t"},
        "involvedObject": {"kind": "Pod", "namespace": "carrel-t", "name": "train-x-default", "uid": host_uid},
        "reason": "MigDeviceViolation",
        "message": "pid 42 is not the holder's",
        "type": "Warning",
        "count": 1,
        "source": {"component": "carrel-node-agent"},
    }))
    .expect("event");
    Api::<Event>::namespaced(host.clone(), "carrel-t")
        .create(&PostParams::default(), &event)
        .await
        .expect("host event");
    let tenant_events: Api<Event> = Api::namespaced(tenant.clone(), "default");
    let tenant_uid = Api::<Pod>::namespaced(tenant.clone(), "default")
        .get("train")
        .await
        .expect("pod")
        .metadata
        .uid;
    loop {
        let list = tenant_events.list(&ListParams::default()).await.expect("events");
        let copied = list.items.iter().find(|e| e.reason.as_deref() == Some("MigDeviceViolation"));
        if let Some(e) = copied {
            assert_eq!(e.involved_object.name.as_deref(), Some("train"));
            assert_eq!(e.involved_object.uid, tenant_uid);
            assert_eq!(e.message.as_deref(), Some("pid 42 is not the holder's"));
            break;
        }
        assert!(Instant::now() < deadline, "the host event did not reach the tenant");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    let _ = run.await;
}

/// Wait until `name` in the host namespace is gone (`present` false) or there.
async fn eventually_host_object<K>(host: &kube::Client, name: &str, present: bool)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(host.clone(), "carrel-t");
    let deadline = Instant::now() + Duration::from_secs(20);
    while api.get_opt(name).await.expect("read").is_some() != present {
        assert!(Instant::now() < deadline, "{name}: still present = {}", !present);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_of_deleted_objects_leave_the_host() {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let Clusters { intake, host, tenant, _stores } = clusters(intake()).await;
    let (stop, run) = start_syncer(tenant.clone(), host.clone(), intake.clone());
    let maps: Api<ConfigMap> = Api::namespaced(tenant.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(tenant.clone(), "default");
    let map: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"lr": "0.1"}}))
            .expect("cm");
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}}),
    )
    .expect("secret");
    maps.create(&PostParams::default(), &map).await.expect("create");
    secrets.create(&PostParams::default(), &secret).await.expect("create");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "train"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            ]}],
            "volumes": [{"name": "s", "configMap": {"name": "settings"}}],
        },
    }))
    .expect("pod");
    Api::<Pod>::namespaced(tenant.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    eventually_host_object::<ConfigMap>(&host, "settings-x-default", true).await;
    eventually_host_object::<Secret>(&host, "creds-x-default", true).await;
    eventually_pods(&host, &["train-x-default"]).await;

    // Deleted in the tenant, the ConfigMap leaves the host; the pod stays, as a running pod
    // outlives what it mounted.
    maps.delete("settings", &DeleteParams::default()).await.expect("delete");
    eventually_host_object::<ConfigMap>(&host, "settings-x-default", false).await;
    // Deleted while no syncer runs, the Secret leaves the host once one is back.
    let _ = stop.send(true);
    let _ = run.await;
    secrets.delete("creds", &DeleteParams::default()).await.expect("delete");
    assert!(Api::<Secret>::namespaced(host.clone(), "carrel-t")
        .get_opt("creds-x-default")
        .await
        .expect("read")
        .is_some());
    let (stop, run) = start_syncer(tenant.clone(), host.clone(), intake.clone());
    eventually_host_object::<Secret>(&host, "creds-x-default", false).await;
    assert_eq!(host_pods(&host).await, ["train-x-default"]);
    let _ = stop.send(true);
    let _ = run.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claimers_never_share_a_slot() {
    use carrel_gpu::{Claim, GpuModel, Holder, Placement, Shape};
    let intake = intake();
    let (_host_dir, host_addr) = server(true, Some(&intake)).await;
    let host = client(host_addr.port());
    create_namespace(&host, carrel_gpu::CLAIM_NAMESPACE).await;
    // Sixteen claimers of one GPU, each wanting a different shape or start; many overlap.
    let wants: Vec<(Shape, u8)> = vec![
        (Shape::G7, 0),
        (Shape::G4, 0),
        (Shape::G3, 0),
        (Shape::G3, 4),
        (Shape::G2, 0),
        (Shape::G2, 2),
        (Shape::G2, 4),
        (Shape::G1DoubleMemory, 6),
        (Shape::G1, 0),
        (Shape::G1, 1),
        (Shape::G1, 3),
        (Shape::G1, 5),
        (Shape::G1, 6),
        (Shape::G1Me, 2),
        (Shape::G1Me, 4),
        (Shape::G1DoubleMemory, 4),
    ];
    let mut tasks = JoinSet::new();
    for (i, (shape, start)) in wants.into_iter().enumerate() {
        let host = host.clone();
        tasks.spawn(async move {
            let claim = Claim {
                node: "n".into(),
                gpu_uuid: "GPU-1".into(),
                model: GpuModel::H200_141GB,
                shape,
                placement: Placement { start, size: shape.memory_slots() },
                instance_uuid: String::new(),
                holder: Holder {
                    tenant: format!("t{i}"),
                    namespace: "default".into(),
                    pod: "p".into(),
                },
                host_namespace: format!("carrel-t{i}"),
                host_pod: "p-x-default".into(),
            };
            let won = carrel_gpu::leases::try_claim(&host, &claim).await.expect("claim");
            (claim, won)
        });
    }
    let mut winners = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (claim, won) = done.expect("task");
        if won {
            winners.push(claim);
        }
    }
    assert!(!winners.is_empty());
    let mut slots = std::collections::BTreeSet::new();
    let mut engines = 0;
    for w in &winners {
        for s in w.placement.start..w.placement.start + w.placement.size {
            assert!(slots.insert(s), "slot {s} held twice: {winners:?}");
        }
        engines += usize::from(w.shape == Shape::G1Me);
    }
    assert!(engines <= 1, "{winners:?}");
    // What the host holds is exactly the winners' Leases: the losers rolled theirs back.
    let claims =
        carrel_gpu::leases::list(&host, carrel_gpu::leases::Selection::All).await.expect("claims");
    assert_eq!(claims.len(), winners.len(), "{claims:?}");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(host.clone(), carrel_gpu::CLAIM_NAMESPACE);
    let count = leases.list(&ListParams::default()).await.expect("list").items.len();
    let expected: usize = winners.iter().map(|w| w.lease_names().len()).sum();
    assert_eq!(count, expected);
}

/// The tenant events about pod `name` in `default` with `reason`, waiting up to 30 s for one.
async fn eventually_event(tenant: &kube::Client, name: &str, reason: &str) -> String {
    use k8s_openapi::api::core::v1::Event;
    let events: Api<Event> = Api::namespaced(tenant.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = events.list(&ListParams::default()).await.expect("events");
        let found = list.items.into_iter().find(|e| {
            e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason)
        });
        if let Some(event) = found {
            return event.message.unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "no {reason} event for {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_objects_recording_another_tenant_object_are_left_alone() {
    use k8s_openapi::api::core::v1::ConfigMap;
    // A pod whose host name is taken shows nothing taken up: the next create waits for the
    // time limit.
    let Clusters { intake, host, tenant, _stores } = clusters(intake_with_limit()).await;
    // Under the names tenant pod `default/p` and the copy of ConfigMap `default/settings` would
    // get, objects labelled as tenant t's but recording other tenant objects.
    let theirs = |name: &str, of: &str| {
        json!({"metadata": {
            "name": name,
            "labels": {"carrel.dev/tenant": "t", "app.kubernetes.io/managed-by": "carrel-syncer"},
            "annotations": {"carrel.dev/tenant-namespace": "other", "carrel.dev/tenant-name": of,
                            "carrel.dev/tenant-uid": "someone-else"},
        }})
    };
    let mut foreign_pod = theirs("p-x-default", "p");
    foreign_pod["spec"] = json!({"containers": [{"name": "c", "image": "theirs"}]});
    let host_pod_api: Api<Pod> = Api::namespaced(host.clone(), "carrel-t");
    let foreign_pod: Pod = serde_json::from_value(foreign_pod).expect("pod");
    let foreign_pod = host_pod_api.create(&PostParams::default(), &foreign_pod).await.expect("pod");
    let mut foreign_map = theirs("settings-x-default", "settings");
    foreign_map["data"] = json!({"k": "theirs"});
    let host_maps: Api<ConfigMap> = Api::namespaced(host.clone(), "carrel-t");
    let foreign_map: ConfigMap = serde_json::from_value(foreign_map).expect("cm");
    host_maps.create(&PostParams::default(), &foreign_map).await.expect("cm");

    let (stop, run) = start_syncer(tenant.clone(), host.clone(), intake.clone());
    let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
    create(&pods, "p").await;
    let why = eventually_event(&tenant, "p", "HostNameTaken").await;
    assert!(why.contains("p-x-default"), "{why}");
    let maps: Api<ConfigMap> = Api::namespaced(tenant.clone(), "default");
    let settings: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"k": "ours"}}))
            .expect("cm");
    maps.create(&PostParams::default(), &settings).await.expect("cm");
    let with_volume: Pod = serde_json::from_value(json!({
        "metadata": {"name": "q"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "s", "mountPath": "/etc/s"}]}],
            "volumes": [{"name": "s", "configMap": {"name": "settings"}}],
        },
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &with_volume).await.expect("pod");
    let why = eventually_event(&tenant, "q", "HostNameTaken").await;
    assert!(why.contains("settings-x-default"), "{why}");

    // Both are as they were, after a few resyncs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = host_pod_api.get("p-x-default").await.expect("still there");
    assert_eq!(pod.metadata.uid, foreign_pod.metadata.uid);
    assert!(pod.metadata.deletion_timestamp.is_none());
    let map = host_maps.get("settings-x-default").await.expect("still there");
    assert_eq!(map.data.and_then(|d| d.get("k").cloned()).as_deref(), Some("theirs"));
    assert_eq!(host_pods(&host).await, ["p-x-default"], "q waits: its copy's name is taken");
    let _ = stop.send(true);
    run.await.expect("the syncer stops");
}
