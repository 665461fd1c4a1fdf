//! `carrel run -- CMD…`: a throwaway tenant for one command.

use std::path::Path;

use anyhow::Context;

use carrel_apiserver::object_names::random_suffix;

use crate::host;
use crate::tenant::{self, Quota};

/// `carrel run` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    quota: Quota,
    /// The command to run, with its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Create a tenant, run the command with KUBECONFIG pointing at it, delete the tenant (also when
/// the command fails or Ctrl-C interrupts it), and answer the command's exit code.
pub async fn run(host_kubeconfig: Option<&Path>, args: Args) -> anyhow::Result<i32> {
    let client = host::client(host_kubeconfig).await?;
    let name = format!("run-{}", random_suffix());
    let mut quota = args.quota.clone();
    // A throwaway tenant outlives an interrupted run only until its TTL.
    quota.ttl.get_or_insert_with(|| "1h".to_owned());
    tenant::create(&client, &name, &quota).await?;
    let outcome = run_in(&client, &name, &args.command).await;
    let deleted = tenant::delete(&client, &name, true).await;
    let code = outcome?;
    deleted.with_context(|| format!("deleting the throwaway tenant {name}"))?;
    Ok(code)
}

async fn run_in(client: &kube::Client, name: &str, command: &[String]) -> anyhow::Result<i32> {
    tenant::wait_ready(client, name).await?;
    let config = tenant::kubeconfig(client, name).await?;
    let mut file = tempfile::NamedTempFile::new().context("a file for the tenant's kubeconfig")?;
    std::io::Write::write_all(&mut file, config.as_bytes())?;
    let (program, rest) = command.split_first().context("no command given")?;
    let mut child = tokio::process::Command::new(program)
        .args(rest)
        .env("KUBECONFIG", file.path())
        .env("CARREL_TENANT", name)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    tokio::select! {
        status = child.wait() => {
            let status = status.with_context(|| format!("waiting for {program}"))?;
            // Killed by a signal: the shell's convention, 128 + the signal.
            Ok(status.code().unwrap_or_else(|| {
                128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(1)
            }))
        }
        _ = tokio::signal::ctrl_c() => {
            let _ = child.kill().await;
            Ok(130)
        }
    }
}
