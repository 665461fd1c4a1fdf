//! The claim Leases: the one API through which every component writes, reads and deletes device
//! claims in the host cluster ([`crate::claim`] says what a claim's Leases are named and carry).
//!
//! Pure, always compiled: Leases sorted into claims as the node agent needs them
//! ([`group_claims`]) and the devices each tenant holds ([`usage_by_tenant`]).
//!
//! Behind the `kube` feature, the IO: a claim taken by creating its Leases ([`try_claim`]), released
//! by deleting them ([`release`], [`release_tenant`]), read back ([`list`], [`claims_in`] for a
//! reflector's cache), and a Lease annotated with the MIG device serving it
//! ([`annotate_instance`]). The syncer claims and releases, the node agent groups and annotates,
//! the tenant manager releases a deleted tenant's claims and reports usage.

use std::collections::{BTreeMap, BTreeSet};

use crate::claim::{distinct, Claim, LABEL_CLAIM, LABEL_HOST_POD, LABEL_NODE, LABEL_TENANT};

/// Annotation on every Lease of a claim: the MIG device UUID serving it, written by the node agent.
pub const ANNOTATION_INSTANCE: &str = "gpu.carrel.dev/instance";

/// Which claim Leases a call is about: a label selector over [`Claim::labels`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection<'a> {
    /// Every claim.
    All,
    /// One tenant's claims.
    Tenant(&'a str),
    /// The claims of one host pod of a tenant.
    HostPod {
        /// The tenant.
        tenant: &'a str,
        /// The host pod.
        host_pod: &'a str,
    },
    /// The claims of devices on one node.
    Node(&'a str),
}

impl Selection<'_> {
    /// The label selector.
    pub fn labels(&self) -> String {
        match self {
            Selection::All => format!("{LABEL_CLAIM}=true"),
            Selection::Tenant(tenant) => format!("{LABEL_TENANT}={tenant}"),
            Selection::HostPod { tenant, host_pod } => {
                format!("{LABEL_CLAIM}=true,{LABEL_TENANT}={tenant},{LABEL_HOST_POD}={host_pod}")
            }
            Selection::Node(node) => format!("{LABEL_NODE}={node}"),
        }
    }

    /// Whether a claim is selected.
    pub fn covers(&self, claim: &Claim) -> bool {
        match self {
            Selection::All => true,
            Selection::Tenant(tenant) => claim.holder.tenant == *tenant,
            Selection::HostPod { tenant, host_pod } => {
                claim.holder.tenant == *tenant && claim.host_pod == *host_pod
            }
            Selection::Node(node) => claim.node == *node,
        }
    }
}

/// A complete claim, with the Leases that make it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupedClaim {
    /// The claim (its `instance_uuid` is whatever the first Lease says).
    pub claim: Claim,
    /// Lease name → its [`ANNOTATION_INSTANCE`] value (empty when unset).
    pub leases: BTreeMap<String, String>,
}

/// Leases that do not (yet) make a complete claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredLeases {
    /// The Leases.
    pub leases: Vec<String>,
    /// Why they are ignored.
    pub reason: String,
}

/// Leases sorted into claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grouped {
    /// The complete claims, by GPU UUID and start slot.
    pub complete: Vec<GroupedClaim>,
    /// What was left out, and why.
    pub ignored: Vec<IgnoredLeases>,
}

