//! Tenant PersistentVolumeClaims and their host claims: each tenant claim gets a host claim of
//! its own in the tenant's host namespace ([`translate::host_claim`]) as soon as it is created
//! (so a claim of an `Immediate` class is bound at once, as its class says), or when a pod that
//! mounts it is about to be carried, whichever comes first. The host claim's binding and status
//! go up to the tenant claim ([`translate::claim_up`]); the host claim is deleted with the
//! tenant claim. A bound tenant claim whose host claim goes is `Lost`, as the PV controller marks a
//! claim whose volume went.
//!
//! One task per syncer watches the tenant's claims and is sent the changes to its host claims;
//! it reconciles one claim at a time, each from what both clusters hold now.

use crate::*;

/// How soon a claim whose reconcile failed is looked at again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// What became of carrying a tenant claim to the host.
#[derive(Debug)]
pub(crate) enum Carry {
    /// The host claim exists (made now or before).
    Made(Value),
    /// The claim cannot be carried: why.
    NotCarried(translate::NotCarried),
    /// A host claim made for an earlier tenant claim of the same name is in the way; it is
    /// deleted by the claim's own reconcile.
    Stale,
}

/// Whether the pod's claims let its host pod be made.
#[derive(Debug)]
pub(crate) enum PodClaims {
    /// Every claim the pod mounts has its host claim.
    Ready,
    /// The pod waits, for the reason given (kube-scheduler's words where it has some).
    Waiting(String),
}

/// The tenant claim a host claim stands for.
fn tenant_key_of(host: &PersistentVolumeClaim) -> Option<Key> {
    let a = host.metadata.annotations.as_ref()?;
    Some((
        a.get(host_names::ANNOTATION_NAMESPACE)?.clone(),
        a.get(host_names::ANNOTATION_NAME)?.clone(),
    ))
}

fn key_of(claim: &PersistentVolumeClaim) -> Option<Key> {
    Some((claim.metadata.namespace.clone()?, claim.metadata.name.clone()?))
}

fn uid_of(object: &Value) -> Option<&str> {
    object.pointer("/metadata/uid").and_then(Value::as_str)
}

fn deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// Whether host claim `host` was written by the syncer of `tenant` for tenant claim
/// `namespace/name`.
fn stands_for(host: &Value, tenant: &str, namespace: &str, name: &str) -> bool {
    let read =
        |pointer: &str| host.pointer(pointer).and_then(|m| serde_json::from_value(m.clone()).ok());
    let labels: Option<BTreeMap<String, String>> = read("/metadata/labels");
    let annotations: Option<BTreeMap<String, String>> = read("/metadata/annotations");
    let identity = host_names::host_annotations(namespace, name, "");
    host_names::stands_for(labels.as_ref(), annotations.as_ref(), tenant, &identity)
}

/// The tenant claim UID a host claim records.
fn recorded_uid(host: &Value) -> Option<&str> {
    host.pointer("/metadata/annotations")
        .and_then(|a| a.get(host_names::ANNOTATION_UID))
        .and_then(Value::as_str)
}

