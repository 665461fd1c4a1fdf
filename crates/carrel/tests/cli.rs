//! The `carrel` CLI end to end: `carrel up` as a real process, tenants created, used with real
//! kubectl, deleted, expired, resumed after a restart, and `carrel run`.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use carrel_e2e::{fails, kubectl_path, ok};
use common::{create, Up, CARREL};

#[test]
fn tenants_are_private_clusters_created_listed_and_deleted() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let a = create(&up, "team-a", &["--gpu", "1g.18gb=2", "--ttl", "2h"]);
    let b = create(&up, "team-b", &[]);
    // The same names in both; each sees its own.
    ok(up.kubectl(&a, &["create", "configmap", "settings", "--from-literal=owner=a"]));
    ok(up.kubectl(&b, &["create", "configmap", "settings", "--from-literal=owner=b"]));
    let read = |k: &Path| {
        ok(up.kubectl(k, &["get", "configmap", "settings", "-o", "jsonpath={.data.owner}"]))
    };
    assert_eq!(read(&a), "a");
    assert_eq!(read(&b), "b");
    let host = up.host_kubeconfig();
    let err = fails(up.kubectl(&host, &["get", "configmap", "settings"]));
    assert!(err.contains("not found"), "{err}");
    // The host sees the tenants, their namespaces and their kubeconfig Secrets.
    let names = ok(up.kubectl(&host, &["get", "tenants", "-o", "name"]));
    assert_eq!(names, "tenant.carrel.dev/team-a\ntenant.carrel.dev/team-b\n");
    ok(up.kubectl(&host, &["get", "secret", "admin-kubeconfig", "-n", "carrel-team-a"]));

    let list = ok(up.carrel(&["tenant", "list"]));
    let header: Vec<&str> = list.lines().next().unwrap().split("   ").map(str::trim).collect();
    assert_eq!(
        header.iter().filter(|c| !c.is_empty()).copied().collect::<Vec<_>>(),
        ["NAME", "PHASE", "AGE", "EXPIRES", "GPU QUOTA", "GPU USAGE", "ENDPOINT", "DNS"]
    );
    let row = list.lines().find(|l| l.starts_with("team-a ")).expect("team-a listed");
    assert!(
        row.contains("Ready") && row.contains("1g.18gb=2") && row.contains("/tenants/team-a"),
        "{row}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(up.carrel(&["tenant", "get", "team-a", "-o", "json"]))).unwrap();
    assert_eq!(json["status"]["hostNamespace"], "carrel-team-a");
    // Its cluster DNS, at a loopback address of its own, shown in the list too.
    let dns = json["status"]["dnsEndpoint"].as_str().expect("status.dnsEndpoint");
    let dns: std::net::SocketAddr = dns.parse().expect("host:port");
    assert!(dns.ip().is_loopback(), "{dns}");
    assert!(row.trim_end().ends_with(&dns.to_string()), "{row}");
    assert!(json["status"]["caBundle"].as_str().unwrap().starts_with("-----BEGIN CERTIFICATE"));
    let table = ok(up.kubectl(&host, &["get", "tenants"]));
    let columns: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(columns, ["NAME", "PHASE", "EXPIRES", "AGE"], "{table}");
    assert!(table.lines().any(|l| l.starts_with("team-a") && l.contains("Ready")), "{table}");
    assert_eq!(
        ok(up.carrel(&["tenant", "kubeconfig", "team-b"])).trim(),
        std::fs::read_to_string(&b).unwrap().trim()
    );

    // Bad input is refused with what to do.
    let err = fails(up.carrel(&["tenant", "create", "team-a"]));
    assert!(err.contains("tenant team-a already exists"), "{err}");
    let err = fails(up.carrel(&["tenant", "create", "Team_C"]));
    assert!(err.contains("metadata.name") && err.contains("Invalid value"), "{err}");
    let err = fails(up.carrel(&["tenant", "create", "team-c", "--gpu", "1g.18gb"]));
    assert!(err.contains("PROFILE=COUNT"), "{err}");
    let err = fails(up.carrel(&["tenant", "create", "team-c", "--ttl", "2 days"]));
    assert!(err.contains("spec.ttl"), "{err}");

    // Deleting a tenant removes its API, its data and its host namespace.
    assert_eq!(ok(up.carrel(&["tenant", "delete", "team-a", "--wait"])), "tenant/team-a deleted\n");
    // Its credentials verify nowhere now: 401, as any stranger's (no 404 telling that the
    // tenant is gone).
    let err = fails(up.kubectl(&a, &["get", "configmap", "settings"]));
    assert!(err.contains("Unauthorized") || err.contains("provide credentials"), "{err}");
    assert!(!data.path().join("tenants/team-a").exists());
    let err = fails(up.carrel(&["tenant", "delete", "team-a"]));
    assert!(err.contains("does not exist"), "{err}");
    assert_eq!(read(&b), "b", "the other tenant is untouched");
    up.stop();
}

