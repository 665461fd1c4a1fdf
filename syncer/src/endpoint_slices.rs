//! The EndpointSlices of the tenant's Services that select nothing, on the host: each slice a
//! tenant wrote for such a Service (label `kubernetes.io/service-name`) has a host slice for
//! the Service's host Service ([`translate::host_endpoint_slice`]), holding only the addresses
//! the [`translate::AddressPolicy`] allows: the tenant's own pods', and addresses outside the
//! cluster. A refused address is said in a Warning Event on the Service. The host Service
//! selects nothing, so the host's endpoint controllers leave the slices alone (they are labelled
//! as the syncer's) and its service proxy sends the Service's traffic to them.
//!
//! Host slices are kept in line (made again when deleted, set back when changed) and deleted
//! with their tenant slice, or when their Service is gone or starts selecting pods.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::passes::{carries_all, ready, reflect};
use crate::*;

/// Whether host slice `current` is `wanted` as the syncer writes it.
fn in_line(current: &EndpointSlice, wanted: &EndpointSlice) -> bool {
    current.address_type == wanted.address_type
        && current.endpoints == wanted.endpoints
        && current.ports == wanted.ports
        && carries_all(&current.metadata, &wanted.metadata)
}

impl Syncer {
    /// Keep the host slices of the tenant's selectorless Services in line as the tenant's
    /// slices and Services and the host slices change. `host`: the tenant's host slices, as the
    /// shared host side shows them.
    pub(crate) async fn sync_endpoint_slices(self, host: Subscription<EndpointSlice>) {
        let host_slices = host.store();
        let (slices, slice_changes) = reflect::<EndpointSlice>(&self.inner.tenant_client);
        let (services, service_changes) = reflect::<Service>(&self.inner.tenant_client);
        let tenant = futures::stream::select(slice_changes, service_changes);
        // The address policy refuses the nodes' addresses and pod ranges: no address is judged
        // before the nodes are listed. (A host pod not yet cached only refuses more: its own
        // address waits for the next pass. Its cache is not probed here: another task awaits
        // its readiness, and a probe would take that task's wake-up.)
        let ready = || {
            ready(&slices)
                && ready(&services)
                && ready(&host_slices)
                && ready(&self.inner.host_nodes)
        };
        let pass = || self.keep_endpoint_slices(&slices, &services, &host_slices);
        self.passes("EndpointSlices and Services", tenant, host, ready, pass).await;
    }

    /// One pass: a host slice for each tenant slice of a carried Service that selects nothing,
    /// made or set back; host slices standing for anything else deleted. Every slice is tried;
    /// the first error is returned.
    async fn keep_endpoint_slices(
        &self,
        slices: &Store<EndpointSlice>,
        services: &Store<Service>,
        host: &Store<EndpointSlice>,
    ) -> Result<(), SyncError> {
        let tenant_slices = slices.state();
        let mut kept = HashSet::new();
        let mut outcome = Ok(());
        // Only slices of selectorless Services are carried: most tenants have none, and their
        // passes read nothing else.
        let carried: Vec<(Arc<EndpointSlice>, Arc<Service>)> = tenant_slices
            .into_iter()
            .filter_map(|slice| {
                let namespace = slice.metadata.namespace.as_deref()?;
                let name = translate::slice_service(&slice)?;
                let service = services.get(&ObjectRef::new(name).within(namespace))?;
                let wanted = translate::carried(&service)
                    && !translate::selects_pods(&service)
                    && slice.metadata.deletion_timestamp.is_none();
                wanted.then_some((slice, service))
            })
            .collect();
        let policy = (!carried.is_empty()).then(|| {
            let pods = self.cached_host_pods();
            let nodes = self.inner.host_nodes.state();
            translate::AddressPolicy::new(pods.iter().map(|p| &**p), nodes.iter().map(|n| &**n))
        });
        for (slice, service) in &carried {
            let Some(policy) = &policy else { break };
            let namespace = slice.metadata.namespace.clone().unwrap_or_default();
            let name = slice.metadata.name.clone().unwrap_or_default();
            let service_name = service.metadata.name.as_deref().unwrap_or_default();
            let host_service = host_names::host_name(&namespace, service_name);
            let (wanted, refused) = translate::host_endpoint_slice(
                &self.inner.tenant,
                &self.inner.host_namespace,
                &host_service,
                slice,
                policy,
            );
            kept.insert((namespace.clone(), name.clone()));
            if !refused.is_empty() {
                let why = format!(
                    "EndpointSlice {name}: addresses not carried to the host: {}",
                    refused.join("; ")
                );
                if let Err(e) =
                    self.object_event(&**service, "Warning", "EndpointsNotCarried", &why).await
                {
                    outcome = outcome.and(Err(e));
                }
            }
            if let Err(e) = self.keep_host(host, &wanted, in_line).await {
                if let SyncError::Taken { .. } = &e {
                    tracing::warn!(tenant = %self.inner.tenant, "{e}");
                    continue;
                }
                outcome = outcome.and(Err(e));
            }
        }
        outcome.and(self.delete_orphans(host, &kept).await)
    }
}
