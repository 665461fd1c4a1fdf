//! Environment variables a tenant may not hand its containers: the ones the NVIDIA container
//! runtime reads to choose devices and capabilities (`NVIDIA_*`) and the ones the glibc dynamic
//! loader reads (`LD_PRELOAD`, `LD_AUDIT`, `LD_LIBRARY_PATH`, … — the whole `LD_*` family).
//! Pure code: the tenant API's admission and the syncer's host-pod translation both ask here.
//!
//! Names are compared trimmed, so that ` LD_PRELOAD` counts as `LD_PRELOAD`.

/// The name prefixes refused.
pub const FORBIDDEN_PREFIXES: &[&str] = &["LD_", "NVIDIA_"];

/// Whether an environment variable named `name` steers the GPU runtime or the dynamic loader.
pub fn steers_runtime(name: &str) -> bool {
    let name = name.trim();
    FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether an `envFrom` `prefix` can make a refused name out of some key: it starts with a
/// refused prefix (`NVIDIA_`, `LD_X`) or begins one (`L`, `NVI`). An empty (or blank) prefix
/// makes nothing by itself; the keys are checked one by one then.
pub fn prefix_may_steer(prefix: &str) -> bool {
    let prefix = prefix.trim_start();
    !prefix.is_empty()
        && FORBIDDEN_PREFIXES.iter().any(|p| prefix.starts_with(p) || p.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_family_and_nvidia_are_refused_trimmed() {
        for name in [
            "LD_PRELOAD",
            "LD_AUDIT",
            "LD_LIBRARY_PATH",
            "LD_BIND_NOW",
            " LD_PRELOAD",
            "LD_PRELOAD ",
            "NVIDIA_VISIBLE_DEVICES",
            "NVIDIA_DRIVER_CAPABILITIES",
            "  NVIDIA_REQUIRE_CUDA",
        ] {
            assert!(steers_runtime(name), "{name:?}");
        }
        for name in ["HOME", "LDX", "OLD_PATH", "CUDA_VISIBLE_DEVICES", "nvidia_x", "L D_PRELOAD"] {
            assert!(!steers_runtime(name), "{name:?}");
        }
    }

    #[test]
    fn prefixes_that_begin_or_contain_a_refused_name_are_refused() {
        for prefix in ["L", "LD", "LD_", "LD_X", "N", "NVIDIA", "NVIDIA_", " LD_", "NVIDIA_X_"] {
            assert!(prefix_may_steer(prefix), "{prefix:?}");
        }
        for prefix in ["", " ", "APP_", "X", "LDAP_", "NVX_"] {
            assert!(!prefix_may_steer(prefix), "{prefix:?}");
        }
        // An allowed prefix joined to any key never makes a refused name.
        for prefix in ["APP_", "X", "LDAP_", "NVX_", "D_"] {
            for key in ["PRELOAD", "_PRELOAD", "D_PRELOAD", "VIDIA_VISIBLE_DEVICES", "LD_AUDIT"] {
                assert!(!steers_runtime(&format!("{prefix}{key}")), "{prefix}{key}");
            }
        }
    }
}
