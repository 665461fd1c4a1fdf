//! The fleet inventory: nodes → GPUs → MIG instances, each free or held by one tenant pod; its
//! validation; the quota usage rebuilt from it; and applying an allocation to it.

use std::collections::{BTreeMap, BTreeSet};

use crate::alloc::{Allocation, DeviceSource};
use crate::catalogue::{GpuModel, Profile, Shape};
use crate::layout::{GpuLayout, Placement, PlacementError};

/// Who holds a MIG instance: a tenant's pod (the tenant's own names).
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// The tenant.
    pub tenant: String,
    /// The pod's namespace in the tenant cluster.
    pub namespace: String,
    /// The pod's name in the tenant cluster.
    pub pod: String,
}

/// One MIG GPU instance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// The MIG device UUID (`MIG-…`).
    pub uuid: String,
    /// Its profile's shape (one NVML GPU instance profile id); its name depends on the GPU model.
    pub shape: Shape,
    /// Where it sits.
    pub placement: Placement,
    /// Who holds it; `None` when free.
    pub holder: Option<Holder>,
}

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// The GPU UUID (`GPU-…`).
    pub uuid: String,
    /// Its index on the node.
    pub index: u32,
    /// Its model.
    pub model: GpuModel,
    /// Whether MIG mode is on. A GPU with MIG off has no instances and is never allocated from.
    pub mig_enabled: bool,
    /// Its MIG instances.
    pub instances: Vec<Instance>,
}

/// One node and its GPUs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// The node name.
    pub name: String,
    /// Its GPUs.
    pub gpus: Vec<Gpu>,
}

/// Every GPU node of the fleet.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// The nodes.
    pub nodes: Vec<Node>,
}

/// What is wrong with an inventory.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// An instance breaks the GPU's geometry rules.
    #[error("node {node}, GPU {gpu}: instance {instance}: {source}")]
    Geometry {
        /// The node.
        node: String,
        /// The GPU UUID.
        gpu: String,
        /// The instance UUID.
        instance: String,
        /// The rule broken.
        source: Box<PlacementError>,
    },
    /// A GPU with MIG mode off lists instances.
    #[error("node {node}, GPU {gpu}: MIG mode is off but it lists instances")]
    InstancesWithoutMig {
        /// The node.
        node: String,
        /// The GPU UUID.
        gpu: String,
    },
    /// A name appears twice (node, GPU UUID or instance UUID).
    #[error("duplicate {what} {name:?}")]
    Duplicate {
        /// `node`, `GPU` or `instance`.
        what: &'static str,
        /// The repeated name.
        name: String,
    },
}

impl Gpu {
    /// The profile of one of this GPU's instances.
    pub fn profile_of(&self, instance: &Instance) -> Profile {
        Profile { model: self.model, shape: instance.shape }
    }

    /// The GPU's layout, checking every instance against the geometry rules.
    pub fn layout(&self, node: &str) -> Result<GpuLayout, InventoryError> {
        let mut layout = GpuLayout::new();
        if !self.mig_enabled && !self.instances.is_empty() {
            return Err(InventoryError::InstancesWithoutMig {
                node: node.to_owned(),
                gpu: self.uuid.clone(),
            });
        }
        for inst in &self.instances {
            let shape = inst.shape;
            let err = |source| InventoryError::Geometry {
                node: node.to_owned(),
                gpu: self.uuid.clone(),
                instance: inst.uuid.clone(),
                source: Box::new(source),
            };
            if inst.placement.size != shape.memory_slots() {
                return Err(err(PlacementError::InvalidPlacement {
                    profile: self.profile_of(inst).name().to_owned(),
                    start: inst.placement.start,
                    size: inst.placement.size,
                    valid: shape.starts().to_vec(),
                    expected_size: shape.memory_slots(),
                }));
            }
            layout.add(self.profile_of(inst), inst.placement.start).map_err(err)?;
        }
        Ok(layout)
    }
}

impl Fleet {
    /// Check every GPU's geometry and that node names, GPU UUIDs and instance UUIDs are unique.
    pub fn validate(&self) -> Result<(), InventoryError> {
        let mut nodes = BTreeSet::new();
        let mut gpus = BTreeSet::new();
        let mut instances = BTreeSet::new();
        for node in &self.nodes {
            if !nodes.insert(node.name.as_str()) {
                return Err(dup("node", &node.name));
            }
            for gpu in &node.gpus {
                if !gpus.insert(gpu.uuid.as_str()) {
                    return Err(dup("GPU", &gpu.uuid));
                }
                gpu.layout(&node.name)?;
                for inst in &gpu.instances {
                    if !instances.insert(inst.uuid.as_str()) {
                        return Err(dup("instance", &inst.uuid));
                    }
                }
            }
        }
        Ok(())
    }

