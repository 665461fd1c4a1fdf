//! The API's operations on objects: what kube-apiserver's generic registry does between decoding
//! a request and encoding the answer. Everything here is synchronous (the store blocks on disk);
//! the HTTP layer runs it off the async workers (`block_in_place`, or the blocking pool).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use carrel_store::{Object, Revision, Store};

use crate::admission::policy::{self, Requester};
use crate::admission::Admission;
use crate::crd;
use crate::go_json;
use crate::managed::Owner;
use crate::object::metadata_mut;
pub use crate::registry::core::services::network::ServiceNetwork;
use crate::resource::{Registry, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};

mod bootstrap;
mod create;
mod definitions;
mod delete;
mod namespaces;
mod read;
mod update;

/// The namespaces every cluster starts with.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Which objects a request is about.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    /// The resource type.
    pub rt: &'a ResourceType,
    /// The namespace, for namespaced types (`None` lists across all namespaces).
    pub namespace: Option<String>,
}

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    /// `labelSelector`.
    pub labels: Option<LabelSelector>,
    /// `fieldSelector`.
    pub fields: Option<FieldSelector>,
    /// `limit`.
    pub limit: Option<usize>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion` and `resourceVersionMatch`: which state to list.
    pub version: ListVersion,
}

/// Which state a list shows, as kube-apiserver reads `resourceVersion` and
/// `resourceVersionMatch` (see "Semantics for get and list" in the Kubernetes API concepts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListVersion {
    /// No `resourceVersion`: the most recent state. (A continued list shows its first page's.)
    #[default]
    MostRecent,
    /// `resourceVersion=0`: any state; this server serves the most recent.
    Any,
    /// The most recent state, which must be at least this revision (else 504 Timeout).
    NotOlderThan(Revision),
    /// The state at exactly this revision, from the store's history (410 once compacted).
    Exact(Revision),
}

/// What a LIST read: the selected objects as stored, at one revision.
struct Listed {
    items: Vec<Object>,
    revision: Revision,
    continue_token: Option<String>,
}

impl Listed {
    /// The list's `metadata`: its resourceVersion and continue token.
    fn metadata(&self) -> Value {
        let mut metadata = Map::new();
        metadata.insert("resourceVersion".into(), self.revision.to_string().into());
        if let Some(next) = &self.continue_token {
            metadata.insert("continue".into(), next.clone().into());
        }
        Value::Object(metadata)
    }
}

/// `DeleteOptions`, from the body and the query.
#[derive(Clone, Debug, Default)]
pub struct DeleteParams {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`: Orphan, Background or Foreground.
    pub propagation_policy: Option<String>,
    /// `orphanDependents`, deprecated: true is `propagationPolicy: Orphan`, false `Background`.
    pub orphan_dependents: Option<bool>,
    /// Who deletes, for admission policies.
    pub requester: Requester,
}

impl DeleteParams {
    /// The options a `DeleteOptions` object gives (a DELETE's body, an Eviction's
    /// `deleteOptions`).
    pub fn from_options(options: &Value) -> DeleteParams {
        let string = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        DeleteParams {
            uid: string(options.pointer("/preconditions/uid")),
            resource_version: string(options.pointer("/preconditions/resourceVersion")),
            dry_run: options
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|v| v == "All")),
            grace_period_seconds: options.get("gracePeriodSeconds").and_then(Value::as_i64),
            propagation_policy: string(options.get("propagationPolicy")),
            orphan_dependents: options.get("orphanDependents").and_then(Value::as_bool),
            requester: Requester::default(),
        }
    }
}

/// How a write is made: for real or as a dry run, and by whom.
#[derive(Clone, Debug)]
pub struct Write {
    /// `dryRun=All`: check and answer, store nothing.
    pub dry_run: bool,
    /// Who writes, for `managedFields`.
    pub owner: Owner,
    /// Who writes, for admission policies, and where their warnings go.
    pub requester: Requester,
}

impl Write {
    /// A write by field manager `manager`.
    pub fn by(manager: impl Into<String>, dry_run: bool) -> Write {
        Write { dry_run, owner: Owner::manager(manager), requester: Requester::default() }
    }

    /// A write the server makes on its own (bootstrap objects): not tracked in managedFields.
    pub fn server() -> Write {
        Write { dry_run: false, owner: Owner::Server, requester: Requester::default() }
    }
}

