//! GPU placement: the fleet read from the node agents' inventories and the claim Leases, the
//! allocator's choice among the nodes a pod may run on, and the claim taken through
//! `carrel_gpu::leases`, which owns the claim Leases.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node as HostNode;
use kube::api::ListParams;
use kube::Api;

use carrel_gpu::fit::{self, Misfit, NodeFacts, PodNeeds};
use carrel_gpu::leases::{self, Selection};
use carrel_gpu::{
    allocate, apply_claims, AllocError, Claim, DeviceSource, Fleet, Holder, Mode, Quotas, Request,
};

use crate::SyncError;

/// Annotation on a GPU node: its inventory, written by its node agent.
pub const INVENTORY_ANNOTATION: &str = "gpu.carrel.dev/inventory";
/// Label on GPU nodes.
pub const GPU_NODE_LABEL: &str = "gpu.carrel.dev/node";

/// Why a pod's devices could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimFailure {
    /// The allocator refused.
    #[error("{0}")]
    Allocation(#[from] AllocError),
    /// No GPU node may take the pod (kube-scheduler's message).
    #[error("{0}")]
    NoNode(String),
    /// Another claimer kept winning the same devices.
    #[error("the devices chosen kept being claimed by others; retrying")]
    Contended,
    /// Talking to the host failed.
    #[error(transparent)]
    Host(#[from] SyncError),
}

/// The fleet as the host records it: every GPU node's inventory, with the holders of every claim.
pub async fn fleet(host: &kube::Client) -> Result<(Fleet, Vec<Claim>), SyncError> {
    let (fleet, claims, _) = fleet_and_nodes(host).await?;
    Ok((fleet, claims))
}

/// [`fleet`], with what the scheduling filters need to know of each of its nodes, as the host
/// lists them now.
async fn fleet_and_nodes(
    host: &kube::Client,
) -> Result<(Fleet, Vec<Claim>, Vec<NodeFacts>), SyncError> {
    let nodes: Api<HostNode> = Api::all(host.clone());
    let list = nodes.list(&ListParams::default().labels(&format!("{GPU_NODE_LABEL}=true"))).await?;
    fleet_of(list.items.iter(), all_claims(host).await?)
}

/// The fleet of the GPU nodes among `nodes` (those labelled [`GPU_NODE_LABEL`] with an
/// inventory), with `claims` applied, and what the scheduling filters need to know of each node.
fn fleet_of<'a>(
    nodes: impl IntoIterator<Item = &'a HostNode>,
    claims: Vec<Claim>,
) -> Result<(Fleet, Vec<Claim>, Vec<NodeFacts>), SyncError> {
    let mut fleet = Fleet::default();
    let mut facts = Vec::new();
    for node in nodes {
        let labels = node.metadata.labels.as_ref();
        if labels.and_then(|l| l.get(GPU_NODE_LABEL)).map(String::as_str) != Some("true") {
            continue;
        }
        let Some(inventory) =
            node.metadata.annotations.as_ref().and_then(|a| a.get(INVENTORY_ANNOTATION))
        else {
            continue;
        };
        match serde_json::from_str::<carrel_gpu::Node>(inventory) {
            Ok(n) => {
                let json = serde_json::to_value(node)
                    .map_err(|source| SyncError::Decode { kind: "Node", source })?;
                let mut f = NodeFacts::of_node(&json);
                // The allocator knows the node by the name its inventory gives.
                f.name.clone_from(&n.name);
                facts.push(f);
                fleet.nodes.push(n);
            }
            Err(e) => tracing::warn!(
                node = node.metadata.name.as_deref().unwrap_or(""),
                error = %e,
                "unreadable GPU inventory; the node is left out"
            ),
        }
    }
    fleet.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    apply_claims(&mut fleet, claims.iter());
    Ok((fleet, claims, facts))
}

/// What the syncer's caches hold of the host: its nodes and the claim Leases.
#[derive(Debug, Default)]
pub struct Cached {
    /// The host's nodes.
    pub nodes: Vec<Arc<HostNode>>,
    /// Every claim Lease.
    pub leases: Vec<Arc<Lease>>,
}

