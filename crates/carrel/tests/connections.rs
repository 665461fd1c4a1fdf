//! Idle connections cannot take the server down: connections beyond the limits are closed, the
//! stores keep the descriptors they need, and other clients are served meanwhile.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use carrel_e2e::ok;
use common::{create, Up};

/// The address `carrel up` listens on, from its host kubeconfig.
fn address(up: &Up) -> SocketAddr {
    let text = std::fs::read_to_string(up.host_kubeconfig()).unwrap();
    let server = text.lines().find_map(|l| l.trim().strip_prefix("server: https://")).unwrap();
    server.trim_end_matches('/').parse().unwrap()
}

/// Open `count` TCP connections to `to`, from the loopback addresses 127.0.0.`first`… in turn
/// (each a "client"), and hold them without a byte sent. Connections the server closed stay
/// counted here: they were opened.
async fn idle_connections(
    to: SocketAddr,
    count: usize,
    sources: std::ops::Range<u8>,
) -> Vec<tokio::net::TcpStream> {
    let sources: Vec<u8> = sources.collect();
    let mut held = Vec::with_capacity(count);
    let mut pending = Vec::new();
    for i in 0..count {
        let source = IpAddr::V4(Ipv4Addr::new(127, 0, 0, sources[i % sources.len()]));
        pending.push(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(source, 0))?;
            socket.connect(to).await
        });
        if pending.len() == 256 || i + 1 == count {
            for connected in futures::future::join_all(pending.drain(..)).await {
                held.push(connected.expect("an idle connection"));
            }
        }
    }
    held
}

/// The number of descriptors process `pid` has open.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

#[allow(clippy::print_stderr)]
fn say(line: &str) {
    eprintln!("{line}");
}

/// The tests of this file each hold thousands of descriptors in this one process, under one
/// open-file limit: they take turns.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

#[test]
fn twenty_thousand_idle_connections_leave_other_clients_served() {
    let _turn = one_at_a_time();
    // The test holds the client ends: it needs a descriptor for each.
    let limit = rlimit::increase_nofile_limit(u64::MAX).unwrap();
    let wanted = 20_000usize;
    let count = wanted.min(usize::try_from(limit).unwrap().saturating_sub(300));
    if count < wanted {
        // Said, so that a run on a machine with a lower limit shows what it tested.
        say(&format!("the open-file limit here is {limit}: opening {count} idle connections"));
    }
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("carrel.log");
    let up = Up::start_logged(data.path(), None, &["--sim-nodes", "1"], &log);
    let tenant = create(&up, "team-a", &[]);
    let addr = address(&up);

    let rt = runtime();
    // From two client addresses, far more than the 1,024 each one may hold.
    let opening = Instant::now();
    let held = rt.block_on(idle_connections(addr, count, 2..4));
    assert_eq!(held.len(), count);
    let server_files = open_files(up.pid());
    say(&format!(
        "{count} connections opened in {:?}; the server has {server_files} files open",
        opening.elapsed()
    ));

    // Another client (from 127.0.0.1) is served, on the host and in a tenant.
    let list = ok(up.carrel(&["tenant", "list"]));
    assert!(list.contains("team-a"), "{list}");
    ok(up.kubectl(&tenant, &["create", "configmap", "during-the-flood"]));
    let got = ok(up.kubectl(&tenant, &["get", "configmap", "during-the-flood", "-o", "name"]));
    assert_eq!(got.trim(), "configmap/during-the-flood");

    // The server held no more than its per-client limit from each address, not one descriptor
    // per idle connection.
    assert!(server_files < 2 * 1024 + 1_000, "{server_files} files open for {count} connections");
    drop(held);
    // Its log says the limit was reached a few times, not once per refused connection.
    let (lines, most_repeated) =
        common::log_volume(&std::fs::read_to_string(&log).unwrap_or_default());
    assert!(lines < 200, "{lines} log lines:\n{}", std::fs::read_to_string(&log).unwrap());
    assert!(most_repeated < 50, "one message {most_repeated} times");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("connection limit reached"), "{text}");
    up.stop();
}

/// The tenant kubeconfig's credentials as PEM files for curl: (CA, certificate, key).
fn pem_files(kubeconfig: &Path, dir: &Path) -> [std::path::PathBuf; 3] {
    use base64::Engine as _;
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let field = |name: &str| {
        let value = text.lines().find_map(|l| l.trim().strip_prefix(name)).unwrap();
        base64::engine::general_purpose::STANDARD.decode(value.trim()).unwrap()
    };
    let names = ["ca.pem", "cert.pem", "key.pem"];
    let fields = ["certificate-authority-data: ", "client-certificate-data: ", "client-key-data: "];
    let mut paths = names.map(|n| dir.join(n));
    for (path, name) in paths.iter_mut().zip(fields) {
        std::fs::write(&*path, field(name)).unwrap();
    }
    paths
}

