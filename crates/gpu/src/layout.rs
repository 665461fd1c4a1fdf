//! MIG geometry on one GPU: placements, the rules a set of instances must keep, the score that
//! measures fragmentation, and mig-parted style layout validation (`{"1g.18gb": 3,
//! "3g.71gb": 1}` → instances at explicit start slots, or why there are none).

use std::collections::BTreeMap;

use crate::catalogue::{
    canonical_profile_name, GpuModel, Profile, Shape, COMPUTE_SLICES, MEMORY_SLOTS,
};

/// Where an instance sits: `size` memory slots from `start` (NVML's `nvmlGpuInstancePlacement_t`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Placement {
    /// First memory slot.
    pub start: u8,
    /// Memory slots taken.
    pub size: u8,
}

impl Placement {
    /// The memory slots taken, as a bit mask (bit i = slot i); 0 when out of range.
    pub fn mask(self) -> u8 {
        if self.size == 0 || u16::from(self.start) + u16::from(self.size) > u16::from(MEMORY_SLOTS)
        {
            return 0;
        }
        let ones: u16 = (1u16 << self.size) - 1;
        ((ones << self.start) & 0xff) as u8
    }
}

/// Why a set of instances is not a valid layout on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The start slot is not one of the profile's valid starts, or the size is not its size.
    #[error("{profile} cannot be placed at start {start} with size {size} (valid starts {valid:?}, size {expected_size})")]
    InvalidPlacement {
        /// The profile.
        profile: String,
        /// The start given.
        start: u8,
        /// The size given.
        size: u8,
        /// The profile's valid starts.
        valid: Vec<u8>,
        /// The profile's size.
        expected_size: u8,
    },
    /// Two instances share a memory slot.
    #[error("{profile} at start {start} overlaps another instance (memory slots {overlap:#010b})")]
    Overlap {
        /// The profile of the later instance.
        profile: String,
        /// Its start.
        start: u8,
        /// The shared slots, as a bit mask.
        overlap: u8,
    },
    /// More than one `+me` instance.
    #[error("at most one +me instance per GPU (the GPU has one media engine)")]
    MediaEngineTaken,
    /// More instances of a profile than the GPU allows.
    #[error("at most {max} instances of {profile} per GPU")]
    TooManyOfProfile {
        /// The profile.
        profile: String,
        /// Its limit.
        max: u8,
    },
    /// More compute slices than the GPU has.
    #[error("the instances need {needed} compute slices; the GPU has {COMPUTE_SLICES}")]
    ComputeExhausted {
        /// Compute slices the instances need.
        needed: u8,
    },
}

/// The instances on one GPU, kept valid: no overlap, valid starts, at most one `+me`, per-profile
/// limits and at most 7 compute slices. Cheap to copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpuLayout {
    occupied: u8,
    compute: u8,
    media_engine: bool,
    counts: [u8; 7],
}

impl GpuLayout {
    /// An empty GPU.
    pub fn new() -> GpuLayout {
        GpuLayout::default()
    }

    /// The occupied memory slots, as a bit mask.
    pub fn occupied(&self) -> u8 {
        self.occupied
    }

    /// Compute slices in use.
    pub fn compute(&self) -> u8 {
        self.compute
    }

    /// Whether a `+me` instance is present.
    pub fn media_engine_used(&self) -> bool {
        self.media_engine
    }

    /// Instances of `shape` present.
    pub fn count(&self, shape: Shape) -> u8 {
        self.counts[shape.index()]
    }

    /// Whether an instance of `shape` may be added at `start`.
    pub fn can_add(&self, shape: Shape, start: u8) -> bool {
        shape.valid_start(start)
            && self.occupied & shape.mask_at(start) == 0
            && !(shape.media_engine() && self.media_engine)
            && self.counts[shape.index()] < shape.max_instances()
            && self.compute + shape.compute_slices() <= COMPUTE_SLICES
    }

