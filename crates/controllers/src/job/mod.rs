//! The Job controller (kube-controller-manager's `job-controller`, `pkg/controller/job`): runs a
//! Job's pods to completion, as Kubernetes ≥ 1.31 does.
//!
//! - Pods are made from the template with the labels kube-apiserver's defaulting of a Job's
//!   selector gives its template (`batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name`
//!   and the legacy `controller-uid`, `job-name`): this API server does not add them, so the
//!   controller does; it finds its pods by that label and its controller reference.
//! - Every pod carries the finalizer `batch.kubernetes.io/job-tracking` from its creation until
//!   its outcome is counted: the pod's UID goes to `status.uncountedTerminatedPods`, then the
//!   finalizer goes, then the count moves to `succeeded`/`failed`, so a finished pod deleted early
//!   is still counted, and never twice.
//! - `NonIndexed` and `Indexed` completion modes, `backoffLimit`, `backoffLimitPerIndex` and
//!   `maxFailedIndexes`, `activeDeadlineSeconds`, `suspend`, `podFailurePolicy`, `successPolicy`;
//!   terminal conditions are written as 1.31 does: `SuccessCriteriaMet` then `Complete`,
//!   `FailureTarget` then `Failed`, the second once no pod of the Job is still running or
//!   terminating.
//! - Replacement pods of failed ones wait a backoff (10 s doubling to 6 min in Kubernetes; the
//!   base is [`Config::backoff_base`]).
//!
//! Where it differs: pods are not adopted or released by selector (only pods the Job controls
//! are its pods); pods deleted because the Job was suspended are not counted as failed; the
//! global `backoffLimit` is not checked when `backoffLimitPerIndex` is set (kube-apiserver
//! defaults it to the maximum then, this API server to 6); the per-index backoff delay is the
//! Job's.

mod failure_policy;
pub mod indexes;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::{owners, pods, Context, Error};
use failure_policy::Action as PolicyAction;

/// The component the Job controller writes Events as.
pub const COMPONENT: &str = "job-controller";
/// The finalizer that keeps a pod until its outcome is counted.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// The label naming the UID of a pod's Job.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label naming a pod's Job.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The legacy label naming the UID of a pod's Job.
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
/// The legacy label naming a pod's Job.
pub const LEGACY_JOB_NAME: &str = "job-name";
/// The annotation (and label) giving an Indexed Job's pod its index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The annotation counting the earlier failures of a pod's index (`backoffLimitPerIndex`).
pub const INDEX_FAILURE_COUNT: &str = "batch.kubernetes.io/job-index-failure-count";
/// The environment variable giving an Indexed Job's containers their index.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// How the Job controller waits.
#[derive(Clone, Debug)]
pub struct Config {
    /// The wait before the replacement of a Job's first failed pod; it doubles with each further
    /// failure (Kubernetes: 10 s).
    pub backoff_base: Duration,
    /// The longest such wait (Kubernetes: 6 min).
    pub backoff_max: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config { backoff_base: Duration::from_secs(10), backoff_max: Duration::from_secs(360) }
    }
}

/// A Job's recent pod failures and refused creations.
#[derive(Clone, Copy, Debug, Default)]
struct Backoff {
    /// Failures counted since the last success.
    failures: u32,
    /// When the last one was counted.
    last_failure: Option<Instant>,
    /// Pod creations refused in a row.
    refused: u32,
}

struct State {
    context: Arc<Context>,
    config: Config,
    recorder: Recorder,
    backoffs: Mutex<HashMap<String, Backoff>>,
}

/// Run the Job controller (and the release of orphan pods' finalizers) until `stop` is true.
pub async fn run(context: Arc<Context>, config: Config, stop: watch::Receiver<bool>) {
    let state = Arc::new(State {
        recorder: context.recorder(COMPONENT),
        context: context.clone(),
        config,
        backoffs: Mutex::new(HashMap::new()),
    });
    let client = context.client.clone();
    let jobs = Controller::new(Api::<Job>::all(client.clone()), watcher::Config::default())
        .owns(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(CONTROLLER_UID))
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, state.clone())
        .for_each(|_| async {});
    let orphans =
        Controller::new(Api::<Pod>::all(client), watcher::Config::default().labels(CONTROLLER_UID))
            .graceful_shutdown_on(crate::stopped(&stop))
            .run(release_orphan, orphan_error_policy, state)
            .for_each(|_| async {});
    futures::future::join(jobs, orphans).await;
}

