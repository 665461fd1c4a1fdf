//! The MIG profile catalogue: which GPU instance profiles each GPU model offers, their NVML
//! profile ids, sizes, valid start slots and instance limits.
//!
//! Sources (facts only): NVIDIA's *Multi-Instance GPU User Guide*, "Supported MIG Profiles"
//! (profile names, fractions of memory and SMs, number of instances per profile and model),
//! `nvml.h` (`NVML_GPU_INSTANCE_PROFILE_*` ids) and the placements NVML reports through
//! `nvmlDeviceGetGpuInstancePossiblePlacements` (`nvidia-smi mig -lgipp`), which are the same on
//! every model listed here: `{0..6}:1` for 1g and 1g+me, `{0,2,4,6}:2` for the double-memory 1g,
//! `{0,2,4}:2` for 2g, `{0,4}:4` for 3g, `{0}:4` for 4g and `{0}:8` for 7g.
//!
//! The geometry of a profile (its [`Shape`]) is the same on all six models; only the names (the
//! memory in them) differ. A name can mean different shapes on different models: `1g.10gb` is the
//! double-memory 1g on an A100-40GB and the plain 1g on an A100-80GB or H100-80GB.

use std::fmt;

/// Memory slots per GPU (eighths of its memory).
pub const MEMORY_SLOTS: u8 = 8;
/// Compute slices per GPU (sevenths of its SMs).
pub const COMPUTE_SLICES: u8 = 7;
/// Prefix of NVIDIA's device-plugin resource names in the mixed strategy.
pub const RESOURCE_PREFIX: &str = "nvidia.com/mig-";

/// A GPU model that supports MIG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GpuModel {
    /// NVIDIA A100 40GB (SXM4 and PCIe).
    A100_40GB,
    /// NVIDIA A100 80GB (SXM4 and PCIe).
    A100_80GB,
    /// NVIDIA H100 80GB (SXM5 and PCIe).
    H100_80GB,
    /// NVIDIA H100 94GB (NVL, SXM5 94GB). Its names are those of NVIDIA's mig-parted default
    /// configuration for H100 NVL and of `nvidia-smi mig -lgip` on one (`1g.12gb` id 19,
    /// `1g.12gb+me` id 20, `1g.24gb` id 15).
    H100_94GB,
    /// NVIDIA H200 141GB (SXM and NVL).
    H200_141GB,
    /// NVIDIA B200 180GB.
    B200_180GB,
}

impl GpuModel {
    /// Every model in the catalogue.
    pub const ALL: [GpuModel; 6] = [
        GpuModel::A100_40GB,
        GpuModel::A100_80GB,
        GpuModel::H100_80GB,
        GpuModel::H100_94GB,
        GpuModel::H200_141GB,
        GpuModel::B200_180GB,
    ];

