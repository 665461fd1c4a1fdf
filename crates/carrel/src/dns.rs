//! Each tenant's cluster DNS in `carrel up`: every tenant answers on one shared port, each at a
//! loopback address of its own (`127.x.y.z`, its `status.dnsEndpoint`, so `dig @127.x.y.z -p PORT
//! web.default.svc.cluster.local` works on the machine), from a zone that follows the tenant's
//! Services and EndpointSlices while its cluster is open ([`carrel_dns::follow`]). One UDP socket
//! and one TCP listener serve them all ([`SharedServer`]): a tenant holds no socket and no task
//! for its DNS, only its zone.
//!
//! `carrel serve` serves them another way ([`TenantDns::by_source`]): on one address, reached
//! through one host Service, where the address a query comes from (a host pod's, kept by
//! [`PodAddresses`]) names the tenant; a query from any other address gets no answer.
//!
//! A tenant closed while idle keeps its last zone: nothing can change its names until its
//! cluster opens again, and its pods may still be resolving them. A tenant served after a
//! restart without being opened has no zone yet: its first query opens it and waits for its
//! names ([`carrel_dns::Resolver::on_pending`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use parking_lot::{Mutex, RwLock};

use carrel_apiserver::http::Clusters;
use carrel_dns::{Answerer, Protocol, Relay, Resolver, SharedServer, SharedZone, DEFAULT_DOMAIN};
use carrel_tenants::replicas::{DnsAnswers, Replicas};

use carrel_tenants::host_namespace;

use crate::syncers::AbortOnDrop;

/// The loopback addresses tenants are given: `127.1.0.1` to `127.254.255.254`.
const FIRST: u32 = u32::from_be_bytes([127, 1, 0, 1]);
const LAST: u32 = u32::from_be_bytes([127, 254, 255, 254]);

/// How a query finds its tenant.
enum Routing {
    /// Each tenant at a loopback address of its own, on one port (0: any) for all (`carrel up`).
    Loopback { port: u16 },
    /// Every tenant on `listen`, which host pods reach at `advertised` (a host Service): the
    /// address a query comes from names the tenant whose host pod has it (`carrel serve`).
    BySource { listen: SocketAddr, advertised: SocketAddr, pods: Arc<PodAddresses> },
}

/// The tenants' cluster DNS.
pub struct TenantDns {
    routing: Routing,
    /// Where names outside the cluster domain are forwarded.
    upstream: Vec<SocketAddr>,
    handle: tokio::runtime::Handle,
    /// Opens a tenant whose zone a query finds pending.
    clusters: Arc<Clusters>,
    /// Started with the first tenant.
    server: Mutex<Option<SharedServer>>,
    tenants: Arc<Mutex<Tenants>>,
    /// Where several replicas serve tenants between them: the others, which the queries of
    /// their tenants' pods that reach this one are relayed to.
    replicas: Arc<OnceLock<Arc<Replicas>>>,
}

/// The tenants served, by name and by address.
#[derive(Default)]
struct Tenants {
    by_name: HashMap<String, Served>,
    by_addr: HashMap<Ipv4Addr, String>,
}

/// One tenant's address (none where queries' sources name it), its resolver, and what keeps
/// its zone current.
struct Served {
    addr: Option<Ipv4Addr>,
    resolver: Resolver,
    zone: SharedZone,
    /// Running while the tenant's cluster is open.
    follow: Option<AbortOnDrop>,
}

