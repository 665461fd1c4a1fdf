//! The DaemonSet controller (kube-controller-manager's `pkg/controller/daemon`): one pod of the
//! DaemonSet's template on every node that fits it (its `nodeSelector`, required node affinity
//! and tolerations, with the tolerations of node problems every daemon pod gets), none on the
//! others.
//!
//! A reconcile reads the DaemonSet, the cluster's nodes and the namespace's pods and
//! ControllerRevisions from the API (not from caches, so no expectations are needed), and, as
//! `syncDaemonSet` does: keeps the history ([`revision`]), claims pods, creates the missing pods
//! and deletes the surplus, failed and finished ones ([`decide::manage`]); when that changed
//! nothing and the strategy is `RollingUpdate`, takes the next step of the rollout
//! ([`decide::rolling_update`]); prunes old revisions; and writes the status. Any node's change
//! wakes every DaemonSet; a pod's or a revision's wakes its controller.
//!
//! A pod is made for its node as Kubernetes has made it since 1.12: unbound, with a required
//! node affinity `matchFields metadata.name In [<node>]` for the scheduler to honour.
//!
//! Where it differs from Kubernetes: the template hash is not byte-equal
//! ([`crate::deployment::util::template_hash`]); pods bound to a node that is gone are left to
//! a pod garbage collector (as in Kubernetes, where `podgc` deletes them), which a Carrel tenant
//! does not run.

pub mod decide;
pub mod revision;

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::replicaset::decide::slow_start_batches;
use crate::replicaset::{api_message, selector::Selector};
use crate::{owners, pods, Context, Error};
use decide::{Counts, Observed, Placement, HASH_LABEL};

const COMPONENT: &str = "daemonset-controller";

/// The revisions kept when `spec.revisionHistoryLimit` is unset (the API defaults it to this).
const REVISION_HISTORY_LIMIT: i32 = 10;

/// What the reconciles share.
struct Shared {
    client: kube::Client,
    recorder: Recorder,
    /// Deletions of failed daemon pods, per DaemonSet and node.
    backoff: Mutex<decide::Backoff>,
}

/// Run the DaemonSet controller until `stop`.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let shared = Arc::new(Shared {
        client: client.clone(),
        recorder: context.recorder(COMPONENT),
        backoff: Mutex::new(decide::Backoff::default()),
    });
    let controller =
        Controller::new(Api::<DaemonSet>::all(client.clone()), watcher::Config::default());
    let sets = controller.store();
    controller
        .owns(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .owns(Api::<ControllerRevision>::all(client.clone()), watcher::Config::default())
        // A node that comes, goes or changes may change where every DaemonSet's pods belong.
        .watches(Api::<Node>::all(client), watcher::Config::default(), move |_: Node| {
            sets.state().iter().map(|ds| ObjectRef::from_obj(&**ds)).collect::<Vec<_>>()
        })
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, shared)
        .for_each(|_| async {})
        .await;
}

