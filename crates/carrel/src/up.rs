//! `carrel up`: the host API and the tenant manager in one process, on one TLS listener.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use carrel_apiserver::access::Security;
use carrel_apiserver::api::{Target, Write};
use carrel_apiserver::auth::token::Signer;
use carrel_apiserver::auth::UserInfo;
use carrel_apiserver::http::clusters_router;
use carrel_apiserver::http::Clusters;
use carrel_apiserver::intake::PodIntake;
use carrel_apiserver::listener::{self, FdReserve, ListenerFlags};
use carrel_apiserver::local_client::ServiceAccount;
use carrel_apiserver::tenant::descriptors::Descriptors;
use carrel_apiserver::tls::{self, Certificates};
use carrel_apiserver::tls::{tenant_server_name, IN_CLUSTER_NAMES, TENANT_DOMAIN};
use carrel_apiserver::ApiError;
use carrel_apiserver::{kubeconfig, local_client};
use carrel_apiserver::{Api, Server, ServiceNetwork};
use carrel_node_agent::{Agent, AgentConfig, PodMap};
use carrel_sim::kubelet::Kubelet;
use carrel_sim::{run_provisioner, run_scheduler, LogStore};
use carrel_store::{Options, SledStore};
use carrel_tenants::Manager;

use crate::dns::TenantDns;
use crate::host::{default_data_dir, KUBECONFIG_FILE};
use crate::metrics::SimMetrics;
use crate::pod_streams::SimPodStreams;
use crate::syncers::{SimPodLogs, Syncers};

/// How long a new pod holds its room in the sync window if its syncer never takes it up.
pub(crate) const INTAKE_LIMIT: Duration = Duration::from_secs(2);

/// The issuer of the host API's service-account tokens.
const HOST_ISSUER: &str = "https://kubernetes.default.svc";

/// Descriptors kept for the process whatever client connections want: its own files. Its
/// controllers, syncers and node agents hold none: they reach its APIs without sockets.
const FD_RESERVE_BASE: u64 = 512;

/// Descriptors kept for each store served (its log, checkpoint files and blobs; four while
/// idle). A tenant's syncer adds none.
const FD_RESERVE_PER_STORE: u64 = 24;

/// `carrel up` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where Carrel keeps its data: the host store, the tenants' stores and the certificates.
    /// Default: $CARREL_DATA_DIR, else $XDG_DATA_HOME/carrel, else ~/.local/share/carrel.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Simulated GPU nodes to run (their node agents play the kubelet).
    #[arg(long, default_value_t = 2)]
    sim_nodes: u32,
    /// The GPUs of every simulated node: MODELxCOUNT[:mig=PROFILE*N[,PROFILE*N…]], MODEL one of
    /// a100-40gb, a100-80gb, h100-80gb, h100-94gb, h200, b200.
    #[arg(long, default_value = "h200x8")]
    sim_gpus: String,
    /// The most pods each simulated node runs, as a kubelet's maxPods; the scheduler places no
    /// more, and pods bound past it fail as OutOfpods.
    #[arg(long, default_value_t = carrel_sim::kubelet::DEFAULT_MAX_PODS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(carrel_sim::kubelet::MAX_PODS_LIMIT)))]
    sim_max_pods: u32,
    /// How many new pods, across tenants, may be stored before their syncers have taken them
    /// up; further pod creates wait their turn, tenant by tenant. Default: half the cores, at
    /// least one. 0 lets every create through at once.
    #[arg(long)]
    sync_window: Option<usize>,
    /// Start no syncers: tenants' pods reach the host only through `carrel-syncer` processes
    /// started apart, as against a real host cluster. No sync window then.
    #[arg(long, conflicts_with = "sync_window")]
    no_syncers: bool,
    /// Serve the host only: no tenant manager and no syncers here. Tenants are served by
    /// `carrel serve` processes that reach this host as their host cluster, as on a real one.
    #[arg(long, conflicts_with = "sync_window")]
    no_tenants: bool,
    /// Close a tenant's cluster (its store, its syncer) once no request has reached it for
    /// this long, as a Go duration (`90s`, `5m`); its next request opens it again, in a few
    /// milliseconds. `0s` keeps every tenant open.
    #[arg(long, default_value = "5m", value_parser = go_duration)]
    tenant_idle_after: Duration,
    /// The port every tenant's cluster DNS answers on, each tenant at a loopback address of its
    /// own (`127.x.y.z`, its `status.dnsEndpoint`). 0: the port recorded before where it is
    /// free, else one the system picks.
    #[arg(long, default_value_t = 0)]
    dns_port: u16,
    /// Where tenants' DNS forwards names outside the cluster domain, as ADDRESS:PORT, comma
    /// separated. Default: the nameservers of /etc/resolv.conf.
    #[arg(long, value_delimiter = ',')]
    dns_upstream: Vec<SocketAddr>,
    /// The IPv4 range Services' cluster IPs are given from, on the host and in every tenant
    /// (a tenant's `kubernetes` Service has its first address, its `kube-dns` the tenth). Set
    /// it to a real host's `--service-cluster-ip-range` so that host Services can hold their
    /// tenant Services' addresses.
    #[arg(long, default_value = "10.96.0.0/12", value_parser = ServiceNetwork::from_cidr)]
    service_cidr: ServiceNetwork,
    /// The domain tenants are reached under by TLS server name (`<tenant>.<domain>`, set as
    /// `tls-server-name` in their kubeconfigs, which needs no DNS). Certificates saved before
    /// a domain was chosen keep the one they name.
    #[arg(long, default_value = TENANT_DOMAIN)]
    tenant_domain: String,
    #[command(flatten)]
    listener: ListenerFlags,
}

