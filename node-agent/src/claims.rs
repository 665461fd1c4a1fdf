//! Claim reconciliation: the node's device claims (Leases in [`CLAIM_NAMESPACE`] labelled with the
//! node) made real on its GPUs.
//!
//! Leases are grouped into claims by GPU and start slot ([`group_claims`], from
//! `carrel_gpu::leases`, which owns the claim Leases' format). A claim counts only
//! when every one of its [`Claim::lease_names`] exists and all its Leases describe the same claim;
//! otherwise a claimer is between creating and rolling back, and the claim is left alone. For each
//! complete claim, [`plan`] decides what the GPU needs: nothing when an instance of the claim's
//! shape sits at its placement, else the free instances overlapping it (and a free `+me` instance
//! when the claim needs the media engine) destroyed and the instance created. An instance that a
//! complete claim covers is never destroyed; free instances nobody claims stay, to be reused.
//! Every Lease of the claim is then annotated with the MIG device UUID ([`ANNOTATION_INSTANCE`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use carrel_gpu::claim::overlaps;
pub use carrel_gpu::leases::{
    group_claims, Grouped, GroupedClaim, IgnoredLeases, ANNOTATION_INSTANCE,
};
use carrel_gpu::{Claim, Placement, Shape, CLAIM_NAMESPACE};
use carrel_nvml::{BackendError, GpuBackend, GpuInfo, MigInstance};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::Client;

use carrel_events::{EventTarget, EventType, Recorder};

/// Reason of the Warning Event written when a claim cannot be made real.
pub const REASON_CLAIM_FAILED: &str = "MigClaimFailed";

/// One GPU as the backend reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuState {
    /// The GPU.
    pub info: GpuInfo,
    /// Its MIG instances.
    pub instances: Vec<MigInstance>,
}

/// Read every GPU and its instances.
pub fn read_gpus(backend: &dyn GpuBackend) -> Result<Vec<GpuState>, BackendError> {
    let mut gpus = Vec::new();
    for info in backend.gpus()? {
        let instances = if info.mig_enabled { backend.instances(info.index)? } else { Vec::new() };
        gpus.push(GpuState { info, instances });
    }
    Ok(gpus)
}

/// What one claim needs of its GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Its instance exists.
    Ready {
        /// The GPU's index.
        gpu_index: u32,
        /// The instance.
        instance: MigInstance,
    },
    /// Destroy these free instances, then create the claim's.
    Build {
        /// The GPU's index.
        gpu_index: u32,
        /// Free instances in the way.
        destroy: Vec<MigInstance>,
        /// The shape to create.
        shape: Shape,
        /// Where.
        placement: Placement,
    },
    /// It cannot be made real (yet).
    Blocked(String),
}

fn instance_shape(gpu: &GpuState, instance: &MigInstance) -> Option<Shape> {
    gpu.info.model.known().and_then(|m| instance.profile_on(m)).map(|p| p.shape)
}

fn matches(gpu: &GpuState, instance: &MigInstance, claim: &Claim) -> bool {
    instance.placement.start == claim.placement.start
        && instance_shape(gpu, instance) == Some(claim.shape)
}

/// What each claim needs, given the node's GPUs. Instances that a claim covers (its shape at its
/// placement, with a MIG device) are never in a `destroy` list.
pub fn plan(gpus: &[GpuState], claims: &[Claim]) -> Vec<Plan> {
    let covered = |gpu: &GpuState, instance: &MigInstance| {
        instance.uuid.is_some()
            && claims.iter().any(|c| c.gpu_uuid == gpu.info.uuid && matches(gpu, instance, c))
    };
    claims
        .iter()
        .map(|claim| {
            let Some(gpu) = gpus.iter().find(|g| g.info.uuid == claim.gpu_uuid) else {
                return Plan::Blocked(format!("GPU {} is not on this node", claim.gpu_uuid));
            };
            let gpu_index = gpu.info.index;
            if gpu.info.model.known() != Some(claim.model) {
                return Plan::Blocked(format!(
                    "GPU {} is a {}, the claim is for a {}",
                    claim.gpu_uuid, gpu.info.model, claim.model
                ));
            }
            if !gpu.info.mig_enabled {
                return Plan::Blocked(format!("GPU {} is not in MIG mode", claim.gpu_uuid));
            }
            if let Some(instance) =
                gpu.instances.iter().find(|i| i.uuid.is_some() && matches(gpu, i, claim))
            {
                return Plan::Ready { gpu_index, instance: instance.clone() };
            }
            let in_the_way = |i: &&MigInstance| {
                overlaps(i.placement.into(), claim.placement)
                    || (claim.shape.media_engine()
                        && instance_shape(gpu, i).is_some_and(Shape::media_engine))
            };
            let destroy: Vec<MigInstance> =
                gpu.instances.iter().filter(in_the_way).cloned().collect();
            if let Some(held) = destroy.iter().find(|i| covered(gpu, i)) {
                return Plan::Blocked(format!(
                    "instance {} ({} at slot {}) of another claim is in the way",
                    held.uuid.as_deref().unwrap_or_default(),
                    held.profile,
                    held.placement.start
                ));
            }
            Plan::Build { gpu_index, destroy, shape: claim.shape, placement: claim.placement }
        })
        .collect()
}