#[test]
fn idle_connections_cannot_take_the_stores_descriptors() {
    let _turn = one_at_a_time();
    // Both limits at 1,024: carrel up cannot raise them, and a few hundred connections would
    // take every descriptor but for the stores' reserve.
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("carrel.log");
    let up = Up::start_logged(data.path(), Some("-n 1024"), &["--sim-nodes", "1"], &log);
    let tenant = create(&up, "team-a", &[]);
    let addr = address(&up);
    let endpoint = format!("https://{addr}/tenants/team-a/api/v1/namespaces/default/configmaps");
    let [ca, cert, key] = pem_files(&tenant, up.home.path());

    // Writes go on, on one kept-alive connection opened before the flood: 200 ConfigMaps.
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"w-"},"data":{"k":"v"}}"#;
    let mut curl = Command::new("curl");
    curl.args(["-s", "-w", "%{http_code}\n", "--rate", "20/s"])
        .arg("--cacert")
        .arg(&ca)
        .arg("--cert")
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .args(["-H", "Content-Type: application/json", "-d", body]);
    for _ in 0..200 {
        curl.args(["-o", "/dev/null"]).arg(&endpoint);
    }
    let writer = curl.stdout(std::process::Stdio::piped()).spawn().expect("curl");
    // Let the writer connect before the flood.
    std::thread::sleep(Duration::from_millis(500));

    // Flood: 3,000 connections from 30 addresses at a time, renewed every 2 s for 10 s, so the
    // server stays at its limit however its timeouts close them.
    let rt = runtime();
    let mut peak = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let held = rt.block_on(idle_connections(addr, 3_000, 2..32));
        std::thread::sleep(Duration::from_secs(2));
        peak = peak.max(open_files(up.pid()));
        drop(held);
    }
    // The stores' reserve stayed free while the server was at its connection limit.
    assert!(peak > 0 && peak <= 1024 - 200, "{peak} files open against a limit of 1,024");

    let out = writer.wait_with_output().unwrap();
    let codes = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(codes.lines().count(), 200, "{codes}");
    assert!(codes.lines().all(|c| c == "201"), "writes during the flood: {codes}");

    // Once the flood is gone, a new tenant and writes to the existing one succeed.
    std::thread::sleep(Duration::from_secs(1));
    let created = create(&up, "team-b", &[]);
    ok(up.kubectl(&created, &["create", "configmap", "after"]));
    ok(up.kubectl(&tenant, &["create", "configmap", "after"]));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("Too many open files"), "{text}");
    up.stop();
}

/// The phase of a tenant, as the host API says.
fn phase(up: &Up, name: &str) -> String {
    let out = up
        .kubectl(&up.host_kubeconfig(), &["get", "tenant", name, "-o", "jsonpath={.status.phase}"]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tenants_beyond_the_open_file_limit_are_refused_clearly_and_served_once_there_is_room() {
    let _turn = one_at_a_time();
    // Both limits at 1,024: carrel up keeps 512 for itself and serves a new tenant only while
    // 48 more fit, so a few tenants in it refuses the next.
    let data = tempfile::tempdir().unwrap();
    let log = data.path().join("carrel.log");
    let up = Up::start_logged(data.path(), Some("-n 1024"), &["--sim-nodes", "1"], &log);
    let mut served = Vec::new();
    let mut refused = None;
    for i in 0..40 {
        let name = format!("team-{i}");
        let kubeconfig = up.home.path().join(format!("{name}.kubeconfig"));
        let path = kubeconfig.to_string_lossy().into_owned();
        let out = up.carrel(&["tenant", "create", &name, "--wait", "--kubeconfig-out", &path]);
        if out.status.success() {
            served.push((name, kubeconfig));
            continue;
        }
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(said.contains(&format!("tenant {name} failed")), "{said}");
        assert!(said.contains("file descriptors are in use"), "{said}");
        assert!(said.contains("raise the open-file limit"), "{said}");
        refused = Some(name);
        break;
    }
    let refused = refused.expect("a tenant beyond the open-file limit is refused");
    assert!(served.len() >= 2, "only {} tenants fit under 1,024 descriptors", served.len());
    say(&format!(
        "{} tenants served under 1,024 descriptors; {refused} refused; {} open",
        served.len(),
        open_files(up.pid())
    ));
    assert_eq!(phase(&up, &refused), "Failed");
    let reason = up.kubectl(
        &up.host_kubeconfig(),
        &["get", "tenant", &refused, "-o", "jsonpath={.status.conditions[0].reason}"],
    );
    assert_eq!(String::from_utf8_lossy(&reason.stdout), "InsufficientFileDescriptors");

    // Every tenant served keeps being served, with room to spare in the limit.
    for (name, kubeconfig) in &served {
        ok(up.kubectl(kubeconfig, &["create", "configmap", "after"]));
        assert_eq!(phase(&up, name), "Ready");
    }
    assert!(open_files(up.pid()) < 1024 - 200, "{} files open", open_files(up.pid()));

    // Room is made: the refused tenant is served without being touched.
    for (name, _) in served.iter().rev().take(3) {
        ok(up.carrel(&["tenant", "delete", name, "--wait"]));
    }
    common::eventually("the refused tenant served", Duration::from_secs(60), || {
        let phase = phase(&up, &refused);
        (phase == "Ready", phase)
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("Too many open files"), "{text}");
    let (lines, most_repeated) =
        common::log_volume(&std::fs::read_to_string(&log).unwrap_or_default());
    assert!(lines < 200, "{lines} log lines:\n{text}");
    assert!(most_repeated < 50, "one message {most_repeated} times");
    up.stop();
}
