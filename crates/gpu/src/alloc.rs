//! The allocator: which MIG devices a tenant's request gets, or why it gets none.
//!
//! # Modes
//!
//! - [`Mode::Fixed`] chooses among the existing free (unclaimed) instances of the profile.
//! - [`Mode::Dynamic`] may also plan new GPU instances at explicit placements, in free memory
//!   slots or in slots held by free instances, which it then plans to remove. It never touches a
//!   claimed instance.
//!
//! # Scoring
//!
//! Every candidate (a GPU, a start slot, and in dynamic mode the free instances in the way) gets a
//! key; the smallest key wins, so a decision depends only on the inventory's order and contents
//! (no hash-map iteration anywhere):
//!
//! 1. **loss** = `capacity(avail) − capacity(avail − slots taken)`, where `avail` is the GPU's
//!    memory slots not held by claimed instances and [`capacity`] sums,
//!    over the shapes, weight × how many instances of that shape alone still fit (weights 56 for
//!    7g, 16 for 4g, 12 for 3g, 4 for 2g, 2 for the double-memory 1g, 1 for 1g: compute slices ×
//!    memory slots). Taking slots from a GPU that is already cut up loses little; breaking up a
//!    whole GPU or a 4-slot half loses a lot. So small instances go where small holes already
//!    are, and large contiguous regions stay whole for later large requests.
//! 2. fewer removals of free instances (less reconfiguration);
//! 3. an existing free instance before a new one;
//! 4. the GPU with more claimed memory slots (prefer GPUs already in use);
//! 5. inventory order: node, GPU, then start slot.
//!
//! A request for several devices is decided one device at a time against a scratch copy of the
//! GPUs' state, all or nothing.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::catalogue::{canonical_profile_name, known_profile_names, GpuModel, Profile, Shape};
use crate::inventory::{Fleet, InventoryError, Quotas};
use crate::layout::{capacity, GpuLayout, Placement};

/// How the allocator may use the GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Only existing free instances.
    Fixed,
    /// Existing free instances, or new instances planned in free slots, removing free instances
    /// where needed.
    Dynamic,
}

/// A tenant's request for MIG devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The tenant.
    pub tenant: String,
    /// The profile (`1g.18gb`, `mig-1g.18gb` or `nvidia.com/mig-1g.18gb`).
    pub profile: String,
    /// How many devices, all or nothing.
    pub count: u32,
    /// The nodes allowed; `None` allows every node.
    pub nodes: Option<BTreeSet<String>>,
}

/// Where a device comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceSource {
    /// An existing free instance.
    Existing {
        /// Its UUID.
        instance_uuid: String,
    },
    /// A GPU instance to create at the device's placement.
    Create,
}

/// One device given to the request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// The node.
    pub node: String,
    /// The GPU's UUID.
    pub gpu_uuid: String,
    /// The GPU's index on the node.
    pub gpu_index: u32,
    /// The profile (of that GPU's model).
    pub profile: Profile,
    /// Where the instance sits.
    pub placement: Placement,
    /// Existing or to be created.
    pub source: DeviceSource,
}

/// A free instance to destroy before the devices are created.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Removal {
    /// The node.
    pub node: String,
    /// The GPU's UUID.
    pub gpu_uuid: String,
    /// The instance's UUID.
    pub instance_uuid: String,
    /// Its profile.
    pub profile: Profile,
    /// Where it sits.
    pub placement: Placement,
}

/// The allocator's answer: devices, and the free instances to remove first (dynamic mode).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Allocation {
    /// The devices, in the order chosen.
    pub devices: Vec<Device>,
    /// Free instances to destroy before creating the new ones.
    pub removals: Vec<Removal>,
}

/// Why a request gets no devices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// No model in the catalogue has the profile.
    #[error("unknown MIG profile {profile:?}; known profiles: {known}", known = known.join(", "))]
    UnknownProfile {
        /// The name asked for.
        profile: String,
        /// Every known profile name.
        known: Vec<&'static str>,
    },
    /// The request would take the tenant over its quota.
    #[error("tenant {tenant} asks for {requested} × {profile}: quota {quota}, in use {usage}")]
    OverQuota {
        /// The tenant.
        tenant: String,
        /// The profile.
        profile: String,
        /// The tenant's quota of it.
        quota: u32,
        /// Instances of it the tenant holds now.
        usage: u32,
        /// Instances asked for.
        requested: u32,
    },
    /// Fixed mode: not enough free instances of the profile.
    #[error("no free instance of {profile} for {requested}: {free} free on the allowed nodes")]
    NoFreeInstance {
        /// The profile.
        profile: String,
        /// Instances asked for.
        requested: u32,
        /// Free instances of it on the allowed nodes.
        free: u32,
    },
    /// Dynamic mode: the fleet cannot hold the request, even after removing free instances.
    #[error(
        "the fleet cannot hold {requested} × {profile}: {placeable} could be placed; {reason}"
    )]
    FleetCannotHold {
        /// The profile.
        profile: String,
        /// Instances asked for.
        requested: u32,
        /// How many could be placed.
        placeable: u32,
        /// Why not more.
        reason: String,
    },
    /// The inventory breaks a rule.
    #[error("invalid inventory: {0}")]
    Inventory(#[from] InventoryError),
}

