//! NetworkPolicy translation, table-tested: each tenant policy spec and the host spec it
//! becomes.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};

use super::*;

const NS: &str = "carrel.dev/tenant-namespace";

/// The egress rule every host policy that limits egress ends with: to Carrel's pods, the
/// tenant's API and DNS on a real host.
fn to_carrel() -> Value {
    json!({"to": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "carrel-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "carrel-apiserver"}},
    }]})
}

fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "uid": "uid-1"},
        "spec": spec,
    }))
    .expect("a NetworkPolicy")
}

fn namespace(name: &str, labels: Value) -> Namespace {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).expect("a ns")
}

fn spec(value: Value) -> NetworkPolicySpec {
    serde_json::from_value(value).expect("a NetworkPolicySpec")
}

/// The tenant's namespaces: `web` and `api` of team `a`, `db` of team `b`.
fn namespaces() -> Vec<Namespace> {
    vec![
        namespace("web", json!({"team": "a", "tier": "front"})),
        namespace("api", json!({"team": "a", "tier": "back"})),
        namespace("db", json!({"team": "b", "tier": "back"})),
        namespace("default", json!({})),
    ]
}

#[test]
fn the_host_policy_is_named_and_marked_as_the_tenants() {
    let host = host_network_policy("t", "carrel-t", &policy("web", "deny", json!({})), &[]);
    assert_eq!(host.metadata.name.as_deref(), Some("deny-x-web"));
    assert_eq!(host.metadata.name, Some(host_names::host_name("web", "deny")));
    assert_eq!(host.metadata.namespace.as_deref(), Some("carrel-t"));
    assert_eq!(host.metadata.labels, Some(host_names::host_labels("t")));
    assert_eq!(
        host.metadata.annotations,
        Some(host_names::host_annotations("web", "deny", "uid-1"))
    );
    let labels = host.metadata.labels.as_ref();
    let identity = host_names::host_annotations("web", "deny", "");
    assert!(host_names::stands_for(labels, host.metadata.annotations.as_ref(), "t", &identity));
    // A long name is shortened as every host name is.
    let long = "p".repeat(70);
    let host = host_network_policy("t", "carrel-t", &policy("web", &long, json!({})), &[]);
    assert_eq!(host.metadata.name, Some(host_names::host_name("web", &long)));
    assert!(host.metadata.name.unwrap().len() <= 63);
}

