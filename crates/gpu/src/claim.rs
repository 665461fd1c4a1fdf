//! Device claims: how a held MIG device is written down in the host cluster.
//!
//! A claim is a set of `coordination.k8s.io/v1` Leases in [`CLAIM_NAMESPACE`], one per memory slot
//! the device covers and one more for the GPU's media engine when the profile takes it. Lease
//! names are derived from the GPU and the slot ([`slot_lease_name`]), so two claims that overlap
//! on any slot want a Lease of the same name: the host's create, which fails when the name exists,
//! is the lock. A claimer creates its Leases in ascending name order and deletes the ones it made
//! when one create fails; so at most one claim ever holds a slot. Every Lease of a claim carries the
//! whole claim in its labels and annotations ([`Claim::labels`], [`Claim::annotations`]), so the
//! fleet's holders can be rebuilt from the Leases alone ([`Claim::from_metadata`],
//! [`apply_claims`]).
//!
//! This module only computes names and metadata; writing the Leases is the caller's IO.

use std::collections::BTreeMap;

use crate::catalogue::{GpuModel, Shape};
use crate::inventory::{Fleet, Holder, Instance};
use crate::layout::Placement;

/// The host namespace of Carrel's own objects, which holds every claim. A tenant's host
/// namespace is `carrel-<tenant>` for a non-empty tenant name, which can never be `carrel`, so no
/// tenant can be given (or delete) this namespace.
pub const CLAIM_NAMESPACE: &str = "carrel";
/// Label on every claim Lease.
pub const LABEL_CLAIM: &str = "gpu.carrel.dev/claim";
/// Label: the node of the claimed device.
pub const LABEL_NODE: &str = "gpu.carrel.dev/node";
/// Label: the tenant holding the device.
pub const LABEL_TENANT: &str = "gpu.carrel.dev/tenant";
/// Label: the host pod holding the device (in the tenant's host namespace).
pub const LABEL_HOST_POD: &str = "gpu.carrel.dev/host-pod";

const ANNOTATION_PREFIX: &str = "gpu.carrel.dev/";

/// One claimed device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The node.
    pub node: String,
    /// The GPU's UUID (`GPU-…`).
    pub gpu_uuid: String,
    /// The GPU's model.
    pub model: GpuModel,
    /// The profile's shape.
    pub shape: Shape,
    /// Where the instance sits.
    pub placement: Placement,
    /// The MIG device UUID, once the instance exists; empty while it is being created.
    pub instance_uuid: String,
    /// Who holds it, in the tenant's names.
    pub holder: Holder,
    /// The host pod's namespace.
    pub host_namespace: String,
    /// The host pod's name.
    pub host_pod: String,
}

/// Why Lease metadata is not a claim.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// An annotation is missing.
    #[error("claim annotation {0} is missing")]
    Missing(String),
    /// An annotation does not parse.
    #[error("claim annotation {key} = {value:?}: {reason}")]
    Invalid {
        /// The annotation.
        key: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
}

/// The Lease name for one memory slot of a GPU (`mig-<gpu uuid, lower case>-slot-<n>`).
pub fn slot_lease_name(gpu_uuid: &str, slot: u8) -> String {
    format!("mig-{}-slot-{slot}", gpu_uuid.to_ascii_lowercase())
}

/// The Lease name for a GPU's media engine.
pub fn media_engine_lease_name(gpu_uuid: &str) -> String {
    format!("mig-{}-me", gpu_uuid.to_ascii_lowercase())
}

