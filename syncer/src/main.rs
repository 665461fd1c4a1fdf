//! `carrel-syncer`: one tenant's syncer against a host cluster (the embedded one of `carrel up`,
//! or a real one), until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

use carrel_gpu::fit::Toleration;
use carrel_machinery::tenancy::host_namespace;
use carrel_syncer::{host_port, ClusterDns, Config, Syncer};

/// Sync a tenant's pods to a host cluster, pinned to claimed MIG devices.
#[derive(Debug, Parser)]
#[command(name = "carrel-syncer", version)]
struct Args {
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// A kubeconfig of the tenant's API with its admin's credentials.
    #[arg(long)]
    tenant_kubeconfig: PathBuf,
    /// The host cluster's kubeconfig. Default: in-cluster configuration, else $KUBECONFIG, else
    /// ~/.kube/config.
    #[arg(long)]
    host_kubeconfig: Option<PathBuf>,
    /// The host namespace of the tenant's workloads. Default: carrel-<tenant>.
    #[arg(long)]
    host_namespace: Option<String>,
    /// GPU quota for a MIG profile, as PROFILE=COUNT (`--gpu 1g.18gb=2`); repeat for more.
    #[arg(long = "gpu", value_name = "PROFILE=COUNT")]
    gpu: Vec<String>,
    /// A PEM file of the CA workloads trust for their tenant API (put beside their token).
    #[arg(long)]
    tenant_ca: Option<PathBuf>,
    /// Where workloads reach their tenant API, as HOST:PORT: their `KUBERNETES_SERVICE_HOST`,
    /// `KUBERNETES_SERVICE_PORT` and the rest of the `KUBERNETES_*` family. Default: the host
    /// kubelet's, which name the host's API.
    #[arg(long, value_name = "HOST:PORT", value_parser = host_port)]
    tenant_api_address: Option<(String, u16)>,
    /// The RuntimeClass of host pods that hold MIG devices (the GPU Operator's `nvidia`): the
    /// handler that injects the devices their CDI annotation names. Default: none, the node's
    /// default runtime.
    #[arg(long)]
    gpu_runtime_class: Option<String>,
    /// No DNS server of the tenant answers at its `kube-system/kube-dns` address for host pods:
    /// they resolve through their node (`dnsPolicy: Default`) rather than whatever that address
    /// reaches on the host (on a real host, the host's own cluster DNS).
    #[arg(long)]
    no_cluster_dns: bool,
    /// Seconds between full comparisons of both sides.
    #[arg(long, default_value_t = 10)]
    resync_seconds: u64,
    /// A host taint the tenant's pods may tolerate, as a Kubernetes toleration in JSON
    /// (`{"key":"dedicated","value":"team-a","effect":"NoSchedule"}`), as the tenant's
    /// `spec.allowedTolerations` lists them; repeat for more. Tolerations of the tenant's pods
    /// that none of these covers are dropped from their host pods. Default: none.
    #[arg(long = "allowed-toleration", value_name = "JSON", value_parser = toleration)]
    allowed_tolerations: Vec<Toleration>,
}

/// A `--allowed-toleration` that does not read as a toleration.
#[derive(Debug, thiserror::Error)]
#[error("not a toleration in JSON: {0}")]
struct NotAToleration(#[from] serde_json::Error);

/// A toleration given on the command line.
fn toleration(text: &str) -> Result<Toleration, NotAToleration> {
    Ok(serde_json::from_str(text)?)
}

async fn client(path: Option<&PathBuf>, what: &str) -> anyhow::Result<kube::Client> {
    let config = match path {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading the {what} kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using the {what} kubeconfig {}", path.display()))?
        }
        None => {
            kube::Config::infer().await.with_context(|| format!("finding the {what} cluster"))?
        }
    };
    kube::Client::try_from(config).with_context(|| format!("a client of the {what} API"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    carrel_logging::init("info");
    let args = Args::parse();
    let gpu_quota =
        carrel_gpu::requests::parse_quota(&args.gpu).map_err(|e| anyhow::anyhow!("--gpu {e}"))?;
    let tenant_ca_pem = match &args.tenant_ca {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --tenant-ca {}", path.display()))?,
        ),
        None => None,
    };
    let tenant = client(Some(&args.tenant_kubeconfig), "tenant").await?;
    let host = client(args.host_kubeconfig.as_ref(), "host").await?;
    let config = Config {
        host_namespace: args.host_namespace.unwrap_or_else(|| host_namespace(&args.tenant)),
        tenant: args.tenant,
        gpu_quota,
        tenant_ca_pem,
        tenant_api: args.tenant_api_address,
        gpu_runtime_class: args.gpu_runtime_class,
        cluster_dns: if args.no_cluster_dns { ClusterDns::Node } else { ClusterDns::TenantService },
        resync: Duration::from_secs(args.resync_seconds.max(1)),
    };
    let syncer = Syncer::standalone(tenant, host, config);
    syncer.set_allowed_tolerations(args.allowed_tolerations);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let run = tokio::spawn({
        let syncer = syncer.clone();
        async move { syncer.run(stop_rx).await }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let _ = stop.send(true);
    let _ = run.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_tolerations_are_read_as_kubernetes_writes_them() {
        let args = Args::try_parse_from([
            "carrel-syncer",
            "--tenant=a",
            "--tenant-kubeconfig=/k",
            r#"--allowed-toleration={"key":"dedicated","value":"team-a","effect":"NoSchedule"}"#,
            r#"--allowed-toleration={"key":"gpu","operator":"Exists"}"#,
        ])
        .unwrap();
        let keys: Vec<(&str, &str, &str, &str)> = args
            .allowed_tolerations
            .iter()
            .map(|t| (&*t.key, &*t.operator, &*t.value, &*t.effect))
            .collect();
        assert_eq!(keys, [("dedicated", "", "team-a", "NoSchedule"), ("gpu", "Exists", "", "")]);
        let none = Args::try_parse_from(["carrel-syncer", "--tenant=a", "--tenant-kubeconfig=/k"]);
        assert!(none.unwrap().allowed_tolerations.is_empty());
        let bad = Args::try_parse_from([
            "carrel-syncer",
            "--tenant=a",
            "--tenant-kubeconfig=/k",
            "--allowed-toleration=dedicated:NoSchedule",
        ]);
        let error = bad.unwrap_err().to_string();
        assert!(error.contains("not a toleration in JSON"), "{error}");
    }
}
