//! What the syncer does on the host cluster, as RBAC rules: the least a host identity must be
//! granted for the syncer to run.
//!
//! [`rules`] names every resource and subresource the syncer reads or writes through its host
//! client, with the verbs it uses on each: a watcher or reflector lists and watches, `get_opt`
//! gets, `create` creates, `replace` updates, a merge or strategic patch patches, and `delete`
//! deletes. The functions of other crates it calls with the host client (`carrel_gpu::leases`)
//! are counted. What the syncer does in its tenant's API (binding and status of tenant pods,
//! tenant Events, service-account tokens, virtual nodes, class mirrors) goes through its tenant
//! client and needs no host rule.
//!
//! The rules are meant for a ClusterRole: the host side shared by a process's syncers
//! ([`crate::HostWatch`]) watches every namespace, nodes and classes are cluster-scoped, GPU
//! placement lists the pods of a node in every namespace, and the claim Leases are in
//! [`carrel_gpu::CLAIM_NAMESPACE`].

use serde_json::{json, Value};

/// The syncer's host rules, as Kubernetes PolicyRules (`rbac.authorization.k8s.io/v1`).
pub fn rules() -> Vec<Value> {
    vec![
        // Host pods. pods/mod.rs::host_pod (get), create_host_pod (create; get on a conflict),
        // relabel_host_pod (patch), delete_host_pod (delete); host_watch/mod.rs::start (list,
        // watch in every namespace); taken_up.rs::watch (list, watch in the host namespace);
        // placement.rs::pods_on (list of a node's pods in every namespace).
        json!({"apiGroups": [""], "resources": ["pods"],
               "verbs": ["get", "list", "watch", "create", "patch", "delete"]}),
        // pods/mod.rs::add_ephemeral_containers: `kubectl debug`'s containers, by strategic merge
        // patch of the host pod's `ephemeralcontainers`.
        json!({"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch"]}),
        // Copies, token Secrets and host Services. copies.rs::put_host (create; get and update
        // on a conflict), also for tokens.rs::write_token and ingresses.rs::keep_ingress's TLS
        // Secrets; copies.rs::drop_copy_if_gone (delete); tokens.rs::tend_tokens (delete);
        // services.rs::keep_service (create; get on a conflict), services.rs::set_back (update);
        // passes.rs::delete_host_object (delete); host_watch/mod.rs::start (list, watch).
        json!({"apiGroups": [""], "resources": ["configmaps", "secrets", "services"],
               "verbs": ["get", "list", "watch", "create", "update", "delete"]}),
        // Host claims. claims.rs::host_claim (get), carry_claim (create; get on a conflict),
        // delete_host_claim (delete); host_watch/mod.rs::start (list, watch).
        json!({"apiGroups": [""], "resources": ["persistentvolumeclaims"],
               "verbs": ["get", "list", "watch", "create", "delete"]}),
        // virtual_nodes.rs::ensure_virtual_node (get); placement.rs::fleet_and_nodes (list);
        // host_watch/mod.rs::watch_nodes (list, watch).
        json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}),
        // host_watch/mod.rs::start: Events about host pods, which events_up.rs::event_up copies
        // up to the tenant (written there with the tenant client).
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]}),
        // endpoint_slices.rs::keep_endpoint_slices, through passes.rs::keep_host (create; get on
        // a conflict; update) and passes.rs::delete_orphans (delete); host_watch/mod.rs::start
        // (list, watch).
        json!({"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
               "verbs": ["get", "list", "watch", "create", "update", "delete"]}),
        // network_policies.rs::keep_network_policy and ingresses.rs::keep_ingress, through
        // passes.rs::keep_host (create; get on a conflict; update); passes.rs::delete_orphans
        // (delete); host_watch/mod.rs::start (list, watch).
        json!({"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"],
               "verbs": ["get", "list", "watch", "create", "update", "delete"]}),
        // host_watch/mod.rs::watch_classes: the IngressClasses class_mirrors.rs mirrors.
        json!({"apiGroups": ["networking.k8s.io"], "resources": ["ingressclasses"],
               "verbs": ["list", "watch"]}),
        // host_watch/mod.rs::watch_classes: the StorageClasses class_mirrors.rs mirrors and
        // claims.rs::carry_claim gives host claims.
        json!({"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"],
               "verbs": ["list", "watch"]}),
        // Claim and host-name Leases in carrel_gpu::CLAIM_NAMESPACE. carrel_gpu leases.rs::list
        // (list), try_claim (create; delete of its own on a lost race), release (list, delete),
        // through placement.rs::{all_claims, claims_of, acquire, release};
        // host_watch/mod.rs::watch_claims and watch_host_releases (list, watch);
        // hostnames.rs::held_hosts (list), claim_host (get, create), release_host (delete).
        json!({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
               "verbs": ["get", "list", "watch", "create", "delete"]}),
    ]
}

