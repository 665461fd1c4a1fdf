//! The StatefulSet controller (kube-controller-manager's `statefulset-controller`,
//! `pkg/controller/statefulset`): pods with stable names, network identities and storage,
//! created, scaled and updated in order.
//!
//! A sync reads the set, its ControllerRevisions, the namespace's pods and claims from the API
//! (not from caches, so it needs no expectations), and then, as `syncStatefulSet` does:
//!
//! 1. adopts the orphan revisions and pods its selector matches (pods named `<set>-<ordinal>`
//!    only), and releases the pods it no longer matches;
//! 2. finds the update revision (the set's template now: a revision equal to it is reused, and
//!    renumbered when it is not the newest, which is how `kubectl rollout undo` rolls back) and
//!    the current one (`status.currentRevision`), creating the first with a new collision count
//!    when its name is taken ([`revision`]);
//! 3. does what [`decide::plan`] says, in its order, stopping at the first write refused;
//! 4. writes the status (counts, revisions, collision count, observed generation) when it
//!    changed, and deletes the revisions no pod uses beyond `revisionHistoryLimit`.
//!
//! Events are kube-controller-manager's: `SuccessfulCreate` "create Pod web-0 in StatefulSet web
//! successful", "create Claim data-web-0 Pod web-0 in StatefulSet web success",
//! `SuccessfulDelete`, `SuccessfulUpdate`, and `FailedCreate`, `FailedDelete`, `FailedUpdate`
//! with the API's error.
//!
//! Where it differs: revision names and hashes are not byte-equal to Kubernetes' (see
//! [`revision`]); a refused write stops the sync even under `Parallel` (Kubernetes finishes the
//! batch it is in); `maxUnavailable` is honoured when it is set (Kubernetes behind its
//! `MaxUnavailableStatefulSet` gate), and without it one pod at a time is replaced.

pub mod decide;
pub mod revision;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::replicaset::api_message;
use crate::replicaset::selector::Selector;
use crate::{owners, Context, Error};
use decide::{Revisions, Step};

/// The component the StatefulSet controller writes Events as.
pub const COMPONENT: &str = "statefulset-controller";

/// How many names a new revision tries before the sync gives up (each taken name raises the
/// collision count).
const MAX_COLLISIONS: u32 = 64;

struct Shared {
    client: kube::Client,
    recorder: Recorder,
    /// Failed syncs in a row, by set UID: the next retry waits longer.
    failures: Mutex<HashMap<String, u32>>,
}

/// Run the StatefulSet controller until `stop` is true.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let shared = Arc::new(Shared {
        client: client.clone(),
        recorder: context.recorder(COMPONENT),
        failures: Mutex::new(HashMap::new()),
    });
    Controller::new(Api::<StatefulSet>::all(client.clone()), watcher::Config::default())
        .owns(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .owns(Api::<ControllerRevision>::all(client), watcher::Config::default())
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

fn error_policy(set: Arc<StatefulSet>, error: &Error, shared: Arc<Shared>) -> Action {
    tracing::debug!(statefulset = %set.name_any(), %error, "statefulset sync failed; retrying");
    let failures = shared.failures.lock().get(&set.uid().unwrap_or_default()).copied();
    let doublings = failures.unwrap_or(1).saturating_sub(1).min(7);
    Action::requeue(Duration::from_millis(250) * 2u32.pow(doublings))
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code)
}

