//! Raw NVML calls for MIG instances, which `nvml-wrapper` does not wrap. The only unsafe code of
//! the crate. Every symbol is looked up without panicking (a driver too old for a function gives
//! an error naming it) and every return code is checked.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_uint, CStr};

use carrel_gpu::{Placement, Shape};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceInfo_t, nvmlComputeInstancePlacement_t, nvmlComputeInstanceProfileInfo_t,
    nvmlComputeInstance_t, nvmlDevice_t, nvmlGpuInstanceInfo_t, nvmlGpuInstancePlacement_t,
    nvmlGpuInstanceProfileInfo_t, nvmlGpuInstance_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    nvmlReturn_enum_NVML_ERROR_IN_USE, nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
    nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED, nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t, NvmlLib,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_DEVICE_UUID_V2_BUFFER_SIZE,
};

use crate::BackendError;

/// `NVML_ERROR_INVALID_ARGUMENT`.
pub(super) const ERROR_INVALID_ARGUMENT: u32 = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
/// `NVML_ERROR_NOT_SUPPORTED`.
pub(super) const ERROR_NOT_SUPPORTED: u32 = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
/// `NVML_ERROR_NOT_FOUND`.
pub(super) const ERROR_NOT_FOUND: u32 = nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
/// `NVML_ERROR_IN_USE`.
pub(super) const ERROR_IN_USE: u32 = nvmlReturn_enum_NVML_ERROR_IN_USE;
/// `NVML_ERROR_INSUFFICIENT_RESOURCES`.
pub(super) const ERROR_INSUFFICIENT_RESOURCES: u32 =
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_RESOURCES;

/// Room for the GPU instances of one profile (at most 7 on any MIG GPU) or compute instances of
/// one GPU instance.
const MAX_HANDLES: usize = 32;

/// The function pointer `$name` of `$lib`, or an error naming it when the driver lacks it.
macro_rules! sym {
    ($lib:expr, $name:ident) => {
        $lib.$name.as_ref().map_err(|e| BackendError::Nvml {
            function: stringify!($name).to_owned(),
            code: 0,
            message: format!("the NVIDIA driver library has no {}: {e}", stringify!($name)),
        })?
    };
}

/// `Ok` on `NVML_SUCCESS`, else the error with NVML's text for the code.
fn check(lib: &NvmlLib, function: &str, code: nvmlReturn_t) -> Result<(), BackendError> {
    if code == nvmlReturn_enum_NVML_SUCCESS {
        return Ok(());
    }
    let message = match lib.nvmlErrorString.as_ref() {
        Ok(f) => {
            // SAFETY: nvmlErrorString takes any return code and returns a pointer to a static,
            // NUL-terminated string (or NULL, checked).
            let ptr = unsafe { f(code) };
            if ptr.is_null() {
                format!("NVML error {code}")
            } else {
                // SAFETY: non-null, NUL-terminated and static, as above.
                unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
            }
        }
        Err(_) => format!("NVML error {code}"),
    };
    Err(BackendError::Nvml { function: function.to_owned(), code, message })
}

fn handle(device: &Device<'_>) -> nvmlDevice_t {
    // SAFETY: the handle stays valid while `device` (and so the Nvml it borrows) lives; every
    // use below is within that borrow.
    unsafe { device.handle() }
}

/// A GPU instance as NVML lists it.
pub(super) struct GpuInstance {
    pub(super) handle: nvmlGpuInstance_t,
    pub(super) gpu_instance_id: u32,
    pub(super) shape: Shape,
    pub(super) placement: Placement,
}

/// A MIG device (a compute instance) as NVML lists it.
pub(super) struct MigDevice {
    pub(super) gpu_instance_id: u32,
    pub(super) compute_instance_id: u32,
    pub(super) uuid: String,
}

