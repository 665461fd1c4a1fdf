//! The Job, TTL-after-finished and CronJob controllers against an in-process API.

mod common;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use carrel_controllers::{gc, job, ttl, Context};
use common::{pods, set_pod, until, Cluster};

/// A cluster with the batch controllers running, pod backoff made tiny.
struct Batch {
    cluster: Cluster,
    _stop: watch::Sender<bool>,
}

impl Batch {
    fn start() -> Batch {
        let cluster = Cluster::without_controllers();
        let (stop, rx) = watch::channel(false);
        let context = Context::new(cluster.client.clone());
        let config = job::Config {
            backoff_base: Duration::from_millis(10),
            backoff_max: Duration::from_millis(100),
        };
        tokio::spawn(job::run(context.clone(), config, rx.clone()));
        tokio::spawn(ttl::run(context.clone(), rx.clone()));
        // Expired Jobs are deleted in the foreground: the collector finishes that.
        tokio::spawn(gc::run(context, rx));
        Batch { cluster, _stop: stop }
    }

    fn client(&self) -> &Client {
        &self.cluster.client
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        let _ = self._stop.send(true);
    }
}

fn jobs(client: &Client) -> Api<Job> {
    Api::namespaced(client.clone(), "default")
}

async fn create_job(client: &Client, name: &str, spec: serde_json::Value) -> Job {
    let mut spec = spec;
    spec["template"] = json!({"spec": {"restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox"}]}});
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    jobs(client).create(&PostParams::default(), &job).await.expect("create job")
}

/// The pods of Job `name` that are not deleting, oldest name first.
async fn job_pods(client: &Client, name: &str) -> Vec<Pod> {
    let mut found = pods(client, "default", &format!("batch.kubernetes.io/job-name={name}")).await;
    found.sort_by_key(|p| p.name_any());
    found
}

async fn live_pods(client: &Client, name: &str) -> Vec<Pod> {
    let all = job_pods(client, name).await;
    all.into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none() && carrel_controllers::pods::is_active(p)
        })
        .collect()
}