    /// Add an instance of `profile`'s shape at `start`, or say why it cannot be.
    pub fn add(&mut self, profile: Profile, start: u8) -> Result<(), PlacementError> {
        let shape = profile.shape;
        let name = || profile.name().to_owned();
        if !shape.valid_start(start) {
            return Err(PlacementError::InvalidPlacement {
                profile: name(),
                start,
                size: shape.memory_slots(),
                valid: shape.starts().to_vec(),
                expected_size: shape.memory_slots(),
            });
        }
        let mask = shape.mask_at(start);
        if self.occupied & mask != 0 {
            return Err(PlacementError::Overlap {
                profile: name(),
                start,
                overlap: self.occupied & mask,
            });
        }
        if shape.media_engine() && self.media_engine {
            return Err(PlacementError::MediaEngineTaken);
        }
        if self.counts[shape.index()] >= shape.max_instances() {
            return Err(PlacementError::TooManyOfProfile {
                profile: name(),
                max: shape.max_instances(),
            });
        }
        if self.compute + shape.compute_slices() > COMPUTE_SLICES {
            return Err(PlacementError::ComputeExhausted {
                needed: self.compute + shape.compute_slices(),
            });
        }
        self.insert(shape, start);
        Ok(())
    }

    /// Add without checks (callers checked [`GpuLayout::can_add`]).
    pub(crate) fn insert(&mut self, shape: Shape, start: u8) {
        self.occupied |= shape.mask_at(start);
        self.compute += shape.compute_slices();
        self.media_engine |= shape.media_engine();
        self.counts[shape.index()] += 1;
    }
}

/// Weight of each shape in [`capacity`], indexed by [`Shape::index`]: compute slices times memory
/// slots, so that keeping room for a 7g (56) matters far more than room for a 1g (1).
const WEIGHTS: [u32; 7] = [1, 0, 2, 4, 12, 16, 56];

/// What a GPU whose available memory slots are `free` (bit i = slot i) can still hold:
/// Σ over shapes of weight × the most instances of that shape alone that fit in `free`.
/// `+me` is left out (it has the 1g's geometry and at most one instance).
pub fn capacity(free: u8) -> u32 {
    CAPACITY[usize::from(free)]
}

static CAPACITY: [u32; 256] = capacity_table();

const fn capacity_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut free = 0usize;
    while free < 256 {
        // Aligned placements of equal size never straddle each other, so counting every fitting
        // start gives the most instances of one shape.
        let shapes: [(u32, u32, &[u32]); 6] = [
            (WEIGHTS[0], 1, &[0, 1, 2, 3, 4, 5, 6]),
            (WEIGHTS[2], 2, &[0, 2, 4, 6]),
            (WEIGHTS[3], 2, &[0, 2, 4]),
            (WEIGHTS[4], 4, &[0, 4]),
            (WEIGHTS[5], 4, &[0]),
            (WEIGHTS[6], 8, &[0]),
        ];
        let mut total = 0u32;
        let mut s = 0;
        while s < shapes.len() {
            let (weight, size, starts) = shapes[s];
            let mut i = 0;
            while i < starts.len() {
                let mask = (((1u32 << size) - 1) << starts[i]) & 0xff;
                if (free as u32) & mask == mask {
                    total += weight;
                }
                i += 1;
            }
            s += 1;
        }
        table[free] = total;
        free += 1;
    }
    table
}

/// One instance of a planned layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlannedInstance {
    /// Its profile.
    pub profile: Profile,
    /// Where it sits.
    pub placement: Placement,
}

/// Why a requested layout has no valid placement.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The model does not offer the profile.
    #[error("{model} has no MIG profile {profile:?}; it has {known}", known = known.join(", "))]
    UnknownProfile {
        /// The model.
        model: GpuModel,
        /// The name asked for.
        profile: String,
        /// The model's profiles.
        known: Vec<&'static str>,
    },
    /// More instances of a profile than one GPU allows.
    #[error("{count} × {profile} asked for; a {model} holds at most {max}")]
    TooMany {
        /// The model.
        model: GpuModel,
        /// The profile.
        profile: String,
        /// Instances asked for.
        count: u32,
        /// The per-GPU limit.
        max: u8,
    },
    /// More than one `+me` instance.
    #[error("{count} +me instances asked for; a GPU has one media engine, so at most one")]
    MediaEngine {
        /// `+me` instances asked for.
        count: u32,
    },
    /// The instances cannot all be placed.
    #[error("the layout does not fit on a {model}: {reason}")]
    DoesNotFit {
        /// The model.
        model: GpuModel,
        /// Why.
        reason: String,
    },
}