/// A non-negative Go duration.
pub(crate) fn go_duration(text: &str) -> Result<Duration, String> {
    let nanos = carrel_machinery::duration::parse(text).map_err(|e| e.to_string())?;
    let nanos = u64::try_from(nanos).map_err(|_| format!("{text} is negative"))?;
    Ok(Duration::from_nanos(nanos))
}

/// The name of simulated node `i`.
fn sim_node_name(i: u32) -> String {
    format!("carrel-sim-{i}")
}

/// Run until Ctrl-C (or SIGTERM).
pub async fn up(args: Args) -> anyhow::Result<()> {
    // Every served tenant keeps a few files open; the usual soft limit of 1,024 would run out
    // at a few hundred tenants. Raise it to the hard limit, as the Go runtime does for Go servers.
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    // A spec that cannot be placed is refused before anything starts.
    carrel_nvml::Simulator::from_spec(&args.sim_gpus, &sim_node_name(0))
        .with_context(|| format!("--sim-gpus {}", args.sim_gpus))?;
    let data = args.data_dir.unwrap_or_else(default_data_dir);
    std::fs::create_dir_all(&data)
        .with_context(|| format!("creating the data directory {}", data.display()))?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // What in-cluster clients are given as the API's address: on a wildcard listener, this
    // machine's loopback (every pod of `carrel up` runs here).
    let advertised = advertised(addr);
    // The names kube-apiserver's serving certificate carries, so that in-cluster clients
    // verify it by `kubernetes.default.svc` as by the address.
    let mut hosts = vec![addr.ip().to_string(), "127.0.0.1".to_owned(), "localhost".to_owned()];
    hosts.extend(IN_CLUSTER_NAMES.iter().map(|n| (*n).to_owned()));
    hosts.push(args.service_cidr.first().to_string());
    hosts.push(format!("*.{}", args.tenant_domain));
    let certs = Certificates::load_or_generate(&data.join("pki"), &hosts)
        .context("the host's certificates")?;
    let store = SledStore::open(data.join("host"), Options::create())
        .with_context(|| format!("opening the host store in {}", data.join("host").display()))?;
    // The host's and every tenant's `kubernetes` Service name this listener as their API.
    // Everything of `carrel up` runs on this machine, its tenants' admission webhooks too.
    let service_network = args
        .service_cidr
        .clone()
        .with_api_endpoint(advertised)
        .with_webhook_egress(carrel_apiserver::admission::webhook::Egress::with_loopback());
    let host = Api::host_in(Arc::new(store), service_network.clone());
    let host = Arc::new(host.map_err(|e| anyhow::anyhow!("{e}"))?);
    carrel_apiserver::event_ttl::start(&host);
    ensure_namespace(&host, carrel_gpu::CLAIM_NAMESPACE)?;
    // The host API: clients with a certificate from the host's CA (the admin kubeconfig has
    // one), authorized by the host's own RBAC.
    let host_tokens =
        Signer::load_or_generate(&data.join("pki")).context("the host's token key")?;
    let security = Security::new(certs.ca_der()?, Some(host_tokens), HOST_ISSUER);
    let host_server = Arc::new(Server::secured(host.clone(), "", Arc::new(security)));
    let clusters = Arc::new(Clusters::new(host_server.clone()));
    let endpoint = format!("https://{addr}");
    // The tenant manager reaches the host as a client, as it would any Kubernetes API server:
    // here through the host's router in this process, as its own service account.
    let manager_tokens =
        Signer::load_or_generate(&data.join("pki")).context("the host's token key")?;
    let manager_client =
        carrel_tenants::in_process_client(host_server.clone(), Some((manager_tokens, HOST_ISSUER)))
            .context("the tenant manager's client of the host")?;
    let manager = Arc::new(Manager::new(
        manager_client,
        clusters.clone(),
        &data,
        &endpoint,
        Some(certs.ca_pem.clone()),
    ));
    manager.set_service_network(service_network);
    serve_tenants_by_name(&certs, &clusters, &manager, &args.tenant_domain);
    if !certs.covers(IN_CLUSTER_NAMES[2]) {
        tracing::warn!(
            "the saved serving certificate does not name {}: in-cluster clients must use the \
             address in KUBERNETES_SERVICE_HOST",
            IN_CLUSTER_NAMES[2]
        );
    }
    let kubeconfig_path = data.join(KUBECONFIG_FILE);
    std::fs::write(&kubeconfig_path, kubeconfig::admin(&endpoint, Some(&certs)))
        .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
    // Syncers, node agents, kubelets and the scheduler reach the host through its API, as they
    // would a real cluster's: here in this process, with no socket, as the host's admin (whom
    // the host kubeconfig's certificate names). One client, cloned for each.
    let client = local_client::loopback(host_server.clone(), host_admin(), "default");
    // Syncers and node agents are the host's service accounts with the rules their code keeps
    // (`carrel_syncer::rbac`, `carrel_node_agent::rbac`), as the manifests grant them on a real
    // host: the host's RBAC holds them to least privilege here too.
    let syncers_client =
        component_client(&host_server, &data, "syncer", carrel_syncer::rbac::process_rules())?;
    let agents_client =
        component_client(&host_server, &data, "node-agent", carrel_node_agent::rbac::rules())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The window needs syncers that give room back; syncers run apart know nothing of it.
    let window = if args.no_syncers || args.no_tenants {
        0
    } else {
        args.sync_window.unwrap_or_else(PodIntake::size_for_this_machine)
    };
    let intake = (window > 0).then(|| PodIntake::new(window, INTAKE_LIMIT));
    tracing::debug!(window, "sync window");
    let mut syncers = Syncers::new(
        syncers_client,
        tokio::runtime::Handle::current(),
        Some(certs.ca_pem.clone()),
        Duration::from_secs(10),
        intake.map(Arc::new),
    );
    if args.no_syncers || args.no_tenants {
        syncers = syncers.logs_only();
    }
    let upstream = crate::dns::upstream(&args.dns_upstream);
    let handle = tokio::runtime::Handle::current();
    let dns = TenantDns::new(args.dns_port, upstream, handle, clusters.clone());
    let api = (advertised.ip().to_string(), advertised.port());
    syncers = syncers.with_dns(dns).with_tenant_api(api.0, api.1);
    let syncers = Arc::new(syncers);
    manager.set_hooks(syncers.clone());
    if !args.tenant_idle_after.is_zero() && !args.no_tenants {
        manager.close_idle_tenants(args.tenant_idle_after);
        syncers.open_idle_tenants_when_due(clusters.clone());
    }
    // Each node's containers: its kubelet plays them, the host's pod streams reach them.
    let logs: BTreeMap<String, LogStore> =
        (0..args.sim_nodes).map(|i| (sim_node_name(i), LogStore::new())).collect();
    let streams = Arc::new(SimPodStreams::new(client.clone(), logs.clone()));
    let mut tasks = Vec::new();
    for (name, node_logs) in &logs {
        let name = name.clone();
        let backend = carrel_nvml::Simulator::from_spec(&args.sim_gpus, &name)
            .with_context(|| format!("--sim-gpus {}", args.sim_gpus))?;
        let mut config = AgentConfig::new(&name);
        config.inventory_interval = Duration::from_secs(2);
        config.cdi_dir = Some(data.join("cdi"));
        let agent =
            Agent::new(agents_client.clone(), Arc::new(backend), Arc::new(PodMap::new()), config);
        // The node's kubelet, played beside its agent.
        let kubelet = Kubelet::new(client.clone(), &name, args.sim_max_pods, node_logs.clone())
            .with_views(streams.clone());
        tasks.push(tokio::spawn(kubelet.run(stop_rx.clone())));
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = agent.run(stop).await {
                tracing::error!(error = %e, "a simulated node agent stopped");
            }
        }));
    }
    host_server.set_pod_streams(streams);
    host_server.set_pod_logs(Arc::new(SimPodLogs::new(logs)));
    // `kubectl top` on the host: what the simulated kubelets' pods and nodes use.
    host_server.set_metrics(Arc::new(SimMetrics::new(host.clone())));
    tasks.push(tokio::spawn(run_scheduler(client.clone(), stop_rx.clone())));
    // The host's storage: a default StorageClass, and volumes provisioned and bound for its claims.
    tasks.push(tokio::spawn(run_provisioner(client.clone(), stop_rx.clone())));
    // The host's garbage collector, as a cluster's kube-controller-manager runs one: ownerless
    // dependents, and deletes in the foreground or orphaning.
    let host_controllers = carrel_controllers::Context::new(client.clone());
    tasks.push(tokio::spawn(carrel_controllers::gc::run(host_controllers, stop_rx.clone())));
    let mut limits = args.listener.limits();
    // Loopback is exempt from the per-address limit (the total still counts it), as when this
    // process's own syncers and node agents connected from there: `carrel-syncer` processes
    // started beside `--no-syncers` still do, about ten connections each.
    if !args.no_syncers || args.sim_nodes > 0 {
        limits.per_ip_exempt = vec![Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
    }
    descriptors(&mut limits, &clusters, &manager);
    let config = certs.server_config().context("TLS configuration")?;
    let manager_task = if args.no_tenants {
        None
    } else {
        manager.resume().await.context("resuming tenants")?;
        Some(tokio::spawn(manager.run(Duration::from_secs(1), stop_rx)))
    };
    announce(&endpoint, &kubeconfig_path, clusters.names().len(), args.sim_nodes, &args.sim_gpus);
    let router = clusters_router(clusters);
    listener::serve(listener, Some(config), router, limits, shutdown_signal()).await;
    let _ = stop_tx.send(true);
    syncers.stop_all();
    if let Some(task) = manager_task {
        let _ = task.await;
    }
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    stopped();
    Ok(())
}