    /// The model's short name, as the `--sim-gpus` SPEC writes it (`h200`, `a100-80gb`, …).
    pub fn slug(self) -> &'static str {
        match self {
            GpuModel::A100_40GB => "a100-40gb",
            GpuModel::A100_80GB => "a100-80gb",
            GpuModel::H100_80GB => "h100-80gb",
            GpuModel::H100_94GB => "h100-94gb",
            GpuModel::H200_141GB => "h200",
            GpuModel::B200_180GB => "b200",
        }
    }

    /// The product name the driver gives the model (`nvidia-smi -L`, NVML's device name), for
    /// its usual form factor (SXM).
    pub fn product_name(self) -> &'static str {
        match self {
            GpuModel::A100_40GB => "NVIDIA A100-SXM4-40GB",
            GpuModel::A100_80GB => "NVIDIA A100-SXM4-80GB",
            GpuModel::H100_80GB => "NVIDIA H100 80GB HBM3",
            GpuModel::H100_94GB => "NVIDIA H100 NVL",
            GpuModel::H200_141GB => "NVIDIA H200",
            GpuModel::B200_180GB => "NVIDIA B200",
        }
    }

    /// The model named by `slug` (case-insensitive; `h200-141gb` and `b200-180gb` also accepted).
    pub fn from_slug(slug: &str) -> Option<GpuModel> {
        let s = slug.to_ascii_lowercase();
        match s.as_str() {
            "h200-141gb" => Some(GpuModel::H200_141GB),
            "b200-180gb" => Some(GpuModel::B200_180GB),
            _ => GpuModel::ALL.into_iter().find(|m| m.slug() == s),
        }
    }

    /// Profile names of this model, indexed by [`Shape::index`].
    fn names(self) -> &'static [&'static str; 7] {
        match self {
            GpuModel::A100_40GB => {
                &["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
            }
            GpuModel::A100_80GB | GpuModel::H100_80GB => {
                &["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
            }
            GpuModel::H100_94GB => {
                &["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]
            }
            GpuModel::H200_141GB => {
                &["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
            }
            GpuModel::B200_180GB => {
                &["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"]
            }
        }
    }

    /// Every profile this model offers, smallest first.
    pub fn profiles(self) -> impl Iterator<Item = Profile> {
        Shape::ALL.into_iter().map(move |shape| Profile { model: self, shape })
    }

    /// The profile of this model with that name (`1g.18gb`, `mig-1g.18gb`,
    /// `nvidia.com/mig-1g.18gb.me` are all accepted), if the model offers it.
    pub fn profile(self, name: &str) -> Option<Profile> {
        let canonical = canonical_profile_name(name)?;
        self.shape_named(&canonical).map(|shape| Profile { model: self, shape })
    }

    /// The shape this model gives the canonical profile name `name`.
    pub(crate) fn shape_named(self, name: &str) -> Option<Shape> {
        self.names().iter().position(|n| *n == name).map(|i| Shape::ALL[i])
    }
}

impl fmt::Display for GpuModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.slug())
    }
}

/// A model is written as its slug (`h200`, `a100-80gb`).
impl serde::Serialize for GpuModel {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.slug())
    }
}

impl<'de> serde::Deserialize<'de> for GpuModel {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let slug = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        GpuModel::from_slug(&slug).ok_or_else(|| {
            serde::de::Error::custom(format!("{slug:?} is not a GPU model of the MIG catalogue"))
        })
    }
}

/// The geometry of a GPU instance profile, common to every model in the catalogue. One shape is
/// one NVML GPU instance profile id.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Shape {
    /// 1 compute slice, 1 memory slot (`NVML_GPU_INSTANCE_PROFILE_1_SLICE`).
    G1,
    /// 1 compute slice, 1 memory slot, with the GPU's media engine
    /// (`NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1`, the `+me` profile).
    G1Me,
    /// 1 compute slice, 2 memory slots (`NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2`).
    G1DoubleMemory,
    /// 2 compute slices, 2 memory slots (`NVML_GPU_INSTANCE_PROFILE_2_SLICE`).
    G2,
    /// 3 compute slices, 4 memory slots (`NVML_GPU_INSTANCE_PROFILE_3_SLICE`).
    G3,
    /// 4 compute slices, 4 memory slots (`NVML_GPU_INSTANCE_PROFILE_4_SLICE`).
    G4,
    /// 7 compute slices, all 8 memory slots (`NVML_GPU_INSTANCE_PROFILE_7_SLICE`).
    G7,
}

impl Shape {
    /// Every shape, smallest first (the order of [`Shape::index`]).
    pub const ALL: [Shape; 7] =
        [Shape::G1, Shape::G1Me, Shape::G1DoubleMemory, Shape::G2, Shape::G3, Shape::G4, Shape::G7];

    /// Position in [`Shape::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The NVML GPU instance profile id (`NVML_GPU_INSTANCE_PROFILE_*`).
    pub fn nvml_id(self) -> u32 {
        match self {
            Shape::G1 => 0x0,
            Shape::G2 => 0x1,
            Shape::G3 => 0x2,
            Shape::G4 => 0x3,
            Shape::G7 => 0x4,
            Shape::G1Me => 0x7,
            Shape::G1DoubleMemory => 0x9,
        }
    }