fn error_policy(job: Arc<Job>, error: &Error, state: Arc<State>) -> Action {
    tracing::debug!(job = %job.name_any(), %error, "job sync failed");
    let uid = job.uid().unwrap_or_default();
    let refused = state.backoffs.lock().get(&uid).map(|b| b.refused).unwrap_or_default();
    let wait = Duration::from_millis(200) * 2u32.saturating_pow(refused.min(10));
    Action::requeue(wait.min(Duration::from_secs(60)))
}

fn orphan_error_policy(_pod: Arc<Pod>, error: &Error, _state: Arc<State>) -> Action {
    tracing::debug!(%error, "releasing an orphan job pod failed");
    Action::requeue(Duration::from_secs(1))
}

/// A pod whose Job is gone (or finished) keeps no tracking finalizer (`syncOrphanPod`).
async fn release_orphan(pod: Arc<Pod>, state: Arc<State>) -> Result<Action, Error> {
    if !pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER) {
        return Ok(Action::await_change());
    }
    let namespace = pod.namespace().unwrap_or_default();
    if let Some(owner) = owners::controller_of(&pod.metadata).filter(|o| o.kind == "Job") {
        let api: Api<Job> = Api::namespaced(state.context.client.clone(), &namespace);
        if let Some(job) = api.get_opt(&owner.name).await? {
            if job.uid().as_deref() == Some(owner.uid.as_str()) && !is_finished(&job) {
                return Ok(Action::await_change());
            }
        }
    }
    let api: Api<Pod> = Api::namespaced(state.context.client.clone(), &namespace);
    remove_finalizer(&api, &pod).await?;
    Ok(Action::await_change())
}

/// Whether `job` has a `Complete` or `Failed` condition that is true.
pub fn is_finished(job: &Job) -> bool {
    finished_condition(job).is_some()
}

/// The `Complete` or `Failed` condition of `job` that is true, if any.
pub fn finished_condition(job: &Job) -> Option<&JobCondition> {
    let conditions = job.status.as_ref()?.conditions.as_deref()?;
    conditions
        .iter()
        .find(|c| matches!(c.type_.as_str(), "Complete" | "Failed") && c.status == "True")
}

fn condition<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status.conditions.as_deref()?.iter().find(|c| c.type_ == type_)
}

fn has_true(status: &JobStatus, type_: &str) -> bool {
    condition(status, type_).is_some_and(|c| c.status == "True")
}

/// Set condition `type_` to `status`, `reason`, `message` (`ensureJobConditionStatus`): added when
/// missing (unless it would be added `False`), its transition time changed only with its status.
/// Whether anything changed.
fn ensure_condition(
    job_status: &mut JobStatus,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &Time,
) -> bool {
    let conditions = job_status.conditions.get_or_insert_with(Vec::new);
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status == status
            && c.reason.as_deref() == Some(reason)
            && c.message.as_deref() == Some(message)
        {
            return false;
        }
        if c.status != status {
            c.last_transition_time = Some(now.clone());
        }
        c.status = status.to_owned();
        c.reason = Some(reason.to_owned());
        c.message = Some(message.to_owned());
        c.last_probe_time = Some(now.clone());
        return true;
    }
    if status == "False" {
        return false;
    }
    conditions.push(JobCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    });
    true
}

/// `now`, to the second, as the API writes times.
pub(crate) fn time(now: DateTime<Utc>) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(now.timestamp()).unwrap_or_default())
}

/// A `Time` as a chrono instant.
pub(crate) fn instant(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), 0).unwrap_or(DateTime::UNIX_EPOCH)
}

/// The index of an Indexed Job's pod, from its annotation (or label).
fn pod_index(pod: &Pod) -> Option<i32> {
    let from = |m: Option<&BTreeMap<String, String>>| m?.get(COMPLETION_INDEX)?.parse::<i32>().ok();
    from(pod.metadata.annotations.as_ref())
        .or_else(|| from(pod.metadata.labels.as_ref()))
        .filter(|i| *i >= 0)
}

fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata.finalizers.as_deref().unwrap_or_default().iter().any(|f| f == TRACKING_FINALIZER)
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && !pods::is_finished(pod)
}