impl std::fmt::Debug for TenantDns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let port = self.server.lock().as_ref().map(SharedServer::port);
        let by_source = matches!(self.routing, Routing::BySource { .. });
        f.debug_struct("TenantDns")
            .field("port", &port)
            .field("by_source", &by_source)
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
            routing: Routing::Loopback { port },
            upstream,
            handle,
            clusters,
            server: Mutex::default(),
            tenants: Arc::default(),
            replicas: Arc::default(),
        })
    }

    /// Tenants' DNS on `listen`, reached by host pods at `advertised`, each tenant answering
    /// the queries that come from its host pods' addresses (`pods`), forwarding other names to
    /// `upstream`, run on `handle`, for the tenants of `clusters`.
    pub fn by_source(
        listen: SocketAddr,
        advertised: SocketAddr,
        pods: Arc<PodAddresses>,
        upstream: Vec<SocketAddr>,
        handle: tokio::runtime::Handle,
        clusters: Arc<Clusters>,
    ) -> Arc<TenantDns> {
        Arc::new(TenantDns {
            routing: Routing::BySource { listen, advertised, pods },
            upstream,
            handle,
            clusters,
            server: Mutex::default(),
            tenants: Arc::default(),
            replicas: Arc::default(),
        })
    }

    /// Start the server now (it starts with the first tenant otherwise); the address it listens
    /// on, or `None` (logged) when it cannot start.
    pub fn start(&self) -> Option<SocketAddr> {
        let port = self.port(None)?;
        Some(match &self.routing {
            Routing::Loopback { .. } => SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Routing::BySource { listen, .. } => SocketAddr::new(listen.ip(), port),
        })
    }

    /// The shared server's port, started if it is not running: on the port asked for, else on
    /// `recorded`'s port where that is free, else on one the system picks.
    fn port(&self, recorded: Option<SocketAddr>) -> Option<u16> {
        let mut server = self.server.lock();
        if let Some(server) = server.as_ref() {
            return Some(server.port());
        }
        let _runtime = self.handle.enter();
        let tenants = self.tenants.clone();
        let started = match &self.routing {
            Routing::BySource { listen, pods, .. } => {
                let (pods, replicas) = (pods.clone(), self.replicas.clone());
                let route: carrel_dns::SourceRoute = Arc::new(move |source| {
                    let name = pods.tenant_of(source)?;
                    if let Some(served) = tenants.lock().by_name.get(&name) {
                        return Some(Answerer::Here(served.resolver.clone()));
                    }
                    let replicas = replicas.get()?.clone();
                    Some(Answerer::Relayed(Arc::new(ToReplica { replicas, tenant: name })))
                });
                SharedServer::start_by_source(*listen, route)
            }
            Routing::Loopback { port: asked } => {
                let asked = *asked;
                let route: carrel_dns::Route = Arc::new(move |addr| {
                    let tenants = tenants.lock();
                    let name = tenants.by_addr.get(&addr)?;
                    Some(tenants.by_name.get(name)?.resolver.clone())
                });
                let wanted = match (asked, recorded) {
                    (0, Some(recorded)) => recorded.port(),
                    (port, _) => port,
                };
                SharedServer::start(wanted, route.clone()).or_else(|e| {
                    if wanted == asked {
                        return Err(e);
                    }
                    tracing::debug!(port = wanted, error = %e, "the recorded DNS port is taken");
                    SharedServer::start(asked, route)
                })
            }
        };
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
    /// one `recorded` (its status's, from before) names where no other tenant holds it; where
    /// queries' sources name tenants, the address host pods reach every tenant's at. `None`,
    /// logged, when the shared server cannot start.
    pub fn endpoint(&self, tenant: &str, recorded: Option<&str>) -> Option<SocketAddr> {
        let recorded = recorded.and_then(|r| r.parse::<SocketAddr>().ok());
        let port = self.port(recorded)?;
        let at = |addr: Option<Ipv4Addr>| match (&self.routing, addr) {
            (Routing::BySource { advertised, .. }, _) => Some(*advertised),
            (Routing::Loopback { .. }, addr) => Some(SocketAddr::from((addr?, port))),
        };
        let mut tenants = self.tenants.lock();
        if let Some(served) = tenants.by_name.get(tenant) {
            return at(served.addr);
        }
        let addr = match self.routing {
            Routing::Loopback { .. } => Some(free_address(&tenants.by_addr, tenant, recorded)?),
            Routing::BySource { .. } => None,
        };
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
        if let Some(addr) = addr {
            tenants.by_addr.insert(addr, tenant.to_owned());
        }
        let served = Served { addr, resolver, zone, follow: None };
        tenants.by_name.insert(tenant.to_owned(), served);
        tracing::info!(%tenant, ?addr, port, "serving the tenant's cluster DNS");
        at(addr)
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

    /// Relay the queries of tenants that other `replicas` serve to theirs (by source only).
    /// Only the first call has an effect.
    pub fn relay_to(&self, replicas: Arc<Replicas>) {
        let _ = self.replicas.set(replicas);
    }

    /// `tenant` is no longer served: its address answers no more.
    pub fn gone(&self, tenant: &str) {
        let mut tenants = self.tenants.lock();
        if let Some(addr) = tenants.by_name.remove(tenant).and_then(|served| served.addr) {
            tenants.by_addr.remove(&addr);
        }
    }
}

/// Relays a tenant's DNS queries to the replica that serves it.
#[derive(Debug)]
struct ToReplica {
    replicas: Arc<Replicas>,
    tenant: String,
}

impl Relay for ToReplica {
    fn relay(&self, query: Vec<u8>, protocol: Protocol) -> BoxFuture<'static, Option<Vec<u8>>> {
        let (replicas, tenant) = (self.replicas.clone(), self.tenant.clone());
        Box::pin(async move { replicas.relay_dns(&tenant, query, protocol == Protocol::Tcp).await })
    }
}