/// The device's id for the GPU instance profile of `shape` (`nvmlGpuInstanceProfileInfo_t.id`,
/// the id `nvidia-smi mig -lgip` shows, which later calls take), or `None` if the device does
/// not offer it.
fn profile_id(
    lib: &NvmlLib,
    device: &Device<'_>,
    shape: Shape,
) -> Result<Option<u32>, BackendError> {
    let f = sym!(lib, nvmlDeviceGetGpuInstanceProfileInfo);
    // SAFETY: a plain C struct of integers; all-zero is a valid value.
    let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid device handle, profile constant, pointer to a live struct of the right type.
    let code = unsafe { f(handle(device), shape.nvml_id(), &mut info) };
    if code == ERROR_NOT_SUPPORTED || code == ERROR_INVALID_ARGUMENT {
        return Ok(None);
    }
    check(lib, "nvmlDeviceGetGpuInstanceProfileInfo", code)?;
    Ok(Some(info.id))
}

/// Every GPU instance of the device.
pub(super) fn gpu_instances(
    lib: &NvmlLib,
    device: &Device<'_>,
) -> Result<Vec<GpuInstance>, BackendError> {
    let get = sym!(lib, nvmlDeviceGetGpuInstances);
    let get_info = sym!(lib, nvmlGpuInstanceGetInfo);
    let mut out = Vec::new();
    for shape in Shape::ALL {
        let Some(id) = profile_id(lib, device, shape)? else { continue };
        let mut handles: [nvmlGpuInstance_t; MAX_HANDLES] = [std::ptr::null_mut(); MAX_HANDLES];
        let mut count: c_uint = 0;
        // SAFETY: the array has room for MAX_HANDLES (more than any profile's instance count,
        // which is what NVML writes at most); count is a live out-parameter.
        let code = unsafe { get(handle(device), id, handles.as_mut_ptr(), &mut count) };
        check(lib, "nvmlDeviceGetGpuInstances", code)?;
        for &gi in handles.iter().take((count as usize).min(MAX_HANDLES)) {
            let mut info = nvmlGpuInstanceInfo_t {
                device: std::ptr::null_mut(),
                id: 0,
                profileId: 0,
                placement: nvmlGpuInstancePlacement_t { start: 0, size: 0 },
            };
            // SAFETY: gi is a handle NVML just returned; info is a live struct of the right type.
            let code = unsafe { get_info(gi, &mut info) };
            check(lib, "nvmlGpuInstanceGetInfo", code)?;
            out.push(GpuInstance {
                handle: gi,
                gpu_instance_id: info.id,
                shape,
                placement: Placement {
                    start: u8::try_from(info.placement.start).unwrap_or(u8::MAX),
                    size: u8::try_from(info.placement.size).unwrap_or(u8::MAX),
                },
            });
        }
    }
    Ok(out)
}

