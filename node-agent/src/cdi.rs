//! CDI specs: `<cdi_dir>/carrel-<node>.json` names every claimed MIG device of the node, so that a
//! pod annotated `cdi.k8s.io/<x>: nvidia.com/gpu=MIG-<uuid>` gets that device (and only that one)
//! from a CDI-aware container runtime.
//!
//! The spec is written atomically (a temporary file renamed over it) and only when its content
//! changes; with no claimed device the file is removed.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::claims::HeldDevice;

/// The spec's `cdiVersion`.
pub const CDI_VERSION: &str = "0.6.0";
/// The spec's `kind`: devices are `nvidia.com/gpu=<name>`.
pub const CDI_KIND: &str = "nvidia.com/gpu";

/// One device the spec names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct CdiDevice {
    /// The MIG device UUID (`MIG-…`), which is also the device's CDI name.
    pub mig_uuid: String,
    /// The index of its GPU (`/dev/nvidia<index>`).
    pub gpu_index: u32,
}

impl From<&HeldDevice> for CdiDevice {
    fn from(h: &HeldDevice) -> Self {
        CdiDevice { mig_uuid: h.mig_uuid.clone(), gpu_index: h.gpu_index }
    }
}

/// Why the spec could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The spec file of node `node` in `dir`.
pub fn spec_path(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("carrel-{node}.json"))
}

/// The CDI name of a MIG device: its UUID, `MIG-` prefix included.
pub fn device_name(mig_uuid: &str) -> String {
    if mig_uuid.starts_with("MIG-") {
        mig_uuid.to_owned()
    } else {
        format!("MIG-{mig_uuid}")
    }
}

/// The spec naming `devices` (sorted by name, so equal sets give equal specs).
pub fn spec(devices: &[CdiDevice]) -> Value {
    let mut devices = devices.to_vec();
    devices.sort();
    devices.dedup();
    let devices: Vec<Value> = devices
        .iter()
        .map(|d| {
            let name = device_name(&d.mig_uuid);
            json!({
                "name": name,
                "containerEdits": {
                    "env": [format!("NVIDIA_VISIBLE_DEVICES={name}")],
                    "deviceNodes": [
                        {"path": format!("/dev/nvidia{}", d.gpu_index)},
                        {"path": "/dev/nvidiactl"},
                        {"path": "/dev/nvidia-uvm"},
                    ],
                },
            })
        })
        .collect();
    json!({"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices})
}

/// Write node `node`'s spec naming `devices` into `dir`, or remove it when there are none;
/// whether the file changed.
pub fn write(dir: &Path, node: &str, devices: &[CdiDevice]) -> Result<bool, CdiError> {
    let path = spec_path(dir, node);
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| CdiError::Io { action, path, source }
    };
    if devices.is_empty() {
        return match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io("removing", &path)(e)),
        };
    }
    let mut text = serde_json::to_string_pretty(&spec(devices)).unwrap_or_default();
    text.push('\n');
    match std::fs::read_to_string(&path) {
        Ok(current) if current == text => return Ok(false),
        _ => {}
    }
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let temp = dir.join(format!(".carrel-{node}.json.tmp"));
    {
        let mut file = std::fs::File::create(&temp).map_err(io("creating", &temp))?;
        file.write_all(text.as_bytes()).map_err(io("writing", &temp))?;
        file.sync_all().map_err(io("syncing", &temp))?;
    }
    std::fs::rename(&temp, &path).map_err(io("renaming into place", &path))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(uuid: &str, gpu: u32) -> CdiDevice {
        CdiDevice { mig_uuid: uuid.into(), gpu_index: gpu }
    }

    #[test]
    fn the_spec_names_each_device_with_its_nodes() {
        let spec = spec(&[dev("MIG-b", 3), dev("MIG-a", 0)]);
        assert_eq!(spec["cdiVersion"], "0.6.0");
        assert_eq!(spec["kind"], "nvidia.com/gpu");
        let devices = spec["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0]["name"], "MIG-a");
        assert_eq!(devices[1]["name"], "MIG-b");
        assert_eq!(
            devices[1]["containerEdits"],
            json!({
                "env": ["NVIDIA_VISIBLE_DEVICES=MIG-b"],
                "deviceNodes": [
                    {"path": "/dev/nvidia3"}, {"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"},
                ],
            })
        );
        assert_eq!(device_name("0abc"), "MIG-0abc");
    }

    #[test]
    fn writes_only_changes_and_removes_when_empty() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = dir.path().join("cdi");
        assert!(write(&cdi, "n1", &[dev("MIG-a", 0)]).unwrap());
        let path = spec_path(&cdi, "n1");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written["devices"][0]["name"], "MIG-a");
        assert!(!write(&cdi, "n1", &[dev("MIG-a", 0)]).unwrap(), "unchanged");
        assert!(write(&cdi, "n1", &[dev("MIG-a", 0), dev("MIG-b", 1)]).unwrap());
        assert!(write(&cdi, "n1", &[dev("MIG-b", 1)]).unwrap(), "a device whose claim is gone");
        let written: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(written["devices"].as_array().unwrap().len(), 1);
        let names: Vec<String> = std::fs::read_dir(&cdi)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["carrel-n1.json"], "no temporary file left");
        assert!(write(&cdi, "n1", &[]).unwrap());
        assert!(!path.exists());
        assert!(!write(&cdi, "n1", &[]).unwrap());
    }
}