/// Serve tenants by TLS server name `<tenant>.<domain>` too (whatever path a client sends),
/// where the serving certificate names them, and write their kubeconfigs so; a certificate saved
/// before it did keeps kubeconfigs to paths.
pub(crate) fn serve_tenants_by_name(
    certs: &Certificates,
    clusters: &Clusters,
    manager: &Manager,
    domain: &str,
) {
    if certs.covers(&tenant_server_name("tenant", domain)) {
        clusters.set_tenant_domain(domain);
        manager.name_tenants_in_kubeconfigs(domain);
    } else {
        tracing::warn!(
            "the saved serving certificate does not name tenants (*.{domain}): tenant \
             kubeconfigs reach their tenant by path only"
        );
    }
}

/// What in-cluster clients are given as the API's address for a listener on `addr`: on a
/// wildcard listener, this machine's loopback.
pub(crate) fn advertised(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// Client connections may not take the descriptors the stores need: those of the process, and
/// those of the root's store and of every tenant's store served. A new tenant is served only
/// while the listener's reckoning leaves room for it: its store's reserve, beside the stores'
/// reserves and the connections open now. Otherwise it goes Failed with the reason, before any
/// connection or store would fail, and the tenants served keep working.
pub(crate) fn descriptors(
    limits: &mut listener::Limits,
    clusters: &Arc<Clusters>,
    manager: &Manager,
) {
    let stores = clusters.clone();
    limits.fd_reserve =
        FdReserve::new(FD_RESERVE_BASE, FD_RESERVE_PER_STORE, move || 1 + stores.open_count());
    let (stores, gate) = (clusters.clone(), limits.gate.clone());
    let in_use = move || {
        let nofile = rlimit::getrlimit(rlimit::Resource::NOFILE)?.0;
        let stores = u64::try_from(1 + stores.open_count()).unwrap_or(u64::MAX);
        let connections = u64::try_from(gate.open()).unwrap_or(u64::MAX);
        Ok((FD_RESERVE_PER_STORE.saturating_mul(stores).saturating_add(connections), nofile))
    };
    manager.set_descriptors(Descriptors::counted(
        FD_RESERVE_BASE,
        FD_RESERVE_PER_STORE,
        Arc::new(in_use),
    ));
}

/// The client of the host's service account `carrel/<name>`, allowed `rules`.
fn component_client(
    host: &Arc<Server>,
    data: &std::path::Path,
    name: &str,
    rules: Vec<serde_json::Value>,
) -> anyhow::Result<kube::Client> {
    let signer = Signer::load_or_generate(&data.join("pki")).context("the host's token key")?;
    let account = ServiceAccount {
        namespace: carrel_tenants::service_account::NAMESPACE.to_owned(),
        name: name.to_owned(),
        rules,
    };
    local_client::service_account_client(host.clone(), &account, signer, HOST_ISSUER)
        .with_context(|| format!("the {name}'s client of the host"))
}

/// Who the host's admin kubeconfig authenticates as (its certificate's CN and O), and so who the
/// in-process clients of the host act as.
fn host_admin() -> UserInfo {
    UserInfo::new(tls::ADMIN_USER, [tls::ADMIN_GROUP]).with_authenticated_group()
}

/// Create `name` on the host if it is missing.
fn ensure_namespace(host: &Api, name: &str) -> anyhow::Result<()> {
    let rt =
        carrel_apiserver::resource::built_in("", "namespaces").context("namespaces are served")?;
    let body = serde_json::json!({"metadata": {"name": name}});
    match host.create(&Target { rt, namespace: None }, body, &Write::by("carrel", false)) {
        Ok(_) => Ok(()),
        Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("creating namespace {name}: {e}")),
    }
}

pub(crate) async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

/// Users and scripts read where Carrel is from these lines.
#[allow(clippy::print_stdout)]
fn announce(
    endpoint: &str,
    kubeconfig: &std::path::Path,
    tenants: usize,
    sim_nodes: u32,
    sim_gpus: &str,
) {
    println!("listening on {endpoint}");
    println!("simulated GPU nodes: {sim_nodes} × {sim_gpus}");
    println!("host kubeconfig: {}", kubeconfig.display());
    println!("tenants resumed: {tenants}");
    println!("try: kubectl --kubeconfig {} get tenants", kubeconfig.display());
}

#[allow(clippy::print_stdout)]
fn stopped() {
    println!("stopped");
}