/// The canonical name of a profile, or the error that lists the known ones.
pub fn canonical_or_error(profile: &str) -> Result<String, AllocError> {
    canonical_profile_name(profile).ok_or_else(|| AllocError::UnknownProfile {
        profile: profile.to_owned(),
        known: known_profile_names(),
    })
}

/// A free instance in the scratch state.
#[derive(Clone, Copy, Debug)]
struct Free {
    shape: Shape,
    start: u8,
    instance: u16,
}

/// One candidate GPU in the scratch state.
#[derive(Clone, Debug)]
struct GpuState {
    node: u32,
    gpu: u32,
    shape: Shape,
    claimed: GpuLayout,
    free: [Option<Free>; 8],
}

impl GpuState {
    fn frees(&self) -> impl Iterator<Item = (usize, Free)> + '_ {
        self.free.iter().enumerate().filter_map(|(i, f)| f.map(|f| (i, f)))
    }
}

/// Sort key of a candidate; the smallest wins.
type Key = (u32, u8, u8, Reverse<u32>, u32, u32, u8);

/// A chosen candidate: its GPU state, start, the free entry reused (if any), and the free entries
/// to remove, as a bit set over `GpuState::free`.
#[derive(Clone, Copy, Debug)]
struct Choice {
    state: usize,
    start: u8,
    reuse: Option<usize>,
    remove: u8,
}

/// Decide which devices `request` gets from `fleet`, within `quotas`. Pure and deterministic.
///
/// Quota usage is rebuilt from the claims in `fleet`. The GPUs the request could use are checked
/// against the geometry rules; an invalid one is an [`AllocError::Inventory`].
pub fn allocate(
    fleet: &Fleet,
    quotas: &Quotas,
    request: &Request,
    mode: Mode,
) -> Result<Allocation, AllocError> {
    let name = canonical_or_error(&request.profile)?;
    let shapes: [Option<Shape>; 6] = GpuModel::ALL.map(|m| m.shape_named(&name));
    let shape_of = |m: GpuModel| shapes[m as usize];

    // Usage, from every claim in the fleet; and the candidate GPUs.
    let mut usage = 0u32;
    let mut states: Vec<GpuState> = Vec::new();
    let mut free_total = 0u32;
    for (ni, node) in fleet.nodes.iter().enumerate() {
        let allowed = request.nodes.as_ref().is_none_or(|set| set.contains(&node.name));
        for (gi, gpu) in node.gpus.iter().enumerate() {
            let shape = shape_of(gpu.model);
            if let Some(shape) = shape {
                usage += gpu
                    .instances
                    .iter()
                    .filter(|i| {
                        i.shape == shape
                            && i.holder.as_ref().is_some_and(|h| h.tenant == request.tenant)
                    })
                    .count() as u32;
            }
            let Some(shape) = shape else { continue };
            if !allowed || !gpu.mig_enabled {
                continue;
            }
            gpu.layout(&node.name)?;
            let mut claimed = GpuLayout::new();
            let mut free = [None; 8];
            let mut n = 0;
            for (ii, inst) in gpu.instances.iter().enumerate() {
                if inst.holder.is_some() {
                    claimed.insert(inst.shape, inst.placement.start);
                } else if n < free.len() {
                    free[n] = Some(Free {
                        shape: inst.shape,
                        start: inst.placement.start,
                        instance: ii as u16,
                    });
                    n += 1;
                    if inst.shape == shape {
                        free_total += 1;
                    }
                }
            }
            states.push(GpuState { node: ni as u32, gpu: gi as u32, shape, claimed, free });
        }
    }

    let quota = quotas.get(&request.tenant, &name);
    if u64::from(usage) + u64::from(request.count) > u64::from(quota) {
        return Err(AllocError::OverQuota {
            tenant: request.tenant.clone(),
            profile: name,
            quota,
            usage,
            requested: request.count,
        });
    }

    let mut allocation = Allocation::default();
    for placed in 0..request.count {
        let best = match mode {
            Mode::Fixed => best_fixed(&states),
            Mode::Dynamic => best_dynamic(&states),
        };
        let Some(choice) = best else {
            return Err(match mode {
                Mode::Fixed => AllocError::NoFreeInstance {
                    profile: name,
                    requested: request.count,
                    free: free_total,
                },
                Mode::Dynamic => AllocError::FleetCannotHold {
                    profile: name,
                    requested: request.count,
                    placeable: placed,
                    reason: if states.is_empty() {
                        "no MIG-enabled GPU on the allowed nodes offers it".to_owned()
                    } else {
                        format!(
                            "none of the {} GPUs that offer it has a valid start slot clear of \
                             claimed instances",
                            states.len()
                        )
                    },
                },
            });
        };
        take(fleet, &mut states[choice.state], choice, &mut allocation);
    }
    Ok(allocation)
}

