//! The API's operations on objects: what kube-apiserver's generic registry does between decoding
//! a request and encoding the answer. Everything here is synchronous (the store blocks on disk);
//! the HTTP layer runs it off the async workers (`block_in_place`, or the blocking pool).

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use carrel_store::{ListOptions as StoreListOptions, Object, Revision, Store, Watch};

use crate::admission::Admission;
use crate::crd;
use crate::defaults;
use crate::managed::{self, Owner};
use crate::names::{self, NameRule};
use crate::object::{
    self, finalizers, is_deleting, meta_str, metadata_mut, now_rfc3339, spec_part,
};
use crate::resource::{Registry, ResourceType, Subresource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, Cause};

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
}

/// How a write is made: for real or as a dry run, and by whom.
#[derive(Clone, Debug)]
pub struct Write {
    /// `dryRun=All`: check and answer, store nothing.
    pub dry_run: bool,
    /// Who writes, for `managedFields`.
    pub owner: Owner,
}

impl Write {
    /// A write by field manager `manager`.
    pub fn by(manager: impl Into<String>, dry_run: bool) -> Write {
        Write { dry_run, owner: Owner::manager(manager) }
    }

    /// A write the server makes on its own (bootstrap objects): not tracked in managedFields.
    pub fn server() -> Write {
        Write { dry_run: false, owner: Owner::Server }
    }
}

