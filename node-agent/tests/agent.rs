//! The node agent against a real in-process host API (carrel's, over plain HTTP on 127.0.0.1):
//! node registration and inventory, claims made real, pods played through their lives, logs,
//! violations, metrics, CDI and the simulated scheduler.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use carrel_gpu::{Claim, GpuModel, Holder, Placement, Shape, CLAIM_NAMESPACE};
use carrel_node_agent::{Agent, AgentConfig, PodMap};
use carrel_nvml::{GpuBackend, Simulator};
use carrel_sim::scheduler::{schedule_once, SchedulerError};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "sim-node-1";
const TIMEOUT: Duration = Duration::from_secs(30);

/// A host API server over a fresh store, on its own thread and runtime.
struct Host {
    addr: SocketAddr,
    _dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Host {
    fn start() -> Host {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = carrel_store::SledStore::open(
            dir.path().join("store"),
            carrel_store::Options::create(),
        )
        .expect("store");
        let api = Arc::new(carrel_apiserver::Api::host(Arc::new(store)).expect("host API"));
        let server = Arc::new(carrel_apiserver::Server::new(api, ""));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx.send(listener.local_addr().expect("address")).expect("send address");
                axum::serve(listener, carrel_apiserver::router(server))
                    .with_graceful_shutdown(async {
                        let _ = stop.await;
                    })
                    .await
                    .expect("serve");
            });
        });
        let addr = addr_rx.recv().expect("address");
        Host { addr, _dir: dir, shutdown: Some(shutdown), thread: Some(thread) }
    }

    fn client(&self) -> Client {
        let url = format!("http://{}", self.addr).parse().expect("URL");
        Client::try_from(kube::Config::new(url)).expect("client")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Poll `check` until it gives `Some`, failing after [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One HTTP/1.1 request on a fresh connection: status code and body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn pod(name: &str, node: Option<&str>, annotations: &[(&str, &str)], policy: &str) -> Pod {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "restartPolicy": policy,
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        },
    }))
    .expect("pod")
}

fn claim(gpu_uuid: &str, shape: Shape, start: u8, pod: &str) -> Claim {
    Claim {
        node: NODE.into(),
        gpu_uuid: gpu_uuid.into(),
        model: GpuModel::H200_141GB,
        shape,
        placement: Placement { start, size: shape.memory_slots() },
        instance_uuid: String::new(),
        holder: Holder { tenant: "team-a".into(), namespace: "default".into(), pod: pod.into() },
        host_namespace: "carrel-team-a".into(),
        host_pod: format!("{pod}-x-default"),
    }
}

/// The claim's Leases, as a syncer writes them; only the first `count` when given.
async fn create_leases(leases: &Api<Lease>, claim: &Claim, count: Option<usize>) {
    let names = claim.lease_names();
    let count = count.unwrap_or(names.len());
    for name in names.into_iter().take(count) {
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name),
                namespace: Some(CLAIM_NAMESPACE.into()),
                labels: Some(claim.labels()),
                annotations: Some(claim.annotations()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(claim.holder_identity()),
                ..Default::default()
            }),
        };
        leases.create(&PostParams::default(), &lease).await.expect("create Lease");
    }
}