fn condition(job: &Job, type_: &str) -> Option<(String, String, String)> {
    let c = job.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

async fn until_condition(client: &Client, name: &str, type_: &str) -> Job {
    until(&format!("job {name} {type_}"), || async {
        let job = jobs(client).get(name).await.ok()?;
        condition(&job, type_).filter(|c| c.0 == "True").map(|_| job)
    })
    .await
}

async fn events(client: &Client, object: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = api.list(&ListParams::default()).await.expect("events").items;
    list.into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(object))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

async fn until_event(client: &Client, object: &str, reason: &str) -> String {
    until(&format!("event {reason} on {object}"), || async {
        events(client, object).await.into_iter().find(|(r, _)| r == reason).map(|(_, m)| m)
    })
    .await
}

/// What a kubelet writes when container `main` exits with `code`.
async fn fail_pod(client: &Client, pod: &str, code: i32) {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let status = json!({"status": {"phase": "Failed", "containerStatuses": [{
        "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code}}}]}});
    api.patch_status(pod, &PatchParams::default(), &Patch::Merge(&status)).await.expect("fail pod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_completions_two_at_a_time_and_completes() {
    let batch = Batch::start();
    let client = batch.client();
    let made = create_job(client, "work", json!({"completions": 3, "parallelism": 2})).await;
    let uid = made.uid().unwrap();

    let first = until("two pods", || async {
        let live = live_pods(client, "work").await;
        (live.len() == 2).then_some(live)
    })
    .await;
    for pod in &first {
        let labels = pod.labels();
        assert_eq!(labels.get("batch.kubernetes.io/controller-uid"), Some(&uid));
        assert_eq!(labels.get("controller-uid"), Some(&uid));
        assert_eq!(labels.get("batch.kubernetes.io/job-name").map(String::as_str), Some("work"));
        assert_eq!(labels.get("job-name").map(String::as_str), Some("work"));
        assert!(pod.name_any().starts_with("work-"));
        assert!(pod.finalizers().iter().any(|f| f == "batch.kubernetes.io/job-tracking"));
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", uid.as_str()));
        assert_eq!(owner.controller, Some(true));
    }
    until("active 2", || async {
        let job = jobs(client).get("work").await.ok()?;
        (job.status?.active == Some(2)).then_some(())
    })
    .await;

    set_pod(client, "default", &first[0].name_any(), "Succeeded", false).await;
    // The finished pod is counted, its finalizer removed, and one more pod starts (2 running).
    until("first success counted", || async {
        let job = jobs(client).get("work").await.ok()?;
        let status = job.status?;
        let pod = job_pods(client, "work")
            .await
            .into_iter()
            .find(|p| p.name_any() == first[0].name_any())?;
        (status.succeeded == Some(1) && status.active == Some(2) && pod.finalizers().is_empty())
            .then_some(())
    })
    .await;
    assert_eq!(live_pods(client, "work").await.len(), 2, "never more than parallelism");
    for pod in live_pods(client, "work").await {
        set_pod(client, "default", &pod.name_any(), "Succeeded", false).await;
    }
    let job = until_condition(client, "work", "Complete").await;
    let status = job.status.clone().unwrap();
    assert_eq!((status.succeeded, status.failed, status.active), (Some(3), Some(0), Some(0)));
    assert!(status.completion_time.is_some() && status.start_time.is_some());
    let criteria = condition(&job, "SuccessCriteriaMet").unwrap();
    assert_eq!(criteria.0, "True");
    assert_eq!(criteria.1, "CompletionsReached");
    assert_eq!(condition(&job, "Complete").unwrap().1, "CompletionsReached");
    assert_eq!(job_pods(client, "work").await.len(), 3, "exactly three pods were made");
    assert_eq!(until_event(client, "work", "Completed").await, "Job completed");
    let created = events(client, "work").await;
    assert!(created
        .iter()
        .any(|(r, m)| r == "SuccessfulCreate" && m.starts_with("Created pod: work-")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_stops_at_its_backoff_limit() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "flaky", json!({"backoffLimit": 1})).await;
    for round in 0..2 {
        let pod = until(&format!("pod {round}"), || async {
            live_pods(client, "flaky").await.into_iter().next()
        })
        .await;
        fail_pod(client, &pod.name_any(), 1).await;
    }
    let job = until_condition(client, "flaky", "Failed").await;
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed.1, "BackoffLimitExceeded");
    assert_eq!(failed.2, "Job has reached the specified backoff limit");
    assert_eq!(condition(&job, "FailureTarget").unwrap().1, "BackoffLimitExceeded");
    assert_eq!(job.status.as_ref().unwrap().failed, Some(2));
    assert_eq!(job_pods(client, "flaky").await.len(), 2, "no pod after the limit");
    let message = until_event(client, "flaky", "BackoffLimitExceeded").await;
    assert_eq!(message, "Job has reached the specified backoff limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_gives_each_pod_its_index() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(
        client,
        "idx",
        json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
    )
    .await;
    let made = until("three indexed pods", || async {
        let live = live_pods(client, "idx").await;
        (live.len() == 3).then_some(live)
    })
    .await;
    let mut seen = Vec::new();
    for pod in &made {
        let index =
            pod.annotations().get("batch.kubernetes.io/job-completion-index").cloned().unwrap();
        assert_eq!(pod.labels().get("batch.kubernetes.io/job-completion-index"), Some(&index));
        assert!(pod.name_any().starts_with(&format!("idx-{index}-")), "{}", pod.name_any());
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.hostname.as_deref(), Some(format!("idx-{index}").as_str()));
        let env = spec.containers[0].env.as_ref().unwrap();
        let var = env.iter().find(|v| v.name == "JOB_COMPLETION_INDEX").unwrap();
        let path = &var.value_from.as_ref().unwrap().field_ref.as_ref().unwrap().field_path;
        assert_eq!(path, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);
    let by_index = |i: &str| {
        made.iter()
            .find(|p| {
                p.annotations().get("batch.kubernetes.io/job-completion-index").map(String::as_str)
                    == Some(i)
            })
            .unwrap()
            .name_any()
    };
    set_pod(client, "default", &by_index("0"), "Succeeded", false).await;
    set_pod(client, "default", &by_index("2"), "Succeeded", false).await;
    until("indexes 0,2 completed", || async {
        let status = jobs(client).get("idx").await.ok()?.status?;
        (status.completed_indexes.as_deref() == Some("0,2") && status.succeeded == Some(2))
            .then_some(())
    })
    .await;
    set_pod(client, "default", &by_index("1"), "Succeeded", false).await;
    let job = until_condition(client, "idx", "Complete").await;
    assert_eq!(job.status.unwrap().completed_indexes.as_deref(), Some("0-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_runs_no_pods_until_resumed() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "held", json!({"suspend": true, "parallelism": 2, "completions": 2})).await;
    let job = until_condition(client, "held", "Suspended").await;
    let suspended = condition(&job, "Suspended").unwrap();
    assert_eq!((suspended.1.as_str(), suspended.2.as_str()), ("JobSuspended", "Job suspended"));
    assert!(job_pods(client, "held").await.is_empty());
    assert!(job.status.unwrap().start_time.is_none());

    let resume = json!({"spec": {"suspend": false}});
    jobs(client).patch("held", &PatchParams::default(), &Patch::Merge(&resume)).await.unwrap();
    until("two pods after resume", || async {
        (live_pods(client, "held").await.len() == 2).then_some(())
    })
    .await;
    let job = until("resumed condition", || async {
        let job = jobs(client).get("held").await.ok()?;
        condition(&job, "Suspended").filter(|c| c.0 == "False").map(|_| job)
    })
    .await;
    assert_eq!(condition(&job, "Suspended").unwrap().1, "JobResumed");
    assert!(job.status.unwrap().start_time.is_some());
    until_event(client, "held", "Resumed").await;

    // Suspending again deletes the running pods, without counting them as failures.
    let suspend = json!({"spec": {"suspend": true}});
    jobs(client).patch("held", &PatchParams::default(), &Patch::Merge(&suspend)).await.unwrap();
    until("pods gone on suspend", || async {
        job_pods(client, "held").await.is_empty().then_some(())
    })
    .await;
    let job = until_condition(client, "held", "Suspended").await;
    assert_eq!(job.status.unwrap().failed.unwrap_or_default(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_active_deadline_fails_and_its_pods_go() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "late", json!({"activeDeadlineSeconds": 1})).await;
    until("a pod", || async { live_pods(client, "late").await.into_iter().next() }).await;
    let job = until_condition(client, "late", "Failed").await;
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(
        (failed.1.as_str(), failed.2.as_str()),
        ("DeadlineExceeded", "Job was active longer than specified deadline")
    );
    assert!(job_pods(client, "late").await.is_empty(), "its pod deleted and released");
    until_event(client, "late", "DeadlineExceeded").await;
    until_event(client, "late", "SuccessfulDelete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_failure_policy_fails_the_job_on_an_exit_code() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "strict", json!({"backoffLimit": 6, "podFailurePolicy": {"rules": [
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
    ]}}))
    .await;
    let pod =
        until("a pod", || async { live_pods(client, "strict").await.into_iter().next() }).await;
    fail_pod(client, &pod.name_any(), 3).await;
    // An ignored failure is not counted, and the pod is replaced.
    let second = until("a replacement", || async {
        live_pods(client, "strict").await.into_iter().find(|p| p.name_any() != pod.name_any())
    })
    .await;
    fail_pod(client, &second.name_any(), 42).await;
    let job = until_condition(client, "strict", "Failed").await;
    let failed = condition(&job, "Failed").unwrap();
    assert_eq!(failed.1, "PodFailurePolicy");
    let expected = format!(
        "Container main for pod default/{} failed with exit code 42 matching FailJob rule at index 1",
        second.name_any()
    );
    assert_eq!(failed.2, expected);
    assert_eq!(job.status.unwrap().failed, Some(1), "the ignored failure is not counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_deleted_early_is_still_counted() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "quick", json!({"completions": 1})).await;
    let pod =
        until("a pod", || async { live_pods(client, "quick").await.into_iter().next() }).await;
    // It succeeds and is deleted at once: the finalizer keeps it until it is counted.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    set_pod(client, "default", &pod.name_any(), "Succeeded", false).await;
    pods_api.delete(&pod.name_any(), &DeleteParams::default()).await.unwrap();
    let job = until_condition(client, "quick", "Complete").await;
    assert_eq!(job.status.unwrap().succeeded, Some(1));
    until("the pod released and gone", || async {
        pods_api.get_opt(&pod.name_any()).await.ok()?.is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_with_ttl_zero_is_deleted() {
    let batch = Batch::start();
    let client = batch.client();
    create_job(client, "brief", json!({"ttlSecondsAfterFinished": 0})).await;
    let pod =
        until("a pod", || async { live_pods(client, "brief").await.into_iter().next() }).await;
    set_pod(client, "default", &pod.name_any(), "Succeeded", false).await;
    until("the job deleted", || async {
        jobs(client).get_opt("brief").await.ok()?.is_none().then_some(())
    })
    .await;
    // A foreground delete: its pod went before it, its finalizer released.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(pods_api.get_opt(&pod.name_any()).await.expect("get").is_none());
}

mod cron {
    use super::*;
    use std::sync::{Arc, Mutex};

    use chrono::{DateTime, Timelike, Utc};
    use k8s_openapi::api::batch::v1::CronJob;

    use carrel_controllers::cronjob;

    /// A cluster with the CronJob controller on a clock the test moves.
    struct Cron {
        cluster: Cluster,
        now: Arc<Mutex<DateTime<Utc>>>,
        _stop: watch::Sender<bool>,
    }

    impl Cron {
        fn start() -> Cron {
            let cluster = Cluster::without_controllers();
            let (stop, rx) = watch::channel(false);
            let now = Arc::new(Mutex::new(Utc::now()));
            let clock = now.clone();
            let config = cronjob::Config { clock: Arc::new(move || *clock.lock().unwrap()) };
            tokio::spawn(cronjob::run(Context::new(cluster.client.clone()), config, rx));
            Cron { cluster, now, _stop: stop }
        }

        fn client(&self) -> &Client {
            &self.cluster.client
        }

        /// Move the clock to `at`, and have the CronJob `name` looked at again.
        async fn at(&self, name: &str, at: DateTime<Utc>) {
            *self.now.lock().unwrap() = at;
            let nudge = json!({"metadata": {"annotations": {"test/now": at.to_rfc3339()}}});
            cronjobs(self.client())
                .patch(name, &PatchParams::default(), &Patch::Merge(&nudge))
                .await
                .unwrap();
        }
    }

    impl Drop for Cron {
        fn drop(&mut self) {
            let _ = self._stop.send(true);
        }
    }

    fn cronjobs(client: &Client) -> Api<CronJob> {
        Api::namespaced(client.clone(), "default")
    }

    async fn create_cronjob(client: &Client, name: &str, spec: serde_json::Value) -> CronJob {
        let mut spec = spec;
        spec["jobTemplate"] = json!({"metadata": {"labels": {"app": name}}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}});
        let cj: CronJob = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        cronjobs(client).create(&PostParams::default(), &cj).await.expect("create cronjob")
    }

    /// The start of the minute after `t`, plus `seconds`.
    fn next_minute(t: DateTime<Utc>, seconds: i64) -> DateTime<Utc> {
        let floor = t.with_second(0).unwrap().with_nanosecond(0).unwrap();
        floor + chrono::Duration::seconds(60 + seconds)
    }

    async fn owned_jobs(client: &Client, uid: &str) -> Vec<Job> {
        let mut found: Vec<Job> = jobs(client)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
            .collect();
        found.sort_by_key(|j| j.name_any());
        found
    }

    /// What the Job controller would write when the Job finished (`type_`: Complete or Failed).
    async fn finish(client: &Client, job: &str, type_: &str, at: DateTime<Utc>) {
        let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let mut status = json!({"status": {"startTime": stamp, "conditions": [
            {"type": type_, "status": "True", "lastTransitionTime": stamp}]}});
        if type_ == "Complete" {
            status["status"]["completionTime"] = json!(stamp);
        }
        jobs(client)
            .patch_status(job, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }

    async fn until_active(client: &Client, name: &str, wanted: &[String]) -> CronJob {
        until(&format!("{name} active {wanted:?}"), || async {
            let cj = cronjobs(client).get(name).await.ok()?;
            let active: Vec<String> = cj
                .status
                .as_ref()?
                .active
                .iter()
                .flatten()
                .filter_map(|r| r.name.clone())
                .collect();
            (active == wanted).then_some(cj)
        })
        .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cronjob_makes_its_job_at_the_schedule_and_forbid_skips_while_one_runs() {
        let cron = Cron::start();
        let client = cron.client();
        let cj = create_cronjob(
            client,
            "tick",
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Forbid"}),
        )
        .await;
        let uid = cj.uid().unwrap();
        let created = cj.metadata.creation_timestamp.as_ref().unwrap().0.as_second();
        let created = DateTime::from_timestamp(created, 0).unwrap();
        // Before the first schedule time: nothing.
        cron.at("tick", created).await;
        let first_at = next_minute(created, 0);
        let first = format!("tick-{}", first_at.timestamp() / 60);
        cron.at("tick", first_at + chrono::Duration::seconds(5)).await;
        let status =
            until_active(client, "tick", std::slice::from_ref(&first)).await.status.unwrap();
        assert_eq!(status.last_schedule_time.map(|t| t.0.as_second()), Some(first_at.timestamp()));
        let made = jobs(client).get(&first).await.unwrap();
        assert_eq!(made.labels().get("app").map(String::as_str), Some("tick"));
        let stamp = first_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        assert_eq!(
            made.annotations().get("batch.kubernetes.io/cronjob-scheduled-timestamp"),
            Some(&stamp)
        );
        let owner = &made.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("CronJob", uid.as_str(), Some(true))
        );
        assert_eq!(
            until_event(client, "tick", "SuccessfulCreate").await,
            format!("Created job {first}")
        );

        // A Job made by hand from the CronJob is neither active nor a schedule.
        let manual: Job = serde_json::from_value(json!({"metadata": {"name": "tick-manual",
            "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "tick", "uid": uid, "controller": true}]},
            "spec": made.spec.clone()})).unwrap();
        jobs(client).create(&PostParams::default(), &manual).await.unwrap();

        // Forbid: the next minute's Job waits while the first runs.
        let second_at = first_at + chrono::Duration::seconds(60);
        cron.at("tick", second_at + chrono::Duration::seconds(5)).await;
        until_event(client, "tick", "JobAlreadyActive").await;
        assert_eq!(owned_jobs(client, &uid).await.len(), 2, "the first and the manual one");

        // Once it completes, it leaves the active list, and the schedule it held back runs.
        finish(client, &first, "Complete", second_at).await;
        let second = format!("tick-{}", second_at.timestamp() / 60);
        let cj = until_active(client, "tick", std::slice::from_ref(&second)).await;
        let status = cj.status.unwrap();
        assert_eq!(
            status.last_successful_time.map(|t| t.0.as_second()),
            Some(second_at.timestamp())
        );
        assert_eq!(status.last_schedule_time.map(|t| t.0.as_second()), Some(second_at.timestamp()));
        let message = until_event(client, "tick", "SawCompletedJob").await;
        assert_eq!(message, format!("Saw completed job: {first}, condition: Complete"));
        assert!(events(client, "tick").await.iter().all(|(r, _)| r != "UnexpectedJob"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replace_deletes_the_running_job_and_history_limits_prune() {
        let cron = Cron::start();
        let client = cron.client();
        let cj = create_cronjob(
            client,
            "swap",
            json!({"schedule": "* * * * *",
            "concurrencyPolicy": "Replace", "successfulJobsHistoryLimit": 1}),
        )
        .await;
        let uid = cj.uid().unwrap();
        let created =
            DateTime::from_timestamp(cj.metadata.creation_timestamp.unwrap().0.as_second(), 0)
                .unwrap();
        let t1 = next_minute(created, 0);
        let name = |t: DateTime<Utc>| format!("swap-{}", t.timestamp() / 60);
        cron.at("swap", t1 + chrono::Duration::seconds(1)).await;
        until_active(client, "swap", &[name(t1)]).await;
        let t2 = t1 + chrono::Duration::seconds(60);
        cron.at("swap", t2 + chrono::Duration::seconds(1)).await;
        until_active(client, "swap", &[name(t2)]).await;
        assert_eq!(
            until_event(client, "swap", "SuccessfulDelete").await,
            format!("Deleted job {}", name(t1))
        );
        until("the replaced job gone", || async {
            jobs(client).get_opt(&name(t1)).await.ok()?.is_none().then_some(())
        })
        .await;

        // Two completed Jobs, a limit of one: the older goes.
        finish(client, &name(t2), "Complete", t2).await;
        until_active(client, "swap", &[]).await;
        let t3 = t2 + chrono::Duration::seconds(60);
        cron.at("swap", t3 + chrono::Duration::seconds(1)).await;
        until_active(client, "swap", &[name(t3)]).await;
        finish(client, &name(t3), "Complete", t3).await;
        until("only the newest completed job kept", || async {
            let left: Vec<String> =
                owned_jobs(client, &uid).await.iter().map(|j| j.name_any()).collect();
            (left == [name(t3)]).then_some(())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missed_schedule_past_its_starting_deadline_is_skipped() {
        let cron = Cron::start();
        let client = cron.client();
        let cj = create_cronjob(
            client,
            "late",
            json!({"schedule": "*/5 * * * *", "startingDeadlineSeconds": 10}),
        )
        .await;
        let uid = cj.uid().unwrap();
        let created =
            DateTime::from_timestamp(cj.metadata.creation_timestamp.unwrap().0.as_second(), 0)
                .unwrap();
        let minute = created.with_second(0).unwrap().with_nanosecond(0).unwrap();
        let slot = (0..6)
            .map(|m| minute + chrono::Duration::minutes(m))
            .find(|t| *t > created && t.minute() % 5 == 0)
            .unwrap();
        // 30 s late with a 10 s deadline: that schedule is not run; the next one is.
        cron.at("late", slot + chrono::Duration::seconds(30)).await;
        let next = slot + chrono::Duration::minutes(5);
        cron.at("late", next + chrono::Duration::seconds(5)).await;
        let name = format!("late-{}", next.timestamp() / 60);
        until_active(client, "late", std::slice::from_ref(&name)).await;
        let made: Vec<String> =
            owned_jobs(client, &uid).await.iter().map(|j| j.name_any()).collect();
        assert_eq!(made, [name]);
    }
}
