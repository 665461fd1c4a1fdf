//! Each tenant of `carrel up` has its cluster DNS, at the address its `status.dnsEndpoint`
//! gives, answering from its own Services and EndpointSlices, as `dig` (Debian's `dnsutils`)
//! asks it: A records of a Service and of a headless Service's pods, no AAAA, SRV for a named
//! port, the search path, NXDOMAIN for another tenant's Service, and other names forwarded
//! upstream. The tenant has its `kube-system/kube-dns` Service, and its host pods resolve
//! through it, never through the host's DNS.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use carrel_dns::{Server, SharedZone, Zone};
use carrel_e2e::ok;
use common::{create, eventually, Up};
use serde_json::{json, Value};

/// `dig` against `server`: `+short` answers, one per line, or the status with `status`.
fn dig(server: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "+time=2", "+tries=2"])
        .args(args)
        .output()
        .expect("run dig (Debian's dnsutils; scripts/test.sh installs it)");
    assert!(output.status.success(), "dig {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `status:` of a full `dig` answer (`NOERROR`, `NXDOMAIN`).
fn status(server: SocketAddr, name: &str, record: &str) -> String {
    let answer = dig(server, &[name, record]);
    let status = answer.split("status: ").nth(1).and_then(|rest| rest.split(',').next());
    status.unwrap_or_default().to_owned()
}

fn short(server: SocketAddr, args: &[&str]) -> Vec<String> {
    let mut args = args.to_vec();
    args.push("+short");
    let mut lines: Vec<String> = dig(server, &args).lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// The tenant's DNS address, from its status.
fn dns_endpoint(up: &Up, tenant: &str) -> SocketAddr {
    tenant_dns(up, tenant).expect("status.dnsEndpoint, host:port")
}

/// The tenant's DNS address, if its status has one.
fn tenant_dns(up: &Up, tenant: &str) -> Option<SocketAddr> {
    let out = up.carrel(&["tenant", "get", tenant, "-o", "json"]);
    let tenant: Value = serde_json::from_slice(&out.stdout).ok()?;
    tenant.pointer("/status/dnsEndpoint").and_then(Value::as_str)?.parse().ok()
}

/// A DNS server for names outside the cluster: the same library serving another domain.
fn upstream(runtime: &tokio::runtime::Runtime) -> Server {
    let service = serde_json::from_value(json!({
        "metadata": {"name": "www", "namespace": "site"},
        "spec": {"clusterIP": "192.0.2.7", "ports": [{"port": 80}]},
    }))
    .expect("a Service");
    let zone = Zone::build("upstream.test", &[service], &[]).expect("a zone");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    runtime.block_on(Server::bind(addr, SharedZone::new(zone), Vec::new())).expect("upstream")
}

const SERVICES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: peers}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
"#;

#[test]
fn each_tenant_resolves_its_own_names_and_forwards_the_rest() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let upstream = upstream(&runtime);
    let data = tempfile::tempdir().unwrap();
    let forward = upstream.local_addr().to_string();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--dns-upstream", &forward]);
    let team_a = create(&up, "team-a", &[]);
    let team_b = create(&up, "team-b", &[]);
    let kubectl = |kubeconfig, args: &[&str]| ok(up.kubectl(kubeconfig, args));
    let within = Duration::from_secs(60);

    kubectl(&team_a, &["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
    let manifest = data.path().join("services.yaml");
    std::fs::write(&manifest, SERVICES).unwrap();
    kubectl(&team_a, &["apply", "-f", manifest.to_str().unwrap()]);
    kubectl(&team_a, &["rollout", "status", "deployment/web", "--timeout=90s"]);
    kubectl(&team_b, &["create", "service", "clusterip", "billing", "--tcp=80"]);

    let (a, b) = (dns_endpoint(&up, "team-a"), dns_endpoint(&up, "team-b"));
    assert!(a.ip().is_loopback() && b.ip().is_loopback(), "{a} {b}");
    assert_ne!(a.ip(), b.ip(), "each tenant answers at an address of its own");
    assert_eq!(a.port(), b.port(), "on one shared port");
    let cluster_ip = kubectl(&team_a, &["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let pod_ips = eventually("both pods with an IP", within, || {
        let out = kubectl(
            &team_a,
            &["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.podIP}"],
        );
        let mut ips: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
        ips.sort();
        (ips.len() == 2, ips)
    });

    // A: the Service's cluster IP, and a headless Service's ready pods.
    eventually("web's A record", within, || {
        let got = short(a, &["web.default.svc.cluster.local"]);
        (got == [cluster_ip.clone()], got)
    });
    eventually("the headless Service's pods", within, || {
        let got = short(a, &["peers.default.svc.cluster.local"]);
        (got == pod_ips, got)
    });
    // No AAAA on a single-stack cluster: the name exists, without records of that type.
    assert!(short(a, &["web.default.svc.cluster.local", "AAAA"]).is_empty());
    assert_eq!(status(a, "web.default.svc.cluster.local", "AAAA"), "NOERROR");
    // SRV for the named port.
    let srv = short(a, &["_http._tcp.web.default.svc.cluster.local", "SRV"]);
    assert_eq!(srv.len(), 1, "{srv:?}");
    assert!(srv[0].ends_with(" 80 web.default.svc.cluster.local."), "{srv:?}");
    // The search path a pod in `default` has: `web` and `web.default`.
    for (domain, name) in
        [("default.svc.cluster.local", "web"), ("svc.cluster.local", "web.default")]
    {
        let domain = format!("+domain={domain}");
        let got = short(a, &["+search", "+ndots=5", &domain, name]);
        assert_eq!(got, [cluster_ip.as_str()], "{name} searched in {domain}");
    }

    // Another tenant's Service is not a name here, and is one there.
    assert_eq!(status(a, "billing.default.svc.cluster.local", "A"), "NXDOMAIN");
    eventually("team-b's own Service", within, || {
        let got = short(b, &["billing.default.svc.cluster.local"]);
        (got.len() == 1, got)
    });
    assert_eq!(status(b, "web.default.svc.cluster.local", "A"), "NXDOMAIN");

    // The cluster's API by name: where the tenant's API answers (this listener, whose
    // certificate names `kubernetes.default.svc`), not behind a cluster IP no proxy carries.
    let listener = up.listener();
    let api = "kubernetes.default.svc.cluster.local";
    assert_eq!(short(a, &[api]), [listener.ip().to_string()]);
    let srv = short(a, &[&format!("_https._tcp.{api}"), "SRV"]);
    assert_eq!(srv.len(), 1, "{srv:?}");
    assert!(srv[0].contains(&format!(" {} ", listener.port())), "{srv:?}");

    // Names outside the cluster domain are forwarded.
    assert_eq!(short(a, &["www.site.svc.upstream.test"]), ["192.0.2.7"]);

    // The zone follows the Services: a deleted one is gone.
    kubectl(&team_a, &["delete", "service", "peers"]);
    eventually("the deleted Service's name gone", within, || {
        let got = status(a, "peers.default.svc.cluster.local", "A");
        (got == "NXDOMAIN", got)
    });

    // The tenant's DNS Service, and its host pods resolving through it.
    let kube_dns = kubectl(
        &team_a,
        &["get", "service", "-n", "kube-system", "kube-dns", "-o", "jsonpath={.spec.clusterIP}"],
    );
    assert_eq!(kube_dns, "10.96.0.10");
    let host = up.host_kubeconfig();
    let host_dns = kubectl(
        &host,
        &["get", "pods", "-n", "carrel-team-a", "-o", "jsonpath={.items[*].spec.dnsConfig}"],
    );
    let host_dns: Vec<Value> = serde_json::Deserializer::from_str(&host_dns)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("the host pods' dnsConfig");
    assert_eq!(host_dns.len(), 2, "{host_dns:?}");
    for config in &host_dns {
        assert_eq!(config["nameservers"], json!(["10.96.0.10"]), "{config}");
        assert_eq!(config["searches"][0], "default.svc.cluster.local", "{config}");
    }
    let policies = kubectl(
        &host,
        &["get", "pods", "-n", "carrel-team-a", "-o", "jsonpath={.items[*].spec.dnsPolicy}"],
    );
    assert_eq!(policies, "None None");

    up.stop();

    // After a restart the tenant is served without being opened: its first query opens it and
    // is answered from its names, at the address and port it had where they are free.
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--dns-upstream", &forward]);
    let again = eventually("team-a's names after a restart", within, || {
        // Read each time: until the manager has looked at the tenant, its status is the old one.
        let Some(at) = tenant_dns(&up, "team-a") else { return (false, None) };
        let out = Command::new("dig")
            .args([&format!("@{}", at.ip()), "-p", &at.port().to_string(), "+time=3", "+tries=1"])
            .args(["+short", "web.default.svc.cluster.local"])
            .output()
            .expect("run dig");
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (answer == cluster_ip, Some(at))
    });
    // The same address; the port too unless something else took it meanwhile.
    assert_eq!(again.map(|at| at.ip()), Some(a.ip()), "the address it had");
    up.stop();
    runtime.block_on(upstream.shutdown()).expect("the upstream stops");
}