impl Claim {
    /// The profile name (`1g.18gb`).
    pub fn profile(&self) -> &'static str {
        crate::catalogue::Profile { model: self.model, shape: self.shape }.name()
    }

    /// The Leases that make up this claim, in the order to create them.
    pub fn lease_names(&self) -> Vec<String> {
        let mut names: Vec<String> = (self.placement.start
            ..self.placement.start + self.placement.size)
            .map(|slot| slot_lease_name(&self.gpu_uuid, slot))
            .collect();
        if self.shape.media_engine() {
            names.push(media_engine_lease_name(&self.gpu_uuid));
        }
        names.sort();
        names
    }

    /// The Lease's `spec.holderIdentity`: `<tenant>/<namespace>/<pod>`.
    pub fn holder_identity(&self) -> String {
        format!("{}/{}/{}", self.holder.tenant, self.holder.namespace, self.holder.pod)
    }

    /// Labels on every Lease of the claim.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_CLAIM.to_owned(), "true".to_owned()),
            (LABEL_NODE.to_owned(), self.node.clone()),
            (LABEL_TENANT.to_owned(), self.holder.tenant.clone()),
            (LABEL_HOST_POD.to_owned(), self.host_pod.clone()),
        ])
    }

    /// Annotations on every Lease of the claim: all of it.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let a = |k: &str, v: String| (format!("{ANNOTATION_PREFIX}{k}"), v);
        BTreeMap::from([
            a("node", self.node.clone()),
            a("gpu", self.gpu_uuid.clone()),
            a("model", self.model.slug().to_owned()),
            a("profile", self.profile().to_owned()),
            a("start", self.placement.start.to_string()),
            a("size", self.placement.size.to_string()),
            a("instance", self.instance_uuid.clone()),
            a("tenant", self.holder.tenant.clone()),
            a("namespace", self.holder.namespace.clone()),
            a("pod", self.holder.pod.clone()),
            a("host-namespace", self.host_namespace.clone()),
            a("host-pod", self.host_pod.clone()),
        ])
    }

    /// The claim a Lease's annotations describe.
    pub fn from_metadata(annotations: &BTreeMap<String, String>) -> Result<Claim, ClaimError> {
        let get = |k: &str| -> Result<&String, ClaimError> {
            let key = format!("{ANNOTATION_PREFIX}{k}");
            annotations.get(&key).ok_or(ClaimError::Missing(key))
        };
        let invalid = |k: &str, v: &str, reason: &str| ClaimError::Invalid {
            key: format!("{ANNOTATION_PREFIX}{k}"),
            value: v.to_owned(),
            reason: reason.to_owned(),
        };
        let model_slug = get("model")?;
        let model = GpuModel::from_slug(model_slug)
            .ok_or_else(|| invalid("model", model_slug, "not a GPU model of the catalogue"))?;
        let profile_name = get("profile")?;
        let profile = model
            .profile(profile_name)
            .ok_or_else(|| invalid("profile", profile_name, "not a profile of that model"))?;
        let slot = |k: &str| -> Result<u8, ClaimError> {
            let v = get(k)?;
            v.parse::<u8>().map_err(|_| invalid(k, v, "not a memory slot number"))
        };
        let placement = Placement { start: slot("start")?, size: slot("size")? };
        if !profile.shape.valid_start(placement.start)
            || placement.size != profile.shape.memory_slots()
        {
            return Err(invalid(
                "start",
                &placement.start.to_string(),
                "not a valid placement of the profile",
            ));
        }
        Ok(Claim {
            node: get("node")?.clone(),
            gpu_uuid: get("gpu")?.clone(),
            model,
            shape: profile.shape,
            placement,
            instance_uuid: get("instance")?.clone(),
            holder: Holder {
                tenant: get("tenant")?.clone(),
                namespace: get("namespace")?.clone(),
                pod: get("pod")?.clone(),
            },
            host_namespace: get("host-namespace")?.clone(),
            host_pod: get("host-pod")?.clone(),
        })
    }
}

/// The claims that `claims` (one per claim Lease, so each claim several times) stand for, once
/// each, by GPU and start slot, in that order. The node agent writes the instance UUID on every
/// Lease of a claim in turn; a claim takes it from whichever Lease has it already.
pub fn distinct(claims: impl IntoIterator<Item = Claim>) -> Vec<Claim> {
    let mut by_place: BTreeMap<(String, u8), Claim> = BTreeMap::new();
    for claim in claims {
        match by_place.entry((claim.gpu_uuid.clone(), claim.placement.start)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(claim);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if o.get().instance_uuid.is_empty() && !claim.instance_uuid.is_empty() {
                    o.get_mut().instance_uuid = claim.instance_uuid;
                }
            }
        }
    }
    by_place.into_values().collect()
}

/// Put the claims' holders into the fleet. A claim whose instance exists (same GPU and start)
/// marks it held; a claim whose instance is still to be created adds it with an empty UUID, so the
/// allocator sees its slots taken. Claims on GPUs the fleet does not have are returned.
pub fn apply_claims<'a>(
    fleet: &mut Fleet,
    claims: impl IntoIterator<Item = &'a Claim>,
) -> Vec<&'a Claim> {
    let mut unknown = Vec::new();
    for claim in claims {
        let gpu = fleet
            .nodes
            .iter_mut()
            .filter(|n| n.name == claim.node)
            .flat_map(|n| n.gpus.iter_mut())
            .find(|g| g.uuid == claim.gpu_uuid);
        let Some(gpu) = gpu else {
            unknown.push(claim);
            continue;
        };
        match gpu.instances.iter_mut().find(|i| i.placement.start == claim.placement.start) {
            Some(instance) if instance.shape == claim.shape => {
                instance.holder = Some(claim.holder.clone());
            }
            Some(_) => {
                // A free instance of another shape sits there: the node agent replaces it.
                gpu.instances
                    .retain(|i| i.holder.is_some() || !overlaps(i.placement, claim.placement));
                gpu.instances.push(pending(claim));
            }
            None => {
                gpu.instances
                    .retain(|i| i.holder.is_some() || !overlaps(i.placement, claim.placement));
                gpu.instances.push(pending(claim));
            }
        }
    }
    unknown
}

