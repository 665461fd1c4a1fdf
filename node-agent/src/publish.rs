//! Inventory publication: the node's GPUs and MIG instances, as read from its [`GpuBackend`],
//! written onto the host `Node` object named after the node.
//!
//! - annotation [`ANNOTATION_INVENTORY`]: the JSON of a [`carrel_gpu::Node`] with every holder
//!   `None` (who holds a device is recorded in claim Leases, not here);
//! - labels [`LABEL_GPU_NODE`] `"true"`, [`LABEL_GPU_PRODUCT`] (the model slug of GPU 0) and
//!   [`LABEL_MIG_STRATEGY`] `mixed`;
//! - `status.capacity` and `status.allocatable`: `nvidia.com/mig-<profile>` (`+` written `.`)
//!   counts of the instances that exist, as NVIDIA's device plugin reports them in the mixed
//!   strategy.
//!
//! Both the object and its `/status` are merge-patched, and only when what would be published
//! differs from what the Node carries.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use carrel_gpu::catalogue::RESOURCE_PREFIX;
use carrel_nvml::{BackendError, GpuBackend};
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Map, Value};

/// Annotation holding the node's inventory (JSON of [`carrel_gpu::Node`]).
pub const ANNOTATION_INVENTORY: &str = "gpu.carrel.dev/inventory";
/// Label `"true"` on every node that publishes an inventory.
pub const LABEL_GPU_NODE: &str = "gpu.carrel.dev/node";
/// Label: the GPU model's slug (`h200`, `a100-80gb`), as NVIDIA's feature discovery labels it.
pub const LABEL_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
/// Label: the device plugin's MIG strategy; always `mixed`.
pub const LABEL_MIG_STRATEGY: &str = "nvidia.com/mig.strategy";

/// How long a publication is trusted before the Node is read again to check it still carries it.
const RECHECK: Duration = Duration::from_secs(60);

/// Why the inventory could not be read or published.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The GPU backend failed.
    #[error("reading the GPUs: {0}")]
    Backend(#[from] BackendError),
    /// The inventory does not serialise.
    #[error("encoding the inventory: {0}")]
    Encode(#[from] serde_json::Error),
    /// The host `Node` does not exist (yet).
    #[error("node {0} is not registered in the host cluster")]
    NodeMissing(String),
    /// The host API refused or failed.
    #[error("publishing the inventory on node {node}: {source}")]
    Kube {
        /// The node.
        node: String,
        /// The client's error.
        source: kube::Error,
    },
}

/// Read the node's inventory from `backend`: every GPU of a known model with its instances, all
/// free.
pub fn read(backend: &dyn GpuBackend, node_name: &str) -> Result<carrel_gpu::Node, BackendError> {
    let mut node = carrel_nvml::scan::node(backend, node_name)?;
    for instance in node.gpus.iter_mut().flat_map(|g| g.instances.iter_mut()) {
        instance.holder = None;
    }
    Ok(node)
}

/// What the agent writes on its Node for one inventory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// The annotation's value.
    pub inventory_json: String,
    /// Labels to set (`None`: to remove).
    pub labels: BTreeMap<String, Option<String>>,
    /// `nvidia.com/mig-*` resource → instances.
    pub resources: BTreeMap<String, u32>,
}

impl Publication {
    /// The publication of `node`'s inventory (holders are left out).
    pub fn of(node: &carrel_gpu::Node) -> Result<Publication, serde_json::Error> {
        let mut node = node.clone();
        for instance in node.gpus.iter_mut().flat_map(|g| g.instances.iter_mut()) {
            instance.holder = None;
        }
        let mut resources = BTreeMap::new();
        for gpu in &node.gpus {
            for instance in &gpu.instances {
                *resources.entry(gpu.profile_of(instance).resource_name()).or_insert(0) += 1;
            }
        }
        let product = node.gpus.iter().min_by_key(|g| g.index).map(|g| g.model.slug().to_owned());
        let labels = BTreeMap::from([
            (LABEL_GPU_NODE.to_owned(), Some("true".to_owned())),
            (LABEL_GPU_PRODUCT.to_owned(), product),
            (LABEL_MIG_STRATEGY.to_owned(), Some("mixed".to_owned())),
        ]);
        Ok(Publication { inventory_json: serde_json::to_string(&node)?, labels, resources })
    }