/// A claimed MIG device of this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldDevice {
    /// The claim (with `instance_uuid` the device's UUID).
    pub claim: Claim,
    /// The GPU's index.
    pub gpu_index: u32,
    /// The MIG device UUID.
    pub mig_uuid: String,
    /// The NVML GPU instance id.
    pub gpu_instance_id: u32,
}

/// What one reconciliation pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// The claimed devices that exist.
    pub held: Vec<HeldDevice>,
    /// Whether instances were created or destroyed.
    pub changed_instances: bool,
}

/// Why a reconciliation pass failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ClaimsError {
    /// The GPUs could not be read.
    #[error("reading the GPUs: {0}")]
    Backend(#[from] BackendError),
    /// A blocking backend call did not finish.
    #[error("backend call: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Why a claim's instance could not be built on its GPU.
#[derive(Debug, thiserror::Error)]
enum BuildError {
    /// A free instance in the claim's way could not be destroyed.
    #[error(
        "destroying free instance {} ({} at slot {}) on GPU {gpu_index}: {source}",
        .instance.uuid.as_deref().unwrap_or("without a MIG device"),
        .instance.profile,
        .instance.placement.start
    )]
    Destroy {
        /// The GPU's index.
        gpu_index: u32,
        /// The instance.
        instance: MigInstance,
        /// The backend's error.
        source: BackendError,
    },
    /// The claim's instance could not be created.
    #[error("creating the instance on GPU {gpu_index}: {source}")]
    Create {
        /// The GPU's index.
        gpu_index: u32,
        /// The backend's error.
        source: BackendError,
    },
    /// A blocking backend call did not finish.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// Runs `f` on the blocking pool with the backend.
pub(crate) async fn blocking<T: Send + 'static>(
    backend: &Arc<dyn GpuBackend>,
    f: impl FnOnce(&dyn GpuBackend) -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let backend = backend.clone();
    tokio::task::spawn_blocking(move || f(backend.as_ref())).await
}

/// Reconciles one node's claims.
#[derive(Debug)]
pub struct Reconciler {
    leases: Api<Lease>,
    backend: Arc<dyn GpuBackend>,
    recorder: Arc<Recorder>,
    node_name: String,
    ignored: BTreeMap<Vec<String>, String>,
    /// The last failure of each claim (GPU UUID, start slot) still failing.
    failing: BTreeMap<(String, u8), String>,
}

impl Reconciler {
    /// A reconciler for node `node_name`.
    pub fn new(
        client: Client,
        backend: Arc<dyn GpuBackend>,
        recorder: Arc<Recorder>,
        node_name: &str,
    ) -> Reconciler {
        Reconciler {
            leases: Api::namespaced(client, CLAIM_NAMESPACE),
            backend,
            recorder,
            node_name: node_name.to_owned(),
            ignored: BTreeMap::new(),
            failing: BTreeMap::new(),
        }
    }

