//! The host copies of the ConfigMaps and Secrets tenant pods reference: made when a pod needs
//! them, kept in line with their tenant objects, deleted with them.

use crate::passes::Namespaced;
use crate::*;

/// The tenant objects (namespace, name) that the host copies in `copies` stand for; token
/// Secrets, which stand for none, are left out.
pub(crate) fn copied_objects<K: Namespaced>(copies: &Store<K>) -> Vec<Key> {
    copies.state().iter().filter_map(|copy| copied_object(&**copy)).collect()
}

/// The tenant object (namespace, name) host copy `copy` stands for; `None` for a token Secret.
fn copied_object<K: Namespaced>(copy: &K) -> Option<Key> {
    let a = copy.meta().annotations.as_ref()?;
    Some((
        a.get(host_names::ANNOTATION_NAMESPACE)?.clone(),
        a.get(host_names::ANNOTATION_NAME)?.clone(),
    ))
}

impl Syncer {
    /// Keep the host copies of ConfigMaps or Secrets (the ones pods referenced) in line with
    /// the tenant's objects as these change. Both sides are watched: a tenant change seen before
    /// the host side shows the copy it concerns is looked at again when the copy shows up.
    /// `host`: the tenant's host objects of the kind, as the shared host side shows them.
    pub(crate) async fn mirror<K>(self, mut host: Subscription<K>)
    where
        K: Namespaced + Fed,
    {
        let copies = host.store();
        let _ = copies.wait_until_ready().await;
        let tenant: Api<K> = Api::all(self.inner.tenant_client.clone());
        let stream = watcher(tenant, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut relist = Relist::<Key>::default();
        loop {
            let object = tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::Apply(o))) => o,
                    Some(Ok(watcher::Event::InitApply(o))) => {
                        if let (Some(ns), Some(name)) = (&o.meta().namespace, &o.meta().name) {
                            relist.saw(&(ns.clone(), name.clone()));
                        }
                        o
                    }
                    Some(Ok(watcher::Event::Delete(o))) => {
                        if let (Some(ns), Some(name)) = (&o.meta().namespace, &o.meta().name) {
                            self.drop_copy_if_gone::<K>(&copies, ns, name).await;
                        }
                        continue;
                    }
                    Some(Ok(watcher::Event::Init)) => {
                        relist.begin();
                        continue;
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        // Objects deleted while the watch was away have copies the relist did
                        // not show.
                        let shown = relist.end().unwrap_or_default();
                        for (ns, name) in copied_objects(&copies) {
                            if !shown.contains(&(ns.clone(), name.clone())) {
                                self.drop_copy_if_gone::<K>(&copies, &ns, &name).await;
                            }
                        }
                        continue;
                    }
                    Some(Err(_)) => continue,
                    None => return,
                },
                Some(change) = host.next() => {
                    let (watcher::Event::Apply(copy) | watcher::Event::InitApply(copy)) = change
                    else {
                        continue;
                    };
                    // Token Secrets carry no tenant object's name: they are not copies.
                    let Some((ns, name)) = copied_object(&copy) else { continue };
                    // Read the tenant object afresh: the tenant watch may not have shown its
                    // latest version yet, and an older one must not overwrite the copy.
                    let api: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), &ns);
                    match api.get_opt(&name).await {
                        Ok(Some(o)) => o,
                        Ok(None) => continue,
                        Err(e) => {
                            tracing::debug!(tenant = %self.inner.tenant, object = %format!("{ns}/{name}"), error = %e, "reading a copied object");
                            continue;
                        }
                    }
                }
            };
            self.keep_copy(&copies, &object).await;
        }
    }

    /// Update the host copy of tenant object `object`, if a pod referenced it (it has a copy)
    /// and the copy differs.
    pub(crate) async fn keep_copy<K>(&self, copies: &Store<K>, object: &K)
    where
        K: Namespaced,
    {
        let (Some(ns), Some(name)) =
            (object.meta().namespace.as_deref(), object.meta().name.as_deref())
        else {
            return;
        };
        let host_name = host_names::host_name(ns, name);
        let Some(copy) = copies.get(&ObjectRef::new(&host_name).within(&self.inner.host_namespace))
        else {
            return; // No pod has referenced it: nothing to keep in line.
        };
        let wanted = match to_value(object) {
            Ok(v) => translate::host_copy(&self.inner.tenant, &self.inner.host_namespace, &v),
            Err(_) => return,
        };
        let current = to_value(&*copy).unwrap_or_default();
        if ["data", "binaryData", "type"].iter().all(|f| current.get(*f) == wanted.get(*f)) {
            return;
        }
        if let Err(e) = self.put_host::<K>(wanted).await {
            tracing::warn!(tenant = %self.inner.tenant, object = %host_name, error = %e, "updating a host copy");
        }
    }

    /// Delete the host copy of tenant object `namespace/name` once the tenant no longer has the
    /// object: a deleted Secret or ConfigMap leaves the host too. The tenant is asked first, so
    /// that an object created again since the watch saw it go keeps its copy.
    pub(crate) async fn drop_copy_if_gone<K>(&self, copies: &Store<K>, namespace: &str, name: &str)
    where
        K: Namespaced,
    {
        let host_name = host_names::host_name(namespace, name);
        if copies.get(&ObjectRef::new(&host_name).within(&self.inner.host_namespace)).is_none() {
            return;
        }
        let tenant: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        match tenant.get_opt(name).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(e) => {
                tracing::debug!(tenant = %self.inner.tenant, object = %format!("{namespace}/{name}"), error = %e, "reading a copied object");
                return;
            }
        }
        let host: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match host.delete(&host_name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::debug!(tenant = %self.inner.tenant, object = %host_name, "deleted a copy")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(tenant = %self.inner.tenant, object = %host_name, error = %e, "deleting a host copy")
            }
        }
    }

    /// Copy the ConfigMaps and Secrets the pod references to the host (created or replaced);
    /// the keys each holds, for the pod's `envFrom`.
    pub(crate) async fn copy_references(
        &self,
        pod: &Value,
    ) -> Result<translate::EnvSources, SyncError> {
        let (namespace, _) = namespace_and_name(pod);
        let refs = translate::references(pod);
        let mut sources = translate::EnvSources::default();
        for name in &refs.config_maps {
            if let Some(object) = self.copy_one::<ConfigMap>(namespace, name).await? {
                sources.insert(&object);
            }
        }
        for name in &refs.secrets {
            if let Some(object) = self.copy_one::<Secret>(namespace, name).await? {
                sources.insert(&object);
            }
        }
        Ok(sources)
    }

    /// Copy one tenant object to the host, if it exists; the tenant object.
    pub(crate) async fn copy_one<K>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, SyncError>
    where
        K: Namespaced,
    {
        let api: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let Some(object) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let object = to_value(&object)?;
        let copy = translate::host_copy(&self.inner.tenant, &self.inner.host_namespace, &object);
        self.put_host::<K>(copy).await?;
        Ok(Some(object))
    }

    pub(crate) async fn put_host<K>(&self, object: Value) -> Result<(), SyncError>
    where
        K: Namespaced,
    {
        let name =
            object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let typed: K = serde_json::from_value(object)
            .map_err(|source| SyncError::Decode { kind: "ConfigMap or Secret", source })?;
        let api: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match api.create(&PostParams::default(), &typed).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let current = api.get(&name).await?;
                let (labels, annotations) =
                    (current.meta().labels.as_ref(), current.meta().annotations.as_ref());
                let identity = typed.meta().annotations.clone().unwrap_or_default();
                if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
                    return Err(SyncError::Taken { kind: K::kind(&()), name });
                }
                let mut replacement = typed;
                replacement.meta_mut().resource_version = current.meta().resource_version.clone();
                api.replace(&name, &PostParams::default(), &replacement).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}
