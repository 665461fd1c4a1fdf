//! `carrel-node-agent`: the node agent of one GPU node.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use carrel_node_agent::{Agent, AgentConfig, PodMap, PodOfProcess, ProcCgroups};
use carrel_nvml::{GpuBackend, Nvml, Simulator};
use clap::{Parser, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Where the GPUs are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// The NVIDIA driver, through NVML.
    Nvml,
    /// Simulated GPUs described by --sim-gpus.
    Sim,
}

/// Carrel's node agent: publishes the node's GPU inventory, makes device claims real, enforces
/// them and exports metrics.
#[derive(Debug, Parser)]
#[command(name = "carrel-node-agent", version)]
struct Args {
    /// The node's name (its host Node object).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Kubeconfig of the host cluster (default: in-cluster or $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Where the GPUs are read from.
    #[arg(long, value_enum, default_value_t = Backend::Nvml)]
    backend: Backend,
    /// Simulated GPUs: MODELxCOUNT[:mig=PROFILE*N[,PROFILE*N...]] (with --backend sim).
    #[arg(long)]
    sim_gpus: Option<String>,
    /// Directory for the node's CDI spec (e.g. /var/run/cdi).
    #[arg(long)]
    cdi_dir: Option<PathBuf>,
    /// Address of the Prometheus /metrics endpoint.
    #[arg(long, default_value = "0.0.0.0:9400")]
    metrics_listen: SocketAddr,
    /// Delete pods found using a MIG device they do not hold.
    #[arg(long)]
    evict_violators: bool,
    /// Seconds between reads of the GPUs.
    #[arg(long, default_value_t = 5.0)]
    inventory_interval: f64,
}

fn backend(args: &Args) -> anyhow::Result<(Arc<dyn GpuBackend>, Arc<dyn PodOfProcess>)> {
    match args.backend {
        Backend::Nvml => {
            let nvml = Nvml::init().context("starting the NVML backend")?;
            Ok((Arc::new(nvml), Arc::new(ProcCgroups::new())))
        }
        Backend::Sim => {
            let Some(spec) = &args.sim_gpus else {
                bail!("--backend sim needs --sim-gpus SPEC ({})", carrel_nvml::SPEC_SYNTAX);
            };
            let sim = Simulator::from_spec(spec, &args.node_name)?;
            Ok((Arc::new(sim), Arc::new(PodMap::new())))
        }
    }
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context("finding the host cluster's configuration")?,
    };
    kube::Client::try_from(config).context("building the host API client")
}

fn main() -> ExitCode {
    let args = Args::parse();
    carrel_logging::init("info");
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    if !(args.inventory_interval.is_finite() && args.inventory_interval > 0.0) {
        bail!("--inventory-interval must be a positive number of seconds");
    }
    let (backend, pods) = backend(&args)?;
    let client = client(args.kubeconfig.as_ref()).await?;
    let config = AgentConfig {
        node_name: args.node_name.clone(),
        inventory_interval: Duration::from_secs_f64(args.inventory_interval),
        cdi_dir: args.cdi_dir.clone(),
        evict_violators: args.evict_violators,
    };
    let agent = Agent::new(client, backend, pods, config);
    let listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .with_context(|| format!("listening on {}", args.metrics_listen))?;
    let metrics_addr = listener.local_addr().context("the metrics listener's address")?;
    tracing::info!(node = %args.node_name, metrics = %metrics_addr, "node agent starting");
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let metrics = agent.metrics_router();
    let mut metrics_stop = stop.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, metrics)
            .with_graceful_shutdown(async move {
                let _ = metrics_stop.wait_for(|s| *s).await;
            })
            .await
    });
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("stopping");
        let _ = stop_tx.send(true);
    });
    agent.run(stop).await?;
    server.await.context("metrics server")?.context("metrics server")?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