/// Place a layout (profile name → count) on one empty GPU of `model`, as mig-parted would: every
/// instance at an explicit start slot. Deterministic: larger instances first, each at the valid
/// start that keeps the most [`capacity`] free, with backtracking when a choice leaves no room for
/// the rest. Returns the instances ordered by start.
pub fn plan_layout(
    model: GpuModel,
    layout: &BTreeMap<String, u32>,
) -> Result<Vec<PlannedInstance>, LayoutError> {
    let mut wanted: Vec<(Profile, u32)> = Vec::new();
    for (name, &count) in layout {
        let profile =
            canonical_profile_name(name).and_then(|n| model.profile(&n)).ok_or_else(|| {
                LayoutError::UnknownProfile {
                    model,
                    profile: name.clone(),
                    known: model.profiles().map(Profile::name).collect(),
                }
            })?;
        if count == 0 {
            continue;
        }
        if count > u32::from(profile.shape.max_instances()) {
            return Err(LayoutError::TooMany {
                model,
                profile: profile.name().to_owned(),
                count,
                max: profile.shape.max_instances(),
            });
        }
        match wanted.iter_mut().find(|(p, _)| *p == profile) {
            Some((_, c)) => *c += count,
            None => wanted.push((profile, count)),
        }
    }
    let me: u32 = wanted.iter().filter(|(p, _)| p.shape.media_engine()).map(|(_, c)| *c).sum();
    if me > 1 {
        return Err(LayoutError::MediaEngine { count: me });
    }
    for (p, c) in &wanted {
        if *c > u32::from(p.shape.max_instances()) {
            return Err(LayoutError::TooMany {
                model,
                profile: p.name().to_owned(),
                count: *c,
                max: p.shape.max_instances(),
            });
        }
    }
    let compute: u32 = wanted.iter().map(|(p, c)| c * u32::from(p.shape.compute_slices())).sum();
    if compute > u32::from(COMPUTE_SLICES) {
        return Err(LayoutError::DoesNotFit {
            model,
            reason: format!("it needs {compute} compute slices; the GPU has {COMPUTE_SLICES}"),
        });
    }
    let memory: u32 = wanted.iter().map(|(p, c)| c * u32::from(p.shape.memory_slots())).sum();
    if memory > u32::from(MEMORY_SLOTS) {
        return Err(LayoutError::DoesNotFit {
            model,
            reason: format!("it needs {memory} memory slots; the GPU has {MEMORY_SLOTS}"),
        });
    }
    let mut instances: Vec<Profile> =
        wanted.iter().flat_map(|(p, c)| std::iter::repeat_n(*p, *c as usize)).collect();
    // Largest memory first, then largest compute, then shape order: deterministic.
    instances.sort_by_key(|p| {
        (
            std::cmp::Reverse(p.shape.memory_slots()),
            std::cmp::Reverse(p.shape.compute_slices()),
            p.shape,
        )
    });
    let mut placed = Vec::with_capacity(instances.len());
    if !place_rest(&instances, GpuLayout::new(), &mut placed) {
        return Err(LayoutError::DoesNotFit {
            model,
            reason: "no arrangement of the profiles' valid start slots keeps them apart".to_owned(),
        });
    }
    placed.sort_by_key(|p: &PlannedInstance| (p.placement.start, p.profile.shape));
    Ok(placed)
}

fn place_rest(rest: &[Profile], layout: GpuLayout, out: &mut Vec<PlannedInstance>) -> bool {
    let Some((&profile, rest)) = rest.split_first() else {
        return true;
    };
    let shape = profile.shape;
    let mut starts: Vec<u8> =
        shape.starts().iter().copied().filter(|&s| layout.can_add(shape, s)).collect();
    let free = !layout.occupied();
    starts.sort_by_key(|&s| (std::cmp::Reverse(capacity(free & !shape.mask_at(s))), s));
    for start in starts {
        let mut next = layout;
        next.insert(shape, start);
        out.push(PlannedInstance {
            profile,
            placement: Placement { start, size: shape.memory_slots() },
        });
        if place_rest(rest, next, out) {
            return true;
        }
        out.pop();
    }
    false
}