/// Whether replacements wait for terminating pods to be gone (`podReplacementPolicy: Failed`,
/// the default with a `podFailurePolicy`).
fn only_replace_failed(spec: &JobSpec) -> bool {
    match spec.pod_replacement_policy.as_deref() {
        Some(policy) => policy == "Failed",
        None => spec.pod_failure_policy.is_some(),
    }
}

/// Whether a pod with the tracking finalizer counts as failed (`isPodFailed`): phase `Failed`,
/// or deleted before it succeeded (unless only `Failed` pods count).
fn counts_as_failed(pod: &Pod, spec: &JobSpec) -> bool {
    if pods::phase(pod) == "Failed" {
        return true;
    }
    !only_replace_failed(spec) && is_terminating(pod)
}

/// What a failed pod's failure does to its Job.
fn failure_action(pod: &Pod, spec: &JobSpec) -> PolicyAction {
    match spec.pod_failure_policy.as_ref() {
        Some(policy) if pods::phase(pod) == "Failed" => failure_policy::action(policy, pod),
        _ => PolicyAction::Count,
    }
}

/// How many times index `index` has failed so far, from its failed pods' annotations.
fn index_failures(all: &[Pod], index: i32, spec: &JobSpec) -> i32 {
    all.iter()
        .filter(|p| pod_index(p) == Some(index) && counts_as_failed(p, spec))
        .filter(|p| failure_action(p, spec) != PolicyAction::Ignore)
        .map(|p| {
            let before =
                p.annotations().get(INDEX_FAILURE_COUNT).and_then(|v| v.parse::<i32>().ok());
            before.unwrap_or_default().saturating_add(1)
        })
        .max()
        .unwrap_or_default()
}

/// Which rule of an Indexed Job's `successPolicy` its completed indexes meet, if any.
fn success_rule(spec: &JobSpec, completions: i32, completed: &BTreeSet<i32>) -> Option<usize> {
    let policy = spec.success_policy.as_ref()?;
    policy.rules.iter().position(|rule| {
        let (within, wanted) = match rule.succeeded_indexes.as_deref() {
            Some(text) => {
                let set = indexes::parse(Some(text), completions);
                let within = completed.intersection(&set).count();
                (within, rule.succeeded_count.map_or(set.len(), |c| c.max(0) as usize))
            }
            None => {
                (completed.len(), rule.succeeded_count.map_or(usize::MAX, |c| c.max(0) as usize))
            }
        };
        within >= wanted && wanted > 0
    })
}

/// The sum of container restarts of active pods, for `restartPolicy: OnFailure`
/// (`pastBackoffLimitOnFailure`).
fn past_backoff_limit_on_failure(spec: &JobSpec, active: &[&Pod]) -> bool {
    let on_failure = spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if on_failure != Some("OnFailure") {
        return false;
    }
    let limit = spec.backoff_limit.unwrap_or(6);
    let restarts: i32 = active
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            let init = s.init_container_statuses.as_deref().unwrap_or_default();
            let main = s.container_statuses.as_deref().unwrap_or_default();
            init.iter().chain(main).map(|c| c.restart_count)
        })
        .sum();
    if limit == 0 {
        restarts > 0
    } else {
        restarts >= limit
    }
}

fn job_target(job: &Job) -> EventTarget {
    EventTarget {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        namespace: job.namespace().unwrap_or_default(),
        name: job.name_any(),
        uid: job.uid(),
    }
}

