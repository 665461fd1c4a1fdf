//! `carrel serve`: tenants' API servers for a real host cluster, one listener. The tenant
//! manager and every tenant's syncer run in this process and reach the host only through a
//! `kube::Client` (in-cluster configuration, or `--host-kubeconfig`), with the rights of the
//! `carrel:apiserver` ClusterRole in `manifests/`; nothing of the host is served here.
//!
//! The listener's root serves no cluster of its own: a request that names no tenant (by path,
//! TLS server name or its token's issuer) reaches an empty API that authenticates nobody, so it
//! is answered 401, as kube-apiserver answers a credential it does not know, and the health
//! paths answer as a kube-apiserver's do.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use carrel_apiserver::access::Security;
use carrel_apiserver::http::{clusters_router, Clusters};
use carrel_apiserver::intake::PodIntake;
use carrel_apiserver::listener::{self, ListenerFlags};
use carrel_apiserver::peer::{PeerClient, REPLICAS_GROUP};
use carrel_apiserver::tls::{Ca, Certificates, IN_CLUSTER_NAMES, TENANT_DOMAIN};
use carrel_apiserver::{Api, Server, ServiceNetwork};
use carrel_store::{Options, SledStore};
use carrel_syncer::ClusterDns;
use carrel_tenants::replicas::{self, Replicas};
use carrel_tenants::Manager;
use k8s_openapi::api::core::v1::Service;

use crate::dns::{PodAddresses, TenantDns};
use crate::syncers::Syncers;
use crate::up::{descriptors, go_duration, serve_tenants_by_name, shutdown_signal, INTAKE_LIMIT};

/// The issuer named by the root's (unused) token settings; no token is ever issued for it.
const FRONT_ISSUER: &str = "https://carrel.invalid/front";

/// `carrel serve` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the tenants' stores and the serving certificates are kept (a persistent volume).
    #[arg(long, default_value = "/var/lib/carrel")]
    data_dir: PathBuf,
    /// The address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "0.0.0.0:6443")]
    listen: SocketAddr,
    /// The URL clients reach this server at (`https://carrel.example.com`): tenant kubeconfigs
    /// and `Tenant.status.endpoint` name it, and the serving certificate covers its host.
    /// Default: the listener's address (its loopback one on a wildcard listener).
    #[arg(long)]
    endpoint: Option<String>,
    /// Where tenants' workloads reach their tenant API, as HOST:PORT (the Service in front of
    /// this server): their host pods' `KUBERNETES_SERVICE_HOST`/`PORT` name it, and the serving
    /// certificate covers it. Default: --tenant-api-service's, else the endpoint's host and port.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "tenant_api_service",
          value_parser = carrel_syncer::host_port)]
    tenant_api_address: Option<(String, u16)>,
    /// The host Service in front of this server, as NAMESPACE/NAME: tenants' workloads reach
    /// their API at its cluster IP and TCP port (an address, which their DNS need not resolve),
    /// and each tenant's `default/kubernetes` Service and EndpointSlice show it.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    tenant_api_service: Option<String>,
    /// Close a tenant's cluster once no request has reached it for this long, as a Go duration;
    /// `0s` keeps every tenant open.
    #[arg(long, default_value = "5m", value_parser = go_duration)]
    tenant_idle_after: Duration,
    /// The IPv4 range tenants' Services' cluster IPs are given from: the host's
    /// `--service-cluster-ip-range`, so that host Services can hold their tenant Services'
    /// addresses.
    #[arg(long, default_value = "10.96.0.0/12", value_parser = ServiceNetwork::from_cidr)]
    service_cidr: ServiceNetwork,
    /// The RuntimeClass of host pods that hold MIG devices (the GPU Operator's `nvidia`): the
    /// runtime handler that injects the devices their CDI annotation names. Default: none, the
    /// node's default runtime, which must then be the NVIDIA Container Runtime.
    #[arg(long)]
    gpu_runtime_class: Option<String>,
    /// Serve tenants' cluster DNS on this address (UDP and TCP), each tenant answering the
    /// queries that come from its host pods' addresses; with --dns-service. Without, tenants'
    /// pods resolve through their node.
    #[arg(long, requires = "dns_service", value_name = "ADDRESS:PORT")]
    dns_listen: Option<SocketAddr>,
    /// The host Service in front of --dns-listen, as NAMESPACE/NAME: host pods resolve through
    /// its cluster IP, and tenants' `status.dnsEndpoint` names it.
    #[arg(long, requires = "dns_listen", value_name = "NAMESPACE/NAME")]
    dns_service: Option<String>,
    /// Where tenants' DNS forwards names outside the cluster domain, as ADDRESS:PORT, comma
    /// separated. Default: the nameservers of /etc/resolv.conf.
    #[arg(long, value_delimiter = ',')]
    dns_upstream: Vec<SocketAddr>,
    /// How many new pods, across tenants, may be stored before their syncers have taken them up.
    /// Default: half the cores, at least one. 0 lets every create through at once.
    #[arg(long)]
    sync_window: Option<usize>,
    /// The domain tenants are reached under by TLS server name (`<tenant>.<domain>`, set as
    /// `tls-server-name` in their kubeconfigs, which needs no DNS; with a wildcard DNS record
    /// naming this server's Service, `https://<tenant>.<domain>` reaches a tenant directly).
    #[arg(long, default_value = TENANT_DOMAIN)]
    tenant_domain: String,
    /// This replica's name, where several serve tenants between them (a StatefulSet's pod
    /// name): it serves the tenants whose `status.replica` names it, and forwards requests for
    /// the others to theirs. Needs --serving-ca-secret and --replica-address.
    #[arg(long, requires_all = ["serving_ca_secret", "replica_address"])]
    replica: Option<String>,
    /// Where the other replicas reach this one, as HOST:PORT (its pod IP and the listener's
    /// port); the serving certificate covers the host.
    #[arg(long, value_name = "HOST:PORT",
          value_parser = carrel_syncer::host_port)]
    replica_address: Option<(String, u16)>,
    /// The host namespace of the replicas' Leases (membership, and the assigner's).
    #[arg(long, default_value = "carrel-system")]
    replica_namespace: String,
    /// The host Secret (NAMESPACE/NAME) holding the serving CA every replica issues its
    /// certificates from, made by the first replica to start: kubeconfigs trust every replica.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    serving_ca_secret: Option<String>,
    #[command(flatten)]
    listener: ListenerFlags,
}