/// Every MIG device (compute instance) of the device, with its UUID.
pub(super) fn mig_devices(
    lib: &NvmlLib,
    device: &Device<'_>,
) -> Result<Vec<MigDevice>, BackendError> {
    let max = sym!(lib, nvmlDeviceGetMaxMigDeviceCount);
    let by_index = sym!(lib, nvmlDeviceGetMigDeviceHandleByIndex);
    let gi_id = sym!(lib, nvmlDeviceGetGpuInstanceId);
    let ci_id = sym!(lib, nvmlDeviceGetComputeInstanceId);
    let get_uuid = sym!(lib, nvmlDeviceGetUUID);
    let mut n: c_uint = 0;
    // SAFETY: valid device handle and a live out-parameter.
    check(lib, "nvmlDeviceGetMaxMigDeviceCount", unsafe { max(handle(device), &mut n) })?;
    let mut out = Vec::new();
    for i in 0..n {
        let mut mig: nvmlDevice_t = std::ptr::null_mut();
        // SAFETY: valid device handle, index below the maximum, live out-parameter.
        let code = unsafe { by_index(handle(device), i, &mut mig) };
        if code == ERROR_NOT_FOUND {
            continue; // No MIG device at this index.
        }
        check(lib, "nvmlDeviceGetMigDeviceHandleByIndex", code)?;
        let (mut g, mut c): (c_uint, c_uint) = (0, 0);
        // SAFETY: mig is a MIG device handle NVML just returned; live out-parameters.
        check(lib, "nvmlDeviceGetGpuInstanceId", unsafe { gi_id(mig, &mut g) })?;
        // SAFETY: as above.
        check(lib, "nvmlDeviceGetComputeInstanceId", unsafe { ci_id(mig, &mut c) })?;
        let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE as usize];
        // SAFETY: the buffer holds NVML_DEVICE_UUID_V2_BUFFER_SIZE bytes, the length passed.
        let code = unsafe { get_uuid(mig, buf.as_mut_ptr(), NVML_DEVICE_UUID_V2_BUFFER_SIZE) };
        check(lib, "nvmlDeviceGetUUID", code)?;
        // Force termination, then read up to the first NUL.
        buf[buf.len() - 1] = 0;
        // SAFETY: the buffer is NUL-terminated (last byte set above) and lives for the call.
        let uuid = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
        out.push(MigDevice { gpu_instance_id: g, compute_instance_id: c, uuid });
    }
    Ok(out)
}

/// `NVML_COMPUTE_INSTANCE_PROFILE_*` of the compute instance spanning a GPU instance of `shape`.
fn full_compute_profile(shape: Shape) -> u32 {
    match shape.compute_slices() {
        1 => NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        2 => NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        3 => NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        4 => NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        _ => NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    }
}

