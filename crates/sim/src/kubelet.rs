//! A simulated kubelet for the embedded host of `carrel up`: it registers its Node (Ready, with
//! a Lease in `kube-node-lease` renewed as a kubelet renews it) and plays the pods bound to it
//! through their lives without running anything.
//!
//! A pod goes Pending → Running with the status a kubelet writes (IPs, conditions, container
//! statuses). Annotations drive what its containers do:
//!
//! - [`ANNOTATION_RUN_SECONDS`]: how long each run lasts (a float; absent: until deleted);
//! - [`ANNOTATION_EXIT_CODE`]: the exit code at the end of a run (default 0);
//! - [`ANNOTATION_LOG`]: text the container prints, one line per `\n`.
//!
//! At the end of a run the pod's `restartPolicy` decides: `Never` ends the pod (Succeeded on 0,
//! Failed otherwise), `OnFailure` restarts on a non-zero exit and ends on 0, `Always` restarts.
//! Restarts after the first wait a back-off ([`restart_delay`]), shown as `CrashLoopBackOff`. A pod
//! marked for deletion has its containers terminated and its deletion finished (grace period 0,
//! UID precondition). Logs go to a [`LogStore`] and are dropped with the pod. The kubelet's
//! events are written as a kubelet writes them (`Pulled`, `Created`, `Started`, `BackOff`,
//! `Killing`, `OutOfpods`), by a task of their own so that they never hold up a pod.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::logs::LogStore;
use carrel_events::{EventTarget, EventType, Recorder};

/// An event the kubelet has to say about a pod.
#[derive(Debug)]
struct Said {
    target: EventTarget,
    kind: EventType,
    reason: &'static str,
    message: String,
}

/// Annotation: seconds each run of the pod's containers lasts (absent: until deleted).
pub const ANNOTATION_RUN_SECONDS: &str = "sim.carrel.dev/run-seconds";
/// Annotation: the exit code at the end of a run (default 0).
pub const ANNOTATION_EXIT_CODE: &str = "sim.carrel.dev/exit-code";
/// Annotation: what the containers print, one line per `\n`.
pub const ANNOTATION_LOG: &str = "sim.carrel.dev/log";
/// Label `"true"` on simulated nodes.
pub const LABEL_SIMULATED: &str = "carrel.dev/simulated";
/// How often the node's Lease is renewed (the kubelet's heartbeat).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// How often the Node's conditions are written when nothing in them changed (the kubelet's
/// `nodeStatusReportFrequency`).
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// Where kubelets keep their nodes' Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How long a node's Lease holds without renewal (the kubelet's `nodeLeaseDurationSeconds`).
const LEASE_SECONDS: i32 = 40;
/// The pods a node runs at most unless told otherwise: the kubelet's default `maxPods`.
pub const DEFAULT_MAX_PODS: u32 = 110;
/// The most pods a simulated node may be told to run: what its block of pod addresses holds.
pub const MAX_PODS_LIMIT: u32 = 32_765;

/// The pod addresses of one simulated node: its block of `10.128.0.0/9`, at the block index of
/// its [`node_number`], a `/24` or, for nodes allowed more than 253 pods, as large as they need
/// (up to a `/17`). The first two addresses and the last are not given to pods.
#[derive(Clone, Debug)]
pub struct PodAddresses {
    network: u32,
    size: u32,
    used: BTreeSet<u32>,
    cursor: u32,
}

impl PodAddresses {
    /// The block of node `number`, for `max_pods` pods (at most [`MAX_PODS_LIMIT`]).
    pub fn new(number: u8, max_pods: u32) -> PodAddresses {
        let size = (max_pods.min(MAX_PODS_LIMIT) + 3).next_power_of_two().max(256);
        let base = u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0));
        PodAddresses {
            network: base + u32::from(number) * size,
            size,
            used: BTreeSet::new(),
            cursor: 2,
        }
    }

    /// The block, as a CIDR.
    pub fn cidr(&self) -> String {
        format!("{}/{}", std::net::Ipv4Addr::from(self.network), 32 - self.size.trailing_zeros())
    }

    /// The address of slot `slot`.
    pub fn ip(&self, slot: u32) -> String {
        std::net::Ipv4Addr::from(self.network + slot).to_string()
    }

    /// A free slot, taken; `None` when the block is full.
    pub fn take(&mut self) -> Option<u32> {
        let usable = self.size - 3;
        if self.used.len() >= usable as usize {
            return None;
        }
        loop {
            let slot = self.cursor;
            self.cursor = if self.cursor + 1 >= self.size - 1 { 2 } else { self.cursor + 1 };
            if self.used.insert(slot) {
                return Some(slot);
            }
        }
    }

    /// The slot of address `ip`, taken, if it is a free pod address of this block.
    pub fn adopt(&mut self, ip: &str) -> Option<u32> {
        let ip: std::net::Ipv4Addr = ip.parse().ok()?;
        let slot = u32::from(ip).checked_sub(self.network)?;
        ((2..self.size - 1).contains(&slot) && self.used.insert(slot)).then_some(slot)
    }

    /// Slot `slot` is free again.
    pub fn release(&mut self, slot: u32) {
        self.used.remove(&slot);
    }
}

