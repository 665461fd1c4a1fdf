//! The ReplicaSet and ReplicationController controllers (kube-controller-manager's
//! `pkg/controller/replicaset`, which runs ReplicationControllers through the same code): one
//! generic core over [`Replicated`], and two thin adapters, [`ReplicaSet`] and
//! [`ReplicationController`].
//!
//! A reconcile reads its object and the namespace's pods from the API (not from a cache, so no
//! expectations are needed: what it reads includes its own last writes), claims pods (adopts the
//! orphans its selector matches, releases the ones it no longer matches), creates or deletes pods
//! to make `spec.replicas`, and writes its status.

pub mod decide;
pub mod selector;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::{owners, pods, Context, Error};
use decide::Counts;
use selector::Selector;

/// The condition a ReplicaSet carries while it cannot create or delete its pods.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";

/// What the core needs of a kind that keeps a number of pods.
pub trait Replicated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    /// Its controller's name, as Events give it.
    const COMPONENT: &'static str;
    /// `spec.replicas` (defaulted to 1 by the API).
    fn desired(&self) -> i32;
    /// `spec.minReadySeconds`.
    fn min_ready_seconds(&self) -> i32;
    /// The selector of its pods.
    fn selector(&self) -> Result<Selector, String>;
    /// The template of its pods, if it has one.
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// Its status, as JSON (ReplicaSet and ReplicationController statuses have one shape).
    fn status_json(&self) -> Value;
}

impl Replicated for ReplicaSet {
    const COMPONENT: &'static str = "replicaset-controller";
    fn desired(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn selector(&self) -> Result<Selector, String> {
        match &self.spec {
            Some(spec) => Selector::from_label_selector(&spec.selector),
            None => Ok(Selector::default()),
        }
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }
    fn status_json(&self) -> Value {
        serde_json::to_value(&self.status).unwrap_or(Value::Null)
    }
}

impl Replicated for ReplicationController {
    const COMPONENT: &'static str = "replication-controller";
    fn desired(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0)
    }
    fn selector(&self) -> Result<Selector, String> {
        let set = self.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
        Ok(Selector::from_map(&set))
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref()?.template.as_ref()
    }
    fn status_json(&self) -> Value {
        serde_json::to_value(&self.status).unwrap_or(Value::Null)
    }
}

/// What the reconciles of one kind share.
struct Shared {
    client: kube::Client,
    recorder: Recorder,
}

/// Run the ReplicaSet controller until `stop`.
pub async fn run_replicasets(context: Arc<Context>, stop: watch::Receiver<bool>) {
    run::<ReplicaSet>(context, stop).await
}

/// Run the ReplicationController controller until `stop`.
pub async fn run_replication_controllers(context: Arc<Context>, stop: watch::Receiver<bool>) {
    run::<ReplicationController>(context, stop).await
}

async fn run<K: Replicated>(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let shared =
        Arc::new(Shared { client: client.clone(), recorder: context.recorder(K::COMPONENT) });
    Controller::new(Api::<K>::all(client.clone()), watcher::Config::default())
        .owns(Api::<Pod>::all(client), watcher::Config::default())
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile::<K>, error_policy::<K>, shared)
        .for_each(|_| async {})
        .await;
}

