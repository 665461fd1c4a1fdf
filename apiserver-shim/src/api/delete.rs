//! DELETE of one object and of a collection: finalizers, marking, removal.

use serde_json::{json, Value};

use carrel_store::{Revision, Store};

use crate::object::{finalizers, is_deleting, meta_str, metadata_mut, now_rfc3339};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

use super::{
    encode_stored, internal, list_kind, parse_resource_version, shown, written, Api, DeleteParams,
    ListParams, Target,
};

impl Api {
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
        rt.strategy.check_delete(rt, name)?;
        if !params.dry_run {
            if let Some(done) = rt.strategy.delete(self, &key, name, &old, params) {
                return done;
            }
        }
        if rt.strategy.deleted_in_steps() || !finalizers(&old).is_empty() {
            // Mark it; the object goes when its finalizers (and what it holds) do.
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
            rt.strategy.mark_deleting(&mut marked);
            if params.dry_run {
                return Ok(marked);
            }
            // A step of a delete: not bounded by the store's quota.
            let stored = self
                .store
                .update_to_delete(&key, encode_stored(rt, &marked)?, Some(current.mod_revision))
                .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
            let answer = written(marked, &stored);
            rt.strategy.after_marked(self, name)?;
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
