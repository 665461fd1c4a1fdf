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
//! - [`ANNOTATION_CPU_USAGE`], [`ANNOTATION_MEMORY_USAGE`]: what each running container uses, as
//!   the resource metrics show it (quantities, `250m`, `64Mi`; absent or unreadable: half of the
//!   container's request, or 1m CPU and 4Mi of memory when it requests none; see
//!   [`crate::usage`]).
//!
//! At the end of a run the pod's `restartPolicy` decides: `Never` ends the pod (Succeeded on 0,
//! Failed otherwise), `OnFailure` restarts on a non-zero exit and ends on 0, `Always` restarts.
//! Restarts after the first wait a back-off ([`restart_delay`]), shown as `CrashLoopBackOff`. A pod
//! marked for deletion has its containers terminated and its deletion finished (grace period 0,
//! UID precondition). Logs go to a [`LogStore`] and are dropped with the pod. The kubelet's
//! events are written as a kubelet writes them (`Pulled`, `Created`, `Started`, `BackOff`,
//! `Killing`, `OutOfpods`), by a task of their own so that they never hold up a pod.
//!
//! Ephemeral containers added to a running pod (`kubectl debug`) run their commands with the
//! built-in commands of [`crate::exec`], seeing what [`Views`] says they see (`ephemeral`).
//!
//! The pod addresses and annotations are read in `behaviour`, a pod's run and the status it shows
//! in `pod_run`; the Node and its Lease are kept in `node`, the pods' lives are played in `pods`.

mod behaviour;
mod ephemeral;
mod node;
mod pod_run;
mod pods;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::logs::LogStore;
use carrel_events::{EventTarget, EventType, Recorder};

pub use behaviour::{
    after_exit, node_number, restart_delay, AfterExit, Behaviour, Phase, PodAddresses,
    RestartPolicy,
};
use ephemeral::Exit;
pub use ephemeral::Views;
use pod_run::{PodRun, RunState};

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
/// Annotation: the CPU each running container of the pod uses, a quantity (`250m`).
pub const ANNOTATION_CPU_USAGE: &str = "sim.carrel.dev/cpu-usage";
/// Annotation: the memory each running container of the pod uses, a quantity (`64Mi`).
pub const ANNOTATION_MEMORY_USAGE: &str = "sim.carrel.dev/memory-usage";
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
    /// What containers see when the kubelet runs their commands.
    views: Option<Arc<dyn Views>>,
    /// The commands of ephemeral containers running, by (pod UID, container).
    debugging: HashMap<(String, String), tokio::task::JoinHandle<()>>,
    /// Where those commands say that they ended, and where the kubelet hears it.
    exits: tokio::sync::mpsc::UnboundedSender<Exit>,
    exited: Option<tokio::sync::mpsc::UnboundedReceiver<Exit>>,
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
        let (exits, exited) = tokio::sync::mpsc::unbounded_channel();
        Kubelet {
            say,
            said: Some(said),
            views: None,
            debugging: HashMap::new(),
            exits,
            exited: Some(exited),
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
}

impl Kubelet {
    /// The kubelet, its containers seeing what `views` says when it runs their commands.
    pub fn with_views(mut self, views: Arc<dyn Views>) -> Kubelet {
        self.views = Some(views);
        self
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
        let mut exited =
            self.exited.take().unwrap_or_else(|| tokio::sync::mpsc::unbounded_channel().1);
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
                Some(exit) = exited.recv() => self.ephemeral_ended(exit),
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
        self.start_ephemeral(pod, &mut run);
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
        self.stop_ephemeral(&run.uid);
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
}