fn error_policy<K: Replicated>(object: Arc<K>, error: &Error, _: Arc<Shared>) -> Action {
    tracing::debug!(kind = %K::kind(&()), name = %object.name_any(), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn target<K: Replicated>(object: &K) -> EventTarget {
    EventTarget {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        namespace: object.namespace().unwrap_or_default(),
        name: object.name_any(),
        uid: object.uid(),
    }
}

/// The message of an API error, as Kubernetes' clients print it.
pub(crate) fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

async fn reconcile<K: Replicated>(object: Arc<K>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(shared.client.clone(), &namespace);
    // The newest version: the one that triggered this reconcile may be older than our last write.
    let Some(object) = api.get_opt(&object.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let Some(uid) = object.uid() else { return Ok(Action::await_change()) };
    let deleting = object.meta().deletion_timestamp.is_some();
    let selector = object.selector().map_err(Error::Invalid)?;

    let pod_api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let all = pod_api.list(&ListParams::default()).await?.items;
    let owned = claim(&shared, &object, &uid, &selector, deleting, all).await?;

    let diff = owned.len() as i64 - i64::from(object.desired());
    let manage_error =
        if deleting { None } else { manage(&shared, &object, &pod_api, &owned, diff).await };

    let counts = decide::counts(
        &owned,
        object.template().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.as_ref()),
        object.min_ready_seconds(),
        chrono::Utc::now(),
    );
    let failure = manage_error
        .as_ref()
        .map(|message| (if diff < 0 { "FailedCreate" } else { "FailedDelete" }, message.as_str()));
    write_status(&api, &object, counts, failure).await?;

    if let Some(message) = manage_error {
        return Err(Error::Invalid(message));
    }
    let min_ready = object.min_ready_seconds();
    if min_ready > 0 && counts.ready == object.desired() && counts.available != counts.ready {
        // Pods become available with time alone: look again when the first can.
        return Ok(Action::requeue(Duration::from_secs(min_ready.unsigned_abs().into())));
    }
    Ok(Action::await_change())
}

/// The active pods `object` controls once it has adopted the orphans its selector matches and
/// released those it no longer matches (`ClaimPods`).
async fn claim<K: Replicated>(
    shared: &Shared,
    object: &K,
    uid: &str,
    selector: &Selector,
    deleting: bool,
    all: Vec<Pod>,
) -> Result<Vec<Pod>, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let mut owned = Vec::new();
    let mut can_adopt: Option<bool> = None;
    for pod in all.into_iter().filter(pods::is_active) {
        let matches = !selector.is_empty() && selector.matches(pod.metadata.labels.as_ref());
        let name = pod.name_any();
        match owners::controller_of(&pod.metadata) {
            Some(r) if r.uid == uid => {
                if matches || deleting {
                    owned.push(pod);
                    continue;
                }
                let patch = json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid}],
                    "uid": pod.metadata.uid,
                }});
                match pod_api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await
                {
                    Ok(_) => {
                        tracing::info!(pod = %name, "released a pod its selector no longer matches")
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Some(_) => {}
            None if matches && !deleting => {
                // As `RecheckDeletionTimestamp`: adopt only for the object as it is now.
                if can_adopt.is_none() {
                    let api: Api<K> = Api::namespaced(shared.client.clone(), &namespace);
                    let fresh = api.get_opt(&object.name_any()).await?;
                    can_adopt = Some(fresh.is_some_and(|f| {
                        f.uid().as_deref() == Some(uid) && f.meta().deletion_timestamp.is_none()
                    }));
                }
                if can_adopt != Some(true) {
                    continue;
                }
                let Some(reference) = owners::controller_ref(object) else { continue };
                let patch = json!({"metadata": {
                    "ownerReferences": [reference],
                    "uid": pod.metadata.uid,
                }});
                match pod_api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await
                {
                    Ok(adopted) => owned.push(adopted),
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            None => {}
        }
    }
    Ok(owned)
}

/// Create or delete pods so that `owned` becomes `spec.replicas` (`manageReplicas`); the message
/// of the first refused write, if any.
async fn manage<K: Replicated>(
    shared: &Shared,
    object: &K,
    pod_api: &Api<Pod>,
    owned: &[Pod],
    diff: i64,
) -> Option<String> {
    let target = target(object);
    let namespace = target.namespace.clone();
    if diff < 0 {
        let template = object.template()?;
        let reference = owners::controller_ref(object)?;
        let wanted = usize::try_from(-diff).unwrap_or(0).min(decide::BURST_REPLICAS);
        let pod = pods::from_template(template, &namespace, &object.name_any(), reference);
        let params = PostParams::default();
        let mut first_error = None;
        for batch in decide::slow_start_batches(wanted) {
            let creates = (0..batch).map(|_| pod_api.create(&params, &pod));
            for result in futures::future::join_all(creates).await {
                match result {
                    Ok(created) => {
                        let message = format!("Created pod: {}", created.name_any());
                        record(shared, &target, EventType::Normal, "SuccessfulCreate", &message)
                            .await;
                    }
                    Err(e) => {
                        let why = api_message(&e);
                        let message = format!("Error creating: {why}");
                        record(shared, &target, EventType::Warning, "FailedCreate", &message).await;
                        first_error.get_or_insert(why);
                    }
                }
            }
            if first_error.is_some() {
                // As `slowStartBatch`: what failed once will fail again; stop here.
                break;
            }
        }
        first_error
    } else if diff > 0 {
        let surplus = usize::try_from(diff).unwrap_or(0).min(decide::BURST_REPLICAS);
        let doomed: Vec<Pod> =
            decide::deletion_order(owned.to_vec()).into_iter().take(surplus).collect();
        let deletes = doomed.iter().map(|p| {
            let name = p.name_any();
            async move { (pod_api.delete(&name, &DeleteParams::default()).await, name) }
        });
        let mut first_error = None;
        for (result, name) in futures::future::join_all(deletes).await {
            match result {
                Ok(_) => {
                    let message = format!("Deleted pod: {name}");
                    record(shared, &target, EventType::Normal, "SuccessfulDelete", &message).await;
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => {
                    let why = api_message(&e);
                    let message = format!("Error deleting: {why}");
                    record(shared, &target, EventType::Warning, "FailedDelete", &message).await;
                    first_error.get_or_insert(why);
                }
            }
        }
        first_error
    } else {
        None
    }
}

async fn record(
    shared: &Shared,
    target: &EventTarget,
    kind: EventType,
    reason: &str,
    message: &str,
) {
    if let Err(error) = shared.recorder.record(target, kind, reason, message).await {
        tracing::warn!(%error, reason, "recording an event");
    }
}

/// The status `counts` and a failure to manage pods make, from `current` (its other
/// conditions are kept; `ReplicaFailure` is set while a write fails and removed once none does).
pub fn status(
    current: &Value,
    generation: Option<i64>,
    counts: Counts,
    failure: Option<(&str, &str)>,
) -> Value {
    let mut conditions: Vec<Value> =
        current.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == REPLICA_FAILURE);
    match (failure, existing) {
        (Some((reason, message)), None) => conditions.push(json!({
            "type": REPLICA_FAILURE,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        })),
        (None, Some(i)) => {
            conditions.remove(i);
        }
        _ => {}
    }
    let mut status = serde_json::Map::new();
    status.insert("replicas".into(), counts.replicas.into());
    status.insert("fullyLabeledReplicas".into(), counts.fully_labeled.into());
    status.insert("readyReplicas".into(), counts.ready.into());
    status.insert("availableReplicas".into(), counts.available.into());
    if let Some(generation) = generation {
        status.insert("observedGeneration".into(), generation.into());
    }
    if !conditions.is_empty() {
        status.insert("conditions".into(), conditions.into());
    }
    Value::Object(status)
}

/// Whether `new` says anything `current` does not (zero counts are absent from a stored status).
fn differs(current: &Value, new: &Value) -> bool {
    let Some(new) = new.as_object() else { return false };
    let zero = json!(0);
    let current_conditions = current.get("conditions").cloned().unwrap_or(Value::Null);
    let new_conditions = new.get("conditions").cloned().unwrap_or(Value::Null);
    new.iter().filter(|(k, _)| *k != "conditions").any(|(k, v)| {
        let was = current.get(k).filter(|v| !v.is_null()).unwrap_or(&zero);
        was != v
    }) || current_conditions != new_conditions
}

async fn write_status<K: Replicated>(
    api: &Api<K>,
    object: &K,
    counts: Counts,
    failure: Option<(&str, &str)>,
) -> Result<(), Error> {
    let current = object.status_json();
    let new = status(&current, object.meta().generation, counts, failure);
    if !differs(&current, &new) {
        return Ok(());
    }
    let mut new = new;
    if new.get("conditions").is_none() {
        if let Some(map) = new.as_object_mut() {
            map.insert("conditions".into(), Value::Null);
        }
    }
    let patch = json!({"status": new});
    match api.patch_status(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Now, as the API writes times (RFC 3339, whole seconds, UTC).
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_failure_is_set_once_and_removed_when_writes_succeed() {
        let counts = Counts { replicas: 1, fully_labeled: 1, ready: 0, available: 0 };
        let failed = status(&Value::Null, Some(2), counts, Some(("FailedCreate", "forbidden")));
        assert_eq!(failed["observedGeneration"], 2);
        assert_eq!(failed["conditions"][0]["type"], REPLICA_FAILURE);
        assert_eq!(failed["conditions"][0]["reason"], "FailedCreate");
        assert_eq!(failed["conditions"][0]["message"], "forbidden");
        let again = status(&failed, Some(2), counts, Some(("FailedCreate", "other")));
        assert_eq!(again["conditions"], failed["conditions"], "the first failure is kept");
        assert!(!differs(&failed, &again));
        let healed = status(&failed, Some(2), counts, None);
        assert!(healed.get("conditions").is_none());
        assert!(differs(&failed, &healed));
    }

    #[test]
    fn a_stored_status_without_zero_counts_does_not_differ() {
        let stored = json!({"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1});
        let counts = Counts { replicas: 2, fully_labeled: 2, ready: 0, available: 0 };
        assert!(!differs(&stored, &status(&stored, Some(1), counts, None)));
        assert!(differs(&stored, &status(&stored, Some(2), counts, None)));
    }
}