/// The id the GPU instance gives compute instance profile `profile` (shared engines), if offered.
fn compute_profile_id(
    lib: &NvmlLib,
    gi: nvmlGpuInstance_t,
    profile: u32,
) -> Result<Option<u32>, BackendError> {
    let f = sym!(lib, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    // SAFETY: a plain C struct of integers; all-zero is a valid value.
    let mut info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: gi is a live GPU instance handle; info a live struct of the right type.
    let code = unsafe { f(gi, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut info) };
    if code == ERROR_NOT_SUPPORTED || code == ERROR_INVALID_ARGUMENT {
        return Ok(None);
    }
    check(lib, "nvmlGpuInstanceGetComputeInstanceProfileInfo", code)?;
    Ok(Some(info.id))
}

/// Create a GPU instance of `shape` at `placement` and one compute instance spanning it; returns
/// (GPU instance id, compute instance id). The GPU instance is destroyed again if its compute
/// instance cannot be made.
pub(super) fn create(
    lib: &NvmlLib,
    device: &Device<'_>,
    shape: Shape,
    placement: Placement,
) -> Result<(u32, u32), BackendError> {
    let create_gi = sym!(lib, nvmlDeviceCreateGpuInstanceWithPlacement);
    let create_ci = sym!(lib, nvmlGpuInstanceCreateComputeInstance);
    let gi_info = sym!(lib, nvmlGpuInstanceGetInfo);
    let ci_info = sym!(lib, nvmlComputeInstanceGetInfo_v2);
    let destroy_gi = sym!(lib, nvmlGpuInstanceDestroy);
    let id = profile_id(lib, device, shape)?.ok_or_else(|| BackendError::Nvml {
        function: "nvmlDeviceGetGpuInstanceProfileInfo".to_owned(),
        code: ERROR_NOT_SUPPORTED,
        message: format!("the GPU does not offer the {shape:?} GPU instance profile"),
    })?;
    let raw = nvmlGpuInstancePlacement_t {
        start: c_uint::from(placement.start),
        size: c_uint::from(placement.size),
    };
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: valid device handle and profile id; placement and out-parameter are live.
    let code = unsafe { create_gi(handle(device), id, &raw, &mut gi) };
    check(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", code)?;
    let rollback = |e: BackendError| {
        // SAFETY: gi was created above and nothing else holds it. Its own failure is secondary
        // to `e`, which is reported.
        let _ = unsafe { destroy_gi(gi) };
        e
    };
    let ci_profile = compute_profile_id(lib, gi, full_compute_profile(shape))
        .and_then(|p| {
            p.ok_or_else(|| BackendError::Nvml {
                function: "nvmlGpuInstanceGetComputeInstanceProfileInfo".to_owned(),
                code: ERROR_NOT_SUPPORTED,
                message: format!("no compute instance profile spans a {shape:?} GPU instance"),
            })
        })
        .map_err(rollback)?;
    let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
    // SAFETY: gi is live; ci_profile was returned for it; ci is a live out-parameter.
    let code = unsafe { create_ci(gi, ci_profile, &mut ci) };
    check(lib, "nvmlGpuInstanceCreateComputeInstance", code).map_err(rollback)?;
    let mut g = nvmlGpuInstanceInfo_t {
        device: std::ptr::null_mut(),
        id: 0,
        profileId: 0,
        placement: nvmlGpuInstancePlacement_t { start: 0, size: 0 },
    };
    // SAFETY: gi is live; g a live struct of the right type.
    check(lib, "nvmlGpuInstanceGetInfo", unsafe { gi_info(gi, &mut g) })?;
    let mut c = nvmlComputeInstanceInfo_t {
        device: std::ptr::null_mut(),
        gpuInstance: std::ptr::null_mut(),
        id: 0,
        profileId: 0,
        placement: nvmlComputeInstancePlacement_t { start: 0, size: 0 },
    };
    // SAFETY: ci is live; c a live struct of the right type.
    check(lib, "nvmlComputeInstanceGetInfo_v2", unsafe { ci_info(ci, &mut c) })?;
    Ok((g.id, c.id))
}

/// Destroy GPU instance `gpu_instance_id` and its compute instances. `NVML_ERROR_IN_USE` while
/// processes run on it; `NVML_ERROR_NOT_FOUND` (code) when there is no such instance.
pub(super) fn destroy(
    lib: &NvmlLib,
    device: &Device<'_>,
    gpu_instance_id: u32,
) -> Result<(), BackendError> {
    let get_cis = sym!(lib, nvmlGpuInstanceGetComputeInstances);
    let destroy_ci = sym!(lib, nvmlComputeInstanceDestroy);
    let destroy_gi = sym!(lib, nvmlGpuInstanceDestroy);
    let gi = gpu_instances(lib, device)?
        .into_iter()
        .find(|g| g.gpu_instance_id == gpu_instance_id)
        .ok_or_else(|| BackendError::Nvml {
            function: "nvmlDeviceGetGpuInstances".to_owned(),
            code: ERROR_NOT_FOUND,
            message: format!("no GPU instance {gpu_instance_id}"),
        })?;
    for profile in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        let Some(id) = compute_profile_id(lib, gi.handle, profile)? else { continue };
        let mut cis: [nvmlComputeInstance_t; MAX_HANDLES] = [std::ptr::null_mut(); MAX_HANDLES];
        let mut count: c_uint = 0;
        // SAFETY: gi.handle is live; the array has room for MAX_HANDLES compute instances (a GPU
        // instance has at most 7); count is a live out-parameter.
        let code = unsafe { get_cis(gi.handle, id, cis.as_mut_ptr(), &mut count) };
        check(lib, "nvmlGpuInstanceGetComputeInstances", code)?;
        for &ci in cis.iter().take((count as usize).min(MAX_HANDLES)) {
            // SAFETY: ci is a handle NVML just returned.
            check(lib, "nvmlComputeInstanceDestroy", unsafe { destroy_ci(ci) })?;
        }
    }
    // SAFETY: gi.handle is live and its compute instances are gone.
    check(lib, "nvmlGpuInstanceDestroy", unsafe { destroy_gi(gi.handle) })
}
