//! The tenant's Services on the host. Each tenant Service that selects pods
//! ([`translate::carried`]) has a host Service in the tenant's host namespace that selects its
//! host pods ([`translate::host_service`]), so the host's service proxy (kube-proxy, or the
//! CNI's) carries its traffic. The host Service asks for the tenant Service's cluster IP and
//! node ports; where the host gives others (taken there by another tenant, or outside the host's
//! range), the tenant Service is made again with the host's, as vcluster does: a cluster IP
//! cannot change, and the address a tenant is shown must be the one that works. A LoadBalancer's
//! status comes up from the host.
//!
//! Host Services are kept in line (made again when deleted, set back when changed) and deleted
//! with their tenant Service, also when it went while the syncer was away. A host object under
//! one of these names that is not the syncer's own for it is left alone.

use k8s_openapi::api::core::v1::Service;

use crate::passes::{carries_all, ready, reflect};
use crate::*;

/// Whether host Service `current` is `wanted` as the syncer writes it: what
/// [`translate::host_service_shown`] shows, and the labels and annotations the syncer sets.
fn in_line(current: &Service, wanted: &Service) -> bool {
    translate::host_service_shown(current) == translate::host_service_shown(wanted)
        && carries_all(&current.metadata, &wanted.metadata)
}

/// Whether a kube error is kube-apiserver's 422: the host refused a value the syncer asked for.
fn refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

impl Syncer {
    /// The address of the tenant's cluster DNS, its `kube-system/kube-dns` Service's cluster IP,
    /// which its pods resolve names through ([`translate::point_dns_at`]); `None` when the
    /// tenant has removed that Service or made it headless. Where the tenant's DNS answers
    /// elsewhere ([`Config::cluster_dns`](crate::Config::cluster_dns)): that address, or `None`.
    pub(crate) async fn cluster_dns(&self) -> Result<Option<String>, SyncError> {
        match &self.inner.cluster_dns {
            crate::ClusterDns::TenantService => {}
            crate::ClusterDns::At(address) => return Ok(Some(address.clone())),
            crate::ClusterDns::Node => return Ok(None),
        }
        let api: Api<Service> = Api::namespaced(self.inner.tenant_client.clone(), "kube-system");
        let service = api.get_opt("kube-dns").await?;
        let ip = service.and_then(|s| s.spec).and_then(|s| s.cluster_ip);
        Ok(ip.filter(|ip| !ip.is_empty() && ip != "None"))
    }

    /// Keep the tenant's host Services in line as the tenant's Services and the host Services
    /// change. `host`: the tenant's host Services, as the shared host side shows them.
    pub(crate) async fn sync_services(self, host: Subscription<Service>) {
        let host_services = host.store();
        let (services, tenant) = reflect::<Service>(&self.inner.tenant_client);
        let ready = || ready(&services) && ready(&host_services);
        let pass = || self.keep_services(&services, &host_services);
        self.passes("Services", tenant, host, ready, pass).await;
    }

    /// One pass: a host Service for each carried tenant Service made or set back, and the
    /// tenant's brought in line with it; host Services whose tenant Service is gone (or no
    /// longer carried) deleted. Every Service is tried; the first error is returned.
    async fn keep_services(
        &self,
        services: &Store<Service>,
        host: &Store<Service>,
    ) -> Result<(), SyncError> {
        let mut outcome = Ok(());
        let mut carried = HashSet::new();
        let all = services.state();
        for service in all.iter().cloned() {
            if !translate::carried(&service) || service.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let (Some(ns), Some(name)) = (&service.metadata.namespace, &service.metadata.name)
            else {
                continue;
            };
            carried.insert((ns.clone(), name.clone()));
            if let Err(e) = self.keep_service(host, &service, &all).await {
                outcome = outcome.and(Err(e));
            }
        }
        outcome.and(self.delete_orphans(host, &carried).await)
    }