/// Remove the tracking finalizer from `pod` (a merge patch of its other finalizers, guarded by
/// its resourceVersion). A pod already gone is fine.
async fn remove_finalizer(api: &Api<Pod>, pod: &Pod) -> Result<(), Error> {
    let rest: Vec<&String> = pod.finalizers().iter().filter(|f| *f != TRACKING_FINALIZER).collect();
    let patch = json!({"metadata": {
        "finalizers": rest,
        "resourceVersion": pod.resource_version(),
    }});
    match api.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A new pod of `job` (for `index`, when Indexed), as `manageJob` makes it.
fn new_pod(job: &Job, spec: &JobSpec, index: Option<i32>, index_failures: i32) -> Option<Pod> {
    let name = job.metadata.name.clone()?;
    let uid = job.metadata.uid.clone()?;
    let namespace = job.namespace().unwrap_or_default();
    let owner = owners::controller_ref(job)?;
    let prefix = match index {
        Some(i) => format!("{name}-{i}"),
        None => name.clone(),
    };
    let mut pod = pods::from_template(&spec.template, &namespace, &prefix, owner);
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(CONTROLLER_UID.into(), uid.clone());
    labels.insert(JOB_NAME.into(), name.clone());
    labels.insert(LEGACY_CONTROLLER_UID.into(), uid);
    labels.insert(LEGACY_JOB_NAME.into(), name.clone());
    pod.metadata.finalizers.get_or_insert_with(Vec::new).push(TRACKING_FINALIZER.into());
    if let Some(i) = index {
        labels.insert(COMPLETION_INDEX.into(), i.to_string());
        let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(COMPLETION_INDEX.into(), i.to_string());
        if spec.backoff_limit_per_index.is_some() {
            annotations.insert(INDEX_FAILURE_COUNT.into(), index_failures.to_string());
        }
        if let Some(pod_spec) = pod.spec.as_mut() {
            pod_spec.hostname = Some(format!("{name}-{i}"));
            let env = EnvVar {
                name: COMPLETION_INDEX_ENV.into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                        ..ObjectFieldSelector::default()
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            };
            let init = pod_spec.init_containers.iter_mut().flatten();
            for container in pod_spec.containers.iter_mut().chain(init) {
                let vars = container.env.get_or_insert_with(Vec::new);
                if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
                    vars.push(env.clone());
                }
            }
        }
    }
    Some(pod)
}

