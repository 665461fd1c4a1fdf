//! `carrel`: run Carrel on one machine (`carrel up`) and manage its tenants.

mod dns;
mod gpu;
mod heap;
mod host;
mod metrics;
mod pod_streams;
mod run;
mod serve;
mod syncers;
mod tenant;
mod up;
mod wakes;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Carrel: isolated Kubernetes tenants on shared NVIDIA GPUs.
#[derive(Debug, Parser)]
#[command(name = "carrel", version)]
struct Cli {
    /// The host API's kubeconfig. Default: $CARREL_HOST_KUBECONFIG, then the one `carrel up`
    /// wrote in the default data directory.
    #[arg(long, global = true, env = "CARREL_HOST_KUBECONFIG")]
    host_kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the host API and the tenant manager in one process until Ctrl-C.
    Up(up::Args),
    /// Serve tenants for a real host cluster: the tenant manager and the syncers, reaching the
    /// host as its client (in-cluster, or --host-kubeconfig), until SIGTERM.
    Serve(Box<serve::Args>),
    /// Create, list, inspect and delete tenants.
    #[command(subcommand)]
    Tenant(tenant::Command),
    /// Create a throwaway tenant, run a command with KUBECONFIG pointing at it, then delete it.
    Run(run::Args),
    /// The GPU fleet: which MIG slices exist and who holds them.
    #[command(subcommand)]
    Gpu(gpu::GpuCommand),
}

fn main() -> ExitCode {
    carrel_logging::init("warn");
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            report(&anyhow::anyhow!("starting the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Up(args) => up::up(args).await.map(|()| 0),
            Command::Serve(args) => {
                serve::serve(cli.host_kubeconfig.as_deref(), *args).await.map(|()| 0)
            }
            Command::Tenant(command) => {
                tenant::run(cli.host_kubeconfig.as_deref(), command).await.map(|()| 0)
            }
            Command::Run(args) => run::run(cli.host_kubeconfig.as_deref(), args).await,
            Command::Gpu(command) => gpu::run(cli.host_kubeconfig.as_deref(), command).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}

#[allow(clippy::print_stderr)]
fn report(error: &anyhow::Error) {
    eprintln!("error: {error:#}");
}
