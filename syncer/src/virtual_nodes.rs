//! Virtual nodes: the tenant's view of the host nodes its pods run on, kept in line with the host
//! nodes and the tenant's quota.

use crate::*;

impl Syncer {
    pub(crate) async fn ensure_virtual_node(&self, node: &str) -> Result<(), SyncError> {
        if self.inner.virtual_nodes.lock().contains_key(node) {
            return Ok(());
        }
        let host_nodes: Api<Node> = Api::all(self.inner.host_client.clone());
        let host_node = match host_nodes.get_opt(node).await? {
            Some(n) => to_value(&n)?,
            None => json!({"metadata": {"name": node}}),
        };
        let quota = self.inner.quota.read().clone();
        let wanted = translate::virtual_node(&host_node, &quota, self.tenant_cordoned(node));
        let typed: Node = serde_json::from_value(wanted.clone())
            .map_err(|source| SyncError::Decode { kind: "Node", source })?;
        let nodes: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let old = match nodes.create(&PostParams::default(), &typed).await {
            // A create writes labels and spec; the status is still to write.
            Ok(_) => json!({"metadata": wanted["metadata"], "spec": wanted["spec"]}),
            // Written before a restart: brought in line with the host node from what it shows.
            Err(kube::Error::Api(e)) if e.code == 409 => match nodes.get_opt(node).await? {
                Some(n) => to_value(&n)?,
                None => json!({"metadata": {"name": node}}),
            },
            Err(e) => return Err(e.into()),
        };
        // A cordon the tenant made before a restart is the tenant's still.
        let wanted = match translate::tenant_cordoned(&old) {
            true => translate::virtual_node(&host_node, &quota, true),
            false => wanted,
        };
        self.write_virtual_node(node, &old, &wanted).await
    }

    /// Bring virtual node `node` from what it shows (`old`) to `wanted`: its labels, annotations,
    /// cordon and taints, then its status, each by a merge patch of what differs.
    pub(crate) async fn write_virtual_node(
        &self,
        node: &str,
        old: &Value,
        wanted: &Value,
    ) -> Result<(), SyncError> {
        let nodes: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let part = |v: &Value, path: &str| v.pointer(path).cloned().unwrap_or_else(|| json!({}));
        let shown = |v: &Value| {
            json!({
                "metadata": {
                    "labels": part(v, "/metadata/labels"),
                    "annotations": part(v, "/metadata/annotations"),
                },
                "spec": part(v, "/spec"),
            })
        };
        let meta = translate::merge_patch(&shown(old), &shown(wanted));
        let params = kube::api::PatchParams::default();
        if meta.as_object().is_some_and(|m| !m.is_empty()) {
            nodes.patch(node, &params, &kube::api::Patch::Merge(&meta)).await?;
        }
        let status = translate::merge_patch(&part(old, "/status"), &part(wanted, "/status"));
        if status.as_object().is_some_and(|m| !m.is_empty()) {
            let patch = json!({"status": status});
            nodes.patch_status(node, &params, &kube::api::Patch::Merge(&patch)).await?;
        }
        self.inner
            .virtual_nodes
            .lock()
            .insert(node.to_owned(), translate::virtual_node_shown(wanted));
        Ok(())
    }

    /// Keep the virtual nodes in line with their host nodes (readiness, cordon, taints, labels,
    /// addresses) and with the quota, writing only when what the tenant is shown changes.
    /// `nodes`: the host nodes as they change (the shared host side keeps one cache of them,
    /// which GPU placement reads too).
    pub(crate) async fn watch_host_nodes(self, mut nodes: Listener<Arc<Node>>) {
        loop {
            let changed: Vec<Arc<Node>> = tokio::select! {
                node = nodes.next() => match node {
                    Some(n) => vec![n],
                    None => return,
                },
                () = self.inner.quota_changed.notified() => {
                    let names: Vec<String> = self
                        .inner
                        .virtual_nodes
                        .lock()
                        .keys()
                        .cloned()
                        .collect();
                    names
                        .iter()
                        .filter_map(|name| self.inner.host_nodes.get(&ObjectRef::new(name)))
                        .collect()
                }
            };
            for host in changed {
                let Some(name) = host.metadata.name.clone() else { continue };
                if let Err(e) = self.refresh_virtual_node(&name, &host).await {
                    tracing::debug!(tenant = %self.inner.tenant, node = %name, error = %e, "refreshing a virtual node");
                }
            }
        }
    }

