//! The Deployment controller (kube-controller-manager's `pkg/controller/deployment`): a
//! Deployment's pods are kept by ReplicaSets named `<deployment>-<pod-template-hash>`, one per
//! template it has had; a rollout scales the new one up and the old ones down, all at once
//! (`Recreate`) or within maxSurge and maxUnavailable (`RollingUpdate`).
//!
//! A reconcile reads the Deployment and the namespace's ReplicaSets from the API, claims
//! ReplicaSets as the ReplicaSet controller claims pods, and then, as `syncDeployment` does:
//! while paused or when only `spec.replicas` changed, scales; otherwise rolls out by its
//! strategy; and writes its status and conditions (`Available`, `Progressing`, `ReplicaFailure`).
//!
//! Where it differs from Kubernetes: the pod-template hash is not byte-equal (see
//! [`util::template_hash`]); scaling a Deployment while a rollout is under way gives the whole
//! difference to the newest ReplicaSet (when growing) or takes it from the oldest first (when
//! shrinking), instead of sharing it in proportion to each ReplicaSet's size; the deprecated
//! `rollbackTo` is not served (`kubectl rollout undo` does not use it).

pub mod util;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::replicaset::api_message;
use crate::replicaset::selector::Selector;
use crate::{owners, pods, Context, Error};
use util::*;

const COMPONENT: &str = "deployment-controller";

struct Shared {
    client: kube::Client,
    recorder: Recorder,
    wakeups: Arc<crate::Wakeups>,
}

/// Run the Deployment controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let shared = Arc::new(Shared {
        client: client.clone(),
        recorder: context.recorder(COMPONENT),
        wakeups: context.wakeups.clone(),
    });
    Controller::new(Api::<Deployment>::all(client.clone()), watcher::Config::default())
        .owns(Api::<ReplicaSet>::all(client.clone()), watcher::Config::default())
        // A Recreate rollout waits for the old pods to be gone: their deletions wake it.
        .watches(Api::<Pod>::all(client), watcher::Config::default(), deployment_of_pod)
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

/// The Deployment a pod's ReplicaSet was made by: its name less `-<pod-template-hash>`.
fn deployment_of_pod(pod: Pod) -> Option<ObjectRef<Deployment>> {
    let owner = owners::controller_of(&pod.metadata)?;
    if owner.kind != "ReplicaSet" {
        return None;
    }
    let hash = pod.metadata.labels.as_ref()?.get(HASH_LABEL)?;
    let name = owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
    Some(ObjectRef::new(name).within(pod.metadata.namespace.as_deref()?))
}