/// Sort Leases (name, annotations) into claims: a claim is complete when every Lease it names
/// exists and every Lease carrying it describes the same claim (the instance UUID aside, which
/// the agent writes one Lease at a time).
pub fn group_claims<'a>(
    leases: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Grouped {
    let mut by_key: BTreeMap<(String, u8), Vec<(String, Claim)>> = BTreeMap::new();
    let mut grouped = Grouped::default();
    for (name, annotations) in leases {
        match Claim::from_metadata(annotations) {
            Ok(claim) => by_key
                .entry((claim.gpu_uuid.clone(), claim.placement.start))
                .or_default()
                .push((name.to_owned(), claim)),
            Err(e) => grouped
                .ignored
                .push(IgnoredLeases { leases: vec![name.to_owned()], reason: e.to_string() }),
        }
    }
    for (_, mut members) in by_key {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
        let first = members[0].1.clone();
        let comparable = |c: &Claim| Claim { instance_uuid: String::new(), ..c.clone() };
        if members.iter().any(|(_, c)| comparable(c) != comparable(&first)) {
            grouped.ignored.push(IgnoredLeases {
                leases: names,
                reason: "the Leases describe different claims".into(),
            });
            continue;
        }
        let wanted = first.lease_names();
        let have: BTreeSet<&String> = names.iter().collect();
        let missing: Vec<&String> = wanted.iter().filter(|n| !have.contains(n)).collect();
        if !missing.is_empty() {
            grouped.ignored.push(IgnoredLeases {
                reason: format!("incomplete: no Lease {missing:?} yet"),
                leases: names,
            });
            continue;
        }
        if names.len() != wanted.len() {
            grouped.ignored.push(IgnoredLeases {
                reason: format!("Leases {names:?} are not exactly the claim's {wanted:?}"),
                leases: names,
            });
            continue;
        }
        let leases = members
            .iter()
            .map(|(name, claim)| (name.clone(), claim.instance_uuid.clone()))
            .collect();
        grouped.complete.push(GroupedClaim { claim: first, leases });
    }
    grouped
}

/// The devices each tenant holds, by profile: tenant → profile → count. `claims` may hold each
/// claim several times (once per Lease); each counts once.
pub fn usage_by_tenant(
    claims: impl IntoIterator<Item = Claim>,
) -> BTreeMap<String, BTreeMap<String, i64>> {
    let mut usage: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for claim in distinct(claims) {
        *usage
            .entry(claim.holder.tenant.clone())
            .or_default()
            .entry(claim.profile().to_owned())
            .or_default() += 1;
    }
    usage
}

#[cfg(feature = "kube")]
pub use io::*;

#[cfg(feature = "kube")]
mod io {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
    use kube::Api;

    use super::{usage_by_tenant, Selection, ANNOTATION_INSTANCE};
    use crate::claim::{distinct, Claim, CLAIM_NAMESPACE};
    use std::collections::BTreeMap;

    /// Why a call on the claim Leases failed.
    #[derive(Debug, thiserror::Error)]
    pub enum LeaseError {
        /// The host's API refused or could not be reached.
        #[error("claim Leases: {0}")]
        Kube(#[from] kube::Error),
    }

    /// The Leases of [`CLAIM_NAMESPACE`].
    pub fn api(host: &kube::Client) -> Api<Lease> {
        Api::namespaced(host.clone(), CLAIM_NAMESPACE)
    }