/// Which part of an object an update writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// All but the status (an update of the object).
    Spec,
    /// Only the status (`/status`).
    Status,
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
    base: Registry,
    /// Bumped by every write of an RBAC object, so that authorizers know when to rebuild.
    rbac_generation: std::sync::atomic::AtomicU64,
    /// The cluster's admission check on creates, if any.
    admission: std::sync::OnceLock<Arc<dyn Admission>>,
    /// Held across admission and write for the types the admission counts.
    admission_lock: parking_lot::Mutex<()>,
    /// Held across a definition's name check and its write, so that two definitions written at
    /// once cannot both take one name.
    definitions_lock: parking_lot::Mutex<()>,
    /// The compiled types of the stored definitions, compiled once per change of each.
    compiled: crd::Compiled,
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
    /// A tenant's cluster API over `store`, with the system namespaces created if missing.
    pub fn new(store: Arc<dyn Store>) -> ApiResult<Api> {
        Api::with_registry(store, Registry::default())
    }

    /// Whether the API's store accepts writes (for `/readyz` and the `Tenant` status).
    pub fn store_health(&self) -> carrel_store::Health {
        self.store.health()
    }

    /// The host API over `store`: a cluster that also serves `Tenant`s.
    pub fn host(store: Arc<dyn Store>) -> ApiResult<Api> {
        Api::with_registry(store, Registry::host())
    }

    fn with_registry(store: Arc<dyn Store>, registry: Registry) -> ApiResult<Api> {
        let api = Api {
            store,
            registry: parking_lot::RwLock::new(Arc::new(registry.clone())),
            base: registry,
            rbac_generation: Default::default(),
            admission: Default::default(),
            admission_lock: Default::default(),
            definitions_lock: Default::default(),
            compiled: Default::default(),
        };
        let namespaces = api.rt("", "namespaces");
        for ns in SYSTEM_NAMESPACES {
            let key = key_for(namespaces, None, ns);
            if api.store.get(&key).map_err(internal)?.is_none() {
                let body =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
                match api.create(
                    &Target { rt: namespaces, namespace: None },
                    body,
                    &Write::server(),
                ) {
                    Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        api.bootstrap_rbac()?;
        api.reload_definitions()?;
        Ok(api)
    }

    /// Kubernetes' default ClusterRoles and ClusterRoleBindings, created when missing (an
    /// administrator's changes to existing ones are kept).
    fn bootstrap_rbac(&self) -> ApiResult<()> {
        let encode = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| ApiError::internal(format!("encoding the bootstrap policy: {e}")))
        };
        let roles = crate::rbac::bootstrap::cluster_roles()
            .into_iter()
            .map(|r| encode(serde_json::to_value(r)))
            .collect::<ApiResult<Vec<Value>>>()?;
        let bindings = crate::rbac::bootstrap::cluster_role_bindings()
            .into_iter()
            .map(|b| encode(serde_json::to_value(b)))
            .collect::<ApiResult<Vec<Value>>>()?;
        for (plural, objects) in [("clusterroles", roles), ("clusterrolebindings", bindings)] {
            let rt = self.rt("rbac.authorization.k8s.io", plural);
            let target = Target { rt, namespace: None };
            for object in objects {
                let name = meta_str(&object, "name").unwrap_or_default().to_owned();
                if self.store.get(&key_for(rt, None, &name)).map_err(internal)?.is_some() {
                    continue;
                }
                match self.create(&target, object, &Write::server()) {
                    Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.aggregate_cluster_roles()
    }

    /// Check every create with `admission` from now on. Only the first call has an effect.
    pub fn set_admission(&self, admission: Arc<dyn Admission>) {
        let _ = self.admission.set(admission);
    }

    /// The served types, as of now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.read().clone()
    }

    /// Serve the types of the established CustomResourceDefinitions stored, beside the
    /// built-in ones.
    fn reload_definitions(&self) -> ApiResult<()> {
        // Read and swap under the write lock: a reload that read the store earlier can never
        // replace one that read it later.
        let mut served = self.registry.write();
        let definitions = self.rt(crd::GROUP, "customresourcedefinitions");
        let page = self
            .store
            .list(&prefix_for(definitions, None), &StoreListOptions::default())
            .map_err(internal)?;
        let custom = self.compiled.types(&page.items, decode)?;
        *served = Arc::new(self.base.with_extra(&custom));
        Ok(())
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A number that changes whenever an RBAC object (role, binding) has been written.
    pub fn rbac_generation(&self) -> u64 {
        self.rbac_generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Note a write of an object of `rt`; a ClusterRole write re-aggregates the aggregated
    /// ClusterRoles (when `aggregate`), as kube-controller-manager's aggregation controller
    /// does. The server's own writes do not: the bootstrap aggregates once when it is done, and
    /// the aggregation's own updates need no second pass.
    fn wrote(&self, rt: &ResourceType, aggregate: bool) -> ApiResult<()> {
        if is_definitions(rt) {
            self.reload_definitions()?;
        }
        if let Some(custom) = rt.custom.as_ref().filter(|c| c.terminating) {
            self.finish_definition(&custom.definition)?;
        }
        if rt.group == "rbac.authorization.k8s.io" {
            self.rbac_generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            if aggregate && rt.plural == "clusterroles" {
                self.aggregate_cluster_roles()?;
            }
        }
        Ok(())
    }

    /// Store the rules of every aggregated ClusterRole whose labelled parts changed.
    fn aggregate_cluster_roles(&self) -> ApiResult<()> {
        let rt = self.rt("rbac.authorization.k8s.io", "clusterroles");
        let target = Target { rt, namespace: None };
        let listed = self.list(&target, &ListParams::default())?;
        let roles: Vec<k8s_openapi::api::rbac::v1::ClusterRole> = listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| serde_json::from_value(r.clone()).ok())
            .collect();
        for changed in crate::rbac::aggregate(&roles) {
            let name = changed.metadata.name.clone().unwrap_or_default();
            let mut current = self.get(&target, &name)?;
            current["rules"] = serde_json::to_value(&changed.rules)
                .map_err(|e| ApiError::internal(format!("encoding aggregated rules: {e}")))?;
            match self.update(&target, &name, current, None, &Write::server()) {
                // A concurrent write of the role: it aggregates again itself.
                Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn rt(&self, group: &str, plural: &str) -> &ResourceType {
        self.base
            .all()
            .iter()
            .find(|t| t.group == group && t.plural == plural)
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

    /// GET one object.
    pub fn get(&self, target: &Target<'_>, name: &str) -> ApiResult<Value> {
        shown(target.rt, &self.stored(target, name)?.1)
    }

    /// GET one object as JSON bytes, without decoding and re-encoding it.
    pub fn get_json(&self, target: &Target<'_>, name: &str) -> ApiResult<Vec<u8>> {
        let (_, object) = self.stored(target, name)?;
        let spliced = crd::shown_as_stored(target.rt, &object.value, object.mod_revision)
            .then(|| object::splice_resource_version(&object.value, object.mod_revision))
            .flatten();
        match spliced {
            Some(bytes) => Ok(bytes),
            None => serde_json::to_vec(&shown(target.rt, &object)?)
                .map_err(|e| ApiError::internal(format!("cannot encode object: {e}"))),
        }
    }

    /// LIST, as a `<Kind>List`.
    pub fn list(&self, target: &Target<'_>, params: &ListParams) -> ApiResult<Value> {
        let listed = self.list_objects(target, params)?;
        let rt = target.rt;
        let items = listed.items.iter().map(|o| shown(rt, o)).collect::<ApiResult<Vec<Value>>>()?;
        Ok(json!({
            "kind": list_kind(rt),
            "apiVersion": target.rt.group_version(),
            "metadata": listed.metadata(),
            "items": items,
        }))
    }

    /// LIST, as a `<Kind>List` in JSON bytes, built from the stored bytes of the items without
    /// decoding and re-encoding them (a selector still decodes each candidate to test it).
    pub fn list_json(&self, target: &Target<'_>, params: &ListParams) -> ApiResult<Vec<u8>> {
        let listed = self.list_objects(target, params)?;
        let size: usize = listed.items.iter().map(|o| o.value.len() + 32).sum();
        let mut out = Vec::with_capacity(size + 256);
        let head = json!({
            "kind": list_kind(target.rt),
            "apiVersion": target.rt.group_version(),
            "metadata": listed.metadata(),
        });
        let head = serde_json::to_vec(&head)
            .map_err(|e| ApiError::internal(format!("cannot encode list: {e}")))?;
        out.extend_from_slice(&head[..head.len() - 1]);
        out.extend_from_slice(b",\"items\":[");
        for (i, object) in listed.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let spliced = crd::shown_as_stored(target.rt, &object.value, object.mod_revision)
                .then(|| object::splice_resource_version(&object.value, object.mod_revision))
                .flatten();
            match spliced {
                Some(bytes) => out.extend_from_slice(&bytes),
                None => out.extend_from_slice(
                    &serde_json::to_vec(&shown(target.rt, object)?)
                        .map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))?,
                ),
            }
        }
        out.extend_from_slice(b"]}");
        Ok(out)
    }

    /// The stored objects a LIST selects, with the revision it was read at.
    fn list_objects(&self, target: &Target<'_>, params: &ListParams) -> ApiResult<Listed> {
        if let Some(fields) = &params.fields {
            fields.check_supported(target.rt.group, target.rt.plural)?;
        }
        let prefix = prefix_for(target.rt, target.namespace.as_deref());
        let filtering = params.labels.as_ref().is_some_and(|l| !l.is_everything())
            || params.fields.as_ref().is_some_and(|f| !f.is_everything());
        let (exact, minimum) = match params.version {
            ListVersion::MostRecent | ListVersion::Any => (None, None),
            ListVersion::NotOlderThan(revision) => (None, Some(revision)),
            ListVersion::Exact(revision) => (Some(revision), None),
        };
        // kube-apiserver's answer to a revision it has not reached
        // (storage.NewTooLargeResourceVersionError).
        let too_large = |requested: Revision, current: Revision| ApiError::Timeout {
            message: format!(
                "Timeout: Too large resource version: {requested}, current: {current}"
            ),
            causes: vec![Cause::new("ResourceVersionTooLarge", "", "Too large resource version")],
            retry_after: Some(1),
        };
        let store_error = |e: carrel_store::Error| match e {
            carrel_store::Error::Expired { .. } if params.continue_token.is_some() => {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter.",
                )
            }
            carrel_store::Error::Expired { .. } => {
                ApiError::expired("The resourceVersion for the provided list is too old.")
            }
            carrel_store::Error::FutureRevision { requested, current } => {
                too_large(requested, current)
            }
            e => ApiError::from_store(e, target.rt.group, target.rt.plural, ""),
        };
        let mut items = Vec::new();
        let mut token = params.continue_token.clone();
        let revision;
        let next;
        // With a selector, keep reading pages until `limit` matches are found (as the watch
        // cache does) so that `limit` bounds the answer, not the scan. Every page is read at the
        // first one's revision, which the continue token carries.
        loop {
            let page = self
                .store
                .list(
                    &prefix,
                    &StoreListOptions {
                        limit: params.limit.map(|l| l.saturating_sub(items.len()).max(1)),
                        continue_token: token.clone(),
                        revision: exact.filter(|_| token.is_none()),
                    },
                )
                .map_err(store_error)?;
            for object in page.items {
                if !filtering || self.selected(target.rt, &decode(&object)?, params) {
                    items.push(object);
                }
            }
            let full = params.limit.is_some_and(|l| items.len() >= l);
            if page.continue_token.is_none() || full || !filtering {
                revision = page.revision;
                next = page.continue_token;
                break;
            }
            token = page.continue_token;
        }
        if let Some(minimum) = minimum.filter(|m| *m > revision) {
            return Err(too_large(minimum, revision));
        }
        Ok(Listed { items, revision, continue_token: next })
    }

    /// Whether an object passes a list's selectors.
    pub fn selected(&self, rt: &ResourceType, object: &Value, params: &ListParams) -> bool {
        params.labels.as_ref().is_none_or(|l| l.matches_object(object))
            && params.fields.as_ref().is_none_or(|f| f.matches(rt.group, rt.plural, object))
    }

    /// WATCH from `after`: the store's stream of changes under the target's prefix.
    pub fn watch(&self, target: &Target<'_>, after: Revision) -> ApiResult<Watch> {
        let prefix = prefix_for(target.rt, target.namespace.as_deref());
        self.store
            .watch(&prefix, after)
            .map_err(|e| ApiError::from_store(e, target.rt.group, target.rt.plural, ""))
    }

    /// The newest revision.
    pub fn current_revision(&self) -> Revision {
        self.store.current_revision()
    }

    fn check_namespace(&self, target: &Target<'_>, object: &Value) -> ApiResult<String> {
        let rt = target.rt;
        let url_ns = target.namespace.clone().unwrap_or_default();
        let body_ns = meta_str(object, "namespace").unwrap_or_default();
        if !rt.namespaced {
            return Ok(String::new());
        }
        if !body_ns.is_empty() && body_ns != url_ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let namespaces = self.rt("", "namespaces");
        let ns = self
            .store
            .get(&key_for(namespaces, None, &url_ns))
            .map_err(internal)?
            .ok_or_else(|| ApiError::not_found("", "namespaces", &url_ns))?;
        if is_deleting(&decode(&ns)?) {
            return Err(ApiError::forbidden(
                rt.group,
                rt.plural,
                meta_str(object, "name").unwrap_or_default(),
                &format!(
                    "unable to create new content in namespace {url_ns} because it is being terminated"
                ),
            ));
        }
        Ok(url_ns)
    }

    /// CREATE.
    pub fn create(
        &self,
        target: &Target<'_>,
        mut object: Value,
        write: &Write,
    ) -> ApiResult<Value> {
        let rt = target.rt;
        check_type(rt, &object)?;
        if rt.custom.as_ref().is_some_and(|c| c.terminating) {
            return Err(ApiError::method_not_allowed(format!(
                "create not allowed while custom resource definition is terminating: {}.{}",
                rt.plural, rt.group
            )));
        }
        let namespace = self.check_namespace(target, &object)?;
        let rule = NameRule::for_resource(rt.group, rt.plural);
        let name = match meta_str(&object, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => match meta_str(&object, "generateName").filter(|n| !n.is_empty()) {
                Some(prefix) => names::generate(prefix, rule),
                None => {
                    return Err(ApiError::invalid(
                        rt.group,
                        rt.kind,
                        "",
                        vec![Cause::new(
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )],
                    ))
                }
            },
        };
        let problems = rule.check(&name);
        if !problems.is_empty() {
            let causes = problems
                .into_iter()
                .map(|p| {
                    Cause::new(
                        "FieldValueInvalid",
                        "metadata.name",
                        format!("Invalid value: \"{name}\": {p}"),
                    )
                })
                .collect();
            return Err(ApiError::invalid(rt.group, rt.kind, &name, causes));
        }

        {
            let root = object.as_object_mut().expect("checked by check_type");
            root.insert("apiVersion".into(), rt.group_version().into());
            root.insert("kind".into(), rt.kind.into());
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), name.clone().into());
        if rt.namespaced {
            meta.insert("namespace".into(), namespace.clone().into());
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
        meta.insert("creationTimestamp".into(), now_rfc3339().into());
        for field in
            ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"]
        {
            meta.remove(field);
        }
        if rt.has(Subresource::Status) || rt.is_custom() {
            meta.insert("generation".into(), 1.into());
        } else {
            meta.remove("generation");
        }
        object::normalize_metadata(&mut object);
        self.admit(rt, None, &mut object)?;
        let _definitions = is_definitions(rt).then(|| self.definitions_lock.lock());
        if is_definitions(rt) {
            let others = self.definitions_except(&name)?;
            crd::limits::check_room(&object, &others)?;
            self.compiled.intern_names(&object)?;
            object["status"] = crd::status_of(&object, None, &others)?;
        }
        managed::record_update(rt, None, &mut object, &write.owner);

        let key =
            key_for(rt, Some(&namespace).filter(|_| rt.namespaced).map(|s| s.as_str()), &name);
        let admission = self.admission.get();
        let _serial = admission.filter(|a| a.serialized(rt)).map(|_| self.admission_lock.lock());
        if let Some(admission) = admission {
            admission.admit_create(self, rt, &object)?;
        }
        if write.dry_run {
            if self.store.get(&key).map_err(internal)?.is_some() {
                return Err(ApiError::already_exists(rt.group, rt.plural, &name));
            }
            // As kube-apiserver's quota admission, a dry run is refused what the create would be.
            let used = self.store.usage();
            let after = used.with_created(&key, &encode_stored(rt, &object)?);
            self.store
                .quota()
                .check(used, after, true)
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
            return Ok(object);
        }
        let stored = self
            .store
            .create(&key, encode_stored(rt, &object)?)
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, &name))?;
        self.wrote(rt, !matches!(write.owner, Owner::Server))?;
        if rt.group.is_empty() && rt.plural == "namespaces" {
            self.bootstrap_namespace(&name)?;
        }
        Ok(written(object, &stored))
    }

    /// The checks and defaults of a write: a custom resource's schema, or a built-in kind's
    /// typed decoding, defaults and validation (and a definition's own rules).
    fn admit(&self, rt: &ResourceType, old: Option<&Value>, object: &mut Value) -> ApiResult<()> {
        if let Some(custom) = &rt.custom {
            return crd::admit(rt, custom, old, object);
        }
        check_types(rt, object)?;
        match old {
            None => defaults::on_create(rt, object),
            Some(old) => defaults::on_update(rt, old, object)?,
        }
        defaults::validate(rt, object)?;
        if is_definitions(rt) {
            crd::validate(object, old, &self.base)?;
        }
        Ok(())
    }

    /// The stored definitions other than `name`.
    fn definitions_except(&self, name: &str) -> ApiResult<Vec<Value>> {
        let rt = self.rt(crd::GROUP, "customresourcedefinitions");
        let page = self
            .store
            .list(&prefix_for(rt, None), &StoreListOptions::default())
            .map_err(internal)?;
        page.items
            .iter()
            .map(decode)
            .filter(|o| o.as_ref().map_or(true, |o| meta_str(o, "name") != Some(name)))
            .collect()
    }

    /// DELETE a definition: it is marked Terminating (no new objects), its objects are deleted,
    /// and it goes once the last of them is gone (objects with finalizers are only marked, and
    /// the definition stays until their finalizers are removed).
    fn delete_definition(
        &self,
        key: &str,
        name: &str,
        old: Value,
        params: &DeleteParams,
    ) -> ApiResult<Value> {
        let rt = self.rt(crd::GROUP, "customresourcedefinitions");
        if !is_deleting(&old) {
            let mut marked = old.clone();
            metadata_mut(&mut marked).insert(
                "deletionGracePeriodSeconds".into(),
                params.grace_period_seconds.unwrap_or(0).into(),
            );
            crd::mark_terminating(&mut marked);
            let revision =
                parse_resource_version(meta_str(&old, "resourceVersion").unwrap_or("0"))?;
            self.store
                .update_to_delete(key, encode(&marked)?, Some(revision))
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
            self.reload_definitions()?;
        }
        let last = self.finish_definition(name)?;
        match self.store.get(key).map_err(internal)? {
            Some(still) => decode(&still),
            None => Ok(last.unwrap_or(old)),
        }
    }

    /// Delete the objects of a terminating definition, and the definition once none is left;
    /// the definition as it was last, if it went.
    fn finish_definition(&self, name: &str) -> ApiResult<Option<Value>> {
        let definitions = self.rt(crd::GROUP, "customresourcedefinitions");
        let key = key_for(definitions, None, name);
        let Some(current) = self.store.get(&key).map_err(internal)? else { return Ok(None) };
        let definition = decode(&current)?;
        if !is_deleting(&definition) {
            return Ok(None);
        }
        let registry = self.registry();
        let types =
            registry.all().iter().find(|t| t.custom.as_ref().is_some_and(|c| c.definition == name));
        let mut left = 0;
        if let Some(rt) = types {
            let page = self
                .store
                .list(&prefix_for(rt, None), &StoreListOptions::default())
                .map_err(internal)?;
            for object in page.items {
                let value = decode(&object)?;
                if !finalizers(&value).is_empty() {
                    left += 1;
                    if !is_deleting(&value) {
                        let target = Target {
                            rt,
                            namespace: meta_str(&value, "namespace").map(str::to_owned),
                        };
                        let object_name = meta_str(&value, "name").unwrap_or_default().to_owned();
                        match self.delete(&target, &object_name, &DeleteParams::default()) {
                            Ok(_)
                            | Err(
                                ApiError::NotFound { .. }
                                | ApiError::AlreadyExists { .. }
                                | ApiError::Conflict { .. },
                            ) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    continue;
                }
                match self.store.delete(&object.key, Some(object.mod_revision)) {
                    Ok(_) | Err(carrel_store::Error::NotFound { .. }) => {}
                    Err(carrel_store::Error::Conflict { .. }) => left += 1,
                    Err(e) => return Err(internal(e)),
                }
            }
        }
        if left > 0 || !finalizers(&definition).is_empty() {
            return Ok(None);
        }
        let gone = self
            .store
            .delete(&key, Some(current.mod_revision))
            .map_err(|e| ApiError::from_store(e, definitions.group, definitions.plural, name))?;
        self.reload_definitions()?;
        let mut last = definition;
        metadata_mut(&mut last)
            .insert("resourceVersion".into(), gone.mod_revision.to_string().into());
        Ok(Some(last))
    }

    /// Every namespace gets a `default` ServiceAccount.
    fn bootstrap_namespace(&self, namespace: &str) -> ApiResult<()> {
        let sa = self.rt("", "serviceaccounts");
        let body =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}});
        let target = Target { rt: sa, namespace: Some(namespace.into()) };
        match self.create(&target, body, &Write::server()) {
            Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// UPDATE (PUT), of the object or of its status.
    pub fn update(
        &self,
        target: &Target<'_>,
        name: &str,
        object: Value,
        subresource: Option<Subresource>,
        write: &Write,
    ) -> ApiResult<Value> {
        let part = match subresource {
            Some(Subresource::Status) => Part::Status,
            _ => Part::Spec,
        };
        self.update_part(target, name, object, part, write)
    }

    /// UPDATE of the object and its status in one write, for the server's own writes that
    /// Kubernetes makes atomically (a binding sets the node and the PodScheduled condition).
    pub fn update_with_status(
        &self,
        target: &Target<'_>,
        name: &str,
        object: Value,
        write: &Write,
    ) -> ApiResult<Value> {
        self.update_part(target, name, object, Part::Whole, write)
    }

    fn update_part(
        &self,
        target: &Target<'_>,
        name: &str,
        mut object: Value,
        part: Part,
        write: &Write,
    ) -> ApiResult<Value> {
        let dry_run = write.dry_run;
        let rt = target.rt;
        check_type(rt, &object)?;
        let body_name = meta_str(&object, "name").unwrap_or_default();
        if body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced {
            let body_ns = meta_str(&object, "namespace").unwrap_or_default();
            if !body_ns.is_empty() && Some(body_ns) != target.namespace.as_deref() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        let expected = match meta_str(&object, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(rv) => Some(parse_resource_version(rv)?),
            None => None,
        };
        let (key, current) = self.stored(target, name)?;
        if let Some(expected) = expected {
            if expected != current.mod_revision {
                return Err(ApiError::from_store(
                    carrel_store::Error::Conflict { key, expected, actual: current.mod_revision },
                    rt.group,
                    rt.plural,
                    name,
                ));
            }
        }
        let old = shown(rt, &current)?;
        let mut new = match part {
            Part::Whole => object,
            Part::Status => {
                // Only the status changes through /status.
                let mut merged = old.clone();
                merged["status"] = object.get("status").cloned().unwrap_or(Value::Null);
                if merged["status"].is_null() {
                    merged.as_object_mut().expect("object").remove("status");
                }
                // managedFields as sent (or as server-side apply set them) are kept.
                match object.pointer("/metadata/managedFields") {
                    Some(managed) => {
                        metadata_mut(&mut merged).insert("managedFields".into(), managed.clone())
                    }
                    None => metadata_mut(&mut merged).remove("managedFields"),
                };
                merged
            }
            Part::Spec => {
                if rt.has(Subresource::Status) {
                    // The status changes only through /status.
                    let root = object.as_object_mut().expect("checked");
                    match old.get("status") {
                        Some(status) => root.insert("status".into(), status.clone()),
                        None => root.remove("status"),
                    };
                }
                object
            }
        };
        {
            let root = new.as_object_mut().expect("checked");
            root.insert("apiVersion".into(), rt.group_version().into());
            root.insert("kind".into(), rt.kind.into());
        }
        preserve_system_metadata(&old, &mut new);
        object::normalize_metadata(&mut new);
        self.admit(rt, Some(&old), &mut new)?;
        if rt.has(Subresource::Status) || rt.is_custom() {
            let old_generation =
                old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            let generation =
                if bumps_generation(rt, &old, &new) { old_generation + 1 } else { old_generation };
            metadata_mut(&mut new).insert("generation".into(), generation.into());
        }
        let _definitions = is_definitions(rt).then(|| self.definitions_lock.lock());
        if is_definitions(rt) {
            match part {
                Part::Status => crd::check_status(&new)?,
                _ => {
                    let others = self.definitions_except(name)?;
                    crd::limits::check_room(&new, &others)?;
                    self.compiled.intern_names(&new)?;
                    new["status"] = crd::status_of(&new, Some(&old), &others)?;
                    if is_deleting(&new) {
                        crd::mark_terminating(&mut new);
                    }
                }
            }
        }
        managed::record_update(rt, Some(&old), &mut new, &write.owner);

        // Removing the last finalizer of an object being deleted completes its deletion; a
        // definition's, once its objects are gone too.
        if is_deleting(&new) && finalizers(&new).is_empty() {
            if dry_run {
                return Ok(new);
            }
            if is_definitions(rt) {
                let stored = self
                    .store
                    .update(&key, encode(&new)?, Some(current.mod_revision))
                    .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
                let written = written(new, &stored);
                return Ok(self.finish_definition(name)?.unwrap_or(written));
            }
            return self.remove(rt, &key, name, current.mod_revision, new);
        }
        let mut unchanged = old.clone();
        metadata_mut(&mut unchanged).remove("resourceVersion");
        if new == unchanged {
            // Kubernetes writes nothing for a no-op update and answers with the stored object.
            return Ok(old);
        }
        if dry_run {
            // What the update would store, at the revision it would have replaced.
            metadata_mut(&mut new)
                .insert("resourceVersion".into(), current.mod_revision.to_string().into());
            return Ok(new);
        }
        let stored = self
            .store
            .update(&key, encode_stored(rt, &new)?, Some(current.mod_revision))
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
        self.wrote(rt, !matches!(write.owner, Owner::Server))?;
        Ok(written(new, &stored))
    }

    /// DELETE one object. Objects with finalizers are marked for deletion and stay until the
    /// last finalizer is removed; a namespace is emptied first.
    pub fn delete(
        &self,
        target: &Target<'_>,
        name: &str,
        params: &DeleteParams,
    ) -> ApiResult<Value> {
        let rt = target.rt;
        let (key, current) = self.stored(target, name)?;
        let old = shown(rt, &current)?;
        if let Some(uid) = &params.uid {
            let actual = meta_str(&old, "uid").unwrap_or_default();
            if actual != uid {
                return Err(ApiError::conflict(
                    rt.group,
                    rt.plural,
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                ));
            }
        }
        if let Some(rv) = &params.resource_version {
            if parse_resource_version(rv)? != current.mod_revision {
                return Err(ApiError::conflict(
                    rt.group,
                    rt.plural,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        current.mod_revision
                    ),
                ));
            }
        }
        if let Some(policy) = &params.propagation_policy {
            if !matches!(policy.as_str(), "Orphan" | "Background" | "Foreground") {
                return Err(ApiError::invalid(
                    "meta.k8s.io",
                    "DeleteOptions",
                    "",
                    vec![Cause::new(
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        format!("Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
                    )],
                ));
            }
        }
        let is_namespace = rt.group.is_empty() && rt.plural == "namespaces";
        if is_namespace && SYSTEM_NAMESPACES[..3].contains(&name) {
            return Err(ApiError::forbidden(
                rt.group,
                rt.plural,
                name,
                "this namespace may not be deleted",
            ));
        }
        if is_definitions(rt) && !params.dry_run {
            return self.delete_definition(&key, name, old, params);
        }
        if is_namespace || !finalizers(&old).is_empty() {
            // Mark it; the object goes when its finalizers (and, for a namespace, its content) do.
            if is_deleting(&old) {
                return Ok(old);
            }
            let mut marked = old.clone();
            let meta = metadata_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), now_rfc3339().into());
            meta.insert(
                "deletionGracePeriodSeconds".into(),
                params.grace_period_seconds.unwrap_or(0).into(),
            );
            if is_namespace {
                marked["status"] = json!({"phase": "Terminating"});
            }
            if params.dry_run {
                return Ok(marked);
            }
            // A step of a delete: not bounded by the store's quota.
            let stored = self
                .store
                .update_to_delete(&key, encode_stored(rt, &marked)?, Some(current.mod_revision))
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
            let answer = written(marked, &stored);
            if is_namespace {
                self.finish_namespace(name)?;
            }
            return match self.store.get(&key).map_err(internal)? {
                Some(still) => shown(rt, &still),
                None => Ok(answer),
            };
        }
        if params.dry_run {
            return Ok(old);
        }
        self.remove(rt, &key, name, current.mod_revision, old)
    }

    /// Remove an object at `revision` and answer with `last` at the deletion's revision.
    fn remove(
        &self,
        rt: &ResourceType,
        key: &str,
        name: &str,
        revision: Revision,
        mut last: Value,
    ) -> ApiResult<Value> {
        let gone = self
            .store
            .delete(key, Some(revision))
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
        self.wrote(rt, true)?;
        metadata_mut(&mut last)
            .insert("resourceVersion".into(), gone.mod_revision.to_string().into());
        Ok(last)
    }

    /// Empty a terminating namespace, then remove it (unless it still has finalizers of its own).
    fn finish_namespace(&self, namespace: &str) -> ApiResult<()> {
        let params = DeleteParams::default();
        let registry = self.registry();
        for rt in registry.all().iter().filter(|t| t.namespaced) {
            let target = Target { rt, namespace: Some(namespace.to_owned()) };
            let prefix = prefix_for(rt, Some(namespace));
            let page = self.store.list(&prefix, &StoreListOptions::default()).map_err(internal)?;
            for object in page.items {
                let value = decode(&object)?;
                let name = meta_str(&value, "name").unwrap_or_default().to_owned();
                match self.delete(&target, &name, &params) {
                    Ok(_) | Err(ApiError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let namespaces = self.rt("", "namespaces");
        let key = key_for(namespaces, None, namespace);
        if let Some(current) = self.store.get(&key).map_err(internal)? {
            let value = decode(&current)?;
            let content_left = registry.all().iter().filter(|t| t.namespaced).any(|rt| {
                self.store
                    .list(
                        &prefix_for(rt, Some(namespace)),
                        &StoreListOptions { limit: Some(1), ..Default::default() },
                    )
                    .map(|p| !p.items.is_empty())
                    .unwrap_or(true)
            });
            if finalizers(&value).is_empty() && !content_left {
                self.store.delete(&key, Some(current.mod_revision)).map_err(internal)?;
            }
        }
        Ok(())
    }

    /// DELETE a collection: every selected object, answered as a list of what was deleted.
    pub fn delete_collection(
        &self,
        target: &Target<'_>,
        list: &ListParams,
        params: &DeleteParams,
    ) -> ApiResult<Value> {
        let all = ListParams { limit: None, continue_token: None, ..list.clone() };
        let mut listed = self.list(target, &all)?;
        let mut deleted = Vec::new();
        let items = match listed["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        };
        for item in items {
            let name = meta_str(&item, "name").unwrap_or_default().to_owned();
            let namespace = meta_str(&item, "namespace").map(str::to_owned);
            let one =
                Target { rt: target.rt, namespace: namespace.or_else(|| target.namespace.clone()) };
            match self.delete(&one, &name, params) {
                Ok(object) => deleted.push(object),
                Err(ApiError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": list_kind(target.rt),
            "apiVersion": target.rt.group_version(),
            "metadata": {"resourceVersion": self.current_revision().to_string()},
            "items": deleted,
        }))
    }
}

/// A stored object as `rt`'s version shows it.
fn shown(rt: &ResourceType, object: &Object) -> ApiResult<Value> {
    Ok(crd::present(rt, decode(object)?, object.mod_revision))
}

/// The kind of `rt`'s lists.
fn list_kind(rt: &ResourceType) -> String {
    match &rt.custom {
        Some(custom) => custom.list_kind.to_owned(),
        None => format!("{}List", rt.kind),
    }
}

/// An object as stored: a custom resource in its definition's storage version.
fn encode_stored(rt: &ResourceType, object: &Value) -> ApiResult<Bytes> {
    match &rt.custom {
        Some(custom) if custom.storage_version != rt.version => {
            let mut stored = object.clone();
            stored["apiVersion"] = crd::storage_api_version(rt, custom).into();
            encode(&stored)
        }
        _ => encode(object),
    }
}

/// Whether `rt` is CustomResourceDefinitions.
fn is_definitions(rt: &ResourceType) -> bool {
    rt.group == crd::GROUP && rt.plural == "customresourcedefinitions"
}

/// Whether an update moves `metadata.generation`: a change of the spec, and for a custom
/// resource without a status subresource, of anything but its metadata.
fn bumps_generation(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    if rt.is_custom() && !rt.has(Subresource::Status) {
        let content = |o: &Value| {
            o.as_object().map(|m| {
                m.iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Map<String, Value>>()
            })
        };
        return content(old) != content(new);
    }
    spec_part(old) != spec_part(new)
}

/// Keep what clients may not change: uid, creation time, deletion marks, generation.
fn preserve_system_metadata(old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    let meta = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    meta.remove("resourceVersion");
    meta.remove("selfLink");
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

/// Every field must hold a value of its type, or the object cannot be decoded: 400, as
/// kube-apiserver answers a body its decoder refuses.
fn check_types(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    crate::openapi::check_types(rt.group, rt.version, rt.kind, object).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
            kind = rt.kind,
            version = rt.version,
        ))
    })
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

fn encode(object: &Value) -> ApiResult<Bytes> {
    let encoded = if object.pointer("/metadata/resourceVersion").is_some() {
        let mut stored = object.clone();
        metadata_mut(&mut stored).remove("resourceVersion");
        serde_json::to_vec(&stored)
    } else {
        serde_json::to_vec(object)
    };
    encoded.map(Bytes::from).map_err(|e| ApiError::internal(format!("cannot encode object: {e}")))
}

/// The object just written, as the API shows it: with the write's revision.
fn written(mut object: Value, stored: &Object) -> Value {
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

#[cfg(test)]
mod tests {
    use carrel_store::{Options, SledStore};

    use super::*;

    #[test]
    fn lists_from_stored_bytes_equal_decoded_lists() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
        let api = Api::new(Arc::new(store)).unwrap();
        let rt = api.rt("", "configmaps");
        let target = Target { rt, namespace: Some("default".into()) };
        for i in 0..7 {
            let tier = if i % 2 == 0 { "web" } else { "db" };
            let body = json!({"metadata": {"name": format!("c{i}"), "labels": {"tier": tier}},
                              "data": {"metadata": "{\"x\":1}"}});
            api.create(&target, body, &Write::by("test", false)).unwrap();
        }
        let cases = [
            ListParams::default(),
            ListParams { limit: Some(3), ..Default::default() },
            ListParams {
                labels: Some(LabelSelector::parse("tier=web").unwrap()),
                ..Default::default()
            },
            ListParams {
                labels: Some(LabelSelector::parse("tier=db").unwrap()),
                limit: Some(2),
                ..Default::default()
            },
        ];
        for params in cases {
            let value = api.list(&target, &params).unwrap();
            let bytes = api.list_json(&target, &params).unwrap();
            let parsed: Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(parsed, value, "{params:?}");
        }
        let one = api.get_json(&target, "c3").unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&one).unwrap(), api.get(&target, "c3").unwrap());
    }

    #[test]
    fn a_store_at_its_quota_refuses_creates_but_still_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
        let api = Api::new(Arc::new(store)).unwrap();
        let write = Write::by("test", false);
        let namespaces = Target { rt: api.rt("", "namespaces"), namespace: None };
        api.create(&namespaces, json!({"metadata": {"name": "work"}}), &write).unwrap();
        let configmaps = Target { rt: api.rt("", "configmaps"), namespace: Some("work".into()) };
        let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
        api.create(&configmaps, held, &write).unwrap();
        // Full to the byte.
        let usage = api.store().usage();
        api.store().set_quota(carrel_store::Quota { objects: usage.objects, bytes: usage.bytes });

        let err = api.create(&configmaps, json!({"metadata": {"name": "c"}}), &write).unwrap_err();
        assert_eq!((err.code(), err.reason()), (403, "Forbidden"));
        let dry_run = Write::by("test", true);
        let dry = api.create(&configmaps, json!({"metadata": {"name": "c"}}), &dry_run);
        assert_eq!(dry.unwrap_err(), err, "a dry run answers as the create would");
        assert_eq!(
            err.to_status()["message"],
            format!(
                "configmaps \"c\" is forbidden: exceeded quota: tenant-objects, requested: count=1, used: count={0}, limited: count={0}",
                usage.objects
            )
        );
        // Deleting an object with finalizers, or a namespace, first marks it, which grows it: a
        // step of a delete, so never refused.
        let marked = api.delete(&configmaps, "held", &DeleteParams::default()).unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert!(api.store().usage().bytes > usage.bytes, "the mark grew the store past its bound");
        let terminating = api.delete(&namespaces, "work", &DeleteParams::default()).unwrap();
        assert_eq!(terminating["status"]["phase"], "Terminating");
        // Dropping the finalizer shrinks the object and lets it go; then creates work again.
        let mut held = api.get(&configmaps, "held").unwrap();
        held["metadata"]["finalizers"] = json!([]);
        api.update(&configmaps, "held", held, None, &write).unwrap();
        assert_eq!(api.get(&configmaps, "held").unwrap_err().code(), 404);
        let defaults = Target { rt: api.rt("", "configmaps"), namespace: Some("default".into()) };
        api.create(&defaults, json!({"metadata": {"name": "c"}}), &write).unwrap();
    }

    #[test]
    fn aggregated_cluster_roles_carry_their_parts_rules() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path().join("s"), Options::create()).unwrap();
        let api = Api::new(Arc::new(store)).unwrap();
        let rt = api.rt("rbac.authorization.k8s.io", "clusterroles");
        let target = Target { rt, namespace: None };
        let view = api.get(&target, "view").unwrap();
        let rules = view["rules"].as_array().expect("view has its aggregated rules");
        assert!(rules.iter().any(|r| r["resources"].as_array().unwrap().contains(&json!("pods"))));
        let part = json!({"metadata": {"name": "widgets-view",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]});
        api.create(&target, part, &Write::by("test", false)).unwrap();
        let view = api.get(&target, "view").unwrap();
        assert!(view["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["widgets"])));
        let edit = api.get(&target, "edit").unwrap();
        assert!(
            edit["rules"].as_array().unwrap().iter().any(|r| r["resources"] == json!(["widgets"])),
            "edit aggregates view"
        );
    }
}
