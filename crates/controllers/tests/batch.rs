//! The Job, TTL-after-finished and CronJob controllers against an in-process API.

mod common;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use carrel_controllers::{job, ttl, Context};
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
        tokio::spawn(ttl::run(context, rx));
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
    // Deleted first: the finalizer keeps it, and it is not counted as a success yet.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods_api.delete(&pod.name_any(), &DeleteParams::default()).await.unwrap();
    set_pod(client, "default", &pod.name_any(), "Succeeded", false).await;
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
    // Its pod keeps no finalizer once its Job is gone.
    until("the pod released", || async {
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pod = pods_api.get_opt(&pod.name_any()).await.ok()??;
        pod.finalizers().is_empty().then_some(())
    })
    .await;
}
