//! `carrel tenant …`: create, list, inspect and delete tenants through the host API.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, PostParams};

use carrel_apiserver::tenant::types::{Tenant, TenantSpec};
use carrel_tenants::replicas::MOVE_TO;
use carrel_tenants::{host_namespace, owned_by, KUBECONFIG_SECRET};

use crate::host::{self, explain};

/// How long `--wait` waits.
const WAIT: Duration = Duration::from_secs(120);

/// The tenant subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a tenant.
    Create(CreateArgs),
    /// List tenants.
    List,
    /// Show one tenant.
    Get {
        /// The tenant.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: Format,
    },
    /// Delete a tenant: its API, its data and its host namespace.
    Delete {
        /// The tenant.
        name: String,
        /// Wait until it is gone.
        #[arg(long)]
        wait: bool,
    },
    /// Move a tenant to another API replica (where several serve tenants between them): its
    /// writes pause while its data is copied, then it is served there, nothing lost. Waits
    /// until it is.
    Move {
        /// The tenant.
        name: String,
        /// The replica to serve it from (a pod name of the API server's StatefulSet).
        #[arg(long)]
        to: String,
    },
    /// Print a tenant's admin kubeconfig.
    Kubeconfig {
        /// The tenant.
        name: String,
        /// The URL to reach the tenant at instead of the one the server wrote (a load balancer's
        /// address, or `https://<tenant>.<domain>` where a wildcard DNS record names the
        /// server); the CA, server name and credentials stay.
        #[arg(long)]
        endpoint: Option<String>,
    },
}

/// `get -o`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// What a new tenant gets.
#[derive(Debug, Clone, clap::Args)]
pub struct Quota {
    /// GPU quota for a MIG profile, as PROFILE=COUNT (`--gpu 1g.18gb=2`); repeat for more.
    #[arg(long = "gpu", value_name = "PROFILE=COUNT")]
    pub gpu: Vec<String>,
    /// Delete the tenant after this long (a Go duration between 1s and 8760h: 90m, 2h, 1h30m).
    #[arg(long)]
    pub ttl: Option<String>,
    /// The Pod Security Standard enforced on the tenant's pods.
    #[arg(long, value_parser = ["baseline", "restricted"])]
    pub pod_security: Option<String>,
}

/// `carrel tenant create` options.
#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The tenant's name: a DNS-1123 label (lower-case letters, digits, '-').
    name: String,
    #[command(flatten)]
    quota: Quota,
    /// Wait until the tenant is ready.
    #[arg(long)]
    wait: bool,
    /// Write the tenant's admin kubeconfig to this file (waits until the tenant is ready).
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
}

/// Run a tenant subcommand.
pub async fn run(host_kubeconfig: Option<&Path>, command: Command) -> anyhow::Result<()> {
    let client = host::client(host_kubeconfig).await?;
    match command {
        Command::Create(args) => {
            create(&client, &args.name, &args.quota).await?;
            if args.wait || args.kubeconfig_out.is_some() {
                wait_ready(&client, &args.name).await?;
            }
            if let Some(path) = &args.kubeconfig_out {
                let config = kubeconfig(&client, &args.name).await?;
                std::fs::write(path, config)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            say(&format!("tenant/{} created", args.name));
        }
        Command::List => list(&client).await?,
        Command::Get { name, output } => {
            let tenant = tenants(&client).get(&name).await.map_err(explain)?;
            let text = match output {
                Format::Yaml => serde_yaml::to_string(&tenant)?,
                Format::Json => serde_json::to_string_pretty(&tenant)? + "\n",
            };
            say(text.trim_end());
        }
        Command::Delete { name, wait } => {
            delete(&client, &name, wait).await?;
            say(&format!("tenant/{name} deleted"));
        }
        Command::Move { name, to } => {
            move_to(&client, &name, &to).await?;
            say(&format!("tenant/{name} moved to replica {to}"));
        }
        Command::Kubeconfig { name, endpoint } => {
            let config = kubeconfig(&client, &name).await?;
            let config = match endpoint {
                Some(endpoint) => at_endpoint(&config, &endpoint)?,
                None => config,
            };
            say(config.trim_end())
        }
    }
    Ok(())
}

fn tenants(client: &kube::Client) -> kube::Api<Tenant> {
    kube::Api::all(client.clone())
}

/// `PROFILE=COUNT` pairs (`--gpu`) as a quota map.
pub fn parse_gpu(pairs: &[String]) -> anyhow::Result<BTreeMap<String, i64>> {
    carrel_gpu::requests::parse_quota(pairs).map_err(|e| anyhow::anyhow!("--gpu {e}"))
}

/// Create a tenant (the server validates the name, TTL and quota).
pub async fn create(client: &kube::Client, name: &str, quota: &Quota) -> anyhow::Result<()> {
    let tenant = Tenant {
        metadata: kube::api::ObjectMeta { name: Some(name.to_owned()), ..Default::default() },
        spec: Some(TenantSpec {
            gpu_quota: parse_gpu(&quota.gpu)?,
            ttl: quota.ttl.clone(),
            pod_security: quota.pod_security.clone(),
            // The store limits keep their defaults; an admin sets them on the Tenant.
            ..Default::default()
        }),
        ..Default::default()
    };
    match tenants(client).create(&PostParams::default(), &tenant).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            bail!("tenant {name} already exists (see `carrel tenant get {name}`)")
        }
        Err(e) => Err(explain(e)).with_context(|| format!("creating tenant {name}")),
    }
}

