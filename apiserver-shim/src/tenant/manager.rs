//! The tenant manager: turns the host API's `Tenant` objects into served tenant clusters.
//!
//! For each tenant it keeps a store directory (`<data>/tenants/<name>/store`), serves the
//! tenant's API under `/tenants/<name>`, keeps a host namespace `carrel-<name>` holding a Secret
//! `admin-kubeconfig`, and reports all that in the tenant's status. The host namespace records the
//! tenant's name and UID ([`OWNER_UID`]) when the manager creates it; one that exists without this
//! tenant's UID is not adopted (the tenant is not served and says why) and is never deleted. A
//! finalizer holds a deleted tenant until its API is no longer served, its data is gone and the
//! host namespace it owns is deleted; a tenant whose TTL has passed is deleted. Everything is derived from the `Tenant` objects and
//! the data directory, so a restarted manager ([`Manager::resume`]) serves every tenant again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};

use carrel_store::{Options, Quota, SledStore, Store};

use crate::access::Security;
use crate::admission::{Level, TenantAdmission, TenantPolicy};
use crate::api::{Api, DeleteParams, Target, Write};
use crate::auth::ca::TenantCa;
use crate::auth::token::Signer;
use crate::auth::CredentialError;
use crate::http::Server;
use crate::kubeconfig;
use crate::object::{finalizers, is_deleting, meta_str, now_rfc3339};
use crate::resource::{ResourceType, Subresource};
use crate::status::ApiError;
use crate::tenant::descriptors::{Descriptors, NoRoom, REASON as NO_DESCRIPTORS};
use crate::tenant::types::{gpu_quota, parse_duration, store_quota, MAX_TTL, MIN_TTL, TENANTS};
use crate::tenant::Clusters;

/// The finalizer that holds a deleted tenant until its cluster is torn down.
pub const FINALIZER: &str = "carrel.dev/tenant";
/// The field manager of the manager's writes.
const MANAGER: &str = "carrel-tenant-manager";
/// The user of a tenant's admin kubeconfig.
pub const ADMIN_USER: &str = "carrel-admin";
/// Its group: every permission, through the bootstrap `cluster-admin` binding.
pub const ADMIN_GROUP: &str = "system:masters";
/// How long the admin certificate is valid.
const ADMIN_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// The Secret in a tenant's host namespace that holds its admin kubeconfig.
pub const KUBECONFIG_SECRET: &str = "admin-kubeconfig";
/// The `Tenant` condition that reports whether the tenant's store accepts writes.
pub const STORE_CONDITION: &str = "StoreHealthy";

/// Annotation on a tenant's host namespace: the UID of the `Tenant` it was created for. Only
/// that tenant uses it, and deleting only that tenant deletes it.
pub const OWNER_UID: &str = "carrel.dev/tenant-uid";
/// Label on a tenant's host namespace: the tenant's name.
pub const OWNER_LABEL: &str = "carrel.dev/tenant";
/// The `Ready` condition's reason while the host namespace belongs to something else.
pub const NOT_OWNED: &str = "HostNamespaceNotOwned";

/// What can go wrong while reconciling a tenant.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The host API refused a read or a write.
    #[error("host API: {0}")]
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
        source: crate::auth::CredentialError,
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
    /// The tenant's host namespace exists and was not created for this tenant.
    #[error("tenant {tenant}: host namespace {namespace} exists and does not record this tenant's UID: it belongs to something else")]
    NotOwned {
        /// The tenant.
        tenant: String,
        /// The host namespace.
        namespace: String,
    },
}

/// The name of a tenant's namespace in the host.
pub fn host_namespace(tenant: &str) -> String {
    format!("carrel-{tenant}")
}

/// What else runs for each served tenant (its syncer, in `carrel up`).
pub trait TenantHooks: Send + Sync + std::fmt::Debug {
    /// The tenant's cluster is served, with this `Tenant` object; called on every reconcile.
    fn serving(&self, tenant: &str, server: &Arc<Server>, object: &Value);
    /// The tenant is no longer served.
    fn gone(&self, tenant: &str);
}

/// Reconciles tenants.
#[derive(Debug)]
pub struct Manager {
    host: Arc<Api>,
    clusters: Arc<Clusters>,
    data_dir: PathBuf,
    endpoint: String,
    server_ca_pem: Option<String>,
    admissions: Mutex<HashMap<String, Arc<TenantAdmission>>>,
    hooks: OnceLock<Arc<dyn TenantHooks>>,
    /// Room for new tenants in the open-file limit; unchecked until set.
    descriptors: OnceLock<Descriptors>,
    /// The time TTLs are measured against.
    clock: fn() -> chrono::DateTime<chrono::Utc>,
}

impl Manager {
    /// A manager of the tenants of `host`, serving them in `clusters`, keeping their data under
    /// `data_dir/tenants`; `endpoint` is the listener's URL (`https://127.0.0.1:6443`). With the
    /// listener's CA (`server_ca_pem`), every tenant gets its own CA and service-account key, its
    /// API authenticates and authorizes, and its admin kubeconfig carries a `system:masters`
    /// certificate from its CA; without (plain HTTP, in tests) tenants are served open.
    pub fn new(
        host: Arc<Api>,
        clusters: Arc<Clusters>,
        data_dir: &Path,
        endpoint: &str,
        server_ca_pem: Option<String>,
    ) -> Manager {
        Manager {
            host,
            clusters,
            data_dir: data_dir.join("tenants"),
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            server_ca_pem,
            admissions: Mutex::default(),
            hooks: OnceLock::new(),
            descriptors: OnceLock::new(),
            clock: chrono::Utc::now,
        }
    }

    /// Call `hooks` as tenants come and go. Only the first call has an effect.
    pub fn set_hooks(&self, hooks: Arc<dyn TenantHooks>) {
        let _ = self.hooks.set(hooks);
    }

    /// Serve a new tenant only while `descriptors` says one more fits (see
    /// [`super::descriptors`]). Only the first call has an effect.
    pub fn set_descriptors(&self, descriptors: Descriptors) {
        let _ = self.descriptors.set(descriptors);
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

    fn pki_dir(&self, name: &str) -> PathBuf {
        self.store_dir(name).join("pki")
    }

    fn credentials(&self, name: &str) -> impl Fn(CredentialError) -> ManagerError + '_ {
        let tenant = name.to_owned();
        move |source| ManagerError::Credentials { tenant: tenant.clone(), source }
    }

