//! The manager: one reconcile brings a tenant's cluster in line with its `Tenant` object, and
//! [`Manager::run`] runs it as a controller (`kube_runtime`'s `Controller`) over the host's
//! Tenants and GPU claim Leases.
//!
//! A finalizer holds a deleted tenant until its API is no longer served, its data is gone, its
//! claim Leases are released and the host namespace it owns is deleted. A tenant whose TTL has
//! passed is deleted: its reconcile is requeued for its expiry time. Everything is derived from
//! the `Tenant` objects and the data directory, so a restarted manager ([`Manager::resume`])
//! serves every tenant again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, reflector, ObjectRef};
use kube::runtime::utils::{PredicateConfig, WatchStreamExt};
use kube::runtime::watcher::{self, watcher};
use parking_lot::Mutex;
use serde_json::{json, Value};

use carrel_apiserver::admission::{Level, TenantAdmission, TenantPolicy};
use carrel_apiserver::auth::CredentialError;
use carrel_apiserver::http::{Clusters, Idle, Wake};
use carrel_apiserver::object::{finalizers, is_deleting, meta_str};
use carrel_apiserver::tenant::descriptors::{Descriptors, NoRoom, REASON as NO_DESCRIPTORS};
use carrel_apiserver::tenant::types::{gpu_quota, store_quota, Tenant, GROUP};
use carrel_apiserver::{ApiError, Server};
use carrel_gpu::claim::LABEL_TENANT;
use carrel_gpu::leases::{self, LeaseError, Selection};
use carrel_machinery::tenancy::host_namespace;

use crate::host::{self, code, Host};
use crate::host_namespace::{self as namespace, NOT_OWNED};
use crate::identity;
use crate::replicas::{ReplicaError, Replicas};
use crate::tenant_cluster::{self, TenantDir};
use crate::tenant_status::{self, expires_at, ready_reason_is, Observed};

mod replica;

use replica::{move_target, replica_of};

/// The finalizer that holds a deleted tenant until its cluster is torn down.
pub const FINALIZER: &str = "carrel.dev/tenant";
/// Slices a tenant holds per MIG profile, as `status.gpuUsage` reports them.
type Usage = BTreeMap<String, i64>;

/// The field manager of the manager's writes.
pub const MANAGER: &str = "carrel-tenant-manager";

