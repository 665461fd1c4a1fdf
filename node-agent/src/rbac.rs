//! What the node agent does on the host cluster, as RBAC rules: the least a host identity must
//! be granted for the agent to run.
//!
//! [`rules`] names every resource and subresource the agent reads or writes through its client,
//! with the verbs it uses on each: a watcher lists and watches, `get_opt` gets, a merge patch
//! patches, `create` creates and `delete` deletes. The functions of other crates it calls with
//! the client (`carrel_gpu::leases`, `carrel_events::Recorder`) are counted.
//!
//! The rules are meant for a ClusterRole: Nodes are cluster-scoped, the agent lists the pods of
//! its node in every namespace, and it writes Events in the namespaces of the pods and Leases
//! they are about. The Node rules are not limited to the agent's own Node (RBAC cannot name an
//! object after the requester).

use serde_json::{json, Value};

/// The node agent's host rules, as Kubernetes PolicyRules (`rbac.authorization.k8s.io/v1`).
pub fn rules() -> Vec<Value> {
    vec![
        // publish.rs::Publisher::publish: reads its Node (get) and merge-patches its inventory
        // annotation and labels (patch).
        json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}),
        // publish.rs::Publisher::publish: the `nvidia.com/mig-*` capacity and allocatable, by
        // merge patch of the Node's status.
        json!({"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}),
        // enforce.rs::Enforcer::node_pods (list of the node's pods in every namespace),
        // Enforcer::pod_uid (get of a claim's holder), Enforcer::act (delete of a pod using a
        // device it does not hold, with --evict-violators).
        json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}),
        // carrel_events lib.rs::Recorder::record (create, and patch of a repeat's count), from
        // claims.rs::Reconciler::failed and enforce.rs::Enforcer::act.
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}),
        // The node's claim Leases in carrel_gpu::CLAIM_NAMESPACE: lib.rs::node_loop (list,
        // watch); claims.rs::Reconciler::annotate, through carrel_gpu
        // leases.rs::annotate_instance (merge patch of the MIG device's UUID).
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["list", "watch", "patch"]}),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::rbac::v1::PolicyRule;

    use super::*;

    /// The verbs of Kubernetes' resource requests.
    const VERBS: [&str; 8] =
        ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];

    fn strings<'a>(rule: &'a Value, field: &str) -> Vec<&'a str> {
        rule[field].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
    }

    /// Whether `rules` let `verb` be done on `resource` (a subresource as `nodes/status`) of
    /// `group`.
    fn allows(rules: &[Value], group: &str, resource: &str, verb: &str) -> bool {
        rules.iter().any(|r| {
            strings(r, "apiGroups").contains(&group)
                && strings(r, "resources").contains(&resource)
                && strings(r, "verbs").contains(&verb)
        })
    }

    #[test]
    fn every_rule_is_a_policy_rule_without_wildcards_or_overlaps() {
        let rules = rules();
        let mut seen = BTreeSet::new();
        for rule in &rules {
            let typed: PolicyRule = serde_json::from_value(rule.clone()).expect("a PolicyRule");
            assert!(typed.api_groups.as_ref().is_some_and(|g| !g.is_empty()), "{rule}");
            assert!(typed.resources.as_ref().is_some_and(|r| !r.is_empty()), "{rule}");
            assert!(typed.resource_names.is_none() && typed.non_resource_urls.is_none());
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(strings(rule, field).iter().all(|s| !s.contains('*')), "{rule}");
            }
            for verb in &typed.verbs {
                assert!(VERBS.contains(&verb.as_str()), "{verb} in {rule}");
            }
            for group in strings(rule, "apiGroups") {
                for resource in strings(rule, "resources") {
                    assert!(seen.insert((group, resource)), "{group}/{resource} twice");
                }
            }
        }
    }

    #[test]
    fn the_agent_may_do_what_it_does_on_the_host_and_no_more() {
        let rules = rules();
        for (group, resource, verb) in [
            ("coordination.k8s.io", "leases", "patch"),
            ("coordination.k8s.io", "leases", "watch"),
            ("", "nodes", "patch"),
            ("", "nodes/status", "patch"),
            ("", "pods", "list"),
            ("", "pods", "delete"),
            ("", "events", "create"),
        ] {
            assert!(allows(&rules, group, resource, verb), "{verb} {group}/{resource}");
        }
        // The agent annotates claims but never makes, replaces or deletes them, and deletes pods
        // rather than evicting them.
        for (group, resource, verb) in [
            ("coordination.k8s.io", "leases", "update"),
            ("coordination.k8s.io", "leases", "create"),
            ("coordination.k8s.io", "leases", "delete"),
            ("", "nodes", "update"),
            ("", "nodes", "list"),
            ("", "pods", "create"),
            ("", "pods/eviction", "create"),
            ("", "events", "update"),
        ] {
            assert!(!allows(&rules, group, resource, verb), "{verb} {group}/{resource}");
        }
    }
}