    /// Virtual node `name`, if this tenant has one, brought in line with host node `host`.
    pub(crate) async fn refresh_virtual_node(
        &self,
        name: &str,
        host: &Node,
    ) -> Result<(), SyncError> {
        let Some(shown) = self.inner.virtual_nodes.lock().get(name).cloned() else {
            return Ok(());
        };
        let quota = self.inner.quota.read().clone();
        let wanted = translate::virtual_node(&to_value(host)?, &quota, self.tenant_cordoned(name));
        if translate::virtual_node_shown(&wanted) == shown {
            return Ok(());
        }
        match self.write_virtual_node(name, &shown, &wanted).await {
            // Deleted in the tenant: made again when a pod next needs it.
            Err(SyncError::Kube(kube::Error::Api(e))) if e.code == 404 => {
                self.inner.virtual_nodes.lock().remove(name);
                Ok(())
            }
            other => other,
        }
    }
}

impl Syncer {
    /// Whether the tenant cordoned virtual node `node` itself.
    pub(crate) fn tenant_cordoned(&self, node: &str) -> bool {
        self.inner.tenant_cordons.lock().contains(node)
    }

    /// The virtual nodes the tenant cordoned itself.
    pub(crate) fn tenant_cordons(&self) -> BTreeSet<String> {
        self.inner.tenant_cordons.lock().clone()
    }

    /// Follow the tenant's own cordons of its virtual nodes (`kubectl cordon`, `kubectl drain`):
    /// the set placement reads, and the cordon's taint written on the node as Kubernetes writes
    /// it. Only virtual nodes are watched, and only a change of cordon causes a write.
    pub(crate) async fn watch_tenant_cordons(self) {
        let api: Api<Node> = Api::all(self.inner.tenant_client.clone());
        let config =
            watcher::Config::default().labels(&format!("{}=true", host_names::LABEL_VIRTUAL_NODE));
        let stream = watcher(api, config).default_backoff();
        futures::pin_mut!(stream);
        let mut relist = Relist::default();
        while let Some(event) = stream.next().await {
            let node = match event {
                Ok(watcher::Event::Init) => {
                    relist.begin();
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(shown) = relist.end() {
                        self.inner.tenant_cordons.lock().retain(|n| shown.contains(n));
                    }
                    continue;
                }
                Ok(watcher::Event::Delete(node)) => {
                    if let Some(name) = node.metadata.name.as_deref() {
                        self.inner.tenant_cordons.lock().remove(name);
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(node) | watcher::Event::InitApply(node)) => node,
                Err(e) => {
                    tracing::debug!(tenant = %self.inner.tenant, error = %e, "watching the tenant's nodes");
                    continue;
                }
            };
            let Some(name) = node.metadata.name.clone() else { continue };
            relist.saw(name.as_str());
            let cordoned = to_value(&node).is_ok_and(|n| translate::tenant_cordoned(&n));
            let changed = match cordoned {
                true => self.inner.tenant_cordons.lock().insert(name.clone()),
                false => self.inner.tenant_cordons.lock().remove(&name),
            };
            if !changed {
                continue;
            }
            tracing::debug!(tenant = %self.inner.tenant, node = %name, cordoned, "tenant cordon");
            if let Some(host) = self.inner.host_nodes.get(&ObjectRef::new(&name)) {
                if let Err(e) = self.refresh_virtual_node(&name, &host).await {
                    tracing::debug!(tenant = %self.inner.tenant, node = %name, error = %e, "writing a tenant cordon");
                }
            }
        }
    }
}
