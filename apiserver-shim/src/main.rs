//! `carrel-apiserver`: one Kubernetes-compatible API server over one store directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

use carrel_apiserver::access::Security;
use carrel_apiserver::kubeconfig;
use carrel_apiserver::listener::{self, ListenerFlags};
use carrel_apiserver::tls::Certificates;
use carrel_apiserver::{router, Api, Server, ServiceNetwork};
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
    /// The serving certificate (PEM); without it a CA and a certificate for the listen address
    /// and localhost are generated.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Write a kubeconfig for this server (with the generated CA) to this path.
    #[arg(long, conflicts_with = "tls_cert_file")]
    write_kubeconfig: Option<PathBuf>,
    /// The IPv4 range Services' cluster IPs are given from, as kube-apiserver's flag.
    #[arg(long, default_value = "10.96.0.0/12", value_parser = ServiceNetwork::from_cidr)]
    service_cluster_ip_range: ServiceNetwork,
    /// Serve plain HTTP instead of TLS (for local experiments only).
    #[arg(long, conflicts_with_all = ["tls_cert_file", "tls_private_key_file"])]
    insecure_http: bool,
    #[command(flatten)]
    listener: ListenerFlags,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    carrel_logging::init("info");
    let args = Args::parse();
    let store = SledStore::open(&args.data_dir, Options::create())
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    let api = Api::new_in(Arc::new(store), args.service_cluster_ip_range)
        .map_err(|e| anyhow::anyhow!("bootstrapping: {e}"))?;
    let api = Arc::new(api);
    carrel_apiserver::event_ttl::start(&api);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if args.insecure_http { "http" } else { "https" };
    let url = format!("{scheme}://{addr}{}", args.base_path);
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if args.insecure_http {
        tracing::warn!(%url, "serving plain HTTP");
        announce(&url);
        let app = router(Arc::new(Server::new(api, &args.base_path)));
        listener::serve(listener, None, app, args.listener.limits(), shutdown).await;
        return Ok(());
    }
    let certs = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (Some(cert), Some(key)) => Certificates {
            ca_pem: String::new(),
            admin_cert_pem: String::new(),
            admin_key_pem: String::new(),
            cert_pem: std::fs::read_to_string(cert)
                .with_context(|| format!("reading {}", cert.display()))?,
            key_pem: std::fs::read_to_string(key)
                .with_context(|| format!("reading {}", key.display()))?,
        },
        _ => Certificates::generate(&[addr.ip().to_string(), "localhost".into()])
            .context("generating a serving certificate")?,
    };
    if let Some(path) = &args.write_kubeconfig {
        std::fs::write(path, kubeconfig::admin(&url, Some(&certs)))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let config = certs.server_config().context("TLS configuration")?;
    // With a generated CA, clients authenticate with its certificates (the kubeconfig's admin is
    // in system:masters) and RBAC authorizes them; with certificate files there is no client CA,
    // and the server is open to anyone who reaches it.
    let server = if certs.ca_pem.is_empty() {
        tracing::warn!("no client CA: serving without authentication or authorization");
        Server::new(api, &args.base_path)
    } else {
        let ca = certs.ca_der().context("the generated CA")?;
        Server::secured(api, &args.base_path, Arc::new(Security::new(ca, None, "carrel-apiserver")))
    };
    let app = router(Arc::new(server));
    tracing::info!(%url, "serving");
    announce(&url);
    listener::serve(listener, Some(config), app, args.listener.limits(), shutdown).await;
    Ok(())
}

/// Scripts and tests read the server's URL from this line.
#[allow(clippy::print_stdout)]
fn announce(url: &str) {
    println!("listening on {url}");
}
