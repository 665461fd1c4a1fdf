//! The simulated backend: GPUs described by a `--sim-gpus` SPEC, with the real MIG placement rules
//! and identifiers that are the same on every start for the same SPEC and node name.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use carrel_gpu::{plan_layout, GpuLayout, GpuModel, Placement, Profile, Shape};
use parking_lot::Mutex;

use crate::{
    BackendError, GpuBackend, GpuInfo, MigInstance, MigMode, ModelName, Process, Utilization,
};

/// The SPEC syntax, as error messages show it.
pub const SPEC_SYNTAX: &str =
    "MODELxCOUNT[:mig=PROFILE*N[,PROFILE*N...]], MODEL one of a100-40gb, \
a100-80gb, h100-80gb, h100-94gb, h200, b200 (e.g. h200x8, a100-80gbx4:mig=1g.10gb*7, \
h100-80gbx1:mig=4g.40gb*1,3g.40gb*1)";

/// Why a SPEC cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The SPEC does not parse.
    #[error("invalid GPU spec {spec:?}: {reason}; expected {SPEC_SYNTAX}")]
    Syntax {
        /// The SPEC given.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// The MIG layout cannot be placed on the model.
    #[error("invalid GPU spec {spec:?}: {reason}")]
    Layout {
        /// The SPEC given.
        spec: String,
        /// Why the layout cannot be placed.
        reason: String,
    },
}

/// A parsed `--sim-gpus` SPEC: `COUNT` GPUs of `model`, each starting with the `mig` layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSpec {
    /// The GPU model.
    pub model: GpuModel,
    /// GPUs per node.
    pub count: u32,
    /// Initial MIG layout of every GPU: canonical profile name → instances (empty: none).
    pub mig: BTreeMap<String, u32>,
}

/// Most GPUs one simulated node may have.
const MAX_GPUS: u32 = 64;

impl FromStr for SimSpec {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, SpecError> {
        let err = |reason: String| SpecError::Syntax { spec: spec.to_owned(), reason };
        let trimmed = spec.trim();
        let (head, mig) = match trimmed.split_once(':') {
            Some((h, m)) => (h, Some(m)),
            None => (trimmed, None),
        };
        let (slug, count) = head
            .rsplit_once(['x', 'X'])
            .ok_or_else(|| err(format!("{head:?} has no 'x' between MODEL and COUNT")))?;
        let model =
            GpuModel::from_slug(slug).ok_or_else(|| err(format!("unknown model {slug:?}")))?;
        let count: u32 =
            count.parse().map_err(|_| err(format!("COUNT {count:?} is not a whole number")))?;
        if count == 0 || count > MAX_GPUS {
            return Err(err(format!("COUNT must be 1 to {MAX_GPUS}, not {count}")));
        }
        let mut layout = BTreeMap::new();
        if let Some(mig) = mig {
            let list = mig
                .strip_prefix("mig=")
                .ok_or_else(|| err(format!("{mig:?} after ':' must start with 'mig='")))?;
            for item in list.split(',') {
                let (name, n) = item
                    .split_once('*')
                    .ok_or_else(|| err(format!("{item:?} is not PROFILE*N")))?;
                let n: u32 =
                    n.parse().map_err(|_| err(format!("N in {item:?} is not a whole number")))?;
                if n == 0 {
                    return Err(err(format!("N in {item:?} must be at least 1")));
                }
                let profile = model.profile(name).ok_or_else(|| {
                    let known: Vec<&str> = model.profiles().map(Profile::name).collect();
                    err(format!("{model} has no MIG profile {name:?}; it has {}", known.join(", ")))
                })?;
                let c = layout.entry(profile.name().to_owned()).or_insert(0u32);
                *c = c.saturating_add(n);
            }
        }
        Ok(SimSpec { model, count, mig: layout })
    }
}

impl fmt::Display for SimSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.model.slug(), self.count)?;
        for (i, (name, n)) in self.mig.iter().enumerate() {
            f.write_str(if i == 0 { ":mig=" } else { "," })?;
            write!(f, "{name}*{n}")?;
        }
        Ok(())
    }
}

/// Simulated memory of each model, bytes (what the driver reports, approximately).
fn memory_bytes(model: GpuModel) -> u64 {
    const MIB: u64 = 1 << 20;
    MIB * match model {
        GpuModel::A100_40GB => 40_960,
        GpuModel::A100_80GB => 81_920,
        GpuModel::H100_80GB => 81_559,
        GpuModel::H100_94GB => 95_830,
        GpuModel::H200_141GB => 143_771,
        GpuModel::B200_180GB => 183_359,
    }
}

