//! The tenant's Ingresses on the host. Each tenant Ingress has a host Ingress in the tenant's
//! host namespace ([`translate::host_ingress`]) once every host it serves is the tenant's
//! ([`hostnames`](crate::hostnames): first writer wins across tenants); its TLS Secrets (and
//! Secrets its annotations name) are copied first. The host's load balancer status comes back to
//! the tenant Ingress. An Ingress that cannot be carried (a host another tenant holds, a
//! resource backend) says why in a Warning Event on it, and is looked at again on every pass:
//! it is carried once the host is free.
//!
//! Host Ingresses are kept in line (made again when deleted, set back when changed) and deleted
//! with their tenant Ingress, also when it went while the syncer was away; the tenant's host
//! claims are released as its Ingresses stop asking for them.

use std::sync::atomic::Ordering;

use k8s_openapi::api::networking::v1::Ingress;

use crate::passes::{carries_all, ready, reflect};
use crate::*;

/// Whether host Ingress `current` is `wanted` as the syncer writes it.
fn in_line(current: &Ingress, wanted: &Ingress) -> bool {
    current.spec == wanted.spec && carries_all(&current.metadata, &wanted.metadata)
}

/// What happened to one tenant Ingress in a pass.
enum Outcome {
    /// Carried: its hosts are held.
    Carried,
    /// Not carried, for the reason given (said on the Ingress).
    Refused(String),
}

impl Syncer {
    /// Keep the tenant's host Ingresses in line as the tenant's Ingresses and the host
    /// Ingresses change. `host`: the tenant's host Ingresses, as the shared host side shows them.
    /// `releases`: told of every host-name claim released.
    pub(crate) async fn sync_ingresses(self, host: Subscription<Ingress>, releases: Listener<()>) {
        let host_ingresses = host.store();
        let (ingresses, tenant) = reflect::<Ingress>(&self.inner.tenant_client);
        let tenant = futures::stream::select(tenant, releases.map(Ok));
        let ready = || ready(&ingresses) && ready(&host_ingresses);
        let pass = || self.keep_ingresses(&ingresses, &host_ingresses);
        self.passes("Ingresses", tenant, host, ready, pass).await;
    }

    /// One pass: each tenant Ingress's hosts claimed and its host Ingress made or set back (or
    /// why not said on it); host Ingresses whose tenant Ingress is gone or refused deleted;
    /// claims no Ingress asks for released. Every Ingress is tried; the first error is returned.
    async fn keep_ingresses(
        &self,
        ingresses: &Store<Ingress>,
        host: &Store<Ingress>,
    ) -> Result<(), SyncError> {
        let tenant_ingresses = ingresses.state();
        // A tenant without Ingresses that holds no host costs the host nothing.
        if tenant_ingresses.is_empty() && !self.inner.may_hold_hosts.load(Ordering::Relaxed) {
            return self.delete_orphans(host, &HashSet::new()).await;
        }
        let mut held = self.held_hosts().await?;
        let mut asked = BTreeSet::new();
        let mut carried = HashSet::new();
        let mut outcome = Ok(());
        for ingress in tenant_ingresses {
            if ingress.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let (Some(ns), Some(name)) = (&ingress.metadata.namespace, &ingress.metadata.name)
            else {
                continue;
            };
            let hosts = translate::ingress_hosts(&ingress);
            asked.extend(hosts.iter().cloned());
            match self.keep_ingress(host, &ingress, &hosts, &mut held).await {
                Ok(Outcome::Carried) => {
                    carried.insert((ns.clone(), name.clone()));
                }
                Ok(Outcome::Refused(why)) => {
                    if let Err(e) =
                        self.object_event(&*ingress, "Warning", "NotCarried", &why).await
                    {
                        outcome = outcome.and(Err(e));
                    }
                }
                Err(e) => {
                    // Kept as it is on the host until the next pass.
                    carried.insert((ns.clone(), name.clone()));
                    outcome = outcome.and(Err(e));
                }
            }
        }
        outcome = outcome.and(self.delete_orphans(host, &carried).await);
        let mut kept = false;
        for (lost, lease) in &held {
            if asked.contains(lost) {
                kept = true;
                continue;
            }
            match self.release_host(lease).await {
                Ok(()) => {
                    tracing::info!(tenant = %self.inner.tenant, host = %lost, "host released")
                }
                Err(e) => {
                    kept = true;
                    outcome = outcome.and(Err(e));
                }
            }
        }
        self.inner.may_hold_hosts.store(kept, Ordering::Relaxed);
        outcome
    }

    /// Claim the hosts of tenant Ingress `ingress` (`held`: the tenant's, kept up to date),
    /// copy the Secrets it names, make or set back its host Ingress and bring its status up.
    async fn keep_ingress(
        &self,
        host: &Store<Ingress>,
        ingress: &Ingress,
        hosts: &BTreeSet<String>,
        held: &mut BTreeMap<String, String>,
    ) -> Result<Outcome, SyncError> {
        let wanted = match translate::host_ingress(
            &self.inner.tenant,
            &self.inner.host_namespace,
            ingress,
        ) {
            Ok(wanted) => wanted,
            Err(why) => return Ok(Outcome::Refused(why.to_string())),
        };
        for h in hosts {
            if held.contains_key(h) {
                continue;
            }
            if !self.claim_host(h).await? {
                return Ok(Outcome::Refused(format!(
                    "host {h:?} is held by another tenant's Ingress (first writer wins): this \
                     Ingress is not served until the host is free"
                )));
            }
            held.insert(h.clone(), hostnames::claim_name(h));
        }
        for why in &wanted.left {
            self.object_event(ingress, "Warning", "AnnotationNotCarried", why).await?;
        }
        let namespace = ingress.metadata.namespace.as_deref().unwrap_or_default();
        for secret in &wanted.secrets {
            self.copy_one::<Secret>(namespace, secret).await?;
        }
        let current = match self.keep_host(host, &wanted.ingress, in_line).await {
            Ok(current) => current,
            Err(SyncError::Taken { kind, name }) => {
                return Ok(Outcome::Refused(format!(
                    "host {kind} {name} exists and is not this Ingress's: left alone"
                )))
            }
            Err(e) => return Err(e),
        };
        self.bring_up_load_balancer(ingress, &current).await?;
        Ok(Outcome::Carried)
    }
}
