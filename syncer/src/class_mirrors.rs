//! The tenant's mirrors of the host's classes (StorageClasses, IngressClasses), as virtual nodes
//! mirror host nodes: each host class has a tenant class of its name, labelled as a mirror
//! ([`Mirrored::LABEL`]), so `kubectl get sc` and `kubectl get ingressclass` show the classes a
//! claim or an Ingress can name and which one is the default (the tenant API's admission gives
//! a claim or an Ingress that names none the host's default). A class the tenant made itself
//! (without the label) is left alone, even under a host class's name; a mirror whose host class
//! is gone goes.

use k8s_openapi::api::networking::v1::IngressClass;

use crate::*;

/// A cluster-scoped kind of class the tenant is shown the host's of.
pub(crate) trait Mirrored:
    kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The label (set to `"true"`) that marks a tenant class as a mirror.
    const LABEL: &'static str;

    /// The tenant's mirror of host class `host`, labelled [`Mirrored::LABEL`].
    fn mirror(host: &Value) -> Value;

    /// The fields the tenant API refuses to change: a mirror that differs in one is made again.
    fn immutable(class: &Value) -> Value;

    /// What a tenant is shown of a class (its mirror as [`Mirrored::mirror`] writes it): two
    /// that show the same need no write between them.
    fn shown(class: &Value) -> Value;

    /// The fields of a mirror a merge patch brings in line (its labels and annotations, and
    /// what else may change), as the patch writes them.
    fn mutable(class: &Value) -> Value;
}

impl Mirrored for StorageClass {
    const LABEL: &'static str = host_names::LABEL_HOST_STORAGE_CLASS;

    fn mirror(host: &Value) -> Value {
        translate::tenant_storage_class(host)
    }

    fn immutable(class: &Value) -> Value {
        translate::storage_class_immutable(class)
    }

    fn shown(class: &Value) -> Value {
        translate::storage_class_shown(class)
    }

    fn mutable(class: &Value) -> Value {
        json!({
            "metadata": {
                "labels": class.pointer("/metadata/labels"),
                "annotations": class.pointer("/metadata/annotations"),
            },
            "allowVolumeExpansion": class.get("allowVolumeExpansion"),
        })
    }
}

impl Mirrored for IngressClass {
    const LABEL: &'static str = host_names::LABEL_HOST_INGRESS_CLASS;

    fn mirror(host: &Value) -> Value {
        translate::tenant_ingress_class(host)
    }

    fn immutable(class: &Value) -> Value {
        json!({"controller": class.pointer("/spec/controller")})
    }

    fn shown(class: &Value) -> Value {
        translate::ingress_class_shown(class)
    }

    fn mutable(class: &Value) -> Value {
        json!({
            "metadata": {
                "labels": class.pointer("/metadata/labels"),
                "annotations": class.pointer("/metadata/annotations"),
            },
            "spec": {"parameters": class.pointer("/spec/parameters")},
        })
    }
}

/// Whether tenant class `class` is a mirror of `K`'s.
fn mirrored<K: Mirrored>(class: &Value) -> bool {
    class.pointer("/metadata/labels").and_then(|l| l.get(K::LABEL)).and_then(Value::as_str)
        == Some("true")
}

impl Syncer {
    /// Keep the tenant's mirrors of `K` in line with the host's classes, as these change.
    /// `classes`: the host's classes; `ready`: true once they are listed; `changes`: told of
    /// every change to them (and once at the start).
    pub(crate) async fn mirror_classes<K: Mirrored>(
        self,
        classes: Store<K>,
        ready: tokio::sync::watch::Receiver<bool>,
        mut changes: Listener<()>,
    ) {
        let _ = ready.clone().wait_for(|ready| *ready).await;
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
            if let Err(e) = self.mirror_classes_once(&classes).await {
                tracing::debug!(tenant = %self.inner.tenant, kind = K::kind(&()).as_ref(), error = %e, "mirroring classes");
            }
        }
    }

    /// One pass: create, patch, make again or delete the tenant's mirrors to match the host's
    /// classes.
    pub(crate) async fn mirror_classes_once<K: Mirrored>(
        &self,
        classes: &Store<K>,
    ) -> Result<(), SyncError> {
        let api: Api<K> = Api::all(self.inner.tenant_client.clone());
        let tenant: BTreeMap<String, Value> = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|c| Some((c.meta().name.clone()?, to_value(c).ok()?)))
            .collect();
        let mut wanted_names = BTreeSet::new();
        for host in classes.state() {
            let wanted = K::mirror(&to_value(&*host)?);
            let Some(name) = wanted.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            wanted_names.insert(name.to_owned());
            match tenant.get(name) {
                // The tenant's own class of that name: not ours to change.
                Some(current) if !mirrored::<K>(current) => {}
                Some(current) if K::shown(current) == K::shown(&wanted) => {}
                Some(current) if K::immutable(current) == K::immutable(&wanted) => {
                    let patch = translate::merge_patch(&K::mutable(current), &K::mutable(&wanted));
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
                }
                Some(_) => {
                    // What the tenant API keeps immutable changed (the host class was made
                    // again): made again.
                    delete_class(&api, name).await?;
                    create_class(&api, &wanted).await?;
                }
                None => create_class(&api, &wanted).await?,
            }
        }
        for (name, current) in &tenant {
            if mirrored::<K>(current) && !wanted_names.contains(name) {
                delete_class(&api, name).await?;
            }
        }
        Ok(())
    }
}

async fn create_class<K: Mirrored>(api: &Api<K>, wanted: &Value) -> Result<(), SyncError> {
    let typed: K = serde_json::from_value(wanted.clone())
        .map_err(|source| SyncError::Decode { kind: "class", source })?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        // Made meanwhile (by the tenant, or by an earlier pass): the next pass compares.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn delete_class<K: Mirrored>(api: &Api<K>, name: &str) -> Result<(), SyncError> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