    /// Make the host Service of tenant Service `service`, or set the one under its name back
    /// to it; then bring the tenant Service in line with what the host gave it.
    /// `all`: every tenant Service.
    async fn keep_service(
        &self,
        host: &Store<Service>,
        service: &Service,
        all: &[Arc<Service>],
    ) -> Result<(), SyncError> {
        let wanted =
            translate::host_service(&self.inner.tenant, &self.inner.host_namespace, service);
        let name = wanted.metadata.name.clone().unwrap_or_default();
        let api: Api<Service> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let cached = host.get(&ObjectRef::new(&name).within(&self.inner.host_namespace));
        let pp = PostParams::default();
        let mut current = match cached {
            Some(current) => (*current).clone(),
            None => match api.create(&pp, &wanted).await {
                Ok(made) => made,
                Err(e) if refused(&e) => {
                    tracing::debug!(tenant = %self.inner.tenant, service = %name, error = %e, "the host gives the Service its own cluster IP and node ports");
                    api.create(&pp, &translate::host_allocates(wanted.clone())).await?
                }
                // Made meanwhile, by this syncer (the cache lags) or by someone else.
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
                Err(e) => return Err(e.into()),
            },
        };
        let identity = wanted.metadata.annotations.clone().unwrap_or_default();
        let (labels, annotations) =
            (current.metadata.labels.as_ref(), current.metadata.annotations.as_ref());
        if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
            let taken = SyncError::Taken { kind: "Service".into(), name };
            tracing::warn!(tenant = %self.inner.tenant, "{taken}");
            return Ok(());
        }
        if !in_line(&current, &wanted) {
            current = self.set_back(&api, &current, wanted).await?;
        }
        if translate::host_gave_others(service, &current) {
            if translate::held_by_another(all, service, &current) {
                tracing::warn!(
                    tenant = %self.inner.tenant, service = %name,
                    "the host gave the Service a cluster IP or node port another tenant Service \
                     holds: it keeps its own until that one is gone"
                );
                return Ok(());
            }
            return self.make_again(service, &current).await;
        }
        self.bring_up_load_balancer(service, &current).await
    }

    /// Replace host Service `current` with `wanted`, keeping its cluster IP (fixed once given),
    /// asking for the tenant's node ports, or keeping the host's where it refuses them.
    async fn set_back(
        &self,
        api: &Api<Service>,
        current: &Service,
        wanted: Service,
    ) -> Result<Service, SyncError> {
        let name = wanted.metadata.name.clone().unwrap_or_default();
        let fixed = current.spec.as_ref();
        let mut replacement = wanted;
        replacement.metadata.resource_version = current.metadata.resource_version.clone();
        if let Some(spec) = replacement.spec.as_mut() {
            spec.cluster_ip = fixed.and_then(|s| s.cluster_ip.clone());
            spec.cluster_ips = fixed.and_then(|s| s.cluster_ips.clone());
        }
        let pp = PostParams::default();
        let replaced = match api.replace(&name, &pp, &replacement).await {
            Ok(replaced) => replaced,
            Err(e) if refused(&e) => {
                let mut keeps_host_ports = replacement;
                let given = translate::node_ports(current);
                if let Some(spec) = keeps_host_ports.spec.as_mut() {
                    for (i, port) in spec.ports.iter_mut().flatten().enumerate() {
                        port.node_port = given.get(i).copied().flatten();
                    }
                }
                api.replace(&name, &pp, &keeps_host_ports).await?
            }
            Err(e) => return Err(e.into()),
        };
        tracing::debug!(tenant = %self.inner.tenant, service = %name, "host Service set back");
        Ok(replaced)
    }

    /// Make tenant Service `service` again with the cluster IP and node ports the host gave
    /// `host`. The delete is conditional on its uid and resourceVersion: a Service changed
    /// meanwhile is left to the next pass. Should the create be refused, the Service is made
    /// again as it was.
    async fn make_again(&self, service: &Service, host: &Service) -> Result<(), SyncError> {
        let namespace = service.metadata.namespace.as_deref().unwrap_or_default();
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Service> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: service.metadata.uid.clone(),
                resource_version: service.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let again = translate::tenant_service_with(service, host);
        if let Err(e) = api.create(&PostParams::default(), &again).await {
            // Refused (a value taken meanwhile): the Service is made again as it was, not lost.
            let as_it_was = translate::tenant_service_with(service, service);
            api.create(&PostParams::default(), &as_it_was).await?;
            return Err(e.into());
        }
        tracing::info!(
            tenant = %self.inner.tenant, namespace, service = name,
            cluster_ip = translate::cluster_ip(again.spec.as_ref().unwrap_or(&Default::default())).unwrap_or_default(),
            "Service made again with the cluster IP and node ports the host gave it"
        );
        Ok(())
    }
}
