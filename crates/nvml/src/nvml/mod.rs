//! The real backend: NVML through `nvml-wrapper`, loaded at run time, so that a machine without
//! the NVIDIA driver gets [`BackendError::LibraryUnavailable`] instead of a link failure. MIG
//! instance management, which `nvml-wrapper` does not wrap, lives in [`ffi`].

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;

use carrel_gpu::{GpuLayout, Placement, Profile, Shape};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;

use crate::{
    recognise_model, BackendError, GpuBackend, GpuInfo, MigInstance, MigMode, ModelName, Process,
    Utilization,
};

mod ffi;

/// The NVIDIA driver library NVML is loaded from (the soname the driver installs).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// The real GPUs of this machine, through NVML.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
}

impl fmt::Debug for Nvml {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nvml").finish_non_exhaustive()
    }
}

fn wrap(function: &str, e: NvmlError) -> BackendError {
    BackendError::Nvml { function: function.to_owned(), code: 0, message: e.to_string() }
}

impl Nvml {
    /// Load [`NVML_LIBRARY`] and initialise NVML. Without the library (no NVIDIA driver),
    /// [`BackendError::LibraryUnavailable`] saying so; never panics.
    pub fn init() -> Result<Nvml, BackendError> {
        Nvml::init_from(NVML_LIBRARY)
    }

    /// As [`Nvml::init`], loading the library from `path` (a file name or a path).
    pub fn init_from(path: &str) -> Result<Nvml, BackendError> {
        match nvml_wrapper::Nvml::builder().lib_path(OsStr::new(path)).init() {
            Ok(nvml) => Ok(Nvml { nvml }),
            Err(NvmlError::LibloadingError(e)) => Err(BackendError::LibraryUnavailable {
                message: format!("NVIDIA driver library {path} not found: {e}"),
            }),
            Err(NvmlError::FailedToLoadSymbol(e)) => Err(BackendError::LibraryUnavailable {
                message: format!("NVIDIA driver library {path} lacks nvmlInit_v2: {e}"),
            }),
            Err(e) => Err(BackendError::LibraryUnavailable {
                message: format!(
                    "NVIDIA driver library {path} loaded, but NVML did not initialise: {e}"
                ),
            }),
        }
    }

    fn device(&self, index: u32) -> Result<Device<'_>, BackendError> {
        let count = self.nvml.device_count().map_err(|e| wrap("nvmlDeviceGetCount", e))?;
        if index >= count {
            return Err(BackendError::GpuNotFound { index });
        }
        self.nvml.device_by_index(index).map_err(|e| wrap("nvmlDeviceGetHandleByIndex", e))
    }

    fn info(&self, index: u32, device: &Device<'_>) -> Result<GpuInfo, BackendError> {
        let uuid = device.uuid().map_err(|e| wrap("nvmlDeviceGetUUID", e))?;
        let name = device.name().map_err(|e| wrap("nvmlDeviceGetName", e))?;
        let memory_bytes =
            device.memory_info().map_err(|e| wrap("nvmlDeviceGetMemoryInfo", e))?.total;
        let mig_enabled = match device.mig_mode() {
            Ok(mode) => mode.current == 1,
            Err(NvmlError::NotSupported) => false,
            Err(e) => return Err(wrap("nvmlDeviceGetMigMode", e)),
        };
        let model = match recognise_model(&name, memory_bytes) {
            Some(m) => ModelName::Known(m),
            None => ModelName::Other(name),
        };
        Ok(GpuInfo { index, uuid, model, memory_bytes, mig_enabled })
    }

    fn require_mig(&self, index: u32, device: &Device<'_>) -> Result<(), BackendError> {
        if self.mig_mode_of(device)?.current {
            Ok(())
        } else {
            Err(BackendError::MigDisabled { index })
        }
    }

    fn mig_mode_of(&self, device: &Device<'_>) -> Result<MigMode, BackendError> {
        match device.mig_mode() {
            Ok(m) => Ok(MigMode { current: m.current == 1, pending: m.pending == 1 }),
            Err(NvmlError::NotSupported) => Ok(MigMode { current: false, pending: false }),
            Err(e) => Err(wrap("nvmlDeviceGetMigMode", e)),
        }
    }

    fn list(&self, index: u32, device: &Device<'_>) -> Result<Vec<MigInstance>, BackendError> {
        let info = self.info(index, device)?;
        let lib = self.nvml.lib();
        let mig_devices: BTreeMap<u32, (u32, String)> = {
            let mut m = BTreeMap::new();
            for d in ffi::mig_devices(lib, device)? {
                // Keep the lowest compute instance of each GPU instance.
                m.entry(d.gpu_instance_id).or_insert((d.compute_instance_id, d.uuid));
            }
            m
        };
        let mut out = Vec::new();
        for gi in ffi::gpu_instances(lib, device)? {
            let profile = match info.model.known() {
                Some(model) => Profile { model, shape: gi.shape }.name().to_owned(),
                None => format!("{:?}", gi.shape),
            };
            let (ci, uuid) = match mig_devices.get(&gi.gpu_instance_id) {
                Some((ci, uuid)) => (Some(*ci), Some(uuid.clone())),
                None => (None, None),
            };
            out.push(MigInstance {
                uuid,
                gpu_index: index,
                profile,
                placement: gi.placement.into(),
                gpu_instance_id: gi.gpu_instance_id,
                compute_instance_id: ci,
            });
        }
        out.sort_by_key(|i| (i.placement.start, i.gpu_instance_id));
        Ok(out)
    }
}

