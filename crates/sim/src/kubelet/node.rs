//! The simulated kubelet's Node: its registration, its conditions and status, and its Lease
//! renewed as a kubelet's heartbeat.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::behaviour::fnv;
use super::pod_run::rfc3339;
use super::{Kubelet, LABEL_SIMULATED, LEASE_NAMESPACE, LEASE_SECONDS};

impl Kubelet {
    /// The node's InternalIP (`10.0.<n>.1`).
    pub fn host_ip(&self) -> String {
        format!("10.0.{}.1", self.number)
    }

    pub(super) fn node_conditions(&self, now: &DateTime<Utc>) -> Value {
        let since = rfc3339(&self.registered_at);
        let now = rfc3339(now);
        let c = |kind: &str, status: &str, reason: &str, message: &str| {
            json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since,
            })
        };
        json!([
            c(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available"
            ),
            c("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            c(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available"
            ),
            c(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status (simulated by carrel-node-agent)"
            ),
        ])
    }

    /// The Node's `status` as registration writes it.
    pub(super) fn node_status(&self, now: &DateTime<Utc>) -> Value {
        let resources = json!({"cpu": "64", "memory": "512Gi", "pods": self.max_pods.to_string()});
        let id = |salt: &str| {
            let a = fnv(&format!("{salt}/{}", self.node));
            let b = fnv(&format!(
                "{}/{salt}/{}",
                self.node,
                self.registered_at.timestamp_nanos_opt().unwrap_or(0)
            ));
            (a, b)
        };
        let (m1, m2) = id("machine");
        let (b1, b2) = id("boot");
        let uuid = |a: u64, b: u64| {
            format!(
                "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
                a >> 32,
                (a >> 16) & 0xffff,
                a & 0xffff,
                b >> 48,
                b & 0xffff_ffff_ffff
            )
        };
        json!({
            "capacity": resources,
            "allocatable": resources,
            "conditions": self.node_conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": self.host_ip()},
                {"type": "Hostname", "address": self.node},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{m1:016x}{m2:016x}"),
                "systemUUID": uuid(m1, m2),
                "bootID": uuid(b1, b2),
                "kernelVersion": "6.8.0-carrel-sim",
                "osImage": "Carrel simulated node",
                "containerRuntimeVersion": "sim://0.1.0",
                "kubeletVersion": "v1.33.0-carrel-sim",
                "kubeProxyVersion": "v1.33.0-carrel-sim",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        })
    }

    /// Create the Node if absent, and write its labels and status.
    pub async fn register(&self) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), self.node.clone()),
            ("kubernetes.io/os".to_owned(), "linux".to_owned()),
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
            (LABEL_SIMULATED.to_owned(), "true".to_owned()),
        ]);
        if nodes.get_opt(&self.node).await?.is_none() {
            let node = Node {
                metadata: ObjectMeta {
                    name: Some(self.node.clone()),
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                },
                ..Node::default()
            };
            match nodes.create(&PostParams::default(), &node).await {
                Ok(_) => tracing::info!(node = %self.node, "registered the simulated node"),
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        let params = PatchParams::default();
        let patch = json!({"metadata": {"labels": labels}});
        nodes.patch(&self.node, &params, &Patch::Merge(&patch)).await?;
        let status = json!({"status": self.node_status(&Utc::now())});
        nodes.patch_status(&self.node, &params, &Patch::Merge(&status)).await?;
        Ok(())
    }

    /// Renew the Node's conditions.
    pub async fn heartbeat(&self) -> Result<(), kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"status": {"conditions": self.node_conditions(&Utc::now())}});
        nodes.patch_status(&self.node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// Renew the node's Lease in [`LEASE_NAMESPACE`], making it (owned by the Node) if missing.
    pub async fn renew_lease(&self) -> Result<(), kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let now = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
        let spec = json!({
            "holderIdentity": self.node,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": now,
        });
        let patch = json!({"spec": spec});
        match leases.patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            other => return other.map(drop),
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let uid = nodes.get(&self.node).await?.metadata.uid.unwrap_or_default();
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.node,
                "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}],
            },
            "spec": spec,
        });
        let lease: Lease = serde_json::from_value(lease).map_err(kube::Error::SerdeError)?;
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
}