/// What can go wrong while reconciling a tenant.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The host API refused a read or a write, or could not be reached.
    #[error("host API: {0}")]
    Host(#[from] kube::Error),
    /// The host's claim Leases could not be read or deleted.
    #[error("{0}")]
    Leases(#[from] LeaseError),
    /// The tenant's API could not be made over its store.
    #[error("tenant API: {0}")]
    Api(#[from] ApiError),
    /// The tenant's store could not be opened.
    #[error("tenant {tenant}: opening its store: {source}")]
    Store {
        /// The tenant.
        tenant: String,
        /// Why.
        source: carrel_store::Error,
    },
    /// The tenant's CA, signing key or admin credential could not be made or read.
    #[error("tenant {tenant}: credentials: {source}")]
    Credentials {
        /// The tenant.
        tenant: String,
        /// Why.
        source: CredentialError,
    },
    /// The tenant's data directory could not be created or removed.
    #[error("tenant {tenant}: {path}: {source}")]
    Io {
        /// The tenant.
        tenant: String,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Serving the tenant would take the process past its open-file limit.
    #[error("tenant {tenant}: {source}")]
    NoDescriptors {
        /// The tenant.
        tenant: String,
        /// The count.
        source: NoRoom,
    },
    /// The tenant is gone, or being deleted: its cluster is not opened again.
    #[error("tenant {tenant} is gone")]
    Gone {
        /// The tenant.
        tenant: String,
    },
    /// The tenant's host namespace exists and was not created for this tenant.
    #[error("tenant {tenant}: host namespace {namespace} exists and does not record this tenant's UID: it belongs to something else")]
    NotOwned {
        /// The tenant.
        tenant: String,
        /// The host namespace.
        namespace: String,
    },
    /// The tenant could not be moved to another replica.
    #[error("{0}")]
    Replica(#[from] ReplicaError),
    /// A blocking step (opening a store, making credentials, removing a directory) did not
    /// finish.
    #[error("a blocking task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// What else runs for each served tenant (its syncer, in `carrel up`).
pub trait TenantHooks: Send + Sync + std::fmt::Debug {
    /// The tenant's cluster is served, with this `Tenant` object; called on every reconcile.
    fn serving(&self, tenant: &str, server: &Arc<Server>, object: &Value);
    /// The tenant is no longer served.
    fn gone(&self, tenant: &str);
    /// The tenant's cluster was closed while idle: stop what runs for it until `serving` is
    /// called again, when its next request opens it.
    fn idle(&self, tenant: &str);
    /// Where the tenant's cluster DNS answers (`host:port`), started if it is not running yet;
    /// `object` is the `Tenant`, whose `status.dnsEndpoint` names the address it had before.
    /// `None` where no DNS is served for it.
    fn dns_endpoint(&self, _tenant: &str, _object: &Value) -> Option<String> {
        None
    }
}

/// When a tenant is to be reconciled again, besides on a change to it or its claims.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// Only on a change.
    OnChange,
    /// Soon: it is not served for a reason that may pass (no room, a host namespace not its own).
    Retry,
    /// At its expiry.
    At(chrono::DateTime<chrono::Utc>),
}

/// Reconciles tenants.
#[derive(Debug)]
pub struct Manager {
    host: Host,
    clusters: Arc<Clusters>,
    data_dir: PathBuf,
    endpoint: String,
    server_ca_pem: Option<String>,
    /// Set when kubeconfigs name their tenant's TLS server name.
    by_name: OnceLock<String>,
    admissions: Mutex<HashMap<String, Arc<TenantAdmission>>>,
    hooks: OnceLock<Arc<dyn TenantHooks>>,
    /// Room for new tenants in the open-file limit; unchecked until set.
    descriptors: OnceLock<Descriptors>,
    /// One reconcile of a tenant at a time: tenants are reconciled concurrently, each under the
    /// lock its name hashes to.
    reconciling: Box<[tokio::sync::Mutex<()>]>,
    /// How many tenants' clusters are opened at once: the room in the open-file limit is
    /// counted from the stores open, so the stores being opened, uncounted, stay few (their
    /// descriptors come out of the process's own reserve).
    opening: tokio::sync::Semaphore,
    /// Opening an idle tenant (read) and tearing one down (write) exclude each other.
    lifecycle: tokio::sync::RwLock<()>,
    /// The time TTLs are measured against.
    pub(crate) clock: fn() -> chrono::DateTime<chrono::Utc>,
    /// The Service network tenants' Services get addresses of: the host's, so that a host
    /// Service can hold its tenant Service's cluster IP.
    service_network: OnceLock<carrel_apiserver::ServiceNetwork>,
    /// Who holds the hosts tenants' Ingresses serve: what their admissions refuse others.
    host_claims: Arc<HostClaims>,
    /// The writer of `host_claims`' cache, until [`Manager::run`] starts its watch.
    host_claims_writer: Mutex<Option<reflector::store::Writer<Lease>>>,
    /// Set where several replicas serve tenants between them: this one serves only its own.
    replicas: OnceLock<Arc<Replicas>>,
}

/// The host-name claims of every tenant (Leases labelled
/// [`carrel_machinery::tenancy::LABEL_HOSTNAME_HOLDER`], taken by the syncers), cached from one
/// watch: a tenant's admission refuses an Ingress for a host another tenant holds at once,
/// rather than leaving the syncer to refuse to carry it.
#[derive(Debug)]
struct HostClaims(reflector::Store<Lease>);

impl carrel_apiserver::admission::HostHolders for HostClaims {
    fn holder(&self, host: &str) -> Option<String> {
        use carrel_machinery::tenancy::{ANNOTATION_HOSTNAME, LABEL_HOSTNAME_HOLDER};
        self.0.state().iter().find_map(|lease| {
            let claimed = lease.metadata.annotations.as_ref()?.get(ANNOTATION_HOSTNAME)?;
            if claimed != host {
                return None;
            }
            lease.metadata.labels.as_ref()?.get(LABEL_HOSTNAME_HOLDER).cloned()
        })
    }
}

impl Manager {
    /// A manager of the tenants of the host reached through `host`, serving them in `clusters`,
    /// keeping their data under `data_dir/tenants`; `endpoint` is the listener's URL
    /// (`https://127.0.0.1:6443`). With the listener's CA (`server_ca_pem`), every tenant gets
    /// its own CA and service-account key, its API authenticates and authorizes, and its admin
    /// kubeconfig carries a `system:masters` certificate from its CA; without (plain HTTP, in
    /// tests) tenants are served open.
    pub fn new(
        host: kube::Client,
        clusters: Arc<Clusters>,
        data_dir: &Path,
        endpoint: &str,
        server_ca_pem: Option<String>,
    ) -> Manager {
        let (claims, claims_writer) = reflector::store();
        Manager {
            host: Host::new(host),
            clusters,
            data_dir: data_dir.join("tenants"),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            server_ca_pem,
            by_name: OnceLock::new(),
            admissions: Mutex::default(),
            hooks: OnceLock::new(),
            descriptors: OnceLock::new(),
            reconciling: (0..RECONCILE_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
            opening: tokio::sync::Semaphore::new(OPENING_AT_ONCE),
            lifecycle: tokio::sync::RwLock::new(()),
            clock: chrono::Utc::now,
            service_network: OnceLock::new(),
            host_claims: Arc::new(HostClaims(claims)),
            host_claims_writer: Mutex::new(Some(claims_writer)),
            replicas: OnceLock::new(),
        }
    }

    /// Give tenants' Services addresses of `network` (the host's `--service-cluster-ip-range`)
    /// rather than `10.96.0.0/12`. Only the first call has an effect; tenants opened before
    /// keep the network they were made with until opened again.
    pub fn set_service_network(&self, network: carrel_apiserver::ServiceNetwork) {
        let _ = self.service_network.set(network);
    }

    fn service_network(&self) -> carrel_apiserver::ServiceNetwork {
        self.service_network.get().cloned().unwrap_or_default()
    }

    /// Serve only the tenants whose `status.replica` names this replica of `replicas` (see
    /// [`crate::replicas`]), moving them away when asked. Only the first call has an effect.
    pub fn set_replicas(&self, replicas: Arc<Replicas>) {
        let _ = self.replicas.set(replicas);
    }

    /// Whether this manager serves `tenant`: every tenant, unless replicas share them.
    fn owns(&self, tenant: &Value) -> bool {
        match self.replicas.get() {
            Some(replicas) => replica_of(tenant) == Some(replicas.me()),
            None => true,
        }
    }

    /// Call `hooks` as tenants come and go. Only the first call has an effect.
    pub fn set_hooks(&self, hooks: Arc<dyn TenantHooks>) {
        let _ = self.hooks.set(hooks);
    }

    /// Serve a new tenant only while `descriptors` says one more fits (see
    /// [`carrel_apiserver::tenant::descriptors`]). Only the first call has an effect.
    pub fn set_descriptors(&self, descriptors: Descriptors) {
        let _ = self.descriptors.set(descriptors);
    }

    /// Close a tenant's cluster once no request has reached it for `after`, and open it again on
    /// its next request (see [`carrel_apiserver::http::clusters`]): an idle tenant then holds
    /// no store, no threads and nothing run for it (its [`TenantHooks::idle`]). Tenants whose
    /// data exists are then also mounted dormant when served again (a restart opens none).
    pub fn close_idle_tenants(self: &Arc<Self>, after: Duration) {
        let wake = Arc::new(Reopen(Arc::downgrade(self)));
        self.clusters.set_idle(Idle { after, wake });
    }

    /// The tenant's API URL.
    pub fn url(&self, name: &str) -> String {
        format!("{}/tenants/{name}", self.endpoint)
    }

    fn dir(&self, name: &str) -> TenantDir {
        TenantDir::new(&self.data_dir, name)
    }

    /// The tenant's admin kubeconfig: a `system:masters` certificate from its CA, kept in its
    /// data directory so that it is the same after a restart. Reads (and, the first time, makes)
    /// keys and files: blocks, so the manager itself runs it on the blocking pool.
    pub fn tenant_kubeconfig(&self, name: &str) -> Result<String, ManagerError> {
        let (url, pki) = (self.url(name), self.dir(name).pki());
        let endpoint = identity::Endpoint {
            url: &url,
            server_ca_pem: self.server_ca_pem.as_deref(),
            by_name: self.by_name.get().map(String::as_str),
        };
        identity::admin_kubeconfig(name, &endpoint, &pki)
            .map_err(|source| ManagerError::Credentials { tenant: name.to_owned(), source })
    }

    /// Write tenants' kubeconfigs with their TLS server name (`tls-server-name`,
    /// `<tenant>.<domain>`), for a listener whose certificate names them. Only the first call
    /// has an effect.
    pub fn name_tenants_in_kubeconfigs(&self, domain: &str) {
        let _ = self.by_name.set(domain.to_owned());
    }

    /// [`Manager::tenant_kubeconfig`] on the blocking pool.
    async fn admin_kubeconfig(&self, name: &str) -> Result<String, ManagerError> {
        let (tenant, url, pki) = (name.to_owned(), self.url(name), self.dir(name).pki());
        let server_ca = self.server_ca_pem.clone();
        let by_name = self.by_name.get().cloned();
        let made = tokio::task::spawn_blocking(move || {
            let endpoint = identity::Endpoint {
                url: &url,
                server_ca_pem: server_ca.as_deref(),
                by_name: by_name.as_deref(),
            };
            identity::admin_kubeconfig(&tenant, &endpoint, &pki)
        })
        .await?;
        made.map_err(|source| ManagerError::Credentials { tenant: name.to_owned(), source })
    }

    /// Stop serving a tenant: its cluster, its admission, its hooks.
    fn unserve(&self, name: &str) {
        self.clusters.remove(name);
        self.admissions.lock().remove(name);
        if let Some(hooks) = self.hooks.get() {
            hooks.gone(name);
        }
    }

    /// The tenant's pod rules, from its `Tenant` object.
    fn policy_of(tenant: &Value) -> TenantPolicy {
        let level = tenant
            .pointer("/spec/podSecurity")
            .and_then(Value::as_str)
            .and_then(Level::parse)
            .unwrap_or(Level::Baseline);
        TenantPolicy { level, gpu_quota: gpu_quota(tenant) }
    }

    /// Reconcile every tenant, and stop serving clusters whose tenant is gone: what a restarted
    /// manager does first.
    pub async fn resume(&self) -> Result<(), ManagerError> {
        let tenants = self.host.list(host::TENANTS, None).await?;
        let names: Vec<String> =
            tenants.iter().filter_map(|t| meta_str(t, "name").map(str::to_owned)).collect();
        for tenant in &tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            let typed = serde_json::from_value::<Tenant>(tenant.clone());
            if typed.is_ok_and(|t| self.elsewhere(&t)) {
                continue;
            }
            if let Err(e) = self.reconcile(name).await {
                tracing::warn!(tenant = %name, error = %e, "reconciling a tenant failed");
            }
        }
        for served in self.clusters.names() {
            if !names.contains(&served) {
                self.unserve(&served);
            }
        }
        Ok(())
    }

    /// Bring one tenant's cluster in line with its `Tenant` object.
    pub async fn reconcile(&self, name: &str) -> Result<(), ManagerError> {
        self.reconcile_next(name).await.map(|_| ())
    }

    /// [`Manager::reconcile`], and when to look again.
    async fn reconcile_next(&self, name: &str) -> Result<Next, ManagerError> {
        let _one = self.reconciling[lock_of(name)].lock().await;
        let Some(tenant) = self.host.get_opt(host::TENANTS, name).await? else {
            self.unserve(name);
            return Ok(Next::OnChange);
        };
        if let Some(replicas) = self.replicas.get() {
            if let Some(next) = self.replica_step(replicas, name, &tenant).await? {
                return Ok(next);
            }
        }
        if is_deleting(&tenant) {
            self.tear_down(name, tenant).await?;
            return Ok(Next::OnChange);
        }
        let expiry = expires_at(&tenant);
        if let Some(expiry) = expiry {
            if expiry <= (self.clock)() {
                tracing::info!(tenant = %name, "the tenant's TTL has passed: deleting it");
                self.host.delete(host::TENANTS, name, None).await?;
                return Ok(Next::OnChange);
            }
        }
        // A new tenant has no status until it is served (or fails): a status of its own while
        // it is set up would be one more durable write before it is ready.
        let tenant = self.ensure_finalizer(name, tenant).await?;
        match namespace::own(&self.host, name, &tenant).await {
            Ok(()) => {}
            Err(e @ ManagerError::NotOwned { .. }) => {
                // Never served into a namespace that is not the tenant's.
                self.unserve(name);
                tracing::warn!(tenant = %name, error = %e, "not serving the tenant");
                self.set_status(name, &tenant, "Failed", NOT_OWNED, &e.to_string()).await?;
                return Ok(Next::Retry);
            }
            Err(e) => return Err(e),
        }
        match self.serve(name, &tenant).await {
            Ok(()) => {}
            Err(ManagerError::NoDescriptors { source, .. }) => {
                // Not an error of the manager's: it looks again soon.
                tracing::warn!(tenant = %name, reason = %source, "not serving the tenant");
                let message = source.to_string();
                self.set_status(name, &tenant, "Failed", NO_DESCRIPTORS, &message).await?;
                return Ok(Next::Retry);
            }
            Err(e) => {
                self.set_status(name, &tenant, "Failed", "ServeFailed", &e.to_string()).await?;
                return Err(e);
            }
        }
        let kubeconfig = self.admin_kubeconfig(name).await?;
        namespace::keep_kubeconfig(&self.host, name, &kubeconfig).await?;
        let admission = self.admissions.lock().get(name).cloned();
        if let Some(admission) = admission {
            admission.set(Self::policy_of(&tenant));
        }
        if let Some(server) = self.clusters.tenant(name) {
            // The spec may have changed the bound on what the tenant stores.
            server.api().store().set_quota(store_quota(&tenant));
        }
        let tenant = self
            .set_status(name, &tenant, "Ready", "Serving", "the tenant's API is served")
            .await?;
        if let (Some(hooks), Some(server)) = (self.hooks.get(), self.clusters.tenant(name)) {
            hooks.serving(name, &server, &tenant);
        }
        if let Some(replicas) = self.replicas.get() {
            if move_target(&tenant) == Some(replicas.me()) {
                self.moved_in(name).await?;
            }
        }
        Ok(expiry.map_or(Next::OnChange, Next::At))
    }

    /// One pass over every tenant, from one list: delete those whose TTL has passed, look again
    /// at those not served for a reason that may have passed, report changes in the stores'
    /// health, and write every tenant's GPU usage. [`Manager::run`] does each of these as it
    /// is due instead; this is the same work done at once.
    pub async fn tick(&self) -> Result<(), ManagerError> {
        let tenants = self.host.list(host::TENANTS, None).await?;
        let now = (self.clock)();
        for tenant in &tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            if !is_deleting(tenant) && expires_at(tenant).is_some_and(|e| e <= now) {
                self.reconcile(name).await?;
            } else if ready_reason_is(tenant, NO_DESCRIPTORS) {
                // Room may have been made since (tenants deleted, the limit raised).
                if let Err(e) = self.reconcile(name).await {
                    tracing::debug!(tenant = %name, error = %e, "the tenant is still not served");
                }
            } else if ready_reason_is(tenant, NOT_OWNED) {
                // Its host namespace may have gone since (one being deleted, say).
                if let Err(e) = self.reconcile(name).await {
                    tracing::debug!(tenant = %name, error = %e, "the host namespace is still not the tenant's");
                }
            }
        }
        for tenant in &tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            if !is_deleting(tenant) && self.store_health_changed(name, tenant) {
                self.report_store_health(name).await;
            }
        }
        let mut usage = leases::usage(self.host.client()).await?;
        for tenant in tenants.iter().filter(|t| self.owns(t)) {
            let Some(name) = meta_str(tenant, "name") else { continue };
            self.write_usage(name, tenant, usage.remove(name).unwrap_or_default()).await?;
        }
        Ok(())
    }

    /// The `StoreHealthy` condition of a served tenant's store; `None` when it is not served.
    /// A tenant closed while idle keeps the condition its store had when it was last open.
    fn store_condition(&self, name: &str, tenant: &Value) -> Option<Value> {
        match self.clusters.tenant(name) {
            Some(server) => {
                Some(tenant_status::store_condition(&server.api().store_health(), tenant))
            }
            None if self.clusters.contains(name) => {
                tenant_status::condition(tenant, tenant_status::STORE_CONDITION).cloned()
            }
            None => None,
        }
    }

    /// Whether a served tenant's store's health is not what its status reports.
    fn store_health_changed(&self, name: &str, tenant: &Value) -> bool {
        self.store_condition(name, tenant)
            .is_some_and(|condition| tenant_status::store_condition_changed(tenant, &condition))
    }

    async fn report_store_health(&self, name: &str) {
        if let Err(e) = self.reconcile(name).await {
            tracing::warn!(tenant = %name, error = %e, "reporting the tenant's store health failed");
        }
    }

    /// Write the tenant's `status.gpuUsage` as `wanted` if it says otherwise.
    async fn write_usage(
        &self,
        name: &str,
        tenant: &Value,
        wanted: Usage,
    ) -> Result<(), ManagerError> {
        if is_deleting(tenant) || tenant.get("status").is_none() {
            return Ok(());
        }
        let current: Usage = tenant
            .pointer("/status/gpuUsage")
            .and_then(|u| serde_json::from_value(u.clone()).ok())
            .unwrap_or_default();
        if current == wanted {
            return Ok(());
        }
        let mut status = tenant["status"].clone();
        if wanted.is_empty() {
            if let Some(o) = status.as_object_mut() {
                o.remove("gpuUsage");
            }
        } else {
            status["gpuUsage"] = json!(wanted);
        }
        match self.write_status(name, tenant, status).await {
            Ok(_) => Ok(()),
            Err(ManagerError::Host(e)) if matches!(code(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Bring one tenant's GPU usage in line with the claims in the host.
    async fn refresh_usage(&self, name: &str) -> Result<(), ManagerError> {
        let Some(tenant) = self.host.get_opt(host::TENANTS, name).await? else { return Ok(()) };
        if !self.owns(&tenant) {
            return Ok(());
        }
        let claims = leases::list(self.host.client(), Selection::Tenant(name)).await?;
        let usage = leases::usage_by_tenant(claims).remove(name).unwrap_or_default();
        self.write_usage(name, &tenant, usage).await
    }

    async fn ensure_finalizer(&self, name: &str, tenant: Value) -> Result<Value, ManagerError> {
        if finalizers(&tenant).iter().any(|f| f == FINALIZER) {
            return Ok(tenant);
        }
        let mut updated = tenant;
        let mut list = updated["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        list.push(json!(FINALIZER));
        updated["metadata"]["finalizers"] = Value::Array(list);
        Ok(self.host.replace(host::TENANTS, name, &updated).await?)
    }

    /// Serve the tenant's API, opening (or creating) its store, bounded by the tenant's limits,
    /// and its credentials at the same time (see [`tenant_cluster::open`]); it is served
    /// as soon as both are ready.
    async fn serve(&self, name: &str, tenant: &Value) -> Result<(), ManagerError> {
        if self.clusters.contains(name) {
            return Ok(());
        }
        let dir = self.dir(name);
        if dir.is_made() && self.clusters.insert_dormant(name) {
            tracing::info!(tenant = %name, "serving the tenant's API, opened by its next request");
            return Ok(());
        }
        let opened = {
            let _turn = self.opening.acquire().await;
            self.room_for_one(name)?;
            let (quota, secured) = (store_quota(tenant), self.server_ca_pem.is_some());
            tenant_cluster::open(dir, quota, secured, self.service_network()).await?
        };
        // The tenant's pod rules hold from its first request, not only from the end of this
        // reconcile (a restarted manager serves tenants whose clients are already connected).
        opened.admission.set(Self::policy_of(tenant));
        opened.admission.set_hosts(name, self.host_claims.clone());
        self.admissions.lock().insert(name.to_owned(), opened.admission);
        self.clusters.insert(name, opened.server);
        tracing::info!(tenant = %name, "serving the tenant's API");
        Ok(())
    }

    async fn set_status(
        &self,
        name: &str,
        tenant: &Value,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<Value, ManagerError> {
        let observed = Observed {
            phase,
            reason,
            message,
            endpoint: self.url(name),
            host_namespace: host_namespace(name),
            ca_bundle: self.server_ca_pem.as_deref(),
            store: self.store_condition(name, tenant),
            // A tenant that is not served has no DNS of its own either.
            dns_endpoint: match (phase, self.hooks.get()) {
                ("Ready", Some(hooks)) => hooks.dns_endpoint(name, tenant),
                _ => None,
            },
        };
        let status = tenant_status::status(tenant, observed);
        if tenant.get("status") == Some(&status) {
            return Ok(tenant.clone());
        }
        self.write_status(name, tenant, status).await
    }

    /// Write a tenant's status through its status subresource; the tenant as stored.
    async fn write_status(
        &self,
        name: &str,
        tenant: &Value,
        status: Value,
    ) -> Result<Value, ManagerError> {
        let mut updated = tenant.clone();
        updated["status"] = status;
        Ok(self.host.replace_status(host::TENANTS, name, &updated).await?)
    }

    /// Stop serving the tenant, release its claims, remove its data and its host namespace,
    /// then let it go.
    async fn tear_down(&self, name: &str, tenant: Value) -> Result<(), ManagerError> {
        if tenant.pointer("/status/phase").and_then(Value::as_str) != Some("Terminating") {
            let mut status = tenant.get("status").cloned().unwrap_or_else(|| json!({}));
            status["phase"] = json!("Terminating");
            self.write_status(name, &tenant, status).await?;
        }
        let lifecycle = self.lifecycle.write().await;
        self.unserve(name);
        leases::release_tenant(self.host.client(), name).await?;
        release_hosts(self.host.client(), name).await?;
        let dir = self.dir(name).path;
        let removed = tokio::task::spawn_blocking(move || {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|source| (dir, source))?;
            }
            Ok(())
        })
        .await?;
        removed.map_err(|(path, source)| ManagerError::Io { tenant: name.into(), path, source })?;
        drop(lifecycle);
        namespace::delete_owned(&self.host, name, &tenant).await?;
        let mut updated = self.host.get(host::TENANTS, name).await?;
        let kept: Vec<Value> =
            finalizers(&updated).into_iter().filter(|f| f != FINALIZER).map(Value::from).collect();
        updated["metadata"]["finalizers"] = Value::Array(kept);
        match self.host.replace(host::TENANTS, name, &updated).await {
            Ok(_) => {}
            Err(e) if code(&e) == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(tenant = %name, "tenant deleted");
        Ok(())
    }

    /// Serve every tenant again ([`Manager::resume`]), then reconcile tenants as they change,
    /// as their claim Leases change, at their expiry, soon again while they are not served for
    /// a reason that may pass, and when a served tenant's store's health changes (looked at
    /// every `tick`, in this process); until `stop`.
    pub async fn run(self: Arc<Self>, tick: Duration, stop: tokio::sync::watch::Receiver<bool>) {
        if let Err(e) = self.resume().await {
            tracing::warn!(error = %e, "resuming tenants failed");
        }
        let client = self.host.client().clone();
        let tenants: kube::Api<Tenant> = kube::Api::all(client.clone());
        let leases: kube::Api<Lease> = kube::Api::namespaced(client, carrel_gpu::CLAIM_NAMESPACE);
        let claims = watcher::Config::default().labels(&Selection::All.labels());
        let stopped = {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
            }
        };
        let (in_flight, _) = tokio::sync::watch::channel(0usize);
        let running = in_flight.subscribe();
        let context = Arc::new(Context { manager: self.clone(), retry: tick, in_flight });
        // Reconciles run concurrently, a bounded number at once: a stop waits for those only.
        let config = controller::Config::default().concurrency(RECONCILES_AT_ONCE);
        // The manager's own status writes change nothing it acts on: they wake no reconcile.
        let (reader, writer) = reflector::store();
        let changes = reflector(writer, watcher(tenants, watcher::Config::default()))
            .applied_objects()
            .predicate_filter(acted_on, PredicateConfig::default());
        let controller = Controller::for_stream(changes, reader)
            .with_config(config)
            .watches(leases, claims, |lease: Lease| {
                let labels = lease.metadata.labels.as_ref()?;
                labels.get(LABEL_TENANT).map(|name| ObjectRef::new(name))
            })
            .graceful_shutdown_on(stopped)
            .run(reconcile, error_policy, context)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "tenant controller");
                }
            });
        // kube-runtime's graceful shutdown ends the controller once its reconciles are done, but
        // a stop that comes before the controller's first list is in leaves it waiting for that
        // list forever. So once stopped, the controller also ends when no reconcile is running:
        // none starts after the stop, and one not started is only one not done yet.
        let idle = {
            let (mut stop, mut running) = (stop.clone(), running);
            async move {
                let _ = stop.wait_for(|stopped| *stopped).await;
                let _ = running.wait_for(|running| *running == 0).await;
            }
        };
        let controller = async {
            tokio::select! {
                () = controller => {}
                () = idle => tracing::debug!("the tenant controller stopped with none running"),
            }
        };
        tokio::join!(
            controller,
            self.watch_store_health(tick, stop.clone()),
            self.watch_host_claims(stop)
        );
    }

    /// Keep the cache of host-name claims that tenants' admissions read, until `stop`. Only the
    /// first call watches.
    async fn watch_host_claims(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        let Some(writer) = self.host_claims_writer.lock().take() else { return };
        let api: kube::Api<Lease> =
            kube::Api::namespaced(self.host.client().clone(), carrel_gpu::CLAIM_NAMESPACE);
        let config =
            watcher::Config::default().labels(carrel_machinery::tenancy::LABEL_HOSTNAME_HOLDER);
        let stream = reflector(writer, watcher(api, config)).default_backoff();
        let follow = stream.for_each(|event| async move {
            if let Err(e) = event {
                tracing::debug!(error = %e, "watching the host-name claims");
            }
        });
        tokio::select! {
            () = follow => {}
            _ = stop.wait_for(|stopped| *stopped) => {}
        }
    }

    /// Every `tick` until `stop`: reconcile each served tenant whose store's health changed
    /// since it was last looked at (a store that fails or reopens does so in this process, with
    /// nothing written to the host).
    async fn watch_store_health(
        &self,
        tick: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut seen: HashMap<String, carrel_store::Health> = HashMap::new();
        let mut ticker = tokio::time::interval(tick);
        loop {
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => return,
                _ = ticker.tick() => {}
            }
            // Only open tenants have a store whose health can change.
            let open = self.clusters.open();
            seen.retain(|name, _| open.iter().any(|(open, _)| open == name));
            for (name, server) in open {
                let health = server.api().store_health();
                // A tenant is served healthy: its status said so then.
                let before = seen.insert(name.clone(), health.clone());
                if before.unwrap_or(carrel_store::Health::Ok) != health {
                    self.report_store_health(&name).await;
                }
            }
        }
    }
}

impl Manager {
    /// Open an idle tenant's cluster again: its store, its credentials, its admission and its
    /// hooks, as the `Tenant` object now says. A store still closing is waited for.
    async fn reopen(&self, name: &str) -> Result<Arc<Server>, ManagerError> {
        let _lifecycle = self.lifecycle.read().await;
        let tenant = match self.host.get_opt(host::TENANTS, name).await? {
            Some(tenant) if !is_deleting(&tenant) => tenant,
            _ => return Err(ManagerError::Gone { tenant: name.to_owned() }),
        };
        let _turn = self.opening.acquire().await;
        self.room_for_one(name)?;
        let (quota, secured) = (store_quota(&tenant), self.server_ca_pem.is_some());
        let opened =
            tenant_cluster::open(self.dir(name), quota, secured, self.service_network()).await?;
        opened.admission.set(Self::policy_of(&tenant));
        opened.admission.set_hosts(name, self.host_claims.clone());
        self.admissions.lock().insert(name.to_owned(), opened.admission);
        if let Some(hooks) = self.hooks.get() {
            hooks.serving(name, &opened.server, &tenant);
        }
        Ok(opened.server)
    }

    /// Whether the open-file limit has room for one more tenant's store.
    fn room_for_one(&self, name: &str) -> Result<(), ManagerError> {
        match self.descriptors.get() {
            Some(descriptors) => descriptors
                .room_for_one()
                .map_err(|source| ManagerError::NoDescriptors { tenant: name.into(), source }),
            None => Ok(()),
        }
    }

    /// An idle tenant's cluster was closed.
    fn closed(&self, name: &str) {
        self.admissions.lock().remove(name);
        if let Some(hooks) = self.hooks.get() {
            hooks.idle(name);
        }
    }
}

/// Release every host-name claim of tenant `name` (the hosts its Ingresses served), which its
/// syncer took: the tenant is gone, and the hosts are free for others.
async fn release_hosts(host: &kube::Client, name: &str) -> Result<(), ManagerError> {
    let claims: kube::Api<Lease> = kube::Api::namespaced(host.clone(), carrel_gpu::CLAIM_NAMESPACE);
    let selector = format!("{}={name}", carrel_machinery::tenancy::LABEL_HOSTNAME_HOLDER);
    let list = claims.list(&kube::api::ListParams::default().labels(&selector)).await?;
    for lease in list.items {
        let Some(lease_name) = lease.metadata.name else { continue };
        match claims.delete(&lease_name, &kube::api::DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// How many locks tenants' reconciles are spread over by name.
const RECONCILE_LOCKS: usize = 64;

/// How many tenants are reconciled at once, at most.
const RECONCILES_AT_ONCE: u16 = 16;

/// How many tenants' clusters are opened at once, at most.
const OPENING_AT_ONCE: usize = 8;

/// The reconcile lock of tenant `name`.
fn lock_of(name: &str) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(name);
    usize::try_from(hash % RECONCILE_LOCKS as u64).unwrap_or(0)
}

/// Opens idle tenants for [`Clusters`], through the manager.
#[derive(Debug)]
struct Reopen(Weak<Manager>);

impl Wake for Reopen {
    fn open(&self, name: &str) -> BoxFuture<'static, Result<Arc<Server>, ApiError>> {
        let (manager, name) = (self.0.clone(), name.to_owned());
        Box::pin(async move {
            let Some(manager) = manager.upgrade() else {
                return Err(ApiError::unavailable("the tenant manager has stopped"));
            };
            manager.reopen(&name).await.map_err(|e| match e {
                ManagerError::Gone { tenant } => ApiError::not_found(GROUP, "tenants", &tenant),
                e => ApiError::unavailable(format!("the tenant's cluster cannot be opened: {e}")),
            })
        })
    }

    fn closed(&self, name: &str) {
        if let Some(manager) = self.0.upgrade() {
            manager.closed(name);
        }
    }
}

/// What the controller's reconciles share.
struct Context {
    manager: Arc<Manager>,
    /// How soon a tenant not served for a passing reason, or whose reconcile failed, is looked
    /// at again.
    retry: Duration,
    /// How many reconciles are running.
    in_flight: tokio::sync::watch::Sender<usize>,
}

/// One running reconcile, counted in [`Context::in_flight`] until it ends or is dropped.
struct Running<'a>(&'a tokio::sync::watch::Sender<usize>);

impl<'a> Running<'a> {
    fn start(in_flight: &'a tokio::sync::watch::Sender<usize>) -> Running<'a> {
        in_flight.send_modify(|running| *running += 1);
        Running(in_flight)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|running| *running = running.saturating_sub(1));
    }
}

async fn reconcile(tenant: Arc<Tenant>, context: Arc<Context>) -> Result<Action, ManagerError> {
    let _running = Running::start(&context.in_flight);
    let Some(name) = tenant.metadata.name.as_deref() else { return Ok(Action::await_change()) };
    let manager = &context.manager;
    if manager.elsewhere(&tenant) {
        // Another replica's, with nothing of it here: not even a read of it.
        return Ok(Action::await_change());
    }
    let next = manager.reconcile_next(name).await?;
    if let Err(e) = manager.refresh_usage(name).await {
        tracing::debug!(tenant = %name, error = %e, "writing the tenant's GPU usage failed");
    }
    Ok(match next {
        Next::OnChange => Action::await_change(),
        Next::Retry => Action::requeue(context.retry),
        Next::At(expiry) => {
            let left = (expiry - (manager.clock)()).to_std().unwrap_or(Duration::ZERO);
            Action::requeue(left)
        }
    })
}

/// What of a `Tenant` its reconcile acts on: everything but its status (which the manager
/// writes) and the bookkeeping of writes (`resourceVersion`, `managedFields`).
fn acted_on(tenant: &Tenant) -> Option<u64> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let meta = &tenant.metadata;
    let acted_on = json!({
        "uid": meta.uid,
        "labels": meta.labels,
        "annotations": meta.annotations,
        "finalizers": meta.finalizers,
        "deletionTimestamp": meta.deletion_timestamp,
        "spec": tenant.spec,
        // Which replica serves it: the assigner's write, or a move's.
        "replica": tenant.status.as_ref().and_then(|s| s.replica.as_ref()),
    });
    Some(BuildHasherDefault::<DefaultHasher>::default().hash_one(acted_on.to_string()))
}

