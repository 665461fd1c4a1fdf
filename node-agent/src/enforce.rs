//! Enforcement: only the pod holding a MIG device may run on it.
//!
//! For every claimed device the agent lists the processes on it and maps each pid to a pod UID
//! through a [`PodOfProcess`]: [`ProcCgroups`] reads `/proc/<pid>/cgroup` on a real node
//! ([`pod_uid_from_cgroup`] understands the cgroupfs and systemd layouts of the kubelet), a
//! [`PodMap`] answers for the simulator, whose processes have no cgroup. A process whose pod is
//! not the holder (the host pod named by the claim), or whose pod is unknown, is a violation: a
//! `Warning` Event with reason [`REASON_VIOLATION`] on the holder's pod, once per device and pid;
//! a count in the metrics; and, when eviction is on, the offending pod deleted (when it can be
//! identified among the node's pods).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use carrel_nvml::{GpuBackend, Process};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::Client;
use parking_lot::RwLock;

use crate::claims::{blocking, HeldDevice};
use crate::metrics::Violations;
use carrel_events::{EventTarget, EventType, Recorder};

/// Reason of the Event written for a process on a device its pod does not hold.
pub const REASON_VIOLATION: &str = "MigDeviceViolation";

/// Which pod a process belongs to.
pub trait PodOfProcess: Send + Sync + fmt::Debug {
    /// The UID of the pod that process `pid` runs in, if it is known.
    fn pod_uid(&self, pid: u32) -> Option<String>;
}

/// Pods of processes read from `/proc/<pid>/cgroup`.
#[derive(Clone, Debug)]
pub struct ProcCgroups {
    proc_root: PathBuf,
}

impl Default for ProcCgroups {
    fn default() -> Self {
        ProcCgroups::new()
    }
}

impl ProcCgroups {
    /// Reading the host's `/proc`.
    pub fn new() -> ProcCgroups {
        ProcCgroups::with_root("/proc")
    }

    /// Reading a `/proc` mounted at `root` (a container sees the host's at another path).
    pub fn with_root(root: impl Into<PathBuf>) -> ProcCgroups {
        ProcCgroups { proc_root: root.into() }
    }
}

impl PodOfProcess for ProcCgroups {
    fn pod_uid(&self, pid: u32) -> Option<String> {
        let path = self.proc_root.join(pid.to_string()).join("cgroup");
        let contents = std::fs::read_to_string(&path).ok()?;
        pod_uid_from_cgroup(&contents)
    }
}

/// Pods of processes as a map, set by whoever starts the processes (the simulated mode, tests).
#[derive(Debug, Default)]
pub struct PodMap {
    pods: RwLock<HashMap<u32, String>>,
}

impl PodMap {
    /// An empty map.
    pub fn new() -> PodMap {
        PodMap::default()
    }

    /// Process `pid` runs in pod `uid`.
    pub fn insert(&self, pid: u32, uid: &str) {
        self.pods.write().insert(pid, uid.to_owned());
    }

    /// Forget process `pid`.
    pub fn remove(&self, pid: u32) {
        self.pods.write().remove(&pid);
    }
}

impl PodOfProcess for PodMap {
    fn pod_uid(&self, pid: u32) -> Option<String> {
        self.pods.read().get(&pid).cloned()
    }
}