    /// The shape of an NVML GPU instance profile id.
    pub fn from_nvml_id(id: u32) -> Option<Shape> {
        Shape::ALL.into_iter().find(|s| s.nvml_id() == id)
    }

    /// Compute slices (of [`COMPUTE_SLICES`]).
    pub fn compute_slices(self) -> u8 {
        match self {
            Shape::G1 | Shape::G1Me | Shape::G1DoubleMemory => 1,
            Shape::G2 => 2,
            Shape::G3 => 3,
            Shape::G4 => 4,
            Shape::G7 => 7,
        }
    }

    /// Memory slots (of [`MEMORY_SLOTS`]) an instance takes: its placement `size`.
    pub fn memory_slots(self) -> u8 {
        match self {
            Shape::G1 | Shape::G1Me => 1,
            Shape::G1DoubleMemory | Shape::G2 => 2,
            Shape::G3 | Shape::G4 => 4,
            Shape::G7 => 8,
        }
    }

    /// The memory slots an instance may start at, ascending.
    pub fn starts(self) -> &'static [u8] {
        match self {
            Shape::G1 | Shape::G1Me => &[0, 1, 2, 3, 4, 5, 6],
            Shape::G1DoubleMemory => &[0, 2, 4, 6],
            Shape::G2 => &[0, 2, 4],
            Shape::G3 => &[0, 4],
            Shape::G4 | Shape::G7 => &[0],
        }
    }

    /// Most instances of this shape one GPU can hold.
    pub fn max_instances(self) -> u8 {
        match self {
            Shape::G1 => 7,
            Shape::G1DoubleMemory => 4,
            Shape::G2 => 3,
            Shape::G3 => 2,
            Shape::G1Me | Shape::G4 | Shape::G7 => 1,
        }
    }

    /// Whether an instance holds the GPU's one media engine (a `+me` profile).
    pub fn media_engine(self) -> bool {
        self == Shape::G1Me
    }

    /// Whether an instance may start at `start`.
    pub fn valid_start(self, start: u8) -> bool {
        self.starts().contains(&start)
    }

    /// The memory slots an instance at `start` takes, as a bit mask (bit i = slot i).
    pub fn mask_at(self, start: u8) -> u8 {
        let ones: u16 = (1u16 << self.memory_slots()) - 1;
        ((ones << start) & 0xff) as u8
    }
}

/// One MIG profile of one GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Profile {
    /// The GPU model.
    pub model: GpuModel,
    /// Its geometry.
    pub shape: Shape,
}

impl Profile {
    /// The name NVIDIA prints (`1g.18gb`, `1g.18gb+me`).
    pub fn name(self) -> &'static str {
        self.model.names()[self.shape.index()]
    }

    /// The device-plugin resource name (`nvidia.com/mig-1g.18gb`; `+` becomes `.`:
    /// `nvidia.com/mig-1g.18gb.me`).
    pub fn resource_name(self) -> String {
        resource_name(self.name())
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The device-plugin resource name of a canonical profile name.
pub fn resource_name(profile: &str) -> String {
    format!("{RESOURCE_PREFIX}{}", profile.replace('+', "."))
}

/// Every profile name in the catalogue, sorted and deduplicated.
pub fn known_profile_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> =
        GpuModel::ALL.into_iter().flat_map(|m| m.names().iter().copied()).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The canonical name (`1g.18gb+me`) of a profile written as `1g.18gb+me`, `mig-1g.18gb+me`,
/// `nvidia.com/mig-1g.18gb.me` or `mig-1g.18gb.me`, if some model in the catalogue offers it.
pub fn canonical_profile_name(name: &str) -> Option<String> {
    let bare = name.strip_prefix("nvidia.com/").unwrap_or(name);
    let bare = bare.strip_prefix("mig-").unwrap_or(bare);
    let bare = match bare.strip_suffix(".me") {
        Some(stem) => format!("{stem}+me"),
        None => bare.to_owned(),
    };
    let known = GpuModel::ALL.into_iter().any(|m| m.names().contains(&bare.as_str()));
    known.then_some(bare)
}