/// The serving CA in host Secret `NAMESPACE/NAME` (`ca.crt`, `ca.key`), made there if there is
/// none yet; when two replicas make one at once, the first kept wins and both use it.
async fn shared_ca(host: &kube::Client, secret: &str) -> anyhow::Result<Ca> {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    let (namespace, name) = secret
        .split_once('/')
        .with_context(|| format!("--serving-ca-secret {secret}: not NAMESPACE/NAME"))?;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(host.clone(), namespace);
    let read = |secret: &Secret| -> anyhow::Result<Ca> {
        let data = secret.data.as_ref().context("no data")?;
        let field = |key: &str| -> anyhow::Result<String> {
            let bytes = data.get(key).with_context(|| format!("no {key}"))?;
            Ok(String::from_utf8(bytes.0.clone())?)
        };
        Ok(Ca { cert_pem: field("ca.crt")?, key_pem: field("ca.key")? })
    };
    if let Some(found) = secrets.get_opt(name).await? {
        return read(&found).with_context(|| format!("Secret {secret}"));
    }
    let ca = Ca::generate()?;
    let data = [
        ("ca.crt".to_owned(), ByteString(ca.cert_pem.clone().into_bytes())),
        ("ca.key".to_owned(), ByteString(ca.key_pem.clone().into_bytes())),
    ];
    let made = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([("app.kubernetes.io/part-of".to_owned(), "carrel".to_owned())].into()),
            ..Default::default()
        },
        data: Some(data.into_iter().collect()),
        ..Default::default()
    };
    // A fresh install may apply the namespace beside this server: waited for up to a minute.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match secrets.create(&kube::api::PostParams::default(), &made).await {
            Ok(_) => return Ok(ca),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let found = secrets.get(name).await?;
                return read(&found).with_context(|| format!("Secret {secret}"));
            }
            Err(kube::Error::Api(e)) if e.code == 404 && tokio::time::Instant::now() < deadline => {
                tracing::info!(%secret, "waiting for the Secret's namespace");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("creating Secret {secret}")),
        }
    }
}

/// `host` as the host of a `HOST:PORT`: an IPv6 address in brackets.
fn bracketed(host: &str) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => host.to_owned(),
    }
}