/// The pod UID in the contents of a `/proc/<pid>/cgroup` file, from a kubelet cgroup path:
/// cgroupfs (`/kubepods/burstable/pod<uid>/<container>`) or systemd
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/…`).
pub fn pod_uid_from_cgroup(contents: &str) -> Option<String> {
    contents.lines().find_map(|line| {
        // hierarchy-ID:controller-list:cgroup-path; the path may itself contain ':'.
        let path = line.splitn(3, ':').nth(2)?;
        if !path.contains("kubepods") {
            return None;
        }
        path.split('/').find_map(pod_uid_of_segment)
    })
}

fn pod_uid_of_segment(segment: &str) -> Option<String> {
    let candidate = if let Some(slice) = segment.strip_suffix(".slice") {
        // kubepods-pod<uid>.slice, kubepods-burstable-pod<uid>.slice, …
        if !slice.starts_with("kubepods") {
            return None;
        }
        let (_, uid) = slice.rsplit_once("-pod")?;
        uid.replace('_', "-")
    } else {
        segment.strip_prefix("pod")?.to_owned()
    };
    is_uid(&candidate).then(|| candidate.to_ascii_lowercase())
}

/// Whether `s` is a UUID written `8-4-4-4-12` hexadecimal digits.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A process on a held device that is not the holder's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offence {
    /// The MIG device UUID.
    pub device: String,
    /// The process.
    pub pid: u32,
    /// Its pod's UID, when known.
    pub pod_uid: Option<String>,
}

/// The processes on `device` that do not belong to the pod `holder_uid` (`None`: the holder's
/// pod does not exist, so no process is its).
pub fn offences(
    device: &str,
    holder_uid: Option<&str>,
    processes: &[Process],
    pods: &dyn PodOfProcess,
) -> Vec<Offence> {
    processes
        .iter()
        .filter_map(|p| {
            let pod_uid = pods.pod_uid(p.pid);
            let own = holder_uid.is_some() && pod_uid.as_deref() == holder_uid;
            (!own).then(|| Offence { device: device.to_owned(), pid: p.pid, pod_uid })
        })
        .collect()
}

/// Looks for and acts on violations on one node's held devices.
pub struct Enforcer {
    client: Client,
    backend: Arc<dyn GpuBackend>,
    pods: Arc<dyn PodOfProcess>,
    recorder: Arc<Recorder>,
    violations: Arc<Violations>,
    node_name: String,
    evict: bool,
    reported: BTreeSet<(String, u32)>,
    evicted: BTreeSet<String>,
}

impl std::fmt::Debug for Enforcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enforcer")
            .field("node_name", &self.node_name)
            .field("evict", &self.evict)
            .field("reported", &self.reported)
            .finish_non_exhaustive()
    }
}

impl Enforcer {
    /// An enforcer for node `node_name`; `evict` deletes offending pods.
    pub fn new(
        client: Client,
        backend: Arc<dyn GpuBackend>,
        pods: Arc<dyn PodOfProcess>,
        recorder: Arc<Recorder>,
        violations: Arc<Violations>,
        node_name: &str,
        evict: bool,
    ) -> Enforcer {
        Enforcer {
            client,
            backend,
            pods,
            recorder,
            violations,
            node_name: node_name.to_owned(),
            evict,
            reported: BTreeSet::new(),
            evicted: BTreeSet::new(),
        }
    }

    /// One pass over the held devices; the offences found (reported or not before).
    pub async fn pass(&mut self, held: &[HeldDevice]) -> Vec<Offence> {
        let uuids: Vec<String> = held.iter().map(|h| h.mig_uuid.clone()).collect();
        let listed = blocking(&self.backend, move |b| {
            uuids.into_iter().map(|u| b.processes(&u)).collect::<Vec<_>>()
        })
        .await;
        let Ok(listed) = listed else {
            return Vec::new();
        };
        let mut processes: Vec<(&HeldDevice, Vec<Process>)> = Vec::new();
        for (device, result) in held.iter().zip(listed) {
            match result {
                Ok(p) if !p.is_empty() => processes.push((device, p)),
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    node = %self.node_name,
                    device = %device.mig_uuid,
                    error = %e,
                    "could not list the processes on a claimed MIG device"
                ),
            }
        }
        if processes.is_empty() {
            self.reported.clear();
            return Vec::new();
        }
        let pods = match self.node_pods().await {
            Ok(pods) => pods,
            Err(e) => {
                tracing::warn!(node = %self.node_name, error = %e, "could not list the node's pods");
                return Vec::new();
            }
        };
        self.evicted.retain(|uid| pods.contains_key(uid));
        let by_name: BTreeMap<(String, String), String> = pods
            .values()
            .map(|(ns, name, uid)| ((ns.clone(), name.clone()), uid.clone()))
            .collect();
        let mut found = Vec::new();
        for (device, procs) in &processes {
            let claim = &device.claim;
            let key = (claim.host_namespace.clone(), claim.host_pod.clone());
            let holder_uid = match by_name.get(&key) {
                Some(uid) => Some(uid.clone()),
                None => self.pod_uid(&claim.host_namespace, &claim.host_pod).await,
            };
            for offence in offences(&device.mig_uuid, holder_uid.as_deref(), procs, &*self.pods) {
                self.act(device, holder_uid.as_deref(), &offence, &pods).await;
                found.push(offence);
            }
        }
        let current: BTreeSet<(String, u32)> =
            found.iter().map(|o| (o.device.clone(), o.pid)).collect();
        self.reported.retain(|k| current.contains(k));
        found
    }

    async fn act(
        &mut self,
        device: &HeldDevice,
        holder_uid: Option<&str>,
        offence: &Offence,
        pods: &BTreeMap<String, (String, String, String)>,
    ) {
        let claim = &device.claim;
        let offender = offence.pod_uid.as_ref().and_then(|uid| pods.get(uid));
        let key = (offence.device.clone(), offence.pid);
        if self.reported.insert(key) {
            self.violations.count(device);
            let who = match (&offence.pod_uid, offender) {
                (Some(uid), Some((ns, name, _))) => format!("pod UID {uid} ({ns}/{name})"),
                (Some(uid), None) => format!("pod UID {uid}"),
                (None, _) => "an unknown pod (pod UID unknown)".to_owned(),
            };
            let message = format!(
                "process {} on MIG device {} belongs to {who}, not to {}/{}, which holds the device",
                offence.pid, offence.device, claim.host_namespace, claim.host_pod
            );
            tracing::warn!(
                node = %self.node_name,
                device = %offence.device,
                pid = offence.pid,
                pod_uid = offence.pod_uid.as_deref().unwrap_or("unknown"),
                holder = %format!("{}/{}", claim.host_namespace, claim.host_pod),
                "MIG device violation"
            );
            let target = EventTarget::pod(
                &claim.host_namespace,
                &claim.host_pod,
                holder_uid.map(str::to_owned),
            );
            if let Err(e) =
                self.recorder.record(&target, EventType::Warning, REASON_VIOLATION, &message).await
            {
                tracing::warn!(node = %self.node_name, error = %e, "could not write the Event");
            }
        }
        if !self.evict {
            return;
        }
        let (Some(uid), Some((ns, name, _))) = (&offence.pod_uid, offender) else {
            return;
        };
        if self.evicted.contains(uid) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::warn!(
                    node = %self.node_name,
                    pod = %format!("{ns}/{name}"),
                    device = %offence.device,
                    "evicted a pod using a MIG device it does not hold"
                );
                self.evicted.insert(uid.clone());
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.evicted.insert(uid.clone());
            }
            Err(e) => tracing::warn!(
                node = %self.node_name,
                pod = %format!("{ns}/{name}"),
                error = %e,
                "could not evict a pod using a MIG device it does not hold"
            ),
        }
    }

    /// The node's pods: UID → (namespace, name, UID).
    async fn node_pods(&self) -> Result<BTreeMap<String, (String, String, String)>, kube::Error> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={}", self.node_name));
        let list = api.list(&params).await?;
        let pods: BTreeMap<String, (String, String, String)> = list
            .items
            .into_iter()
            .filter_map(|p| {
                let m = p.metadata;
                let uid = m.uid?;
                Some((uid.clone(), (m.namespace?, m.name?, uid)))
            })
            .collect();
        Ok(pods)
    }

    async fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(pod) => pod.and_then(|p| p.metadata.uid),
            Err(e) => {
                tracing::warn!(node = %self.node_name, pod = %format!("{namespace}/{name}"), error = %e, "could not read the holder pod");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "5f0d3c4e-2b7a-4c1e-9d3f-0a1b2c3d4e5f";

    #[test]
    fn cgroupfs_and_systemd_paths_give_the_pod_uid() {
        let v1 = "12:memory:/kubepods/burstable/pod5f0d3c4e-2b7a-4c1e-9d3f-0a1b2c3d4e5f/0123abcd\n\
                  11:cpu,cpuacct:/kubepods/burstable/pod5f0d3c4e-2b7a-4c1e-9d3f-0a1b2c3d4e5f/0123abcd\n";
        assert_eq!(pod_uid_from_cgroup(v1).as_deref(), Some(UID));
        let guaranteed = "0::/kubepods/pod5f0d3c4e-2b7a-4c1e-9d3f-0a1b2c3d4e5f/abc\n";
        assert_eq!(pod_uid_from_cgroup(guaranteed).as_deref(), Some(UID));
        let systemd = "0::/kubepods.slice/kubepods-burstable.slice/\
            kubepods-burstable-pod5f0d3c4e_2b7a_4c1e_9d3f_0a1b2c3d4e5f.slice/\
            cri-containerd-0123.scope\n";
        assert_eq!(pod_uid_from_cgroup(systemd).as_deref(), Some(UID));
        let besteffort = "1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/\
            kubepods-besteffort-pod5F0D3C4E_2B7A_4C1E_9D3F_0A1B2C3D4E5F.slice/docker-1.scope\n";
        assert_eq!(pod_uid_from_cgroup(besteffort).as_deref(), Some(UID));
        let guaranteed_systemd =
            "0::/kubepods.slice/kubepods-pod5f0d3c4e_2b7a_4c1e_9d3f_0a1b2c3d4e5f.slice/x.scope";
        assert_eq!(pod_uid_from_cgroup(guaranteed_systemd).as_deref(), Some(UID));
    }

    #[test]
    fn other_cgroups_give_nothing() {
        assert_eq!(pod_uid_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n"), None);
        assert_eq!(pod_uid_from_cgroup("0::/system.slice/containerd.service\n"), None);
        assert_eq!(pod_uid_from_cgroup("0::/kubepods/burstable/podnot-a-uid/x\n"), None);
        assert_eq!(
            pod_uid_from_cgroup("0::/podcast/pod5f0d3c4e-2b7a-4c1e-9d3f-0a1b2c3d4e5f\n"),
            None
        );
        assert_eq!(pod_uid_from_cgroup(""), None);
    }

    #[test]
    fn proc_cgroups_reads_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("42")).unwrap();
        std::fs::write(
            dir.path().join("42/cgroup"),
            format!("0::/kubepods/besteffort/pod{UID}/c1\n"),
        )
        .unwrap();
        let pods = ProcCgroups::with_root(dir.path());
        assert_eq!(pods.pod_uid(42).as_deref(), Some(UID));
        assert_eq!(pods.pod_uid(43), None);
    }

    #[test]
    fn offences_are_processes_of_other_or_unknown_pods() {
        let map = PodMap::new();
        map.insert(1, "holder");
        map.insert(2, "intruder");
        let procs: Vec<Process> = [1, 2, 3]
            .into_iter()
            .map(|pid| Process { pid, used_memory_bytes: None, device: "MIG-1".into() })
            .collect();
        let found = offences("MIG-1", Some("holder"), &procs, &map);
        assert_eq!(
            found,
            vec![
                Offence { device: "MIG-1".into(), pid: 2, pod_uid: Some("intruder".into()) },
                Offence { device: "MIG-1".into(), pid: 3, pod_uid: None },
            ]
        );
        assert_eq!(offences("MIG-1", None, &procs, &map).len(), 3, "no holder pod: all foreign");
        map.remove(2);
        assert_eq!(map.pod_uid(2), None);
    }
}