    /// One pass over the node's Leases (all of them, as listed or watched).
    pub async fn reconcile(&mut self, leases: &[Arc<Lease>]) -> Result<PassOutcome, ClaimsError> {
        let empty = BTreeMap::new();
        let grouped = group_claims(leases.iter().filter_map(|l| {
            let name = l.metadata.name.as_deref()?;
            Some((name, l.metadata.annotations.as_ref().unwrap_or(&empty)))
        }));
        let ignored: BTreeMap<Vec<String>, String> =
            grouped.ignored.iter().map(|i| (i.leases.clone(), i.reason.clone())).collect();
        for (names, reason) in &ignored {
            if self.ignored.get(names) != Some(reason) {
                tracing::debug!(node = %self.node_name, leases = ?names, %reason, "Leases ignored");
            }
        }
        self.ignored = ignored;
        let claims: Vec<Claim> = grouped.complete.iter().map(|g| g.claim.clone()).collect();
        let gpus = blocking(&self.backend, read_gpus).await??;
        let plans = plan(&gpus, &claims);
        let mut outcome = PassOutcome::default();
        let mut failing = BTreeMap::new();
        for (grouped, plan) in grouped.complete.iter().zip(plans) {
            let claim = &grouped.claim;
            let made = match plan {
                Plan::Ready { gpu_index, instance } => Ok((gpu_index, instance)),
                Plan::Blocked(reason) => Err(reason),
                Plan::Build { gpu_index, destroy, shape, placement } => {
                    let result = self.build(gpu_index, destroy, shape, placement).await;
                    outcome.changed_instances |= result.1;
                    // The failure is told as text: logged, compared with the last pass's, and
                    // written into a Warning Event.
                    result.0.map(|i| (gpu_index, i)).map_err(|e| e.to_string())
                }
            };
            match made {
                Ok((gpu_index, instance)) => {
                    let (Some(mig_uuid), gpu_instance_id) =
                        (instance.uuid.clone(), instance.gpu_instance_id)
                    else {
                        continue;
                    };
                    self.annotate(grouped, &mig_uuid).await;
                    outcome.held.push(HeldDevice {
                        claim: Claim { instance_uuid: mig_uuid.clone(), ..claim.clone() },
                        gpu_index,
                        mig_uuid,
                        gpu_instance_id,
                    });
                }
                Err(reason) => {
                    self.failed(grouped, &reason).await;
                    failing.insert((claim.gpu_uuid.clone(), claim.placement.start), reason);
                }
            }
        }
        self.failing = failing;
        Ok(outcome)
    }

    /// Destroy `destroy`, then create the instance; the instance, and whether anything changed.
    async fn build(
        &self,
        gpu_index: u32,
        destroy: Vec<MigInstance>,
        shape: Shape,
        placement: Placement,
    ) -> (Result<MigInstance, BuildError>, bool) {
        let mut changed = false;
        for instance in destroy {
            let id = instance.gpu_instance_id;
            let done = blocking(&self.backend, move |b| b.destroy_instance(gpu_index, id)).await;
            match done {
                Ok(Ok(())) => {
                    changed = true;
                    tracing::info!(
                        node = %self.node_name,
                        gpu = gpu_index,
                        instance = instance.uuid.as_deref().unwrap_or_default(),
                        profile = %instance.profile,
                        start = instance.placement.start,
                        "destroyed a free MIG instance in a claim's way"
                    );
                }
                Ok(Err(source)) => {
                    return (Err(BuildError::Destroy { gpu_index, instance, source }), changed)
                }
                Err(e) => return (Err(e.into()), changed),
            }
        }
        match blocking(&self.backend, move |b| b.create_instance(gpu_index, shape, placement)).await
        {
            Ok(Ok(instance)) => {
                tracing::info!(
                    node = %self.node_name,
                    gpu = gpu_index,
                    instance = instance.uuid.as_deref().unwrap_or_default(),
                    profile = %instance.profile,
                    start = placement.start,
                    "created a MIG instance for a claim"
                );
                (Ok(instance), true)
            }
            Ok(Err(source)) => (Err(BuildError::Create { gpu_index, source }), changed),
            Err(e) => (Err(e.into()), changed),
        }
    }

    /// Annotate every Lease of the claim that does not yet name `mig_uuid`.
    async fn annotate(&self, grouped: &GroupedClaim, mig_uuid: &str) {
        for (lease, current) in &grouped.leases {
            if current == mig_uuid {
                continue;
            }
            if let Err(e) =
                carrel_gpu::leases::annotate_instance(&self.leases, lease, mig_uuid).await
            {
                tracing::warn!(
                    node = %self.node_name,
                    %lease,
                    error = %e,
                    "could not annotate the claim Lease with its MIG device"
                );
            }
        }
    }

