//! Prometheus metrics, in the text exposition format, under the names and label names of NVIDIA's
//! DCGM exporter where one exists:
//!
//! - `DCGM_FI_DEV_FB_USED` (gauge, MiB): per MIG device, the device memory its processes use;
//!   labels `gpu`, `UUID`, `device`, `modelName`, `Hostname`, `GPU_I_PROFILE`, `GPU_I_ID`, and
//!   when the device is held `namespace`, `pod` (host names), `tenant`, `tenant_namespace`,
//!   `tenant_pod`;
//! - `DCGM_FI_DEV_GPU_UTIL` (gauge, %): per GPU whose driver reports utilisation;
//! - `carrel_mig_slices_held` (gauge): compute slices held per tenant pod;
//! - `carrel_mig_violations_total` (counter): processes found on a device their pod does not hold.
//!
//! [`render`] is pure; [`collect`] reads the backend; [`router`] serves `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use carrel_gpu::Claim;
use carrel_nvml::{BackendError, GpuBackend};
use parking_lot::{Mutex, RwLock};

use crate::claims::HeldDevice;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Who holds a device, as labels.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HolderLabels {
    /// The host pod's namespace.
    pub namespace: String,
    /// The host pod's name.
    pub pod: String,
    /// The tenant.
    pub tenant: String,
    /// The pod's namespace in the tenant cluster.
    pub tenant_namespace: String,
    /// The pod's name in the tenant cluster.
    pub tenant_pod: String,
}

impl HolderLabels {
    /// The holder of a claim.
    pub fn of(claim: &Claim) -> HolderLabels {
        HolderLabels {
            namespace: claim.host_namespace.clone(),
            pod: claim.host_pod.clone(),
            tenant: claim.holder.tenant.clone(),
            tenant_namespace: claim.holder.namespace.clone(),
            tenant_pod: claim.holder.pod.clone(),
        }
    }

    fn push(&self, labels: &mut Vec<(&'static str, String)>) {
        labels.push(("namespace", self.namespace.clone()));
        labels.push(("pod", self.pod.clone()));
        labels.push(("tenant", self.tenant.clone()));
        labels.push(("tenant_namespace", self.tenant_namespace.clone()));
        labels.push(("tenant_pod", self.tenant_pod.clone()));
    }
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuSample {
    /// Its index.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its model's name.
    pub model: String,
    /// Utilisation, percent, where reported.
    pub utilization: Option<u32>,
}

/// One MIG device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSample {
    /// The GPU's index.
    pub gpu: u32,
    /// The GPU's UUID.
    pub gpu_uuid: String,
    /// The GPU's model name.
    pub model: String,
    /// The MIG profile (`1g.18gb`).
    pub profile: String,
    /// The GPU instance id.
    pub gpu_instance_id: u32,
    /// The MIG device UUID.
    pub mig_uuid: String,
    /// Compute slices.
    pub compute_slices: u8,
    /// Device memory its processes use, MiB.
    pub fb_used_mib: u64,
    /// Who holds it.
    pub holder: Option<HolderLabels>,
}

/// The device a violation was found on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ViolationLabels {
    /// The GPU's index.
    pub gpu: u32,
    /// The GPU's UUID.
    pub gpu_uuid: String,
    /// The MIG profile.
    pub profile: String,
    /// The GPU instance id.
    pub gpu_instance_id: u32,
    /// The MIG device UUID.
    pub mig_uuid: String,
    /// Its holder.
    pub holder: HolderLabels,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The node.
    pub hostname: String,
    /// Its GPUs.
    pub gpus: Vec<GpuSample>,
    /// Its MIG devices.
    pub devices: Vec<DeviceSample>,
    /// Violations counted so far.
    pub violations: Vec<(ViolationLabels, u64)>,
}

/// Violation counters, shared by the enforcer and the metrics handler.
#[derive(Debug, Default)]
pub struct Violations {
    counts: Mutex<BTreeMap<ViolationLabels, u64>>,
}