/// What a pod's simulated containers do, from its annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    /// How long a run lasts; `None`: until the pod is deleted.
    pub run_seconds: Option<f64>,
    /// The exit code at the end of a run.
    pub exit_code: i32,
    /// The lines printed at the start of a run.
    pub log: Vec<String>,
}

impl Behaviour {
    /// The behaviour the annotations ask for; values that do not parse are ignored.
    pub fn of(annotations: &BTreeMap<String, String>) -> Behaviour {
        let run_seconds = annotations
            .get(ANNOTATION_RUN_SECONDS)
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s.min(1e9));
        let exit_code = annotations
            .get(ANNOTATION_EXIT_CODE)
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(0);
        let log = match annotations.get(ANNOTATION_LOG) {
            Some(text) => {
                let text = text.strip_suffix('\n').unwrap_or(text);
                text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned()).collect()
            }
            None => Vec::new(),
        };
        Behaviour { run_seconds, exit_code, log }
    }
}

/// A pod's `restartPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart whatever the exit code (the default).
    Always,
    /// Restart on a non-zero exit code.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// The policy a pod spec names (`Always` when absent or unknown).
    pub fn parse(policy: Option<&str>) -> RestartPolicy {
        match policy {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }
}

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, not running yet.
    Pending,
    /// Running.
    Running,
    /// Every container ended with 0 and will not restart.
    Succeeded,
    /// A container ended with a non-zero code and will not restart.
    Failed,
}

impl Phase {
    /// The phase as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// What happens when a run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterExit {
    /// The containers start again.
    Restart,
    /// The pod ends in this phase.
    Finish(Phase),
}

/// What the restart policy makes of a run that ended with `exit_code`.
pub fn after_exit(policy: RestartPolicy, exit_code: i32) -> AfterExit {
    let ended = if exit_code == 0 { Phase::Succeeded } else { Phase::Failed };
    match (policy, exit_code) {
        (RestartPolicy::Always, _) => AfterExit::Restart,
        (RestartPolicy::OnFailure, 0) => AfterExit::Finish(ended),
        (RestartPolicy::OnFailure, _) => AfterExit::Restart,
        (RestartPolicy::Never, _) => AfterExit::Finish(ended),
    }
}

/// How long a container that has restarted `restarts` times waits before the next restart: the
/// first restart is immediate, then 1 s doubling up to 60 s.
pub fn restart_delay(restarts: u32) -> Duration {
    match restarts {
        0 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 1).min(6)).min(Duration::from_secs(60)),
    }
}

/// The number the node's addresses derive from: its name's trailing digits (mod 256), else a hash.
pub fn node_number(name: &str) -> u8 {
    let digits: String = name
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    match digits.parse::<u64>() {
        Ok(n) => (n % 256) as u8,
        Err(_) => (fnv(name) % 256) as u8,
    }
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn from_time(t: &Time) -> Option<DateTime<Utc>> {
    let ts = t.0;
    DateTime::from_timestamp(ts.as_second(), u32::try_from(ts.subsec_nanosecond()).ok()?)
}

/// How a container run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Terminated {
    exit_code: i32,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    /// The restart count of the run (its container ID).
    run: u32,
}

impl Terminated {
    fn json(&self, uid: &str, container: &str) -> Value {
        json!({
            "exitCode": self.exit_code,
            "reason": if self.exit_code == 0 { "Completed" } else { "Error" },
            "startedAt": rfc3339(&self.started_at),
            "finishedAt": rfc3339(&self.finished_at),
            "containerID": container_id(uid, container, self.run),
        })
    }
}

fn container_id(uid: &str, container: &str, run: u32) -> String {
    format!("sim://{uid}/{container}/{run}")
}

#[derive(Clone, Debug, PartialEq)]
enum RunState {
    Running { since: DateTime<Utc> },
    BackOff { delay: Duration },
    Finished { phase: Phase, terminated: Terminated },
}

/// One pod as this kubelet plays it.
#[derive(Clone, Debug)]
struct PodRun {
    namespace: String,
    name: String,
    uid: String,
    /// (name, image) of each container.
    containers: Vec<(String, String)>,
    init_containers: Vec<(String, String)>,
    policy: RestartPolicy,
    behaviour: Behaviour,
    pod_ip: Option<String>,
    ip_slot: Option<u32>,
    /// Why the kubelet refused the pod (reason, message), for a pod it would not run.
    rejected: Option<(String, String)>,
    start_time: DateTime<Utc>,
    transition: DateTime<Utc>,
    state: RunState,
    restart_count: u32,
    last_terminated: Option<Terminated>,
    deadline: Option<Instant>,
    status_written: bool,
}