/// What a process that runs syncers is granted on the host: [`rules`] and [`views_rules`].
pub fn process_rules() -> Vec<Value> {
    let mut all = rules();
    all.extend(views_rules());
    all
}

/// What the process that runs syncers does besides, with the same host client: the tenant's
/// views of its pods on the host (`kubectl logs`, `exec`, `attach`, `port-forward`, `top`,
/// served by `carrel`'s `syncers.rs`, `pod_streams.rs` and `metrics.rs`) and an idle tenant's
/// next wake time (`wakes.rs`).
pub fn views_rules() -> Vec<Value> {
    vec![
        // syncers.rs::TenantPodLogs::logs.
        json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}),
        // pod_streams.rs::TenantPodStreams::session and forward: a WebSocket GET, which
        // kube-apiserver authorizes as `create` (and, before 1.30, as `get`).
        json!({"apiGroups": [""], "resources": ["pods/attach", "pods/exec", "pods/portforward"],
               "verbs": ["get", "create"]}),
        // metrics.rs::TenantMetrics::host_metrics.
        json!({"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["list"]}),
        // wakes.rs::Wakes::stopped (`status.nextWakeTime`, a merge patch) and Wakes::start.
        json!({"apiGroups": ["carrel.dev"], "resources": ["tenants/status"], "verbs": ["patch"]}),
        json!({"apiGroups": ["carrel.dev"], "resources": ["tenants"], "verbs": ["list"]}),
    ]
}

#[cfg(test)]
mod tests {
    use carrel_apiserver::local_client::{grants, least_privilege_problems};

    use super::*;

    #[test]
    fn every_rule_is_a_policy_rule_without_wildcards_or_overlaps() {
        assert_eq!(least_privilege_problems(&rules()), Vec::<String>::new());
        assert_eq!(least_privilege_problems(&process_rules()), Vec::<String>::new());
    }

    #[test]
    fn the_syncer_may_do_what_it_does_on_the_host_and_no_more() {
        let rules = rules();
        for (group, resource, verb) in [
            ("", "pods", "create"),
            ("", "pods", "delete"),
            ("", "pods", "patch"),
            ("", "pods/ephemeralcontainers", "patch"),
            ("", "secrets", "update"),
            ("", "nodes", "get"),
            ("", "events", "watch"),
            ("networking.k8s.io", "ingresses", "create"),
            ("storage.k8s.io", "storageclasses", "list"),
            ("coordination.k8s.io", "leases", "create"),
        ] {
            assert!(grants(&rules, group, resource, verb), "{verb} {group}/{resource}");
        }
        // Writes the syncer makes only in its tenant, and writes it never makes.
        for (group, resource, verb) in [
            ("", "pods", "update"),
            ("", "pods/status", "patch"),
            ("", "pods/binding", "create"),
            ("", "serviceaccounts/token", "create"),
            ("", "events", "create"),
            ("", "nodes", "patch"),
            ("", "pods", "deletecollection"),
            ("storage.k8s.io", "storageclasses", "create"),
            ("coordination.k8s.io", "leases", "update"),
        ] {
            assert!(!grants(&rules, group, resource, verb), "{verb} {group}/{resource}");
        }
    }
}