#[test]
fn a_restart_keeps_tenants_and_their_objects_and_ttls_expire() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let kept = create(&up, "kept", &[]);
    // Created without waiting for its kubeconfig (the shortest TTL a tenant may have): a second
    // is soon gone on a busy machine.
    assert_eq!(
        ok(up.carrel(&["tenant", "create", "brief", "--ttl", "1s"])),
        "tenant/brief created\n"
    );
    ok(up.kubectl(&kept, &["create", "namespace", "work"]));
    ok(up.kubectl(&kept, &["create", "configmap", "c", "-n", "work", "--from-literal=k=v"]));
    up.stop();

    // The new process listens on a new port: the tenant's kubeconfig follows it.
    let up = Up::start(data.path());
    let kept = up.home.path().join("kept-again.kubeconfig");
    std::fs::write(&kept, ok(up.carrel(&["tenant", "kubeconfig", "kept"]))).unwrap();
    let out =
        ok(up.kubectl(&kept, &["get", "configmap", "c", "-n", "work", "-o", "jsonpath={.data.k}"]));
    assert_eq!(out, "v");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = ok(up.carrel(&["tenant", "list"]));
        if !list.contains("brief") {
            assert!(list.contains("kept"), "{list}");
            break;
        }
        assert!(Instant::now() < deadline, "the expired tenant is still listed: {list}");
        std::thread::sleep(Duration::from_millis(200));
    }
    up.stop();
}

#[test]
fn carrel_run_gives_a_command_a_throwaway_tenant() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let kubectl = kubectl_path("kubectl.1.33");
    let kubectl = kubectl.to_string_lossy();
    let out = ok(up.carrel(&["run", "--", &kubectl, "get", "namespaces", "-o", "name"]));
    assert!(out.contains("namespace/kube-system"), "{out}");
    let out = up.carrel(&["run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "carrel run exits with the command's code");
    // Nothing is left behind.
    let list = ok(up.carrel(&["tenant", "list"]));
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(std::fs::read_dir(data.path().join("tenants")).unwrap().next().is_none());
    up.stop();
}

#[test]
fn without_a_host_the_cli_says_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(CARREL)
        .args(["tenant", "list"])
        .env_remove("CARREL_HOST_KUBECONFIG")
        .env("CARREL_DATA_DIR", home.path().join("none"))
        .output()
        .unwrap();
    let err = fails(out);
    assert!(err.contains("carrel up") && err.contains("--host-kubeconfig"), "{err}");

    // A kubeconfig whose server is not there.
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let kubeconfig = up.host_kubeconfig();
    up.stop();
    let out = Command::new(CARREL)
        .args(["tenant", "list", "--host-kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .unwrap();
    let err = fails(out);
    assert!(err.contains("cannot reach the host API"), "{err}");
}

#[test]
fn a_low_open_file_limit_does_not_cap_the_tenants() {
    // Each tenant keeps a few files open; with a soft limit of 64, twenty tenants would need
    // more than the limit unless carrel up raises it.
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_with_file_limit(data.path(), 64);
    for i in 0..20 {
        ok(up.carrel(&["tenant", "create", &format!("t{i}"), "--wait"]));
    }
    let list = ok(up.carrel(&["tenant", "list"]));
    assert_eq!(list.lines().filter(|l| l.contains(" Ready ")).count(), 20, "{list}");
    up.stop();
}
