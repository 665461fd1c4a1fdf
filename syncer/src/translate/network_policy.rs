//! A tenant's NetworkPolicy as its host NetworkPolicy, and the isolation policy every tenant's
//! host namespace holds.
//!
//! All of a tenant's pods share one host namespace, their labels carried under Carrel's domain
//! and their tenant namespace in a label of its own ([`host_names::host_pod_labels`]). So a
//! tenant policy's selectors are rewritten the same way: a pod selector's keys as the pods'
//! labels are, confined to the policy's tenant namespace; a namespace selector becomes a
//! selector over the tenant-namespace label, which can only ever pick the tenant's own pods.
//! IP blocks, ports (named ones by name) and policy types are kept.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::core::{Selector, SelectorExt};

use super::*;

/// The label every namespace carries with its own name (kube-apiserver sets it).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Carrel's own pods on a real host, as a NetworkPolicy peer: `carrel serve`
/// ([`host_names::CARREL_POD_LABEL`] in [`host_names::CARREL_NAMESPACE`]).
fn carrel_pods() -> NetworkPolicyPeer {
    let match_labels = |key: &str, value: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
        match_expressions: None,
    };
    let (key, value) = host_names::CARREL_POD_LABEL;
    NetworkPolicyPeer {
        namespace_selector: Some(match_labels(NAMESPACE_NAME_LABEL, host_names::CARREL_NAMESPACE)),
        pod_selector: Some(match_labels(key, value)),
        ..NetworkPolicyPeer::default()
    }
}

/// The NetworkPolicy that keeps other tenants' pods away from `tenant`'s, in its host namespace
/// `host_namespace`: it selects every pod there and, for ingress, admits traffic only from pods
/// of the same namespace (the tenant's own) and from Carrel's (`carrel_pods`: the tenant's API
/// calls its webhooks). Egress is left alone.
pub fn isolation_policy(tenant: &str, host_namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(host_names::ISOLATION_POLICY.to_owned()),
            namespace: Some(host_namespace.to_owned()),
            labels: Some(host_names::host_labels(tenant)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![
                    NetworkPolicyPeer {
                        pod_selector: Some(LabelSelector::default()),
                        ..NetworkPolicyPeer::default()
                    },
                    carrel_pods(),
                ]),
                ports: None,
            }]),
            egress: None,
        }),
    }
}

/// The host NetworkPolicy of tenant `tenant`'s policy `policy`, in `host_namespace`: named by
/// [`host_names::host_name`], labelled and annotated as every host object standing for a tenant
/// object, its selectors rewritten to pick the host pods of the tenant pods the tenant's policy
/// picks. `namespaces`: the tenant's namespaces, against which a namespace selector on labels
/// other than [`NAMESPACE_NAME_LABEL`] is resolved.
///
/// What kube-apiserver would default is written out (`policyTypes`: `Ingress`, and `Egress`
/// when the policy has egress rules; a port's protocol: `TCP`), and empty lists are left out, so
/// the host policy reads back as it was written ([`network_policy_spec_shown`]).
pub fn host_network_policy(
    tenant: &str,
    host_namespace: &str,
    policy: &NetworkPolicy,
    namespaces: &[Namespace],
) -> NetworkPolicy {
    let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let uid = policy.metadata.uid.as_deref().unwrap_or_default();
    let spec = policy.spec.clone().unwrap_or_default();
    let peers = |peers: Option<Vec<NetworkPolicyPeer>>| {
        non_empty(peers).map(|peers| {
            peers.iter().map(|p| host_peer(p, namespace, namespaces)).collect::<Vec<_>>()
        })
    };
    let ingress = non_empty(spec.ingress).map(|rules| {
        rules
            .into_iter()
            .map(|r| NetworkPolicyIngressRule { from: peers(r.from), ports: host_ports(r.ports) })
            .collect::<Vec<_>>()
    });
    let egress = non_empty(spec.egress).map(|rules| {
        rules
            .into_iter()
            .map(|r| NetworkPolicyEgressRule { to: peers(r.to), ports: host_ports(r.ports) })
            .collect::<Vec<_>>()
    });
    let policy_types = non_empty(spec.policy_types).unwrap_or_else(|| {
        let mut types = vec!["Ingress".to_owned()];
        if egress.is_some() {
            types.push("Egress".to_owned());
        }
        types
    });
    // The tenant's API and DNS are Carrel's pods on a real host, which no rule of the tenant's
    // can name (its `kube-system/kube-dns` has no pods): a policy that limits egress lets its
    // pods reach them, as a cluster's policies are written to let pods reach kube-dns and the
    // API server.
    let egress = match policy_types.iter().any(|t| t == "Egress") {
        true => {
            let mut rules = egress.unwrap_or_default();
            rules.push(NetworkPolicyEgressRule { to: Some(vec![carrel_pods()]), ports: None });
            Some(rules)
        }
        false => egress,
    };
    let pod_selector = in_namespace(host_pods(spec.pod_selector.as_ref()), namespace);
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(host_names::host_name(namespace, name)),
            namespace: Some(host_namespace.to_owned()),
            labels: Some(host_names::host_labels(tenant)),
            annotations: Some(host_names::host_annotations(namespace, name, uid)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pod_selector),
            policy_types: Some(policy_types),
            ingress,
            egress,
        }),
    }
}

