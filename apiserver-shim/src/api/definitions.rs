//! The stored CustomResourceDefinitions: serving their types, and deleting a definition with its objects.

use std::sync::Arc;

use serde_json::Value;

use carrel_store::{ListOptions as StoreListOptions, Store};

use crate::crd;
use crate::object::{finalizers, is_deleting, meta_str, metadata_mut};
use crate::status::{ApiError, ApiResult};

use super::{
    decode, encode, internal, key_for, parse_resource_version, prefix_for, Api, DeleteParams,
    Target,
};

impl Api {
    /// Serve the types of the established CustomResourceDefinitions stored, beside the
    /// built-in ones.
    pub(crate) fn reload_definitions(&self) -> ApiResult<()> {
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

    /// The stored definitions other than `name`.
    pub(crate) fn definitions_except(&self, name: &str) -> ApiResult<Vec<Value>> {
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
    pub(crate) fn delete_definition(
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
    pub(crate) fn finish_definition(&self, name: &str) -> ApiResult<Option<Value>> {
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
}