async fn phase(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get_opt(name).await.ok()??.status?.phase
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_runs_a_simulated_node() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("carrel_node_agent=info")),
        )
        .try_init();
    let host = Host::start();
    let client = host.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [CLAIM_NAMESPACE, "carrel-team-a"] {
        let body = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces.create(&PostParams::default(), &body).await.expect("namespace");
    }

    let sim = Arc::new(Simulator::from_spec("h200x2", NODE).expect("simulator"));
    let backend: Arc<dyn GpuBackend> = sim.clone();
    let gpus = sim.gpus().unwrap();
    let pod_map = Arc::new(PodMap::new());
    let cdi_dir = tempfile::tempdir().unwrap();
    let config = AgentConfig {
        node_name: NODE.into(),
        inventory_interval: Duration::from_millis(200),
        cdi_dir: Some(cdi_dir.path().to_path_buf()),
        evict_violators: false,
    };
    let agent = Agent::new(client.clone(), backend, pod_map.clone(), config);
    // The node's kubelet, played beside its agent as carrel up plays it.
    let logs = carrel_sim::LogStore::new();
    let kubelet = carrel_sim::kubelet::Kubelet::new(client.clone(), NODE, 110, logs.clone());
    let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics_listener.local_addr().unwrap();
    let metrics = agent.metrics_router();
    tokio::spawn(async move { axum::serve(metrics_listener, metrics).await });
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let kubelet = tokio::spawn(kubelet.run(stop.clone()));
    let running = tokio::spawn(agent.run(stop));

    // The Node is registered, Ready, and carries the inventory.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = eventually("the registered Node with its inventory", || async {
        let node = nodes.get_opt(NODE).await.ok()??;
        let annotations = node.metadata.annotations.clone()?;
        let registered = node.status.as_ref()?.node_info.is_some();
        (registered && annotations.contains_key("gpu.carrel.dev/inventory")).then_some(node)
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["carrel.dev/simulated"], "true");
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["gpu.carrel.dev/node"], "true");
    assert_eq!(labels["nvidia.com/gpu.product"], "h200");
    assert_eq!(labels["nvidia.com/mig.strategy"], "mixed");
    let inventory: carrel_gpu::Node = serde_json::from_str(
        &node.metadata.annotations.as_ref().unwrap()["gpu.carrel.dev/inventory"],
    )
    .unwrap();
    assert_eq!(inventory.gpus.len(), 2);
    let status = node.status.clone().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "64");
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
    let conditions = status.conditions.unwrap();
    assert!(conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"), "{conditions:?}");
    let addresses = status.addresses.unwrap();
    assert!(addresses.iter().any(|a| a.type_ == "InternalIP" && a.address == "10.0.1.1"));
    assert_eq!(status.node_info.unwrap().operating_system, "linux");
    // Its Lease in kube-node-lease, held by the node and owned by its Node, as a kubelet keeps it.
    let node_leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease =
        eventually("the node's Lease", || async { node_leases.get_opt(NODE).await.ok()? }).await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert!(spec.renew_time.is_some());
    let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", NODE));
    assert_eq!(Some(&owner.uid), node.metadata.uid.as_ref());
    // A renewal moves its renewTime on.
    let renewer = carrel_sim::kubelet::Kubelet::new(
        client.clone(),
        NODE,
        110,
        carrel_sim::logs::LogStore::new(),
    );
    let before = spec.renew_time.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    renewer.renew_lease().await.unwrap();
    let after = node_leases.get(NODE).await.unwrap().spec.unwrap().renew_time.unwrap();
    assert!(after.0 > before.0, "{before:?} then {after:?}");

    // An incomplete claim (3 of its 4 Leases) first, then a complete one.
    let leases: Api<Lease> = Api::namespaced(client.clone(), CLAIM_NAMESPACE);
    let incomplete = claim(&gpus[1].uuid, Shape::G3, 0, "half");
    create_leases(&leases, &incomplete, Some(3)).await;
    let host_pods: Api<Pod> = Api::namespaced(client.clone(), "carrel-team-a");
    let holder = host_pods
        .create(&PostParams::default(), &pod("train-x-default", Some(NODE), &[], "Always"))
        .await
        .expect("holder pod");
    let holder_uid = holder.metadata.uid.clone().unwrap();
    let complete = claim(&gpus[0].uuid, Shape::G1, 0, "train");
    create_leases(&leases, &complete, None).await;

    let mig_uuid = eventually("the claim's instance and Lease annotations", || async {
        let instance = sim.instances(0).ok()?.into_iter().find(|i| i.placement.start == 0)?;
        let uuid = instance.uuid.clone()?;
        for name in complete.lease_names() {
            let lease = leases.get(&name).await.ok()?;
            let annotations = lease.metadata.annotations?;
            if annotations.get("gpu.carrel.dev/instance") != Some(&uuid) {
                return None;
            }
        }
        Some(uuid)
    })
    .await;
    assert_eq!(sim.instances(0).unwrap()[0].profile, "1g.18gb");
    assert!(sim.instances(1).unwrap().is_empty(), "the incomplete claim is ignored");
    for name in incomplete.lease_names().into_iter().take(3) {
        let lease = leases.get(&name).await.unwrap();
        let annotation = lease.metadata.annotations.unwrap()["gpu.carrel.dev/instance"].clone();
        assert_eq!(annotation, "", "{name} must stay unannotated");
    }

    // A complete claim on a GPU the node does not have: a Warning Event about its Lease.
    let lost = claim("GPU-00000000-0000-0000-0000-00000000dead", Shape::G1, 3, "lost");
    create_leases(&leases, &lost, None).await;
    let lease_events: Api<Event> = Api::namespaced(client.clone(), CLAIM_NAMESPACE);
    let failure = eventually("the MigClaimFailed Event", || async {
        let list = lease_events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("MigClaimFailed"))
    })
    .await;
    assert_eq!(failure.involved_object.kind.as_deref(), Some("Lease"));
    assert_eq!(failure.involved_object.name, lost.lease_names().first().cloned());
    assert!(failure.message.unwrap().contains("not on this node"));

    // The inventory is republished with the new instance; the CDI spec names the device.
    eventually("the republished inventory", || async {
        let node = nodes.get_opt(NODE).await.ok()??;
        let capacity = node.status?.capacity?;
        (capacity.get("nvidia.com/mig-1g.18gb")?.0 == "1").then_some(())
    })
    .await;
    let cdi_path = cdi_dir.path().join(format!("carrel-{NODE}.json"));
    let spec: serde_json::Value = eventually("the CDI spec", || async {
        serde_json::from_str(&std::fs::read_to_string(&cdi_path).ok()?).ok()
    })
    .await;
    assert_eq!(spec["kind"], "nvidia.com/gpu");
    assert_eq!(spec["devices"][0]["name"], mig_uuid.as_str());
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"][0],
        format!("NVIDIA_VISIBLE_DEVICES={mig_uuid}").as_str()
    );

    // Pods bound to the node: one succeeds, one fails, one runs until deleted.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let watch_ok = watcher(pods.clone(), watcher::Config::default().fields("metadata.name=job-ok"));
    let phases_seen = tokio::spawn(async move {
        let mut seen: Vec<String> = Vec::new();
        let mut stream = std::pin::pin!(watch_ok);
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event {
                if let Some(phase) = p.status.and_then(|s| s.phase) {
                    if seen.last() != Some(&phase) {
                        seen.push(phase.clone());
                    }
                    if phase == "Succeeded" || phase == "Failed" {
                        return seen;
                    }
                }
            }
        }
        seen
    });
    let annotations_ok =
        [("sim.carrel.dev/run-seconds", "0.2"), ("sim.carrel.dev/log", "hello\nworld")];
    pods.create(&PostParams::default(), &pod("job-ok", Some(NODE), &annotations_ok, "Never"))
        .await
        .unwrap();
    let annotations_fail =
        [("sim.carrel.dev/run-seconds", "0.2"), ("sim.carrel.dev/exit-code", "3")];
    pods.create(&PostParams::default(), &pod("job-fail", Some(NODE), &annotations_fail, "Never"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("server", Some(NODE), &[], "Always")).await.unwrap();

    let seen = tokio::time::timeout(TIMEOUT, phases_seen).await.expect("job-ok ends").unwrap();
    assert_eq!(seen, ["Pending", "Running", "Succeeded"]);
    let ok = pods.get("job-ok").await.unwrap().status.unwrap();
    let terminated = ok.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (0, Some("Completed")));
    assert!(ok.pod_ip.as_deref().unwrap().starts_with("10.128.1."));
    eventually("job-fail to fail", || async {
        (phase(&pods, "job-fail").await? == "Failed").then_some(())
    })
    .await;
    let failed = pods.get("job-fail").await.unwrap().status.unwrap();
    let terminated =
        failed.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
    assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (3, Some("Error")));

    let lines: Vec<String> = logs
        .lines("default", "job-ok", None)
        .expect("job-ok's logs")
        .into_iter()
        .map(|l| l.text)
        .collect();
    assert_eq!(
        lines,
        [format!("simulated container main started on {NODE}"), "hello".into(), "world".into()]
    );

    let server = eventually("server to run", || async {
        let p = pods.get_opt("server").await.ok()??;
        let status = p.status.clone()?;
        (status.phase.as_deref() == Some("Running")).then_some(status)
    })
    .await;
    let container = &server.container_statuses.unwrap()[0];
    assert!(container.ready && container.started == Some(true));
    assert!(container.container_id.as_deref().unwrap().starts_with("sim://"));
    assert_eq!(container.image, "busybox:1.36");
    let conditions = server.conditions.unwrap();
    for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert!(conditions.iter().any(|c| c.type_ == kind && c.status == "True"), "{kind}");
    }
    let holder_ip = host_pods.get("train-x-default").await.unwrap().status.unwrap().pod_ip;
    assert!(server.pod_ip.is_some() && holder_ip.is_some());
    assert_ne!(server.pod_ip, holder_ip, "running pods have distinct IPs");
    let (_, mut follow) = logs.follow("default", "server", Some("main")).expect("follow");
    pods.delete("server", &DeleteParams::default()).await.unwrap();
    eventually("the deleted pod's logs to go", || async {
        logs.lines("default", "server", None).is_none().then_some(())
    })
    .await;
    let ended = tokio::time::timeout(TIMEOUT, async {
        loop {
            if let Err(tokio::sync::broadcast::error::RecvError::Closed) = follow.recv().await {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "following a deleted pod's container ends");

    // A pod with a finalizer: the kubelet terminates its containers and finishes its deletion.
    let mut kept = pod("kept", Some(NODE), &[], "Always");
    kept.metadata.finalizers = Some(vec!["carrel.dev/test".into()]);
    pods.create(&PostParams::default(), &kept).await.unwrap();
    eventually("kept to run", || async {
        (phase(&pods, "kept").await? == "Running").then_some(())
    })
    .await;
    pods.delete("kept", &DeleteParams::default()).await.unwrap();
    eventually("kept's containers terminated", || async {
        let p = pods.get_opt("kept").await.ok()??;
        let status = p.status?.container_statuses?;
        status[0].state.clone()?.terminated.map(|_| ())
    })
    .await;
    pods.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("kept to go", || async { pods.get_opt("kept").await.ok()?.is_none().then_some(()) })
        .await;

    // A process of another pod on the claimed device is a violation, reported once.
    sim.add_process(&mig_uuid, 100, Some(512 << 20)).unwrap();
    pod_map.insert(100, &holder_uid);
    sim.add_process(&mig_uuid, 4242, Some(1 << 30)).unwrap();
    let foreign = "0f0e0d0c-0b0a-4909-8807-060504030201";
    pod_map.insert(4242, foreign);
    let events: Api<Event> = Api::namespaced(client.clone(), "carrel-team-a");
    let violation = eventually("the MigDeviceViolation Event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("MigDeviceViolation"))
    })
    .await;
    assert_eq!(violation.type_.as_deref(), Some("Warning"));
    assert_eq!(violation.involved_object.name.as_deref(), Some("train-x-default"));
    assert_eq!(violation.involved_object.uid.as_deref(), Some(holder_uid.as_str()));
    let message = violation.message.clone().unwrap();
    assert!(
        message.contains("4242") && message.contains(&mig_uuid) && message.contains(foreign),
        "{message}"
    );

    // /metrics shows the held device, its memory, the slices held and the violation.
    let text = eventually("metrics with the violation", || async {
        let (status, body) = http(metrics_addr, "GET", "/metrics", "").await;
        (status == 200 && body.contains("carrel_mig_violations_total{")).then_some(body)
    })
    .await;
    let fb = text
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_FB_USED{") && l.contains("tenant=\"team-a\""))
        .unwrap_or_else(|| panic!("no held device in\n{text}"));
    assert!(
        fb.contains("pod=\"train-x-default\"") && fb.contains("GPU_I_PROFILE=\"1g.18gb\""),
        "{fb}"
    );
    assert!(fb.contains(&format!("UUID=\"{}\"", gpus[0].uuid)), "{fb}");
    assert!(fb.ends_with(" 1536"), "{fb}");
    assert!(text.contains("carrel_mig_slices_held{Hostname=\"sim-node-1\",namespace=\"carrel-team-a\",pod=\"train-x-default\",tenant=\"team-a\",tenant_namespace=\"default\",tenant_pod=\"train\"} 1"), "{text}");
    let violations = text.lines().find(|l| l.starts_with("carrel_mig_violations_total{")).unwrap();
    assert!(violations.ends_with(" 1"), "{violations}");
    let list = events.list(&ListParams::default()).await.unwrap();
    let reported: Vec<&Event> =
        list.items.iter().filter(|e| e.reason.as_deref() == Some("MigDeviceViolation")).collect();
    assert_eq!(reported.len(), 1);
    assert_eq!(reported[0].count, Some(1), "one Event per (device, pid)");

    // The scheduler binds an unscheduled pod, when the host serves pods/binding.
    pods.create(&PostParams::default(), &pod("unbound", None, &[], "Always")).await.unwrap();
    let probe = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "binding-probe"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    });
    let (code, body) = http(
        host.addr,
        "POST",
        "/api/v1/namespaces/default/pods/binding-probe/binding",
        &probe.to_string(),
    )
    .await;
    let supported = code != 404 || body.contains("binding-probe");
    match schedule_once(&client).await {
        Ok(placed) => {
            assert!(supported, "binding answered {code} {body}, yet scheduling succeeded");
            assert_eq!(placed.len(), 1, "{placed:?}");
            assert_eq!((placed[0].pod.as_str(), placed[0].node.as_str()), ("unbound", NODE));
            eventually("the scheduled pod to run", || async {
                (phase(&pods, "unbound").await? == "Running").then_some(())
            })
            .await;
        }
        Err(e @ SchedulerError::BindingUnsupported { .. }) => {
            assert!(!supported, "the probe says binding is served, yet: {e}");
            let message = e.to_string();
            assert!(message.contains("pods/binding") && message.contains("404"), "{message}");
        }
        Err(e) => panic!("scheduling failed: {e}"),
    }

    stop_tx.send(true).unwrap();
    tokio::time::timeout(TIMEOUT, running).await.expect("the agent stops").unwrap().unwrap();
    tokio::time::timeout(TIMEOUT, kubelet).await.expect("the kubelet stops").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violators_are_evicted_when_asked() {
    let host = Host::start();
    let client = host.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [CLAIM_NAMESPACE, "carrel-team-a", "intruders"] {
        let body = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        namespaces.create(&PostParams::default(), &body).await.expect("namespace");
    }
    let sim = Arc::new(Simulator::from_spec("h200x1:mig=1g.18gb*1", NODE).expect("simulator"));
    let backend: Arc<dyn GpuBackend> = sim.clone();
    let gpu = sim.gpus().unwrap()[0].uuid.clone();
    let existing = sim.instances(0).unwrap()[0].clone();
    let pod_map = Arc::new(PodMap::new());
    let config = AgentConfig {
        inventory_interval: Duration::from_millis(200),
        evict_violators: true,
        ..AgentConfig::new(NODE)
    };
    let agent = Agent::new(client.clone(), backend, pod_map.clone(), config);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(agent.run(stop));

    let host_pods: Api<Pod> = Api::namespaced(client.clone(), "carrel-team-a");
    let holder = host_pods
        .create(&PostParams::default(), &pod("train-x-default", Some(NODE), &[], "Always"))
        .await
        .unwrap();
    let intruders: Api<Pod> = Api::namespaced(client.clone(), "intruders");
    let intruder = intruders
        .create(&PostParams::default(), &pod("miner", Some(NODE), &[], "Always"))
        .await
        .unwrap();
    // The claim takes the free instance already there.
    let mut held = claim(&gpu, Shape::G1, existing.placement.start, "train");
    held.instance_uuid = existing.uuid.clone().unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), CLAIM_NAMESPACE);
    create_leases(&leases, &held, None).await;
    let mig = existing.uuid.unwrap();
    sim.add_process(&mig, 10, None).unwrap();
    pod_map.insert(10, holder.metadata.uid.as_deref().unwrap());
    sim.add_process(&mig, 11, None).unwrap();
    pod_map.insert(11, intruder.metadata.uid.as_deref().unwrap());

    eventually("the intruder's eviction", || async {
        intruders.get_opt("miner").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(host_pods.get_opt("train-x-default").await.unwrap().is_some(), "the holder stays");
    assert_eq!(sim.instances(0).unwrap().len(), 1, "the free instance was reused, not replaced");
    let events: Api<Event> = Api::namespaced(client.clone(), "carrel-team-a");
    let list = events.list(&ListParams::default()).await.unwrap();
    let event = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("MigDeviceViolation"))
        .expect("a violation Event");
    let message = event.message.clone().unwrap();
    assert!(message.contains("intruders/miner") && message.contains("process 11"), "{message}");

    stop_tx.send(true).unwrap();
    tokio::time::timeout(TIMEOUT, running).await.expect("the agent stops").unwrap().unwrap();
}