impl PodRun {
    fn phase(&self) -> Phase {
        match &self.state {
            RunState::Running { .. } | RunState::BackOff { .. } => Phase::Running,
            RunState::Finished { phase, .. } => *phase,
        }
    }

    /// The pod's `status`.
    fn status(&self, host_ip: &str) -> Value {
        if let Some((reason, message)) = &self.rejected {
            return json!({"phase": "Failed", "reason": reason, "message": message});
        }
        let ready = matches!(self.state, RunState::Running { .. });
        let finished = matches!(self.state, RunState::Finished { .. });
        let condition = |kind: &str, ok: bool, reason: Option<&str>, at: &DateTime<Utc>| {
            let mut c = json!({
                "type": kind,
                "status": if ok { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": rfc3339(at),
            });
            if let Some(reason) = reason.filter(|_| !ok) {
                c["reason"] = json!(reason);
            }
            c
        };
        let not_ready = if finished { "PodCompleted" } else { "ContainersNotReady" };
        let conditions = json!([
            condition("PodReadyToStartContainers", !finished, None, &self.transition),
            condition("Initialized", true, None, &self.start_time),
            condition("Ready", ready, Some(not_ready), &self.transition),
            condition("ContainersReady", ready, Some(not_ready), &self.transition),
            condition("PodScheduled", true, None, &self.start_time),
        ]);
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, image)| {
                let (state, id) = match &self.state {
                    RunState::Running { since } => (
                        json!({"running": {"startedAt": rfc3339(since)}}),
                        Some(container_id(&self.uid, name, self.restart_count)),
                    ),
                    RunState::BackOff { delay } => (
                        json!({"waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": format!(
                                "back-off {}s restarting failed container={name} pod={}_{}({})",
                                delay.as_secs_f64(), self.name, self.namespace, self.uid
                            ),
                        }}),
                        None,
                    ),
                    RunState::Finished { terminated, .. } => (
                        json!({"terminated": terminated.json(&self.uid, name)}),
                        Some(container_id(&self.uid, name, terminated.run)),
                    ),
                };
                let last = match &self.last_terminated {
                    Some(t) => json!({"terminated": t.json(&self.uid, name)}),
                    None => json!({}),
                };
                let mut status = json!({
                    "name": name,
                    "image": image,
                    "imageID": format!("sim://{image}"),
                    "ready": ready,
                    "started": ready,
                    "restartCount": self.restart_count,
                    "state": state,
                    "lastState": last,
                });
                if let Some(id) = id {
                    status["containerID"] = json!(id);
                }
                status
            })
            .collect();
        let mut status = json!({
            "phase": self.phase().as_str(),
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": rfc3339(&self.start_time),
            "conditions": conditions,
            "containerStatuses": containers,
        });
        if let Some(ip) = &self.pod_ip {
            status["podIP"] = json!(ip);
            status["podIPs"] = json!([{"ip": ip}]);
        }
        if !self.init_containers.is_empty() {
            let done = Terminated {
                exit_code: 0,
                started_at: self.start_time,
                finished_at: self.start_time,
                run: 0,
            };
            let init: Vec<Value> = self
                .init_containers
                .iter()
                .map(|(name, image)| {
                    json!({
                        "name": name,
                        "image": image,
                        "imageID": format!("sim://{image}"),
                        "containerID": container_id(&self.uid, name, 0),
                        "ready": true,
                        "started": false,
                        "restartCount": 0,
                        "state": {"terminated": done.json(&self.uid, name)},
                        "lastState": {},
                    })
                })
                .collect();
            status["initContainerStatuses"] = json!(init);
        }
        status
    }
}

/// The simulated kubelet of one node.
pub struct Kubelet {
    client: Client,
    node: String,
    number: u8,
    logs: LogStore,
    runs: HashMap<String, PodRun>,
    /// UIDs of pods whose deletion this kubelet finished.
    deleted: HashSet<String>,
    ips: PodAddresses,
    max_pods: u32,
    registered_at: DateTime<Utc>,
    /// Events to write; the writer task holds the other end.
    say: tokio::sync::mpsc::UnboundedSender<Said>,
    said: Option<tokio::sync::mpsc::UnboundedReceiver<Said>>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet")
            .field("node", &self.node)
            .field("number", &self.number)
            .field("ips", &self.ips)
            .finish_non_exhaustive()
    }
}

impl Kubelet {
    /// The kubelet of node `node_name`, running at most `max_pods` pods (at most
    /// [`MAX_PODS_LIMIT`]) and writing container logs to `logs`.
    pub fn new(client: Client, node_name: &str, max_pods: u32, logs: LogStore) -> Kubelet {
        let number = node_number(node_name);
        let max_pods = max_pods.clamp(1, MAX_PODS_LIMIT);
        let (say, said) = tokio::sync::mpsc::unbounded_channel();
        Kubelet {
            say,
            said: Some(said),
            client,
            node: node_name.to_owned(),
            number,
            logs,
            runs: HashMap::new(),
            deleted: HashSet::new(),
            ips: PodAddresses::new(number, max_pods),
            max_pods,
            registered_at: Utc::now(),
        }
    }

