//! What `carrel up` runs beside each tenant's API: its controllers (`carrel_controllers`), its
//! cluster DNS ([`crate::dns`]), its syncer, the watch that gives a pod's room
//! in the intake window back once the syncer has taken it up ([`carrel_syncer::taken_up`]), and
//! the pod logs, pod streams and resource metrics the tenant reads through the host.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use kube::Api;
use parking_lot::Mutex;
use serde_json::Value;

use carrel_apiserver::http::Clusters;
use carrel_apiserver::intake::PodIntake;
use carrel_apiserver::registry::core::pods::subresources::{
    container_of, LogOptions, LogStream, PodLogs,
};
use carrel_apiserver::tenant::types::{allowed_tolerations, gpu_quota};
use carrel_apiserver::{ApiError, ApiResult, Server};
use carrel_sim::{LogLine, LogStore};
use carrel_syncer::{host_names, taken_up, ClusterDns, Config, HostWatch, Syncer};
use carrel_tenants::{host_namespace, TenantHooks};

use crate::dns::TenantDns;
use crate::heap::Trim;
use crate::metrics::TenantMetrics;
use crate::pod_streams::TenantPodStreams;
use crate::wakes::Wakes;

/// One syncer per served tenant, and tenant pod logs read from the host.
pub struct Syncers {
    host: kube::Client,
    /// The host side every tenant's syncer shares: one watch per host kind.
    host_watch: HostWatch,
    /// The window tenants' new pods wait for, when there is one.
    intake: Option<Arc<PodIntake>>,
    handle: tokio::runtime::Handle,
    ca_pem: Option<String>,
    /// Where tenants' workloads reach their API (the listener), when it is known.
    tenant_api: Option<(String, u16)>,
    /// The RuntimeClass of host pods that hold MIG devices, when one is named.
    gpu_runtime_class: Option<String>,
    /// Where host pods reach their tenant's DNS.
    cluster_dns: ClusterDns,
    resync: Duration,
    /// False when syncers run apart (`carrel up --no-syncers`): tenants get pod logs only.
    start: bool,
    running: Mutex<HashMap<String, Running>>,
    /// Gives what closed tenants freed back to the system.
    trim: Arc<Trim>,
    /// Opens closed tenants again when their controllers are due.
    wakes: Arc<Wakes>,
    /// The tenants' cluster DNS, where it is served.
    dns: Option<Arc<TenantDns>>,
}

/// A task that ends with its owner.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Running {
    syncer: Arc<Mutex<Option<Syncer>>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl std::fmt::Debug for Syncers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running: Vec<String> = self.running.lock().keys().cloned().collect();
        f.debug_struct("Syncers").field("start", &self.start).field("running", &running).finish()
    }
}

impl Syncers {
    /// Syncers that reach the host with `host`, spawned on `handle`; `ca_pem` is the CA workloads
    /// trust for their tenant API. With `intake`, each tenant's new pods wait for room in it
    /// before they are stored, and the room goes back as its syncer takes them up
    /// ([`carrel_syncer::taken_up`]).
    pub fn new(
        host: kube::Client,
        handle: tokio::runtime::Handle,
        ca_pem: Option<String>,
        resync: Duration,
        intake: Option<Arc<PodIntake>>,
    ) -> Syncers {
        let host_watch = HostWatch::new(host.clone());
        Syncers {
            host: host.clone(),
            host_watch,
            intake,
            ca_pem,
            tenant_api: None,
            gpu_runtime_class: None,
            cluster_dns: ClusterDns::TenantService,
            resync,
            start: true,
            running: Mutex::default(),
            trim: Trim::new(handle.clone()),
            wakes: Wakes::new(host.clone(), handle.clone()),
            handle,
            dns: None,
        }
    }

    /// Have tenants' workloads reach their API at `(host, port)` (the listener's address):
    /// their host pods' `KUBERNETES_SERVICE_HOST` and its family name it.
    pub fn with_tenant_api(self, host: String, port: u16) -> Syncers {
        Syncers { tenant_api: Some((host, port)), ..self }
    }

