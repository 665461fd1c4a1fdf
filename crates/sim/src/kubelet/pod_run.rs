//! One pod as the simulated kubelet plays it ([`PodRun`]) and the `status` a kubelet writes for it.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::behaviour::{Behaviour, Phase, RestartPolicy};

pub(super) fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(super) fn from_time(t: &Time) -> Option<DateTime<Utc>> {
    let ts = t.0;
    DateTime::from_timestamp(ts.as_second(), u32::try_from(ts.subsec_nanosecond()).ok()?)
}

/// How a container run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Terminated {
    pub(super) exit_code: i32,
    pub(super) started_at: DateTime<Utc>,
    pub(super) finished_at: DateTime<Utc>,
    /// The restart count of the run (its container ID).
    pub(super) run: u32,
}

impl Terminated {
    pub(super) fn json(&self, uid: &str, container: &str) -> Value {
        json!({
            "exitCode": self.exit_code,
            "reason": if self.exit_code == 0 { "Completed" } else { "Error" },
            "startedAt": rfc3339(&self.started_at),
            "finishedAt": rfc3339(&self.finished_at),
            "containerID": container_id(uid, container, self.run),
        })
    }
}

pub(super) fn container_id(uid: &str, container: &str, run: u32) -> String {
    format!("sim://{uid}/{container}/{run}")
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum RunState {
    Running { since: DateTime<Utc> },
    BackOff { delay: Duration },
    Finished { phase: Phase, terminated: Terminated },
}

/// An ephemeral container (`kubectl debug`) of a pod this kubelet plays: started once, never
/// restarted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EphemeralRun {
    pub(super) name: String,
    pub(super) image: String,
    pub(super) started_at: DateTime<Utc>,
    /// How its command ended, once it has.
    pub(super) terminated: Option<Terminated>,
}

impl EphemeralRun {
    /// Its entry in the pod's `ephemeralContainerStatuses`.
    fn status(&self, uid: &str) -> Value {
        let state = match &self.terminated {
            None => json!({"running": {"startedAt": rfc3339(&self.started_at)}}),
            Some(t) => json!({"terminated": t.json(uid, &self.name)}),
        };
        json!({
            "name": self.name,
            "image": self.image,
            "imageID": format!("sim://{}", self.image),
            "containerID": container_id(uid, &self.name, 0),
            "ready": false,
            "restartCount": 0,
            "state": state,
            "lastState": {},
        })
    }
}

/// One pod as this kubelet plays it.
#[derive(Clone, Debug)]
pub(super) struct PodRun {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) uid: String,
    /// (name, image) of each container.
    pub(super) containers: Vec<(String, String)>,
    pub(super) init_containers: Vec<(String, String)>,
    pub(super) policy: RestartPolicy,
    pub(super) behaviour: Behaviour,
    pub(super) pod_ip: Option<String>,
    pub(super) ip_slot: Option<u32>,
    /// Why the kubelet refused the pod (reason, message), for a pod it would not run.
    pub(super) rejected: Option<(String, String)>,
    pub(super) start_time: DateTime<Utc>,
    pub(super) transition: DateTime<Utc>,
    pub(super) state: RunState,
    pub(super) restart_count: u32,
    pub(super) last_terminated: Option<Terminated>,
    pub(super) deadline: Option<Instant>,
    pub(super) status_written: bool,
    /// Its ephemeral containers, in the order they were added.
    pub(super) ephemeral: Vec<EphemeralRun>,
}

impl PodRun {
    pub(super) fn phase(&self) -> Phase {
        match &self.state {
            RunState::Running { .. } | RunState::BackOff { .. } => Phase::Running,
            RunState::Finished { phase, .. } => *phase,
        }
    }

