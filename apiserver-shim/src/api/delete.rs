//! DELETE of one object and of a collection: finalizers, marking, removal.

use serde_json::{json, Value};

use carrel_store::{Error as StoreError, Revision, Store};

use crate::admission::policy::{self, Attributes, Operation};
use crate::admission::webhook;
use crate::object::{finalizers, is_deleting, meta_str, metadata_mut, now_rfc3339};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

use super::{
    internal, list_kind, parse_resource_version, written, Api, DeleteParams, ListParams, Target,
};

/// The end of one try at a delete.
enum Try {
    /// The answer.
    Done(ApiResult<Value>),
    /// Another write changed the object between the delete's read and its write.
    Raced(ApiError),
}

/// How many times a delete that lost a race with another write is made again.
const DELETE_RETRIES: usize = 16;

impl Api {
    /// DELETE one object. Objects with finalizers are marked for deletion and stay until the
    /// last finalizer is removed; a namespace is emptied first. Without a `resourceVersion`
    /// precondition, a delete that loses a race with another write of the object is made again
    /// on the newer object, as kube-apiserver's store does (its preconditions checked again).
    pub fn delete(
        &self,
        target: &Target<'_>,
        name: &str,
        params: &DeleteParams,
    ) -> ApiResult<Value> {
        let mut tries = 0;
        loop {
            match self.delete_once(target, name, params) {
                Try::Done(answer) => return answer,
                Try::Raced(_) if params.resource_version.is_none() && tries < DELETE_RETRIES => {
                    tries += 1;
                }
                Try::Raced(conflict) => return Err(conflict),
            }
        }
    }

    fn delete_once(&self, target: &Target<'_>, name: &str, params: &DeleteParams) -> Try {
        match self.try_delete(target, name, params) {
            Ok(done) => done,
            Err(e) => Try::Done(Err(e)),
        }
    }

    fn try_delete(&self, target: &Target<'_>, name: &str, params: &DeleteParams) -> ApiResult<Try> {
        let rt = target.rt;
        let (key, current) = self.stored(target, name)?;
        let old = self.shown(rt, &current)?;
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
        let propagation = propagation(params)?
            .or_else(|| rt.strategy.orphans_by_default().map(|_| Propagation::Orphan));
        rt.strategy.check_delete(rt, name)?;
        let namespace = match (rt.strategy.is_namespace(), target.namespace.as_deref()) {
            (true, _) => name,
            (false, ns) => ns.unwrap_or_default(),
        };
        let attributes = Attributes::new(
            rt,
            None,
            Operation::Delete,
            name,
            namespace,
            None,
            Some(&old),
            params.dry_run,
            &params.requester,
        );
        webhook::mutate(self, &attributes, &mut serde_json::Value::Null, &|_| {})?;
        policy::admit(self, &attributes)?;
        webhook::validate(self, &attributes)?;
        if !params.dry_run {
            if let Some(done) = rt.strategy.delete(self, &key, name, &old, params) {
                return Ok(Try::Done(done));
            }
        }
        let collector = propagation.and_then(Propagation::finalizer);
        if rt.strategy.deleted_in_steps() || !finalizers(&old).is_empty() || collector.is_some() {
            // Mark it; the object goes when its finalizers (and what it holds) do.
            if is_deleting(&old) {
                return Ok(Try::Done(Ok(old)));
            }
            let mut marked = old.clone();
            if let Some(finalizer) = collector {
                // The garbage collector orphans or deletes the dependents, then removes it.
                with_collector_finalizer(&mut marked, finalizer);
            }
            let meta = metadata_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), now_rfc3339().into());
            meta.insert(
                "deletionGracePeriodSeconds".into(),
                params.grace_period_seconds.unwrap_or(0).into(),
            );
            rt.strategy.mark_deleting(&mut marked);
            if params.dry_run {
                return Ok(Try::Done(Ok(marked)));
            }
            // A step of a delete: not bounded by the store's quota.
            let stored = match self.store.update_to_delete(
                &key,
                self.encode_stored(rt, &marked)?,
                Some(current.mod_revision),
            ) {
                Ok(stored) => stored,
                Err(e @ StoreError::Conflict { .. }) => {
                    return Ok(Try::Raced(ApiError::from_store(e, rt.group, rt.plural, name)))
                }
                Err(e) => return Err(ApiError::from_store(e, rt.group, rt.plural, name)),
            };
            let answer = written(marked, &stored);
            rt.strategy.after_marked(self, name)?;
            return Ok(Try::Done(match self.store.get(&key).map_err(internal)? {
                Some(still) => self.shown(rt, &still),
                None => Ok(answer),
            }));
        }
        if params.dry_run {
            return Ok(Try::Done(Ok(old)));
        }
        // The store refuses the removal (409) only when the object moved past the revision read.
        match self.remove(rt, &key, name, current.mod_revision, old) {
            Err(e @ ApiError::Conflict { .. }) => Ok(Try::Raced(e)),
            answer => Ok(Try::Done(answer)),
        }
    }

    /// Remove an object at `revision` and answer with `last` at the deletion's revision.
    pub(crate) fn remove(
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

/// What becomes of an object's dependents when it is deleted (`propagationPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Propagation {
    /// Its dependents lose their reference to it; it goes once they have (`orphan` finalizer).
    Orphan,
    /// It goes now; the garbage collector deletes its dependents afterwards.
    Background,
    /// Its dependents are deleted first; it goes once those that block it are gone
    /// (`foregroundDeletion` finalizer).
    Foreground,
}

impl Propagation {
    /// The finalizer that holds the object for the garbage collector, if any.
    fn finalizer(self) -> Option<&'static str> {
        match self {
            Propagation::Orphan => Some(ORPHAN),
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Background => None,
        }
    }
}

/// The finalizer of an orphaning delete.
pub const ORPHAN: &str = "orphan";
/// The finalizer of a foreground delete.
pub const FOREGROUND: &str = "foregroundDeletion";

/// The propagation a delete asks for: `propagationPolicy`, else the deprecated
/// `orphanDependents`; both at once is refused, as kube-apiserver refuses it.
fn propagation(params: &DeleteParams) -> ApiResult<Option<Propagation>> {
    fn invalid(field: &'static str, reason: &'static str, message: String) -> ApiError {
        ApiError::invalid(
            "meta.k8s.io",
            "DeleteOptions",
            "",
            vec![Cause::new(reason, field, message)],
        )
    }
    let policy = match params.propagation_policy.as_deref() {
        None => None,
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some(other) => {
            return Err(invalid(
                "propagationPolicy",
                "FieldValueNotSupported",
                format!("Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
            ))
        }
    };
    match (policy, params.orphan_dependents) {
        (Some(_), Some(_)) => Err(invalid(
            "propagationPolicy",
            "FieldValueInvalid",
            "Invalid value: \"null\": orphanDependents and deletionPropagation cannot be both set"
                .to_owned(),
        )),
        (Some(policy), None) => Ok(Some(policy)),
        (None, Some(true)) => Ok(Some(Propagation::Orphan)),
        (None, Some(false)) => Ok(Some(Propagation::Background)),
        (None, None) => Ok(None),
    }
}

/// Put `finalizer` (orphan or foregroundDeletion) on `object`, without the other one.
fn with_collector_finalizer(object: &mut Value, finalizer: &str) {
    let meta = metadata_mut(object);
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Value::Array(list) = list {
        list.retain(|f| f != ORPHAN && f != FOREGROUND);
        list.push(finalizer.into());
    }
}
