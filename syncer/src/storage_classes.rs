//! The tenant's mirrors of the host's StorageClasses, as virtual nodes mirror host nodes: each
//! host class has a tenant class of its name ([`translate::tenant_storage_class`]), labelled
//! [`host_names::LABEL_HOST_STORAGE_CLASS`], so `kubectl get sc` shows the classes a claim can
//! name and which one is the default (and the tenant API's `DefaultStorageClass` admission gives
//! a claim that names none the host's default). A class the tenant made itself (without the
//! label) is left alone, even under a host class's name; a mirror whose host class is gone goes.

use crate::*;

impl Syncer {
    /// Keep the tenant's mirrors in line with the host's classes, as these change. `changes`:
    /// told of every change to the host's classes (and once at the start).
    pub(crate) async fn mirror_storage_classes(self, mut changes: Listener<()>) {
        let _ = self.inner.storage_classes_ready.clone().wait_for(|ready| *ready).await;
        let mut resync = tokio::time::interval(self.inner.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                change = changes.next() => {
                    if change.is_none() {
                        return;
                    }
                    // Many changes at once (a relist) make one pass.
                    while let Some(Some(())) = changes.next().now_or_never() {}
                }
                _ = resync.tick() => {}
            }
            if let Err(e) = self.mirror_storage_classes_once().await {
                tracing::debug!(tenant = %self.inner.tenant, error = %e, "mirroring StorageClasses");
            }
        }
    }

    /// One pass: create, replace or delete the tenant's mirrors to match the host's classes.
    pub(crate) async fn mirror_storage_classes_once(&self) -> Result<(), SyncError> {
        let api: Api<StorageClass> = Api::all(self.inner.tenant_client.clone());
        let tenant: BTreeMap<String, Value> = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|c| Some((c.metadata.name.clone()?, to_value(c).ok()?)))
            .collect();
        let mirrored = |c: &Value| {
            c.pointer("/metadata/labels")
                .and_then(|l| l.get(host_names::LABEL_HOST_STORAGE_CLASS))
                .and_then(Value::as_str)
                == Some("true")
        };
        let mut wanted_names = BTreeSet::new();
        for host in self.inner.storage_classes.state() {
            let wanted = translate::tenant_storage_class(&to_value(&*host)?);
            let Some(name) = wanted.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            wanted_names.insert(name.to_owned());
            match tenant.get(name) {
                // The tenant's own class of that name: not ours to change.
                Some(current) if !mirrored(current) => {}
                Some(current)
                    if translate::storage_class_shown(current)
                        == translate::storage_class_shown(&wanted) => {}
                Some(current)
                    if translate::storage_class_immutable(current)
                        == translate::storage_class_immutable(&wanted) =>
                {
                    let patch = translate::merge_patch(
                        &json!({
                            "metadata": {
                                "labels": current.pointer("/metadata/labels"),
                                "annotations": current.pointer("/metadata/annotations"),
                            },
                            "allowVolumeExpansion": current.get("allowVolumeExpansion"),
                        }),
                        &json!({
                            "metadata": {
                                "labels": wanted.pointer("/metadata/labels"),
                                "annotations": wanted.pointer("/metadata/annotations"),
                            },
                            "allowVolumeExpansion": wanted.get("allowVolumeExpansion"),
                        }),
                    );
                    api.patch(
                        name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await?;
                }
                Some(_) => {
                    // What the tenant API keeps immutable changed (the host class was made
                    // again): made again.
                    self.delete_tenant_class(&api, name).await?;
                    self.create_tenant_class(&api, &wanted).await?;
                }
                None => self.create_tenant_class(&api, &wanted).await?,
            }
        }
        for (name, current) in &tenant {
            if mirrored(current) && !wanted_names.contains(name) {
                self.delete_tenant_class(&api, name).await?;
            }
        }
        Ok(())
    }

    async fn create_tenant_class(
        &self,
        api: &Api<StorageClass>,
        wanted: &Value,
    ) -> Result<(), SyncError> {
        let typed: StorageClass = serde_json::from_value(wanted.clone())
            .map_err(|source| SyncError::Decode { kind: "StorageClass", source })?;
        match api.create(&PostParams::default(), &typed).await {
            Ok(_) => Ok(()),
            // Made meanwhile (by the tenant, or by an earlier pass): the next pass compares.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete_tenant_class(
        &self,
        api: &Api<StorageClass>,
        name: &str,
    ) -> Result<(), SyncError> {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