    /// The pod's `status`.
    pub(super) fn status(&self, host_ip: &str) -> Value {
        if let Some((reason, message)) = &self.rejected {
            return json!({"phase": "Failed", "reason": reason, "message": message});
        }
        let ready = matches!(self.state, RunState::Running { .. });
        let finished = matches!(self.state, RunState::Finished { .. });
        let condition = |kind: &str, ok: bool, reason: Option<&str>, at: &DateTime<Utc>| {
            let mut c = json!({
                "type": kind,
                "status": if ok { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": rfc3339(at),
            });
            if let Some(reason) = reason.filter(|_| !ok) {
                c["reason"] = json!(reason);
            }
            c
        };
        let not_ready = if finished { "PodCompleted" } else { "ContainersNotReady" };
        let conditions = json!([
            condition("PodReadyToStartContainers", !finished, None, &self.transition),
            condition("Initialized", true, None, &self.start_time),
            condition("Ready", ready, Some(not_ready), &self.transition),
            condition("ContainersReady", ready, Some(not_ready), &self.transition),
            condition("PodScheduled", true, None, &self.start_time),
        ]);
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, image)| {
                let (state, id) = match &self.state {
                    RunState::Running { since } => (
                        json!({"running": {"startedAt": rfc3339(since)}}),
                        Some(container_id(&self.uid, name, self.restart_count)),
                    ),
                    RunState::BackOff { delay } => (
                        json!({"waiting": {
                            "reason": "CrashLoopBackOff",
                            "message": format!(
                                "back-off {}s restarting failed container={name} pod={}_{}({})",
                                delay.as_secs_f64(), self.name, self.namespace, self.uid
                            ),
                        }}),
                        None,
                    ),
                    RunState::Finished { terminated, .. } => (
                        json!({"terminated": terminated.json(&self.uid, name)}),
                        Some(container_id(&self.uid, name, terminated.run)),
                    ),
                };
                let last = match &self.last_terminated {
                    Some(t) => json!({"terminated": t.json(&self.uid, name)}),
                    None => json!({}),
                };
                let mut status = json!({
                    "name": name,
                    "image": image,
                    "imageID": format!("sim://{image}"),
                    "ready": ready,
                    "started": ready,
                    "restartCount": self.restart_count,
                    "state": state,
                    "lastState": last,
                });
                if let Some(id) = id {
                    status["containerID"] = json!(id);
                }
                status
            })
            .collect();
        let mut status = json!({
            "phase": self.phase().as_str(),
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": rfc3339(&self.start_time),
            "conditions": conditions,
            "containerStatuses": containers,
        });
        if let Some(ip) = &self.pod_ip {
            status["podIP"] = json!(ip);
            status["podIPs"] = json!([{"ip": ip}]);
        }
        if !self.ephemeral.is_empty() {
            let statuses: Vec<Value> = self.ephemeral.iter().map(|e| e.status(&self.uid)).collect();
            status["ephemeralContainerStatuses"] = json!(statuses);
        }
        if !self.init_containers.is_empty() {
            let done = Terminated {
                exit_code: 0,
                started_at: self.start_time,
                finished_at: self.start_time,
                run: 0,
            };
            let init: Vec<Value> = self
                .init_containers
                .iter()
                .map(|(name, image)| {
                    json!({
                        "name": name,
                        "image": image,
                        "imageID": format!("sim://{image}"),
                        "containerID": container_id(&self.uid, name, 0),
                        "ready": true,
                        "started": false,
                        "restartCount": 0,
                        "state": {"terminated": done.json(&self.uid, name)},
                        "lastState": {},
                    })
                })
                .collect();
            status["initContainerStatuses"] = json!(init);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(state: RunState) -> PodRun {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z").unwrap().with_timezone(&Utc);
        PodRun {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u-1".into(),
            containers: vec![("main".into(), "busybox".into())],
            init_containers: vec![("setup".into(), "busybox".into())],
            policy: RestartPolicy::Never,
            behaviour: Behaviour { run_seconds: Some(1.0), exit_code: 3, log: vec![] },
            pod_ip: Some("10.128.3.2".into()),
            ip_slot: Some(2),
            rejected: None,
            start_time: t,
            transition: t,
            state,
            restart_count: 1,
            last_terminated: None,
            deadline: None,
            status_written: false,
            ephemeral: Vec::new(),
        }
    }

    #[test]
    fn running_status_reads_like_a_kubelet() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:06Z").unwrap().with_timezone(&Utc);
        let status = run(RunState::Running { since: t }).status("10.0.3.1");
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["hostIP"], "10.0.3.1");
        assert_eq!(status["podIP"], "10.128.3.2");
        assert_eq!(status["podIPs"], json!([{"ip": "10.128.3.2"}]));
        assert_eq!(status["startTime"], "2025-01-02T03:04:05Z");
        for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            let c = status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == kind);
            assert_eq!(c.unwrap()["status"], "True", "{kind}");
        }
        let c = &status["containerStatuses"][0];
        assert_eq!(c["name"], "main");
        assert_eq!(c["image"], "busybox");
        assert_eq!(c["ready"], true);
        assert_eq!(c["started"], true);
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["containerID"], "sim://u-1/main/1");
        assert_eq!(c["state"]["running"]["startedAt"], "2025-01-02T03:04:06Z");
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }

    #[test]
    fn finished_and_backoff_statuses() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:06Z").unwrap().with_timezone(&Utc);
        let terminated = Terminated { exit_code: 3, started_at: t, finished_at: t, run: 1 };
        let status =
            run(RunState::Finished { phase: Phase::Failed, terminated: terminated.clone() })
                .status("h");
        assert_eq!(status["phase"], "Failed");
        let c = &status["containerStatuses"][0];
        assert_eq!(c["ready"], false);
        assert_eq!(c["state"]["terminated"]["exitCode"], 3);
        assert_eq!(c["state"]["terminated"]["reason"], "Error");
        assert_eq!(c["state"]["terminated"]["finishedAt"], "2025-01-02T03:04:06Z");
        let ready =
            status["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(
            (ready["status"].as_str(), ready["reason"].as_str()),
            (Some("False"), Some("PodCompleted"))
        );

        let mut waiting = run(RunState::BackOff { delay: Duration::from_secs(2) });
        waiting.last_terminated = Some(Terminated { exit_code: 0, ..terminated });
        let status = waiting.status("h");
        assert_eq!(status["phase"], "Running");
        let c = &status["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["reason"], "Completed");
        assert!(c.get("containerID").is_none());
    }

    #[test]
    fn ephemeral_containers_show_running_then_terminated() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:06Z").unwrap().with_timezone(&Utc);
        let mut pod = run(RunState::Running { since: t });
        assert!(pod.status("h").get("ephemeralContainerStatuses").is_none());
        let debugger = EphemeralRun {
            name: "dbg".into(),
            image: "busybox".into(),
            started_at: t,
            terminated: None,
        };
        pod.ephemeral.push(debugger);
        let status = pod.status("h");
        let e = &status["ephemeralContainerStatuses"][0];
        assert_eq!(e["name"], "dbg");
        assert_eq!(e["state"]["running"]["startedAt"], "2025-01-02T03:04:06Z");
        assert_eq!(e["containerID"], "sim://u-1/dbg/0");
        pod.ephemeral[0].terminated =
            Some(Terminated { exit_code: 2, started_at: t, finished_at: t, run: 0 });
        let status = pod.status("h");
        let state = &status["ephemeralContainerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (state["exitCode"].as_i64(), state["reason"].as_str()),
            (Some(2), Some("Error"))
        );
        // The pod's own containers are untouched by it.
        assert_eq!(
            status["containerStatuses"][0]["state"]["running"]["startedAt"],
            "2025-01-02T03:04:06Z"
        );
    }
}