    /// The node's InternalIP (`10.0.<n>.1`).
    pub fn host_ip(&self) -> String {
        format!("10.0.{}.1", self.number)
    }

    fn node_conditions(&self, now: &DateTime<Utc>) -> Value {
        let since = rfc3339(&self.registered_at);
        let now = rfc3339(now);
        let c = |kind: &str, status: &str, reason: &str, message: &str| {
            json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since,
            })
        };
        json!([
            c(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available"
            ),
            c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            c(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available"
            ),
            c(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status (simulated by carrel-node-agent)"
            ),
        ])
    }

    /// The Node's `status` as registration writes it.
    fn node_status(&self, now: &DateTime<Utc>) -> Value {
        let resources = json!({"cpu": "64", "memory": "512Gi", "pods": self.max_pods.to_string()});
        let id = |salt: &str| {
            let a = fnv(&format!("{salt}/{}", self.node));
            let b = fnv(&format!(
                "{}/{salt}/{}",
                self.node,
                self.registered_at.timestamp_nanos_opt().unwrap_or(0)
            ));
            (a, b)
        };
        let (m1, m2) = id("machine");
        let (b1, b2) = id("boot");
        let uuid = |a: u64, b: u64| {
            format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xffff,
                b >> 48,
                b & 0xffff_ffff_ffff
            )
        };
        json!({
            "capacity": resources,
            "allocatable": resources,
            "conditions": self.node_conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": self.host_ip()},
                {"type": "Hostname", "address": self.node},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{m1:016x}{m2:016x}"),
                "systemUUID": uuid(m1, m2),
                "bootID": uuid(b1, b2),
                "kernelVersion": "6.8.0-carrel-sim",
                "osImage": "Carrel simulated node",
                "containerRuntimeVersion": "sim://0.1.0",
                "kubeletVersion": "v1.33.0-carrel-sim",
                "kubeProxyVersion": "v1.33.0-carrel-sim",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        })
    }

    /// Create the Node if absent, and write its labels and status.
    pub async fn register(&self) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), self.node.clone()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
            (LABEL_SIMULATED.to_owned(), "true".to_owned()),
        ]);
        if nodes.get_opt(&self.node).await?.is_none() {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(self.node.clone()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                ..Node::default()
            };
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => tracing::info!(node = %self.node, "registered the simulated node"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        let params = PatchParams::default();
        let patch = json!({"metadata": {"labels": labels}});
        nodes.patch(&self.node, &params, &Patch::Merge(&patch)).await?;
        let status = json!({"status": self.node_status(&Utc::now())});
        nodes.patch_status(&self.node, &params, &Patch::Merge(&status)).await?;
        Ok(())
    }

    /// Renew the Node's conditions.
    pub async fn heartbeat(&self) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"status": {"conditions": self.node_conditions(&Utc::now())}});
        nodes.patch_status(&self.node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// Renew the node's Lease in [`LEASE_NAMESPACE`], making it (owned by the Node) if missing.
    pub async fn renew_lease(&self) -> Result<(), kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let now = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
        let spec = json!({
            "holderIdentity": self.node,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now,
        });
        let patch = json!({"spec": spec});
        match leases.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            other => return other.map(drop),
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let uid = nodes.get(&self.node).await?.metadata.uid.unwrap_or_default();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.node,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}],
            },
            "spec": spec,
        });
        let lease: Lease = serde_json::from_value(lease).map_err(kube::Error::SerdeError)?;
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Register, then play the node's pods until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.register().await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(node = %self.node, error = %e, "could not register the simulated node; retrying");
                    tokio::select! {
                        _ = crate::stopped(&mut stop) => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
        if let Some(mut said) = self.said.take() {
            let recorder = Recorder::for_component(self.client.clone(), "kubelet", &self.node);
            tokio::spawn(async move {
                while let Some(s) = said.recv().await {
                    if let Err(e) = recorder.record(&s.target, s.kind, s.reason, &s.message).await {
                        tracing::debug!(pod = %s.target.name, reason = s.reason, error = %e, "could not write a kubelet event");
                    }
                }
            });
        }
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let (reader, writer) = reflector::store();
        let stream = watcher(pods, config).default_backoff().reflect(writer);
        let mut stream = std::pin::pin!(stream);
        if let Err(e) = self.renew_lease().await {
            tracing::warn!(node = %self.node, error = %e, "making the node's Lease failed");
        }
        let mut heartbeat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
        let mut last_status = Instant::now();
        let mut ready = false;
        // What to look at after this turn: everything (after a relist), or the pods an event
        // named and those whose time is up. Looking at every pod on every event would make a
        // busy node quadratic.
        let mut full = false;
        let mut touched: Vec<Arc<Pod>> = Vec::new();
        loop {
            let deadline = self.runs.values().filter_map(|r| r.deadline).min();
            let timer = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = crate::stopped(&mut stop) => break,
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::InitDone)) => {
                        ready = true;
                        full = true;
                    }
                    Some(Ok(watcher::Event::Apply(pod))) => touched.push(Arc::new(pod)),
                    Some(Ok(watcher::Event::Delete(pod))) => {
                        if let Some(run) = pod.metadata.uid.as_ref().and_then(|u| self.runs.remove(u)) {
                            self.forget(&run);
                        }
                        if let Some(uid) = &pod.metadata.uid {
                            self.deleted.remove(uid);
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        tracing::warn!(node = %self.node, error = %e, "watching the node's pods");
                        continue;
                    }
                    None => break,
                },
                _ = heartbeat.tick() => {
                    if let Err(e) = self.renew_lease().await {
                        tracing::warn!(node = %self.node, error = %e, "renewing the node's Lease failed");
                    }
                    if last_status.elapsed() < STATUS_REPORT {
                        continue;
                    }
                    last_status = Instant::now();
                    if let Err(e) = self.heartbeat().await {
                        tracing::warn!(node = %self.node, error = %e, "node heartbeat failed");
                        if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                            if let Err(e) = self.register().await {
                                tracing::warn!(node = %self.node, error = %e, "re-registering the node failed");
                            }
                        }
                    }
                }
                _ = timer => {}
            }
            if !ready {
                continue;
            }
            if full {
                full = false;
                touched.clear();
                self.sync(&reader.state()).await;
                continue;
            }
            let now = Instant::now();
            let due: Vec<String> = self
                .runs
                .iter()
                .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now) || !r.status_written)
                .map(|(uid, _)| uid.clone())
                .collect();
            let mut pods = std::mem::take(&mut touched);
            for uid in due {
                if pods.iter().any(|p| p.metadata.uid.as_deref() == Some(uid.as_str())) {
                    continue;
                }
                let run = &self.runs[&uid];
                let key = reflector::ObjectRef::new(&run.name).within(&run.namespace);
                if let Some(pod) = reader.get(&key) {
                    pods.push(pod);
                }
            }
            for pod in pods {
                self.sync_pod(&pod).await;
            }
        }
    }

    /// Every pod of the node: runs of pods gone are forgotten, the rest looked at.
    async fn sync(&mut self, pods: &[Arc<Pod>]) {
        let present: HashSet<&str> =
            pods.iter().filter_map(|p| p.metadata.uid.as_deref()).collect();
        let gone: Vec<String> =
            self.runs.keys().filter(|u| !present.contains(u.as_str())).cloned().collect();
        for uid in gone {
            if let Some(run) = self.runs.remove(&uid) {
                self.forget(&run);
            }
        }
        self.deleted.retain(|u| present.contains(u.as_str()));
        for pod in pods {
            self.sync_pod(pod).await;
        }
    }

    /// One pod: admitted when new, advanced when its time is up, its status written.
    async fn sync_pod(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            self.finish_deletion(pod, &uid).await;
            return;
        }
        if !self.runs.contains_key(&uid) {
            match self.admit(pod, &uid) {
                Some(run) => {
                    self.runs.insert(uid.clone(), run);
                }
                None => return,
            }
        }
        let host_ip = self.host_ip();
        let Some(mut run) = self.runs.remove(&uid) else {
            return;
        };
        if run.deadline.is_some_and(|d| d <= Instant::now()) {
            self.advance(&mut run);
        }
        if !run.status_written {
            run.status_written = self.write_status(&run, &host_ip).await;
        }
        self.runs.insert(uid, run);
    }

    /// A pod gone from the API: its running containers are stopped, as a kubelet stops those of
    /// a pod deleted at once, and its log and address are given up.
    fn forget(&mut self, run: &PodRun) {
        if matches!(run.state, RunState::Running { .. }) {
            self.say_stopped(run);
        }
        self.logs.remove(&run.namespace, &run.name);
        if let Some(slot) = run.ip_slot {
            self.ips.release(slot);
        }
    }

    fn start_logs(&self, run: &PodRun) {
        for (container, _) in &run.containers {
            self.logs.start(&run.namespace, &run.name, container);
            let started = format!("simulated container {container} started on {}", self.node);
            self.logs.push(&run.namespace, &run.name, container, &started);
            for line in &run.behaviour.log {
                self.logs.push(&run.namespace, &run.name, container, line);
            }
        }
    }

    fn run_deadline(behaviour: &Behaviour, started: DateTime<Utc>) -> Option<Instant> {
        let seconds = behaviour.run_seconds?;
        let elapsed = (Utc::now() - started).to_std().unwrap_or(Duration::ZERO);
        let run = Duration::from_secs_f64(seconds);
        Some(Instant::now() + run.saturating_sub(elapsed))
    }

    /// A pod seen for the first time: started, or adopted when it already runs (a restarted
    /// agent), or remembered as finished.
    fn admit(&mut self, pod: &Pod, uid: &str) -> Option<PodRun> {
        let spec = pod.spec.as_ref()?;
        let names = |cs: &[k8s_openapi::api::core::v1::Container]| -> Vec<(String, String)> {
            cs.iter().map(|c| (c.name.clone(), c.image.clone().unwrap_or_default())).collect()
        };
        let status = pod.status.clone().unwrap_or_default();
        let now = Utc::now();
        let mut run = PodRun {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_owned(),
            containers: names(&spec.containers),
            init_containers: names(spec.init_containers.as_deref().unwrap_or_default()),
            policy: RestartPolicy::parse(spec.restart_policy.as_deref()),
            behaviour: Behaviour::of(&pod.metadata.annotations.clone().unwrap_or_default()),
            pod_ip: None,
            ip_slot: None,
            rejected: None,
            start_time: now,
            transition: now,
            state: RunState::Running { since: now },
            restart_count: 0,
            last_terminated: None,
            deadline: None,
            status_written: false,
        };
        match status.phase.as_deref() {
            Some(phase @ ("Succeeded" | "Failed")) => {
                let phase = if phase == "Succeeded" { Phase::Succeeded } else { Phase::Failed };
                run.state = RunState::Finished {
                    phase,
                    terminated: Terminated {
                        exit_code: i32::from(phase == Phase::Failed),
                        started_at: now,
                        finished_at: now,
                        run: 0,
                    },
                };
                run.status_written = true;
            }
            Some("Running") => {
                let slot = status.pod_ip.as_deref().and_then(|ip| self.ips.adopt(ip));
                match slot {
                    Some(k) => {
                        run.ip_slot = Some(k);
                        run.pod_ip = status.pod_ip.clone();
                    }
                    None => {
                        run.ip_slot = self.ips.take();
                        run.pod_ip = run.ip_slot.map(|k| self.ips.ip(k));
                        run.status_written = false;
                    }
                }
                run.start_time = status.start_time.as_ref().and_then(from_time).unwrap_or(now);
                let first = status.container_statuses.as_ref().and_then(|s| s.first().cloned());
                run.restart_count =
                    first.as_ref().map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0));
                let since = first
                    .as_ref()
                    .and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.as_ref())
                    .and_then(from_time)
                    .unwrap_or(now);
                run.state = RunState::Running { since };
                run.deadline = Self::run_deadline(&run.behaviour, since);
                run.status_written = run.pod_ip.is_some() && slot.is_some();
                self.start_logs(&run);
                tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "adopted a running pod");
            }
            _ => {
                let used = self
                    .runs
                    .values()
                    .filter(|r| !matches!(r.state, RunState::Finished { .. }))
                    .count();
                let capacity = self.max_pods as usize;
                if used >= capacity {
                    // As a kubelet refuses a pod bound past its node's room: Failed, OutOfpods.
                    let why = format!(
                        "Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {capacity}"
                    );
                    tracing::warn!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "{why}");
                    let message = format!("Pod was rejected: {why}");
                    self.say(&run, EventType::Warning, "OutOfpods", why);
                    run.rejected = Some(("OutOfpods".to_owned(), message));
                    run.state = RunState::Finished {
                        phase: Phase::Failed,
                        terminated: Terminated {
                            exit_code: 0,
                            started_at: now,
                            finished_at: now,
                            run: 0,
                        },
                    };
                    return Some(run);
                }
                run.ip_slot = self.ips.take();
                run.pod_ip = run.ip_slot.map(|k| self.ips.ip(k));
                run.deadline = Self::run_deadline(&run.behaviour, now);
                self.start_logs(&run);
                self.say_started(&run);
                tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "started a pod");
            }
        }
        Some(run)
    }

    /// The end of a run, or of a back-off.
    fn advance(&mut self, run: &mut PodRun) {
        let now = Utc::now();
        run.deadline = None;
        match run.state.clone() {
            RunState::Running { since } => {
                let code = run.behaviour.exit_code;
                let terminated = Terminated {
                    exit_code: code,
                    started_at: since,
                    finished_at: now,
                    run: run.restart_count,
                };
                for (container, _) in &run.containers {
                    self.logs.finish(&run.namespace, &run.name, container);
                }
                match after_exit(run.policy, code) {
                    AfterExit::Finish(phase) => {
                        run.state = RunState::Finished { phase, terminated };
                        if let Some(slot) = run.ip_slot.take() {
                            self.ips.release(slot);
                        }
                        tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), phase = phase.as_str(), exit_code = code, "pod finished");
                    }
                    AfterExit::Restart => {
                        run.last_terminated = Some(terminated);
                        let delay = restart_delay(run.restart_count);
                        if delay.is_zero() {
                            self.restart(run);
                        } else {
                            for (container, _) in &run.containers {
                                let message = format!(
                                    "Back-off restarting failed container {container} in pod {}_{}({})",
                                    run.name, run.namespace, run.uid
                                );
                                self.say(run, EventType::Warning, "BackOff", message);
                            }
                            run.state = RunState::BackOff { delay };
                            run.deadline = Some(Instant::now() + delay);
                        }
                    }
                }
            }
            RunState::BackOff { .. } => self.restart(run),
            RunState::Finished { .. } => {}
        }
        run.transition = now;
        run.status_written = false;
    }

    fn restart(&mut self, run: &mut PodRun) {
        let now = Utc::now();
        run.restart_count += 1;
        run.state = RunState::Running { since: now };
        run.deadline = Self::run_deadline(&run.behaviour, now);
        self.start_logs(run);
        self.say_started(run);
    }

    /// Have the event writer say `reason` about `run`'s pod.
    fn say(&self, run: &PodRun, kind: EventType, reason: &'static str, message: String) {
        let target = EventTarget::pod(&run.namespace, &run.name, Some(run.uid.clone()));
        let _ = self.say.send(Said { target, kind, reason, message });
    }

    /// What a kubelet says as it starts a pod's containers.
    fn say_started(&self, run: &PodRun) {
        for (container, image) in &run.containers {
            let pulled = format!("Container image {image:?} already present on machine");
            self.say(run, EventType::Normal, "Pulled", pulled);
            self.say(run, EventType::Normal, "Created", format!("Created container: {container}"));
            self.say(run, EventType::Normal, "Started", format!("Started container {container}"));
        }
    }

    /// What a kubelet says as it stops a pod's running containers.
    fn say_stopped(&self, run: &PodRun) {
        for (container, _) in &run.containers {
            self.say(run, EventType::Normal, "Killing", format!("Stopping container {container}"));
        }
    }

    async fn write_status(&self, run: &PodRun, host_ip: &str) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &run.namespace);
        let patch = json!({"status": run.status(host_ip)});
        match api.patch_status(&run.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 => true,
            Err(e) => {
                tracing::warn!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), error = %e, "could not write the pod's status");
                false
            }
        }
    }

    /// A pod marked for deletion: its containers terminated, its deletion finished.
    async fn finish_deletion(&mut self, pod: &Pod, uid: &str) {
        if self.deleted.contains(uid) {
            return;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let host_ip = self.host_ip();
        if let Some(mut run) = self.runs.remove(uid) {
            let now = Utc::now();
            let stopped = |since| Terminated {
                exit_code: 0,
                started_at: since,
                finished_at: now,
                run: run.restart_count,
            };
            match &run.state {
                RunState::Running { since } => {
                    self.say_stopped(&run);
                    let terminated = stopped(*since);
                    run.state = RunState::Finished { phase: Phase::Succeeded, terminated };
                }
                RunState::BackOff { .. } => {
                    let terminated = run.last_terminated.clone().unwrap_or_else(|| stopped(now));
                    let phase =
                        if terminated.exit_code == 0 { Phase::Succeeded } else { Phase::Failed };
                    run.state = RunState::Finished { phase, terminated };
                }
                RunState::Finished { .. } => {}
            }
            run.deadline = None;
            for (container, _) in &run.containers {
                self.logs.finish(&run.namespace, &run.name, container);
            }
            run.transition = Utc::now();
            self.write_status(&run, &host_ip).await;
            self.runs.insert(uid.to_owned(), run);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(node = %self.node, pod = %format!("{namespace}/{name}"), "finished the pod's deletion");
                self.deleted.insert(uid.to_owned());
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.deleted.insert(uid.to_owned());
            }
            Err(e) => {
                tracing::warn!(node = %self.node, pod = %format!("{namespace}/{name}"), error = %e, "could not finish the pod's deletion");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn behaviour_from_annotations() {
        let b = Behaviour::of(&annotations(&[
            (ANNOTATION_RUN_SECONDS, "0.25"),
            (ANNOTATION_EXIT_CODE, "3"),
            (ANNOTATION_LOG, "one\ntwo\n"),
        ]));
        assert_eq!(
            b,
            Behaviour {
                run_seconds: Some(0.25),
                exit_code: 3,
                log: vec!["one".into(), "two".into()]
            }
        );
        let b = Behaviour::of(&annotations(&[
            (ANNOTATION_RUN_SECONDS, "soon"),
            (ANNOTATION_EXIT_CODE, "x"),
        ]));
        assert_eq!(b, Behaviour { run_seconds: None, exit_code: 0, log: vec![] });
        assert_eq!(
            Behaviour::of(&annotations(&[(ANNOTATION_RUN_SECONDS, "-1")])).run_seconds,
            None
        );
    }

    #[test]
    fn restart_policies_decide_what_follows_a_run() {
        use AfterExit::*;
        use RestartPolicy::*;
        assert_eq!(after_exit(Never, 0), Finish(Phase::Succeeded));
        assert_eq!(after_exit(Never, 3), Finish(Phase::Failed));
        assert_eq!(after_exit(OnFailure, 0), Finish(Phase::Succeeded));
        assert_eq!(after_exit(OnFailure, 1), Restart);
        assert_eq!(after_exit(Always, 0), Restart);
        assert_eq!(after_exit(Always, 2), Restart);
        assert_eq!(RestartPolicy::parse(None), Always);
        assert_eq!(RestartPolicy::parse(Some("OnFailure")), OnFailure);
        assert_eq!(restart_delay(0), Duration::ZERO);
        assert_eq!(restart_delay(1), Duration::from_secs(1));
        assert_eq!(restart_delay(3), Duration::from_secs(4));
        assert_eq!(restart_delay(40), Duration::from_secs(60));
    }

    #[test]
    fn node_numbers() {
        assert_eq!(node_number("carrel-sim-3"), 3);
        assert_eq!(node_number("gpu-node-260"), 4);
        assert_eq!(node_number("alpha"), node_number("alpha"));
    }

    #[test]
    fn each_node_gets_a_block_of_pod_addresses_sized_for_its_pods() {
        let mut a = PodAddresses::new(3, 110);
        assert_eq!(a.cidr(), "10.128.3.0/24");
        let first = a.take().expect("free");
        assert_eq!(a.ip(first), "10.128.3.2");
        let mut taken = vec![first];
        while let Some(slot) = a.take() {
            taken.push(slot);
        }
        assert_eq!(taken.len(), 253, ".2 to .254");
        assert_eq!(a.ip(*taken.last().unwrap()), "10.128.3.254");
        a.release(taken[10]);
        assert_eq!(a.take(), Some(taken[10]), "a freed address is given again");
        // Nodes allowed more pods get larger blocks that do not overlap.
        let big = PodAddresses::new(1, 5000);
        assert_eq!(big.cidr(), "10.128.32.0/19");
        assert_eq!(PodAddresses::new(2, 5000).cidr(), "10.128.64.0/19");
        assert_eq!(PodAddresses::new(255, MAX_PODS_LIMIT).cidr(), "10.255.128.0/17");
        // A running pod's address is adopted once, if it is a pod address of the block.
        let mut b = PodAddresses::new(3, 110);
        assert_eq!(b.adopt("10.128.3.7"), Some(7));
        assert_eq!(b.adopt("10.128.3.7"), None, "taken");
        assert_eq!(b.adopt("10.128.4.7"), None, "another node's");
        assert_eq!(b.adopt("10.128.3.1"), None, "the gateway");
        assert_eq!(b.adopt("10.128.3.255"), None, "broadcast");
        assert_eq!(b.adopt("not an address"), None);
    }

    fn run(state: RunState) -> PodRun {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z").unwrap().with_timezone(&Utc);
        PodRun {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u-1".into(),
            containers: vec![("main".into(), "busybox".into())],
            init_containers: vec![("setup".into(), "busybox".into())],
            policy: RestartPolicy::Never,
            behaviour: Behaviour { run_seconds: Some(1.0), exit_code: 3, log: vec![] },
            pod_ip: Some("10.128.3.2".into()),
            ip_slot: Some(2),
            rejected: None,
            start_time: t,
            transition: t,
            state,
            restart_count: 1,
            last_terminated: None,
            deadline: None,
            status_written: false,
        }
    }

    #[test]
    fn running_status_reads_like_a_kubelet() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:06Z").unwrap().with_timezone(&Utc);
        let status = run(RunState::Running { since: t }).status("10.0.3.1");
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["hostIP"], "10.0.3.1");
        assert_eq!(status["podIP"], "10.128.3.2");
        assert_eq!(status["podIPs"], json!([{"ip": "10.128.3.2"}]));
        assert_eq!(status["startTime"], "2025-01-02T03:04:05Z");
        for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            let c = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == kind);
            assert_eq!(c.unwrap()["status"], "True", "{kind}");
        }
        let c = &status["containerStatuses"][0];
        assert_eq!(c["name"], "main");
        assert_eq!(c["image"], "busybox");
        assert_eq!(c["ready"], true);
        assert_eq!(c["started"], true);
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["containerID"], "sim://u-1/main/1");
        assert_eq!(c["state"]["running"]["startedAt"], "2025-01-02T03:04:06Z");
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    #[test]
    fn finished_and_backoff_statuses() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:06Z").unwrap().with_timezone(&Utc);
        let terminated = Terminated { exit_code: 3, started_at: t, finished_at: t, run: 1 };
        let status =
            run(RunState::Finished { phase: Phase::Failed, terminated: terminated.clone() })
                .status("h");
        assert_eq!(status["phase"], "Failed");
        let c = &status["containerStatuses"][0];
        assert_eq!(c["ready"], false);
        assert_eq!(c["state"]["terminated"]["exitCode"], 3);
        assert_eq!(c["state"]["terminated"]["reason"], "Error");
        assert_eq!(c["state"]["terminated"]["finishedAt"], "2025-01-02T03:04:06Z");
        let ready =
            status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("PodCompleted"))
        );

        let mut waiting = run(RunState::BackOff { delay: Duration::from_secs(2) });
        waiting.last_terminated = Some(Terminated { exit_code: 0, ..terminated });
        let status = waiting.status("h");
        assert_eq!(status["phase"], "Running");
        let c = &status["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["reason"], "Completed");
        assert!(c.get("containerID").is_none());
    }
}
