//! Carrel's GPU backends: what a node agent asks of the GPUs on its machine, behind one trait.
//!
//! - [`GpuBackend`]: list GPUs, read MIG mode, list / create / destroy MIG instances at explicit
//!   placements, list processes, read utilisation.
//! - [`Simulator`]: a deterministic in-memory backend built from a `--sim-gpus` SPEC
//!   (`h200x8`, `a100-80gbx4:mig=1g.10gb*7`), enforcing the real placement rules of
//!   [`carrel_gpu::GpuLayout`].
//! - [`Nvml`]: the real backend on `nvml-wrapper`, loading `libnvidia-ml.so.1` at run time; MIG
//!   instance management goes through raw `nvml-wrapper-sys` calls.
//!
//! The data types here are plain and serde-serialisable, so the agent can publish them as they are.

use std::fmt;

use carrel_gpu::{GpuModel, Placement, Profile, Shape};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod nvml;
pub mod scan;
mod sim;

pub use nvml::{Nvml, NVML_LIBRARY};
pub use sim::{SimSpec, Simulator, SpecError, SPEC_SYNTAX};

/// A GPU's model: one of the catalogue's when recognised, else the name the driver reports.
/// Serialised as a string: the model's slug (`h200`, `a100-80gb`) or the raw name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelName {
    /// A model of the MIG catalogue.
    Known(GpuModel),
    /// A model the catalogue does not know, by the driver's name for it.
    Other(String),
}

impl ModelName {
    /// The catalogue model, if recognised.
    pub fn known(&self) -> Option<GpuModel> {
        match self {
            ModelName::Known(m) => Some(*m),
            ModelName::Other(_) => None,
        }
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelName::Known(m) => f.write_str(m.slug()),
            ModelName::Other(name) => f.write_str(name),
        }
    }
}

impl Serialize for ModelName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ModelName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(match GpuModel::from_slug(&s) {
            Some(m) => ModelName::Known(m),
            None => ModelName::Other(s),
        })
    }
}

/// The catalogue model of a GPU the driver names `name` (`NVIDIA H100 80GB HBM3`,
/// `NVIDIA A100-SXM4-40GB`, `NVIDIA H200`), with `memory_bytes` of memory to tell the memory
/// variants of one chip apart; `None` for a GPU outside the catalogue.
pub fn recognise_model(name: &str, memory_bytes: u64) -> Option<GpuModel> {
    const GIB: u64 = 1 << 30;
    let upper = name.to_ascii_uppercase();
    if upper.contains("A100") {
        // A100 40GB reports 40 GiB, A100 80GB 80 GiB.
        Some(if memory_bytes > 60 * GIB { GpuModel::A100_80GB } else { GpuModel::A100_40GB })
    } else if upper.contains("H100") {
        // H100 80GB reports about 79.6 GiB; H100 NVL / 94GB about 93.6 GiB.
        Some(if memory_bytes > 87 * GIB || upper.contains("94GB") || upper.contains("NVL") {
            GpuModel::H100_94GB
        } else {
            GpuModel::H100_80GB
        })
    } else if upper.contains("H200") {
        Some(GpuModel::H200_141GB)
    } else if upper.contains("B200") {
        Some(GpuModel::B200_180GB)
    } else {
        None
    }
}

/// One physical GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index on its node.
    pub index: u32,
    /// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub uuid: String,
    /// The model.
    pub model: ModelName,
    /// Total memory, bytes.
    pub memory_bytes: u64,
    /// Whether MIG mode is currently enabled.
    pub mig_enabled: bool,
}

/// A GPU's MIG mode: current, and pending (applied at the next GPU reset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigMode {
    /// Enabled now.
    pub current: bool,
    /// Enabled after the next reset.
    pub pending: bool,
}

/// Where a MIG instance sits, in memory slots (serde form of [`carrel_gpu::Placement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MigPlacement {
    /// First memory slot.
    pub start: u8,
    /// Memory slots taken.
    pub size: u8,
}

impl From<Placement> for MigPlacement {
    fn from(p: Placement) -> Self {
        MigPlacement { start: p.start, size: p.size }
    }
}

impl From<MigPlacement> for Placement {
    fn from(p: MigPlacement) -> Self {
        Placement { start: p.start, size: p.size }
    }
}

