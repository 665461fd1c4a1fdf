//! What an idle tenant costs `carrel up` in file descriptors, with its syncer running: its
//! store's files and nothing else. The syncer reaches its tenant's API and the host's in this
//! process, without sockets, so no tenant holds a connection to the process's own listener.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use carrel_e2e::ok;
use common::{create, eventually, Up};

/// How many tenants are measured.
const TENANTS: usize = 50;

/// What the process holds open: the files under `tenants` (the tenants' stores), and the rest
/// (sockets, pipes, the host's files).
fn open_files(pid: u32, tenants: &Path) -> (usize, usize) {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the process's descriptors");
    let targets: Vec<PathBuf> =
        entries.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).collect();
    let stores = targets.iter().filter(|t| t.starts_with(tenants)).count();
    (stores, targets.len() - stores)
}

/// What the process holds open once the count has not changed for a second (the connections
/// of the CLI and kubectl runs closed, every syncer's watches started), up to `within`.
fn settled(pid: u32, tenants: &Path, within: Duration) -> (usize, usize) {
    let deadline = Instant::now() + within;
    let mut last = open_files(pid, tenants);
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = open_files(pid, tenants);
        if now != last {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_secs(1) {
            break;
        }
    }
    last
}

#[allow(clippy::print_stderr)]
fn say(line: &str) {
    eprintln!("{line}");
}

/// The phases of the host pods of the tenants' syncers.
fn host_pod_phases(up: &Up) -> Vec<String> {
    let rows = "{range .items[*]}{.metadata.namespace} {.status.phase}{\"\\n\"}{end}";
    let out = ok(up
        .kubectl(&up.host_kubeconfig(), &["get", "pods", "-A", "-o", &format!("jsonpath={rows}")]));
    out.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(namespace, _)| namespace.starts_with("carrel-t"))
        .map(|(_, phase)| phase.to_owned())
        .collect()
}

#[test]
fn an_idle_tenant_with_its_syncer_holds_its_stores_files_and_no_socket() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let tenants = data.path().join("tenants");
    let (_, before) = settled(up.pid(), &tenants, Duration::from_secs(10));

    // Ten at a time, each waited for until Ready (its syncer starts then).
    let names: Vec<String> = (0..TENANTS).map(|i| format!("t{i}")).collect();
    let kubeconfigs: Vec<PathBuf> = std::thread::scope(|scope| {
        let workers: Vec<_> = names
            .chunks(TENANTS / 10)
            .map(|chunk| {
                let up = &up;
                scope.spawn(move || chunk.iter().map(|n| create(up, n, &[])).collect::<Vec<_>>())
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let (stores, others) = settled(up.pid(), &tenants, Duration::from_secs(20));
    let per_tenant = |n: usize| n as f64 / TENANTS as f64;
    let after = stores + others;
    let added = per_tenant(after.saturating_sub(before));
    let (store_files, other_files) =
        (per_tenant(stores), per_tenant(others.saturating_sub(before)));
    say(&format!(
        "{TENANTS} idle tenants: {before} descriptors before, {after} after: {added:.2} per \
         tenant ({store_files:.2} its store's files, {other_files:.2} others)"
    ));
    // No connection, pipe or other descriptor per tenant: the stores' files alone (sled opens
    // its database twice, beside the WAL and the lock: four). The target of one per
    // tenant needs stores opened only while used.
    assert!(other_files <= 0.1, "{other_files:.2} descriptors per tenant beside its store's");
    assert!(added <= 5.0, "{added:.2} descriptors per idle tenant");

    // Every tenant's syncer was running: a pod in each reaches the host and runs.
    std::thread::scope(|scope| {
        for chunk in kubeconfigs.chunks(TENANTS / 10) {
            let up = &up;
            scope.spawn(move || {
                for kubeconfig in chunk {
                    ok(up.kubectl(kubeconfig, &["run", "p", "--image=busybox", "--restart=Never"]));
                }
            });
        }
    });
    eventually("a running host pod per tenant", Duration::from_secs(30), || {
        let phases = host_pod_phases(&up);
        (phases.iter().filter(|p| *p == "Running").count() == TENANTS, phases)
    });
    up.stop();
}
