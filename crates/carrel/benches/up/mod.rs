//! `carrel up` as the benchmarks start it: the binary as a child on a free port, with simulated
//! GPU nodes, and kube clients of its APIs; and what a process spends, read from `/proc`.

#![allow(dead_code)] // Not every benchmark uses every part.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use kube::config::{KubeConfigOptions, Kubeconfig};

pub const CARREL: &str = env!("CARGO_BIN_EXE_carrel");

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A running `carrel up`, killed when dropped.
pub struct Up {
    pub child: Child,
    pub kubeconfig: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `carrel up` on a free port, with `extra` arguments (`--sync-window 0`).
pub fn start(data: &Path, extra: &[&str]) -> BenchResult<Up> {
    let mut command = Command::new(CARREL);
    command
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--sim-nodes",
            "2",
            "--sim-gpus",
            "h200x8",
            "--sim-max-pods",
            "8000",
            "--data-dir",
        ])
        .arg(data)
        .args(extra);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut kubeconfig = None;
    for line in lines.by_ref() {
        let line = line?;
        if let Some(path) = line.strip_prefix("host kubeconfig: ") {
            kubeconfig = Some(PathBuf::from(path));
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    Ok(Up { child, kubeconfig: kubeconfig.ok_or("carrel up did not start")? })
}

/// Create tenant `name` with `carrel tenant create`, its admin kubeconfig written to `kubeconfig`
/// once it is ready.
pub fn create_tenant(up: &Up, name: &str, kubeconfig: &Path) -> BenchResult<()> {
    let out = Command::new(CARREL)
        .args(["tenant", "create", name, "--kubeconfig-out"])
        .arg(kubeconfig)
        .env("CARREL_HOST_KUBECONFIG", &up.kubeconfig)
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(())
}

pub async fn client_from(path: &Path) -> BenchResult<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// CPU seconds (user + system) and resident KiB of a process.
pub fn usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command: state is field 0; utime 11, stime 12 (clock ticks, 100 per second).
    let cpu = (ticks(11) + ticks(12)) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (cpu, rss)
}