impl Syncer {
    /// Keep the tenant's claims and their host claims in line, as both change. `host`: the
    /// tenant's host claims, as the shared host side shows them.
    pub(crate) async fn sync_claims(self, mut host: Subscription<PersistentVolumeClaim>) {
        // A claim is judged once both sides and the host's classes are known: before that, a
        // missing host claim or class could only be a cache not yet filled.
        let _ = host.store().wait_until_ready().await;
        let _ = self.inner.storage_classes_ready.clone().wait_for(|ready| *ready).await;
        let api: Api<PersistentVolumeClaim> = Api::all(self.inner.tenant_client.clone());
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        futures::pin_mut!(stream);
        let mut relist = Relist::<Key>::default();
        let mut known: BTreeSet<Key> = BTreeSet::new();
        let mut retry = tokio::time::interval(CLAIM_RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut resync = tokio::time::interval(self.inner.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let keys: Vec<Key> = tokio::select! {
                event = stream.next() => match event {
                    Some(Ok(watcher::Event::Apply(c))) => {
                        let key = key_of(&c);
                        known.extend(key.clone());
                        key.into_iter().collect()
                    }
                    Some(Ok(watcher::Event::InitApply(c))) => {
                        let key = key_of(&c);
                        if let Some(key) = &key {
                            relist.saw(key);
                            known.insert(key.clone());
                        }
                        key.into_iter().collect()
                    }
                    Some(Ok(watcher::Event::Delete(c))) => {
                        let key = key_of(&c);
                        if let Some(key) = &key {
                            known.remove(key);
                        }
                        key.into_iter().collect()
                    }
                    Some(Ok(watcher::Event::Init)) => {
                        relist.begin();
                        continue;
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        // Claims deleted while the watch was away have host claims the relist
                        // did not show.
                        let shown = relist.end().unwrap_or_default();
                        known.retain(|k| shown.contains(k));
                        self.host_claim_keys().into_iter().filter(|k| !shown.contains(k)).collect()
                    }
                    Some(Err(_)) => continue,
                    None => return,
                },
                Some(change) = host.next() => match change {
                    watcher::Event::Apply(h)
                    | watcher::Event::InitApply(h)
                    | watcher::Event::Delete(h) => tenant_key_of(&h).into_iter().collect(),
                    _ => continue,
                },
                _ = retry.tick() => std::mem::take(&mut *self.inner.claims_to_retry.lock())
                    .into_iter()
                    .collect(),
                _ = resync.tick() => {
                    let mut all = known.clone();
                    all.extend(self.host_claim_keys());
                    all.into_iter().collect()
                }
            };
            for key in keys {
                if let Err(e) = self.reconcile_claim(&key).await {
                    tracing::warn!(tenant = %self.inner.tenant, claim = %format!("{}/{}", key.0, key.1), error = %e, "syncing a claim");
                    self.inner.claims_to_retry.lock().insert(key);
                }
            }
        }
    }

    /// The tenant claims the cached host claims stand for.
    fn host_claim_keys(&self) -> Vec<Key> {
        let cached = self.inner.host_claims.get().map(Store::state).unwrap_or_default();
        cached.iter().filter_map(|h| tenant_key_of(h)).collect()
    }

    /// Host claim `host_name` from the cache; on a miss, from the host when `confirm`.
    async fn host_claim(&self, host_name: &str, confirm: bool) -> Result<Option<Value>, SyncError> {
        let key = ObjectRef::new(host_name).within(&self.inner.host_namespace);
        if let Some(h) = self.inner.host_claims.get().and_then(|s| s.get(&key)) {
            return Ok(Some(to_value(&*h)?));
        }
        if !confirm {
            return Ok(None);
        }
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        api.get_opt(host_name).await?.map(|h| to_value(&h)).transpose()
    }

    /// Bring tenant claim `key` and its host claim in line.
    pub(crate) async fn reconcile_claim(&self, key: &Key) -> Result<(), SyncError> {
        let (namespace, name) = key;
        let host_name = host_names::host_name(namespace, name);
        let tenant_api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let tenant = tenant_api.get_opt(name).await?.map(|t| to_value(&t)).transpose()?;
        let host = self.host_claim(&host_name, false).await?;
        let tenant_name = &self.inner.tenant;
        match (tenant, host) {
            (None, None) => Ok(()),
            (None, Some(host)) => {
                if stands_for(&host, tenant_name, namespace, name) {
                    self.delete_host_claim(&host).await?;
                }
                Ok(())
            }
            (Some(tenant), Some(host)) if !stands_for(&host, tenant_name, namespace, name) => {
                let taken = SyncError::Taken {
                    kind: "PersistentVolumeClaim".into(),
                    name: host_name.clone(),
                };
                self.claim_event(&tenant, EventType::Warning, "HostNameTaken", &taken.to_string())
                    .await
            }
            (Some(tenant), Some(host)) if recorded_uid(&host) != uid_of(&tenant) => {
                // Made for an earlier claim of the same name: its volume is not this claim's.
                self.delete_host_claim(&host).await
            }
            (Some(tenant), Some(host)) => self.claim_up(&tenant, &host).await,
            (Some(tenant), None) => {
                if deleting(&tenant) {
                    return Ok(());
                }
                if translate::bound_by_syncer(&tenant) {
                    // Bound before: its host claim (and so its volume) went under it. The cache
                    // may not show a host claim just made, so ask.
                    return match self.host_claim(&host_name, true).await? {
                        Some(host) => self.claim_up(&tenant, &host).await,
                        None => self.lose(&tenant).await,
                    };
                }
                match self.carry_claim(&tenant).await {
                    Ok(Carry::Made(host)) => self.claim_up(&tenant, &host).await,
                    Ok(Carry::NotCarried(why)) => {
                        let message = format!("{why}");
                        self.claim_event(&tenant, EventType::Warning, why.reason(), &message).await
                    }
                    // The host watch brings the stale one's deletion, and this claim back.
                    Ok(Carry::Stale) => self.reconcile_stale(&host_name).await,
                    Err(e @ SyncError::Taken { .. }) => {
                        self.claim_event(
                            &tenant,
                            EventType::Warning,
                            "HostNameTaken",
                            &e.to_string(),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Delete the host claim `host_name` made for an earlier tenant claim of the same name.
    async fn reconcile_stale(&self, host_name: &str) -> Result<(), SyncError> {
        match self.host_claim(host_name, true).await? {
            Some(host) => self.delete_host_claim(&host).await,
            None => Ok(()),
        }
    }

    /// Create the host claim of tenant claim `tenant` if it has none ([`Carry`]). A host claim
    /// under its name that stands for another object is [`SyncError::Taken`].
    pub(crate) async fn carry_claim(&self, tenant: &Value) -> Result<Carry, SyncError> {
        let classes: Vec<Value> =
            self.inner.storage_classes.state().iter().filter_map(|c| to_value(&**c).ok()).collect();
        let wanted = match translate::host_claim(
            &self.inner.tenant,
            &self.inner.host_namespace,
            tenant,
            &classes,
        ) {
            Ok(h) => h,
            Err(why) => return Ok(Carry::NotCarried(why)),
        };
        let (namespace, name) = namespace_and_name(tenant);
        let host_name = host_names::host_name(namespace, name);
        let typed: PersistentVolumeClaim = serde_json::from_value(wanted)
            .map_err(|source| SyncError::Decode { kind: "PersistentVolumeClaim", source })?;
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match api.create(&PostParams::default(), &typed).await {
            Ok(made) => {
                tracing::debug!(tenant = %self.inner.tenant, claim = %format!("{namespace}/{name}"), host = %host_name, "host claim created");
                Ok(Carry::Made(to_value(&made)?))
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = to_value(&api.get(&host_name).await?)?;
                if !stands_for(&existing, &self.inner.tenant, namespace, name) {
                    return Err(SyncError::Taken {
                        kind: "PersistentVolumeClaim".into(),
                        name: host_name,
                    });
                }
                if recorded_uid(&existing) != uid_of(tenant) {
                    return Ok(Carry::Stale);
                }
                Ok(Carry::Made(existing))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the claims pod `pod` mounts let its host pod be made: each exists in the tenant
    /// and has its host claim (made now if it had none).
    pub(crate) async fn pod_claims(&self, pod: &Value) -> Result<PodClaims, SyncError> {
        let (namespace, _) = namespace_and_name(pod);
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        for claim in translate::pod_claims(pod) {
            let Some(tenant) = api.get_opt(&claim).await? else {
                return Ok(PodClaims::Waiting(format!(
                    "persistentvolumeclaim {claim:?} not found"
                )));
            };
            let tenant = to_value(&tenant)?;
            if deleting(&tenant) {
                let why = format!("persistentvolumeclaim {claim:?} is being deleted");
                return Ok(PodClaims::Waiting(why));
            }
            let host_name = host_names::host_name(namespace, &claim);
            let cached = self.host_claim(&host_name, false).await?;
            let ready = cached.as_ref().is_some_and(|h| {
                stands_for(h, &self.inner.tenant, namespace, &claim)
                    && recorded_uid(h) == uid_of(&tenant)
            });
            if ready {
                continue;
            }
            let classes_known = *self.inner.storage_classes_ready.borrow();
            if !classes_known {
                return Ok(PodClaims::Waiting(
                    "waiting for the host cluster's StorageClasses".to_owned(),
                ));
            }
            match self.carry_claim(&tenant).await? {
                Carry::Made(_) => {}
                Carry::NotCarried(why) => {
                    return Ok(PodClaims::Waiting(format!(
                        "persistentvolumeclaim {claim:?} is not carried to the host cluster: {why}"
                    )));
                }
                Carry::Stale => {
                    return Ok(PodClaims::Waiting(format!(
                        "persistentvolumeclaim {claim:?} is being made again on the host cluster"
                    )));
                }
            }
        }
        Ok(PodClaims::Ready)
    }

    /// Give tenant claim `tenant` its host claim's binding and status.
    async fn claim_up(&self, tenant: &Value, host: &Value) -> Result<(), SyncError> {
        let up = translate::claim_up(tenant, host);
        let (namespace, name) = namespace_and_name(tenant);
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let params = kube::api::PatchParams::default();
        let gone = |e: &kube::Error| matches!(e, kube::Error::Api(e) if e.code == 404);
        if let Some(spec) = up.spec {
            match api.patch(name, &params, &kube::api::Patch::Merge(&spec)).await {
                Err(e) if gone(&e) => return Ok(()),
                other => {
                    other?;
                }
            }
        }
        if let Some(status) = up.status {
            match api.patch_status(name, &params, &kube::api::Patch::Merge(&status)).await {
                Err(e) if gone(&e) => return Ok(()),
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    /// A bound tenant claim whose host claim is gone: `Lost`, and told as the PV controller tells.
    async fn lose(&self, tenant: &Value) -> Result<(), SyncError> {
        if tenant.pointer("/status/phase").and_then(Value::as_str) == Some("Lost") {
            return Ok(());
        }
        let (namespace, name) = namespace_and_name(tenant);
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let patch = json!({"status": {"phase": "Lost"}});
        let params = kube::api::PatchParams::default();
        match api.patch_status(name, &params, &kube::api::Patch::Merge(&patch)).await {
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            other => {
                other?;
            }
        }
        self.claim_event(tenant, EventType::Warning, "ClaimLost", translate::CLAIM_LOST).await
    }

    async fn delete_host_claim(&self, host: &Value) -> Result<(), SyncError> {
        let name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let uid = uid_of(host).map(str::to_owned);
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid, resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                tracing::debug!(tenant = %self.inner.tenant, host = %name, "host claim deleted");
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// An Event about tenant claim `claim`, written by the syncer's recorder (repeats
    /// aggregated).
    async fn claim_event(
        &self,
        claim: &Value,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), SyncError> {
        let (namespace, name) = namespace_and_name(claim);
        let uid = uid_of(claim).map(str::to_owned);
        let target = EventTarget::persistent_volume_claim(namespace, name, uid);
        self.inner.recorder.record(&target, kind, reason, message).await?;
        Ok(())
    }
}