impl GpuBackend for Nvml {
    fn gpus(&self) -> Result<Vec<GpuInfo>, BackendError> {
        let count = self.nvml.device_count().map_err(|e| wrap("nvmlDeviceGetCount", e))?;
        (0..count).map(|i| self.info(i, &self.device(i)?)).collect()
    }

    fn mig_mode(&self, index: u32) -> Result<MigMode, BackendError> {
        self.mig_mode_of(&self.device(index)?)
    }

    fn instances(&self, index: u32) -> Result<Vec<MigInstance>, BackendError> {
        let device = self.device(index)?;
        if !self.mig_mode_of(&device)?.current {
            return Ok(Vec::new());
        }
        self.list(index, &device)
    }

    fn create_instance(
        &self,
        index: u32,
        shape: Shape,
        placement: Placement,
    ) -> Result<MigInstance, BackendError> {
        let device = self.device(index)?;
        self.require_mig(index, &device)?;
        if placement.size != shape.memory_slots() {
            return Err(BackendError::InvalidPlacement {
                index,
                reason: format!(
                    "{shape:?} takes {} memory slots, not {}",
                    shape.memory_slots(),
                    placement.size
                ),
            });
        }
        // Check the catalogue's rules first, for a clear reason; NVML has the last word.
        let existing = self.list(index, &device)?;
        if let Some(model) = self.info(index, &device)?.model.known() {
            let mut layout = GpuLayout::new();
            for i in &existing {
                if let Some(p) = i.profile_on(model) {
                    // A layout NVML made is valid; a failure here only means the catalogue
                    // disagrees, and NVML decides below.
                    let _ = layout.add(p, i.placement.start);
                }
            }
            layout
                .add(Profile { model, shape }, placement.start)
                .map_err(|e| BackendError::InvalidPlacement { index, reason: e.to_string() })?;
        }
        let (gi, _ci) =
            ffi::create(self.nvml.lib(), &device, shape, placement).map_err(|e| match e {
                BackendError::Nvml { code, message, .. }
                    if code == ffi::ERROR_INVALID_ARGUMENT
                        || code == ffi::ERROR_INSUFFICIENT_RESOURCES
                        || code == ffi::ERROR_NOT_SUPPORTED =>
                {
                    BackendError::InvalidPlacement { index, reason: format!("NVML: {message}") }
                }
                other => other,
            })?;
        self.list(index, &device)?.into_iter().find(|i| i.gpu_instance_id == gi).ok_or_else(|| {
            BackendError::Nvml {
                function: "nvmlDeviceGetGpuInstances".to_owned(),
                code: 0,
                message: format!("GPU instance {gi} was created but is not listed"),
            }
        })
    }

    fn destroy_instance(&self, index: u32, gpu_instance_id: u32) -> Result<(), BackendError> {
        let device = self.device(index)?;
        self.require_mig(index, &device)?;
        ffi::destroy(self.nvml.lib(), &device, gpu_instance_id).map_err(|e| match e {
            BackendError::Nvml { code, message, .. } if code == ffi::ERROR_IN_USE => {
                BackendError::InUse {
                    device: format!("GPU {index} GPU instance {gpu_instance_id}"),
                    reason: message,
                }
            }
            BackendError::Nvml { code, .. } if code == ffi::ERROR_NOT_FOUND => {
                BackendError::InstanceNotFound { index, gpu_instance_id }
            }
            other => other,
        })
    }

    fn processes(&self, device_uuid: &str) -> Result<Vec<Process>, BackendError> {
        let device = match self.nvml.device_by_uuid(device_uuid) {
            Ok(d) => d,
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => {
                return Err(BackendError::DeviceNotFound { uuid: device_uuid.to_owned() })
            }
            Err(e) => return Err(wrap("nvmlDeviceGetHandleByUUID", e)),
        };
        let mut all = device
            .running_compute_processes()
            .map_err(|e| wrap("nvmlDeviceGetComputeRunningProcesses", e))?;
        match device.running_graphics_processes() {
            Ok(g) => all.extend(g),
            Err(NvmlError::NotSupported) => {}
            Err(e) => return Err(wrap("nvmlDeviceGetGraphicsRunningProcesses", e)),
        }
        let mut out: Vec<Process> = Vec::new();
        for p in all {
            if out.iter().any(|o| o.pid == p.pid) {
                continue;
            }
            out.push(Process {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
                device: device_uuid.to_owned(),
            });
        }
        Ok(out)
    }

    fn utilization(&self, index: u32) -> Result<Option<Utilization>, BackendError> {
        match self.device(index)?.utilization_rates() {
            Ok(u) => Ok(Some(Utilization { gpu_percent: u.gpu, memory_percent: u.memory })),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(wrap("nvmlDeviceGetUtilizationRates", e)),
        }
    }
}