/// The host and port of an `https://host[:port][/…]` URL; 443 where it names none.
fn host_and_port(url: &str) -> anyhow::Result<(String, u16)> {
    let uri: hyper::http::Uri = url.parse().with_context(|| format!("{url} is not a URL"))?;
    if uri.scheme_str() != Some("https") {
        anyhow::bail!("{url} is not an https:// URL");
    }
    let host = uri.host().with_context(|| format!("{url} names no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    Ok((host, uri.port_u16().unwrap_or(443)))
}

/// The cluster IP of host Service `NAMESPACE/NAME` (given as `flag`) with its first port of
/// `protocol` (else its first, else `default_port`), waited for up to a minute (a fresh install
/// may apply it beside this server).
async fn service_address(
    host: &kube::Client,
    flag: &str,
    service: &str,
    protocol: &str,
    default_port: u16,
) -> anyhow::Result<SocketAddr> {
    let (namespace, name) =
        service.split_once('/').with_context(|| format!("{flag} {service}: not NAMESPACE/NAME"))?;
    let services: kube::Api<Service> = kube::Api::namespaced(host.clone(), namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let found = services.get_opt(name).await;
        let spec = match &found {
            Ok(Some(service)) => service.spec.as_ref(),
            _ => None,
        };
        let ip =
            spec.and_then(|s| s.cluster_ip.as_deref()).and_then(|ip| ip.parse::<IpAddr>().ok());
        if let (Some(ip), Some(spec)) = (ip, spec) {
            let ports = spec.ports.iter().flatten();
            let port = ports
                .clone()
                .find(|p| p.protocol.as_deref().unwrap_or("TCP") == protocol)
                .or_else(|| ports.clone().next())
                .map_or(default_port, |p| u16::try_from(p.port).unwrap_or(default_port));
            return Ok(SocketAddr::new(ip, port));
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "{flag} {service}: no such Service with a cluster IP on the host ({found:?})"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Run until SIGTERM or Ctrl-C.
pub async fn serve(host_kubeconfig: Option<&std::path::Path>, args: Args) -> anyhow::Result<()> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    let host = match host_kubeconfig {
        Some(path) => crate::host::client(Some(path)).await?,
        None => kube::Client::try_default()
            .await
            .context("no host: not in a cluster, and no --host-kubeconfig or $KUBECONFIG")?,
    };
    let data = &args.data_dir;
    std::fs::create_dir_all(data)
        .with_context(|| format!("creating the data directory {}", data.display()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    let endpoint = match &args.endpoint {
        Some(endpoint) => endpoint.trim_end_matches('/').to_owned(),
        None => format!("https://{}", crate::up::advertised(addr)),
    };
    let (endpoint_host, _) = host_and_port(&endpoint)?;
    let tenant_api = match (&args.tenant_api_address, &args.tenant_api_service) {
        (Some(address), _) => address.clone(),
        (None, Some(service)) => {
            let at = service_address(&host, "--tenant-api-service", service, "TCP", 443).await?;
            (at.ip().to_string(), at.port())
        }
        (None, None) => host_and_port(&endpoint)?,
    };

    let mut hosts = vec![endpoint_host, tenant_api.0.clone(), "localhost".to_owned()];
    if !addr.ip().is_unspecified() {
        hosts.push(addr.ip().to_string());
    }
    hosts.extend(IN_CLUSTER_NAMES.iter().map(|n| (*n).to_owned()));
    hosts.push(args.service_cidr.first().to_string());
    hosts.push(format!("*.{}", args.tenant_domain));
    if let Some((replica_host, _)) = &args.replica_address {
        hosts.push(replica_host.clone());
    }
    let shared = match &args.serving_ca_secret {
        Some(secret) => Some(shared_ca(&host, secret).await.context("the serving CA")?),
        None => None,
    };
    let certs = match &shared {
        // Issued afresh at each start: clients trust the CA, which stays.
        Some(ca) => Certificates::issue(ca, &hosts).context("the serving certificates")?,
        None => Certificates::load_or_generate(&data.join("pki"), &hosts)
            .context("the serving certificates")?,
    };

    // The root: an API nobody can authenticate to (its CA's key is thrown away at once).
    let front_store = SledStore::open(data.join("front"), Options::create())
        .with_context(|| format!("opening {}", data.join("front").display()))?;
    let front = Api::new_in(Arc::new(front_store), args.service_cidr.clone())
        .map_err(|e| anyhow::anyhow!("bootstrapping the front API: {e}"))?;
    let nobody = Certificates::generate(&[]).context("a CA for the front API")?;
    let security = Security::new(nobody.ca_der()?, None, FRONT_ISSUER);
    let root = Arc::new(Server::secured(Arc::new(front), "", Arc::new(security)));
    let clusters = Arc::new(Clusters::new(root));

    let api_ip = tenant_api.0.parse::<IpAddr>().ok();
    let mut network = args.service_cidr.clone();
    if let Some(ip) = api_ip {
        network = network.with_api_endpoint(SocketAddr::new(ip, tenant_api.1));
    }
    let manager = Arc::new(Manager::new(
        host.clone(),
        clusters.clone(),
        data,
        &endpoint,
        Some(certs.ca_pem.clone()),
    ));
    manager.set_service_network(network);
    serve_tenants_by_name(&certs, &clusters, &manager, &args.tenant_domain);

    let window = args.sync_window.unwrap_or_else(PodIntake::size_for_this_machine);
    let intake = (window > 0).then(|| Arc::new(PodIntake::new(window, INTAKE_LIMIT)));
    let syncers = Syncers::new(
        host.clone(),
        tokio::runtime::Handle::current(),
        Some(certs.ca_pem.clone()),
        Duration::from_secs(10),
        intake,
    )
    .with_tenant_api(tenant_api.0.clone(), tenant_api.1)
    .with_gpu_runtime_class(args.gpu_runtime_class.clone());
    // Host pods never resolve through a tenant's `kube-dns` address: on a real host, the tenth
    // of its Service network is the host's own DNS, which knows every tenant's host Services.
    // They resolve through the tenants' DNS Service where there is one, else their node.
    let mut tenant_dns = None;
    let syncers = match (args.dns_listen, &args.dns_service) {
        (Some(listen), Some(service)) => {
            let advertised = service_address(&host, "--dns-service", service, "UDP", 53).await?;
            let upstream = crate::dns::upstream(&args.dns_upstream);
            let handle = tokio::runtime::Handle::current();
            let pods = PodAddresses::watch(host.clone(), &handle);
            let dns =
                TenantDns::by_source(listen, advertised, pods, upstream, handle, clusters.clone());
            let bound = dns.start().context("tenants' DNS could not start")?;
            announce_dns(bound, advertised);
            tenant_dns = Some(dns.clone());
            syncers.with_dns(dns).with_cluster_dns(ClusterDns::At(advertised.ip().to_string()))
        }
        _ => syncers.with_cluster_dns(ClusterDns::Node),
    };
    let syncers = Arc::new(syncers);
    manager.set_hooks(syncers.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut router = clusters_router(clusters.clone());
    let mut replicas_task = None;
    if let (Some(me), Some(address), Some(ca)) = (&args.replica, &args.replica_address, &shared) {
        let (cert, key) = ca.client(&format!("carrel-replica:{me}"), REPLICAS_GROUP)?;
        let peers = PeerClient::new(me, &ca.cert_pem, &cert, &key)?;
        let address = format!("{}:{}", bracketed(&address.0), address.1);
        let replicas = Replicas::new(
            me,
            &args.replica_namespace,
            &address,
            host.clone(),
            peers,
            clusters.clone(),
        );
        clusters.set_replicas(carrel_apiserver::http::Replicas {
            ca: certs.ca_der()?,
            forward: replicas.clone(),
        });
        manager.set_replicas(replicas.clone());
        replicas_task = Some(tokio::spawn(replicas.clone().run(stop_rx.clone())));
        if let Some(dns) = &tenant_dns {
            dns.relay_to(replicas.clone());
        }
        let answers = tenant_dns.clone().map(|dns| dns as Arc<dyn replicas::DnsAnswers>);
        router =
            replicas::receiving(certs.ca_der()?, clusters.clone(), data, answers).merge(router);
    }
    if !args.tenant_idle_after.is_zero() {
        manager.close_idle_tenants(args.tenant_idle_after);
        syncers.open_idle_tenants_when_due(clusters.clone());
    }
    let mut limits = args.listener.limits();
    descriptors(&mut limits, &clusters, &manager);
    manager.resume().await.context("resuming tenants")?;
    let config = certs.server_config().context("TLS configuration")?;
    let manager_task = tokio::spawn(manager.run(Duration::from_secs(1), stop_rx));
    announce(addr, &endpoint, clusters.names().len());
    listener::serve(listener, Some(config), router, limits, shutdown_signal()).await;
    let _ = stop_tx.send(true);
    syncers.stop_all();
    let _ = manager_task.await;
    if let Some(task) = replicas_task {
        let _ = task.await;
    }
    Ok(())
}

/// Scripts read where tenants' DNS is from this line.
#[allow(clippy::print_stdout)]
fn announce_dns(bound: SocketAddr, advertised: SocketAddr) {
    println!("tenants' DNS: {bound} (host pods reach it at {advertised})");
}

/// Scripts read where the server is from these lines.
#[allow(clippy::print_stdout)]
fn announce(addr: SocketAddr, endpoint: &str, tenants: usize) {
    println!("listening on https://{addr}");
    println!("tenants' endpoint: {endpoint}");
    println!("tenants resumed: {tenants}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_gives_its_host_and_port() {
        assert_eq!(
            host_and_port("https://carrel.example.com").unwrap(),
            ("carrel.example.com".to_owned(), 443)
        );
        assert_eq!(host_and_port("https://10.0.0.1:6443/").unwrap(), ("10.0.0.1".to_owned(), 6443));
        assert_eq!(host_and_port("https://[::1]:8443").unwrap(), ("::1".to_owned(), 8443));
        assert!(host_and_port("carrel").is_err());
    }
}
