//! A tenant of `carrel up` gives its Services cluster IPs, Endpoints and EndpointSlices as
//! kube-apiserver and kube-controller-manager do, through each kubectl users run (1.31, 1.33 and
//! the current one) and the official Python client: a Deployment exposed gets a cluster IP,
//! which its host Service holds on the embedded host, and lists its pods' IPs and the target
//! port; the tenant has its `kubernetes` Service.

mod common;

use std::path::Path;
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, kubectls, python, Up};
use serde_json::Value;

#[test]
fn an_exposed_deployment_has_endpoints_and_endpoint_slices_of_its_pods() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    for (i, (version, binary)) in kubectls().into_iter().enumerate() {
        let tenant = format!("team-{i}");
        let kubeconfig = create(&up, &tenant, &[]);
        exposed_deployment(&up, &tenant, &binary, &kubeconfig, version);
    }
    up.stop();
}

/// `kubectl expose` through kubectl `version` at `binary`, in tenant `tenant`.
fn exposed_deployment(up: &Up, tenant: &str, binary: &Path, kubeconfig: &Path, version: &str) {
    let kubectl = |args: &[&str]| {
        let output = up.kubectl_at(binary, kubeconfig, args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "kubectl {version} {args:?}: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };

    kubectl(&["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
    kubectl(&["expose", "deployment", "web", "--port", "80", "--target-port", "8080"]);
    kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    let within = Duration::from_secs(60);

    // A cluster IP of the Service network, the one its host Service holds on the host.
    let cluster_ip = kubectl(&["get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"]);
    let ip: std::net::Ipv4Addr = cluster_ip.trim().parse().expect("an IPv4 cluster IP");
    assert_eq!(ip.octets()[0], 10, "{ip}");
    let table = kubectl(&["get", "services"]);
    assert!(table.contains(&format!("{ip}")) && table.contains("80/TCP"), "{table}");
    let kubernetes = kubectl(&["get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]);
    assert_eq!(kubernetes.trim(), "10.96.0.1");
    eventually("the host Service on the same cluster IP", within, || {
        let out = up.kubectl(
            &up.host_kubeconfig(),
            &[
                "get",
                "service",
                "-n",
                &format!("carrel-{tenant}"),
                "web-x-default",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ],
        );
        let host_ip = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (host_ip == ip.to_string(), host_ip)
    });
    let pod_ips = eventually("both pods with an IP", within, || {
        let out =
            kubectl(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].status.podIP}"]);
        let mut ips: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
        ips.sort();
        (ips.len() == 2, ips)
    });

    // The Endpoints object: both IPs ready, port 8080; kubectl's table shows ip:port.
    eventually("the Endpoints of both pods", within, || {
        let out = kubectl(&[
            "get",
            "endpoints",
            "web",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip} {.subsets[*].ports[*].port}",
        ]);
        let mut seen: Vec<&str> = out.split_whitespace().collect();
        let port = seen.pop();
        seen.sort();
        (seen == pod_ips && port == Some("8080"), out)
    });
    let output = up.kubectl_at(binary, kubeconfig, &["get", "endpoints", "web"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        stderr.contains(
            "Warning: v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
        ),
        "kubectl {version}: {stderr}"
    );
    let table = ok(output);
    assert!(table.starts_with("NAME"), "{table}");
    for ip in &pod_ips {
        assert!(table.contains(&format!("{ip}:8080")), "{table}");
    }

    // The slices: one, IPv4, both IPs ready, port 8080, owned by the Service.
    let slices = eventually("a slice of both pods", within, || {
        let out = kubectl(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "json",
        ]);
        let list: Value = serde_json::from_str(&out).expect("a list");
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let mut ips: Vec<String> = items
            .iter()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == Value::Bool(true))
            .filter_map(|e| e["addresses"][0].as_str().map(str::to_owned))
            .collect();
        ips.sort();
        (ips == pod_ips, items)
    });
    assert_eq!(slices.len(), 1, "{slices:?}");
    let slice = &slices[0];
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["ports"][0]["port"], 8080);
    assert_eq!(slice["metadata"]["ownerReferences"][0]["name"], "web");
    assert_eq!(
        slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "endpointslice-controller.k8s.io"
    );
    let table = kubectl(&["get", "endpointslices"]);
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"], "{table}");
    assert!(table.contains("IPv4") && table.contains("8080"), "{table}");
}

#[test]
fn the_python_client_creates_services_and_reads_their_endpoints() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let kubeconfig = create(&up, "team-py", &[]);
    python("services.py", &kubeconfig);
    up.stop();
}

#[test]
fn the_service_network_is_the_one_carrel_up_is_given() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--service-cidr", "10.43.0.0/16"]);
    let kubeconfig = create(&up, "team-a", &[]);
    let get_ip = |kubeconfig: &Path, args: &[&str]| {
        let mut all = vec!["get", "service"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "jsonpath={.spec.clusterIP}"]);
        ok(up.kubectl(kubeconfig, &all))
    };
    // The tenant's own Services and the host's, as k3s numbers them.
    assert_eq!(get_ip(&kubeconfig, &["kubernetes"]), "10.43.0.1");
    assert_eq!(get_ip(&kubeconfig, &["kube-dns", "-n", "kube-system"]), "10.43.0.10");
    assert_eq!(get_ip(&up.host_kubeconfig(), &["kubernetes"]), "10.43.0.1");

    // A new Service has an address of the range, and its host Service holds the same one: the
    // tenant Service is not made again.
    ok(up.kubectl(&kubeconfig, &["create", "service", "clusterip", "web", "--tcp=80:8080"]));
    let uid =
        ok(up.kubectl(&kubeconfig, &["get", "service", "web", "-o", "jsonpath={.metadata.uid}"]));
    let ip: std::net::Ipv4Addr = get_ip(&kubeconfig, &["web"]).parse().expect("an IPv4 address");
    assert_eq!(ip.octets()[..2], [10, 43], "{ip}");
    eventually("the host Service on the same address", Duration::from_secs(30), || {
        let host = get_ip(&up.host_kubeconfig(), &["web-x-default", "-n", "carrel-team-a"]);
        (host == ip.to_string(), host)
    });
    let again =
        ok(up.kubectl(&kubeconfig, &["get", "service", "web", "-o", "jsonpath={.metadata.uid}"]));
    assert_eq!(again, uid, "the Service was made again");

    // A range that is not one is refused at start.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_carrel"))
        .args(["up", "--service-cidr", "10.43.0.0/40"])
        .output()
        .expect("run carrel up");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("the prefix length must be from 8 to 30"), "{stderr}");
    up.stop();
}