/// The GPU nodes of `nodes` that a pod with `needs` may run on, and why each of the others may
/// not.
pub fn allowed_nodes(needs: &PodNeeds, nodes: &[NodeFacts]) -> (BTreeSet<String>, Vec<Misfit>) {
    let mut allowed = BTreeSet::new();
    let mut misfits = Vec::new();
    for node in nodes {
        match needs.check(node) {
            Ok(()) => {
                allowed.insert(node.name.clone());
            }
            Err(m) => misfits.push(m),
        }
    }
    (allowed, misfits)
}

/// The pods on host node `node` that have not finished.
async fn pods_on(host: &kube::Client, node: &str) -> Result<usize, SyncError> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(host.clone());
    let list = pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .count())
}

/// Every claim, once each (every Lease of a claim carries all of it).
pub async fn all_claims(host: &kube::Client) -> Result<Vec<Claim>, SyncError> {
    Ok(leases::list(host, Selection::All).await?)
}

/// The claims of one host pod.
pub async fn claims_of(
    host: &kube::Client,
    tenant: &str,
    host_pod: &str,
) -> Result<Vec<Claim>, SyncError> {
    let mut claims = leases::list(host, Selection::HostPod { tenant, host_pod }).await?;
    claims.sort_by(|a, b| {
        (&a.node, &a.gpu_uuid, a.placement.start).cmp(&(&b.node, &b.gpu_uuid, b.placement.start))
    });
    Ok(claims)
}

/// Delete every Lease of the host pod's claims.
pub async fn release(
    host: &kube::Client,
    tenant: &str,
    host_pod: &str,
) -> Result<usize, SyncError> {
    Ok(leases::release(host, tenant, host_pod).await?)
}

/// One pod's GPU request: profile (canonical) → count; `nvidia.com/gpu` already mapped to a `7g`
/// profile.
pub type PodRequest = BTreeMap<String, u32>;

/// Claim devices for every entry of `request`, all on one node among those a pod with `needs`
/// may run on (`cordoned`: nodes it may not, cordoned by its tenant): the first node (in name
/// order) where the allocator places them all. Claims this
/// host pod already has are returned as they are. Quota usage counts the tenant's devices on
/// every node.
#[allow(clippy::too_many_arguments)]
pub async fn acquire(
    host: &kube::Client,
    mut cached: Option<Cached>,
    quota: &BTreeMap<String, i64>,
    needs: &PodNeeds,
    cordoned: &BTreeSet<String>,
    holder: &Holder,
    host_namespace: &str,
    host_pod: &str,
    request: &PodRequest,
) -> Result<Vec<Claim>, ClaimFailure> {
    let existing = claims_of(host, &holder.tenant, host_pod).await?;
    if !existing.is_empty() {
        return Ok(existing);
    }
    let mut quotas = Quotas::new();
    for (profile, n) in quota {
        let n = u32::try_from(*n).unwrap_or(u32::MAX);
        if quotas.set(&holder.tenant, profile, n).is_err() {
            tracing::warn!(%profile, "quota for an unknown profile ignored");
        }
    }
    let attempts = 8 + usize::from(cached.is_some());
    for _attempt in 0..attempts {
        let from_cache = cached.is_some();
        let (fleet, _, mut nodes) = match cached.take() {
            Some(c) => fleet_of(
                c.nodes.iter().map(AsRef::as_ref),
                leases::claims_in(c.leases.iter().map(AsRef::as_ref)),
            )?,
            None => fleet_and_nodes(host).await?,
        };
        for node in nodes.iter_mut().filter(|n| cordoned.contains(&n.name)) {
            node.unschedulable = true;
        }
        let planned = plan_with_room(
            host,
            &fleet,
            &nodes,
            needs,
            &quotas,
            holder,
            host_namespace,
            host_pod,
            request,
        )
        .await;
        let plan = match planned {
            Ok(plan) => plan,
            Err(ClaimFailure::Host(e)) => return Err(ClaimFailure::Host(e)),
            Err(_) if from_cache => continue,
            Err(e) => return Err(e),
        };
        let mut won: Vec<Claim> = Vec::new();
        let mut lost = false;
        for claim in plan {
            if leases::try_claim(host, &claim).await.map_err(SyncError::from)? {
                won.push(claim);
            } else {
                lost = true;
                break;
            }
        }
        if !lost {
            return Ok(won);
        }
        release(host, &holder.tenant, host_pod).await?;
    }
    Err(ClaimFailure::Contended)
}