    /// Whether `node` already carries this publication.
    pub fn is_on(&self, node: &KubeNode) -> bool {
        let meta = &node.metadata;
        let annotation = meta.annotations.as_ref().and_then(|a| a.get(ANNOTATION_INVENTORY));
        if annotation != Some(&self.inventory_json) {
            return false;
        }
        let labels = meta.labels.clone().unwrap_or_default();
        if self.labels.iter().any(|(k, v)| labels.get(k) != v.as_ref()) {
            return false;
        }
        let status = node.status.clone().unwrap_or_default();
        [status.capacity, status.allocatable].into_iter().all(|map| {
            let published: BTreeMap<String, String> = map
                .unwrap_or_default()
                .into_iter()
                .filter(|(k, _)| k.starts_with(RESOURCE_PREFIX))
                .map(|(k, v)| (k, v.0))
                .collect();
            let wanted: BTreeMap<String, String> =
                self.resources.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
            published == wanted
        })
    }

    /// The merge patch of the Node's metadata.
    pub fn metadata_patch(&self) -> Value {
        let labels: Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().map(Value::String).unwrap_or(Value::Null)))
            .collect();
        json!({"metadata": {
            "labels": labels,
            "annotations": {ANNOTATION_INVENTORY: self.inventory_json},
        }})
    }

    /// The merge patch of the Node's `/status`; `stale` are `nvidia.com/mig-*` resources the Node
    /// lists that are no longer published (removed).
    pub fn status_patch<'a>(&self, stale: impl IntoIterator<Item = &'a str>) -> Value {
        let mut resources: Map<String, Value> =
            stale.into_iter().map(|k| (k.to_owned(), Value::Null)).collect();
        for (name, count) in &self.resources {
            resources.insert(name.clone(), Value::String(count.to_string()));
        }
        json!({"status": {"capacity": resources.clone(), "allocatable": resources}})
    }
}

/// Publishes one node's inventory, skipping what the Node already carries.
#[derive(Debug)]
pub struct Publisher {
    nodes: Api<KubeNode>,
    node_name: String,
    last: Option<(Publication, Instant)>,
}

impl Publisher {
    /// A publisher for the host Node `node_name`.
    pub fn new(client: Client, node_name: &str) -> Publisher {
        Publisher { nodes: Api::all(client), node_name: node_name.to_owned(), last: None }
    }

    /// Forget what was published, so that the next call reads the Node again.
    pub fn invalidate(&mut self) {
        self.last = None;
    }