async fn reconcile(set: Arc<StatefulSet>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = set.namespace().unwrap_or_default();
    let sets: Api<StatefulSet> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version: the one that triggered this reconcile may be older than our last write.
    let Some(set) = sets.get_opt(&set.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let uid = set.uid().unwrap_or_default();
    let selector = set.spec.as_ref().map(|s| Selector::from_label_selector(&s.selector));
    let Some(Ok(selector)) = selector else {
        // As kube-controller-manager: a selector that does not parse is not retried.
        tracing::warn!(statefulset = %set.name_any(), "selector does not parse; not synced");
        return Ok(Action::await_change());
    };
    let client = shared.client.clone();
    let mut sync = Sync {
        target: EventTarget {
            api_version: "apps/v1".into(),
            kind: "StatefulSet".into(),
            namespace: namespace.clone(),
            name: set.name_any(),
            uid: set.uid(),
        },
        shared: shared.clone(),
        set,
        sets,
        pods: Api::namespaced(client.clone(), &namespace),
        claims_api: Api::namespaced(client.clone(), &namespace),
        revisions_api: Api::namespaced(client, &namespace),
        claims: BTreeMap::new(),
    };
    let result = sync.run(&selector).await;
    let mut failures = shared.failures.lock();
    match &result {
        Ok(_) => {
            failures.remove(&uid);
        }
        Err(_) => *failures.entry(uid).or_default() += 1,
    }
    result
}

/// One sync of one StatefulSet.
struct Sync {
    shared: Arc<Shared>,
    set: StatefulSet,
    target: EventTarget,
    sets: Api<StatefulSet>,
    pods: Api<Pod>,
    claims_api: Api<PersistentVolumeClaim>,
    revisions_api: Api<ControllerRevision>,
    /// The namespace's claims, by name, kept up to date with this sync's writes.
    claims: BTreeMap<String, PersistentVolumeClaim>,
}

/// The templates of the two revisions a sync works with, and their names.
struct Templates<'a> {
    names: Revisions<'a>,
    current: PodTemplateSpec,
    update: PodTemplateSpec,
}

/// Several errors as one, as Kubernetes' aggregate error prints them.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

impl Sync {
    async fn run(&mut self, selector: &Selector) -> Result<Action, Error> {
        let mut revisions = self.revisions(selector).await?;
        let pods = self.claim_pods(selector).await?;
        let claims = self.claims_api.list(&ListParams::default()).await?.items;
        self.claims = claims.into_iter().map(|c| (c.name_any(), c)).collect();
        revision::sort(&mut revisions);

        let (current, update, collision_count) = self.current_and_update(&revisions).await?;
        let (current_name, update_name) = (current.name_any(), update.name_any());
        let synced = match (revision::template(&current), revision::template(&update)) {
            (Ok(current), Ok(update)) => {
                let names = Revisions { current: &current_name, update: &update_name };
                let templates = Templates { names, current, update };
                self.update(&templates, collision_count, &pods).await
            }
            (Err(e), _) | (_, Err(e)) => Err(Error::Invalid(e)),
        };
        let truncated = self.truncate_history(&revisions, &pods, &current_name, &update_name).await;
        let action = synced?;
        truncated?;
        Ok(action)
    }

    async fn record(&self, kind: EventType, reason: &str, message: &str) {
        if let Err(error) = self.shared.recorder.record(&self.target, kind, reason, message).await {
            tracing::warn!(%error, reason, "recording an event");
        }
    }

    /// The Event of `verb` (create, update, delete) done to pod `pod`, or refused with `error`
    /// (`recordPodEvent`).
    async fn record_pod(&self, verb: &str, pod: &str, error: Option<&str>) {
        let set = self.set.name_any();
        let title = format!("{}{}", verb[..1].to_uppercase(), &verb[1..]);
        match error {
            None => {
                let message = format!("{verb} Pod {pod} in StatefulSet {set} successful");
                self.record(EventType::Normal, &format!("Successful{title}"), &message).await
            }
            Some(error) => {
                let message =
                    format!("{verb} Pod {pod} in StatefulSet {set} failed error: {error}");
                self.record(EventType::Warning, &format!("Failed{title}"), &message).await
            }
        }
    }