impl Violations {
    /// Count one violation on `device`.
    pub fn count(&self, device: &HeldDevice) {
        let labels = ViolationLabels {
            gpu: device.gpu_index,
            gpu_uuid: device.claim.gpu_uuid.clone(),
            profile: device.claim.profile().to_owned(),
            gpu_instance_id: device.gpu_instance_id,
            mig_uuid: device.mig_uuid.clone(),
            holder: HolderLabels::of(&device.claim),
        };
        *self.counts.lock().entry(labels).or_insert(0) += 1;
    }

    /// Every counter.
    pub fn snapshot(&self) -> Vec<(ViolationLabels, u64)> {
        let counts = self.counts.lock();
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// The total over every device.
    pub fn total(&self) -> u64 {
        self.counts.lock().values().sum()
    }
}

/// A label value escaped for the exposition format (`\` → `\\`, `"` → `\"`, newline → `\n`).
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn sample(out: &mut String, name: &str, labels: &[(&'static str, String)], value: u64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn gpu_labels(index: u32, uuid: &str, model: &str, hostname: &str) -> Vec<(&'static str, String)> {
    vec![
        ("gpu", index.to_string()),
        ("UUID", uuid.to_owned()),
        ("device", format!("nvidia{index}")),
        ("modelName", model.to_owned()),
        ("Hostname", hostname.to_owned()),
    ]
}

/// The exposition text of a snapshot.
pub fn render(snapshot: &Snapshot) -> String {
    let host = &snapshot.hostname;
    let mut out = String::new();
    header(&mut out, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).");
    for d in &snapshot.devices {
        let mut labels = gpu_labels(d.gpu, &d.gpu_uuid, &d.model, host);
        labels.push(("GPU_I_PROFILE", d.profile.clone()));
        labels.push(("GPU_I_ID", d.gpu_instance_id.to_string()));
        if let Some(holder) = &d.holder {
            holder.push(&mut labels);
        }
        sample(&mut out, "DCGM_FI_DEV_FB_USED", &labels, d.fb_used_mib);
    }
    header(&mut out, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
    for g in &snapshot.gpus {
        if let Some(util) = g.utilization {
            let labels = gpu_labels(g.index, &g.uuid, &g.model, host);
            sample(&mut out, "DCGM_FI_DEV_GPU_UTIL", &labels, u64::from(util));
        }
    }
    header(&mut out, "carrel_mig_slices_held", "gauge", "MIG compute slices held, per tenant pod.");
    let mut held: BTreeMap<&HolderLabels, u64> = BTreeMap::new();
    for d in &snapshot.devices {
        if let Some(holder) = &d.holder {
            *held.entry(holder).or_insert(0) += u64::from(d.compute_slices);
        }
    }
    for (holder, slices) in held {
        let mut labels = vec![("Hostname", host.clone())];
        holder.push(&mut labels);
        sample(&mut out, "carrel_mig_slices_held", &labels, slices);
    }
    header(
        &mut out,
        "carrel_mig_violations_total",
        "counter",
        "Processes found on a MIG device that their pod does not hold.",
    );
    for (v, count) in &snapshot.violations {
        let mut labels = vec![
            ("gpu", v.gpu.to_string()),
            ("UUID", v.gpu_uuid.clone()),
            ("device", format!("nvidia{}", v.gpu)),
            ("Hostname", host.clone()),
            ("GPU_I_PROFILE", v.profile.clone()),
            ("GPU_I_ID", v.gpu_instance_id.to_string()),
            ("mig_device", v.mig_uuid.clone()),
        ];
        v.holder.push(&mut labels);
        sample(&mut out, "carrel_mig_violations_total", &labels, *count);
    }
    out
}

/// Read a snapshot: the backend's GPUs, instances, processes and utilisation, with holders from
/// `held` (by MIG device UUID).
pub fn collect(
    backend: &dyn GpuBackend,
    hostname: &str,
    held: &[HeldDevice],
    violations: Vec<(ViolationLabels, u64)>,
) -> Result<Snapshot, BackendError> {
    const MIB: u64 = 1 << 20;
    let holders: BTreeMap<&str, &Claim> =
        held.iter().map(|h| (h.mig_uuid.as_str(), &h.claim)).collect();
    let mut snapshot =
        Snapshot { hostname: hostname.to_owned(), violations, ..Snapshot::default() };
    for info in backend.gpus()? {
        let model = info.model.to_string();
        let utilization = backend.utilization(info.index)?.map(|u| u.gpu_percent);
        snapshot.gpus.push(GpuSample {
            index: info.index,
            uuid: info.uuid.clone(),
            model: model.clone(),
            utilization,
        });
        if !info.mig_enabled {
            continue;
        }
        for instance in backend.instances(info.index)? {
            let Some(mig_uuid) = instance.uuid.clone() else {
                continue;
            };
            let used: u64 =
                backend.processes(&mig_uuid)?.iter().filter_map(|p| p.used_memory_bytes).sum();
            let compute_slices = info
                .model
                .known()
                .and_then(|m| instance.profile_on(m))
                .map_or(0, |p| p.shape.compute_slices());
            snapshot.devices.push(DeviceSample {
                gpu: info.index,
                gpu_uuid: info.uuid.clone(),
                model: model.clone(),
                profile: instance.profile.clone(),
                gpu_instance_id: instance.gpu_instance_id,
                compute_slices,
                fb_used_mib: used / MIB,
                holder: holders.get(mig_uuid.as_str()).map(|c| HolderLabels::of(c)),
                mig_uuid,
            });
        }
    }
    Ok(snapshot)
}

/// What the `/metrics` handler reads.
#[derive(Debug)]
pub struct MetricsSource {
    /// The GPUs.
    pub backend: Arc<dyn GpuBackend>,
    /// The node.
    pub hostname: String,
    /// The held devices, as the last claim pass found them.
    pub held: Arc<RwLock<Vec<HeldDevice>>>,
    /// Violation counters.
    pub violations: Arc<Violations>,
}

/// A router serving `GET /metrics`.
pub fn router(source: Arc<MetricsSource>) -> Router {
    Router::new().route("/metrics", get(handler)).with_state(source)
}

async fn handler(
    axum::extract::State(source): axum::extract::State<Arc<MetricsSource>>,
) -> axum::response::Response {
    let held = source.held.read().clone();
    let violations = source.violations.snapshot();
    let backend = source.backend.clone();
    let hostname = source.hostname.clone();
    let collected = tokio::task::spawn_blocking(move || {
        collect(backend.as_ref(), &hostname, &held, violations)
    })
    .await;
    match collected {
        Ok(Ok(snapshot)) => {
            ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&snapshot)).into_response()
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "metrics: reading the GPUs failed");
            (axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("reading the GPUs: {e}\n"))
                .into_response()
        }
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> HolderLabels {
        HolderLabels {
            namespace: "carrel-team-a".into(),
            pod: "train-x-default".into(),
            tenant: "team-a".into(),
            tenant_namespace: "default".into(),
            tenant_pod: "train".into(),
        }
    }

    fn device(gi: u32, slices: u8, holder: Option<HolderLabels>) -> DeviceSample {
        DeviceSample {
            gpu: 0,
            gpu_uuid: "GPU-1".into(),
            model: "h200".into(),
            profile: "1g.18gb".into(),
            gpu_instance_id: gi,
            mig_uuid: format!("MIG-{gi}"),
            compute_slices: slices,
            fb_used_mib: 512,
            holder,
        }
    }

    #[test]
    fn render_writes_dcgm_names_and_labels() {
        let snapshot = Snapshot {
            hostname: "node-1".into(),
            gpus: vec![
                GpuSample {
                    index: 0,
                    uuid: "GPU-1".into(),
                    model: "h200".into(),
                    utilization: None,
                },
                GpuSample {
                    index: 1,
                    uuid: "GPU-2".into(),
                    model: "h200".into(),
                    utilization: Some(37),
                },
            ],
            devices: vec![
                device(1, 1, Some(holder())),
                device(2, 3, Some(holder())),
                device(3, 1, None),
            ],
            violations: vec![(
                ViolationLabels {
                    gpu: 0,
                    gpu_uuid: "GPU-1".into(),
                    profile: "1g.18gb".into(),
                    gpu_instance_id: 1,
                    mig_uuid: "MIG-1".into(),
                    holder: holder(),
                },
                2,
            )],
        };
        let text = render(&snapshot);
        assert!(text.contains("# HELP DCGM_FI_DEV_FB_USED "), "{text}");
        assert!(text.contains("# TYPE DCGM_FI_DEV_FB_USED gauge\n"), "{text}");
        assert!(text.contains(
            "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-1\",device=\"nvidia0\",modelName=\"h200\",\
             Hostname=\"node-1\",GPU_I_PROFILE=\"1g.18gb\",GPU_I_ID=\"1\",\
             namespace=\"carrel-team-a\",pod=\"train-x-default\",tenant=\"team-a\",\
             tenant_namespace=\"default\",tenant_pod=\"train\"} 512\n"
        ), "{text}");
        assert!(text.contains(
            "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-1\",device=\"nvidia0\",modelName=\"h200\",\
             Hostname=\"node-1\",GPU_I_PROFILE=\"1g.18gb\",GPU_I_ID=\"3\"} 512\n"
        ), "{text}");
        assert!(text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-2\",device=\"nvidia1\",modelName=\"h200\",Hostname=\"node-1\"} 37\n"), "{text}");
        assert!(!text.contains("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), "{text}");
        assert!(text.contains("carrel_mig_slices_held{Hostname=\"node-1\",namespace=\"carrel-team-a\",pod=\"train-x-default\",tenant=\"team-a\",tenant_namespace=\"default\",tenant_pod=\"train\"} 4\n"), "{text}");
        assert!(text.contains("# TYPE carrel_mig_violations_total counter\n"), "{text}");
        assert!(text.contains("mig_device=\"MIG-1\""), "{text}");
        assert!(text
            .lines()
            .any(|l| l.starts_with("carrel_mig_violations_total{") && l.ends_with(" 2")));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            value.parse::<f64>().unwrap();
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("line\nbreak"), "line\\nbreak");
        let mut h = holder();
        h.tenant_pod = "we\"ird\\\n".into();
        let text = render(&Snapshot {
            hostname: "n".into(),
            devices: vec![device(1, 1, Some(h))],
            ..Snapshot::default()
        });
        assert!(text.contains(r#"tenant_pod="we\"ird\\\n""#), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("DCGM_FI_DEV_FB_USED{")).count(), 1);
    }

    #[test]
    fn collect_reads_the_simulator() {
        let sim = carrel_nvml::Simulator::from_spec("a100-40gbx2:mig=3g.20gb*2", "n").unwrap();
        let gpus = sim.gpus().unwrap();
        let mig = sim.instances(0).unwrap()[0].uuid.clone().unwrap();
        sim.add_process(&mig, 7, Some(300 << 20)).unwrap();
        sim.add_process(&mig, 8, Some(200 << 20)).unwrap();
        let snapshot = collect(&sim, "n", &[], Vec::new()).unwrap();
        assert_eq!(snapshot.gpus.len(), 2);
        assert_eq!(snapshot.devices.len(), 4);
        let d = snapshot.devices.iter().find(|d| d.mig_uuid == mig).unwrap();
        assert_eq!(
            (d.fb_used_mib, d.compute_slices, d.gpu_uuid.as_str()),
            (500, 3, gpus[0].uuid.as_str())
        );
        assert!(d.holder.is_none());
    }
}