    /// Host pods reach their tenant's DNS as `cluster_dns` says (by default at the tenant's
    /// `kube-dns` address).
    pub fn with_cluster_dns(self, cluster_dns: ClusterDns) -> Syncers {
        Syncers { cluster_dns, ..self }
    }

    /// Run tenants' host pods that hold MIG devices with RuntimeClass `class`.
    pub fn with_gpu_runtime_class(self, class: Option<String>) -> Syncers {
        Syncers { gpu_runtime_class: class, ..self }
    }

    /// Serve each tenant's cluster DNS with `dns`.
    pub fn with_dns(self, dns: Arc<TenantDns>) -> Syncers {
        Syncers { dns: Some(dns), ..self }
    }

    /// Start no syncers, for syncers run as processes of their own: tenants still read their
    /// pods' logs from the host.
    pub fn logs_only(self) -> Syncers {
        Syncers { start: false, ..self }
    }

    /// Open an idle tenant when its controllers are due ([`Wakes`]), and (whose syncer then
    /// starts) when one of its host pods or claims changes: its syncer has something to do.
    pub fn open_idle_tenants_when_due(&self, clusters: Arc<Clusters>) {
        self.wakes.start(clusters.clone());
        if !self.start {
            return;
        }
        let handle = self.handle.clone();
        self.host_watch.on_unheard(move |tenant| {
            let (clusters, tenant) = (clusters.clone(), tenant.to_owned());
            handle.spawn(async move {
                if let Some(Err(e)) = clusters.wake(&tenant).await {
                    tracing::warn!(%tenant, error = %e, "opening an idle tenant for a host change");
                }
            });
        });
    }

    /// Stop every syncer.
    pub fn stop_all(&self) {
        for (_, running) in self.running.lock().drain() {
            let _ = running.stop.send(true);
        }
    }
}

impl TenantHooks for Syncers {
    fn serving(&self, tenant: &str, server: &Arc<Server>, object: &Value) {
        server.set_pod_logs(Arc::new(TenantPodLogs {
            host: self.host.clone(),
            host_namespace: host_namespace(tenant),
        }));
        server.set_pod_streams(Arc::new(TenantPodStreams {
            host: self.host.clone(),
            host_namespace: host_namespace(tenant),
        }));
        // `kubectl top`: the host's metrics of its pods, in its own names.
        server.set_metrics(Arc::new(TenantMetrics::new(
            self.host.clone(),
            host_namespace(tenant),
            server.api(),
        )));
        let quota = gpu_quota(object);
        let tolerations = allowed_tolerations(object);
        let mut running = self.running.lock();
        if let Some(r) = running.get(tenant) {
            if let Some(syncer) = r.syncer.lock().as_ref() {
                syncer.set_quota(quota);
                syncer.set_allowed_tolerations(tolerations);
            }
            return;
        }
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let slot = Arc::new(Mutex::new(None));
        running.insert(tenant.to_owned(), Running { syncer: slot.clone(), stop });
        // The tenant's API in this process, as its admin: no socket, no kubeconfig.
        let client = carrel_tenants::admin_client(server.clone());
        // Its controllers (workloads, garbage collection), as long as it is open.
        let options = carrel_controllers::Options { root_ca: self.ca_pem.clone() };
        let controllers = carrel_controllers::run_with(client.clone(), options, stop_rx.clone());
        let recorded = object.pointer("/status/nextWakeTime").and_then(Value::as_str);
        self.wakes.serving(tenant, recorded.map(str::to_owned));
        let (wakes, name) = (self.wakes.clone(), tenant.to_owned());
        let controllers = self.handle.spawn(async move {
            let next = controllers.await;
            wakes.stopped(&name, next).await;
        });
        // Its names, as long as it is open.
        if let Some(dns) = &self.dns {
            dns.follow(tenant, client.clone(), stop_rx.clone());
        }
        if !self.start {
            return;
        }
        let config = Config {
            tenant: tenant.to_owned(),
            host_namespace: host_namespace(tenant),
            gpu_quota: quota,
            tenant_ca_pem: self.ca_pem.clone(),
            tenant_api: self.tenant_api.clone(),
            gpu_runtime_class: self.gpu_runtime_class.clone(),
            cluster_dns: self.cluster_dns.clone(),
            resync: self.resync,
        };
        if let Some(intake) = &self.intake {
            server.set_pod_intake(intake.clone(), tenant);
        }
        let intake = self.intake.clone();
        let host_watch = self.host_watch.clone();
        self.handle.spawn(async move {
            let name = config.tenant.clone();
            let taken_up = intake.map(|intake| {
                let tenant = name.clone();
                let watch = taken_up::watch_shared(
                    name.clone(),
                    client.clone(),
                    host_watch.clone(),
                    config.host_namespace.clone(),
                    move |namespace, pod| intake.settled(&tenant, namespace, pod),
                );
                AbortOnDrop(tokio::spawn(watch))
            });
            let syncer = Syncer::new(client, &host_watch, config);
            syncer.set_allowed_tolerations(tolerations);
            *slot.lock() = Some(syncer.clone());
            tracing::info!(tenant = %name, "syncer started");
            syncer.run(stop_rx).await;
            // Its share of the host side goes now: a host change for it from here on is
            // unheard, and opens the tenant again.
            slot.lock().take();
            drop((syncer, taken_up));
            let _ = controllers.await;
            tracing::info!(tenant = %name, "syncer stopped");
        });
    }