    async fn failed(&self, grouped: &GroupedClaim, reason: &str) {
        let claim = &grouped.claim;
        let key = (claim.gpu_uuid.clone(), claim.placement.start);
        if self.failing.get(&key).map(String::as_str) == Some(reason) {
            tracing::debug!(
                node = %self.node_name,
                gpu = %claim.gpu_uuid,
                start = claim.placement.start,
                %reason,
                "claim still not made real"
            );
        } else {
            tracing::warn!(
                node = %self.node_name,
                gpu = %claim.gpu_uuid,
                profile = claim.profile(),
                start = claim.placement.start,
                holder = %claim.holder_identity(),
                %reason,
                "claim not made real; retrying on the next pass"
            );
        }
        let Some(lease) = grouped.leases.keys().next() else {
            return;
        };
        let message = format!(
            "MIG {} at slot {} on GPU {} for {}: {reason}",
            claim.profile(),
            claim.placement.start,
            claim.gpu_uuid,
            claim.holder_identity()
        );
        let target = EventTarget::lease(CLAIM_NAMESPACE, lease);
        if let Err(e) =
            self.recorder.record(&target, EventType::Warning, REASON_CLAIM_FAILED, &message).await
        {
            tracing::warn!(node = %self.node_name, %lease, error = %e, "could not write the Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use carrel_gpu::{GpuModel, Holder};
    use carrel_nvml::{ModelName, Simulator};

    use super::*;

    fn claim(gpu: &str, shape: Shape, start: u8) -> Claim {
        Claim {
            node: "n1".into(),
            gpu_uuid: gpu.into(),
            model: GpuModel::H200_141GB,
            shape,
            placement: Placement { start, size: shape.memory_slots() },
            instance_uuid: String::new(),
            holder: Holder { tenant: "t".into(), namespace: "default".into(), pod: "p".into() },
            host_namespace: "carrel-t".into(),
            host_pod: "p-x-default".into(),
        }
    }

    fn gpus(sim: &Simulator) -> Vec<GpuState> {
        read_gpus(sim).unwrap()
    }

    #[test]
    fn plans_reuse_build_and_never_destroy_claimed_instances() {
        let sim = Simulator::from_spec("h200x1:mig=1g.18gb*7", "n1").unwrap();
        let state = gpus(&sim);
        let uuid = state[0].info.uuid.clone();
        let reuse = claim(&uuid, Shape::G1, 0);
        let bigger = claim(&uuid, Shape::G2, 2);
        let plans = plan(&state, &[reuse.clone(), bigger.clone()]);
        assert!(matches!(&plans[0], Plan::Ready { instance, .. } if instance.placement.start == 0));
        match &plans[1] {
            Plan::Build { destroy, shape, placement, .. } => {
                let starts: Vec<u8> = destroy.iter().map(|i| i.placement.start).collect();
                assert_eq!(starts, [2, 3]);
                assert_eq!((*shape, placement.start), (Shape::G2, 2));
            }
            other => panic!("{other:?}"),
        }
        // A claim overlapping another claim's instance is blocked, not built over it.
        let over = claim(&uuid, Shape::G2, 0);
        let plans = plan(&state, &[reuse, over]);
        assert!(matches!(&plans[1], Plan::Blocked(r) if r.contains("another claim")), "{plans:?}");
    }

    #[test]
    fn plans_free_the_media_engine_and_report_missing_gpus() {
        let sim = Simulator::from_spec("h200x1:mig=1g.18gb+me*1", "n1").unwrap();
        let state = gpus(&sim);
        let uuid = state[0].info.uuid.clone();
        let me = state[0].instances[0].placement.start;
        let wants_me = claim(&uuid, Shape::G1Me, if me == 6 { 5 } else { 6 });
        match &plan(&state, &[wants_me])[0] {
            Plan::Build { destroy, .. } => assert_eq!(destroy.len(), 1),
            other => panic!("{other:?}"),
        }
        let plans = plan(&state, &[claim("GPU-NONE", Shape::G1, 0)]);
        assert!(matches!(&plans[0], Plan::Blocked(r) if r.contains("not on this node")));
        let mut other_model = state.clone();
        other_model[0].info.model = ModelName::Known(GpuModel::A100_40GB);
        let plans = plan(&other_model, &[claim(&uuid, Shape::G1, 0)]);
        assert!(matches!(&plans[0], Plan::Blocked(r) if r.contains("a100-40gb")), "{plans:?}");
    }
}