/// Wait until a tenant is Ready (or Failed: an error).
pub async fn wait_ready(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let progress = Progress::start(&format!("waiting for tenant {name} to be ready"));
    let deadline = Instant::now() + WAIT;
    loop {
        let tenant = tenants(client).get(name).await.map_err(explain)?;
        let status = tenant.status.unwrap_or_default();
        match status.phase.as_deref() {
            Some("Ready") => {
                progress.done();
                return Ok(());
            }
            Some("Failed") => {
                let why = status.conditions.first().map(|c| c.message.clone()).unwrap_or_default();
                bail!("tenant {name} failed: {why}");
            }
            _ => {}
        }
        if Instant::now() > deadline {
            bail!("tenant {name} was not ready after {}s; is `carrel up` running?", WAIT.as_secs());
        }
        progress.tick();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ask for tenant `name` to be served by replica `to`, and wait until it is, and Ready.
pub async fn move_to(client: &kube::Client, name: &str, to: &str) -> anyhow::Result<()> {
    let tenant = tenants(client).get(name).await.map_err(explain)?;
    let replica = |t: &Tenant| t.status.as_ref().and_then(|s| s.replica.clone());
    let Some(from) = replica(&tenant) else {
        bail!(
            "tenant {name} is not served by a replica (is the API server started with --replica?)"
        );
    };
    if from != to {
        let patch = serde_json::json!({"metadata": {"annotations": {MOVE_TO: to}}});
        tenants(client)
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .map_err(explain)
            .with_context(|| format!("moving tenant {name}"))?;
    }
    let progress = Progress::start(&format!("moving tenant {name} from {from} to {to}"));
    let deadline = Instant::now() + WAIT;
    loop {
        let tenant = tenants(client).get(name).await.map_err(explain)?;
        let asked = tenant.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MOVE_TO));
        let ready = tenant.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready");
        if replica(&tenant).as_deref() == Some(to) && !asked && ready {
            progress.done();
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("tenant {name} was not served by {to} after {}s", WAIT.as_secs());
        }
        progress.tick();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Delete a tenant, waiting until it is gone when asked.
pub async fn delete(client: &kube::Client, name: &str, wait: bool) -> anyhow::Result<()> {
    match tenants(client).delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {
            bail!("tenant {name} does not exist")
        }
        Err(e) => return Err(explain(e)).with_context(|| format!("deleting tenant {name}")),
    }
    if !wait {
        return Ok(());
    }
    let progress = Progress::start(&format!("waiting for tenant {name} to be deleted"));
    let deadline = Instant::now() + WAIT;
    loop {
        match tenants(client).get_opt(name).await.map_err(explain)? {
            None => {
                progress.done();
                return Ok(());
            }
            Some(_) if Instant::now() > deadline => {
                bail!("tenant {name} was still there after {}s", WAIT.as_secs())
            }
            Some(_) => {}
        }
        progress.tick();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A tenant's admin kubeconfig, from the Secret in its host namespace, which must be the one the
/// tenant manager created for this tenant (a namespace made by someone else may hold anything).
pub async fn kubeconfig(client: &kube::Client, name: &str) -> anyhow::Result<String> {
    let tenant = tenants(client).get(name).await.map_err(explain)?;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let namespace = namespaces.get_opt(&host_namespace(name)).await.map_err(explain)?;
    if let Some(namespace) = namespace {
        if !owned_by(&serde_json::to_value(&namespace)?, &serde_json::to_value(&tenant)?) {
            bail!(
                "host namespace {} was not created for tenant {name}: not reading a kubeconfig from it",
                host_namespace(name)
            );
        }
    }
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &host_namespace(name));
    let secret = secrets.get(KUBECONFIG_SECRET).await.map_err(|e| match e {
        kube::Error::Api(status) if status.code == 404 => {
            anyhow::anyhow!("tenant {name} is not ready yet (no kubeconfig); try --wait")
        }
        e => explain(e),
    })?;
    let bytes = secret
        .data
        .and_then(|d| d.get("kubeconfig").cloned())
        .context("the tenant's kubeconfig Secret has no kubeconfig key")?;
    String::from_utf8(bytes.0).context("the tenant's kubeconfig is not UTF-8")
}

/// `kubeconfig` with every cluster's `server` set to `endpoint`.
fn at_endpoint(kubeconfig: &str, endpoint: &str) -> anyhow::Result<String> {
    let url: hyper::http::Uri =
        endpoint.parse().with_context(|| format!("--endpoint {endpoint} is not a URL"))?;
    if url.scheme_str() != Some("https") || url.host().is_none() {
        bail!("--endpoint {endpoint} is not an https:// URL");
    }
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(kubeconfig).context("the tenant's kubeconfig does not read")?;
    let clusters = config.get_mut("clusters").and_then(serde_yaml::Value::as_sequence_mut);
    for cluster in clusters.into_iter().flatten() {
        if let Some(cluster) =
            cluster.get_mut("cluster").and_then(serde_yaml::Value::as_mapping_mut)
        {
            cluster.insert("server".into(), endpoint.trim_end_matches('/').into());
        }
    }
    Ok(serde_yaml::to_string(&config)?)
}

async fn list(client: &kube::Client) -> anyhow::Result<()> {
    let items = tenants(client).list(&Default::default()).await.map_err(explain)?.items;
    let now = chrono::Utc::now();
    // Which replica serves each tenant, where several share them.
    let replicas = items.iter().any(|t| t.status.as_ref().is_some_and(|s| s.replica.is_some()));
    let mut header =
        vec!["NAME", "PHASE", "AGE", "EXPIRES", "GPU QUOTA", "GPU USAGE", "ENDPOINT", "DNS"];
    if replicas {
        header.push("REPLICA");
    }
    let mut rows: Vec<Vec<String>> = vec![header.into_iter().map(str::to_owned).collect()];
    for t in items {
        let status = t.status.clone().unwrap_or_default();
        let spec = t.spec.clone().unwrap_or_default();
        let age = t.metadata.creation_timestamp.as_ref().map(|c| {
            let created =
                chrono::DateTime::<chrono::Utc>::from_timestamp(c.0.as_second(), 0).unwrap_or(now);
            human(now.signed_duration_since(created))
        });
        let expires = status
            .expires_at
            .as_deref()
            .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
            .map(|e| format!("in {}", human(e.with_timezone(&chrono::Utc) - now)));
        let mut row = vec![
            t.metadata.name.clone().unwrap_or_default(),
            status.phase.clone().unwrap_or_else(|| "Pending".into()),
            age.unwrap_or_else(|| "-".into()),
            expires.unwrap_or_else(|| "never".into()),
            pairs(&spec.gpu_quota),
            pairs(&status.gpu_usage),
            status.endpoint.clone().unwrap_or_else(|| "-".into()),
            status.dns_endpoint.clone().unwrap_or_else(|| "-".into()),
        ];
        if replicas {
            row.push(status.replica.clone().unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> =
        (0..columns).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        say(cells.join("   ").trim_end());
    }
    Ok(())
}

fn pairs(map: &BTreeMap<String, i64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
}

/// A duration as kubectl prints ages: 45s, 12m, 3h, 2d.
fn human(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

/// Progress dots on stderr, only when it is a terminal and the wait is longer than a moment.
struct Progress {
    started: Instant,
    message: String,
    shown: std::cell::Cell<bool>,
}

impl Progress {
    fn start(message: &str) -> Progress {
        Progress { started: Instant::now(), message: message.to_owned(), shown: false.into() }
    }

    #[allow(clippy::print_stderr)]
    fn tick(&self) {
        if !std::io::stderr().is_terminal() || self.started.elapsed() < Duration::from_millis(500) {
            return;
        }
        if !self.shown.replace(true) {
            eprint!("{} ", self.message);
        } else {
            eprint!(".");
        }
    }

    #[allow(clippy::print_stderr)]
    fn done(&self) {
        if self.shown.get() {
            eprintln!(" done");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_quotas_parse_or_say_why_not() {
        let quota = parse_gpu(&["1g.18gb=2".into(), "3g.71gb=1".into()]).unwrap();
        assert_eq!(quota["1g.18gb"], 2);
        for bad in ["1g.18gb", "1g.18gb=-1", "1g.18gb=two"] {
            let err = parse_gpu(&[bad.into()]).unwrap_err().to_string();
            assert!(err.contains(bad), "{err}");
        }
        assert!(parse_gpu(&["1g.18gb=1".into(), "mig-1g.18gb=2".into()]).is_err());
        let err = parse_gpu(&["big=1".into()]).unwrap_err().to_string();
        assert!(err.contains("known profiles: ") && err.contains("1g.18gb+me"), "{err}");
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human(chrono::TimeDelta::seconds(45)), "45s");
        assert_eq!(human(chrono::TimeDelta::seconds(600)), "10m");
        assert_eq!(human(chrono::TimeDelta::hours(5)), "5h");
        assert_eq!(human(chrono::TimeDelta::days(3)), "3d");
    }
}
