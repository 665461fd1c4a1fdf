//! Each tenant's cluster DNS in `carrel up`: every tenant answers on one shared port, each at a
//! loopback address of its own (`127.x.y.z`, its `status.dnsEndpoint`, so `dig @127.x.y.z -p PORT
//! web.default.svc.cluster.local` works on the machine), from a zone that follows the tenant's
//! Services and EndpointSlices while its cluster is open ([`carrel_dns::follow`]). One UDP socket
//! and one TCP listener serve them all ([`SharedServer`]): a tenant holds no socket and no task
//! for its DNS, only its zone.
//!
//! A tenant closed while idle keeps its last zone: nothing can change its names until its
//! cluster opens again, and its pods may still be resolving them. A tenant served after a
//! restart without being opened has no zone yet: its first query opens it and waits for its
//! names ([`carrel_dns::Resolver::on_pending`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use parking_lot::Mutex;

use carrel_apiserver::http::Clusters;
use carrel_dns::{Resolver, SharedServer, SharedZone, DEFAULT_DOMAIN};

use crate::syncers::AbortOnDrop;

/// The loopback addresses tenants are given: `127.1.0.1` to `127.254.255.254`.
const FIRST: u32 = u32::from_be_bytes([127, 1, 0, 1]);
const LAST: u32 = u32::from_be_bytes([127, 254, 255, 254]);

/// The tenants' cluster DNS.
pub struct TenantDns {
    /// The port asked for (0: any), until the server is started.
    port: u16,
    /// Where names outside the cluster domain are forwarded.
    upstream: Vec<SocketAddr>,
    handle: tokio::runtime::Handle,
    /// Opens a tenant whose zone a query finds pending.
    clusters: Arc<Clusters>,
    /// Started with the first tenant.
    server: Mutex<Option<SharedServer>>,
    tenants: Arc<Mutex<Tenants>>,
}

/// The tenants served, by name and by address.
#[derive(Default)]
struct Tenants {
    by_name: HashMap<String, Served>,
    by_addr: HashMap<Ipv4Addr, String>,
}

/// One tenant's address, its resolver, and what keeps its zone current.
struct Served {
    addr: Ipv4Addr,
    resolver: Resolver,
    zone: SharedZone,
    /// Running while the tenant's cluster is open.
    follow: Option<AbortOnDrop>,
}

impl std::fmt::Debug for TenantDns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let port = self.server.lock().as_ref().map(SharedServer::port);
        f.debug_struct("TenantDns")
            .field("port", &port)
            .field("upstream", &self.upstream)
            .field("tenants", &self.tenants.lock().by_name.len())
            .finish_non_exhaustive()
    }
}

impl TenantDns {
    /// Tenants' DNS on `port` (0: one the system picks, or the one a tenant's status recorded),
    /// forwarding other names to `upstream`, run on `handle`, for the tenants of `clusters`.
    pub fn new(
        port: u16,
        upstream: Vec<SocketAddr>,
        handle: tokio::runtime::Handle,
        clusters: Arc<Clusters>,
    ) -> Arc<TenantDns> {
        Arc::new(TenantDns {
            port,
            upstream,
            handle,
            clusters,
            server: Mutex::default(),
            tenants: Arc::default(),
        })
    }

    /// The shared server's port, started if it is not running: on `self.port`, else on
    /// `recorded`'s port where that is free, else on one the system picks.
    fn port(&self, recorded: Option<SocketAddr>) -> Option<u16> {
        let mut server = self.server.lock();
        if let Some(server) = server.as_ref() {
            return Some(server.port());
        }
        let tenants = self.tenants.clone();
        let route: carrel_dns::Route = Arc::new(move |addr| {
            let tenants = tenants.lock();
            let name = tenants.by_addr.get(&addr)?;
            Some(tenants.by_name.get(name)?.resolver.clone())
        });
        let _runtime = self.handle.enter();
        let wanted = match (self.port, recorded) {
            (0, Some(recorded)) => recorded.port(),
            (port, _) => port,
        };
        let started = SharedServer::start(wanted, route.clone()).or_else(|e| {
            if wanted == self.port {
                return Err(e);
            }
            tracing::debug!(port = wanted, error = %e, "the recorded DNS port is taken");
            SharedServer::start(self.port, route)
        });
        match started {
            Ok(started) => {
                let port = started.port();
                *server = Some(started);
                Some(port)
            }
            Err(e) => {
                tracing::warn!(error = %e, "tenants' cluster DNS could not start");
                None
            }
        }
    }