    fn gone(&self, tenant: &str) {
        self.wakes.gone(tenant);
        if let Some(dns) = &self.dns {
            dns.gone(tenant);
        }
        self.idle(tenant);
        if let Some(intake) = &self.intake {
            intake.forget(tenant);
        }
    }

    /// Its syncer stops, and starts again with its cluster (a change on the host side for it
    /// opens it: see [`Syncers::open_idle_tenants_when_due`]).
    fn idle(&self, tenant: &str) {
        if let Some(r) = self.running.lock().remove(tenant) {
            let _ = r.stop.send(true);
        }
        self.trim.closed();
    }

    fn dns_endpoint(&self, tenant: &str, object: &Value) -> Option<String> {
        let recorded = object.pointer("/status/dnsEndpoint").and_then(Value::as_str);
        Some(self.dns.as_ref()?.endpoint(tenant, recorded)?.to_string())
    }
}

/// A tenant pod's log is its host pod's log.
struct TenantPodLogs {
    host: kube::Client,
    host_namespace: String,
}

impl std::fmt::Debug for TenantPodLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPodLogs").field("host_namespace", &self.host_namespace).finish()
    }
}

impl PodLogs for TenantPodLogs {
    fn logs(
        &self,
        namespace: &str,
        pod: &Value,
        options: LogOptions,
    ) -> BoxFuture<'static, ApiResult<LogStream>> {
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let host_name = host_names::host_pod(namespace, name);
        let api: Api<Pod> = Api::namespaced(self.host.clone(), &self.host_namespace);
        Box::pin(async move {
            let params = LogParams {
                container: options.container.clone(),
                follow: options.follow,
                previous: options.previous,
                timestamps: options.timestamps,
                tail_lines: options.tail_lines.and_then(|n| i64::try_from(n).ok()),
                since_seconds: options.since_seconds.and_then(|n| i64::try_from(n).ok()),
                limit_bytes: options.limit_bytes.and_then(|n| i64::try_from(n).ok()),
                ..LogParams::default()
            };
            let reader = api.log_stream(&host_name, &params).await.map_err(|e| match e {
                kube::Error::Api(s) if s.code == 404 => {
                    ApiError::bad_request("the pod has not started on a node yet")
                }
                kube::Error::Api(s) if s.code == 400 => ApiError::bad_request(s.message),
                other => ApiError::unavailable(format!("reading the pod's log: {other}")),
            })?;
            Ok(read_chunks(reader))
        })
    }
}