impl DnsAnswers for TenantDns {
    fn answer(
        &self,
        tenant: &str,
        query: Vec<u8>,
        tcp: bool,
    ) -> BoxFuture<'static, Option<Vec<u8>>> {
        let resolver = self.tenants.lock().by_name.get(tenant).map(|s| s.resolver.clone());
        Box::pin(async move {
            let protocol = if tcp { Protocol::Tcp } else { Protocol::Udp };
            // The relaying replica is the one this query came from.
            let from = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
            carrel_dns::answer(&resolver?, query, from, protocol).await
        })
    }
}

/// Where tenants' DNS forwards names outside the cluster domain: `given`, else the nameservers
/// of this machine's `/etc/resolv.conf` (none, logged, where it cannot be read).
pub fn upstream(given: &[SocketAddr]) -> Vec<SocketAddr> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let resolv_conf = std::path::Path::new("/etc/resolv.conf");
    carrel_dns::upstream_from_resolv_conf(resolv_conf).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "tenants' DNS forwards nowhere");
        Vec::new()
    })
}

/// The addresses of tenants' host pods, kept from one watch of the host's pods that carry a
/// tenant's label: which tenant a DNS query comes from. A pod counts for a tenant only in that
/// tenant's host namespace.
#[derive(Debug, Default)]
pub struct PodAddresses {
    by_ip: RwLock<HashMap<IpAddr, String>>,
}