/// Which part of an object an update writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// All but the status (an update of the object).
    Spec,
    /// Only the status (`/status`).
    Status,
    /// Only a pod's ephemeral containers (`/ephemeralcontainers`).
    EphemeralContainers,
    /// Both.
    Whole,
}

/// The API over one store.
#[derive(Debug)]
pub struct Api {
    store: Arc<dyn Store>,
    /// The built-in types, and those of the established CustomResourceDefinitions; replaced
    /// whole after each write of a definition.
    registry: parking_lot::RwLock<Arc<Registry>>,
    /// The built-in types alone.
    pub(crate) base: Registry,
    /// Bumped by every write of an RBAC object, so that authorizers know when to rebuild.
    rbac_generation: std::sync::atomic::AtomicU64,
    /// The cluster's admission check on creates, if any.
    admission: std::sync::OnceLock<Arc<dyn Admission>>,
    /// Held across admission and write for the types the admission counts.
    admission_lock: parking_lot::Mutex<()>,
    /// Held across a definition's name check and its write, so that two definitions written at
    /// once cannot both take one name.
    pub(crate) definitions_lock: parking_lot::Mutex<()>,
    /// Held across a Service's allocation of cluster IPs and node ports and its write.
    pub(crate) services_lock: parking_lot::Mutex<()>,
    /// The cluster IPs and node ports Services are given.
    pub(crate) service_network: ServiceNetwork,
    /// The compiled types of the stored definitions, compiled once per change of each.
    pub(crate) compiled: crd::Compiled,
    /// The ValidatingAdmissionPolicies and bindings, compiled once per change of either.
    pub(crate) policies: policy::Cache,
    /// The admission webhooks, read once per change of their configurations.
    pub(crate) webhooks: crate::admission::webhook::Cache,
}

/// A parsed `resourceVersion` (opaque to clients, a store revision to us).
pub fn parse_resource_version(rv: &str) -> ApiResult<Revision> {
    rv.parse::<Revision>().map_err(|_| {
        ApiError::bad_request(format!("invalid resourceVersion {rv:?}: not one this server issued"))
    })
}

impl crate::flowcontrol::ObjectCount for Api {
    fn objects(&self) -> u64 {
        self.store.usage().objects
    }
}

impl Api {
    /// A tenant's cluster API over `store`, with what every cluster starts with (the system
    /// namespaces, the default RBAC policy) created if missing, in one store write.
    pub fn new(store: Arc<dyn Store>) -> ApiResult<Api> {
        Api::new_in(store, ServiceNetwork::default())
    }

    /// [`Api::new`], its Services given addresses of `network` (its `kubernetes` Service the
    /// first, its `kube-system/kube-dns` the tenth).
    pub fn new_in(store: Arc<dyn Store>, network: ServiceNetwork) -> ApiResult<Api> {
        Api::with_registry(store, Registry::default(), network)
    }

    /// Whether the API's store accepts writes (for `/readyz` and the `Tenant` status).
    pub fn store_health(&self) -> carrel_store::Health {
        self.store.health()
    }

    /// The host API over `store`: a cluster that also serves `Tenant`s.
    pub fn host(store: Arc<dyn Store>) -> ApiResult<Api> {
        Api::host_in(store, ServiceNetwork::default())
    }

    /// [`Api::host`], its Services given addresses of `network`.
    pub fn host_in(store: Arc<dyn Store>, network: ServiceNetwork) -> ApiResult<Api> {
        Api::with_registry(store, Registry::host(), network)
    }

    fn with_registry(
        store: Arc<dyn Store>,
        registry: Registry,
        service_network: ServiceNetwork,
    ) -> ApiResult<Api> {
        let api = Api {
            store,
            registry: parking_lot::RwLock::new(Arc::new(registry.clone())),
            base: registry,
            rbac_generation: Default::default(),
            admission: Default::default(),
            admission_lock: Default::default(),
            definitions_lock: Default::default(),
            services_lock: Default::default(),
            service_network,
            compiled: Default::default(),
            policies: Default::default(),
            webhooks: Default::default(),
        };
        api.bootstrap()?;
        api.reload_definitions()?;
        Ok(api)
    }

    /// Check every create with `admission` from now on. Only the first call has an effect.
    pub fn set_admission(&self, admission: Arc<dyn Admission>) {
        let _ = self.admission.set(admission);
    }