/// The allocator's [`plan`] among the GPU nodes a pod with `needs` may run on, on a node with
/// room for one more pod. Only the node the plan picks is asked how many pods it runs; a full
/// one is left out and the plan made again. When no node is left, kube-scheduler's message.
#[allow(clippy::too_many_arguments)]
async fn plan_with_room(
    host: &kube::Client,
    fleet: &Fleet,
    nodes: &[NodeFacts],
    needs: &PodNeeds,
    quotas: &Quotas,
    holder: &Holder,
    host_namespace: &str,
    host_pod: &str,
    request: &PodRequest,
) -> Result<Vec<Claim>, ClaimFailure> {
    let (mut allowed, mut misfits) = allowed_nodes(needs, nodes);
    loop {
        if allowed.is_empty() && !nodes.is_empty() {
            return Err(ClaimFailure::NoNode(fit::unavailable(nodes.len(), &misfits)));
        }
        let claims = plan(fleet, &allowed, quotas, holder, host_namespace, host_pod, request)?;
        let Some(chosen) = claims.first().map(|c| c.node.clone()) else { return Ok(claims) };
        let limited = nodes.iter().find(|n| n.name == chosen && n.allocatable_pods.is_some());
        let Some(node) = limited else { return Ok(claims) };
        match node.room_for_one(pods_on(host, &chosen).await?) {
            Ok(()) => return Ok(claims),
            Err(m) => {
                allowed.remove(&chosen);
                misfits.push(m);
            }
        }
    }
}

