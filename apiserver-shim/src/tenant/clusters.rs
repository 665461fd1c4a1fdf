//! Every cluster one listener serves: the host API at the root, and each tenant's API under
//! `/tenants/<name>`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::server::Server;

/// The path prefix of tenants' APIs.
pub const TENANTS_PREFIX: &str = "/tenants/";

/// The host API and the tenants' APIs, by tenant name.
#[derive(Debug)]
pub struct Clusters {
    host: Arc<Server>,
    tenants: RwLock<HashMap<String, Arc<Server>>>,
}

impl Clusters {
    /// Serve `host` at the root, and no tenant yet.
    pub fn new(host: Arc<Server>) -> Clusters {
        Clusters { host, tenants: RwLock::default() }
    }

    /// The host API.
    pub fn host(&self) -> &Arc<Server> {
        &self.host
    }

    /// A tenant's API, if it is served.
    pub fn tenant(&self, name: &str) -> Option<Arc<Server>> {
        self.tenants.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Serve a tenant's API (replacing any it had).
    pub fn insert(&self, name: &str, server: Arc<Server>) {
        self.tenants.write().unwrap_or_else(|e| e.into_inner()).insert(name.to_owned(), server);
    }

    /// Stop serving a tenant's API; it is returned so that its store can be closed.
    pub fn remove(&self, name: &str) -> Option<Arc<Server>> {
        self.tenants.write().unwrap_or_else(|e| e.into_inner()).remove(name)
    }

    /// How many tenants are served.
    pub fn count(&self) -> usize {
        self.tenants.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The names of the tenants served.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> =
            self.tenants.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        names.sort();
        names
    }

    /// The cluster a request path is for, and whether the path names a tenant that is not
    /// served (`None` then).
    pub fn route(&self, path: &str) -> Option<Arc<Server>> {
        match path.strip_prefix(TENANTS_PREFIX) {
            Some(rest) => {
                let name = rest.split('/').next().unwrap_or_default();
                self.tenant(name)
            }
            None => Some(self.host.clone()),
        }
    }
}
