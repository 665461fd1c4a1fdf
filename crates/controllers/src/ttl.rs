//! The TTL-after-finished controller (kube-controller-manager's `ttl-after-finished-controller`,
//! `pkg/controller/ttlafterfinished`): a finished Job with `ttlSecondsAfterFinished` is deleted
//! (propagation `Foreground`, its pods first) that many seconds after it finished, the time of its `Complete` or
//! `Failed` condition.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use crate::job::{finished_condition, instant};
use crate::{Context, Error};

/// The component the controller is known as.
pub const COMPONENT: &str = "ttl-after-finished-controller";

/// Run the TTL-after-finished controller until `stop` is true.
pub async fn run(context: Arc<Context>, stop: watch::Receiver<bool>) {
    let api = Api::<Job>::all(context.client.clone());
    Controller::new(api, watcher::Config::default())
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, context)
        .for_each(|_| async {})
        .await;
}

fn error_policy(_job: Arc<Job>, error: &Error, _context: Arc<Context>) -> Action {
    tracing::debug!(%error, "ttl-after-finished sync failed");
    Action::requeue(Duration::from_secs(1))
}

/// When `job` expires: its finish time plus its TTL (`None` when it has no TTL or has not
/// finished).
pub fn expires_at(job: &Job) -> Option<DateTime<Utc>> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let finished = finished_condition(job)?;
    let at = finished.last_transition_time.as_ref().map(instant)?;
    Some(at + chrono::Duration::seconds(ttl.into()))
}

async fn reconcile(job: Arc<Job>, context: Arc<Context>) -> Result<Action, Error> {
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let key = crate::wakeup_key(
        "ttl-after-finished",
        &job.namespace().unwrap_or_default(),
        &job.name_any(),
    );
    let Some(at) = expires_at(&job) else {
        context.wakeups.after(key, None);
        return Ok(Action::await_change());
    };
    let now = Utc::now();
    if at > now {
        let wait = (at - now).to_std().unwrap_or_default() + Duration::from_millis(100);
        context.wakeups.after(key, Some(wait));
        return Ok(Action::requeue(wait));
    }
    context.wakeups.after(key, None);
    let api: Api<Job> =
        Api::namespaced(context.client.clone(), &job.namespace().unwrap_or_default());
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.uid(),
            resource_version: job.resource_version(),
        }),
        ..DeleteParams::foreground()
    };
    tracing::debug!(job = %job.name_any(), "deleting an expired job");
    match api.delete(&job.name_any(), &params).await {
        Ok(_) => Ok(Action::await_change()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_expires_its_ttl_after_its_finish() {
        let job = |ttl: Option<i32>, conditions: serde_json::Value| -> Job {
            serde_json::from_value(json!({
                "metadata": {"name": "j"},
                "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        let done = json!([{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
        let at = expires_at(&job(Some(30), done.clone())).unwrap();
        assert_eq!(at.to_rfc3339(), "2026-01-01T00:00:30+00:00");
        assert_eq!(expires_at(&job(None, done)), None);
        let running = json!([{"type": "SuccessCriteriaMet", "status": "True"}]);
        assert_eq!(expires_at(&job(Some(0), running)), None);
    }
}