#[test]
fn each_tenant_policy_spec_has_its_host_spec() {
    let rows: Vec<(&str, Value, Value)> = vec![
        (
            "an empty pod selector: every pod of the policy's namespace; Ingress by default",
            json!({"podSelector": {}}),
            json!({"podSelector": {"matchLabels": {NS: "web"}}, "policyTypes": ["Ingress"]}),
        ),
        (
            "the policy's pod selector, keys as the host pods carry them",
            json!({
                "podSelector": {
                    "matchLabels": {"app": "web", "app.kubernetes.io/part-of": "shop"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
                },
                "policyTypes": ["Ingress"],
            }),
            json!({
                "podSelector": {
                    "matchLabels": {
                        "label.carrel.dev/app": "web",
                        "app.kubernetes.io.label.carrel.dev/part-of": "shop",
                        NS: "web",
                    },
                    "matchExpressions": [
                        {"key": "label.carrel.dev/tier", "operator": "In", "values": ["front"]},
                    ],
                },
                "policyTypes": ["Ingress"],
            }),
        ),
        (
            "a pod-selector peer: pods of the policy's own namespace",
            json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "lb"}}}]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"label.carrel.dev/role": "lb", NS: "web"}}}]}],
            }),
        ),
        (
            "a namespace selector on the namespace's name maps to the tenant-namespace label",
            json!({"podSelector": {}, "ingress": [{"from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "api"}},
                "podSelector": {"matchLabels": {"app": "client"}},
            }]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"label.carrel.dev/app": "client", NS: "api"}}}]}],
            }),
        ),
        (
            "a namespace selector on other labels: the tenant's namespaces it selects, by name",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                    {"key": NS, "operator": "In", "values": ["api", "web"]},
                ]}}]}],
            }),
        ),
        (
            "a namespace selector with expressions, on labels and on the name",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["back"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["db"]},
                {"key": "team", "operator": "Exists"},
            ]}}]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                    {"key": NS, "operator": "NotIn", "values": ["db"]},
                    {"key": NS, "operator": "In", "values": ["api", "db"]},
                ]}}]}],
            }),
        ),
        (
            "a namespace selector that selects none of the tenant's namespaces selects no pod",
            json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "In", "values": ["c"]},
            ]}}]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchExpressions": [
                    {"key": NS, "operator": "DoesNotExist"},
                ]}}]}],
            }),
        ),
        (
            "an empty namespace selector: the tenant's pods in any of its namespaces, no other",
            json!({"podSelector": {}, "ingress": [{"from": [
                {"namespaceSelector": {}},
                {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "monitor"}}},
            ]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [
                    {"podSelector": {}},
                    {"podSelector": {"matchLabels": {"label.carrel.dev/app": "monitor"}}},
                ]}],
            }),
        ),
        (
            "IP blocks and ports kept, named ports by name, the protocol written out",
            json!({
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                    "ports": [{"port": "http"}, {"port": 8000, "endPort": 8080, "protocol": "UDP"}],
                }],
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 53, "protocol": "UDP"}]}],
            }),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{
                    "from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                    "ports": [
                        {"port": "http", "protocol": "TCP"},
                        {"port": 8000, "endPort": 8080, "protocol": "UDP"},
                    ],
                }],
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 53, "protocol": "UDP"}]},
                    to_carrel(),
                ],
            }),
        ),
        (
            "policy types kept as the tenant gave them; denying all egress still reaches Carrel",
            json!({"podSelector": {}, "policyTypes": ["Egress"]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Egress"],
                "egress": [to_carrel()],
            }),
        ),
        (
            "egress rules without policy types: Ingress and Egress, as kube-apiserver defaults",
            json!({"podSelector": {}, "egress": [{"to": [{"podSelector": {}}]}]}),
            json!({
                "podSelector": {"matchLabels": {NS: "web"}},
                "policyTypes": ["Ingress", "Egress"],
                "egress": [{"to": [{"podSelector": {"matchLabels": {NS: "web"}}}]}, to_carrel()],
            }),
        ),
    ];
    for (what, tenant, want) in rows {
        let host = host_network_policy("t", "carrel-t", &policy("web", "p", tenant), &namespaces());
        assert_eq!(
            serde_json::to_value(network_policy_spec_shown(host.spec.as_ref())).unwrap(),
            serde_json::to_value(network_policy_spec_shown(Some(&spec(want)))).unwrap(),
            "{what}"
        );
        // The translation reads back as it was written.
        assert_eq!(network_policy_spec_shown(host.spec.as_ref()), host.spec.unwrap(), "{what}");
    }
}

#[test]
fn every_host_namespace_isolates_its_tenant() {
    let policy = isolation_policy("t", "carrel-t");
    assert_eq!(policy.metadata.name.as_deref(), Some("carrel-tenant-isolation"));
    assert_eq!(policy.metadata.namespace.as_deref(), Some("carrel-t"));
    assert_eq!(policy.metadata.labels, Some(host_names::host_labels("t")));
    // It stands for no tenant object.
    let labels = policy.metadata.labels.as_ref();
    assert!(host_names::stands_for(labels, None, "t", &BTreeMap::new()));
    assert_eq!(
        serde_json::to_value(policy.spec).unwrap(),
        json!({
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [
                {"podSelector": {}},
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "carrel-system"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "carrel-apiserver"}},
                },
            ]}],
        })
    );
}

#[test]
fn empty_lists_read_as_left_out() {
    let written = spec(json!({
        "podSelector": {"matchLabels": {}, "matchExpressions": []},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [], "ports": []}],
        "egress": [],
    }));
    let read_back = spec(json!({"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}));
    assert_eq!(
        network_policy_spec_shown(Some(&written)),
        network_policy_spec_shown(Some(&read_back))
    );
    let other = spec(json!({"podSelector": {}, "policyTypes": ["Egress"]}));
    assert_ne!(network_policy_spec_shown(Some(&written)), network_policy_spec_shown(Some(&other)));
}