/// A policy spec as the host reads it back: empty lists and maps left out, as kube-apiserver
/// leaves them out. Two specs that are the same policy compare equal in this form.
pub fn network_policy_spec_shown(spec: Option<&NetworkPolicySpec>) -> NetworkPolicySpec {
    let spec = spec.cloned().unwrap_or_default();
    let selector = |s: Option<LabelSelector>| {
        s.map(|s| LabelSelector {
            match_labels: s.match_labels.filter(|m| !m.is_empty()),
            match_expressions: non_empty(s.match_expressions),
        })
    };
    let peers = |peers: Option<Vec<NetworkPolicyPeer>>| {
        non_empty(peers).map(|peers| {
            peers
                .into_iter()
                .map(|p| NetworkPolicyPeer {
                    ip_block: p.ip_block.map(|mut b| {
                        b.except = non_empty(b.except);
                        b
                    }),
                    namespace_selector: selector(p.namespace_selector),
                    pod_selector: selector(p.pod_selector),
                })
                .collect::<Vec<_>>()
        })
    };
    NetworkPolicySpec {
        pod_selector: Some(selector(spec.pod_selector).unwrap_or_default()),
        policy_types: non_empty(spec.policy_types),
        ingress: non_empty(spec.ingress).map(|rules| {
            rules
                .into_iter()
                .map(|r| NetworkPolicyIngressRule {
                    from: peers(r.from),
                    ports: non_empty(r.ports),
                })
                .collect()
        }),
        egress: non_empty(spec.egress).map(|rules| {
            rules
                .into_iter()
                .map(|r| NetworkPolicyEgressRule { to: peers(r.to), ports: non_empty(r.ports) })
                .collect()
        }),
    }
}

fn non_empty<T>(list: Option<Vec<T>>) -> Option<Vec<T>> {
    list.filter(|l| !l.is_empty())
}

/// The ports kept, each with its protocol written out.
fn host_ports(ports: Option<Vec<NetworkPolicyPort>>) -> Option<Vec<NetworkPolicyPort>> {
    non_empty(ports).map(|ports| {
        ports
            .into_iter()
            .map(|mut p| {
                p.protocol.get_or_insert_with(|| "TCP".to_owned());
                p
            })
            .collect()
    })
}

