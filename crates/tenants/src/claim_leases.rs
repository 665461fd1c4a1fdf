//! The GPU claim Leases of the host (`carrel_gpu::claim`), as the manager uses them: counted
//! into each tenant's `status.gpuUsage`, and released when a tenant is deleted (its pods go with
//! its host namespace). Kept in this one module so that it can follow the claim API of
//! `carrel-gpu` as that grows one.

use std::collections::{BTreeMap, HashMap};

use carrel_gpu::claim::{LABEL_CLAIM, LABEL_TENANT};
use carrel_gpu::CLAIM_NAMESPACE;
use serde_json::Value;

use crate::host::{self, code, Host};

/// Slices held per MIG profile.
pub type Usage = BTreeMap<String, i64>;

/// The label selector of every claim Lease.
pub fn every_claim() -> String {
    format!("{LABEL_CLAIM}=true")
}

/// The tenant a claim Lease is for, from its label.
pub fn tenant_of(labels: Option<&BTreeMap<String, String>>) -> Option<String> {
    labels?.get(LABEL_TENANT).cloned()
}

/// The claim Leases matching `selector`.
async fn claim_leases(host: &Host, selector: &str) -> Result<Vec<Value>, kube::Error> {
    host.list(&host::leases(CLAIM_NAMESPACE), Some(selector)).await
}

/// Slices held per tenant and profile, from the claims in the host: each claim counted once
/// however many Leases it has.
pub async fn usage(host: &Host) -> Result<HashMap<String, Usage>, kube::Error> {
    Ok(count(&claim_leases(host, &every_claim()).await?))
}

/// Slices held by tenant `name` per profile.
pub async fn usage_of(host: &Host, name: &str) -> Result<Usage, kube::Error> {
    let selector = format!("{},{LABEL_TENANT}={name}", every_claim());
    let mut usage = count(&claim_leases(host, &selector).await?);
    Ok(usage.remove(name).unwrap_or_default())
}

/// Slices held per tenant and profile in `leases`.
fn count(leases: &[Value]) -> HashMap<String, Usage> {
    let claims = leases
        .iter()
        .filter_map(|lease| {
            let annotations = lease.pointer("/metadata/annotations")?;
            let annotations: BTreeMap<String, String> =
                serde_json::from_value(annotations.clone()).ok()?;
            carrel_gpu::Claim::from_metadata(&annotations).ok()
        })
        .collect::<Vec<_>>();
    let mut usage: HashMap<String, Usage> = HashMap::new();
    for claim in carrel_gpu::distinct(claims) {
        *usage
            .entry(claim.holder.tenant.clone())
            .or_default()
            .entry(claim.profile().to_owned())
            .or_default() += 1;
    }
    usage
}

/// Delete tenant `name`'s claim Leases.
pub async fn release_tenant(host: &Host, name: &str) -> Result<(), kube::Error> {
    let path = host::leases(CLAIM_NAMESPACE);
    let leases = claim_leases(host, &format!("{LABEL_TENANT}={name}")).await?;
    for lease in &leases {
        let Some(lease_name) = lease.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        match host.delete(&path, lease_name, None).await {
            Ok(()) => {}
            Err(e) if code(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