fn error_policy(ds: Arc<DaemonSet>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(daemonset = %ds.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

async fn reconcile(ds: Arc<DaemonSet>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = ds.namespace().unwrap_or_default();
    let api: Api<DaemonSet> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version: the one that triggered this reconcile may be older than our last write.
    let Some(ds) = api.get_opt(&ds.name_any()).await? else { return Ok(Action::await_change()) };
    let target = EventTarget {
        api_version: "apps/v1".into(),
        kind: "DaemonSet".into(),
        namespace: namespace.clone(),
        name: ds.name_any(),
        uid: ds.uid(),
    };
    let sync = Sync {
        pods: Api::namespaced(shared.client.clone(), &namespace),
        revisions: Api::namespaced(shared.client.clone(), &namespace),
        shared,
        ds,
        api,
        target,
    };
    sync.run().await
}

/// One reconcile of one DaemonSet.
struct Sync {
    shared: Arc<Shared>,
    ds: DaemonSet,
    api: Api<DaemonSet>,
    pods: Api<Pod>,
    revisions: Api<ControllerRevision>,
    target: EventTarget,
}

impl Sync {
    async fn record(&self, kind: EventType, reason: &str, message: &str) {
        if let Err(error) = self.shared.recorder.record(&self.target, kind, reason, message).await {
            tracing::warn!(%error, reason, "recording an event");
        }
    }

    fn uid(&self) -> String {
        self.ds.uid().unwrap_or_default()
    }

    async fn run(&self) -> Result<Action, Error> {
        let raw = self.ds.spec.as_ref().map(|s| s.selector.clone()).unwrap_or_default();
        let selector = Selector::from_label_selector(&raw).map_err(Error::Invalid)?;
        if selector.is_empty() {
            self.record(
                EventType::Warning,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            )
            .await;
            return Ok(Action::await_change());
        }
        // Whether its revisions are still there or orphaned is unknown once it is being
        // deleted: Kubernetes writes nothing then, not even its status.
        if self.ds.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let nodes =
            Api::<Node>::all(self.shared.client.clone()).list(&ListParams::default()).await?;
        let placement = Placement::of(&self.ds).map_err(Error::Invalid)?;
        let mut fits: Vec<(String, decide::Fit)> =
            nodes.items.iter().map(|n| (n.name_any(), placement.on(n))).collect();
        fits.sort_by(|a, b| a.0.cmp(&b.0));

        let (hash, old) = self.history(&selector).await?;
        let owned = self
            .claim(&self.pods, self.pods.list(&ListParams::default()).await?.items, &selector)
            .await?;
        let observed = Observed::new(fits.clone(), &owned);
        let min_ready = decide::min_ready_seconds(&self.ds);
        let now = Utc::now();
        let plan = {
            let instant = Instant::now();
            let mut backoff = self.shared.backoff.lock();
            backoff.forget_old(instant);
            let generation = self.ds.status.as_ref().and_then(|s| s.observed_generation);
            let key = |node: &str| format!("{}/{}/{node}", self.uid(), generation.unwrap_or(0));
            decide::manage(
                &observed,
                &hash,
                decide::allows_surge(&self.ds),
                min_ready,
                now,
                &mut backoff,
                key,
                instant,
            )
        };
        let namespace = self.target.namespace.clone();
        for f in &plan.finished {
            let (kind, reason, message) = if f.failed {
                let message = format!(
                    "Found failed daemon pod {namespace}/{} on node {}, will try to kill it",
                    f.pod, f.node
                );
                (EventType::Warning, "FailedDaemonPod", message)
            } else {
                let message = format!(
                    "Found succeeded daemon pod {namespace}/{} on node {}, will try to delete it",
                    f.pod, f.node
                );
                (EventType::Normal, "SucceededDaemonPod", message)
            };
            self.record(kind, reason, &message).await;
        }
        let (mut changed, mut failure) =
            self.sync_nodes(&plan.delete, &plan.create_on, &hash).await;
        // As Kubernetes, which rolls only once the effects of `manage` are all observed.
        if !changed && failure.is_none() && decide::is_rolling(&self.ds) {
            match decide::rolling_update(&self.ds, &observed, &hash, now) {
                Ok((delete, create_on)) => {
                    (changed, failure) = self.sync_nodes(&delete, &create_on, &hash).await;
                }
                Err(e) => failure = Some(e),
            }
        }
        self.cleanup_history(&old, &owned).await?;

        let owned = if changed {
            let all = self.pods.list(&ListParams::default()).await?.items;
            self.claim(&self.pods, all, &selector).await?
        } else {
            owned
        };
        let observed = Observed::new(fits, &owned);
        let generation = decide::template_generation(&self.ds);
        let counts = decide::counts(&observed, &hash, generation, min_ready, Utc::now());
        self.write_status(counts).await?;

        if let Some(message) = failure {
            return Err(Error::Invalid(message));
        }
        let mut after = plan.retry_after;
        if min_ready > 0 && counts.ready != counts.available {
            // Pods become available with time alone.
            let ready_wait = Duration::from_secs(min_ready.unsigned_abs().into());
            after = Some(after.map_or(ready_wait, |a| a.min(ready_wait)));
        }
        Ok(after.map_or_else(Action::await_change, Action::requeue))
    }

    /// The objects of `all` the DaemonSet controls, once it adopted the orphans its selector
    /// matches and released those it no longer matches (`ClaimPods`,
    /// `ClaimControllerRevisions`).
    async fn claim<K>(
        &self,
        api: &Api<K>,
        all: Vec<K>,
        selector: &Selector,
    ) -> Result<Vec<K>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize,
    {
        let uid = self.uid();
        let mut owned = Vec::new();
        let mut can_adopt: Option<bool> = None;
        for object in all {
            let meta = object.meta();
            let matches = selector.matches(meta.labels.as_ref());
            let name = object.name_any();
            let patch = match owners::controller_of(meta) {
                Some(r) if r.uid == uid && matches => {
                    owned.push(object);
                    continue;
                }
                Some(r) if r.uid == uid => json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid}],
                    "uid": meta.uid,
                }}),
                Some(_) => continue,
                None if !matches || meta.deletion_timestamp.is_some() => continue,
                None => {
                    // As `RecheckDeletionTimestamp`: adopt only for the DaemonSet as it is now.
                    if can_adopt.is_none() {
                        let fresh = self.api.get_opt(&self.ds.name_any()).await?;
                        can_adopt = Some(fresh.is_some_and(|f| {
                            f.uid().as_deref() == Some(uid.as_str())
                                && f.metadata.deletion_timestamp.is_none()
                        }));
                    }
                    if can_adopt != Some(true) {
                        continue;
                    }
                    let Some(reference) = owners::controller_ref(&self.ds) else { continue };
                    json!({"metadata": {"ownerReferences": [reference], "uid": meta.uid}})
                }
            };
            let adopting = owners::controller_of(object.meta()).is_none();
            match api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
                Ok(adopted) if adopting => owned.push(adopted),
                Ok(_) => {
                    tracing::info!(object = %name, "released what the selector no longer matches")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(owned)
    }

    /// The hash of the current template and the old revisions, once the current template has
    /// its revision, numbered above the old ones, and only one (`constructHistory`).
    async fn history(
        &self,
        selector: &Selector,
    ) -> Result<(String, Vec<ControllerRevision>), Error> {
        let all = self.revisions.list(&ListParams::default()).await?.items;
        let mut current = Vec::new();
        let mut old = Vec::new();
        for mut r in self.claim(&self.revisions, all, selector).await? {
            if revision::hash_of(&r).is_none() {
                // Labelled with its name, so that no hash need be computed again.
                let name = r.name_any();
                let patch = json!({"metadata": {"labels": {HASH_LABEL: name}}});
                r = self
                    .revisions
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            if revision::matches(&self.ds, &r) {
                current.push(r);
            } else {
                old.push(r);
            }
        }
        let number = revision::max_revision(&old) + 1;
        let current = match revision::keeper(&current).cloned() {
            None => self.snapshot(number).await?,
            Some(keep) => {
                self.dedup(&current, &keep, selector).await?;
                if keep.revision < number {
                    let name = keep.name_any();
                    let patch = json!({"revision": number});
                    self.revisions
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?
                } else {
                    keep
                }
            }
        };
        Ok((revision::hash_of(&current).unwrap_or_default().to_owned(), old))
    }

    /// Delete the revisions of the current template but `keep`, its pods relabelled with
    /// `keep`'s hash first (`dedupCurHistories`).
    async fn dedup(
        &self,
        current: &[ControllerRevision],
        keep: &ControllerRevision,
        selector: &Selector,
    ) -> Result<(), Error> {
        let hash = revision::hash_of(keep).unwrap_or_default();
        for duplicate in current.iter().filter(|r| r.name_any() != keep.name_any()) {
            let all = self.pods.list(&ListParams::default()).await?.items;
            for pod in self.claim(&self.pods, all, selector).await? {
                let label = pod.metadata.labels.as_ref().and_then(|l| l.get(HASH_LABEL));
                if label.map(String::as_str) != Some(hash) {
                    let patch = json!({"metadata": {"labels": {HASH_LABEL: hash}}});
                    match self
                        .pods
                        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            match self.revisions.delete(&duplicate.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Store the revision of the current template, numbered `number` (`snapshot`). Another
    /// template's revision under its name is a hash collision: the DaemonSet's
    /// `status.collisionCount` goes up, which moves the hash, and the reconcile fails to be
    /// retried.
    async fn snapshot(&self, number: i64) -> Result<ControllerRevision, Error> {
        let hash = revision::hash(&self.ds);
        let wanted = revision::snapshot(&self.ds, &hash, number);
        let name = wanted.name_any();
        let error = match self.revisions.create(&PostParams::default(), &wanted).await {
            Ok(created) => return Ok(created),
            Err(e) if is_already_exists(&e) => e,
            Err(e) => return Err(e.into()),
        };
        let existing = self.revisions.get(&name).await?;
        if revision::matches(&self.ds, &existing) {
            return Ok(existing);
        }
        let fresh = self.api.get(&self.ds.name_any()).await?;
        let count = |ds: &DaemonSet| ds.status.as_ref().and_then(|s| s.collision_count);
        if count(&fresh) != count(&self.ds) {
            return Err(Error::Invalid(format!(
                "found a stale collision count ({:?}, expected {:?}) of DaemonSet {:?} while \
                 processing; will retry until it is updated",
                count(&self.ds),
                count(&fresh),
                self.ds.name_any()
            )));
        }
        let next = count(&fresh).unwrap_or(0) + 1;
        let patch = json!({"status": {"collisionCount": next}});
        self.api
            .patch_status(&self.ds.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(daemonset = %self.ds.name_any(), collision_count = next, "hash collision; bumped the collision count");
        Err(error.into())
    }

    /// Delete the old revisions beyond `revisionHistoryLimit` whose template no pod has
    /// (`cleanupHistory`).
    async fn cleanup_history(&self, old: &[ControllerRevision], pods: &[Pod]) -> Result<(), Error> {
        let limit = self
            .ds
            .spec
            .as_ref()
            .and_then(|s| s.revision_history_limit)
            .unwrap_or(REVISION_HISTORY_LIMIT);
        let live: HashSet<String> = pods
            .iter()
            .filter_map(|p| p.metadata.labels.as_ref()?.get(HASH_LABEL).cloned())
            .filter(|h| !h.is_empty())
            .collect();
        for name in revision::to_prune(old, limit, &live) {
            match self.revisions.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Delete pods `delete` and make a pod on each node of `create_on` (`syncNodes`), at most
    /// [`decide::BURST_REPLICAS`] of each, the creates in batches of 1, 2, 4, … that stop at the
    /// first refusal. Whether anything was written, and the first refusal's message.
    async fn sync_nodes(
        &self,
        delete: &[String],
        create_on: &[String],
        hash: &str,
    ) -> (bool, Option<String>) {
        let mut changed = false;
        let mut first_error: Option<String> = None;
        let template = decide::pod_template(&self.ds, hash);
        let namespace = self.target.namespace.clone();
        let create_on = &create_on[..create_on.len().min(decide::BURST_REPLICAS)];
        let reference = owners::controller_ref(&self.ds);
        let mut at = 0;
        for batch in slow_start_batches(if reference.is_some() { create_on.len() } else { 0 }) {
            let creates = create_on[at..at + batch].iter().map(|node| {
                let owner = reference.clone().unwrap_or_default();
                let mut pod =
                    pods::from_template(&template, &namespace, &self.ds.name_any(), owner);
                if let Some(spec) = pod.spec.as_mut() {
                    spec.affinity = Some(decide::node_name_affinity(spec.affinity.take(), node));
                }
                async move { self.pods.create(&PostParams::default(), &pod).await }
            });
            at += batch;
            let mut failed = false;
            for result in futures::future::join_all(creates).await {
                match result {
                    Ok(created) => {
                        changed = true;
                        let message = format!("Created pod: {}", created.name_any());
                        self.record(EventType::Normal, "SuccessfulCreate", &message).await;
                    }
                    Err(e) => {
                        let why = api_message(&e);
                        let message = format!("Error creating: {why}");
                        self.record(EventType::Warning, "FailedCreate", &message).await;
                        first_error.get_or_insert(why);
                        failed = true;
                    }
                }
            }
            if failed {
                // As `slowStartBatch`: what failed once will fail again; stop here.
                break;
            }
        }
        let delete = &delete[..delete.len().min(decide::BURST_REPLICAS)];
        let deletes = delete.iter().map(|name| async move {
            (self.pods.delete(name, &DeleteParams::default()).await, name)
        });
        for (result, name) in futures::future::join_all(deletes).await {
            match result {
                Ok(_) => {
                    changed = true;
                    let message = format!("Deleted pod: {name}");
                    self.record(EventType::Normal, "SuccessfulDelete", &message).await;
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    let why = api_message(&e);
                    let message = format!("Error deleting: {why}");
                    self.record(EventType::Warning, "FailedDelete", &message).await;
                    first_error.get_or_insert(why);
                }
            }
        }
        (changed, first_error)
    }

    /// Write the status `counts` make, unless it shows them already (`storeDaemonSetStatus`).
    /// Counts Kubernetes omits when zero are removed rather than written as 0.
    async fn write_status(&self, c: Counts) -> Result<(), Error> {
        let s = self.ds.status.clone().unwrap_or_default();
        let generation = self.ds.metadata.generation.unwrap_or(0);
        if s.desired_number_scheduled == c.desired
            && s.current_number_scheduled == c.current
            && s.number_misscheduled == c.misscheduled
            && s.number_ready == c.ready
            && s.updated_number_scheduled.unwrap_or(0) == c.updated
            && s.number_available.unwrap_or(0) == c.available
            && s.number_unavailable.unwrap_or(0) == c.unavailable
            && s.observed_generation.unwrap_or(0) >= generation
        {
            return Ok(());
        }
        let omitted = |n: i32| if n == 0 { Value::Null } else { json!(n) };
        let patch = json!({"status": {
            "observedGeneration": generation,
            "desiredNumberScheduled": c.desired,
            "currentNumberScheduled": c.current,
            "numberMisscheduled": c.misscheduled,
            "numberReady": c.ready,
            "updatedNumberScheduled": omitted(c.updated),
            "numberAvailable": omitted(c.available),
            "numberUnavailable": omitted(c.unavailable),
        }});
        match self
            .api
            .patch_status(&self.ds.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