/// A peer of a policy in tenant namespace `namespace`, as a peer on the host.
fn host_peer(
    peer: &NetworkPolicyPeer,
    namespace: &str,
    namespaces: &[Namespace],
) -> NetworkPolicyPeer {
    if let Some(block) = &peer.ip_block {
        let mut block = block.clone();
        block.except = non_empty(block.except);
        return NetworkPolicyPeer { ip_block: Some(block), ..peer.clone() };
    }
    let pods = match (&peer.namespace_selector, &peer.pod_selector) {
        // Neither: not a peer kube-apiserver accepts; the host refuses it as it is.
        (None, None) => return peer.clone(),
        (None, Some(pods)) => in_namespace(host_pods(Some(pods)), namespace),
        (Some(selector), pods) => {
            let mut host = host_pods(pods.as_ref());
            let (labels, expressions) = in_namespaces(selector, namespaces);
            if !labels.is_empty() {
                host.match_labels.get_or_insert_with(BTreeMap::new).extend(labels);
            }
            if !expressions.is_empty() {
                host.match_expressions.get_or_insert_with(Vec::new).extend(expressions);
            }
            host
        }
    };
    NetworkPolicyPeer { ip_block: None, namespace_selector: None, pod_selector: Some(pods) }
}

/// A selector of tenant pods as one of their host pods: each key as the host pod carries it
/// ([`host_names::host_label_key`]), operators and values kept. No selector: every pod.
fn host_pods(selector: Option<&LabelSelector>) -> LabelSelector {
    let Some(selector) = selector else {
        return LabelSelector::default();
    };
    LabelSelector {
        match_labels: selector
            .match_labels
            .as_ref()
            .filter(|m| !m.is_empty())
            .map(|m| m.iter().map(|(k, v)| (host_names::host_label_key(k), v.clone())).collect()),
        match_expressions: selector.match_expressions.as_ref().filter(|e| !e.is_empty()).map(|e| {
            e.iter()
                .map(|r| LabelSelectorRequirement {
                    key: host_names::host_label_key(&r.key),
                    ..r.clone()
                })
                .collect()
        }),
    }
}

/// `selector`, confined to the pods of tenant namespace `namespace`.
fn in_namespace(mut selector: LabelSelector, namespace: &str) -> LabelSelector {
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(host_names::LABEL_NAMESPACE.to_owned(), namespace.to_owned());
    selector
}

/// A namespace selector as terms over the host pods' tenant-namespace label: labels to match
/// and requirements. A term on [`NAMESPACE_NAME_LABEL`] maps to that label as it is; the other
/// terms are resolved against the tenant's `namespaces`, as an `In` over the names of those
/// they select (none selected: a requirement no pod meets). An empty selector, every one of the
/// tenant's namespaces, gives no term at all.
fn in_namespaces(
    selector: &LabelSelector,
    namespaces: &[Namespace],
) -> (BTreeMap<String, String>, Vec<LabelSelectorRequirement>) {
    let mut labels = BTreeMap::new();
    let mut expressions = Vec::new();
    let mut rest = LabelSelector::default();
    for (k, v) in selector.match_labels.iter().flatten() {
        if k == NAMESPACE_NAME_LABEL {
            labels.insert(host_names::LABEL_NAMESPACE.to_owned(), v.clone());
        } else {
            rest.match_labels.get_or_insert_with(BTreeMap::new).insert(k.clone(), v.clone());
        }
    }
    for r in selector.match_expressions.iter().flatten() {
        if r.key == NAMESPACE_NAME_LABEL {
            expressions.push(LabelSelectorRequirement {
                key: host_names::LABEL_NAMESPACE.to_owned(),
                ..r.clone()
            });
        } else {
            rest.match_expressions.get_or_insert_with(Vec::new).push(r.clone());
        }
    }
    if rest != LabelSelector::default() {
        // A selector that does not parse (an unknown operator) selects no namespace.
        let names: Vec<String> = match Selector::try_from(rest) {
            Ok(selector) => namespaces
                .iter()
                .filter(|n| {
                    selector.matches(n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            Err(_) => Vec::new(),
        };
        let key = host_names::LABEL_NAMESPACE.to_owned();
        expressions.push(if names.is_empty() {
            // `In` needs values: every host pod has the label, so this selects none.
            LabelSelectorRequirement { key, operator: "DoesNotExist".to_owned(), values: None }
        } else {
            LabelSelectorRequirement { key, operator: "In".to_owned(), values: Some(names) }
        });
    }
    (labels, expressions)
}