    /// Apply an allocation made for this fleet: remove the instances it removes, create the ones
    /// it creates (naming each with `new_uuid`), and give every device to `holder`.
    pub fn apply(
        &mut self,
        allocation: &Allocation,
        holder: &Holder,
        mut new_uuid: impl FnMut() -> String,
    ) {
        for removal in &allocation.removals {
            if let Some(gpu) = self.gpu_mut(&removal.node, &removal.gpu_uuid) {
                gpu.instances.retain(|i| i.uuid != removal.instance_uuid || i.holder.is_some());
            }
        }
        for device in &allocation.devices {
            let Some(gpu) = self.gpu_mut(&device.node, &device.gpu_uuid) else {
                continue;
            };
            match &device.source {
                DeviceSource::Existing { instance_uuid } => {
                    if let Some(inst) = gpu
                        .instances
                        .iter_mut()
                        .find(|i| &i.uuid == instance_uuid && i.holder.is_none())
                    {
                        inst.holder = Some(holder.clone());
                    }
                }
                DeviceSource::Create => gpu.instances.push(Instance {
                    uuid: new_uuid(),
                    shape: device.profile.shape,
                    placement: device.placement,
                    holder: Some(holder.clone()),
                }),
            }
        }
    }

    /// Free every instance held by `holder`; returns how many were freed.
    pub fn release(&mut self, holder: &Holder) -> usize {
        let mut freed = 0;
        for inst in self
            .nodes
            .iter_mut()
            .flat_map(|n| n.gpus.iter_mut())
            .flat_map(|g| g.instances.iter_mut())
        {
            if inst.holder.as_ref() == Some(holder) {
                inst.holder = None;
                freed += 1;
            }
        }
        freed
    }

    /// Every GPU, with its node's name.
    pub fn gpus(&self) -> impl Iterator<Item = (&str, &Gpu)> {
        self.nodes.iter().flat_map(|n| n.gpus.iter().map(move |g| (n.name.as_str(), g)))
    }

    fn gpu_mut(&mut self, node: &str, gpu: &str) -> Option<&mut Gpu> {
        self.nodes
            .iter_mut()
            .filter(|n| n.name == node)
            .flat_map(|n| n.gpus.iter_mut())
            .find(|g| g.uuid == gpu)
    }
}

fn dup(what: &'static str, name: &str) -> InventoryError {
    InventoryError::Duplicate { what, name: name.to_owned() }
}

/// Instances held per tenant and profile name: what counts against quotas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    by_tenant: BTreeMap<String, BTreeMap<String, u32>>,
}

impl Usage {
    /// Rebuild usage from the claims in the inventory (the only source of truth).
    pub fn from_fleet(fleet: &Fleet) -> Usage {
        let mut usage = Usage::default();
        for (_, gpu) in fleet.gpus() {
            for inst in &gpu.instances {
                if let Some(holder) = &inst.holder {
                    *usage
                        .by_tenant
                        .entry(holder.tenant.clone())
                        .or_default()
                        .entry(gpu.profile_of(inst).name().to_owned())
                        .or_default() += 1;
                }
            }
        }
        usage
    }

    /// Instances of `profile` (canonical name) `tenant` holds.
    pub fn get(&self, tenant: &str, profile: &str) -> u32 {
        self.by_tenant.get(tenant).and_then(|p| p.get(profile)).copied().unwrap_or(0)
    }

    /// Every tenant's usage, by profile name.
    pub fn tenants(&self) -> &BTreeMap<String, BTreeMap<String, u32>> {
        &self.by_tenant
    }
}

/// Quotas: per tenant and profile name, how many instances it may hold at once. A profile with
/// no entry has quota 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    by_tenant: BTreeMap<String, BTreeMap<String, u32>>,
}

impl Quotas {
    /// No quotas.
    pub fn new() -> Quotas {
        Quotas::default()
    }

    /// Set `tenant`'s quota of `profile` (`1g.18gb`, `mig-1g.18gb` or `nvidia.com/mig-1g.18gb`)
    /// to `count`. An unknown profile is an error that lists the known ones.
    pub fn set(
        &mut self,
        tenant: &str,
        profile: &str,
        count: u32,
    ) -> Result<(), crate::alloc::AllocError> {
        let name = crate::alloc::canonical_or_error(profile)?;
        self.by_tenant.entry(tenant.to_owned()).or_default().insert(name, count);
        Ok(())
    }

    /// `tenant`'s quota of the canonical profile name `profile` (0 when unset).
    pub fn get(&self, tenant: &str, profile: &str) -> u32 {
        self.by_tenant.get(tenant).and_then(|p| p.get(profile)).copied().unwrap_or(0)
    }
}