    /// Where `tenant`'s DNS answers (`127.x.y.z:PORT`), given an address if it has none: the
    /// one `recorded` (its status's, from before) names where no other tenant holds it. `None`,
    /// logged, when the shared server cannot start.
    pub fn endpoint(&self, tenant: &str, recorded: Option<&str>) -> Option<SocketAddr> {
        let recorded = recorded.and_then(|r| r.parse::<SocketAddr>().ok());
        let port = self.port(recorded)?;
        let mut tenants = self.tenants.lock();
        if let Some(served) = tenants.by_name.get(tenant) {
            return Some(SocketAddr::from((served.addr, port)));
        }
        let addr = free_address(&tenants.by_addr, tenant, recorded)?;
        let zone = SharedZone::pending(DEFAULT_DOMAIN).ok()?;
        let (clusters, handle, name) =
            (self.clusters.clone(), self.handle.clone(), tenant.to_owned());
        let open = Arc::new(move || {
            let (clusters, name) = (clusters.clone(), name.clone());
            handle.spawn(async move {
                if let Some(Err(e)) = clusters.wake(&name).await {
                    tracing::warn!(tenant = %name, error = %e, "opening a tenant for its DNS");
                }
            });
        });
        let resolver = Resolver::new(zone.clone(), self.upstream.clone()).on_pending(open);
        tenants.by_addr.insert(addr, tenant.to_owned());
        let served = Served { addr, resolver, zone, follow: None };
        tenants.by_name.insert(tenant.to_owned(), served);
        tracing::info!(%tenant, %addr, port, "serving the tenant's cluster DNS");
        Some(SocketAddr::from((addr, port)))
    }

    /// Keep `tenant`'s zone current from its Services and EndpointSlices, read with `client`,
    /// until `stop` says its cluster closed.
    pub fn follow(
        &self,
        tenant: &str,
        client: kube::Client,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        if self.endpoint(tenant, None).is_none() {
            return;
        }
        let mut tenants = self.tenants.lock();
        let Some(served) = tenants.by_name.get_mut(tenant) else { return };
        let (zone, name) = (served.zone.clone(), tenant.to_owned());
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
        served.follow = Some(AbortOnDrop(task));
    }

    /// `tenant` is no longer served: its address answers no more.
    pub fn gone(&self, tenant: &str) {
        let mut tenants = self.tenants.lock();
        if let Some(served) = tenants.by_name.remove(tenant) {
            tenants.by_addr.remove(&served.addr);
        }
    }
}

/// An address no tenant in `taken` holds for `tenant`: `recorded`'s where it is one of ours and
/// free, else the first free one from a place its name picks.
fn free_address(
    taken: &HashMap<Ipv4Addr, String>,
    tenant: &str,
    recorded: Option<SocketAddr>,
) -> Option<Ipv4Addr> {
    let ours = |ip: u32| (FIRST..=LAST).contains(&ip);
    if let Some(SocketAddr::V4(recorded)) = recorded {
        let ip = u32::from(*recorded.ip());
        if ours(ip) && !taken.contains_key(recorded.ip()) {
            return Some(*recorded.ip());
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tenant.hash(&mut hasher);
    let span = u64::from(LAST - FIRST) + 1;
    let start = hasher.finish() % span;
    (0..span).map(|i| FIRST + ((start + i) % span) as u32).map(Ipv4Addr::from).find(|ip| {
        let last = ip.octets()[3];
        last != 0 && last != 255 && !taken.contains_key(ip)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_gets_a_loopback_address_of_its_own_and_keeps_the_one_it_had() {
        let mut taken = HashMap::new();
        let a = free_address(&taken, "team-a", None).unwrap();
        assert!(a.is_loopback() && a.octets()[1] >= 1, "{a}");
        assert_eq!(free_address(&taken, "team-a", None), Some(a), "the same name, the same place");
        taken.insert(a, "team-a".to_owned());
        let b = free_address(&taken, "team-a", None).unwrap();
        assert_ne!(a, b, "a taken address is never given again");
        // The recorded one, where it is free and one of ours.
        let recorded: SocketAddr = "127.9.8.7:5353".parse().unwrap();
        assert_eq!(free_address(&taken, "x", Some(recorded)), Some(Ipv4Addr::new(127, 9, 8, 7)));
        let held = SocketAddr::from((a, 5353));
        assert_ne!(free_address(&taken, "x", Some(held)), Some(a));
        let not_ours: SocketAddr = "127.0.0.1:5353".parse().unwrap();
        assert_ne!(free_address(&taken, "x", Some(not_ours)), Some(Ipv4Addr::LOCALHOST));
    }
}