fn pending(claim: &Claim) -> Instance {
    Instance {
        uuid: claim.instance_uuid.clone(),
        shape: claim.shape,
        placement: claim.placement,
        holder: Some(claim.holder.clone()),
    }
}

/// Whether two placements share a memory slot.
pub fn overlaps(a: Placement, b: Placement) -> bool {
    a.start < b.start + b.size && b.start < a.start + a.size
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{Gpu, Node};

    fn claim(start: u8, shape: Shape) -> Claim {
        Claim {
            node: "n1".into(),
            gpu_uuid: "GPU-AB".into(),
            model: GpuModel::H200_141GB,
            shape,
            placement: Placement { start, size: shape.memory_slots() },
            instance_uuid: String::new(),
            holder: Holder { tenant: "t".into(), namespace: "default".into(), pod: "p".into() },
            host_namespace: "carrel-t".into(),
            host_pod: "p-x-default".into(),
        }
    }

    #[test]
    fn overlapping_claims_share_a_lease_name() {
        let a = claim(4, Shape::G3).lease_names();
        let b = claim(6, Shape::G1DoubleMemory).lease_names();
        assert_eq!(a.len(), 4);
        assert!(a.iter().any(|n| b.contains(n)), "{a:?} {b:?}");
        let c = claim(0, Shape::G2).lease_names();
        assert!(!a.iter().any(|n| c.contains(n)));
        assert_eq!(c, ["mig-gpu-ab-slot-0", "mig-gpu-ab-slot-1"]);
    }

    #[test]
    fn media_engine_claims_share_the_engine_lease() {
        let a = claim(0, Shape::G1Me).lease_names();
        let b = claim(3, Shape::G1Me).lease_names();
        assert!(a.contains(&"mig-gpu-ab-me".to_owned()));
        assert!(b.contains(&"mig-gpu-ab-me".to_owned()));
    }

    #[test]
    fn metadata_round_trips_and_bad_values_are_named() {
        let c = claim(2, Shape::G2);
        assert_eq!(Claim::from_metadata(&c.annotations()), Ok(c.clone()));
        let mut bad = c.annotations();
        bad.insert("gpu.carrel.dev/start".into(), "1".into());
        let err = Claim::from_metadata(&bad).expect_err("2g cannot start at 1");
        assert!(err.to_string().contains("gpu.carrel.dev/start"), "{err}");
        let mut missing = c.annotations();
        missing.remove("gpu.carrel.dev/pod");
        assert_eq!(
            Claim::from_metadata(&missing),
            Err(ClaimError::Missing("gpu.carrel.dev/pod".into()))
        );
    }

    #[test]
    fn each_claim_counts_once_with_the_instance_any_lease_has() {
        let mut annotated = claim(4, Shape::G3);
        annotated.instance_uuid = "MIG-9".into();
        let other = claim(0, Shape::G2);
        let leases =
            vec![claim(4, Shape::G3), other.clone(), annotated.clone(), claim(4, Shape::G3)];
        assert_eq!(distinct(leases), vec![other, annotated]);
    }

    #[test]
    fn claims_mark_instances_held_or_add_pending_ones() {
        let free = |uuid: &str, shape: Shape, start: u8| Instance {
            uuid: uuid.into(),
            shape,
            placement: Placement { start, size: shape.memory_slots() },
            holder: None,
        };
        let mut fleet = Fleet {
            nodes: vec![Node {
                name: "n1".into(),
                gpus: vec![Gpu {
                    uuid: "GPU-AB".into(),
                    index: 0,
                    model: GpuModel::H200_141GB,
                    mig_enabled: true,
                    instances: vec![free("MIG-1", Shape::G1, 0), free("MIG-2", Shape::G1, 4)],
                }],
            }],
        };
        let held = claim(0, Shape::G1);
        let planned = claim(4, Shape::G3);
        let mut elsewhere = claim(0, Shape::G1);
        elsewhere.gpu_uuid = "GPU-ZZ".into();
        let unknown = apply_claims(&mut fleet, [&held, &planned, &elsewhere]);
        assert_eq!(unknown, vec![&elsewhere]);
        let gpu = &fleet.nodes[0].gpus[0];
        assert_eq!(gpu.instances.len(), 2, "{:?}", gpu.instances);
        assert_eq!(gpu.instances[0].holder.as_ref().map(|h| h.pod.as_str()), Some("p"));
        assert_eq!(gpu.instances[1].shape, Shape::G3);
        assert_eq!(gpu.instances[1].uuid, "");
        fleet.validate().expect("still a valid fleet");
    }
}
