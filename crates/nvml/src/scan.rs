//! A node's GPUs as the allocator's inventory (`carrel_gpu::inventory::Node`), read from a
//! backend: what a node agent publishes.

use carrel_gpu::inventory::{Gpu, Instance, Node};

use crate::{BackendError, GpuBackend};

/// The node `name`'s GPUs as the allocator sees them: every GPU of a model the catalogue knows,
/// with its MIG instances, all free (who holds a device is recorded in the host, not on the
/// node). GPUs of unknown models, and instances whose profile the catalogue does not know for
/// their GPU, are left out: nothing can be allocated on them. A GPU instance without a compute
/// instance (made outside Carrel) has no MIG UUID yet; it is listed under a `GI-<gpu>-<id>` name
/// so that the slots it takes are never planned for something else.
pub fn node(backend: &dyn GpuBackend, name: &str) -> Result<Node, BackendError> {
    let mut gpus = Vec::new();
    for info in backend.gpus()? {
        let Some(model) = info.model.known() else {
            tracing::debug!(gpu = %info.uuid, model = %info.model, "not a MIG model the catalogue knows");
            continue;
        };
        let mut instances = Vec::new();
        if info.mig_enabled {
            for instance in backend.instances(info.index)? {
                let Some(profile) = instance.profile_on(model) else {
                    tracing::debug!(gpu = %info.uuid, profile = %instance.profile, "unknown profile");
                    continue;
                };
                let uuid = instance
                    .uuid
                    .clone()
                    .unwrap_or_else(|| format!("GI-{}-{}", info.uuid, instance.gpu_instance_id));
                instances.push(Instance {
                    uuid,
                    shape: profile.shape,
                    placement: instance.placement.into(),
                    holder: None,
                });
            }
        }
        gpus.push(Gpu {
            uuid: info.uuid,
            index: info.index,
            model,
            mig_enabled: info.mig_enabled,
            instances,
        });
    }
    Ok(Node { name: name.to_owned(), gpus })
}

#[cfg(test)]
mod tests {
    use carrel_gpu::inventory::Fleet;

    use super::*;
    use crate::Simulator;

    #[test]
    fn a_simulated_node_is_a_valid_inventory() {
        let sim = Simulator::from_spec("a100-80gbx2:mig=1g.10gb*7", "node-a").unwrap();
        let node = node(&sim, "node-a").unwrap();
        assert_eq!(node.gpus.len(), 2);
        assert!(node.gpus.iter().all(|g| g.mig_enabled && g.instances.len() == 7));
        let uuids: Vec<&str> = node.gpus[0].instances.iter().map(|i| i.uuid.as_str()).collect();
        assert!(uuids.iter().all(|u| u.starts_with("MIG-")), "{uuids:?}");
        let fleet = Fleet { nodes: vec![node] };
        fleet.validate().unwrap();
    }

    #[test]
    fn gpus_without_mig_are_listed_without_instances() {
        let sim = Simulator::from_spec("h200x1", "node-b").unwrap();
        let node = node(&sim, "node-b").unwrap();
        assert_eq!(node.gpus.len(), 1);
        assert!(node.gpus[0].instances.is_empty());
    }
}
