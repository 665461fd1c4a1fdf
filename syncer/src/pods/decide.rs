//! What to do for one tenant pod: a pure function ([`decide`]) of what both clusters hold for it
//! (the tenant pod, the host pod under its derived name) and of the devices claimed for it
//! ([`devices_ready`]). The reconcile in `pods` reads the facts and carries the step out.

use std::collections::BTreeMap;

use carrel_gpu::Claim;
use k8s_openapi::api::core::v1::Pod;

use crate::{host_names, translate};

/// What both clusters hold for tenant pod `namespace/name` of `tenant`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts<'a> {
    /// The tenant.
    pub(crate) tenant: &'a str,
    /// The tenant pod's namespace.
    pub(crate) namespace: &'a str,
    /// The tenant pod's name.
    pub(crate) name: &'a str,
    /// The tenant pod, if it exists.
    pub(crate) tenant_pod: Option<&'a Pod>,
    /// The host object under the pod's host name, if one exists (it may be someone else's).
    pub(crate) host_pod: Option<&'a Pod>,
}

/// What the reconcile of one tenant pod does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The host pod under the pod's host name records another owner: it is neither adopted nor
    /// deleted; the tenant pod (if any) is told and looked at again later.
    HostNameTaken,
    /// The tenant pod is gone: delete its host pod and release its claims.
    DeleteHostPod,
    /// No host pod is wanted (the tenant pod is gone or finished) and none exists: release any
    /// claims left.
    Release,
    /// The tenant pod fails with `why`; its claims are released first when `release`.
    Fail {
        /// The message.
        why: String,
        /// Whether claims may be held and must be released.
        release: bool,
    },
    /// Make the host pod: copy what the pod references, claim its devices, create it.
    CreateHostPod,
    /// The host pod was made for an earlier tenant pod of the same name: delete it, release its
    /// claims and look again shortly.
    ReplaceHostPod,
    /// Copy the host pod's status up; release the claims when the host pod has finished; give
    /// the host pod the tenant pod's labels when they changed.
    CopyStatusUp {
        /// Whether the host pod has finished.
        release: bool,
        /// Whether the host pod's labels differ from those the tenant pod's call for
        /// ([`host_names::host_pod_labels`]): the tenant's NetworkPolicies select by them.
        relabel: bool,
        /// Whether the tenant pod has ephemeral containers (`kubectl debug`) that the host pod
        /// has not been given yet.
        debug: bool,
    },
}

/// Why a tenant pod whose host pod was scheduled has none any more.
pub(crate) const HOST_POD_DELETED: &str = "the pod's host pod was deleted";

/// The step for the pod `facts` describe.
pub(crate) fn decide(facts: &Facts<'_>) -> Step {
    let theirs = facts.host_pod.is_some_and(|h| !stands_for(h, facts));
    match (facts.tenant_pod, facts.host_pod) {
        (_, Some(_)) if theirs => Step::HostNameTaken,
        (None, Some(_)) => Step::DeleteHostPod,
        (None, None) => Step::Release,
        (Some(tenant), None) => {
            if finished(tenant) {
                return Step::Release;
            }
            if scheduled(tenant) {
                // Its host pod was scheduled (the tenant saw it) and is gone: deleted under the
                // tenant. (One deleted before it was scheduled is simply made again.)
                return Step::Fail { why: HOST_POD_DELETED.to_owned(), release: true };
            }
            let unsynced = unsynced_references(tenant);
            if !unsynced.is_empty() {
                // The tenant API refuses these; a pod stored before that rule gets no host pod
                // that would name the host's objects.
                let why = format!(
                    "{}: not carried to the host cluster, which would resolve them in its own \
                     namespace",
                    unsynced.join(", ")
                );
                return Step::Fail { why, release: false };
            }
            Step::CreateHostPod
        }
        (Some(tenant), Some(host)) => {
            if tenant.metadata.uid.as_deref() != recorded_uid(host) {
                // Left from an earlier pod of the same name.
                return Step::ReplaceHostPod;
            }
            let wanted = host_names::host_pod_labels(
                facts.tenant,
                facts.namespace,
                tenant.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()),
            );
            let relabel = host.metadata.labels.as_ref() != Some(&wanted);
            Step::CopyStatusUp { release: finished(host), relabel, debug: debugged(tenant, host) }
        }
    }
}

/// Whether tenant pod `tenant` has an ephemeral container that host pod `host` lacks (by name;
/// once given, an ephemeral container cannot change).
fn debugged(tenant: &Pod, host: &Pod) -> bool {
    let names = |pod: &Pod| -> Vec<String> {
        let list = pod.spec.as_ref().and_then(|s| s.ephemeral_containers.as_ref());
        list.into_iter().flatten().map(|c| c.name.clone()).collect()
    };
    let present = names(host);
    names(tenant).iter().any(|n| !present.contains(n))
}

/// Whether the host pod can be made with the devices `held` for it: each has its MIG device
/// (the node agent writes the instance UUID on the claim once the instance exists).
pub(crate) fn devices_ready(held: &[Claim]) -> bool {
    held.iter().all(|c| !c.instance_uuid.is_empty())
}

/// Whether host pod `host` was written by the syncer of `facts.tenant` for the tenant pod
/// ([`host_names::stands_for`]).
pub(crate) fn stands_for(host: &Pod, facts: &Facts<'_>) -> bool {
    let identity = host_names::host_annotations(facts.namespace, facts.name, "");
    host_names::stands_for(
        host.metadata.labels.as_ref(),
        host.metadata.annotations.as_ref(),
        facts.tenant,
        &identity,
    )
}

/// The tenant pod UID a host pod records.
fn recorded_uid(host: &Pod) -> Option<&str> {
    host.metadata
        .annotations
        .as_ref()
        .and_then(|a: &BTreeMap<String, String>| a.get(host_names::ANNOTATION_UID))
        .map(String::as_str)
}

/// Whether the pod's status says it was scheduled: the syncer copied that from its host pod.
pub(crate) fn scheduled(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True")
}

/// Whether a pod has finished (Succeeded or Failed).
pub(crate) fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// The references of the pod the syncer cannot carry ([`translate::unsynced_references`]).
fn unsynced_references(pod: &Pod) -> Vec<String> {
    serde_json::to_value(pod).map(|v| translate::unsynced_references(&v)).unwrap_or_default()
}
