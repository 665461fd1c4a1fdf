//! When the controllers stop (an idle tenant closing), they say when they are next due to act
//! by the clock alone, so that they can be started again in time.

mod common;

use chrono::{Datelike, TimeZone, Utc};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::sync::watch;

use common::Cluster;

fn template() -> serde_json::Value {
    json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}})
}

#[tokio::test]
async fn stopped_controllers_tell_the_next_cronjob_schedule_and_job_deadline() {
    let cluster = Cluster::without_controllers();
    let (stop, rx) = watch::channel(false);
    let controllers = tokio::spawn(carrel_controllers::run(cluster.client.clone(), rx));

    // Nothing due by the clock yet.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let cronjobs: Api<CronJob> = Api::namespaced(cluster.client.clone(), "default");
    let yearly: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "new-year"},
        "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": template()}}},
    }))
    .unwrap();
    cronjobs.create(&PostParams::default(), &yearly).await.expect("create cronjob");
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let deadline: Job = serde_json::from_value(json!({
        "metadata": {"name": "bounded"},
        "spec": {"activeDeadlineSeconds": 3600, "template": template()},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &deadline).await.expect("create job");
    let created = Utc::now();
    // Both reconciled: the Job has started, the CronJob has had its first look.
    common::until("the job started", || {
        let jobs = jobs.clone();
        async move { jobs.get("bounded").await.ok()?.status?.start_time }
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    stop.send(true).unwrap();
    let next = controllers.await.expect("controllers ended").expect("a wake-up is due");
    // The Job's deadline, an hour on, comes before the new year unless that is within the hour.
    let new_year = Utc.with_ymd_and_hms(created.year() + 1, 1, 1, 0, 0, 0).unwrap();
    let hour = created + chrono::Duration::seconds(3600);
    let expected = new_year.min(hour);
    let off = (next - expected).num_milliseconds().abs();
    assert!(off < 5_000, "next wake-up {next}, expected about {expected}");
}

#[tokio::test]
async fn controllers_with_nothing_due_tell_no_wake_up() {
    let cluster = Cluster::without_controllers();
    let (stop, rx) = watch::channel(false);
    let controllers = tokio::spawn(carrel_controllers::run(cluster.client.clone(), rx));
    let cronjobs: Api<CronJob> = Api::namespaced(cluster.client.clone(), "default");
    let suspended: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "paused"},
        "spec": {"schedule": "* * * * *", "suspend": true, "jobTemplate": {"spec": {"template": template()}}},
    }))
    .unwrap();
    cronjobs.create(&PostParams::default(), &suspended).await.expect("create cronjob");
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    stop.send(true).unwrap();
    assert_eq!(
        controllers.await.expect("controllers ended"),
        None,
        "a suspended CronJob is due never"
    );
}