    /// The Lease `name` of `claim`.
    pub fn lease_for(claim: &Claim, name: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(CLAIM_NAMESPACE.to_owned()),
                labels: Some(claim.labels()),
                annotations: Some(claim.annotations()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(claim.holder_identity()),
                ..Default::default()
            }),
        }
    }

    /// The claims that `leases` (as a reflector's cache holds them) carry, once each, by GPU and
    /// start slot; Leases that do not parse are logged and left out.
    pub fn claims_in<'a>(leases: impl IntoIterator<Item = &'a Lease>) -> Vec<Claim> {
        let parsed = leases.into_iter().filter_map(|lease| {
            let annotations = lease.metadata.annotations.as_ref()?;
            Claim::from_metadata(annotations)
                .map_err(|e| {
                    tracing::warn!(
                        lease = lease.metadata.name.as_deref().unwrap_or(""),
                        error = %e,
                        "a claim Lease that does not parse"
                    )
                })
                .ok()
        });
        distinct(parsed)
    }

    /// The claims `selection` covers, once each, as the host holds them now.
    pub async fn list(
        host: &kube::Client,
        selection: Selection<'_>,
    ) -> Result<Vec<Claim>, LeaseError> {
        let list = api(host).list(&ListParams::default().labels(&selection.labels())).await?;
        Ok(claims_in(&list.items))
    }

    /// The devices each tenant holds now, by profile (see [`usage_by_tenant`]).
    pub async fn usage(
        host: &kube::Client,
    ) -> Result<BTreeMap<String, BTreeMap<String, i64>>, LeaseError> {
        Ok(usage_by_tenant(list(host, Selection::All).await?))
    }

    /// Create the Leases of `claim`; `Ok(false)` when one exists already (another claim holds a
    /// slot), after deleting the ones this call created.
    pub async fn try_claim(host: &kube::Client, claim: &Claim) -> Result<bool, LeaseError> {
        let leases = api(host);
        let mut made = Vec::new();
        for name in claim.lease_names() {
            match leases.create(&PostParams::default(), &lease_for(claim, &name)).await {
                Ok(_) => made.push(name),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    for n in made.iter().rev() {
                        delete(&leases, n).await?;
                    }
                    return Ok(false);
                }
                Err(e) => {
                    for n in made.iter().rev() {
                        let _ = delete(&leases, n).await;
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(true)
    }

    async fn delete(leases: &Api<Lease>, name: &str) -> Result<(), LeaseError> {
        match leases.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Delete every Lease `selection` covers; how many there were.
    async fn release_selected(
        host: &kube::Client,
        selection: Selection<'_>,
    ) -> Result<usize, LeaseError> {
        let leases = api(host);
        let list = leases.list(&ListParams::default().labels(&selection.labels())).await?;
        let n = list.items.len();
        for lease in list.items {
            if let Some(name) = lease.metadata.name {
                delete(&leases, &name).await?;
            }
        }
        Ok(n)
    }

    /// Delete every Lease of the claims of host pod `host_pod` of `tenant`; how many there were.
    pub async fn release(
        host: &kube::Client,
        tenant: &str,
        host_pod: &str,
    ) -> Result<usize, LeaseError> {
        let n = release_selected(host, Selection::HostPod { tenant, host_pod }).await?;
        if n > 0 {
            tracing::debug!(%tenant, %host_pod, leases = n, "released device claims");
        }
        Ok(n)
    }

    /// Delete every Lease of `tenant`'s claims (the tenant is gone); how many there were.
    pub async fn release_tenant(host: &kube::Client, tenant: &str) -> Result<usize, LeaseError> {
        let n = release_selected(host, Selection::Tenant(tenant)).await?;
        if n > 0 {
            tracing::debug!(%tenant, leases = n, "released the tenant's device claims");
        }
        Ok(n)
    }

    /// Write on Lease `lease` that MIG device `mig_uuid` serves its claim.
    pub async fn annotate_instance(
        leases: &Api<Lease>,
        lease: &str,
        mig_uuid: &str,
    ) -> Result<(), LeaseError> {
        let patch =
            serde_json::json!({"metadata": {"annotations": {ANNOTATION_INSTANCE: mig_uuid}}});
        leases.patch(lease, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuModel, Holder, Placement, Shape};

    fn claim(gpu: &str, shape: Shape, start: u8) -> Claim {
        Claim {
            node: "n1".into(),
            gpu_uuid: gpu.into(),
            model: GpuModel::H200_141GB,
            shape,
            placement: Placement { start, size: shape.memory_slots() },
            instance_uuid: String::new(),
            holder: Holder { tenant: "t".into(), namespace: "default".into(), pod: "p".into() },
            host_namespace: "carrel-t".into(),
            host_pod: "p-x-default".into(),
        }
    }

    fn leases_of(claim: &Claim) -> Vec<(String, BTreeMap<String, String>)> {
        claim.lease_names().into_iter().map(|n| (n, claim.annotations())).collect()
    }

    fn group(leases: &[(String, BTreeMap<String, String>)]) -> Grouped {
        group_claims(leases.iter().map(|(n, a)| (n.as_str(), a)))
    }

    #[test]
    fn complete_claims_are_grouped() {
        let a = claim("GPU-A", Shape::G3, 4);
        let b = claim("GPU-A", Shape::G1Me, 0);
        let mut leases = leases_of(&a);
        leases.extend(leases_of(&b));
        let grouped = group(&leases);
        assert!(grouped.ignored.is_empty(), "{:?}", grouped.ignored);
        assert_eq!(grouped.complete.len(), 2);
        assert_eq!(grouped.complete[0].claim, b);
        assert_eq!(grouped.complete[0].leases.len(), 2, "slot 0 and the media engine");
        assert_eq!(grouped.complete[1].claim, a);
        assert_eq!(grouped.complete[1].leases.len(), 4);
    }

    #[test]
    fn incomplete_or_disagreeing_claims_are_ignored() {
        let a = claim("GPU-A", Shape::G3, 0);
        let mut leases = leases_of(&a);
        leases.pop();
        let grouped = group(&leases);
        assert!(grouped.complete.is_empty());
        assert_eq!(grouped.ignored.len(), 1);
        assert!(grouped.ignored[0].reason.contains("incomplete"), "{:?}", grouped.ignored);

        let mut leases = leases_of(&a);
        leases[1].1.insert("gpu.carrel.dev/pod".into(), "other".into());
        let grouped = group(&leases);
        assert!(grouped.complete.is_empty());
        assert!(grouped.ignored[0].reason.contains("different"), "{:?}", grouped.ignored);

        let mut leases = leases_of(&a);
        leases[0].1.remove("gpu.carrel.dev/gpu");
        leases.extend(leases_of(&claim("GPU-B", Shape::G1, 2)));
        let grouped = group(&leases);
        assert_eq!(grouped.complete.len(), 1, "the other GPU's claim still counts");
        assert_eq!(grouped.ignored.len(), 2, "{:?}", grouped.ignored);
    }

    #[test]
    fn instance_annotations_written_one_lease_at_a_time_still_agree() {
        let a = claim("GPU-A", Shape::G2, 2);
        let mut leases = leases_of(&a);
        leases[0].1.insert(ANNOTATION_INSTANCE.into(), "MIG-X".into());
        let grouped = group(&leases);
        assert_eq!(grouped.complete.len(), 1);
        let values: Vec<&str> = grouped.complete[0].leases.values().map(String::as_str).collect();
        assert_eq!(values, ["MIG-X", ""]);
    }

    #[test]
    fn usage_counts_each_claim_once_per_tenant_and_profile() {
        let a = claim("GPU-A", Shape::G3, 4);
        let b = claim("GPU-A", Shape::G1, 0);
        let mut other = claim("GPU-B", Shape::G1, 0);
        other.holder.tenant = "u".into();
        let all = [a.clone(), a, b.clone(), b, other];
        let usage = usage_by_tenant(all);
        assert_eq!(usage.len(), 2);
        assert_eq!(usage["t"].values().sum::<i64>(), 2);
        assert_eq!(usage["u"].values().sum::<i64>(), 1);
    }

    #[test]
    fn selections_name_the_labels_they_cover() {
        let c = claim("GPU-A", Shape::G1, 0);
        let labels = c.labels();
        for selection in [
            Selection::All,
            Selection::Tenant("t"),
            Selection::HostPod { tenant: "t", host_pod: "p-x-default" },
            Selection::Node("n1"),
        ] {
            assert!(selection.covers(&c), "{selection:?}");
            for term in selection.labels().split(',') {
                let (k, v) = term.split_once('=').expect("k=v");
                assert_eq!(labels.get(k).map(String::as_str), Some(v), "{selection:?}");
            }
        }
        assert!(!Selection::Tenant("u").covers(&c));
        assert!(!Selection::Node("n2").covers(&c));
        assert!(!Selection::HostPod { tenant: "t", host_pod: "q" }.covers(&c));
    }
}
