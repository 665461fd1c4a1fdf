//! Carrel's GPU model: pure code, no IO, deterministic; the claim Leases' IO only behind the
//! `kube` feature.
//!
//! - [`catalogue`]: the MIG profiles of each GPU model (A100-40GB, A100-80GB, H100-80GB,
//!   H100-94GB, H200-141GB, B200-180GB): names as NVIDIA prints them, NVML profile ids, compute
//!   slices, memory slots, valid start slots, per-GPU limits, the media engine, device-plugin
//!   resource names.
//! - [`layout`]: the geometry of one GPU ([`GpuLayout`]), the fragmentation score
//!   ([`capacity`]) and mig-parted style layout planning ([`plan_layout`]).
//! - [`inventory`]: the fleet (nodes → GPUs → instances, free or held), its validation, quotas
//!   and the usage rebuilt from claims.
//! - [`alloc`]: the allocator ([`allocate`]), fixed and dynamic modes.
//! - [`fit`]: which nodes a pod may run on (cordon, taints, `nodeSelector`, required node
//!   affinity), and kube-scheduler's message when none may take it.
//! - [`pod_refs`]: every object a pod's volumes name, and whether the syncer carries it.
//! - [`requests`]: the GPU resources a pod asks for (`nvidia.com/mig-…`, `nvidia.com/gpu`).
//! - [`runtime_env`]: the environment variables no tenant container may get (`NVIDIA_*`, `LD_*`).
//! - [`claim`]: how a held device is written down in the host cluster (Lease names and
//!   metadata), and the fleet's holders rebuilt from claims.
//! - [`leases`]: the one API over the claim Leases: grouping them into claims, usage by tenant,
//!   and (feature `kube`) claiming, releasing and listing them in the host.

pub mod alloc;
pub mod catalogue;
pub mod claim;
pub mod fit;
pub mod inventory;
pub mod layout;
pub mod leases;
pub mod pod_refs;
pub mod requests;
pub mod runtime_env;

pub use alloc::{allocate, AllocError, Allocation, Device, DeviceSource, Mode, Removal, Request};
pub use catalogue::{
    canonical_profile_name, known_profile_names, resource_name, GpuModel, Profile, Shape,
    COMPUTE_SLICES, MEMORY_SLOTS,
};
pub use claim::{apply_claims, distinct, Claim, ClaimError, CLAIM_NAMESPACE};
pub use inventory::{Fleet, Gpu, Holder, Instance, InventoryError, Node, Quotas, Usage};
pub use layout::{
    capacity, plan_layout, GpuLayout, LayoutError, Placement, PlacementError, PlannedInstance,
};
