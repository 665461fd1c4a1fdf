//! The real backend on this machine: without the NVIDIA driver library, `Nvml::init` fails
//! cleanly with `LibraryUnavailable`; with it, it initialises.

use std::path::Path;

use carrel_nvml::{BackendError, GpuBackend, Nvml, NVML_LIBRARY};

const LIBRARY_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib64/libnvidia-ml.so.1",
    "/usr/lib/libnvidia-ml.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
    "/usr/lib/wsl/lib/libnvidia-ml.so.1",
];

#[test]
fn init_reports_the_library_state() {
    let present = LIBRARY_PATHS.iter().any(|p| Path::new(p).exists());
    match Nvml::init() {
        Ok(nvml) => {
            assert!(present, "NVML initialised though none of {LIBRARY_PATHS:?} exists");
            let gpus = nvml.gpus().expect("gpus");
            for g in gpus {
                assert!(g.uuid.starts_with("GPU-"), "{}", g.uuid);
                nvml.mig_mode(g.index).expect("mig mode");
                nvml.instances(g.index).expect("instances");
            }
        }
        Err(e) => {
            assert!(!present, "{NVML_LIBRARY} is present but init failed: {e}");
            let BackendError::LibraryUnavailable { message } = &e else {
                panic!("expected LibraryUnavailable, got {e:?}");
            };
            assert!(
                message.starts_with("NVIDIA driver library libnvidia-ml.so.1 not found: "),
                "{message}"
            );
            assert!(e.to_string().starts_with("NVML is unavailable: NVIDIA driver library"));
        }
    }
}

#[test]
fn init_from_a_missing_path_is_library_unavailable() {
    let err = Nvml::init_from("/nonexistent/libnvidia-ml.so.1").expect_err("missing library");
    assert!(
        matches!(&err, BackendError::LibraryUnavailable { message }
            if message.contains("/nonexistent/libnvidia-ml.so.1 not found")),
        "{err:?}"
    );
}