fn error_policy(d: Arc<Deployment>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(deployment = %d.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// One reconcile of one Deployment.
struct Sync {
    shared: Arc<Shared>,
    d: Deployment,
    api: Api<Deployment>,
    rs_api: Api<ReplicaSet>,
    target: EventTarget,
}

async fn reconcile(d: Arc<Deployment>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = d.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(shared.client.clone(), &namespace);
    let Some(d) = api.get_opt(&d.name_any()).await? else { return Ok(Action::await_change()) };
    let target = EventTarget {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: namespace.clone(),
        name: d.name_any(),
        uid: d.uid(),
    };
    let rs_api = Api::namespaced(shared.client.clone(), &namespace);
    let mut sync = Sync { shared, d, api, rs_api, target };
    sync.run().await
}

impl Sync {
    async fn record(&self, kind: EventType, reason: &str, message: &str) {
        if let Err(error) = self.shared.recorder.record(&self.target, kind, reason, message).await {
            tracing::warn!(%error, reason, "recording an event");
        }
    }

    async fn run(&mut self) -> Result<Action, Error> {
        let spec_selector = self.d.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        let selector = Selector::from_label_selector(&spec_selector).map_err(Error::Invalid)?;
        if selector.is_empty() {
            self.record(
                EventType::Warning,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            .await;
            let status = self.d.status.clone().unwrap_or_default();
            if status.observed_generation < self.d.metadata.generation {
                let status =
                    DeploymentStatus { observed_generation: self.d.metadata.generation, ..status };
                self.write_status(status).await?;
            }
            return Ok(Action::await_change());
        }
        let mut rss = self.claim(&selector).await?;
        by_creation(&mut rss);

        if self.d.metadata.deletion_timestamp.is_some() {
            let new = find_new(&self.d, &rss);
            return self.finish_sync(&rss, new).await;
        }
        self.check_paused().await?;
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        if paused || self.is_scaling_event(&rss) {
            return self.sync_scale(rss, paused).await;
        }
        if is_rolling(&self.d) {
            self.rolling(rss).await
        } else {
            self.recreate(rss).await
        }
    }

    /// The ReplicaSets the Deployment controls, once it adopted and released as its selector
    /// says (`ClaimReplicaSets`).
    async fn claim(&self, selector: &Selector) -> Result<Vec<ReplicaSet>, Error> {
        let uid = self.d.uid().unwrap_or_default();
        let deleting = self.d.metadata.deletion_timestamp.is_some();
        let all = self.rs_api.list(&ListParams::default()).await?.items;
        let mut owned = Vec::new();
        for rs in all {
            let matches = selector.matches(rs.metadata.labels.as_ref());
            let name = rs.name_any();
            match owners::controller_of(&rs.metadata) {
                Some(r) if r.uid == uid => {
                    if matches || deleting {
                        owned.push(rs);
                        continue;
                    }
                    let patch = json!({"metadata": {
                        "ownerReferences": [{"$patch": "delete", "uid": uid}],
                        "uid": rs.metadata.uid,
                    }});
                    match self
                        .rs_api
                        .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                    {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                None if matches && !deleting && rs.metadata.deletion_timestamp.is_none() => {
                    let Some(reference) = owners::controller_ref(&self.d) else { continue };
                    let patch = json!({"metadata": {
                        "ownerReferences": [reference],
                        "uid": rs.metadata.uid,
                    }});
                    match self
                        .rs_api
                        .patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                    {
                        Ok(adopted) => owned.push(adopted),
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => {}
            }
        }
        Ok(owned)
    }

    /// `Progressing` says `DeploymentPaused` while paused, `DeploymentResumed` once resumed
    /// (`checkPausedConditions`).
    async fn check_paused(&mut self) -> Result<(), Error> {
        if progress_deadline(&self.d).is_none() {
            return Ok(());
        }
        let mut status = self.d.status.clone().unwrap_or_default();
        let reason = get_condition(&status, PROGRESSING).and_then(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT) {
            return Ok(());
        }
        let paused = self.d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let shown = reason.as_deref() == Some(PAUSED);
        let c = match (paused, shown) {
            (true, false) => {
                condition(PROGRESSING, "Unknown", PAUSED, "Deployment is paused".into(), Utc::now())
            }
            (false, true) => condition(
                PROGRESSING,
                "Unknown",
                RESUMED,
                "Deployment is resumed".into(),
                Utc::now(),
            ),
            _ => return Ok(()),
        };
        set_condition(&mut status, c);
        self.write_status(status).await
    }

    /// Whether `spec.replicas` changed since the active ReplicaSets were last scaled
    /// (`isScalingEvent`).
    fn is_scaling_event(&self, rss: &[ReplicaSet]) -> bool {
        let desired = replicas(&self.d).to_string();
        rss.iter().filter(|rs| rs_replicas(rs) > 0).any(|rs| {
            let annotation = rs.metadata.annotations.as_ref().and_then(|a| a.get(DESIRED_REPLICAS));
            annotation.is_some_and(|a| *a != desired)
        })
    }

    async fn write_status(&mut self, status: DeploymentStatus) -> Result<(), Error> {
        let patch = json!({"status": status});
        let written = self
            .api
            .patch_status(&self.d.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // Keep our own view of the spec: what we decided on.
        self.d.status = written.status;
        Ok(())
    }

    async fn set_deployment_revision(&mut self, revision: &str) -> Result<(), Error> {
        let current = self.d.metadata.annotations.as_ref().and_then(|a| a.get(REVISION));
        if current.map(String::as_str) == Some(revision) {
            return Ok(());
        }
        let patch = json!({"metadata": {"annotations": {REVISION: revision}}});
        let written = self
            .api
            .patch(&self.d.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        self.d.metadata.annotations = written.metadata.annotations;
        Ok(())
    }

    /// Find the new ReplicaSet (creating it when `create`), bring its revision and annotations
    /// up to date, and the Deployment's revision with them (`getAllReplicaSetsAndSyncRevision`).
    /// Returns its index in `rss`.
    async fn sync_revision(
        &mut self,
        rss: &mut Vec<ReplicaSet>,
        create: bool,
    ) -> Result<Option<usize>, Error> {
        let found = find_new(&self.d, rss);
        let max_old = rss
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != found)
            .map(|(_, rs)| revision(&rs.metadata))
            .max()
            .unwrap_or(0);
        let new_revision = max_old + 1;
        if let Some(i) = found {
            let rs = &rss[i];
            let current = rs.metadata.annotations.clone().unwrap_or_default();
            let annotations = new_rs_annotations(&self.d, &current, new_revision, true);
            let min_ready = min_ready_seconds(&self.d);
            let rs_min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0);
            if annotations != current || min_ready != rs_min_ready {
                let patch = json!({
                    "metadata": {"annotations": annotations},
                    "spec": {"minReadySeconds": min_ready},
                });
                rss[i] = self
                    .rs_api
                    .patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            let revision =
                rss[i].metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).cloned();
            if let Some(revision) = revision {
                self.set_deployment_revision(&revision).await?;
            }
            let status = self.d.status.clone().unwrap_or_default();
            if progress_deadline(&self.d).is_some() && get_condition(&status, PROGRESSING).is_none()
            {
                let mut status = status;
                let message = format!("Found new replica set {:?}", rss[i].name_any());
                set_condition(
                    &mut status,
                    condition(PROGRESSING, "True", FOUND_NEW_RS, message, Utc::now()),
                );
                self.write_status(status).await?;
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }
        let created = self.create_new(rss, new_revision).await?;
        rss.push(created);
        Ok(Some(rss.len() - 1))
    }

    async fn create_new(
        &mut self,
        rss: &[ReplicaSet],
        new_revision: i64,
    ) -> Result<ReplicaSet, Error> {
        let mut status = self.d.status.clone().unwrap_or_default();
        let mut template = template(&self.d);
        let hash = template_hash(&template, status.collision_count);
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let mut selector = self.d.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(HASH_LABEL.into(), hash.clone());
        let name = format!("{}-{hash}", self.d.name_any());
        let all: Vec<&ReplicaSet> = rss.iter().collect();
        let new_replicas = new_rs_replicas(&self.d, &all, 0);
        let annotations = new_rs_annotations(&self.d, &BTreeMap::new(), new_revision, false);
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: self.d.namespace(),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                annotations: Some(annotations),
                owner_references: owners::controller_ref(&self.d).map(|r| vec![r]),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(new_replicas),
                min_ready_seconds: Some(min_ready_seconds(&self.d)),
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let created = match self.rs_api.create(&PostParams::default(), &rs).await {
            Ok(created) => created,
            Err(e) if is_conflict(&e) => {
                // A ReplicaSet of this name exists: ours with this template (a cache behind
                // us), or a hash collision, resolved by hashing again with a higher count.
                let existing = self.rs_api.get(&name).await?;
                let uid = self.d.uid().unwrap_or_default();
                let same =
                    existing.spec.as_ref().and_then(|s| s.template.as_ref()).is_some_and(|t| {
                        equal_ignore_hash(
                            t,
                            rs.spec.as_ref().and_then(|s| s.template.as_ref()).unwrap_or(t),
                        )
                    });
                if same && owners::is_controlled_by(&existing.metadata, &uid) {
                    return Ok(existing);
                }
                status.collision_count =
                    Some(status.collision_count.unwrap_or(0).saturating_add(1));
                self.write_status(status).await?;
                return Err(Error::Invalid(format!("hash collision for ReplicaSet {name:?}")));
            }
            Err(e) => {
                let message =
                    format!("Failed to create new replica set {name:?}: {}", api_message(&e));
                if progress_deadline(&self.d).is_some() {
                    set_condition(
                        &mut status,
                        condition(
                            PROGRESSING,
                            "False",
                            FAILED_RS_CREATE,
                            message.clone(),
                            Utc::now(),
                        ),
                    );
                    self.write_status(status).await?;
                }
                self.record(EventType::Warning, FAILED_RS_CREATE, &message).await;
                return Err(e.into());
            }
        };
        if new_replicas > 0 {
            let message = format!("Scaled up replica set {name} from 0 to {new_replicas}");
            self.record(EventType::Normal, "ScalingReplicaSet", &message).await;
        }
        self.set_deployment_revision(&new_revision.to_string()).await?;
        if progress_deadline(&self.d).is_some() {
            let mut status = self.d.status.clone().unwrap_or_default();
            let message = format!("Created new replica set {name:?}");
            set_condition(
                &mut status,
                condition(PROGRESSING, "True", NEW_RS_CREATED, message, Utc::now()),
            );
            self.write_status(status).await?;
        }
        Ok(created)
    }

    /// Scale `rs` to `to`, bringing its replicas annotations up to date; whether its size
    /// changed (`scaleReplicaSetAndRecordEvent`).
    async fn scale(&self, rs: &mut ReplicaSet, to: i32) -> Result<bool, Error> {
        let from = rs_replicas(rs);
        let desired = replicas(&self.d).to_string();
        let max = (replicas(&self.d) + max_surge(&self.d)).to_string();
        let annotations = rs.metadata.annotations.clone().unwrap_or_default();
        let annotated = annotations.get(DESIRED_REPLICAS) == Some(&desired)
            && annotations.get(MAX_REPLICAS) == Some(&max);
        if from == to && annotated {
            return Ok(false);
        }
        let patch = json!({
            "metadata": {"annotations": {DESIRED_REPLICAS: desired, MAX_REPLICAS: max}},
            "spec": {"replicas": to},
        });
        *rs = self
            .rs_api
            .patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if from == to {
            return Ok(false);
        }
        let way = if to > from { "up" } else { "down" };
        let message = format!("Scaled {way} replica set {} to {to} from {from}", rs.name_any());
        self.record(EventType::Normal, "ScalingReplicaSet", &message).await;
        Ok(true)
    }

    /// RollingUpdate (`rolloutRolling`).
    async fn rolling(&mut self, mut rss: Vec<ReplicaSet>) -> Result<Action, Error> {
        let Some(new) = self.sync_revision(&mut rss, true).await? else {
            return self.finish_rollout(&rss, None).await;
        };
        if self.reconcile_new(&mut rss, new).await? {
            return self.finish_rollout(&rss, Some(new)).await;
        }
        if self.reconcile_old(&mut rss, new).await? {
            return self.finish_rollout(&rss, Some(new)).await;
        }
        let status = self.d.status.clone().unwrap_or_default();
        if complete(&self.d, &status) {
            self.cleanup(&rss, Some(new)).await?;
        }
        self.finish_rollout(&rss, Some(new)).await
    }

    /// Scale the new ReplicaSet up within maxSurge (`reconcileNewReplicaSet`).
    async fn reconcile_new(&self, rss: &mut [ReplicaSet], new: usize) -> Result<bool, Error> {
        let desired = replicas(&self.d);
        let current = rs_replicas(&rss[new]);
        if current == desired {
            return Ok(false);
        }
        if current > desired {
            return self.scale(&mut rss[new], desired).await;
        }
        let all: Vec<&ReplicaSet> = rss.iter().collect();
        let to = new_rs_replicas(&self.d, &all, current);
        self.scale(&mut rss[new], to).await
    }

    /// Scale the old ReplicaSets down within maxUnavailable, the unhealthy first
    /// (`reconcileOldReplicaSets`).
    async fn reconcile_old(&self, rss: &mut [ReplicaSet], new: usize) -> Result<bool, Error> {
        let old: Vec<usize> = (0..rss.len()).filter(|i| *i != new).collect();
        let old_count: i32 = old.iter().map(|i| rs_replicas(&rss[*i])).sum();
        if old_count == 0 {
            return Ok(false);
        }
        let all_count: i32 = rss.iter().map(rs_replicas).sum();
        let min_available = replicas(&self.d) - max_unavailable(&self.d);
        let new_unavailable = rs_replicas(&rss[new]) - rs_available(&rss[new]);
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        // Old pods that are not available cost no availability: take them first
        // (`cleanupUnhealthyReplicas`).
        let mut cleaned = 0;
        for &i in &old {
            if cleaned >= max_scaled_down {
                break;
            }
            let (size, available) = (rs_replicas(&rss[i]), rs_available(&rss[i]));
            if size == 0 || size == available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(size - available);
            self.scale(&mut rss[i], size - down).await?;
            cleaned += down;
        }
        // Then as many available ones as keep minAvailable (`scaleDownOldReplicaSetsForRollingUpdate`).
        let available: i32 = rss.iter().map(rs_available).sum();
        let mut scaled = 0;
        if available > min_available {
            let total = available - min_available;
            for &i in &old {
                if scaled >= total {
                    break;
                }
                let size = rs_replicas(&rss[i]);
                if size == 0 {
                    continue;
                }
                let down = size.min(total - scaled);
                self.scale(&mut rss[i], size - down).await?;
                scaled += down;
            }
        }
        Ok(cleaned + scaled > 0)
    }

    /// Recreate (`rolloutRecreate`): old ReplicaSets to zero, then, once their pods are gone,
    /// the new one to `spec.replicas`.
    async fn recreate(&mut self, mut rss: Vec<ReplicaSet>) -> Result<Action, Error> {
        let mut new = self.sync_revision(&mut rss, false).await?;
        let mut scaled_down = false;
        for (i, rs) in rss.iter_mut().enumerate() {
            if Some(i) != new && rs_replicas(rs) > 0 {
                scaled_down |= self.scale(rs, 0).await?;
            }
        }
        if scaled_down || self.old_pods_running(&rss, new).await? {
            return self.finish_rollout(&rss, new).await;
        }
        if new.is_none() {
            new = self.sync_revision(&mut rss, true).await?;
        }
        if let Some(i) = new {
            let desired = replicas(&self.d);
            self.scale(&mut rss[i], desired).await?;
        }
        let status = self.d.status.clone().unwrap_or_default();
        if complete(&self.d, &status) {
            self.cleanup(&rss, new).await?;
        }
        self.finish_rollout(&rss, new).await
    }

    /// Whether an old ReplicaSet still has a pod that has not finished (`oldPodsRunning`).
    async fn old_pods_running(
        &self,
        rss: &[ReplicaSet],
        new: Option<usize>,
    ) -> Result<bool, Error> {
        let old: Vec<String> = rss
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != new)
            .filter_map(|(_, rs)| rs.uid())
            .collect();
        if rss.iter().enumerate().any(|(i, rs)| Some(i) != new && rs_actual(rs) > 0) {
            return Ok(true);
        }
        let pod_api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.target.namespace);
        let all = pod_api.list(&ListParams::default()).await?.items;
        Ok(all.iter().any(|p| {
            owners::controller_of(&p.metadata).is_some_and(|r| old.contains(&r.uid))
                && !pods::is_finished(p)
        }))
    }

    /// While paused, or when `spec.replicas` changed: scale, no rollout (`sync`).
    async fn sync_scale(
        &mut self,
        mut rss: Vec<ReplicaSet>,
        paused: bool,
    ) -> Result<Action, Error> {
        let new = self.sync_revision(&mut rss, false).await?;
        self.scale_all(&mut rss, new).await?;
        if paused {
            self.cleanup(&rss, new).await?;
        }
        self.finish_sync(&rss, new).await
    }

    /// Bring the ReplicaSets to `spec.replicas` (`scale`).
    async fn scale_all(&self, rss: &mut [ReplicaSet], new: Option<usize>) -> Result<(), Error> {
        let desired = replicas(&self.d);
        let active: Vec<usize> = (0..rss.len()).filter(|i| rs_replicas(&rss[*i]) > 0).collect();
        // The one ReplicaSet active, or the latest when none is (`FindActiveOrLatest`).
        let only = match active.as_slice() {
            [] => new.or(rss.len().checked_sub(1)),
            [one] => Some(*one),
            _ => None,
        };
        if let Some(i) = only {
            self.scale(&mut rss[i], desired).await?;
            return Ok(());
        }
        if let Some(n) = new {
            let saturated = rs_replicas(&rss[n]) == desired && rs_available(&rss[n]) == desired;
            if saturated {
                for i in active.into_iter().filter(|i| *i != n) {
                    self.scale(&mut rss[i], 0).await?;
                }
                return Ok(());
            }
        }
        if !is_rolling(&self.d) {
            return Ok(());
        }
        // A scale during a rollout: the difference to the newest (growing) or from the oldest
        // first (shrinking); every active ReplicaSet gets the new replicas annotations.
        let allowed = desired + max_surge(&self.d);
        let total: i32 = rss.iter().map(rs_replicas).sum();
        let mut sizes: Vec<(usize, i32)> =
            active.iter().map(|i| (*i, rs_replicas(&rss[*i]))).collect();
        let mut delta = allowed - total;
        if delta > 0 {
            let newest = new.filter(|n| active.contains(n)).or(active.last().copied());
            if let Some(entry) = sizes.iter_mut().find(|(i, _)| Some(*i) == newest) {
                entry.1 += delta;
            }
        } else {
            let mut order: Vec<usize> = (0..sizes.len()).collect();
            // Old ones first (oldest first), the new one last.
            order.sort_by_key(|k| Some(sizes[*k].0) == new);
            for k in order {
                if delta == 0 {
                    break;
                }
                let take = sizes[k].1.min(-delta);
                sizes[k].1 -= take;
                delta += take;
            }
        }
        for (i, size) in sizes {
            self.scale(&mut rss[i], size).await?;
        }
        Ok(())
    }

    /// Delete the oldest old ReplicaSets beyond `revisionHistoryLimit` that hold no pods
    /// (`cleanupDeployment`).
    async fn cleanup(&self, rss: &[ReplicaSet], new: Option<usize>) -> Result<(), Error> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut old: Vec<&ReplicaSet> = rss
            .iter()
            .enumerate()
            .filter(|(i, rs)| Some(*i) != new && rs.metadata.deletion_timestamp.is_none())
            .map(|(_, rs)| rs)
            .collect();
        let excess = old.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return Ok(());
        }
        old.sort_by_key(|rs| {
            (
                revision(&rs.metadata),
                rs.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            )
        });
        for rs in old.into_iter().take(usize::try_from(excess).unwrap_or(0)) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation).unwrap_or(0);
            if rs_actual(rs) != 0
                || rs_replicas(rs) != 0
                || rs.metadata.generation.unwrap_or(0) > observed
            {
                continue;
            }
            match self.rs_api.delete(&rs.name_any(), &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(replicaset = %rs.name_any(), "deleted an old ReplicaSet beyond the history limit")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Write the status of a scale or a paused Deployment (`syncDeploymentStatus`).
    async fn finish_sync(
        &mut self,
        rss: &[ReplicaSet],
        new: Option<usize>,
    ) -> Result<Action, Error> {
        let all: Vec<&ReplicaSet> = rss.iter().collect();
        let status = calculate_status(&self.d, &all, new.map(|i| &rss[i]), Utc::now());
        if status_differs(&self.d.status.clone().unwrap_or_default(), &status) {
            self.write_status(status).await?;
        }
        Ok(Action::await_change())
    }

    /// Write the status of a rollout, with its progress (`syncRolloutStatus`), and look again
    /// when its deadline may pass.
    async fn finish_rollout(
        &mut self,
        rss: &[ReplicaSet],
        new: Option<usize>,
    ) -> Result<Action, Error> {
        let all: Vec<&ReplicaSet> = rss.iter().collect();
        let now = Utc::now();
        let status = rollout_status(&self.d, &all, new.map(|i| &rss[i]), now);
        if status_differs(&self.d.status.clone().unwrap_or_default(), &status) {
            self.write_status(status).await?;
            return Ok(Action::await_change());
        }
        let after = stuck_requeue(&self.d, &status, now);
        let key = crate::wakeup_key("deployment", &self.target.namespace, &self.target.name);
        self.shared.wakeups.after(key, after);
        Ok(after.map_or_else(Action::await_change, Action::requeue))
    }
}