fn key(state: &GpuState, mask: u8, removals: u8, create: bool, start: u8) -> Key {
    let avail = !state.claimed.occupied();
    let loss = capacity(avail) - capacity(avail & !mask);
    (
        loss,
        removals,
        u8::from(create),
        Reverse(state.claimed.occupied().count_ones()),
        state.node,
        state.gpu,
        start,
    )
}

fn best_fixed(states: &[GpuState]) -> Option<Choice> {
    let mut best: Option<(Key, Choice)> = None;
    for (si, state) in states.iter().enumerate() {
        for (fi, f) in state.frees() {
            if f.shape != state.shape {
                continue;
            }
            let k = key(state, f.shape.mask_at(f.start), 0, false, f.start);
            if best.as_ref().is_none_or(|(b, _)| k < *b) {
                best = Some((k, Choice { state: si, start: f.start, reuse: Some(fi), remove: 0 }));
            }
        }
    }
    best.map(|(_, c)| c)
}

fn best_dynamic(states: &[GpuState]) -> Option<Choice> {
    let mut best: Option<(Key, Choice)> = None;
    for (si, state) in states.iter().enumerate() {
        let shape = state.shape;
        for &start in shape.starts() {
            let mask = shape.mask_at(start);
            if state.claimed.occupied() & mask != 0 {
                continue;
            }
            // The free instances in the way; a free one of the same shape exactly here is reused.
            let mut reuse = None;
            let mut remove = 0u8;
            for (fi, f) in state.frees() {
                if f.shape.mask_at(f.start) & mask != 0 {
                    if f.shape == shape && f.start == start {
                        reuse = Some(fi);
                    } else {
                        remove |= 1 << fi;
                    }
                }
            }
            let k = key(state, mask, remove.count_ones() as u8, reuse.is_none(), start);
            if best.as_ref().is_some_and(|(b, _)| k >= *b) {
                continue;
            }
            let Some(remove) = legal(state, shape, start, reuse, remove) else {
                continue;
            };
            // `legal` may add a removal (the free +me instance), so re-key.
            let k = key(state, mask, remove.count_ones() as u8, reuse.is_none(), start);
            if best.as_ref().is_none_or(|(b, _)| k < *b) {
                best = Some((k, Choice { state: si, start, reuse, remove }));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// Whether `shape` at `start` is valid once the free instances in `remove` are gone (a free `+me`
/// instance elsewhere is removed too when the new one needs the media engine). Returns the final
/// removal set.
fn legal(
    state: &GpuState,
    shape: Shape,
    start: u8,
    reuse: Option<usize>,
    mut remove: u8,
) -> Option<u8> {
    if reuse.is_some() {
        // An existing valid instance; reusing it changes no geometry.
        return Some(remove);
    }
    if shape.media_engine() {
        for (fi, f) in state.frees() {
            if f.shape.media_engine() {
                remove |= 1 << fi;
            }
        }
    }
    let mut layout = state.claimed;
    for (fi, f) in state.frees() {
        if remove & (1 << fi) == 0 {
            layout.insert(f.shape, f.start);
        }
    }
    layout.can_add(shape, start).then_some(remove)
}

fn take(fleet: &Fleet, state: &mut GpuState, choice: Choice, out: &mut Allocation) {
    let node = &fleet.nodes[state.node as usize];
    let gpu = &node.gpus[state.gpu as usize];
    for fi in 0..state.free.len() {
        if choice.remove & (1 << fi) == 0 {
            continue;
        }
        if let Some(f) = state.free[fi].take() {
            let inst = &gpu.instances[usize::from(f.instance)];
            out.removals.push(Removal {
                node: node.name.clone(),
                gpu_uuid: gpu.uuid.clone(),
                instance_uuid: inst.uuid.clone(),
                profile: gpu.profile_of(inst),
                placement: inst.placement,
            });
        }
    }
    let source = match choice.reuse.and_then(|fi| state.free[fi].take()) {
        Some(f) => DeviceSource::Existing {
            instance_uuid: gpu.instances[usize::from(f.instance)].uuid.clone(),
        },
        None => DeviceSource::Create,
    };
    state.claimed.insert(state.shape, choice.start);
    out.devices.push(Device {
        node: node.name.clone(),
        gpu_uuid: gpu.uuid.clone(),
        gpu_index: gpu.index,
        profile: Profile { model: gpu.model, shape: state.shape },
        placement: Placement { start: choice.start, size: state.shape.memory_slots() },
        source,
    });
}