/// An `AsyncRead` as a stream of byte chunks.
pub fn read_chunks(reader: impl futures::AsyncRead + Send + Unpin + 'static) -> LogStream {
    futures::stream::unfold(Some(reader), |state| async move {
        let mut reader = state?;
        let mut buf = vec![0u8; 8192];
        match reader.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), Some(reader)))
            }
            Err(e) => Some((Err(e), None)),
        }
    })
    .boxed()
}

/// Host pod logs from the simulated kubelets, by the node the pod runs on.
#[derive(Debug)]
pub struct SimPodLogs {
    nodes: BTreeMap<String, LogStore>,
}

impl SimPodLogs {
    /// The logs of these nodes' simulated containers.
    pub fn new(nodes: BTreeMap<String, LogStore>) -> SimPodLogs {
        SimPodLogs { nodes }
    }
}

/// Lines as the kubelet serves them: `tailLines`, `sinceSeconds` and `timestamps` applied.
fn render(lines: &[LogLine], options: &LogOptions) -> String {
    let since = options.since_seconds.map(|s| {
        chrono::Utc::now() - chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000))
    });
    let kept: Vec<&LogLine> = lines.iter().filter(|l| since.is_none_or(|t| l.time >= t)).collect();
    let start = match options.tail_lines {
        Some(n) => kept.len().saturating_sub(usize::try_from(n).unwrap_or(usize::MAX)),
        None => 0,
    };
    kept[start..].iter().map(|l| line_text(l, options) + "\n").collect()
}

fn line_text(line: &LogLine, options: &LogOptions) -> String {
    if options.timestamps {
        line.with_timestamp()
    } else {
        line.text.clone()
    }
}

impl PodLogs for SimPodLogs {
    fn logs(
        &self,
        namespace: &str,
        pod: &Value,
        options: LogOptions,
    ) -> BoxFuture<'static, ApiResult<LogStream>> {
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
        let answer = (|| {
            let container = container_of(pod, &options)?;
            let Some(store) = self.nodes.get(node) else {
                return Err(ApiError::bad_request(format!(
                    "pod {name} does not have a host assigned"
                )));
            };
            let not_started = || {
                ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                ))
            };
            let limit = options.limit_bytes.and_then(|n| usize::try_from(n).ok());
            if !options.follow {
                let lines =
                    store.lines(namespace, name, Some(&container)).ok_or_else(not_started)?;
                let mut text = render(&lines, &options).into_bytes();
                if let Some(limit) = limit {
                    text.truncate(limit);
                }
                let stream: LogStream =
                    futures::stream::once(async move { Ok(bytes::Bytes::from(text)) }).boxed();
                return Ok(stream);
            }
            let (lines, receiver) =
                store.follow(namespace, name, Some(&container)).ok_or_else(not_started)?;
            let first = render(&lines, &options);
            let options2 = options.clone();
            let rest = futures::stream::unfold(receiver, move |mut rx| {
                let options = options2.clone();
                async move {
                    loop {
                        match rx.recv().await {
                            Ok(line) => {
                                let text = line_text(&line, &options) + "\n";
                                return Some((Ok(bytes::Bytes::from(text)), rx));
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                }
            });
            let stream =
                futures::stream::once(async move { Ok(bytes::Bytes::from(first)) }).chain(rest);
            Ok(match limit {
                Some(limit) => limit_stream(stream.boxed(), limit),
                None => stream.boxed(),
            })
        })();
        Box::pin(async move { answer })
    }
}

/// At most `limit` bytes of a stream.
fn limit_stream(stream: LogStream, limit: usize) -> LogStream {
    futures::stream::unfold((stream, limit), |(mut s, left)| async move {
        if left == 0 {
            return None;
        }
        match s.next().await? {
            Ok(mut chunk) => {
                if chunk.len() > left {
                    chunk.truncate(left);
                }
                let left = left - chunk.len();
                Some((Ok(chunk), (s, left)))
            }
            Err(e) => Some((Err(e), (s, 0))),
        }
    })
    .boxed()
}