#[test]
fn hand_written_endpoints_reach_the_host_through_their_mirrored_slices() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let kubeconfig = create(&up, "team-a", &[]);
    let file = up.home.path().join("external.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: db\nspec:\n  ports:\n  - name: pg\n    \
         port: 5432\n---\napiVersion: v1\nkind: Endpoints\nmetadata:\n  name: db\nsubsets:\n- \
         addresses:\n  - ip: 203.0.113.5\n  ports:\n  - name: pg\n    port: 5432\n",
    )
    .expect("write manifest");
    ok(up.kubectl(&kubeconfig, &["apply", "-f", &file.to_string_lossy()]));
    // Mirrored in the tenant, as kube-controller-manager does.
    let within = Duration::from_secs(30);
    eventually("the mirrored slice", within, || {
        let out = ok(up.kubectl(
            &kubeconfig,
            &["get", "endpointslices", "-l", "kubernetes.io/service-name=db", "-o", "json"],
        ));
        let list: Value = serde_json::from_str(&out).expect("json");
        let managed =
            &list["items"][0]["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"];
        let address = &list["items"][0]["endpoints"][0]["addresses"][0];
        (managed == "endpointslicemirroring-controller.k8s.io" && address == "203.0.113.5", list)
    });
    // On the host: the Service selecting nothing, and the slice for it.
    let host = up.host_kubeconfig();
    let slice = eventually("the host slice", within, || {
        let out = up.kubectl(
            &host,
            &[
                "get",
                "endpointslices",
                "-n",
                "carrel-team-a",
                "-l",
                "kubernetes.io/service-name=db-x-default",
                "-o",
                "json",
            ],
        );
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let address = list["items"][0]["endpoints"][0]["addresses"][0].clone();
        (address == "203.0.113.5", list)
    });
    assert_eq!(slice["items"][0]["ports"][0]["port"], 5432);
    let selector = ok(up.kubectl(
        &host,
        &[
            "get",
            "service",
            "db-x-default",
            "-n",
            "carrel-team-a",
            "-o",
            "jsonpath={.spec.selector}",
        ],
    ));
    assert_eq!(selector, "");
    up.stop();
}
