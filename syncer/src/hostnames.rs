//! Claims on the hosts tenants' Ingresses serve, so that no tenant can take another's: one
//! Lease per host in the host's `carrel` namespace ([`carrel_gpu::CLAIM_NAMESPACE`]), named by a
//! hash of the host and held by the tenant that asked first. The host API's create is the
//! arbiter: of two tenants asking at once, one create succeeds and the other is told the name
//! exists. A host under a wildcard another tenant holds (`app.example.com` under
//! `*.example.com`) is refused too. A tenant's claims are released as its Ingresses stop asking
//! for them, and all at once when the tenant is deleted (the tenant manager, by
//! [`LABEL_HOSTNAME_HOLDER`]).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ring::digest;

use carrel_gpu::CLAIM_NAMESPACE;
use carrel_machinery::tenancy::LABEL_HOSTNAME_HOLDER;

use crate::*;

pub use carrel_machinery::tenancy::ANNOTATION_HOSTNAME as ANNOTATION_HOST;

/// The name of the claim Lease of `host`: `hostname-` and 32 hex digits of its SHA-256.
pub fn claim_name(host: &str) -> String {
    let hash = digest::digest(&digest::SHA256, host.as_bytes());
    let hex: String = hash.as_ref().iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("hostname-{hex}")
}

/// The claim Lease of `host` for `tenant`.
fn claim(tenant: &str, host: &str) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(claim_name(host)),
            namespace: Some(CLAIM_NAMESPACE.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_HOSTNAME_HOLDER.to_owned(), tenant.to_owned()),
                (host_names::LABEL_MANAGED_BY.to_owned(), host_names::MANAGED_BY.to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(ANNOTATION_HOST.to_owned(), host.to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec { holder_identity: Some(tenant.to_owned()), ..LeaseSpec::default() }),
    }
}

/// The tenant claim Lease `lease` holds `host` for, if it is a claim on `host`.
fn holder_of<'a>(lease: &'a Lease, host: &str) -> Option<&'a str> {
    let recorded = lease.metadata.annotations.as_ref()?.get(ANNOTATION_HOST)?;
    (recorded == host).then_some(())?;
    let labelled = lease.metadata.labels.as_ref()?.get(LABEL_HOSTNAME_HOLDER)?;
    let holder = lease.spec.as_ref()?.holder_identity.as_deref()?;
    (labelled == holder).then_some(holder)
}

impl Syncer {
    fn claims(&self) -> Api<Lease> {
        Api::namespaced(self.inner.host_client.clone(), CLAIM_NAMESPACE)
    }

    /// The hosts the tenant holds, each with its claim Lease's name.
    pub(crate) async fn held_hosts(&self) -> Result<BTreeMap<String, String>, SyncError> {
        let selector = format!("{LABEL_HOSTNAME_HOLDER}={}", self.inner.tenant);
        let list = self.claims().list(&ListParams::default().labels(&selector)).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|lease| {
                let host = lease.metadata.annotations.as_ref()?.get(ANNOTATION_HOST)?;
                let name = lease.metadata.name.clone()?;
                (holder_of(lease, host)? == self.inner.tenant).then(|| (host.clone(), name))
            })
            .collect())
    }

    /// Claim `host` for the tenant: whether it is the tenant's now. `false`: another tenant
    /// holds it, or a wildcard covering it.
    pub(crate) async fn claim_host(&self, host: &str) -> Result<bool, SyncError> {
        let tenant = self.inner.tenant.as_str();
        let claims = self.claims();
        if let Some(wildcard) = translate::covering_wildcard(host) {
            if let Some(lease) = claims.get_opt(&claim_name(&wildcard)).await? {
                if holder_of(&lease, &wildcard).is_some_and(|holder| holder != tenant) {
                    return Ok(false);
                }
            }
        }
        match claims.create(&PostParams::default(), &claim(tenant, host)).await {
            Ok(_) => {
                tracing::info!(%tenant, %host, "host claimed for the tenant's Ingresses");
                Ok(true)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let Some(lease) = claims.get_opt(&claim_name(host)).await? else {
                    return Ok(false); // Released meanwhile: the next pass asks again.
                };
                Ok(holder_of(&lease, host) == Some(tenant))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Release the tenant's claim Lease `name`.
    pub(crate) async fn release_host(&self, name: &str) -> Result<(), SyncError> {
        match self.claims().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_host_has_its_own_claim_and_only_a_matching_claim_names_a_holder() {
        assert_ne!(claim_name("a.example.com"), claim_name("b.example.com"));
        assert_ne!(claim_name("*.example.com"), claim_name("example.com"));
        let name = claim_name("a.example.com");
        assert!(carrel_machinery::names::is_dns1123_subdomain(&name) && name.len() <= 63);
        let lease = claim("team-a", "a.example.com");
        assert_eq!(holder_of(&lease, "a.example.com"), Some("team-a"));
        // A Lease recording another host (a hash collision) holds nothing for this one.
        assert_eq!(holder_of(&lease, "b.example.com"), None);
        // A holder the label does not confirm holds nothing.
        let mut forged = lease.clone();
        forged.spec.as_mut().unwrap().holder_identity = Some("team-b".into());
        assert_eq!(holder_of(&forged, "a.example.com"), None);
    }
}
