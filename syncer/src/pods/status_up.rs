//! A host pod's status copied up to its tenant pod, and the tenant pod bound to the virtual node
//! of its host pod's node.

use crate::*;

/// Whether every field of `wanted` is already in `current` with that value.
pub(crate) fn covers(current: &Value, wanted: &Value) -> bool {
    wanted.as_object().into_iter().flatten().all(|(k, v)| current.get(k) == Some(v))
}

impl Syncer {
    pub(crate) async fn status_up(&self, tenant: &Value, host: &Value) -> Result<(), SyncError> {
        let (namespace, name) = namespace_and_name(tenant);
        let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let node = host.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty());
        if let Some(node) = node {
            self.ensure_virtual_node(node).await?;
            let bound = tenant
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !bound {
                let binding = json!({
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                match api
                    .create_subresource::<_, Value>(
                        "binding",
                        name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    // A pod the syncer placed itself (on its GPU slices) has no host scheduler's
                    // event to copy: the syncer says where it went.
                    Ok(_) if gpu_requests(tenant).is_ok_and(|r| !r.is_empty()) => {
                        let message = format!("Successfully assigned {namespace}/{name} to {node}");
                        self.tenant_event(tenant, "Normal", "Scheduled", &message).await?;
                    }
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut wanted = translate::tenant_status(host);
        let host_name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let host_uid = host.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        let uid = tenant.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        translate::in_tenant_words(
            &mut wanted,
            (&self.inner.host_namespace, host_name, host_uid),
            (namespace, name, uid),
        );
        let current = tenant.get("status").cloned().unwrap_or_else(|| json!({}));
        if covers(&current, &wanted) {
            return Ok(());
        }
        let mut status = current;
        for (k, v) in wanted.as_object().into_iter().flatten() {
            status[k] = v.clone();
        }
        self.patch_tenant_status(tenant, status).await.map(drop)
    }

    /// Merge `status` into the tenant pod's status; `false` when the pod is gone.
    pub(crate) async fn patch_tenant_status(
        &self,
        pod: &Value,
        status: Value,
    ) -> Result<bool, SyncError> {
        let (namespace, name) = namespace_and_name(pod);
        let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let patch = json!({"status": status});
        let params = kube::api::PatchParams::default();
        match api.patch_status(name, &params, &kube::api::Patch::Merge(&patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
