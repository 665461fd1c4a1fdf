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
    use carrel_apiserver::local_client::{grants, least_privilege_problems};

    use super::*;

    #[test]
    fn every_rule_is_a_policy_rule_without_wildcards_or_overlaps() {
        assert_eq!(least_privilege_problems(&rules()), Vec::<String>::new());
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
            assert!(grants(&rules, group, resource, verb), "{verb} {group}/{resource}");
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
            assert!(!grants(&rules, group, resource, verb), "{verb} {group}/{resource}");
        }
    }
}