    /// The set's ControllerRevisions: those its selector matches that it controls, and the
    /// orphans among them, adopted (`adoptOrphanRevisions`, `ListRevisions`).
    async fn revisions(&self, selector: &Selector) -> Result<Vec<ControllerRevision>, Error> {
        let uid = self.set.uid().unwrap_or_default();
        let all = self.revisions_api.list(&ListParams::default()).await?.items;
        let mut owned = Vec::new();
        let mut orphans = Vec::new();
        for r in all.into_iter().filter(|r| selector.matches(r.metadata.labels.as_ref())) {
            match owners::controller_of(&r.metadata) {
                None => orphans.push(r),
                Some(owner) if owner.uid == uid => owned.push(r),
                Some(_) => {}
            }
        }
        if orphans.is_empty() {
            return Ok(owned);
        }
        self.can_adopt()
            .await
            .map_err(|e| Error::Invalid(format!("can't adopt ControllerRevisions: {e}")))?;
        let Some(reference) = owners::controller_ref(&self.set) else { return Ok(owned) };
        for r in orphans {
            let patch =
                json!({"metadata": {"ownerReferences": [reference], "uid": r.metadata.uid}});
            let params = PatchParams::default();
            match self.revisions_api.patch(&r.name_any(), &params, &Patch::Strategic(&patch)).await
            {
                Ok(adopted) => owned.push(adopted),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(owned)
    }

    /// Whether the set may adopt: it is still the set read, and not being deleted
    /// (`RecheckDeletionTimestamp`).
    async fn can_adopt(&self) -> Result<(), String> {
        let name = self.set.name_any();
        let fresh = self.sets.get_opt(&name).await.map_err(|e| e.to_string())?;
        let namespace = self.target.namespace.as_str();
        match fresh {
            Some(f) if f.uid() != self.set.uid() => Err(format!(
                "original StatefulSet {namespace}/{name} is gone: got uid {}, wanted {}",
                f.uid().unwrap_or_default(),
                self.set.uid().unwrap_or_default()
            )),
            Some(f) if f.metadata.deletion_timestamp.is_some() => {
                Err(format!("{namespace}/{name} has just been deleted"))
            }
            Some(_) => Ok(()),
            None => Err(format!("original StatefulSet {namespace}/{name} is gone")),
        }
    }

    /// The set's pods, once it adopted the orphans named and labelled as its pods and released
    /// those no longer so (`getPodsForStatefulSet`, `ClaimPods`).
    async fn claim_pods(&self, selector: &Selector) -> Result<Vec<Pod>, Error> {
        let uid = self.set.uid().unwrap_or_default();
        let name = self.set.name_any();
        let deleting = self.set.metadata.deletion_timestamp.is_some();
        let all = self.pods.list(&ListParams::default()).await?.items;
        let mut owned = Vec::new();
        let mut may_adopt: Option<bool> = None;
        for pod in all {
            let matches =
                selector.matches(pod.metadata.labels.as_ref()) && decide::is_member(&name, &pod);
            let patch = match owners::controller_of(&pod.metadata) {
                Some(r) if r.uid == uid => {
                    if matches {
                        owned.push(pod);
                        continue;
                    }
                    if deleting {
                        continue;
                    }
                    json!({"metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": uid}],
                        "uid": pod.metadata.uid,
                    }})
                }
                Some(_) => continue,
                None => {
                    if deleting || !matches || pod.metadata.deletion_timestamp.is_some() {
                        continue;
                    }
                    if may_adopt.is_none() {
                        may_adopt = Some(self.can_adopt().await.is_ok());
                    }
                    let Some(reference) =
                        owners::controller_ref(&self.set).filter(|_| may_adopt == Some(true))
                    else {
                        continue;
                    };
                    json!({"metadata": {"ownerReferences": [reference], "uid": pod.metadata.uid}})
                }
            };
            let adopting = matches;
            let params = PatchParams::default();
            match self.pods.patch(&pod.name_any(), &params, &Patch::Strategic(&patch)).await {
                Ok(adopted) if adopting => owned.push(adopted),
                Ok(_) => {
                    tracing::info!(pod = %pod.name_any(), "released a pod the set no longer matches")
                }
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(owned)
    }

    /// The current and update revisions, and the collision count (`getStatefulSetRevisions`).
    async fn current_and_update(
        &self,
        revisions: &[ControllerRevision],
    ) -> Result<(ControllerRevision, ControllerRevision, i32), Error> {
        let status = self.set.status.clone().unwrap_or_default();
        let mut collision_count = status.collision_count.unwrap_or(0);
        let wanted = revision::new(&self.set, revision::next_number(revisions), collision_count);
        let equal = revision::find_equal(revisions, &wanted);
        let update = match (equal.last(), revisions.last()) {
            (Some(_), Some(latest)) if revision::equal(latest, &wanted) => latest.clone(),
            // Back to an earlier template: its revision becomes the newest.
            (Some(earlier), _) => {
                let patch = json!({"revision": wanted.revision});
                let params = PatchParams::default();
                self.revisions_api
                    .patch(&earlier.name_any(), &params, &Patch::Merge(&patch))
                    .await?
            }
            (None, _) => self.create_revision(wanted, &mut collision_count).await?,
        };
        let current = status
            .current_revision
            .as_deref()
            .and_then(|name| revisions.iter().find(|r| r.metadata.name.as_deref() == Some(name)))
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collision_count))
    }

    /// Create `wanted`, under a new name while its name is taken by other data
    /// (`CreateControllerRevision`).
    async fn create_revision(
        &self,
        wanted: ControllerRevision,
        collision_count: &mut i32,
    ) -> Result<ControllerRevision, Error> {
        let data = wanted.data.as_ref().map(|d| d.0.clone()).unwrap_or(Value::Null);
        for _ in 0..MAX_COLLISIONS {
            let mut candidate = wanted.clone();
            let name =
                revision::name(&self.set.name_any(), &revision::hash(&data, *collision_count));
            candidate.metadata.name = Some(name.clone());
            match self.revisions_api.create(&PostParams::default(), &candidate).await {
                Ok(created) => return Ok(created),
                Err(e) if is_status(&e, 409) => {
                    let existing = self.revisions_api.get(&name).await?;
                    if revision::equal(&existing, &candidate) {
                        return Ok(existing);
                    }
                    *collision_count = collision_count.saturating_add(1);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Invalid(format!(
            "no free name for a new ControllerRevision of StatefulSet {}",
            self.set.name_any()
        )))
    }

    /// Do what the plan says, then write the status (`updateStatefulSet`,
    /// `updateStatefulSetStatus`).
    async fn update(
        &mut self,
        templates: &Templates<'_>,
        collision_count: i32,
        pods: &[Pod],
    ) -> Result<Action, Error> {
        let now = chrono::Utc::now();
        let plan = decide::plan(&self.set, templates.names, pods, &self.claims, now);
        let mut refused = None;
        for step in &plan.steps {
            if let Err(e) = self.step(step, templates, pods).await {
                refused = Some(e);
                break;
            }
        }
        let status = decide::status(&self.set, plan.counts, templates.names, collision_count);
        let written = self.write_status(&status).await;
        if let Some(e) = refused {
            return Err(e);
        }
        written?;
        let min_ready = decide::min_ready_seconds(&self.set);
        if min_ready > 0 && status.available_replicas != Some(decide::replicas(&self.set)) {
            // Pods become available with time alone: look again once the first can.
            return Ok(Action::requeue(Duration::from_secs(min_ready.unsigned_abs().into())));
        }
        if plan.stale_claim {
            // The claim of an earlier pod goes with that pod, by the garbage collector.
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        Ok(Action::await_change())
    }

    async fn step(
        &mut self,
        step: &Step,
        templates: &Templates<'_>,
        pods: &[Pod],
    ) -> Result<(), Error> {
        let find = |name: &str| {
            pods.iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .ok_or_else(|| Error::Invalid(format!("pod {name} is not one of the set's")))
        };
        match step {
            Step::DeleteFinished(name) | Step::ScaleDown(name) => self.delete_pod(name).await,
            Step::Roll(name) => match self.delete_pod(name).await {
                Err(Error::Api(e)) if is_status(&e, 404) => Ok(()),
                other => other,
            },
            Step::Create { ordinal, at_update } => {
                let (template, revision) = if *at_update {
                    (&templates.update, templates.names.update)
                } else {
                    (&templates.current, templates.names.current)
                };
                let pod = decide::new_pod(&self.set, template, *ordinal, revision);
                self.create_pod(&pod).await
            }
            Step::EnsureClaims(name) => {
                let pod = find(name)?;
                self.create_claims(pod).await.map_err(Error::Invalid)?;
                if let Err(why) = self.fix_claims(pod).await {
                    self.record_pod("update", name, Some(&why)).await;
                    return Err(Error::Invalid(why));
                }
                Ok(())
            }
            Step::Update(name) => self.update_pod(find(name)?).await,
            Step::FixClaims(name) => self.fix_claims(find(name)?).await.map_err(Error::Invalid),
        }
    }

    /// Delete pod `name` (`DeleteStatefulPod`).
    async fn delete_pod(&self, name: &str) -> Result<(), Error> {
        let result = self.pods.delete(name, &DeleteParams::default()).await;
        let error = result.as_ref().err().map(api_message);
        self.record_pod("delete", name, error.as_deref()).await;
        result.map(drop).map_err(Error::from)
    }

    /// Create `pod`, its claims first, then set their owners as the policy says
    /// (`CreateStatefulPod`).
    async fn create_pod(&mut self, pod: &Pod) -> Result<(), Error> {
        let name = pod.name_any();
        if let Err(why) = self.create_claims(pod).await {
            self.record_pod("create", &name, Some(&why)).await;
            return Err(Error::Invalid(why));
        }
        match self.pods.create(&PostParams::default(), pod).await {
            Ok(created) => {
                if let Err(why) = self.fix_claims(&created).await {
                    self.record_pod("update", &name, Some(&why)).await;
                    return Err(Error::Invalid(why));
                }
                self.record_pod("create", &name, None).await;
                Ok(())
            }
            // Made already (by a sync that read an older list): nothing to tell.
            Err(e) if is_status(&e, 409) => Err(e.into()),
            Err(e) => {
                self.record_pod("create", &name, Some(&api_message(&e))).await;
                Err(e.into())
            }
        }
    }

    /// Create the claims of `pod` that do not exist (`createPersistentVolumeClaims`); one being
    /// deleted is an error until it is gone.
    async fn create_claims(&mut self, pod: &Pod) -> Result<(), String> {
        let Some(ordinal) = decide::ordinal(pod) else { return Ok(()) };
        let (set, pod_name) = (self.set.name_any(), pod.name_any());
        let mut errors = Vec::new();
        for (_, claim) in decide::claims(&self.set, ordinal) {
            let name = claim.name_any();
            if let Some(existing) = self.claims.get(&name) {
                if existing.metadata.deletion_timestamp.is_some() {
                    errors.push(format!("pvc {name} is being deleted"));
                }
                continue;
            }
            match self.claims_api.create(&PostParams::default(), &claim).await {
                Ok(created) => {
                    self.claims.insert(name.clone(), created);
                    let message =
                        format!("create Claim {name} Pod {pod_name} in StatefulSet {set} success");
                    self.record(EventType::Normal, "SuccessfulCreate", &message).await;
                }
                Err(e) => {
                    let why = api_message(&e);
                    errors.push(format!("failed to create PVC {name}: {why}"));
                    if !is_status(&e, 409) {
                        let message = format!(
                            "create Claim {name} for Pod {pod_name} in StatefulSet {set} failed error: {why}"
                        );
                        self.record(EventType::Warning, "FailedCreate", &message).await;
                    }
                }
            }
        }
        aggregate(errors)
    }

    /// Set the owners of `pod`'s claims as the retention policy says
    /// (`UpdatePodClaimForRetentionPolicy`).
    async fn fix_claims(&mut self, pod: &Pod) -> Result<(), String> {
        let Some(ordinal) = decide::ordinal(pod) else { return Ok(()) };
        for (_, template) in decide::claims(&self.set, ordinal) {
            let name = template.name_any();
            let Some(claim) = self.claims.get(&name).cloned() else { continue };
            if decide::has_unexpected_controller(&claim, &self.set, pod) {
                let message = format!(
                    "PersistentVolumeClaim {name} has a conflicting OwnerReference that acts as a \
                     manging controller, the retention policy is ignored for this claim"
                );
                self.record(EventType::Warning, "ConflictingController", &message).await;
            }
            if decide::claim_owner_up_to_date(&claim, &self.set, pod) {
                continue;
            }
            let refs = decide::claim_owner_refs(&claim, &self.set, pod);
            let patch = json!({"metadata": {
                "ownerReferences": refs,
                "resourceVersion": claim.resource_version(),
            }});
            match self.claims_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await
            {
                Ok(updated) => {
                    self.claims.insert(name, updated);
                }
                Err(e) => {
                    return Err(format!(
                        "could not update claim {name} for delete policy ownerRefs: {}",
                        api_message(&e)
                    ))
                }
            }
        }
        Ok(())
    }

    /// Bring `pod`'s identity, volumes and claims' owners in line with the set
    /// (`UpdateStatefulPod`).
    async fn update_pod(&mut self, pod: &Pod) -> Result<(), Error> {
        let name = pod.name_any();
        let Some(ordinal) = decide::ordinal(pod) else { return Ok(()) };
        let mut updated = pod.clone();
        let mut consistent = true;
        if !decide::identity_matches(&self.set, &updated) {
            decide::update_identity(&self.set, &mut updated, ordinal);
            consistent = false;
        }
        if !decide::storage_matches(&self.set, &updated) {
            let spec = updated.spec.get_or_insert_with(Default::default);
            decide::update_storage(&self.set, spec, ordinal);
            consistent = false;
            if let Err(why) = self.create_claims(&updated).await {
                self.record_pod("update", &name, Some(&why)).await;
                return Err(Error::Invalid(why));
            }
        }
        if !decide::claims_match_retention(&self.set, &updated, &self.claims) {
            if let Err(why) = self.fix_claims(&updated).await {
                self.record_pod("update", &name, Some(&why)).await;
                return Err(Error::Invalid(why));
            }
            consistent = false;
        }
        if consistent {
            return Ok(());
        }
        let result = self.pods.replace(&name, &PostParams::default(), &updated).await;
        let error = result.as_ref().err().map(api_message);
        self.record_pod("update", &name, error.as_deref()).await;
        result.map(drop).map_err(Error::from)
    }

    /// Write `status` if it says something the set's does not; counts of zero, and empty
    /// revisions, are left out as Kubernetes leaves them out.
    async fn write_status(&self, status: &StatefulSetStatus) -> Result<(), Error> {
        if !decide::status_differs(&self.set, status) {
            return Ok(());
        }
        let nonzero = |n: Option<i32>| n.filter(|n| *n != 0);
        let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
        let patch = json!({"status": {
            "observedGeneration": status.observed_generation.filter(|g| *g != 0),
            "replicas": status.replicas,
            "readyReplicas": nonzero(status.ready_replicas),
            "currentReplicas": nonzero(status.current_replicas),
            "updatedReplicas": nonzero(status.updated_replicas),
            "availableReplicas": status.available_replicas.unwrap_or(0),
            "currentRevision": nonempty(&status.current_revision),
            "updateRevision": nonempty(&status.update_revision),
            "collisionCount": status.collision_count,
        }});
        let params = PatchParams::default();
        match self.sets.patch_status(&self.set.name_any(), &params, &Patch::Merge(&patch)).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Delete the revisions beyond `revisionHistoryLimit` that neither the status nor a pod uses
    /// (`truncateHistory`).
    async fn truncate_history(
        &self,
        revisions: &[ControllerRevision],
        pods: &[Pod],
        current: &str,
        update: &str,
    ) -> Result<(), Error> {
        let mut live = vec![current, update];
        live.extend(pods.iter().map(decide::pod_revision));
        let limit = self.set.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10);
        for r in revision::to_truncate(revisions, &live, limit) {
            match self.revisions_api.delete(&r.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_status(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
