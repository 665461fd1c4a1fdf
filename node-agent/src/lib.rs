//! The node agent: one per GPU node, talking to the host cluster's API.
//!
//! - [`publish`]: the node's GPUs and MIG instances published on its host `Node`.
//! - [`claims`]: device claims (Leases) made real: MIG instances created where claims want them,
//!   Leases annotated with the device they got.
//! - [`enforce`]: processes on a claimed device that are not its holder's reported (Event, metric)
//!   and optionally evicted.
//! - [`cdi`]: a CDI spec naming the node's claimed devices.
//! - [`metrics`]: Prometheus metrics in DCGM exporter style.
//!
//! [`Agent`] runs them all for one node. What the agent does on the host, as RBAC rules, is in
//! [`rbac`].

pub mod cdi;
pub mod claims;
pub mod enforce;
pub mod metrics;
pub mod publish;
pub mod rbac;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use carrel_gpu::leases::Selection;
use carrel_gpu::CLAIM_NAMESPACE;
use carrel_nvml::GpuBackend;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::Client;
use parking_lot::RwLock;
use tokio::sync::watch;

use carrel_events::Recorder;

/// `source.component` and `reportingComponent` of the agent's Events.
pub const COMPONENT: &str = "carrel-node-agent";

pub use claims::HeldDevice;
pub use enforce::{PodMap, PodOfProcess, ProcCgroups};

/// How one node's agent runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    /// The node (its host `Node` object's name).
    pub node_name: String,
    /// How often the GPUs are read again (inventory, claims, enforcement).
    pub inventory_interval: Duration,
    /// Where to write the node's CDI spec; `None`: no CDI spec.
    pub cdi_dir: Option<PathBuf>,
    /// Delete pods found using a MIG device they do not hold.
    pub evict_violators: bool,
}

impl AgentConfig {
    /// The defaults for node `node_name`: GPUs read every 5 s, no CDI, no eviction.
    pub fn new(node_name: &str) -> AgentConfig {
        AgentConfig {
            node_name: node_name.to_owned(),
            inventory_interval: Duration::from_secs(5),
            cdi_dir: None,
            evict_violators: false,
        }
    }
}

/// Why the agent stopped other than when asked.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// One of its loops failed.
    #[error("node agent task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// One node's agent.
pub struct Agent {
    client: Client,
    backend: Arc<dyn GpuBackend>,
    pod_of_process: Arc<dyn PodOfProcess>,
    config: AgentConfig,
    held: Arc<RwLock<Vec<HeldDevice>>>,
    violations: Arc<metrics::Violations>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config", &self.config)
            .field("backend", &self.backend)
            .field("pod_of_process", &self.pod_of_process)
            .finish_non_exhaustive()
    }
}

/// Resolves when `stop` turns true or its sender is gone.
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Agent {
    /// An agent for `config.node_name`, reading GPUs from `backend` and pods of processes from
    /// `pod_of_process`.
    pub fn new(
        client: Client,
        backend: Arc<dyn GpuBackend>,
        pod_of_process: Arc<dyn PodOfProcess>,
        config: AgentConfig,
    ) -> Agent {
        Agent {
            client,
            backend,
            pod_of_process,
            config,
            held: Arc::new(RwLock::new(Vec::new())),
            violations: Arc::new(metrics::Violations::default()),
        }
    }

    /// The claimed devices the last pass found.
    pub fn held_devices(&self) -> Vec<HeldDevice> {
        self.held.read().clone()
    }

    /// A router serving `GET /metrics` for this agent.
    pub fn metrics_router(&self) -> axum::Router {
        metrics::router(Arc::new(metrics::MetricsSource {
            backend: self.backend.clone(),
            hostname: self.config.node_name.clone(),
            held: self.held.clone(),
            violations: self.violations.clone(),
        }))
    }

    /// Run every loop until `stop` turns true.
    pub async fn run(self, stop: watch::Receiver<bool>) -> Result<(), AgentError> {
        tokio::spawn(node_loop(self, stop)).await?;
        Ok(())
    }
}

/// Claims, CDI, enforcement and inventory: a pass on every change to the node's claim Leases and
/// every `inventory_interval`.
async fn node_loop(agent: Agent, mut stop: watch::Receiver<bool>) {
    let config = &agent.config;
    let node = config.node_name.clone();
    let recorder = Arc::new(Recorder::for_component(agent.client.clone(), COMPONENT, &node));
    let mut reconciler = claims::Reconciler::new(
        agent.client.clone(),
        agent.backend.clone(),
        recorder.clone(),
        &node,
    );
    let mut enforcer = enforce::Enforcer::new(
        agent.client.clone(),
        agent.backend.clone(),
        agent.pod_of_process.clone(),
        recorder,
        agent.violations.clone(),
        &node,
        config.evict_violators,
    );
    let mut publisher = publish::Publisher::new(agent.client.clone(), &node);
    let leases: Api<Lease> = Api::namespaced(agent.client.clone(), CLAIM_NAMESPACE);
    let watch_config = watcher::Config::default().labels(&Selection::Node(&node).labels());
    let (reader, writer) = reflector::store();
    let stream = watcher(leases, watch_config).default_backoff().reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut tick = tokio::time::interval(config.inventory_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leases_ready = false;
    loop {
        tokio::select! {
            _ = stopped(&mut stop) => break,
            event = stream.next() => match event {
                Some(Ok(watcher::Event::InitDone)) => leases_ready = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::warn!(%node, error = %e, "watching the node's claim Leases");
                    continue;
                }
                None => break,
            },
            _ = tick.tick() => {}
        }
        while let Some(Some(Ok(event))) = futures::FutureExt::now_or_never(stream.next()) {
            if matches!(event, watcher::Event::InitDone) {
                leases_ready = true;
            }
        }
        let mut changed = false;
        if leases_ready {
            match reconciler.reconcile(&reader.state()).await {
                Ok(outcome) => {
                    changed = outcome.changed_instances;
                    *agent.held.write() = outcome.held;
                }
                Err(e) => tracing::warn!(%node, error = %e, "claim pass failed; retrying"),
            }
        }
        let held = agent.held_devices();
        if let (true, Some(dir)) = (leases_ready, &config.cdi_dir) {
            let devices: Vec<cdi::CdiDevice> = held.iter().map(cdi::CdiDevice::from).collect();
            match cdi::write(dir, &node, &devices) {
                Ok(true) => tracing::info!(%node, devices = devices.len(), "wrote the CDI spec"),
                Ok(false) => {}
                Err(e) => tracing::warn!(%node, error = %e, "could not write the CDI spec"),
            }
        }
        if leases_ready {
            enforcer.pass(&held).await;
        }
        if changed {
            publisher.invalidate();
        }
        let read = claims::blocking(&agent.backend, {
            let node = node.clone();
            move |b| publish::read(b, &node)
        })
        .await;
        match read {
            Ok(Ok(inventory)) => match publisher.publish(&inventory).await {
                Ok(_) => {}
                Err(publish::InventoryError::NodeMissing(_)) => {
                    tracing::debug!(%node, "the Node is not registered yet")
                }
                Err(e) => tracing::warn!(%node, error = %e, "inventory publication failed"),
            },
            Ok(Err(e)) => tracing::warn!(%node, error = %e, "reading the GPUs failed"),
            Err(e) => tracing::warn!(%node, error = %e, "reading the GPUs failed"),
        }
    }
}
