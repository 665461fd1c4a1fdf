//! The loop of the syncer's parts that keep a set of host objects in line with a set of tenant
//! objects in whole passes (NetworkPolicies, Services): a pass after each change on either side
//! (a burst of changes, such as a relist, makes one), after each resync period, and again soon
//! after a pass that failed.

use std::future::Future;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::*;

/// How soon a pass that failed is made again.
const RETRY: Duration = Duration::from_secs(1);

/// A reflector on every `K` of the tenant reached with `client`: its cache, and its changes as
/// a stream (what [`Syncer::passes`] is woken by).
pub(crate) fn reflect<K>(
    client: &kube::Client,
) -> (Store<K>, impl Stream<Item = Result<(), watcher::Error>> + Send + 'static)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let changes = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| e.map(|_| ()));
    (store, changes)
}

/// A namespaced kind the syncer writes and reads as itself.
pub(crate) trait Namespaced:
    kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// Whether `store`'s first list is complete.
pub(crate) fn ready<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>) -> bool {
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}

impl Syncer {
    /// Make `pass` whenever `tenant` (the tenant's watches, as one stream) or `host` (the host
    /// objects' subscription) changes, once `ready` says every list is complete (before that, an
    /// object missing could only be one not yet seen). Returns when `tenant` ends. `what` names
    /// the objects in logs.
    pub(crate) async fn passes<H, Fut>(
        &self,
        what: &str,
        tenant: impl Stream<Item = Result<(), watcher::Error>>,
        mut host: Subscription<H>,
        ready: impl Fn() -> bool,
        mut pass: impl FnMut() -> Fut,
    ) where
        H: host_watch::Fed,
        Fut: Future<Output = Result<(), SyncError>>,
    {
        futures::pin_mut!(tenant);
        let mut resync = tokio::time::interval(self.inner.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry = tokio::time::interval(RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed = false;
        loop {
            tokio::select! {
                change = tenant.next() => match change {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        tracing::warn!(tenant = %self.inner.tenant, error = %e, "watching the tenant's {what}");
                        continue;
                    }
                    None => return,
                },
                Some(_) = host.next() => {}
                _ = resync.tick() => {}
                _ = retry.tick(), if failed => {}
            }
            while let Some(Some(_)) = tenant.next().now_or_never() {}
            while let Some(Some(_)) = host.next().now_or_never() {}
            if !ready() {
                continue;
            }
            failed = match pass().await {
                Ok(()) => false,
                Err(e) => {
                    tracing::warn!(tenant = %self.inner.tenant, error = %e, "syncing {what}");
                    true
                }
            };
        }
    }
}

/// Whether host object metadata `current` carries every label and annotation of `wanted` (what
/// the syncer writes), whatever else others added.
pub(crate) fn carries_all(current: &ObjectMeta, wanted: &ObjectMeta) -> bool {
    let has_all = |have: &Option<BTreeMap<String, String>>,
                   want: &Option<BTreeMap<String, String>>| {
        want.iter().flatten().all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    has_all(&current.labels, &wanted.labels) && has_all(&current.annotations, &wanted.annotations)
}

impl Syncer {
    /// Show tenant object `tenant` (a Service or an Ingress) the load balancer the host gave its
    /// host object `host`: `status.loadBalancer`.
    pub(crate) async fn bring_up_load_balancer<K>(
        &self,
        tenant: &K,
        host: &K,
    ) -> Result<(), SyncError>
    where
        K: Namespaced,
    {
        let balancer = |object: &K| {
            let status =
                to_value(object).ok().and_then(|v| v.pointer("/status/loadBalancer").cloned());
            status.filter(|s| !s.is_null()).unwrap_or_else(|| json!({}))
        };
        let given = balancer(host);
        if balancer(tenant) == given {
            return Ok(());
        }
        let namespace = tenant.meta().namespace.as_deref().unwrap_or_default();
        let name = tenant.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let patch = json!({"status": {"loadBalancer": given}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    /// A Warning or Normal (`kind`) Event about tenant object `object`, written by the syncer's
    /// recorder (repeats aggregated).
    pub(crate) async fn object_event<K>(
        &self,
        object: &K,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), SyncError>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let meta = object.meta();
        let target = EventTarget {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        };
        let kind = if kind == "Warning" { EventType::Warning } else { EventType::Normal };
        self.inner.recorder.record(&target, kind, reason, message).await?;
        Ok(())
    }

    /// Make host object `wanted` in the tenant's host namespace, or set the one under its name
    /// back to it where `in_line` says it differs; the host object as it is now. One that is not
    /// the syncer's own for it is left alone ([`SyncError::Taken`]).
    pub(crate) async fn keep_host<K>(
        &self,
        host: &Store<K>,
        wanted: &K,
        in_line: impl Fn(&K, &K) -> bool,
    ) -> Result<K, SyncError>
    where
        K: Namespaced,
    {
        let name = wanted.meta().name.clone().unwrap_or_default();
        let kind = K::kind(&());
        let api: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let cached = host.get(&ObjectRef::new(&name).within(&self.inner.host_namespace));
        let current = match cached {
            Some(current) => (*current).clone(),
            None => match api.create(&PostParams::default(), wanted).await {
                Ok(made) => {
                    tracing::debug!(tenant = %self.inner.tenant, %kind, %name, "host object created");
                    return Ok(made);
                }
                // Made meanwhile, by this syncer (the cache lags) or by someone else.
                Err(kube::Error::Api(e)) if e.code == 409 => api.get(&name).await?,
                Err(e) => return Err(e.into()),
            },
        };
        let identity = wanted.meta().annotations.clone().unwrap_or_default();
        let meta = current.meta();
        if !host_names::stands_for(
            meta.labels.as_ref(),
            meta.annotations.as_ref(),
            &self.inner.tenant,
            &identity,
        ) {
            return Err(SyncError::Taken { kind, name });
        }
        if in_line(&current, wanted) {
            return Ok(current);
        }
        let mut replacement = wanted.clone();
        replacement.meta_mut().resource_version = current.meta().resource_version.clone();
        let replaced = api.replace(&name, &PostParams::default(), &replacement).await?;
        tracing::debug!(tenant = %self.inner.tenant, %kind, %name, "host object set back");
        Ok(replaced)
    }

    /// Delete the tenant's host objects in `host` that stand for a tenant object not in `kept`
    /// (gone, or no longer carried); what is not the syncer's own is left. Every one is tried;
    /// the first error is returned.
    pub(crate) async fn delete_orphans<K>(
        &self,
        host: &Store<K>,
        kept: &HashSet<Key>,
    ) -> Result<(), SyncError>
    where
        K: Namespaced,
    {
        let mut outcome = Ok(());
        for current in host.state() {
            let meta = current.meta();
            let Some(key) = host_names::stood_for(meta) else { continue };
            if kept.contains(&key) {
                continue;
            }
            let identity = host_names::host_annotations(&key.0, &key.1, "");
            let (labels, annotations) = (meta.labels.as_ref(), meta.annotations.as_ref());
            if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
                continue;
            }
            if let Err(e) = self.delete_host_object(&*current).await {
                outcome = outcome.and(Err(e));
            }
        }
        outcome
    }

    /// Delete host object `host` of the tenant's host namespace, if it is still the one seen
    /// (its uid); one already gone or made again meanwhile is left.
    pub(crate) async fn delete_host_object<K>(&self, host: &K) -> Result<(), SyncError>
    where
        K: Namespaced,
    {
        let name = host.meta().name.as_deref().unwrap_or_default();
        let api: Api<K> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: host.meta().uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::debug!(tenant = %self.inner.tenant, kind = %K::kind(&()), name, "host object deleted");
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
