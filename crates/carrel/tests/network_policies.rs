//! Tenants are kept apart on the host network: under `carrel up`, each tenant's host namespace
//! holds the isolation policy, and a NetworkPolicy a tenant creates with kubectl appears on the
//! host translated (in that tenant's host namespace only) and goes with its delete. The
//! simulated host does not enforce NetworkPolicies: the host objects are what is checked.

mod common;

use std::path::Path;
use std::time::Duration;

use carrel_e2e::ok;
use common::{create, eventually, Up};

/// Host NetworkPolicy `name` in `namespace` as JSON, if it exists.
fn host_policy(up: &Up, namespace: &str, name: &str) -> Option<serde_json::Value> {
    let out = up.kubectl(
        &up.host_kubeconfig(),
        &["get", "networkpolicy", name, "-n", namespace, "-o", "json"],
    );
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("json"))
}

fn apply(up: &Up, kubeconfig: &Path, yaml: &str) {
    let file = up.home.path().join("policy.yaml");
    std::fs::write(&file, yaml).expect("write manifest");
    ok(up.kubectl(kubeconfig, &["apply", "-f", &file.to_string_lossy()]));
}

#[test]
fn each_tenant_is_isolated_and_its_own_policies_reach_the_host() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start(data.path());
    let a = create(&up, "team-a", &[]);
    create(&up, "team-b", &[]);
    let within = Duration::from_secs(30);
    for tenant in ["team-a", "team-b"] {
        let namespace = format!("carrel-{tenant}");
        let policy = eventually("the isolation policy", within, || {
            let p = host_policy(&up, &namespace, "carrel-tenant-isolation");
            (p.is_some(), p)
        })
        .expect("a policy");
        assert_eq!(policy["metadata"]["labels"]["carrel.dev/tenant"], tenant);
        assert_eq!(policy["spec"]["podSelector"], serde_json::json!({}));
        assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
        assert_eq!(policy["spec"]["ingress"][0]["from"][0], serde_json::json!({"podSelector": {}}));
    }

    apply(
        &up,
        &a,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web\n  \
         namespace: default\nspec:\n  podSelector:\n    matchLabels:\n      app: web\n  \
         ingress:\n  - from:\n    - podSelector:\n        matchLabels:\n          app: client\n    \
         ports:\n    - port: 8080\n",
    );
    let translated = eventually("the tenant's policy on the host", within, || {
        let p = host_policy(&up, "carrel-team-a", "web-x-default");
        (p.is_some(), p)
    })
    .expect("a policy");
    assert_eq!(
        translated["spec"],
        serde_json::json!({
            "podSelector": {"matchLabels": {
                "label.carrel.dev/app": "web",
                "carrel.dev/tenant-namespace": "default",
            }},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{"podSelector": {"matchLabels": {
                    "label.carrel.dev/app": "client",
                    "carrel.dev/tenant-namespace": "default",
                }}}],
                "ports": [{"port": 8080, "protocol": "TCP"}],
            }],
        })
    );
    assert_eq!(translated["metadata"]["annotations"]["carrel.dev/tenant-name"], "web");
    // In the host namespace of its tenant only.
    assert!(host_policy(&up, "carrel-team-b", "web-x-default").is_none());

    ok(up.kubectl(&a, &["delete", "networkpolicy", "web"]));
    eventually("the host policy goes with the tenant's", within, || {
        let p = host_policy(&up, "carrel-team-a", "web-x-default");
        (p.is_none(), p)
    });
    assert!(host_policy(&up, "carrel-team-a", "carrel-tenant-isolation").is_some());
}