fn error_policy(tenant: Arc<Tenant>, error: &ManagerError, context: Arc<Context>) -> Action {
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    tracing::warn!(tenant = %name, error = %error, "reconciling a tenant failed");
    Action::requeue(context.retry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(value: Value) -> Tenant {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_status_write_changes_nothing_a_reconcile_acts_on_and_the_rest_does() {
        let base = json!({
            "apiVersion": "carrel.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "a", "uid": "u1", "resourceVersion": "5"},
            "spec": {"podSecurity": "baseline"},
        });
        let acted = |change: &dyn Fn(&mut Value)| {
            let mut changed = base.clone();
            change(&mut changed);
            acted_on(&tenant(changed))
        };
        let before = acted_on(&tenant(base.clone()));
        assert!(before.is_some());
        // What the manager writes itself, and every write's bookkeeping.
        let status = |t: &mut Value| {
            t["status"] = json!({"phase": "Ready"});
            t["metadata"]["resourceVersion"] = json!("6");
            t["metadata"]["managedFields"] = json!([{"manager": MANAGER, "operation": "Update"}]);
        };
        assert_eq!(acted(&status), before);
        // What a reconcile acts on.
        let changes: [&dyn Fn(&mut Value); 5] = [
            &|t| t["spec"]["podSecurity"] = json!("restricted"),
            &|t| t["metadata"]["deletionTimestamp"] = json!("2026-12-05T00:00:00Z"),
            &|t| t["metadata"]["finalizers"] = json!([FINALIZER]),
            &|t| t["metadata"]["labels"] = json!({"team": "a"}),
            &|t| t["metadata"]["uid"] = json!("u2"),
        ];
        for change in changes {
            assert_ne!(acted(change), before);
        }
    }
}