/// One MIG instance: a GPU instance and (normally) its one compute instance spanning it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// `MIG-xxxxxxxx-…`; `None` only for a real GPU instance that has no compute instance (one
    /// made outside Carrel), which has no MIG device yet but still occupies its slots.
    pub uuid: Option<String>,
    /// Index of the parent GPU.
    pub gpu_index: u32,
    /// Profile name as NVIDIA prints it for the parent's model (`1g.18gb`, `1g.18gb+me`).
    pub profile: String,
    /// Where it sits.
    pub placement: MigPlacement,
    /// NVML GPU instance id (unique on its GPU).
    pub gpu_instance_id: u32,
    /// NVML compute instance id within the GPU instance; `None` with `uuid`.
    pub compute_instance_id: Option<u32>,
}

impl MigInstance {
    /// The catalogue profile of this instance on a GPU of `model`, if the model offers it.
    pub fn profile_on(&self, model: GpuModel) -> Option<Profile> {
        model.profile(&self.profile)
    }
}

/// A process using a GPU or MIG device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Process {
    /// Process id (in the host's PID namespace).
    pub pid: u32,
    /// Device memory in use, when the driver reports it.
    pub used_memory_bytes: Option<u64>,
    /// UUID of the device it runs on (`GPU-…` or `MIG-…`).
    pub device: String,
}

/// Utilisation over the driver's last sample period, percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Utilization {
    /// Time one or more kernels ran.
    pub gpu_percent: u32,
    /// Time device memory was read or written.
    pub memory_percent: u32,
}

/// Why a backend call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// No GPU at that index.
    #[error("no GPU with index {index}")]
    GpuNotFound {
        /// The index asked for.
        index: u32,
    },
    /// No GPU or MIG device with that UUID.
    #[error("no GPU or MIG device with UUID {uuid}")]
    DeviceNotFound {
        /// The UUID asked for.
        uuid: String,
    },
    /// No GPU instance with that id on the GPU.
    #[error("GPU {index} has no GPU instance with id {gpu_instance_id}")]
    InstanceNotFound {
        /// The GPU index.
        index: u32,
        /// The GPU instance id asked for.
        gpu_instance_id: u32,
    },
    /// The instance cannot be created there.
    #[error("cannot create a MIG instance on GPU {index}: {reason}")]
    InvalidPlacement {
        /// The GPU index.
        index: u32,
        /// Why.
        reason: String,
    },
    /// The GPU is not in MIG mode.
    #[error("GPU {index} is not in MIG mode")]
    MigDisabled {
        /// The GPU index.
        index: u32,
    },
    /// The device is in use (processes on it).
    #[error("{device} is in use: {reason}")]
    InUse {
        /// The device (UUID, or GPU index and instance id).
        device: String,
        /// Why.
        reason: String,
    },
    /// The NVIDIA driver library could not be loaded or initialised.
    #[error("NVML is unavailable: {message}")]
    LibraryUnavailable {
        /// What went wrong, naming the library.
        message: String,
    },
    /// An NVML call failed.
    #[error("{function} failed: {message} (NVML return code {code})")]
    Nvml {
        /// The NVML function.
        function: String,
        /// Its `nvmlReturn_t` (0 when the failure came from the wrapper, not from NVML).
        code: u32,
        /// The driver's text for it.
        message: String,
    },
}

/// What a node agent needs of the GPUs on its machine. Implementations are thread-safe; every
/// call reads the current state (no caching beyond what the driver does).
pub trait GpuBackend: Send + Sync + fmt::Debug {
    /// Every GPU, by index.
    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError>;

    /// MIG mode of GPU `index`.
    fn mig_mode(&self, index: u32) -> Result<MigMode, BackendError>;

    /// MIG instances of GPU `index`, ordered by placement start.
    fn instances(&self, index: u32) -> Result<Vec<MigInstance>, BackendError>;

    /// Create a MIG instance of `shape` at `placement` on GPU `index` (a GPU instance and one
    /// compute instance spanning it). Refused with [`BackendError::InvalidPlacement`] when the
    /// placement breaks the MIG rules (invalid start or size, overlap, too many of the profile,
    /// the media engine taken, compute exhausted).
    fn create_instance(
        &self,
        index: u32,
        shape: Shape,
        placement: Placement,
    ) -> Result<MigInstance, BackendError>;

    /// Destroy GPU instance `gpu_instance_id` of GPU `index` with its compute instances;
    /// [`BackendError::InUse`] while processes run on it.
    fn destroy_instance(&self, index: u32, gpu_instance_id: u32) -> Result<(), BackendError>;

    /// Processes on a GPU (`GPU-…`; in MIG mode those of all its instances) or MIG device (`MIG-…`).
    fn processes(&self, device_uuid: &str) -> Result<Vec<Process>, BackendError>;

    /// Utilisation of GPU `index`, where the driver reports it (not in MIG mode).
    fn utilization(&self, index: u32) -> Result<Option<Utilization>, BackendError>;
}
