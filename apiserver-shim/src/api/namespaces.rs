//! What namespaces need of the store: a `default` ServiceAccount in each, and the emptying of a terminating one.

use serde_json::{json, Value};

use carrel_store::{ListOptions as StoreListOptions, Store};

use crate::object::{finalizers, meta_str};
use crate::status::{ApiError, ApiResult};

use super::{decode, internal, key_for, prefix_for, Api, DeleteParams, Target, Write};

/// The ServiceAccount every namespace gets, as its create is asked for.
pub(super) fn default_service_account() -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
}

impl Api {
    /// Every namespace gets a `default` ServiceAccount.
    pub(crate) fn bootstrap_namespace(&self, namespace: &str) -> ApiResult<()> {
        let sa = self.rt("", "serviceaccounts");
        let target = Target { rt: sa, namespace: Some(namespace.into()) };
        match self.create(&target, default_service_account(), &Write::server()) {
            Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Empty a terminating namespace, then remove it (unless it still has finalizers of its own).
    pub(crate) fn finish_namespace(&self, namespace: &str) -> ApiResult<()> {
        let params = DeleteParams::default();
        let registry = self.registry();
        // A built-in kind once, in the version its objects are stored in (a definition's
        // storage version may not be served: its types are each looked at).
        let kinds = || {
            registry
                .all()
                .iter()
                .filter(|t| t.namespaced && (t.is_custom() || t.is_storage_version()))
        };
        for rt in kinds() {
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
            let content_left = kinds().any(|rt| {
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
}
