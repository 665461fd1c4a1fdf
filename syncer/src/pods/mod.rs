//! Tenant pods and their host pods: one reconcile per tenant pod brings the pair in line
//! (create, replace, delete, fail, wait), its GPUs claimed through [`crate::placement`].

mod decide;
mod status_up;
#[cfg(test)]
mod tests;

pub(crate) use decide::finished;
use decide::{decide, devices_ready, Facts, Step};

use crate::*;

/// How long a pod whose host object is someone else's waits before the syncer looks again.
pub(crate) const TAKEN_RETRY: Duration = Duration::from_secs(30);

/// Why the syncer cannot place a tenant pod's GPUs; the message is what the pod's
/// `PodScheduled` condition tells its owner.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unplaceable {
    /// The pod's GPU resources do not read as requests ([`gpu_requests`]'s complaint).
    #[error(transparent)]
    Requests(#[from] carrel_gpu::requests::RequestError),
    /// The pod's spec does not read as scheduling needs.
    #[error(transparent)]
    Needs(#[from] carrel_gpu::fit::NeedsError),
    /// The pod asks for `nvidia.com/gpu` and the tenant has no `7g` quota to stand for it.
    #[error("nvidia.com/gpu needs a 7g quota")]
    NoWholeGpuQuota,
    /// The pod asks for a resource that names no MIG profile.
    #[error("{0} is not a MIG profile")]
    NotAProfile(String),
}

/// Where a GPU pod may run, read from its spec (its tolerations as far as the tenant's admin
/// allows them). As Kubernetes' `ExtendedResourceToleration`
/// admission plugin would, it tolerates `NoSchedule` taints named after the GPU resources it asks
/// for, and `nvidia.com/gpu`, the taint GPU nodes commonly carry, since every slice is part of a
/// GPU.
pub(crate) fn gpu_pod_needs(
    pod: &Value,
    allowed: &[carrel_gpu::fit::Toleration],
) -> Result<carrel_gpu::fit::PodNeeds, Unplaceable> {
    use carrel_gpu::fit::{PodNeeds, Toleration};
    // Only the tolerations the tenant's admin allows count, as on the host pod.
    let mut spec = pod.get("spec").cloned().unwrap_or(Value::Null);
    if let Some(o) = spec.as_object_mut() {
        o.insert("tolerations".into(), Value::Array(translate::tenant_tolerations(pod, allowed)));
    }
    let mut needs = PodNeeds::of_spec(&spec)?;
    let mut resources: BTreeSet<String> = gpu_requests(pod)?.into_keys().collect();
    resources.insert(WHOLE_GPU.to_owned());
    for resource in resources {
        needs = needs.tolerating(Toleration::exists(&resource, "NoSchedule"));
    }
    Ok(needs)
}

impl Syncer {
    /// Bring one tenant pod and its host pod in line. `Some(delay)` asks to look again later.
    pub async fn reconcile(&self, key: &Key) -> Result<Option<Duration>, SyncError> {
        let (namespace, name) = key;
        let host_name = host_names::host_pod(namespace, name);
        let pair = async {
            let tenant_pod = self.tenant_pod(namespace, name).await?;
            // A new pod's host pod is made by this reconcile: when the cache has none, there is
            // none to ask the host for (a create that finds one answers 409, handled there).
            // Anything else must know for sure that its host pod is gone.
            let fresh =
                tenant_pod.as_ref().is_some_and(|t| !decide::scheduled(t) && !decide::finished(t));
            let host_pod = self.host_pod(&host_name, !fresh).await?;
            Ok::<_, SyncError>((tenant_pod, host_pod))
        };
        let (tenant_pod, host_pod) = pair.await?;
        let facts = Facts {
            tenant: &self.inner.tenant,
            namespace,
            name,
            tenant_pod: tenant_pod.as_deref(),
            host_pod: host_pod.as_deref(),
        };
        self.carry_out(decide(&facts), &facts, &host_name).await
    }

    /// Do what [`decide`] said for the pod `facts` describe.
    async fn carry_out(
        &self,
        step: Step,
        facts: &Facts<'_>,
        host_name: &str,
    ) -> Result<Option<Duration>, SyncError> {
        let release = || placement::release(&self.inner.host_client, &self.inner.tenant, host_name);
        let tenant = facts.tenant_pod.map(to_value).transpose()?;
        let host = facts.host_pod.map(to_value).transpose()?;
        match (step, tenant, host) {
            (Step::HostNameTaken, tenant, _) => {
                // Not this pod's host pod: neither adopted nor deleted.
                let taken = SyncError::Taken { kind: "Pod".into(), name: host_name.to_owned() };
                let pod = format!("{}/{}", facts.namespace, facts.name);
                tracing::warn!(tenant = %self.inner.tenant, %pod, "{taken}");
                match tenant {
                    Some(tenant) => self.host_name_taken(&tenant, taken).await,
                    None => Ok(None),
                }
            }
            (Step::DeleteHostPod, _, Some(host)) => {
                self.delete_host_pod(&host).await?;
                release().await?;
                Ok(None)
            }
            (Step::Release, _, _) => {
                release().await?;
                Ok(None)
            }
            (Step::Fail { why, release: claimed }, Some(tenant), _) => {
                if claimed {
                    release().await?;
                }
                self.fail_tenant_pod(&tenant, &why).await?;
                Ok(None)
            }
            (Step::CreateHostPod, Some(tenant), _) => {
                self.create_host_pod(&tenant, host_name).await
            }
            (Step::ReplaceHostPod, _, Some(host)) => {
                self.delete_host_pod(&host).await?;
                release().await?;
                Ok(Some(Duration::from_millis(50)))
            }
            (Step::CopyStatusUp { release: done, relabel, debug }, Some(tenant), Some(host)) => {
                if relabel {
                    self.relabel_host_pod(&tenant, &host).await?;
                }
                if debug {
                    self.add_ephemeral_containers(&tenant, &host).await?;
                }
                self.status_up(&tenant, &host).await?;
                if done {
                    release().await?;
                }
                Ok(None)
            }
            // Every step names the objects it acts on: the facts hold them.
            (step, _, _) => {
                tracing::error!(tenant = %self.inner.tenant, ?step, "a step without its objects");
                Ok(None)
            }
        }
    }

    pub(crate) async fn tenant_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Pod>>, SyncError> {
        let cached = self.inner.tenant_pods.get(&ObjectRef::new(name).within(namespace));
        match cached {
            Some(p) => Ok(Some(p)),
            None => {
                // The cache may lag behind a create; ask.
                let api: Api<Pod> = Api::namespaced(self.inner.tenant_client.clone(), namespace);
                Ok(api.get_opt(name).await?.map(Arc::new))
            }
        }
    }

    /// The host pod `host_name` from the cache; on a miss, from the host when `confirm`.
    pub(crate) async fn host_pod(
        &self,
        host_name: &str,
        confirm: bool,
    ) -> Result<Option<Arc<Pod>>, SyncError> {
        match self.cached_host_pod(host_name) {
            Some(p) => Ok(Some(p)),
            None if !confirm => Ok(None),
            None => {
                let api: Api<Pod> =
                    Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
                match api.get_opt(host_name).await? {
                    Some(p) if is_ours(&p, &self.inner.tenant) => Ok(Some(Arc::new(p))),
                    _ => Ok(None),
                }
            }
        }
    }

    /// Give host pod `host` the labels tenant pod `tenant` calls for: a merge patch that sets
    /// them and removes the others.
    async fn relabel_host_pod(&self, tenant: &Value, host: &Value) -> Result<(), SyncError> {
        let name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let wanted = translate::host_pod_labels(&self.inner.tenant, tenant);
        let mut labels: serde_json::Map<String, Value> =
            wanted.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        for key in host.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten()
        {
            labels.entry(key.0.clone()).or_insert(Value::Null);
        }
        let patch = json!({"metadata": {"labels": labels}});
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let params = kube::api::PatchParams::default();
        match api.patch(name, &params, &kube::api::Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            // Gone meanwhile: the host watch brings the pod back to its reconcile.
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Give host pod `host` the ephemeral containers `kubectl debug` added to tenant pod
    /// `tenant`, through the host pod's `ephemeralcontainers` subresource (so the host's own
    /// admission, pod security included, judges them too). A refusal is told on the tenant pod
    /// as a Warning event and not retried: the tenant's ephemeral container cannot change.
    async fn add_ephemeral_containers(
        &self,
        tenant: &Value,
        host: &Value,
    ) -> Result<(), SyncError> {
        let env_sources = match self.copy_references(tenant).await {
            Ok(sources) => sources,
            Err(e) => return self.host_name_taken(tenant, e).await.map(drop),
        };
        let added = translate::new_host_ephemeral_containers(tenant, host, &env_sources);
        if added.is_empty() {
            return Ok(());
        }
        let mut added = json!({"spec": {"ephemeralContainers": added}});
        translate::point_api_at(&mut added, self.tenant_api());
        let name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let patch = added;
        let params = kube::api::PatchParams::default();
        let patched = api
            .patch_subresource::<_>(
                "ephemeralcontainers",
                name,
                &params,
                &kube::api::Patch::Strategic(&patch),
            )
            .await;
        match patched {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                let why =
                    format!("the host cluster refused the ephemeral container: {}", e.message);
                self.tenant_event(tenant, "Warning", "Failed", &why).await
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Where the tenant's workloads reach its API, when the syncer was told.
    fn tenant_api(&self) -> Option<(&str, u16)> {
        self.inner.tenant_api.as_ref().map(|(host, port)| (host.as_str(), *port))
    }

    pub(crate) async fn delete_host_pod(&self, host: &Value) -> Result<(), SyncError> {
        let name = host.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let uid = host.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid, resource_version: None }),
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// The profiles and counts a pod's GPU resources stand for; `nvidia.com/gpu` becomes the
    /// tenant's first `7g` profile with quota.
    pub(crate) fn pod_request(&self, pod: &Value) -> Result<placement::PodRequest, Unplaceable> {
        let quota = self.inner.quota.read().clone();
        let mut request = placement::PodRequest::new();
        for (resource, n) in gpu_requests(pod)? {
            let profile = if resource == WHOLE_GPU {
                quota
                    .iter()
                    .find(|(p, n)| p.starts_with("7g.") && **n > 0)
                    .map(|(p, _)| p.clone())
                    .ok_or(Unplaceable::NoWholeGpuQuota)?
            } else {
                carrel_gpu::canonical_profile_name(&resource)
                    .ok_or_else(|| Unplaceable::NotAProfile(resource.clone()))?
            };
            *request.entry(profile).or_default() += u32::try_from(n).unwrap_or(u32::MAX);
        }
        Ok(request)
    }

    pub(crate) async fn create_host_pod(
        &self,
        tenant: &Value,
        host_name: &str,
    ) -> Result<Option<Duration>, SyncError> {
        let (namespace, name) = namespace_and_name(tenant);
        let request = match self.pod_request(tenant) {
            Ok(r) => r,
            Err(why) => {
                self.unschedulable(tenant, &why.to_string()).await?;
                return Ok(None);
            }
        };
        // The claims it mounts first: a pod waiting for one holds no GPU meanwhile.
        match self.pod_claims(tenant).await {
            Ok(crate::claims::PodClaims::Ready) => {}
            Ok(crate::claims::PodClaims::Waiting(why)) => {
                self.unschedulable(tenant, &why).await?;
                return Ok(Some(Duration::from_secs(2)));
            }
            Err(e) => return self.host_name_taken(tenant, e).await,
        }
        // The tenant's own cordons keep the pod off those nodes, as kube-scheduler's
        // NodeUnschedulable filter would, unless it tolerates them.
        let cordons = match translate::tolerates_cordon(tenant) {
            true => BTreeSet::new(),
            false => self.tenant_cordons(),
        };
        let mut held = Vec::new();
        if !request.is_empty() {
            let holder = Holder {
                tenant: self.inner.tenant.clone(),
                namespace: namespace.to_owned(),
                pod: name.to_owned(),
            };
            let quota = self.inner.quota.read().clone();
            let needs = match gpu_pod_needs(tenant, &self.allowed_tolerations()) {
                Ok(n) => n,
                Err(why) => {
                    self.unschedulable(tenant, &why.to_string()).await?;
                    return Ok(None);
                }
            };
            match placement::acquire(
                &self.inner.host_client,
                self.cached_fleet(),
                &quota,
                &needs,
                &cordons,
                &holder,
                &self.inner.host_namespace,
                host_name,
                &request,
            )
            .await
            {
                Ok(c) => held = c,
                Err(placement::ClaimFailure::Host(e)) => return Err(e),
                Err(e) => {
                    self.unschedulable(tenant, &e.to_string()).await?;
                    return Ok(Some(Duration::from_secs(2)));
                }
            }
            if !devices_ready(&held) {
                // The node agent is creating the instances; it writes their UUIDs on the claims,
                // and the claim Leases' watch queues the pod again then.
                return Ok(None);
            }
        }
        let env_sources = match self.copy_references(tenant).await {
            Ok(sources) => sources,
            Err(e) => return self.host_name_taken(tenant, e).await,
        };
        let missing = translate::missing_env_sources(tenant, &env_sources);
        if !missing.is_empty() {
            // As the kubelet would, the pod waits for the sources of its `envFrom`.
            let why = format!("waiting for envFrom {} to exist", missing.join(", "));
            self.unschedulable(tenant, &why).await?;
            return Ok(Some(Duration::from_secs(2)));
        }
        let token = match self.token_secret(tenant).await {
            Ok(token) => token,
            Err(e) => return self.host_name_taken(tenant, e).await,
        };
        let mut host = translate::host_pod(
            &self.inner.tenant,
            &self.inner.host_namespace,
            tenant,
            &held,
            token.as_deref(),
            &env_sources,
            &self.allowed_tolerations(),
        );
        translate::keep_off_nodes(&mut host, &cordons);
        translate::point_api_at(&mut host, self.tenant_api());
        if !held.is_empty() {
            translate::run_devices_with(&mut host, self.inner.gpu_runtime_class.as_deref());
        }
        let nameserver = self.cluster_dns().await?;
        let namespace = tenant.pointer("/metadata/namespace").and_then(Value::as_str);
        let (namespace, domain) = (namespace.unwrap_or_default(), translate::CLUSTER_DOMAIN);
        translate::point_dns_at(&mut host, namespace, domain, nameserver.as_deref());
        let pod: Pod = serde_json::from_value(host)
            .map_err(|source| SyncError::Decode { kind: "Pod", source })?;
        let api: Api<Pod> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api.get(host_name).await?;
                let identity = host_names::host_annotations(namespace, name, "");
                let (labels, annotations) =
                    (existing.metadata.labels.as_ref(), existing.metadata.annotations.as_ref());
                if !host_names::stands_for(labels, annotations, &self.inner.tenant, &identity) {
                    let taken = SyncError::Taken { kind: "Pod".into(), name: host_name.to_owned() };
                    return self.host_name_taken(tenant, taken).await;
                }
                let uid = tenant.pointer("/metadata/uid").and_then(Value::as_str);
                let recorded = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(host_names::ANNOTATION_UID))
                    .map(String::as_str);
                if !is_ours(&existing, &self.inner.tenant) || recorded != uid {
                    // Another pod's host pod under this name (an earlier pod of the same name):
                    // the next pass, from the host watch, replaces it.
                    return Ok(Some(Duration::from_millis(50)));
                }
                // Made by an earlier pass, which also said what it left out.
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        let trimmed = translate::tenant_only_fields(tenant);
        if !trimmed.is_empty() {
            let why = format!(
                "the host pod runs without {}: they name what only this cluster has",
                trimmed.join(", ")
            );
            self.tenant_event(tenant, "Warning", "FieldsNotSynced", &why).await?;
        }
        tracing::debug!(tenant = %self.inner.tenant, pod = %format!("{namespace}/{name}"), host = %host_name, "host pod created");
        Ok(None)
    }

    pub(crate) async fn fail_tenant_pod(&self, tenant: &Value, why: &str) -> Result<(), SyncError> {
        if !self.patch_tenant_status(tenant, translate::failed_status(tenant, why)).await? {
            return Ok(());
        }
        self.tenant_event(tenant, "Warning", "HostPodDeleted", why).await
    }

    /// Record why a pod cannot run yet: a `PodScheduled=False` condition and an event.
    pub(crate) async fn unschedulable(&self, tenant: &Value, why: &str) -> Result<(), SyncError> {
        let already = tenant
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "PodScheduled" && c["message"] == why);
        if already {
            return Ok(());
        }
        let condition = json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": why,
            "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        });
        let status = json!({"phase": "Pending", "conditions": [condition]});
        if !self.patch_tenant_status(tenant, status).await? {
            return Ok(());
        }
        self.tenant_event(tenant, "Warning", "FailedScheduling", why).await
    }

    /// An Event about a tenant pod, written by the syncer's recorder (repeats aggregated).
    pub(crate) async fn tenant_event(
        &self,
        pod: &Value,
        kind: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), SyncError> {
        let (namespace, name) = namespace_and_name(pod);
        let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
        let target = EventTarget::pod(namespace, name, uid);
        let kind = if kind == "Warning" { EventType::Warning } else { EventType::Normal };
        self.inner.recorder.record(&target, kind, reason, message).await?;
        Ok(())
    }

    /// Say on tenant pod `tenant` that a host object it needs is someone else's ([`SyncError::
    /// Taken`]), and look again later; any other error is passed on.
    pub(crate) async fn host_name_taken(
        &self,
        tenant: &Value,
        error: SyncError,
    ) -> Result<Option<Duration>, SyncError> {
        let SyncError::Taken { .. } = &error else { return Err(error) };
        let why = format!("{error}; the pod waits until it is gone");
        self.tenant_event(tenant, "Warning", "HostNameTaken", &why).await?;
        Ok(Some(TAKEN_RETRY))
    }
}
