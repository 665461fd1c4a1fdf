//! `carrel-apiserver`: one Kubernetes-compatible API server over one store directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use carrel_apiserver::{router, Api, Server};
use carrel_store::{Options, SledStore};

/// Serve a Kubernetes-compatible API over a Carrel store.
#[derive(Debug, Parser)]
#[command(name = "carrel-apiserver", version)]
struct Args {
    /// The store directory (created if missing).
    #[arg(long)]
    data_dir: PathBuf,
    /// The address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// The base path to serve under, e.g. `/tenants/team-a`.
    #[arg(long, default_value = "")]
    base_path: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let store = SledStore::open(&args.data_dir, Options::create())
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    let api = Api::new(Arc::new(store)).map_err(|e| anyhow::anyhow!("bootstrapping: {e}"))?;
    let server = Arc::new(Server::new(Arc::new(api), &args.base_path));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, base = %args.base_path, "serving");
    // Scripts and tests read the address from this line.
    #[allow(clippy::print_stdout)]
    {
        println!("listening on http://{addr}{}", args.base_path);
    }
    axum::serve(listener, router(server))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving")?;
    Ok(())
}