/// The claims the allocator would make for `request`, all on one node of `allowed`.
pub fn plan(
    fleet: &Fleet,
    allowed: &BTreeSet<String>,
    quotas: &Quotas,
    holder: &Holder,
    host_namespace: &str,
    host_pod: &str,
    request: &PodRequest,
) -> Result<Vec<Claim>, AllocError> {
    let mut last_error = None;
    for node in fleet.nodes.iter().filter(|n| allowed.contains(&n.name)) {
        let mut on_node = fleet.clone();
        let mut claims = Vec::new();
        let mut ok = true;
        for (profile, count) in request {
            let r = Request {
                tenant: holder.tenant.clone(),
                profile: profile.clone(),
                count: *count,
                nodes: Some(BTreeSet::from([node.name.clone()])),
            };
            match allocate(&on_node, quotas, &r, Mode::Dynamic) {
                Ok(allocation) => {
                    for d in allocation.devices {
                        let gpu_model = on_node
                            .gpus()
                            .find(|(_, g)| g.uuid == d.gpu_uuid)
                            .map(|(_, g)| g.model)
                            .unwrap_or(d.profile.model);
                        let claim = Claim {
                            node: d.node.clone(),
                            gpu_uuid: d.gpu_uuid.clone(),
                            model: gpu_model,
                            shape: d.profile.shape,
                            placement: d.placement,
                            instance_uuid: match &d.source {
                                DeviceSource::Existing { instance_uuid } => instance_uuid.clone(),
                                DeviceSource::Create => String::new(),
                            },
                            holder: holder.clone(),
                            host_namespace: host_namespace.to_owned(),
                            host_pod: host_pod.to_owned(),
                        };
                        apply_claims(&mut on_node, [&claim]);
                        claims.push(claim);
                    }
                }
                Err(e @ AllocError::OverQuota { .. }) => return Err(e),
                Err(e) => {
                    last_error = Some(e);
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return Ok(claims);
        }
    }
    Err(last_error.unwrap_or_else(|| AllocError::FleetCannotHold {
        profile: request.keys().next().cloned().unwrap_or_default(),
        requested: request.values().sum(),
        placeable: 0,
        reason: "no GPU node has published an inventory".to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use carrel_gpu::{Gpu, GpuModel, Node};

    fn fleet(nodes: &[&str]) -> Fleet {
        Fleet {
            nodes: nodes
                .iter()
                .map(|n| Node {
                    name: (*n).to_owned(),
                    gpus: vec![Gpu {
                        uuid: format!("GPU-{n}"),
                        index: 0,
                        model: GpuModel::H200_141GB,
                        mig_enabled: true,
                        instances: Vec::new(),
                    }],
                })
                .collect(),
        }
    }

    fn all(f: &Fleet) -> BTreeSet<String> {
        f.nodes.iter().map(|n| n.name.clone()).collect()
    }

    fn quotas(pairs: &[(&str, u32)]) -> Quotas {
        let mut q = Quotas::new();
        for (p, n) in pairs {
            q.set("t", p, *n).expect("profile");
        }
        q
    }

    fn holder() -> Holder {
        Holder { tenant: "t".into(), namespace: "ml".into(), pod: "p".into() }
    }

    #[test]
    fn a_pods_devices_share_a_node_and_do_not_overlap() {
        let f = fleet(&["a", "b"]);
        let q = quotas(&[("1g.18gb", 4), ("3g.71gb", 1)]);
        let request = PodRequest::from([("1g.18gb".into(), 3), ("3g.71gb".into(), 1)]);
        let claims = plan(&f, &all(&f), &q, &holder(), "carrel-t", "p-x-ml", &request)
            .expect("fits one GPU");
        assert_eq!(claims.len(), 4);
        assert!(claims.iter().all(|c| c.node == claims[0].node));
        let mut slots = BTreeSet::new();
        for c in &claims {
            for s in c.placement.start..c.placement.start + c.placement.size {
                assert!(slots.insert((c.gpu_uuid.clone(), s)), "slot {s} twice");
            }
            assert!(c.instance_uuid.is_empty(), "planned, not existing");
        }
    }

    #[test]
    fn over_quota_and_no_room_are_reported() {
        let f = fleet(&["a"]);
        let q = quotas(&[("1g.18gb", 1)]);
        let two = PodRequest::from([("1g.18gb".into(), 2)]);
        let e = plan(&f, &all(&f), &q, &holder(), "ns", "p", &two).expect_err("over quota");
        assert!(matches!(e, AllocError::OverQuota { .. }), "{e}");
        let q = quotas(&[("7g.141gb", 2)]);
        let two = PodRequest::from([("7g.141gb".into(), 2)]);
        let e = plan(&f, &all(&f), &q, &holder(), "ns", "p", &two).expect_err("one GPU");
        assert!(matches!(e, AllocError::FleetCannotHold { .. }), "{e}");
        let e = plan(
            &Fleet::default(),
            &BTreeSet::new(),
            &q,
            &holder(),
            "ns",
            "p",
            &PodRequest::from([("7g.141gb".into(), 1)]),
        )
        .expect_err("no fleet");
        assert!(e.to_string().contains("no GPU node"), "{e}");
    }

    #[test]
    fn only_allowed_nodes_are_used_but_quota_counts_every_node() {
        let mut f = fleet(&["a", "b"]);
        let q = quotas(&[("1g.18gb", 1)]);
        let one = PodRequest::from([("1g.18gb".into(), 1)]);
        let only_b = BTreeSet::from(["b".to_owned()]);
        let claims = plan(&f, &only_b, &q, &holder(), "ns", "p", &one).expect("fits b");
        assert!(claims.iter().all(|c| c.node == "b"), "{claims:?}");
        // The tenant's device on a counts against its quota for a pod that may use only b.
        let mut on_a = plan(&f, &BTreeSet::from(["a".to_owned()]), &q, &holder(), "ns", "p0", &one)
            .expect("fits a");
        apply_claims(&mut f, on_a.iter());
        on_a.clear();
        let e = plan(&f, &only_b, &q, &holder(), "ns", "p1", &one).expect_err("quota used on a");
        assert!(matches!(e, AllocError::OverQuota { usage: 1, .. }), "{e}");
    }

    #[test]
    fn nodes_a_pod_may_not_use_are_named_as_kube_scheduler_names_them() {
        let node = |name: &str, zone: &str| {
            NodeFacts::of_node(&serde_json::json!({
                "metadata": {"name": name, "labels": {"zone": zone}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
        };
        let mut cordoned = node("c", "z1");
        cordoned.unschedulable = true;
        let nodes = [node("a", "z1"), node("b", "z2"), cordoned];
        let needs = |spec: serde_json::Value| PodNeeds::of_spec(&spec).expect("parses");
        let z1 = needs(serde_json::json!({"nodeSelector": {"zone": "z1"}}));
        assert_eq!(allowed_nodes(&z1, &nodes).0, BTreeSet::from(["a".to_owned()]));
        let z3 = needs(serde_json::json!({"nodeSelector": {"zone": "z3"}}));
        let (allowed, misfits) = allowed_nodes(&z3, &nodes);
        assert!(allowed.is_empty());
        assert_eq!(
            fit::unavailable(nodes.len(), &misfits),
            "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's \
             node affinity/selector."
        );
    }
}