impl PodAddresses {
    /// Addresses kept from `host`'s pods by a task on `handle`, for as long as the returned
    /// value lives.
    pub fn watch(host: kube::Client, handle: &tokio::runtime::Handle) -> Arc<PodAddresses> {
        let addresses = Arc::new(PodAddresses::default());
        let weak = Arc::downgrade(&addresses);
        handle.spawn(async move {
            let pods: kube::Api<Pod> = kube::Api::all(host);
            let config = watcher::Config::default().labels(carrel_syncer::host_names::LABEL_TENANT);
            let mut events = watcher::watcher(pods, config).default_backoff().boxed();
            let mut relisted: Option<HashMap<IpAddr, String>> = None;
            while let Some(event) = events.next().await {
                let Some(addresses) = weak.upgrade() else { return };
                match event {
                    Ok(Event::Init) => relisted = Some(HashMap::new()),
                    Ok(Event::InitApply(pod)) => {
                        if let Some(relisted) = relisted.as_mut() {
                            for (ip, tenant) in tenant_addresses(&pod) {
                                relisted.insert(ip, tenant);
                            }
                        }
                    }
                    Ok(Event::InitDone) => {
                        if let Some(relisted) = relisted.take() {
                            *addresses.by_ip.write() = relisted;
                        }
                    }
                    Ok(Event::Apply(pod)) => {
                        let mut by_ip = addresses.by_ip.write();
                        for (ip, tenant) in tenant_addresses(&pod) {
                            by_ip.insert(ip, tenant);
                        }
                    }
                    Ok(Event::Delete(pod)) => {
                        let mut by_ip = addresses.by_ip.write();
                        for (ip, tenant) in tenant_addresses(&pod) {
                            if by_ip.get(&ip) == Some(&tenant) {
                                by_ip.remove(&ip);
                            }
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "watching host pods for their addresses"),
                }
            }
        });
        addresses
    }

    /// The tenant whose host pod has address `ip`.
    pub fn tenant_of(&self, ip: IpAddr) -> Option<String> {
        self.by_ip.read().get(&ip).cloned()
    }
}

/// The addresses of host pod `pod` with its tenant, if it is one of a tenant's (its label names
/// the tenant whose host namespace it is in) and has addresses of its own (not its node's).
fn tenant_addresses(pod: &Pod) -> Vec<(IpAddr, String)> {
    let labels = pod.metadata.labels.as_ref();
    let Some(tenant) = labels.and_then(|l| l.get(carrel_syncer::host_names::LABEL_TENANT)) else {
        return Vec::new();
    };
    if pod.metadata.namespace.as_deref() != Some(host_namespace(tenant).as_str()) {
        return Vec::new();
    }
    // A pod on its node's network shares the node's address with whatever else runs there.
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return Vec::new();
    }
    let status = pod.status.as_ref();
    let listed = status.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().map(|p| &p.ip);
    let mut ips: Vec<IpAddr> = status
        .and_then(|s| s.pod_ip.as_ref())
        .into_iter()
        .chain(listed)
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.sort();
    ips.dedup();
    ips.into_iter().map(|ip| (ip, tenant.clone())).collect()
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

    fn pod(namespace: &str, tenant: Option<&str>, ips: &[&str], host_network: bool) -> Pod {
        let mut pod = serde_json::json!({
            "metadata": {"name": "p", "namespace": namespace},
            "spec": {"containers": [], "hostNetwork": host_network},
            "status": {"podIP": ips.first(), "podIPs": ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect::<Vec<_>>()},
        });
        if let Some(tenant) = tenant {
            pod["metadata"]["labels"] = serde_json::json!({"carrel.dev/tenant": tenant});
        }
        serde_json::from_value(pod).unwrap()
    }

    #[test]
    fn a_host_pod_counts_for_the_tenant_of_its_label_in_that_tenants_namespace_only() {
        let both = pod("carrel-team-a", Some("team-a"), &["10.1.0.7", "fd00::7"], false);
        let ips: Vec<String> =
            tenant_addresses(&both).into_iter().map(|(ip, t)| format!("{ip} {t}")).collect();
        assert_eq!(ips, ["10.1.0.7 team-a", "fd00::7 team-a"]);
        // A label naming another tenant than its namespace's, no label, the node's network.
        assert!(tenant_addresses(&pod("carrel-team-a", Some("team-b"), &["10.1.0.8"], false))
            .is_empty());
        assert!(tenant_addresses(&pod("default", Some("team-a"), &["10.1.0.9"], false)).is_empty());
        assert!(tenant_addresses(&pod("carrel-team-a", None, &["10.1.0.10"], false)).is_empty());
        assert!(
            tenant_addresses(&pod("carrel-team-a", Some("team-a"), &["10.0.0.1"], true)).is_empty()
        );
    }
}
