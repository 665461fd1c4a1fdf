//! What admission reads of a cluster's own configuration (its admission policies, its
//! webhooks): read from the store and prepared once, and again only after a write of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::api::{Api, ListParams, Target};
use crate::resource::{built_in, ResourceType};
use crate::status::ApiResult;

/// A configuration prepared as of a generation of its writes.
#[derive(Debug)]
pub struct Reloaded<T> {
    generation: AtomicU64,
    loaded: Mutex<Option<(u64, Arc<T>)>>,
}

impl<T> Default for Reloaded<T> {
    fn default() -> Self {
        Reloaded { generation: AtomicU64::new(0), loaded: Mutex::new(None) }
    }
}

impl<T> Reloaded<T> {
    /// Note a write of the configuration: the next [`Reloaded::get`] loads it again.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The configuration as of now: the one prepared before, unless it was written since, then
    /// `load`ed again.
    pub fn get(&self, load: impl FnOnce() -> ApiResult<T>) -> ApiResult<Arc<T>> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Some((at, loaded)) = &*self.loaded.lock() {
            if *at == generation {
                return Ok(loaded.clone());
            }
        }
        let loaded = Arc::new(load()?);
        *self.loaded.lock() = Some((generation, loaded.clone()));
        Ok(loaded)
    }
}

/// The stored objects of `rt`, a built-in cluster-scoped type, in name order.
pub(crate) fn stored(api: &Api, rt: &ResourceType) -> ApiResult<Vec<Value>> {
    let rt = built_in(rt.group, rt.plural).expect("a built-in type");
    let list = api.list(&Target { rt, namespace: None }, &ListParams::default())?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}
