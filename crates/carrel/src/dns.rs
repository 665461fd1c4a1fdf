//! Each tenant's cluster DNS in `carrel up`: a server of its own on a local port for as long as
//! the tenant is served (its `status.dnsEndpoint`, so `dig @127.0.0.1 -p PORT
//! web.default.svc.cluster.local` works on the machine), answering from a zone that follows the
//! tenant's Services and EndpointSlices while its cluster is open ([`carrel_dns::follow`]). A
//! tenant closed while idle keeps its server and its last zone: nothing can change its names
//! until its cluster opens again, and its pods may still be resolving them.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use parking_lot::Mutex;

use carrel_dns::{Resolver, Server, SharedZone, Zone, DEFAULT_DOMAIN};

use crate::syncers::AbortOnDrop;

/// The tenants' DNS servers.
pub struct TenantDns {
    /// The address every tenant's server listens on, each on a port of its own.
    listen: IpAddr,
    /// Where names outside the cluster domain are forwarded.
    upstream: Vec<SocketAddr>,
    handle: tokio::runtime::Handle,
    served: Mutex<HashMap<String, Served>>,
}

/// One tenant's server and what keeps its zone current.
struct Served {
    zone: SharedZone,
    server: Server,
    /// Running while the tenant's cluster is open.
    follow: Option<AbortOnDrop>,
}

impl std::fmt::Debug for TenantDns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let served: Vec<(String, SocketAddr)> = self
            .served
            .lock()
            .iter()
            .map(|(tenant, s)| (tenant.clone(), s.server.local_addr()))
            .collect();
        f.debug_struct("TenantDns")
            .field("listen", &self.listen)
            .field("upstream", &self.upstream)
            .field("served", &served)
            .finish_non_exhaustive()
    }
}

impl TenantDns {
    /// Servers on `listen`, forwarding other names to `upstream`, run on `handle`.
    pub fn new(
        listen: IpAddr,
        upstream: Vec<SocketAddr>,
        handle: tokio::runtime::Handle,
    ) -> Arc<TenantDns> {
        Arc::new(TenantDns { listen, upstream, handle, served: Mutex::default() })
    }

    /// Where `tenant`'s DNS answers, its server started if it is not running: on the port of
    /// `recorded` (the address it had before, from its status) when that is still free, else on
    /// a port the system picks. `None`, logged, when no port can be had.
    pub fn endpoint(&self, tenant: &str, recorded: Option<&str>) -> Option<SocketAddr> {
        let mut served = self.served.lock();
        if let Some(s) = served.get(tenant) {
            return Some(s.server.local_addr());
        }
        let zone = SharedZone::new(Zone::empty(DEFAULT_DOMAIN).ok()?);
        let resolver = Resolver::new(zone.clone(), self.upstream.clone());
        let _runtime = self.handle.enter();
        let before = recorded
            .and_then(|r| r.parse::<SocketAddr>().ok())
            .filter(|r| r.ip() == self.listen)
            .and_then(|r| Server::start(r, resolver.clone()).ok());
        let started = match before {
            Some(server) => Ok(server),
            None => Server::start(SocketAddr::new(self.listen, 0), resolver),
        };
        match started {
            Ok(server) => {
                let addr = server.local_addr();
                tracing::info!(%tenant, %addr, "serving the tenant's cluster DNS");
                served.insert(tenant.to_owned(), Served { zone, server, follow: None });
                Some(addr)
            }
            Err(e) => {
                tracing::warn!(%tenant, error = %e, "the tenant's cluster DNS could not start");
                None
            }
        }
    }

    /// Keep `tenant`'s zone current from its Services and EndpointSlices, read with `client`,
    /// until `stop` says its cluster closed. Its server is started if it is not running.
    pub fn follow(
        &self,
        tenant: &str,
        client: kube::Client,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        if self.endpoint(tenant, None).is_none() {
            return;
        }
        let mut served = self.served.lock();
        let Some(s) = served.get_mut(tenant) else { return };
        let (zone, name) = (s.zone.clone(), tenant.to_owned());
        let task = self.handle.spawn(async move {
            tokio::select! {
                followed = carrel_dns::follow(client, DEFAULT_DOMAIN.to_owned(), zone) => {
                    if let Err(e) = followed {
                        tracing::warn!(tenant = %name, error = %e, "the tenant's DNS zone");
                    }
                }
                _ = stop.wait_for(|stopped| *stopped) => {}
            }
        });
        s.follow = Some(AbortOnDrop(task));
    }

    /// `tenant` is no longer served: its server stops.
    pub fn gone(&self, tenant: &str) {
        let Some(served) = self.served.lock().remove(tenant) else { return };
        drop(served.follow);
        let name = tenant.to_owned();
        self.handle.spawn(async move {
            if let Err(e) = served.server.shutdown().await {
                tracing::warn!(tenant = %name, error = %e, "stopping the tenant's cluster DNS");
            }
        });
    }
}