    /// Publish `node`'s inventory; whether the Node was written.
    pub async fn publish(&mut self, node: &carrel_gpu::Node) -> Result<bool, InventoryError> {
        let wanted = Publication::of(node)?;
        if let Some((last, at)) = &self.last {
            if *last == wanted && at.elapsed() < RECHECK {
                return Ok(false);
            }
        }
        let kube_err = |source| InventoryError::Kube { node: self.node_name.clone(), source };
        let current = self
            .nodes
            .get_opt(&self.node_name)
            .await
            .map_err(kube_err)?
            .ok_or_else(|| InventoryError::NodeMissing(self.node_name.clone()))?;
        if wanted.is_on(&current) {
            self.last = Some((wanted, Instant::now()));
            return Ok(false);
        }
        let params = PatchParams::default();
        self.nodes
            .patch(&self.node_name, &params, &Patch::Merge(wanted.metadata_patch()))
            .await
            .map_err(kube_err)?;
        let status = current.status.unwrap_or_default();
        let listed: Vec<String> = [status.capacity, status.allocatable]
            .into_iter()
            .flat_map(|m| m.unwrap_or_default().into_keys())
            .filter(|k| k.starts_with(RESOURCE_PREFIX) && !wanted.resources.contains_key(k))
            .collect();
        let patch = wanted.status_patch(listed.iter().map(String::as_str));
        self.nodes
            .patch_status(&self.node_name, &params, &Patch::Merge(patch))
            .await
            .map_err(kube_err)?;
        tracing::info!(
            node = %self.node_name,
            resources = ?wanted.resources,
            "published the GPU inventory"
        );
        self.last = Some((wanted, Instant::now()));
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use carrel_gpu::Holder;
    use carrel_nvml::Simulator;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    #[test]
    fn publication_counts_instances_and_drops_holders() {
        let sim =
            Simulator::from_spec("h200x2:mig=1g.18gb*2,3g.71gb*1,1g.18gb+me*1", "n1").unwrap();
        let mut node = read(&sim, "n1").unwrap();
        node.gpus[0].instances[0].holder =
            Some(Holder { tenant: "t".into(), namespace: "d".into(), pod: "p".into() });
        let publication = Publication::of(&node).unwrap();
        assert_eq!(
            publication.resources,
            BTreeMap::from([
                ("nvidia.com/mig-1g.18gb".to_owned(), 4),
                ("nvidia.com/mig-1g.18gb.me".to_owned(), 2),
                ("nvidia.com/mig-3g.71gb".to_owned(), 2),
            ])
        );
        let back: carrel_gpu::Node = serde_json::from_str(&publication.inventory_json).unwrap();
        assert_eq!(back.gpus.len(), 2);
        assert!(back.gpus.iter().flat_map(|g| &g.instances).all(|i| i.holder.is_none()));
        assert_eq!(publication.labels[LABEL_GPU_PRODUCT].as_deref(), Some("h200"));
        assert_eq!(publication.labels[LABEL_MIG_STRATEGY].as_deref(), Some("mixed"));
        assert_eq!(publication.labels[LABEL_GPU_NODE].as_deref(), Some("true"));
    }

    #[test]
    fn patches_set_and_remove_resources() {
        let sim = Simulator::from_spec("a100-80gbx1:mig=1g.10gb*1", "n1").unwrap();
        let publication = Publication::of(&read(&sim, "n1").unwrap()).unwrap();
        let patch = publication.status_patch(["nvidia.com/mig-3g.40gb"]);
        assert_eq!(
            patch,
            json!({"status": {
                "capacity": {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-3g.40gb": null},
                "allocatable": {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-3g.40gb": null},
            }})
        );
        let meta = publication.metadata_patch();
        assert_eq!(meta["metadata"]["labels"]["nvidia.com/gpu.product"], "a100-80gb");
        assert!(meta["metadata"]["annotations"][ANNOTATION_INVENTORY].is_string());
    }

    #[test]
    fn a_node_carrying_the_publication_is_recognised() {
        let sim = Simulator::from_spec("h200x1:mig=1g.18gb*1", "n1").unwrap();
        let publication = Publication::of(&read(&sim, "n1").unwrap()).unwrap();
        let mut node = KubeNode::default();
        assert!(!publication.is_on(&node));
        node.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_INVENTORY.to_owned(),
            publication.inventory_json.clone(),
        )]));
        node.metadata.labels = Some(
            publication.labels.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect(),
        );
        let resources = BTreeMap::from([
            ("cpu".to_owned(), Quantity("64".into())),
            ("nvidia.com/mig-1g.18gb".to_owned(), Quantity("1".into())),
        ]);
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            ..Default::default()
        });
        assert!(publication.is_on(&node));
        let mut extra = node.clone();
        if let Some(status) = extra.status.as_mut() {
            status
                .capacity
                .as_mut()
                .unwrap()
                .insert("nvidia.com/mig-7g.141gb".into(), Quantity("1".into()));
        }
        assert!(!publication.is_on(&extra));
    }
}