/// 64-bit FNV-1a over the parts, each followed by a separator.
fn fnv(salt: u64, parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ salt;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    // splitmix64 finaliser, so that nearby inputs differ in every digit.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// `PREFIX-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` derived from the parts.
fn uuid(prefix: &str, parts: &[&str]) -> String {
    let hi = fnv(1, parts);
    let lo = fnv(2, parts);
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

#[derive(Debug)]
struct SimInstance {
    info: MigInstance,
    shape: Shape,
    processes: Vec<Process>,
}

#[derive(Debug)]
struct SimGpu {
    info: GpuInfo,
    model: GpuModel,
    instances: Vec<SimInstance>,
    processes: Vec<Process>,
    /// Instances created so far, so that a re-created instance gets a new UUID, as on hardware.
    generation: u64,
}

impl SimGpu {
    fn layout(&self) -> GpuLayout {
        let mut layout = GpuLayout::new();
        for i in &self.instances {
            // Instances were only ever added through GpuLayout::add, so they fit.
            let _ =
                layout.add(Profile { model: self.model, shape: i.shape }, i.info.placement.start);
        }
        layout
    }

    fn create(
        &mut self,
        node: &str,
        shape: Shape,
        placement: Placement,
    ) -> Result<MigInstance, BackendError> {
        let index = self.info.index;
        if !self.info.mig_enabled {
            return Err(BackendError::MigDisabled { index });
        }
        let profile = Profile { model: self.model, shape };
        if placement.size != shape.memory_slots() {
            return Err(BackendError::InvalidPlacement {
                index,
                reason: format!(
                    "{profile} takes {} memory slots, not {}",
                    shape.memory_slots(),
                    placement.size
                ),
            });
        }
        let mut layout = self.layout();
        layout
            .add(profile, placement.start)
            .map_err(|e| BackendError::InvalidPlacement { index, reason: e.to_string() })?;
        let gpu_instance_id = (1..)
            .find(|id| self.instances.iter().all(|i| i.info.gpu_instance_id != *id))
            .unwrap_or(u32::MAX);
        let generation = self.generation.to_string();
        self.generation += 1;
        let info = MigInstance {
            uuid: Some(uuid(
                "MIG",
                &[node, &self.info.uuid, &generation, profile.name(), &placement.start.to_string()],
            )),
            gpu_index: index,
            profile: profile.name().to_owned(),
            placement: placement.into(),
            gpu_instance_id,
            compute_instance_id: Some(0),
        };
        self.instances.push(SimInstance { info: info.clone(), shape, processes: Vec::new() });
        self.instances.sort_by_key(|i| i.info.placement.start);
        Ok(info)
    }
}

/// A simulated node's GPUs. Deterministic: the same SPEC and node name give the same GPUs and
/// instances with the same UUIDs; the same sequence of calls then gives the same results.
#[derive(Debug)]
pub struct Simulator {
    node: String,
    gpus: Mutex<Vec<SimGpu>>,
}

impl Simulator {
    /// The GPUs of `spec` on node `node`: all in MIG mode, each with the spec's layout placed as
    /// [`plan_layout`] places it.
    pub fn new(spec: &SimSpec, node: &str) -> Result<Simulator, SpecError> {
        let planned = plan_layout(spec.model, &spec.mig)
            .map_err(|e| SpecError::Layout { spec: spec.to_string(), reason: e.to_string() })?;
        let mut gpus = Vec::new();
        for index in 0..spec.count {
            let mut gpu = SimGpu {
                info: GpuInfo {
                    index,
                    uuid: uuid("GPU", &[node, spec.model.slug(), &index.to_string()]),
                    model: ModelName::Known(spec.model),
                    memory_bytes: memory_bytes(spec.model),
                    mig_enabled: true,
                },
                model: spec.model,
                instances: Vec::new(),
                processes: Vec::new(),
                generation: 0,
            };
            for p in &planned {
                gpu.create(node, p.profile.shape, p.placement).map_err(|e| SpecError::Layout {
                    spec: spec.to_string(),
                    reason: e.to_string(),
                })?;
            }
            gpus.push(gpu);
        }
        Ok(Simulator { node: node.to_owned(), gpus: Mutex::new(gpus) })
    }

    /// Parse `spec` and build its GPUs for node `node`.
    pub fn from_spec(spec: &str, node: &str) -> Result<Simulator, SpecError> {
        Simulator::new(&spec.parse()?, node)
    }

    /// The node name the identifiers derive from.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Add a simulated process on device `device_uuid` (a GPU or MIG UUID).
    pub fn add_process(
        &self,
        device_uuid: &str,
        pid: u32,
        used_memory_bytes: Option<u64>,
    ) -> Result<(), BackendError> {
        let mut gpus = self.gpus.lock();
        let process = Process { pid, used_memory_bytes, device: device_uuid.to_owned() };
        for gpu in gpus.iter_mut() {
            if gpu.info.uuid == device_uuid {
                gpu.processes.push(process);
                return Ok(());
            }
            if let Some(i) =
                gpu.instances.iter_mut().find(|i| i.info.uuid.as_deref() == Some(device_uuid))
            {
                i.processes.push(process);
                return Ok(());
            }
        }
        Err(BackendError::DeviceNotFound { uuid: device_uuid.to_owned() })
    }

    /// Remove simulated process `pid` from device `device_uuid`; whether it was there.
    pub fn remove_process(&self, device_uuid: &str, pid: u32) -> bool {
        let mut gpus = self.gpus.lock();
        let all = gpus.iter_mut().flat_map(|g| {
            std::iter::once(&mut g.processes)
                .chain(g.instances.iter_mut().map(|i| &mut i.processes))
        });
        let mut removed = false;
        for list in all {
            let before = list.len();
            list.retain(|p| !(p.pid == pid && p.device == device_uuid));
            removed |= list.len() != before;
        }
        removed
    }

    /// Enable or disable MIG mode on GPU `index` (immediately; no reset simulated). Disabling is
    /// refused while instances exist.
    pub fn set_mig_mode(&self, index: u32, enabled: bool) -> Result<(), BackendError> {
        let mut gpus = self.gpus.lock();
        let gpu = gpus.get_mut(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        if !enabled && !gpu.instances.is_empty() {
            return Err(BackendError::InUse {
                device: gpu.info.uuid.clone(),
                reason: format!("{} MIG instances exist", gpu.instances.len()),
            });
        }
        gpu.info.mig_enabled = enabled;
        Ok(())
    }
}

impl GpuBackend for Simulator {
    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError> {
        Ok(self.gpus.lock().iter().map(|g| g.info.clone()).collect())
    }

    fn mig_mode(&self, index: u32) -> Result<MigMode, BackendError> {
        let gpus = self.gpus.lock();
        let gpu = gpus.get(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        Ok(MigMode { current: gpu.info.mig_enabled, pending: gpu.info.mig_enabled })
    }

    fn instances(&self, index: u32) -> Result<Vec<MigInstance>, BackendError> {
        let gpus = self.gpus.lock();
        let gpu = gpus.get(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        Ok(gpu.instances.iter().map(|i| i.info.clone()).collect())
    }

    fn create_instance(
        &self,
        index: u32,
        shape: Shape,
        placement: Placement,
    ) -> Result<MigInstance, BackendError> {
        let mut gpus = self.gpus.lock();
        let gpu = gpus.get_mut(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        gpu.create(&self.node, shape, placement)
    }

    fn destroy_instance(&self, index: u32, gpu_instance_id: u32) -> Result<(), BackendError> {
        let mut gpus = self.gpus.lock();
        let gpu = gpus.get_mut(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        let pos = gpu
            .instances
            .iter()
            .position(|i| i.info.gpu_instance_id == gpu_instance_id)
            .ok_or(BackendError::InstanceNotFound { index, gpu_instance_id })?;
        let inst = &gpu.instances[pos];
        if !inst.processes.is_empty() {
            let pids: Vec<String> = inst.processes.iter().map(|p| p.pid.to_string()).collect();
            return Err(BackendError::InUse {
                device: inst
                    .info
                    .uuid
                    .clone()
                    .unwrap_or_else(|| format!("GPU {index} GI {gpu_instance_id}")),
                reason: format!("processes {} are running on it", pids.join(", ")),
            });
        }
        gpu.instances.remove(pos);
        Ok(())
    }

    fn processes(&self, device_uuid: &str) -> Result<Vec<Process>, BackendError> {
        let gpus = self.gpus.lock();
        for gpu in gpus.iter() {
            if gpu.info.uuid == device_uuid {
                let mut all = gpu.processes.clone();
                all.extend(gpu.instances.iter().flat_map(|i| i.processes.iter().cloned()));
                return Ok(all);
            }
            if let Some(i) =
                gpu.instances.iter().find(|i| i.info.uuid.as_deref() == Some(device_uuid))
            {
                return Ok(i.processes.clone());
            }
        }
        Err(BackendError::DeviceNotFound { uuid: device_uuid.to_owned() })
    }

    fn utilization(&self, index: u32) -> Result<Option<Utilization>, BackendError> {
        let gpus = self.gpus.lock();
        let gpu = gpus.get(index as usize).ok_or(BackendError::GpuNotFound { index })?;
        // NVML does not report utilisation in MIG mode; an idle GPU otherwise.
        Ok((!gpu.info.mig_enabled).then_some(Utilization { gpu_percent: 0, memory_percent: 0 }))
    }
}
