//! The manager where several replicas share tenants ([`crate::replicas`]): what a replica does
//! with a tenant that is not simply its own to serve — another's, none's yet, one whose data it
//! holds from before replicas, one it is asked to move away, one moved to it.

use serde_json::{json, Value};

use carrel_apiserver::object::is_deleting;
use carrel_apiserver::tenant::types::Tenant;

use super::{Manager, ManagerError, Next};
use crate::host;
use crate::replicas::{self, Replicas};
use crate::tenant_cluster;

impl Manager {
    /// Where replicas share tenants: what this replica does with `tenant` before (or instead of)
    /// serving it. `None` when it is this replica's to serve (or tear down) as usual.
    pub(super) async fn replica_step(
        &self,
        replicas: &Replicas,
        name: &str,
        tenant: &Value,
    ) -> Result<Option<Next>, ManagerError> {
        let me = replicas.me();
        let dir = self.dir(name);
        match replica_of(tenant) {
            Some(replica) if replica == me => {
                match move_target(tenant).filter(|to| *to != me) {
                    Some(to) if !is_deleting(tenant) => {
                        self.move_out(replicas, name, tenant, to).await.map(Some)
                    }
                    _ => {
                        // Served here again (a move that did not finish, or was called off).
                        let path = dir.path.clone();
                        let unmarked =
                            tokio::task::spawn_blocking(move || replicas::unmark_moved(&path));
                        unmarked.await?.map_err(|source| ManagerError::Io {
                            tenant: name.into(),
                            path: dir.path.clone(),
                            source,
                        })?;
                        Ok(None)
                    }
                }
            }
            None if tenant.get("status").is_some()
                && dir.is_made()
                && !replicas::was_moved(&dir.path) =>
            {
                // Served before replicas shared tenants: its data is here, so it is this
                // replica's.
                let mut status = tenant["status"].clone();
                status["replica"] = json!(me);
                tracing::info!(tenant = %name, replica = %me, "claiming the tenant whose data is here");
                self.write_status(name, tenant, status).await?;
                Ok(Some(Next::OnChange))
            }
            _ => {
                // Another replica's, or none's yet: nothing of it is served here, and what was
                // sent away is let go once the other replica has it.
                if self.clusters.contains(name) {
                    self.unserve(name);
                }
                if replica_of(tenant).is_some() && replicas::was_moved(&dir.path) {
                    let path = dir.path.clone();
                    let removed =
                        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&path));
                    removed.await?.map_err(|source| ManagerError::Io {
                        tenant: name.into(),
                        path: dir.path.clone(),
                        source,
                    })?;
                    tracing::info!(tenant = %name, "the moved tenant's data here is removed");
                }
                Ok(Some(Next::OnChange))
            }
        }
    }

    /// Move tenant `name` to replica `to`: stop serving it, send its closed store and
    /// credentials there, and only then name `to` in its status.
    async fn move_out(
        &self,
        replicas: &Replicas,
        name: &str,
        tenant: &Value,
        to: &str,
    ) -> Result<Next, ManagerError> {
        if !replicas.is_live(to) {
            tracing::warn!(tenant = %name, to, "not moving the tenant: the replica is not live");
            return Ok(Next::Retry);
        }
        tracing::info!(tenant = %name, to, "moving the tenant");
        let dir = self.dir(name);
        {
            let _lifecycle = self.lifecycle.write().await;
            self.unserve(name);
            if dir.is_made() {
                // Waits for the requests still holding its store to let it go.
                let closed = tokio::task::spawn_blocking({
                    let dir = dir.clone();
                    move || tenant_cluster::close_store(&dir)
                });
                closed.await??;
            }
        }
        replicas.send(name, &dir.path, to).await.map_err(ManagerError::Replica)?;
        let path = dir.path.clone();
        let (marker, target) = (path.clone(), to.to_owned());
        let marked = tokio::task::spawn_blocking(move || replicas::mark_moved(&marker, &target));
        marked.await?.map_err(|source| ManagerError::Io { tenant: name.into(), path, source })?;
        let mut status = tenant.get("status").cloned().unwrap_or_else(|| json!({}));
        status["replica"] = json!(to);
        self.write_status(name, tenant, status).await?;
        tracing::info!(tenant = %name, to, "tenant moved");
        Ok(Next::OnChange)
    }

    /// Tenant `name` was moved here and is served: the move is done.
    pub(super) async fn moved_in(&self, name: &str) -> Result<(), ManagerError> {
        let mut tenant = self.host.get(host::TENANTS, name).await?;
        if let Some(annotations) =
            tenant.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut)
        {
            annotations.remove(replicas::MOVE_TO);
        }
        self.host.replace(host::TENANTS, name, &tenant).await?;
        tracing::info!(tenant = %name, "serving the tenant moved here");
        Ok(())
    }
}

impl Manager {
    /// Whether `tenant` (as the controller's cache has it) is another replica's, or none's
    /// yet, and nothing of it is here: served, sent away, or data that predates replicas.
    pub(super) fn elsewhere(&self, tenant: &Tenant) -> bool {
        let (Some(replicas), Some(name)) = (self.replicas.get(), tenant.metadata.name.as_deref())
        else {
            return false;
        };
        let dir = self.dir(name);
        match tenant.status.as_ref().map(|s| s.replica.as_deref()) {
            Some(Some(replica)) if replica == replicas.me() => false,
            Some(Some(_)) => !self.clusters.contains(name) && !replicas::was_moved(&dir.path),
            // Served before replicas shared tenants: claimed by the replica holding its data.
            Some(None) => !dir.is_made(),
            // New: the assigner gives it a replica, which is a change.
            None => true,
        }
    }
}

/// The replica `tenant`'s status names.
pub(super) fn replica_of(tenant: &Value) -> Option<&str> {
    tenant.pointer("/status/replica").and_then(Value::as_str)
}

/// The replica `tenant` is asked to move to.
pub(super) fn move_target(tenant: &Value) -> Option<&str> {
    tenant
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(replicas::MOVE_TO))
        .and_then(Value::as_str)
}