    /// The served types, as of now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.read().clone()
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A number that changes whenever an RBAC object (role, binding) has been written.
    pub fn rbac_generation(&self) -> u64 {
        self.rbac_generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Note a write of an object of `rt`: what its kind does after a write
    /// ([`crate::registry::Strategy::after_write`]). `aggregate` is false for the server's own
    /// writes.
    fn wrote(&self, rt: &ResourceType, aggregate: bool) -> ApiResult<()> {
        rt.strategy.after_write(self, rt, aggregate)
    }

    /// Note a write of an RBAC object.
    pub(crate) fn rbac_changed(&self) {
        self.rbac_generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn rt(&self, group: &str, plural: &str) -> &ResourceType {
        self.base
            .all()
            .iter()
            .find(|t| t.group == group && t.plural == plural && t.is_storage_version())
            .expect("built-in type")
    }

    /// The key of an object and the object as stored; 404 if there is none.
    fn stored(&self, target: &Target<'_>, name: &str) -> ApiResult<(String, Object)> {
        let rt = target.rt;
        let key = key_for(rt, target.namespace.as_deref(), name);
        match self.store.get(&key).map_err(internal)? {
            Some(object) => Ok((key, object)),
            None => Err(ApiError::not_found(rt.group, rt.plural, name)),
        }
    }
}

impl Api {
    /// A stored object as `rt`'s version shows it.
    fn shown(&self, rt: &ResourceType, object: &Object) -> ApiResult<Value> {
        self.present(rt, decode(object)?, object.mod_revision)
    }

    /// A stored object, decoded, as `rt`'s version shows it (written at `revision`): a custom
    /// resource in the version asked for (converted by its definition's webhook where it has
    /// one), with the defaults of its schema; a built-in kind's object converted from its
    /// storage version.
    pub fn present(
        &self,
        rt: &ResourceType,
        object: Value,
        revision: Revision,
    ) -> ApiResult<Value> {
        let object = match crd::conversion_webhook(rt) {
            Some(hook) => {
                let converted =
                    crd::conversion::convert(self, rt, hook, vec![object], &rt.group_version())?;
                converted.into_iter().next().expect("one object in, one out")
            }
            None => object,
        };
        Ok(in_version(rt, object, revision))
    }

    /// [`Api::present`] for many objects, those a webhook converts converted in one call.
    pub fn present_all(
        &self,
        rt: &ResourceType,
        objects: Vec<(Value, Revision)>,
    ) -> ApiResult<Vec<Value>> {
        let objects = match crd::conversion_webhook(rt) {
            Some(hook) => {
                let (values, revisions): (Vec<Value>, Vec<Revision>) = objects.into_iter().unzip();
                let converted =
                    crd::conversion::convert(self, rt, hook, values, &rt.group_version())?;
                converted.into_iter().zip(revisions).collect()
            }
            None => objects,
        };
        Ok(objects.into_iter().map(|(object, revision)| in_version(rt, object, revision)).collect())
    }

    /// An object as stored: a custom resource in its definition's storage version (converted
    /// by its webhook where it has one), a built-in kind's object converted to its storage
    /// version.
    fn encode_stored(&self, rt: &ResourceType, object: &Value) -> ApiResult<Bytes> {
        match (&rt.custom, crd::conversion_webhook(rt)) {
            (Some(custom), Some(hook)) if custom.storage_version != rt.version => {
                let to = crd::storage_api_version(rt, custom);
                let mut stored =
                    crd::conversion::convert(self, rt, hook, vec![object.clone()], &to)?;
                encode(&stored.pop().expect("one object in, one out"))
            }
            _ => encode_stored(rt, object),
        }
    }
}

/// A stored object, decoded and in `rt`'s version already where a webhook converts its kind, as
/// `rt` shows it: a custom resource's `apiVersion` and schema defaults, a built-in kind's object
/// converted from its storage version.
fn in_version(rt: &ResourceType, object: Value, revision: Revision) -> Value {
    let mut object = crd::present(rt, object, revision);
    if rt.custom.is_none() && !rt.is_storage_version() {
        rt.strategy.convert_from_storage(&mut object);
    }
    object
}

/// The kind of `rt`'s lists.
fn list_kind(rt: &ResourceType) -> String {
    match &rt.custom {
        Some(custom) => custom.list_kind.to_owned(),
        None => format!("{}List", rt.kind),
    }
}

/// An object as stored: a custom resource in its definition's storage version, a built-in kind's
/// object converted to its storage version.
fn encode_stored(rt: &ResourceType, object: &Value) -> ApiResult<Bytes> {
    match &rt.custom {
        Some(custom) if custom.storage_version != rt.version => {
            let mut stored = object.clone();
            stored["apiVersion"] = crd::storage_api_version(rt, custom).into();
            encode(&stored)
        }
        None if !rt.is_storage_version() => {
            let mut stored = object.clone();
            rt.strategy.convert_to_storage(&mut stored);
            encode(&stored)
        }
        _ => encode(object),
    }
}

/// The body must be an object of the right kind and apiVersion, when those are given.
pub fn check_type(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    let Some(root) = object.as_object() else {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    };
    if let Some(kind) = root.get("kind") {
        if kind.as_str() != Some(rt.kind) {
            return Err(ApiError::bad_request(format!(
                "the kind of the object ({}) does not match the kind of the resource ({})",
                kind.as_str().unwrap_or("?"),
                rt.kind
            )));
        }
    }
    if let Some(api_version) = root.get("apiVersion") {
        if api_version.as_str() != Some(rt.group_version().as_str()) {
            return Err(ApiError::bad_request(format!(
                "the API version of the object ({}) does not match the API version of the resource ({})",
                api_version.as_str().unwrap_or("?"),
                rt.group_version()
            )));
        }
    }
    if root.get("metadata").is_some_and(|m| !m.is_object()) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    Ok(())
}

fn group_segment(rt: &ResourceType) -> &str {
    if rt.group.is_empty() {
        "core"
    } else {
        rt.group
    }
}

/// The store key of an object.
pub fn key_for(rt: &ResourceType, namespace: Option<&str>, name: &str) -> String {
    match namespace.filter(|_| rt.namespaced) {
        Some(ns) => format!("/{}/{}/{ns}/{name}", group_segment(rt), rt.plural),
        None => format!("/{}/{}/{name}", group_segment(rt), rt.plural),
    }
}

/// The store prefix of a list.
pub fn prefix_for(rt: &ResourceType, namespace: Option<&str>) -> String {
    match namespace.filter(|_| rt.namespaced) {
        Some(ns) => format!("/{}/{}/{ns}/", group_segment(rt), rt.plural),
        None => format!("/{}/{}/", group_segment(rt), rt.plural),
    }
}

/// A stored object as the API shows it: with its `resourceVersion`.
pub fn decode(object: &Object) -> ApiResult<Value> {
    let mut value: Value = serde_json::from_slice(&object.value).map_err(|e| {
        ApiError::internal(format!("stored object {} is unreadable: {e}", object.key))
    })?;
    metadata_mut(&mut value)
        .insert("resourceVersion".into(), object.mod_revision.to_string().into());
    Ok(value)
}

/// A stored event's object as the API shows it.
pub fn decode_event_object(event: &carrel_store::Event) -> ApiResult<Value> {
    decode(&event.object())
}

/// An object as stored: as kube-apiserver writes it ([`go_json`]), without its
/// `resourceVersion` (the store's revision is the version).
pub(crate) fn encode(object: &Value) -> ApiResult<Bytes> {
    let encoded = if object.pointer("/metadata/resourceVersion").is_some() {
        let mut stored = object.clone();
        metadata_mut(&mut stored).remove("resourceVersion");
        go_json::to_vec(&stored)
    } else {
        go_json::to_vec(object)
    };
    Ok(Bytes::from(encoded))
}

/// The object just written, as the API shows it: with the write's revision.
pub(crate) fn written(mut object: Value, stored: &Object) -> Value {
    metadata_mut(&mut object)
        .insert("resourceVersion".into(), stored.mod_revision.to_string().into());
    object
}

fn internal(e: carrel_store::Error) -> ApiError {
    match e {
        // 503, as for every request that meets it.
        e @ carrel_store::Error::Unavailable(_) => ApiError::from_store(e, "", "", ""),
        e => ApiError::internal(format!("storage error: {e}")),
    }
}

/// An API over a new store in a temporary directory, which must outlive it: what unit tests
/// start from.
#[cfg(test)]
pub(crate) fn scratch() -> (tempfile::TempDir, Api) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store =
        carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
            .expect("a store");
    (dir, Api::new(Arc::new(store)).expect("an API"))
}

#[cfg(test)]
mod tests;