/// What a sync decided to tell about the Job once its status is written.
type Events = Vec<(EventType, &'static str, String)>;

async fn reconcile(job: Arc<Job>, state: Arc<State>) -> Result<Action, Error> {
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (Some(uid), Some(namespace)) = (job.uid(), job.namespace()) else {
        return Err(Error::Invalid("a Job without uid or namespace".into()));
    };
    let client = state.context.client.clone();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let job_api: Api<Job> = Api::namespaced(client, &namespace);
    let listed =
        pod_api.list(&ListParams::default().labels(&format!("{CONTROLLER_UID}={uid}"))).await?;
    let all: Vec<Pod> =
        listed.items.into_iter().filter(|p| owners::is_controlled_by(&p.metadata, &uid)).collect();

    if is_finished(&job) {
        // Its pods' outcomes were counted before it finished; release whatever still waits.
        for pod in all.iter().filter(|p| has_tracking_finalizer(p)) {
            remove_finalizer(&pod_api, pod).await?;
        }
        state.backoffs.lock().remove(&uid);
        return Ok(Action::await_change());
    }

    let spec = job.spec.clone().unwrap_or_default();
    let now = Utc::now();
    let now_time = time(now);
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let completions = spec.completions;
    let index_bound = completions.unwrap_or(0);
    let suspended = spec.suspend == Some(true);
    let per_index = indexed && spec.backoff_limit_per_index.is_some();
    let mut status = job.status.clone().unwrap_or_default();
    let mut events: Events = Vec::new();

    // 1. Count the outcome of finished pods that still carry the finalizer.
    let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
    let (mut counted_succeeded, mut counted_failed) = (
        uncounted.succeeded.clone().unwrap_or_default(),
        uncounted.failed.clone().unwrap_or_default(),
    );
    let mut completed = indexes::parse(status.completed_indexes.as_deref(), index_bound);
    let mut failed_indexes = indexes::parse(status.failed_indexes.as_deref(), index_bound);
    let mut release: Vec<&Pod> = Vec::new();
    let mut fail_job: Option<String> = None;
    let (mut new_failures, mut new_successes) = (0u32, 0u32);
    for pod in all.iter().filter(|p| has_tracking_finalizer(p)) {
        let pod_uid = pod.uid().unwrap_or_default();
        if counted_succeeded.contains(&pod_uid) || counted_failed.contains(&pod_uid) {
            release.push(pod);
            continue;
        }
        if pods::phase(pod) == "Succeeded" {
            if let Some(i) = pod_index(pod).filter(|i| indexed && *i < index_bound) {
                if !failed_indexes.contains(&i) {
                    completed.insert(i);
                }
            }
            counted_succeeded.push(pod_uid);
            new_successes += 1;
            release.push(pod);
        } else if suspended && is_terminating(pod) {
            // Deleted because the Job was suspended: not a failure.
            release.push(pod);
        } else if counts_as_failed(pod, &spec) {
            match failure_action(pod, &spec) {
                PolicyAction::Ignore => {
                    release.push(pod);
                    continue;
                }
                PolicyAction::FailJob(message) => {
                    fail_job.get_or_insert(message);
                }
                PolicyAction::FailIndex => {
                    if let Some(i) = pod_index(pod).filter(|_| per_index) {
                        failed_indexes.insert(i);
                    }
                }
                PolicyAction::Count => {
                    new_failures += 1;
                    if let (true, Some(i)) = (per_index, pod_index(pod)) {
                        let limit = spec.backoff_limit_per_index.unwrap_or_default();
                        if index_failures(&all, i, &spec) > limit && i < index_bound {
                            failed_indexes.insert(i);
                        }
                    }
                }
            }
            counted_failed.push(pod_uid);
            release.push(pod);
        }
    }
    {
        let mut backoffs = state.backoffs.lock();
        let backoff = backoffs.entry(uid.clone()).or_default();
        if new_successes > 0 {
            backoff.failures = 0;
        }
        if new_failures > 0 {
            backoff.failures = backoff.failures.saturating_add(new_failures);
            backoff.last_failure = Some(Instant::now());
        }
    }
    let grew = counted_succeeded.len() != uncounted.succeeded.as_ref().map_or(0, Vec::len)
        || counted_failed.len() != uncounted.failed.as_ref().map_or(0, Vec::len);
    if indexed {
        status.completed_indexes = indexes::format(&completed);
        if per_index {
            status.failed_indexes = Some(indexes::format(&failed_indexes).unwrap_or_default());
        }
    }
    let mut current = (*job).clone();
    if grew {
        uncounted.succeeded = Some(counted_succeeded.clone());
        uncounted.failed = Some(counted_failed.clone());
        status.uncounted_terminated_pods = Some(uncounted);
        current.status = Some(status.clone());
        current = job_api.replace_status(&job.name_any(), &PostParams::default(), &current).await?;
    }
    for pod in &release {
        remove_finalizer(&pod_api, pod).await?;
    }
    let succeeded = status.succeeded.unwrap_or_default() + counted_succeeded.len() as i32;
    status.succeeded = Some(if indexed { completed.len() as i32 } else { succeeded });
    status.failed = Some(status.failed.unwrap_or_default() + counted_failed.len() as i32);
    status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
    let mut active: Vec<&Pod> = all.iter().filter(|p| pods::is_active(p)).collect();
    let released = |p: &Pod| release.iter().any(|r| r.uid() == p.uid());
    let mut terminating = all
        .iter()
        .filter(|p| is_terminating(p) && has_tracking_finalizer(p) && !released(p))
        .count();

    // 2. Start, suspension and resumption.
    if status.start_time.is_none() && !suspended {
        status.start_time = Some(now_time.clone());
    }
    let target = |s: &JobStatus| has_true(s, "FailureTarget") || has_true(s, "SuccessCriteriaMet");
    if suspended && !target(&status) {
        if ensure_condition(
            &mut status,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
            &now_time,
        ) {
            events.push((EventType::Normal, "Suspended", "Job suspended".into()));
        }
    } else if !suspended
        && ensure_condition(
            &mut status,
            "Suspended",
            "False",
            "JobResumed",
            "Job resumed",
            &now_time,
        )
    {
        events.push((EventType::Normal, "Resumed", "Job resumed".into()));
        // The deadline counts from the resumption.
        status.start_time = Some(now_time.clone());
    }

    // 3. Has the Job failed, or succeeded?
    let mut requeue: Option<Duration> = None;
    if !target(&status) {
        let failed = status.failed.unwrap_or_default();
        let deadline = spec
            .active_deadline_seconds
            .filter(|_| !suspended)
            .zip(status.start_time.as_ref())
            .map(|(seconds, start)| instant(start) + chrono::Duration::seconds(seconds));
        let failure = if let Some(message) = fail_job {
            Some(("PodFailurePolicy", message))
        } else if !per_index
            && (failed > spec.backoff_limit.unwrap_or(6)
                || past_backoff_limit_on_failure(&spec, &active))
        {
            Some(("BackoffLimitExceeded", "Job has reached the specified backoff limit".to_owned()))
        } else if per_index
            && spec.max_failed_indexes.is_some_and(|max| failed_indexes.len() as i32 > max)
        {
            Some((
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes".to_owned(),
            ))
        } else if deadline.is_some_and(|d| d <= now) {
            Some(("DeadlineExceeded", "Job was active longer than specified deadline".to_owned()))
        } else if per_index
            && !failed_indexes.is_empty()
            && (completed.len() + failed_indexes.len()) as i32 >= index_bound
        {
            Some(("FailedIndexes", "Job has failed indexes".to_owned()))
        } else {
            None
        };
        if let Some(d) = deadline.filter(|d| *d > now) {
            requeue = (d - now).to_std().ok().map(|d| d + Duration::from_millis(100));
        }
        let success = if failure.is_some() {
            None
        } else if let Some(rule) =
            indexed.then(|| success_rule(&spec, index_bound, &completed)).flatten()
        {
            Some(("SuccessPolicy", format!("Matched rules at index {rule}")))
        } else {
            let done = match (indexed, completions) {
                (true, _) => completed.len() as i32 >= index_bound,
                (false, Some(c)) => status.succeeded.unwrap_or_default() >= c,
                (false, None) => status.succeeded.unwrap_or_default() > 0 && active.is_empty(),
            };
            done.then(|| {
                ("CompletionsReached", "Reached expected number of succeeded pods".to_owned())
            })
        };
        if let Some((reason, message)) = failure {
            ensure_condition(&mut status, "FailureTarget", "True", reason, &message, &now_time);
        } else if let Some((reason, message)) = success {
            ensure_condition(
                &mut status,
                "SuccessCriteriaMet",
                "True",
                reason,
                &message,
                &now_time,
            );
        }
    }

    // 4. Pods: delete what must go, create what is missing.
    let mut refusal: Option<Error> = None;
    let mut created = 0i32;
    if target(&status) || suspended {
        for pod in std::mem::take(&mut active) {
            delete_pod(&pod_api, pod, &mut events).await?;
            terminating += 1;
        }
        if suspended && terminating == 0 {
            status.start_time = None;
        }
    } else {
        let parallelism = spec.parallelism.unwrap_or(1).max(0);
        let mut to_delete: Vec<&Pod> = Vec::new();
        let mut to_create: Vec<Option<i32>> = Vec::new();
        if indexed {
            let mut seen = BTreeSet::new();
            active.retain(|p| match pod_index(p) {
                Some(i)
                    if i < index_bound
                        && !completed.contains(&i)
                        && !failed_indexes.contains(&i)
                        && seen.insert(i) =>
                {
                    true
                }
                _ => {
                    to_delete.push(p);
                    false
                }
            });
            let room = (parallelism as usize).saturating_sub(active.len());
            let pending = (0..index_bound).filter(|i| {
                !completed.contains(i) && !failed_indexes.contains(i) && !seen.contains(i)
            });
            to_create.extend(pending.take(room).map(Some));
        } else {
            let succeeded = status.succeeded.unwrap_or_default();
            let want = match completions {
                None if succeeded > 0 => active.len() as i32,
                None => parallelism,
                Some(c) => (c - succeeded).clamp(0, parallelism),
            };
            let surplus = (active.len() as i32 - want).max(0) as usize;
            // Pods not yet ready go first.
            active.sort_by_key(|p| pods::is_ready(p));
            to_delete.extend(active.drain(..surplus));
            let mut missing = want - active.len() as i32;
            if only_replace_failed(&spec) {
                missing -= terminating as i32;
            }
            to_create.extend((0..missing.max(0)).map(|_| None));
        }
        for pod in to_delete {
            delete_pod(&pod_api, pod, &mut events).await?;
            terminating += 1;
        }
        let wait = backoff_remaining(&state, &uid);
        if !to_create.is_empty() && !wait.is_zero() {
            requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
        } else {
            for index in to_create {
                let failures = index.map_or(0, |i| index_failures(&all, i, &spec));
                let Some(pod) = new_pod(&job, &spec, index, failures) else {
                    return Err(Error::Invalid("a Job without name or uid".into()));
                };
                match pod_api.create(&PostParams::default(), &pod).await {
                    Ok(made) => {
                        state.backoffs.lock().entry(uid.clone()).or_default().refused = 0;
                        let message = format!("Created pod: {}", made.name_any());
                        events.push((EventType::Normal, "SuccessfulCreate", message));
                        created += 1;
                    }
                    Err(error) => {
                        let message = match &error {
                            kube::Error::Api(e) => e.message.clone(),
                            other => other.to_string(),
                        };
                        let message = format!("Error creating: {message}");
                        events.push((EventType::Warning, "FailedCreate", message));
                        let mut backoffs = state.backoffs.lock();
                        let b = backoffs.entry(uid.clone()).or_default();
                        b.refused = b.refused.saturating_add(1);
                        refusal = Some(error.into());
                        break;
                    }
                }
            }
        }
    }
    status.active = Some(active.len() as i32 + created);
    status.ready = Some(active.iter().filter(|p| pods::is_ready(p)).count() as i32);
    status.terminating = Some(terminating as i32);

    // 5. The terminal condition, once nothing of the Job runs any more.
    if active.is_empty() && created == 0 && terminating == 0 {
        let target =
            |type_: &str| condition(&status, type_).filter(|c| c.status == "True").cloned();
        if let Some(c) = target("FailureTarget") {
            let (reason, message) = (c.reason.unwrap_or_default(), c.message.unwrap_or_default());
            ensure_condition(&mut status, "Failed", "True", &reason, &message, &now_time);
            let reason = failure_event_reason(&reason);
            events.push((EventType::Warning, reason, message));
        } else if let Some(c) = target("SuccessCriteriaMet") {
            let (reason, message) = (c.reason.unwrap_or_default(), c.message.unwrap_or_default());
            ensure_condition(&mut status, "Complete", "True", &reason, &message, &now_time);
            status.completion_time = Some(now_time.clone());
            events.push((EventType::Normal, "Completed", "Job completed".into()));
        }
    }

    // 6. Write the status, then tell.
    let mut written = Ok(());
    if current.status.as_ref() != Some(&status) {
        current.status = Some(status);
        written = job_api
            .replace_status(&job.name_any(), &PostParams::default(), &current)
            .await
            .map(drop);
    }
    let target = job_target(&job);
    for (kind, reason, message) in events {
        if let Err(error) = state.recorder.record(&target, kind, reason, &message).await {
            tracing::debug!(%error, "recording a job event failed");
        }
    }
    // Pods made or deleted are told even when the status write met a conflict.
    written?;
    if let Some(error) = refusal {
        return Err(error);
    }
    let key = crate::wakeup_key("job", &namespace, &job.name_any());
    state.context.wakeups.after(key, requeue);
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// The reason of the Event told when a Job fails for `reason` (its condition's reason).
fn failure_event_reason(reason: &str) -> &'static str {
    match reason {
        "BackoffLimitExceeded" => "BackoffLimitExceeded",
        "DeadlineExceeded" => "DeadlineExceeded",
        "PodFailurePolicy" => "PodFailurePolicy",
        "MaxFailedIndexesExceeded" => "MaxFailedIndexesExceeded",
        "FailedIndexes" => "FailedIndexes",
        _ => "Failed",
    }
}

/// How long the Job's next pod must still wait after its recent failures.
fn backoff_remaining(state: &State, uid: &str) -> Duration {
    let backoff = state.backoffs.lock().get(uid).copied().unwrap_or_default();
    let Some(last) = backoff.last_failure.filter(|_| backoff.failures > 0) else {
        return Duration::ZERO;
    };
    let doublings = backoff.failures.saturating_sub(1).min(30);
    let wait = state.config.backoff_base.saturating_mul(2u32.saturating_pow(doublings));
    wait.min(state.config.backoff_max).saturating_sub(last.elapsed())
}

/// Delete one of the Job's pods (`SuccessfulDelete`); one already gone is fine.
async fn delete_pod(api: &Api<Pod>, pod: &Pod, events: &mut Events) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
        ..DeleteParams::default()
    };
    match api.delete(&pod.name_any(), &params).await {
        Ok(_) => {
            events.push((
                EventType::Normal,
                "SuccessfulDelete",
                format!("Deleted pod: {}", pod.name_any()),
            ));
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
