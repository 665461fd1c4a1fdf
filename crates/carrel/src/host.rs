//! Finding the host API and talking to it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The data directory `carrel up` uses by default: `$CARREL_DATA_DIR`, else
/// `$XDG_DATA_HOME/carrel`, else `~/.local/share/carrel`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARREL_DATA_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("carrel");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/share/carrel")
}

/// The name of the host kubeconfig `carrel up` writes in its data directory.
pub const KUBECONFIG_FILE: &str = "host.kubeconfig";

/// The host kubeconfig: the one given, else the one `carrel up` wrote in the default data dir.
pub fn kubeconfig_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given {
        if !path.exists() {
            bail!("the host kubeconfig {} does not exist", path.display());
        }
        return Ok(path.to_owned());
    }
    let default = default_data_dir().join(KUBECONFIG_FILE);
    if !default.exists() {
        bail!(
            "no host kubeconfig at {}: start Carrel with `carrel up`, or pass --host-kubeconfig \
             (or set CARREL_HOST_KUBECONFIG)",
            default.display()
        );
    }
    Ok(default)
}

/// A client of the host API.
pub async fn client(given: Option<&Path>) -> anyhow::Result<kube::Client> {
    let path = kubeconfig_path(given)?;
    let kubeconfig = Kubeconfig::read_from(&path)
        .with_context(|| format!("reading the host kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("using the host kubeconfig {}", path.display()))?;
    kube::Client::try_from(config).context("making a client for the host API")
}

/// A kube error as the CLI reports it: a refused request with the server's message, and an
/// unreachable host with what to do about it.
pub fn explain(error: kube::Error) -> anyhow::Error {
    match error {
        kube::Error::Api(status) => {
            let mut message = status.message.clone();
            for cause in status.details.iter().flat_map(|d| &d.causes) {
                message.push_str(&format!("\n  {}: {}", cause.field, cause.message));
            }
            anyhow::anyhow!("{message}")
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => anyhow::anyhow!(
            "cannot reach the host API ({error}); is `carrel up` running, and is the host \
             kubeconfig the one it wrote?"
        ),
        other => anyhow::Error::new(other),
    }
}
