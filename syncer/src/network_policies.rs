//! The tenant's NetworkPolicies on the host. The tenant's host namespace holds the isolation
//! policy ([`translate::isolation_policy`]: ingress only from the tenant's own pods and its DNS),
//! and a host policy for each of the tenant's ([`translate::host_network_policy`]), so a tenant
//! can lock its own namespaces down further. Both are kept in line: made again when deleted, set
//! back when changed, and a host policy is deleted with its tenant policy (also when it went
//! while the syncer was away). A host object under one of these names that is not the syncer's
//! own for it is left alone.
//!
//! One task per syncer watches the tenant's NetworkPolicies and Namespaces (a namespace
//! selector is resolved against the namespaces' labels) and is sent the changes to its host
//! policies; each change, or burst of changes, makes one pass over all of them.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::NetworkPolicy;

use crate::passes::{carries_all, ready, reflect};
use crate::*;

/// Whether host policy `current` is `wanted` as the syncer writes it: its spec, and the labels
/// and annotations the syncer sets.
fn in_line(current: &NetworkPolicy, wanted: &NetworkPolicy) -> bool {
    translate::network_policy_spec_shown(current.spec.as_ref())
        == translate::network_policy_spec_shown(wanted.spec.as_ref())
        && carries_all(&current.metadata, &wanted.metadata)
}

impl Syncer {
    /// Keep the tenant's host policies in line as the tenant's policies and namespaces and the
    /// host policies change. `host`: the tenant's host policies, as the shared host side shows
    /// them.
    pub(crate) async fn sync_network_policies(self, host: Subscription<NetworkPolicy>) {
        let host_policies = host.store();
        let (policies, policy_changes) = reflect::<NetworkPolicy>(&self.inner.tenant_client);
        let (namespaces, namespace_changes) = reflect::<Namespace>(&self.inner.tenant_client);
        let tenant = futures::stream::select(policy_changes, namespace_changes);
        let ready = || ready(&policies) && ready(&namespaces) && ready(&host_policies);
        let pass = || self.keep_network_policies(&policies, &namespaces, &host_policies);
        self.passes("NetworkPolicies and Namespaces", tenant, host, ready, pass).await;
    }

    /// One pass: the isolation policy and a host policy for each tenant policy made or set
    /// back; host policies whose tenant policy is gone deleted. Every policy is tried; the first
    /// error is returned.
    async fn keep_network_policies(
        &self,
        policies: &Store<NetworkPolicy>,
        namespaces: &Store<Namespace>,
        host: &Store<NetworkPolicy>,
    ) -> Result<(), SyncError> {
        let tenant = &self.inner.tenant;
        let host_namespace = &self.inner.host_namespace;
        let namespaces: Vec<Namespace> = namespaces.state().iter().map(|n| (**n).clone()).collect();
        let mut wanted = vec![translate::isolation_policy(tenant, host_namespace)];
        let mut tenant_keys = HashSet::new();
        for policy in policies.state() {
            if let (Some(ns), Some(name)) = (&policy.metadata.namespace, &policy.metadata.name) {
                tenant_keys.insert((ns.clone(), name.clone()));
            }
            wanted.push(translate::host_network_policy(
                tenant,
                host_namespace,
                &policy,
                &namespaces,
            ));
        }
        let mut outcome = Ok(());
        for policy in &wanted {
            if let Err(e) = self.keep_network_policy(host, policy).await {
                outcome = outcome.and(Err(e));
            }
        }
        outcome.and(self.delete_orphans(host, &tenant_keys).await)
    }

    /// Make host policy `wanted`, or set the one under its name back to it. One that is not
    /// the syncer's own for it is left alone ([`SyncError::Taken`], logged).
    async fn keep_network_policy(
        &self,
        host: &Store<NetworkPolicy>,
        wanted: &NetworkPolicy,
    ) -> Result<(), SyncError> {
        match self.keep_host(host, wanted, in_line).await {
            Ok(_) => Ok(()),
            Err(taken @ SyncError::Taken { .. }) => {
                tracing::warn!(tenant = %self.inner.tenant, "{taken}");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(spec: Value, labels: Value, annotations: Value) -> NetworkPolicy {
        serde_json::from_value(json!({
            "metadata": {
                "name": "p-x-web", "namespace": "carrel-t",
                "labels": labels, "annotations": annotations,
            },
            "spec": spec,
        }))
        .expect("a NetworkPolicy")
    }

    #[test]
    fn a_host_policy_is_in_line_when_what_the_syncer_writes_is_there() {
        let tenant: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "web", "uid": "u1"},
            "spec": {"podSelector": {}, "ingress": [{"from": []}]},
        }))
        .expect("a NetworkPolicy");
        let wanted = translate::host_network_policy("t", "carrel-t", &tenant, &[]);
        let labels = json!(host_names::host_labels("t"));
        let annotations = json!(host_names::host_annotations("web", "p", "u1"));
        let spec = serde_json::to_value(&wanted.spec).unwrap();
        assert!(in_line(&wanted, &wanted));
        // Read back without the empty lists, and with labels someone else added: in line.
        let mut more = host_names::host_labels("t");
        more.insert("other".into(), "x".into());
        let read_back = host(spec.clone(), json!(more), annotations.clone());
        assert!(in_line(&read_back, &wanted));
        assert_eq!(
            host_names::stood_for(&read_back.metadata),
            Some(("web".to_owned(), "p".to_owned()))
        );
        // A changed spec, a label or an annotation taken away: set back.
        let mut changed = spec.clone();
        changed["policyTypes"] = json!(["Egress"]);
        assert!(!in_line(&host(changed, labels.clone(), annotations.clone()), &wanted));
        assert!(!in_line(&host(spec.clone(), json!({}), annotations.clone()), &wanted));
        let made_again = json!(host_names::host_annotations("web", "p", "u2"));
        assert!(!in_line(&host(spec.clone(), labels.clone(), made_again), &wanted));
        // The isolation policy stands for no tenant policy, nor does one under another name.
        assert_eq!(
            host_names::stood_for(&translate::isolation_policy("t", "carrel-t").metadata),
            None
        );
        let elsewhere = json!(host_names::host_annotations("api", "p", "u1"));
        assert_eq!(host_names::stood_for(&host(spec, labels, elsewhere).metadata), None);
    }
}
