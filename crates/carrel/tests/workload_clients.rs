//! The client libraries that judge compatibility, with a tenant's workloads: the official Python
//! client (apps and batch: create, watch for completion, delete) and a kube-rs program waiting for
//! a Job to complete.

mod common;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};

use common::{create, kube_client, python, Up};

#[test]
fn the_python_client_runs_a_job_and_a_deployment_to_the_end() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let kubeconfig = create(&up, "team-py", &[]);
    python("workloads.py", &kubeconfig);
    up.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kube_rs_program_waits_for_a_job_to_complete() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let kubeconfig = create(&up, "team-rs", &[]);
    let client = kube_client(&kubeconfig).await;
    let jobs: Api<Job> = Api::default_namespaced(client);
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "rs-job"},
        "spec": {"template": {
            "metadata": {"annotations": {"sim.carrel.dev/run-seconds": "0.2"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
        }},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let done = await_condition(jobs.clone(), "rs-job", conditions::is_job_completed());
    let done = tokio::time::timeout(Duration::from_secs(60), done).await.unwrap().unwrap();
    let status = done.and_then(|j| j.status).expect("the Job's status");
    assert_eq!(status.succeeded, Some(1));
    up.stop();
}
