//! `carrel up`: the host API and the tenant manager in one process, on one TLS listener.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use carrel_apiserver::access::Security;
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::kubeconfig;
use carrel_apiserver::server::clusters_router;
use carrel_apiserver::tenant::manager::Manager;
use carrel_apiserver::tenant::Clusters;
use carrel_apiserver::tls::{self, Certificates};
use carrel_apiserver::{Api, Server};
use carrel_store::{Options, SledStore};

use crate::host::{default_data_dir, KUBECONFIG_FILE};

/// The issuer of the host API's service-account tokens.
const HOST_ISSUER: &str = "https://kubernetes.default.svc";

/// `carrel up` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where Carrel keeps its data: the host store, the tenants' stores and the certificates.
    /// Default: $CARREL_DATA_DIR, else $XDG_DATA_HOME/carrel, else ~/.local/share/carrel.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
}

/// Run until Ctrl-C (or SIGTERM).
pub async fn up(args: Args) -> anyhow::Result<()> {
    // Every served tenant keeps a few files open; the usual soft limit of 1,024 would run out
    // at a few hundred tenants. Raise it to the hard limit, as the Go runtime does for Go servers.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    let data = args.data_dir.unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&data)
        .with_context(|| format!("creating the data directory {}", data.display()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let hosts = [addr.ip().to_string(), "127.0.0.1".to_owned(), "localhost".to_owned()];
    let certs = Certificates::load_or_generate(&data.join("pki"), &hosts)
        .context("the host's certificates")?;
    let store = SledStore::open(data.join("host"), Options::create())
        .with_context(|| format!("opening the host store in {}", data.join("host").display()))?;
    let host = Arc::new(Api::host(Arc::new(store)).map_err(|e| anyhow::anyhow!("{e}"))?);
    // The host API: clients with a certificate from the host's CA (the admin kubeconfig has
    // one), authorized by the host's own RBAC.
    let host_tokens =
        Signer::load_or_generate(&data.join("pki")).context("the host's token key")?;
    let security = Security::new(certs.ca_der()?, Some(host_tokens), HOST_ISSUER);
    let host_server = Server::secured(host.clone(), "", Arc::new(security));
    let clusters = Arc::new(Clusters::new(Arc::new(host_server)));
    let endpoint = format!("https://{addr}");
    let manager = Arc::new(Manager::new(
        host,
        clusters.clone(),
        &data,
        &endpoint,
        Some(certs.ca_pem.clone()),
    ));
    {
        let manager = manager.clone();
        tokio::task::spawn_blocking(move || manager.resume())
            .await
            .context("resuming tenants")?
            .context("resuming tenants")?;
    }
    let kubeconfig_path = data.join(KUBECONFIG_FILE);
    std::fs::write(&kubeconfig_path, kubeconfig::admin(&endpoint, Some(&certs)))
        .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
    let config = certs.server_config().context("TLS configuration")?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let manager_task = tokio::spawn(manager.run(Duration::from_secs(1), stop_rx));
    announce(&endpoint, &kubeconfig_path, clusters.names().len());
    tls::serve(listener, config, clusters_router(clusters), shutdown_signal()).await;
    let _ = stop_tx.send(true);
    let _ = manager_task.await;
    stopped();
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

/// Users and scripts read where Carrel is from these lines.
#[allow(clippy::print_stdout)]
fn announce(endpoint: &str, kubeconfig: &std::path::Path, tenants: usize) {
    println!("listening on {endpoint}");
    println!("host kubeconfig: {}", kubeconfig.display());
    println!("tenants resumed: {tenants}");
    println!("try: kubectl --kubeconfig {} get tenants", kubeconfig.display());
}

#[allow(clippy::print_stdout)]
fn stopped() {
    println!("stopped");
}