    /// The tenant's admin kubeconfig: a `system:masters` certificate from its CA, kept in its
    /// data directory so that it is the same after a restart.
    pub fn tenant_kubeconfig(&self, name: &str) -> Result<String, ManagerError> {
        let url = self.url(name);
        let Some(server_ca) = &self.server_ca_pem else {
            return Ok(kubeconfig::admin(&url, None));
        };
        let pki = self.pki_dir(name);
        let ca = TenantCa::load_or_generate(&pki, name).map_err(self.credentials(name))?;
        let (cert, key) = ca
            .load_or_issue_client(&pki, "admin", ADMIN_USER, &[ADMIN_GROUP], ADMIN_VALIDITY)
            .map_err(self.credentials(name))?;
        Ok(kubeconfig::with_client_certificate(&url, server_ca, &cert, &key))
    }

    fn target(&self) -> Target<'static> {
        Target { rt: &TENANTS, namespace: None }
    }

    fn rt(&self, plural: &str) -> &'static ResourceType {
        crate::resource::built_in("", plural).expect("a core type")
    }

    /// Reconcile every tenant, and stop serving clusters whose tenant is gone: what a restarted
    /// manager does first.
    pub fn resume(&self) -> Result<(), ManagerError> {
        let list = self.host.list(&self.target(), &Default::default())?;
        let names: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| meta_str(t, "name").map(str::to_owned))
            .collect();
        for name in &names {
            if let Err(e) = self.reconcile(name) {
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
    pub fn reconcile(&self, name: &str) -> Result<(), ManagerError> {
        let tenant = match self.host.get(&self.target(), name) {
            Ok(t) => t,
            Err(ApiError::NotFound { .. }) => {
                self.unserve(name);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if is_deleting(&tenant) {
            return self.tear_down(name, tenant);
        }
        if let Some(expiry) = expires_at(&tenant) {
            if expiry <= (self.clock)() {
                tracing::info!(tenant = %name, "the tenant's TTL has passed: deleting it");
                self.host.delete(&self.target(), name, &DeleteParams::default())?;
                return Ok(());
            }
        }
        let mut tenant = self.ensure_finalizer(name, tenant)?;
        if tenant.pointer("/status/phase").is_none() {
            let why = "setting up the tenant's store, credentials and host namespace";
            tenant = self.set_status(name, &tenant, "Provisioning", "Provisioning", why)?;
        }
        match self.own_host_namespace(name, &tenant) {
            Ok(()) => {}
            Err(e @ ManagerError::NotOwned { .. }) => {
                // Never served into a namespace that is not the tenant's.
                self.unserve(name);
                tracing::warn!(tenant = %name, error = %e, "not serving the tenant");
                self.set_status(name, &tenant, "Failed", NOT_OWNED, &e.to_string())?;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        match self.serve(name, store_quota(&tenant)) {
            Ok(()) => {}
            Err(ManagerError::NoDescriptors { source, .. }) => {
                // Not an error of the manager's: the tick looks again.
                tracing::warn!(tenant = %name, reason = %source, "not serving the tenant");
                self.set_status(name, &tenant, "Failed", NO_DESCRIPTORS, &source.to_string())?;
                return Ok(());
            }
            Err(e) => {
                self.set_status(name, &tenant, "Failed", "ServeFailed", &e.to_string())?;
                return Err(e);
            }
        }
        self.ensure_host_namespace(name)?;
        let admission = self.admissions.lock().get(name).cloned();
        if let Some(admission) = admission {
            admission.set(Self::policy_of(&tenant));
        }
        if let Some(server) = self.clusters.tenant(name) {
            // The spec may have changed the bound on what the tenant stores.
            server.api().store().set_quota(store_quota(&tenant));
        }
        let tenant =
            self.set_status(name, &tenant, "Ready", "Serving", "the tenant's API is served")?;
        if let (Some(hooks), Some(server)) = (self.hooks.get(), self.clusters.tenant(name)) {
            hooks.serving(name, &server, &tenant);
        }
        Ok(())
    }

    /// What the manager does every tick, from one list of the tenants: delete those whose TTL has
    /// passed, and write the others' GPU usage.
    pub fn tick(&self) -> Result<(), ManagerError> {
        let list = self.host.list(&self.target(), &Default::default())?;
        let tenants = list["items"].as_array().map(Vec::as_slice).unwrap_or_default();
        let now = (self.clock)();
        for tenant in tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            if !is_deleting(tenant) && expires_at(tenant).is_some_and(|e| e <= now) {
                self.reconcile(name)?;
            } else if tenant.pointer("/status/conditions/0/reason") == Some(&json!(NO_DESCRIPTORS))
            {
                // Room may have been made since (tenants deleted, the limit raised).
                if let Err(e) = self.reconcile(name) {
                    tracing::debug!(tenant = %name, error = %e, "the tenant is still not served");
                }
            } else if tenant.pointer("/status/conditions/0/reason") == Some(&json!(NOT_OWNED)) {
                // Its host namespace may have gone since (one being deleted, say).
                if let Err(e) = self.reconcile(name) {
                    tracing::debug!(tenant = %name, error = %e, "the host namespace is still not the tenant's");
                }
            }
        }
        self.refresh_store_conditions(tenants);
        self.refresh_usage(tenants)
    }

    /// The `StoreHealthy` condition of a served tenant's store: `False`, with the reason, while
    /// it refuses writes after an I/O error left its disk state uncertain (it reopens itself
    /// once the cause is gone). `None` when the tenant is not served.
    fn store_condition(&self, name: &str, tenant: &Value) -> Option<Value> {
        let server = self.clusters.tenant(name)?;
        let (status, reason, message) = match server.api().store_health() {
            carrel_store::Health::Ok => {
                ("True", "StoreHealthy", "the tenant's store accepts writes".to_owned())
            }
            carrel_store::Health::Failed { reason } => (
                "False",
                "StoreFailed",
                format!("the tenant's store refuses writes until it is reopened: {reason}"),
            ),
        };
        let previous = tenant
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|conditions| conditions.iter().find(|c| c["type"] == STORE_CONDITION));
        let transition = match previous {
            Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
            _ => json!(now_rfc3339()),
        };
        Some(json!({
            "type": STORE_CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": transition,
        }))
    }

    /// Rewrite the status of every served tenant whose store's health changed since it was last
    /// reported.
    fn refresh_store_conditions(&self, tenants: &[Value]) {
        for tenant in tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            if is_deleting(tenant) {
                continue;
            }
            let Some(condition) = self.store_condition(name, tenant) else { continue };
            let reported = tenant
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|conditions| conditions.iter().find(|c| c["type"] == STORE_CONDITION));
            if reported.map(|c| &c["status"]) == Some(&condition["status"])
                && reported.map(|c| &c["message"]) == Some(&condition["message"])
            {
                continue;
            }
            if let Err(e) = self.reconcile(name) {
                tracing::warn!(tenant = %name, error = %e, "reporting the tenant's store health failed");
            }
        }
    }

    fn ensure_finalizer(&self, name: &str, tenant: Value) -> Result<Value, ManagerError> {
        if finalizers(&tenant).iter().any(|f| f == FINALIZER) {
            return Ok(tenant);
        }
        let mut updated = tenant;
        let list = updated["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
        let mut list = list;
        list.push(json!(FINALIZER));
        updated["metadata"]["finalizers"] = Value::Array(list);
        Ok(self.host.update(&self.target(), name, updated, None, &Write::by(MANAGER, false))?)
    }

    fn store_dir(&self, name: &str) -> PathBuf {
        self.data_dir.join(name)
    }

    /// Serve the tenant's API, opening (or creating) its store, which may hold up to `quota`.
    fn serve(&self, name: &str, quota: Quota) -> Result<(), ManagerError> {
        if self.clusters.tenant(name).is_some() {
            return Ok(());
        }
        if let Some(descriptors) = self.descriptors.get() {
            descriptors
                .room_for_one()
                .map_err(|source| ManagerError::NoDescriptors { tenant: name.into(), source })?;
        }
        let dir = self.store_dir(name);
        std::fs::create_dir_all(&dir).map_err(|source| ManagerError::Io {
            tenant: name.into(),
            path: dir.clone(),
            source,
        })?;
        let store = SledStore::open(dir.join("store"), Options::create())
            .map_err(|source| ManagerError::Store { tenant: name.into(), source })?;
        let api = Arc::new(Api::new(Arc::new(store))?);
        // Bounded before a request can reach it (its bootstrap objects are the server's own).
        api.store().set_quota(quota);
        crate::event_ttl::start(&api);
        let admission = Arc::new(TenantAdmission::default());
        api.set_admission(admission.clone());
        self.admissions.lock().insert(name.to_owned(), admission);
        let base = format!("/tenants/{name}");
        let server = match &self.server_ca_pem {
            None => Server::new(api, &base),
            Some(_) => {
                let pki = self.pki_dir(name);
                let ca = TenantCa::load_or_generate(&pki, name).map_err(self.credentials(name))?;
                let signer = Signer::load_or_generate(&pki).map_err(self.credentials(name))?;
                let security = Security::new(ca.cert_der().clone(), Some(signer), &issuer(name));
                Server::secured(api, &base, Arc::new(security))
            }
        };
        self.clusters.insert(name, Arc::new(server));
        tracing::info!(tenant = %name, "serving the tenant's API");
        Ok(())
    }

    /// Create the tenant's host namespace, recording the tenant's name and UID on it, or find it
    /// created for this tenant; [`ManagerError::NotOwned`] when it exists without this tenant's
    /// UID (made by someone else, or for an earlier tenant of the same name and not yet gone).
    fn own_host_namespace(&self, name: &str, tenant: &Value) -> Result<(), ManagerError> {
        let namespace = host_namespace(name);
        let uid = meta_str(tenant, "uid").unwrap_or_default();
        let namespaces = Target { rt: self.rt("namespaces"), namespace: None };
        let body = json!({"metadata": {
            "name": namespace,
            "labels": {OWNER_LABEL: name},
            "annotations": {OWNER_UID: uid},
        }});
        match self.host.create(&namespaces, body, &Write::by(MANAGER, false)) {
            Ok(_) => Ok(()),
            Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => {
                let existing = self.host.get(&namespaces, &namespace)?;
                if owned_by(&existing, tenant) {
                    Ok(())
                } else {
                    Err(ManagerError::NotOwned { tenant: name.to_owned(), namespace })
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Keep the `admin-kubeconfig` Secret in the tenant's host namespace (which it owns).
    fn ensure_host_namespace(&self, name: &str) -> Result<(), ManagerError> {
        let namespace = host_namespace(name);
        let secrets = Target { rt: self.rt("secrets"), namespace: Some(namespace) };
        let kubeconfig = self.tenant_kubeconfig(name)?;
        let secret = json!({
            "metadata": {"name": KUBECONFIG_SECRET, "labels": {"carrel.dev/tenant": name}},
            "type": "Opaque",
            "data": {"kubeconfig": base64_encode(kubeconfig.as_bytes())},
        });
        match self.host.get(&secrets, KUBECONFIG_SECRET) {
            Ok(existing) if existing["data"] == secret["data"] => Ok(()),
            Ok(mut existing) => {
                existing["data"] = secret["data"].clone();
                self.host.update(
                    &secrets,
                    KUBECONFIG_SECRET,
                    existing,
                    None,
                    &Write::by(MANAGER, false),
                )?;
                Ok(())
            }
            Err(ApiError::NotFound { .. }) => {
                self.host.create(&secrets, secret, &Write::by(MANAGER, false))?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The tenant's API URL.
    pub fn url(&self, name: &str) -> String {
        format!("{}/tenants/{name}", self.endpoint)
    }

    fn set_status(
        &self,
        name: &str,
        tenant: &Value,
        phase: &str,
        reason: &str,
        message: &str,
    ) -> Result<Value, ManagerError> {
        let ready = if phase == "Ready" { "True" } else { "False" };
        let previous = tenant.pointer("/status/conditions/0");
        let transition = match previous {
            Some(c) if c["status"] == ready => c["lastTransitionTime"].clone(),
            _ => json!(now_rfc3339()),
        };
        let mut status = json!({
            "phase": phase,
            "conditions": [{
                "type": "Ready",
                "status": ready,
                "reason": reason,
                "message": message,
                "lastTransitionTime": transition,
            }],
            "endpoint": self.url(name),
            "hostNamespace": host_namespace(name),
        });
        if let Some(condition) = self.store_condition(name, tenant) {
            status["conditions"].as_array_mut().expect("built above").push(condition);
        }
        if let Some(ca) = &self.server_ca_pem {
            // What a client of the tenant's API must trust.
            status["caBundle"] = json!(ca);
        }
        if let Some(expiry) = expires_at(tenant) {
            status["expiresAt"] = json!(expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        if let Some(usage) = tenant.pointer("/status/gpuUsage") {
            status["gpuUsage"] = usage.clone();
        }
        if tenant.get("status") == Some(&status) {
            return Ok(tenant.clone());
        }
        self.write_status(name, tenant, status)
    }

    /// Write a tenant's status through its status subresource; the tenant as stored.
    fn write_status(
        &self,
        name: &str,
        tenant: &Value,
        status: Value,
    ) -> Result<Value, ManagerError> {
        let mut updated = tenant.clone();
        updated["status"] = status;
        let write = Write::by(MANAGER, false);
        Ok(self.host.update(&self.target(), name, updated, Some(Subresource::Status), &write)?)
    }

    /// Stop serving the tenant, remove its data and its host namespace, then let it go.
    fn tear_down(&self, name: &str, tenant: Value) -> Result<(), ManagerError> {
        if tenant.pointer("/status/phase").and_then(Value::as_str) != Some("Terminating") {
            let mut status = tenant.get("status").cloned().unwrap_or_else(|| json!({}));
            status["phase"] = json!("Terminating");
            self.write_status(name, &tenant, status)?;
        }
        self.unserve(name);
        self.release_claims(name)?;
        let dir = self.store_dir(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|source| ManagerError::Io {
                tenant: name.into(),
                path: dir.clone(),
                source,
            })?;
        }
        self.delete_host_namespace(name, &tenant)?;
        let current = self.host.get(&self.target(), name)?;
        let mut updated = current;
        let kept: Vec<Value> =
            finalizers(&updated).into_iter().filter(|f| f != FINALIZER).map(Value::from).collect();
        updated["metadata"]["finalizers"] = Value::Array(kept);
        match self.host.update(&self.target(), name, updated, None, &Write::by(MANAGER, false)) {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        tracing::info!(tenant = %name, "tenant deleted");
        Ok(())
    }

    /// Delete the tenant's host namespace if it records this tenant's UID; one that does not is
    /// someone else's and is left alone.
    fn delete_host_namespace(&self, name: &str, tenant: &Value) -> Result<(), ManagerError> {
        let namespace = host_namespace(name);
        let namespaces = Target { rt: self.rt("namespaces"), namespace: None };
        let existing = match self.host.get(&namespaces, &namespace) {
            Ok(ns) => ns,
            Err(ApiError::NotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !owned_by(&existing, tenant) {
            tracing::info!(tenant = %name, %namespace, "leaving the host namespace: not the tenant's");
            return Ok(());
        }
        // The very namespace checked: not one made again under the name since.
        let params = DeleteParams {
            uid: meta_str(&existing, "uid").map(str::to_owned),
            ..DeleteParams::default()
        };
        match self.host.delete(&namespaces, &namespace, &params) {
            Ok(_)
            | Err(
                ApiError::NotFound { .. }
                | ApiError::AlreadyExists { .. }
                | ApiError::Conflict { .. },
            ) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Write each of `tenants`' `status.gpuUsage` from the device claims in the host: slices
    /// held per profile, each claim counted once however many Leases it has.
    fn refresh_usage(&self, tenants: &[Value]) -> Result<(), ManagerError> {
        let claims = self
            .claim_leases(&format!("{}=true", carrel_gpu::claim::LABEL_CLAIM))?
            .iter()
            .filter_map(|lease| {
                let annotations = lease.pointer("/metadata/annotations")?;
                let annotations: BTreeMap<String, String> =
                    serde_json::from_value(annotations.clone()).ok()?;
                carrel_gpu::Claim::from_metadata(&annotations).ok()
            })
            .collect::<Vec<_>>();
        let mut usage: HashMap<String, BTreeMap<String, i64>> = HashMap::new();
        for claim in carrel_gpu::distinct(claims) {
            *usage
                .entry(claim.holder.tenant.clone())
                .or_default()
                .entry(claim.profile().to_owned())
                .or_default() += 1;
        }
        for tenant in tenants {
            let Some(name) = meta_str(tenant, "name") else { continue };
            if is_deleting(tenant) || tenant.get("status").is_none() {
                continue;
            }
            let wanted = usage.remove(name).unwrap_or_default();
            let current: BTreeMap<String, i64> = tenant
                .pointer("/status/gpuUsage")
                .and_then(|u| serde_json::from_value(u.clone()).ok())
                .unwrap_or_default();
            if current == wanted {
                continue;
            }
            let mut status = tenant["status"].clone();
            if wanted.is_empty() {
                if let Some(o) = status.as_object_mut() {
                    o.remove("gpuUsage");
                }
            } else {
                status["gpuUsage"] = json!(wanted);
            }
            match self.write_status(name, tenant, status) {
                Ok(_)
                | Err(ManagerError::Api(
                    ApiError::NotFound { .. }
                    | ApiError::AlreadyExists { .. }
                    | ApiError::Conflict { .. },
                )) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The device-claim Leases in the host matching a label selector.
    fn claim_leases(&self, selector: &str) -> Result<Vec<Value>, ManagerError> {
        let Some(rt) = crate::resource::built_in("coordination.k8s.io", "leases") else {
            return Ok(Vec::new());
        };
        let target = Target { rt, namespace: Some(carrel_gpu::CLAIM_NAMESPACE.to_owned()) };
        let params = crate::api::ListParams {
            labels: Some(crate::selector::LabelSelector::parse(selector)?),
            ..Default::default()
        };
        let mut list = self.host.list(&target, &params)?;
        Ok(match list["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        })
    }

    /// Delete the tenant's device claims (its pods go with its host namespace).
    fn release_claims(&self, name: &str) -> Result<(), ManagerError> {
        let leases = self.claim_leases(&format!("{}={name}", carrel_gpu::claim::LABEL_TENANT))?;
        let Some(rt) = crate::resource::built_in("coordination.k8s.io", "leases") else {
            return Ok(());
        };
        let target = Target { rt, namespace: Some(carrel_gpu::CLAIM_NAMESPACE.to_owned()) };
        for lease in &leases {
            let Some(lease_name) = meta_str(lease, "name") else { continue };
            match self.host.delete(&target, lease_name, &DeleteParams::default()) {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reconcile on every change to a `Tenant`, and check TTLs every `tick`, until `stop`.
    pub async fn run(self: Arc<Self>, tick: Duration, stop: tokio::sync::watch::Receiver<bool>) {
        let mut stop = stop;
        let mut after = self.host.current_revision();
        {
            let manager = self.clone();
            let _ = tokio::task::spawn_blocking(move || manager.resume()).await;
        }
        let mut ticker = tokio::time::interval(tick);
        loop {
            let watch = match self.host.watch(&self.target(), after) {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "watching tenants failed; resuming from now");
                    after = self.host.current_revision();
                    let manager = self.clone();
                    let _ = tokio::task::spawn_blocking(move || manager.resume()).await;
                    continue;
                }
            };
            let mut watch = watch;
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = ticker.tick() => {
                        let manager = self.clone();
                        let done = tokio::task::spawn_blocking(move || {
                            manager.tick()
                        });
                        if let Ok(Err(e)) = done.await {
                            tracing::warn!(error = %e, "expiring tenants or counting their GPU use failed");
                        }
                    }
                    next = watch.next() => {
                        let event = match next {
                            Some(Ok(event)) => event,
                            Some(Err(e)) => {
                                tracing::warn!(error = %e, "the tenants watch ended; watching again");
                                break;
                            }
                            None => break,
                        };
                        after = event.revision;
                        let Some(name) = event.key.rsplit('/').next().map(str::to_owned) else { continue };
                        let manager = self.clone();
                        let result = tokio::task::spawn_blocking(move || manager.reconcile(&name)).await;
                        if let Ok(Err(e)) = result {
                            tracing::warn!(error = %e, "reconciling a tenant failed");
                        }
                    }
                }
            }
        }
    }
}

/// The issuer (and default audience) of a tenant's service-account tokens.
pub fn issuer(tenant: &str) -> String {
    format!("https://kubernetes.default.svc/tenants/{tenant}")
}

/// Whether host namespace `namespace` was created for `tenant`: it records the tenant's UID.
pub fn owned_by(namespace: &Value, tenant: &Value) -> bool {
    let recorded = namespace.pointer("/metadata/annotations").and_then(|a| a.get(OWNER_UID));
    let uid = meta_str(tenant, "uid");
    uid.is_some_and(|uid| !uid.is_empty() && recorded.and_then(Value::as_str) == Some(uid))
}

/// When a tenant expires: its creation time plus its TTL. A TTL stored before TTLs were bounded
/// counts as the nearest bound ([`MIN_TTL`], [`MAX_TTL`]), so the expiry is always a time RFC
/// 3339 can write.
pub fn expires_at(tenant: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let ttl = tenant.pointer("/spec/ttl").and_then(Value::as_str)?;
    let ttl = parse_duration(ttl).ok()?.clamp(MIN_TTL, MAX_TTL);
    let created = meta_str(tenant, "creationTimestamp")?;
    let created = chrono::DateTime::parse_from_rfc3339(created).ok()?.with_timezone(&chrono::Utc);
    Some(created + chrono::Duration::from_std(ttl).ok()?)
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use crate::http::clusters_router;

    struct Fixture {
        dir: tempfile::TempDir,
        host: Arc<Api>,
        clusters: Arc<Clusters>,
        manager: Manager,
    }

    fn fixture_in(dir: tempfile::TempDir) -> Fixture {
        let store = SledStore::open(dir.path().join("host"), Options::create()).unwrap();
        let host = Arc::new(Api::host(Arc::new(store)).unwrap());
        let clusters = Arc::new(Clusters::new(Arc::new(Server::new(host.clone(), ""))));
        let manager = Manager::new(
            host.clone(),
            clusters.clone(),
            dir.path(),
            "https://127.0.0.1:6443",
            None,
        );
        Fixture { dir, host, clusters, manager }
    }

    fn create(f: &Fixture, name: &str, spec: Value) {
        let body = json!({"apiVersion": "carrel.dev/v1alpha1", "kind": "Tenant",
                          "metadata": {"name": name}, "spec": spec});
        f.host
            .create(&Target { rt: &TENANTS, namespace: None }, body, &Write::by("test", false))
            .unwrap();
    }

    async fn status_of(f: &Fixture, path: &str) -> u16 {
        let router = clusters_router(f.clusters.clone());
        let response =
            router.oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        response.status().as_u16()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_tenant_is_served_reported_and_torn_down() {
        let f = fixture_in(tempfile::tempdir().unwrap());
        assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 404);
        create(&f, "team-a", json!({"ttl": "2h"}));
        f.manager.reconcile("team-a").unwrap();
        assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);
        assert_eq!(status_of(&f, "/api/v1/namespaces/carrel-team-a").await, 200);
        let tenant = f.host.get(&f.manager.target(), "team-a").unwrap();
        assert_eq!(tenant["status"]["phase"], "Ready");
        assert_eq!(tenant["spec"]["podSecurity"], "baseline", "the default level");
        assert_eq!(tenant["status"]["endpoint"], "https://127.0.0.1:6443/tenants/team-a");
        assert!(tenant["status"]["expiresAt"].is_string());
        assert_eq!(finalizers(&tenant), vec![FINALIZER.to_owned()]);
        let secrets =
            Target { rt: f.manager.rt("secrets"), namespace: Some("carrel-team-a".into()) };
        let secret = f.host.get(&secrets, KUBECONFIG_SECRET).unwrap();
        assert!(secret["data"]["kubeconfig"].is_string());
        // Reconciling again changes nothing.
        f.manager.reconcile("team-a").unwrap();
        let again = f.host.get(&f.manager.target(), "team-a").unwrap();
        assert_eq!(again["metadata"]["resourceVersion"], tenant["metadata"]["resourceVersion"]);

        f.host.delete(&f.manager.target(), "team-a", &DeleteParams::default()).unwrap();
        f.manager.reconcile("team-a").unwrap();
        assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 404);
        assert!(!f.dir.path().join("tenants/team-a").exists());
        assert_eq!(f.host.get(&f.manager.target(), "team-a").unwrap_err().code(), 404);
        assert_eq!(status_of(&f, "/api/v1/namespaces/carrel-team-a").await, 404);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_tenant_without_room_in_the_open_file_limit_fails_clearly_until_there_is() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let f = fixture_in(tempfile::tempdir().unwrap());
        let open = Arc::new(AtomicU64::new(100));
        let counted = open.clone();
        let count: crate::tenant::descriptors::Count =
            Arc::new(move || Ok((counted.load(Ordering::SeqCst), 1024)));
        f.manager.set_descriptors(Descriptors::counted(512, 48, count));
        create(&f, "team-a", json!({}));
        f.manager.reconcile("team-a").unwrap();
        assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);

        // The process nears its limit: a new tenant is refused, with the reason in its status.
        open.store(1024 - 512 - 47, Ordering::SeqCst);
        create(&f, "team-b", json!({}));
        f.manager.reconcile("team-b").unwrap();
        let tenant = f.host.get(&f.manager.target(), "team-b").unwrap();
        assert_eq!(tenant["status"]["phase"], "Failed", "{tenant}");
        let condition = &tenant["status"]["conditions"][0];
        assert_eq!(condition["reason"], "InsufficientFileDescriptors", "{tenant}");
        let message = condition["message"].as_str().unwrap();
        assert!(message.contains("465 of the process's 1024 file descriptors"), "{message}");
        assert_eq!(status_of(&f, "/tenants/team-b/api/v1/namespaces").await, 404);
        assert!(!f.dir.path().join("tenants/team-b").exists(), "no store was opened");
        // The tenant served keeps being served.
        assert_eq!(status_of(&f, "/tenants/team-a/api/v1/namespaces").await, 200);
        f.manager.tick().unwrap();
        let tenant = f.host.get(&f.manager.target(), "team-b").unwrap();
        assert_eq!(tenant["status"]["phase"], "Failed", "still no room");

        // Room is made: the next tick serves it.
        open.store(300, Ordering::SeqCst);
        f.manager.tick().unwrap();
        let tenant = f.host.get(&f.manager.target(), "team-b").unwrap();
        assert_eq!(tenant["status"]["phase"], "Ready", "{tenant}");
        assert_eq!(status_of(&f, "/tenants/team-b/api/v1/namespaces").await, 200);
    }

    /// `EIO`, on Linux.
    const EIO: i32 = 5;

    async fn request(f: &Fixture, method: &str, path: &str, body: &str) -> (u16, String) {
        let router = clusters_router(f.clusters.clone());
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_owned()))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let code = response.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
        (code, String::from_utf8_lossy(&bytes.to_bytes()).into_owned())
    }

    async fn create_config_map(f: &Fixture, tenant: &str, name: &str) -> (u16, String) {
        let path = format!("/tenants/{tenant}/api/v1/namespaces/default/configmaps");
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        request(f, "POST", &path, &body.to_string()).await
    }

    fn store_condition_of(f: &Fixture, name: &str) -> Value {
        let tenant = f.host.get(&f.manager.target(), name).unwrap();
        let conditions = tenant["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.into_iter().find(|c| c["type"] == STORE_CONDITION).expect("a store condition")
    }

    /// Poll until `path` answers `code`; the deadline only guards against a hang.
    async fn eventually_answers(f: &Fixture, path: &str, code: u16) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let (got, body) = request(f, "GET", path, "").await;
            if got == code {
                return body;
            }
            assert!(std::time::Instant::now() < deadline, "{path} still answers {got}: {body}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_tenant_store_is_reported_and_reopened() {
        use carrel_store::failpoints::{self, Fault, FaultPoint};
        let f = fixture_in(tempfile::tempdir().unwrap());
        create(&f, "team-a", json!({}));
        f.manager.reconcile("team-a").unwrap();
        assert_eq!(store_condition_of(&f, "team-a")["status"], "True");
        assert_eq!(request(&f, "GET", "/tenants/team-a/readyz", "").await, (200, "ok".into()));
        assert_eq!(create_config_map(&f, "team-a", "before").await.0, 201);

        // A sync error: the write is refused and the store fails.
        let store = f.dir.path().join("tenants/team-a/store");
        failpoints::inject(&store, Fault::new(FaultPoint::WalSync, EIO, None));
        let (code, body) = create_config_map(&f, "team-a", "during").await;
        assert_eq!(code, 500, "{body}");
        assert!(body.contains("\"reason\":\"InternalError\""), "{body}");

        let (code, body) = request(&f, "GET", "/tenants/team-a/readyz", "").await;
        assert_eq!(code, 500);
        assert!(body.starts_with("[+]ping ok\n[-]store failed: "), "{body}");
        assert!(body.contains("Input/output error"), "{body}");
        assert!(body.ends_with("readyz check failed\n"), "{body}");
        assert_eq!(request(&f, "GET", "/tenants/team-a/readyz/store", "").await.0, 500);
        // The process (the host's store) is still ready.
        assert_eq!(request(&f, "GET", "/readyz", "").await, (200, "ok".into()));
        let (code, metrics) = request(&f, "GET", "/metrics", "").await;
        assert_eq!(code, 200);
        let failures: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("carrel_store_failures_total "))
            .expect("the failure counter")
            .parse()
            .unwrap();
        assert!(failures >= 1, "{metrics}");
        assert!(metrics.contains("carrel_host_store_failed 0"), "{metrics}");

        f.manager.tick().unwrap();
        let condition = store_condition_of(&f, "team-a");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "StoreFailed");
        assert!(condition["message"].as_str().unwrap().contains("Input/output error"));

        // The cause goes away: the store reopens itself, replaying its log.
        failpoints::clear(&store);
        assert_eq!(eventually_answers(&f, "/tenants/team-a/readyz", 200).await, "ok");
        let path = "/tenants/team-a/api/v1/namespaces/default/configmaps/before";
        assert_eq!(request(&f, "GET", path, "").await.0, 200, "an acknowledged write is kept");
        assert_eq!(create_config_map(&f, "team-a", "after").await.0, 201);
        f.manager.tick().unwrap();
        assert_eq!(store_condition_of(&f, "team-a")["status"], "True");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_passing_store_error_is_a_503_and_the_tenant_stays_ready() {
        use carrel_store::failpoints::{self, Fault, FaultPoint};
        /// `EMFILE`, on Linux.
        const EMFILE: i32 = 24;
        let f = fixture_in(tempfile::tempdir().unwrap());
        create(&f, "team-a", json!({}));
        f.manager.reconcile("team-a").unwrap();
        let store = f.dir.path().join("tenants/team-a/store");
        failpoints::inject(&store, Fault::new(FaultPoint::WalWrite, EMFILE, None));
        let (code, body) = create_config_map(&f, "team-a", "during").await;
        assert_eq!(code, 503, "{body}");
        let status: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["reason"], "ServiceUnavailable");
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert!(status["message"].as_str().unwrap().contains("os error 24"), "{body}");
        assert_eq!(request(&f, "GET", "/tenants/team-a/readyz", "").await, (200, "ok".into()));
        f.manager.tick().unwrap();
        assert_eq!(store_condition_of(&f, "team-a")["status"], "True");

        failpoints::clear(&store);
        assert_eq!(create_config_map(&f, "team-a", "after").await.0, 201);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_failed_host_store_makes_the_process_unready_until_it_reopens() {
        use carrel_store::failpoints::{self, Fault, FaultPoint};
        let f = fixture_in(tempfile::tempdir().unwrap());
        let store = f.dir.path().join("host");
        failpoints::inject(&store, Fault::new(FaultPoint::WalSync, EIO, None));
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}});
        assert_eq!(request(&f, "POST", "/api/v1/namespaces", &body.to_string()).await.0, 500);
        let (code, body) = request(&f, "GET", "/readyz?verbose", "").await;
        assert_eq!(code, 500);
        assert!(body.contains("[-]store failed: "), "{body}");
        let (_, metrics) = request(&f, "GET", "/metrics", "").await;
        assert!(metrics.contains("carrel_host_store_failed 1"), "{metrics}");

        failpoints::clear(&store);
        eventually_answers(&f, "/readyz", 200).await;
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "m"}});
        assert_eq!(request(&f, "POST", "/api/v1/namespaces", &body.to_string()).await.0, 201);
        let (code, body) = request(&f, "GET", "/readyz?verbose", "").await;
        assert_eq!((code, body.as_str()), (200, "[+]ping ok\n[+]store ok\nreadyz check passed\n"));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_expired_tenant_is_deleted_and_a_restart_serves_the_rest_again() {
        let mut f = fixture_in(tempfile::tempdir().unwrap());
        create(&f, "short", json!({"ttl": "1m"}));
        create(&f, "kept", json!({}));
        // Two minutes on, the shortest TTL has passed.
        f.manager.clock = || chrono::Utc::now() + chrono::Duration::minutes(2);
        f.manager.resume().unwrap();
        // The expired tenant is marked for deletion; the next reconcile tears it down.
        f.manager.reconcile("short").unwrap();
        assert_eq!(f.host.get(&f.manager.target(), "short").unwrap_err().code(), 404);
        assert_eq!(f.clusters.names(), vec!["kept".to_owned()]);

        // Something written in the tenant survives a restart of everything.
        let kept = f.clusters.tenant("kept").unwrap();
        let router = crate::http::router(kept);
        let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#;
        let request = Request::post("/tenants/kept/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        assert_eq!(router.oneshot(request).await.unwrap().status().as_u16(), 201);
        let Fixture { dir, host, clusters, manager } = f;
        drop((host, clusters, manager));
        let f = fixture_in(dir);
        f.manager.resume().unwrap();
        assert_eq!(f.clusters.names(), vec!["kept".to_owned()]);
        assert_eq!(
            status_of(&f, "/tenants/kept/api/v1/namespaces/default/configmaps/c").await,
            200
        );
    }

    fn namespaces(f: &Fixture) -> Target<'static> {
        Target { rt: f.manager.rt("namespaces"), namespace: None }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_host_namespace_the_tenant_did_not_create_is_neither_used_nor_deleted() {
        let f = fixture_in(tempfile::tempdir().unwrap());
        // Made beforehand by someone else, one even with the tenant's label, one recording
        // another tenant's UID.
        let theirs = [
            json!({"metadata": {"name": "carrel-x"}}),
            json!({"metadata": {"name": "carrel-y", "labels": {OWNER_LABEL: "y"}}}),
            json!({"metadata": {"name": "carrel-z", "annotations": {OWNER_UID: "not-z"}}}),
        ];
        for ns in theirs {
            f.host.create(&namespaces(&f), ns, &Write::by("someone", false)).unwrap();
        }
        for name in ["x", "y", "z"] {
            create(&f, name, json!({}));
            f.manager.reconcile(name).unwrap();
            let tenant = f.host.get(&f.manager.target(), name).unwrap();
            assert_eq!(tenant["status"]["phase"], "Failed", "{tenant}");
            assert_eq!(tenant["status"]["conditions"][0]["reason"], NOT_OWNED);
            assert_eq!(tenant["status"]["conditions"][0]["status"], "False");
            assert_eq!(status_of(&f, &format!("/tenants/{name}/api/v1/namespaces")).await, 404);
            let secrets =
                Target { rt: f.manager.rt("secrets"), namespace: Some(host_namespace(name)) };
            assert_eq!(f.host.get(&secrets, KUBECONFIG_SECRET).unwrap_err().code(), 404);

            f.host.delete(&f.manager.target(), name, &DeleteParams::default()).unwrap();
            f.manager.reconcile(name).unwrap();
            assert_eq!(f.host.get(&f.manager.target(), name).unwrap_err().code(), 404);
            let ns = f.host.get(&namespaces(&f), &host_namespace(name)).unwrap();
            assert!(!is_deleting(&ns), "{ns}");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_host_namespace_records_its_tenant_and_goes_with_it_only() {
        let f = fixture_in(tempfile::tempdir().unwrap());
        create(&f, "team-a", json!({}));
        f.manager.reconcile("team-a").unwrap();
        let tenant = f.host.get(&f.manager.target(), "team-a").unwrap();
        let ns = f.host.get(&namespaces(&f), "carrel-team-a").unwrap();
        assert_eq!(ns["metadata"]["annotations"][OWNER_UID], tenant["metadata"]["uid"]);
        assert_eq!(ns["metadata"]["labels"][OWNER_LABEL], "team-a");
        // Once the namespace is someone else's (made again under the name), deleting the tenant
        // leaves it.
        f.host.delete(&namespaces(&f), "carrel-team-a", &DeleteParams::default()).unwrap();
        let again =
            json!({"metadata": {"name": "carrel-team-a", "annotations": {OWNER_UID: "other"}}});
        f.host.create(&namespaces(&f), again, &Write::by("someone", false)).unwrap();
        f.host.delete(&f.manager.target(), "team-a", &DeleteParams::default()).unwrap();
        f.manager.reconcile("team-a").unwrap();
        assert_eq!(f.host.get(&f.manager.target(), "team-a").unwrap_err().code(), 404);
        let ns = f.host.get(&namespaces(&f), "carrel-team-a").unwrap();
        assert_eq!(ns["metadata"]["annotations"][OWNER_UID], "other");
    }

    #[test]
    fn expiry_is_always_rfc3339() {
        for (ttl, seconds) in
            [("1ns", 1), ("2562048h", 8760 * 3600), ("99999999h", 8760 * 3600), ("2h", 7200)]
        {
            let tenant = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"ttl": ttl}});
            let expiry = expires_at(&tenant).unwrap();
            let created = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap();
            assert_eq!(
                (expiry - created.with_timezone(&chrono::Utc)).num_seconds(),
                seconds,
                "{ttl}"
            );
            let text = expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            assert!(chrono::DateTime::parse_from_rfc3339(&text).is_ok(), "{text}");
        }
    }

    /// A request to a served tenant's API: the status code and the body.
    async fn send(f: &Fixture, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let router = clusters_router(f.clusters.clone());
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let code = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn config_map(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
               "data": {"d": data}})
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_tenant_spec_limits_bound_what_its_api_stores() {
        let f = fixture_in(tempfile::tempdir().unwrap());
        create(&f, "small", json!({}));
        f.manager.reconcile("small").unwrap();
        let store = f.clusters.tenant("small").unwrap().api().store().clone();
        assert_eq!(
            store.quota(),
            Quota {
                objects: crate::tenant::types::DEFAULT_OBJECT_LIMIT,
                bytes: crate::tenant::types::DEFAULT_BYTES_LIMIT
            },
            "unset limits are the defaults"
        );

        // The admin bounds the tenant to two more objects than its bootstrap holds.
        let held = store.usage().objects;
        let mut tenant = f.host.get(&f.manager.target(), "small").unwrap();
        tenant["spec"]["limits"] = json!({"objects": held + 2});
        f.host
            .update(&f.manager.target(), "small", tenant, None, &Write::by("test", false))
            .unwrap();
        f.manager.reconcile("small").unwrap();
        assert_eq!(store.quota().objects, held + 2);

        let configmaps = "/tenants/small/api/v1/namespaces/default/configmaps";
        for name in ["a", "b"] {
            assert_eq!(send(&f, "POST", configmaps, Some(config_map(name, "x"))).await.0, 201);
        }
        let (code, status) = send(&f, "POST", configmaps, Some(config_map("c", "x"))).await;
        assert_eq!(code, 403);
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(status["code"], 403);
        let limit = held + 2;
        assert_eq!(
            status["message"],
            format!(
                "configmaps \"c\" is forbidden: exceeded quota: tenant-objects, requested: count=1, used: count={limit}, limited: count={limit}"
            )
        );
        assert_eq!(send(&f, "GET", &format!("{configmaps}/c"), None).await.0, 404);
        // Deleting makes room again.
        assert_eq!(send(&f, "DELETE", &format!("{configmaps}/a"), None).await.0, 200);
        assert_eq!(send(&f, "POST", configmaps, Some(config_map("c", "x"))).await.0, 201);

        // A bytes bound: a ConfigMap that would pass it is refused, with the bytes it asked for.
        let usage = store.usage();
        let mut tenant = f.host.get(&f.manager.target(), "small").unwrap();
        tenant["spec"]["limits"] = json!({"bytes": usage.bytes + 1000});
        f.host
            .update(&f.manager.target(), "small", tenant, None, &Write::by("test", false))
            .unwrap();
        f.manager.reconcile("small").unwrap();
        assert_eq!(store.quota().objects, crate::tenant::types::DEFAULT_OBJECT_LIMIT);
        let (code, status) =
            send(&f, "POST", configmaps, Some(config_map("big", &"x".repeat(2000)))).await;
        assert_eq!(code, 403);
        assert_eq!(status["reason"], "Forbidden");
        let message = status["message"].as_str().unwrap();
        let prefix =
            "configmaps \"big\" is forbidden: exceeded quota: tenant-objects, requested: bytes=";
        assert!(message.starts_with(prefix), "{message}");
        assert!(
            message.ends_with(&format!(
                ", used: bytes={}, limited: bytes={}",
                usage.bytes,
                usage.bytes + 1000
            )),
            "{message}"
        );
        assert_eq!(send(&f, "POST", configmaps, Some(config_map("small", "x"))).await.0, 201);
        // Limits the server could not apply are refused when the Tenant is written.
        let bad = json!({"apiVersion": "carrel.dev/v1alpha1", "kind": "Tenant",
                         "metadata": {"name": "bad"}, "spec": {"limits": {"objects": -1, "bytes": "1.5"}}});
        let err = f
            .host
            .create(&Target { rt: &TENANTS, namespace: None }, bad, &Write::by("test", false))
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (422, "Invalid"), "{err:?}");
        let message = err.to_status()["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("spec.limits.objects") && message.contains("spec.limits.bytes"),
            "{message}"
        );
        // The host API is not bounded by any tenant's limits.
        assert_eq!(f.host.store().quota(), Quota::UNLIMITED);
    }
}
