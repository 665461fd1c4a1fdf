//! The simulated kubelet playing a pod's life: admitting it, advancing its runs, restarting it,
//! writing its status and events, and finishing its deletion.

use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::time::Instant;

use carrel_events::{EventTarget, EventType};

use super::behaviour::{after_exit, restart_delay, AfterExit, Behaviour, Phase, RestartPolicy};
use super::pod_run::{from_time, PodRun, RunState, Terminated};
use super::{Kubelet, Said};

impl Kubelet {
    /// A pod seen for the first time: started, or adopted when it already runs (a restarted
    /// agent), or remembered as finished.
    pub(super) fn admit(&mut self, pod: &Pod, uid: &str) -> Option<PodRun> {
        let spec = pod.spec.as_ref()?;
        let names = |cs: &[k8s_openapi::api::core::v1::Container]| -> Vec<(String, String)> {
            cs.iter().map(|c| (c.name.clone(), c.image.clone().unwrap_or_default())).collect()
        };
        let status = pod.status.clone().unwrap_or_default();
        let now = Utc::now();
        let mut run = PodRun {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_owned(),
            containers: names(&spec.containers),
            init_containers: names(spec.init_containers.as_deref().unwrap_or_default()),
            policy: RestartPolicy::parse(spec.restart_policy.as_deref()),
            behaviour: Behaviour::of(&pod.metadata.annotations.clone().unwrap_or_default()),
            pod_ip: None,
            ip_slot: None,
            rejected: None,
            start_time: now,
            transition: now,
            state: RunState::Running { since: now },
            restart_count: 0,
            last_terminated: None,
            deadline: None,
            status_written: false,
            ephemeral: Vec::new(),
        };
        match status.phase.as_deref() {
            Some(phase @ ("Succeeded" | "Failed")) => {
                let phase = if phase == "Succeeded" { Phase::Succeeded } else { Phase::Failed };
                run.state = RunState::Finished {
                    phase,
                    terminated: Terminated {
                        exit_code: i32::from(phase == Phase::Failed),
                        started_at: now,
                        finished_at: now,
                        run: 0,
                    },
                };
                run.status_written = true;
            }
            Some("Running") => {
                let slot = status.pod_ip.as_deref().and_then(|ip| self.ips.adopt(ip));
                match slot {
                    Some(k) => {
                        run.ip_slot = Some(k);
                        run.pod_ip = status.pod_ip.clone();
                    }
                    None => {
                        run.ip_slot = self.ips.take();
                        run.pod_ip = run.ip_slot.map(|k| self.ips.ip(k));
                        run.status_written = false;
                    }
                }
                run.start_time = status.start_time.as_ref().and_then(from_time).unwrap_or(now);
                let first = status.container_statuses.as_ref().and_then(|s| s.first().cloned());
                run.restart_count =
                    first.as_ref().map_or(0, |s| u32::try_from(s.restart_count).unwrap_or(0));
                let since = first
                    .as_ref()
                    .and_then(|s| s.state.as_ref()?.running.as_ref()?.started_at.as_ref())
                    .and_then(from_time)
                    .unwrap_or(now);
                run.state = RunState::Running { since };
                run.deadline = Self::run_deadline(&run.behaviour, since);
                run.status_written = run.pod_ip.is_some() && slot.is_some();
                self.start_logs(&run);
                tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "adopted a running pod");
            }
            _ => {
                let used = self
                    .runs
                    .values()
                    .filter(|r| !matches!(r.state, RunState::Finished { .. }))
                    .count();
                let capacity = self.max_pods as usize;
                if used >= capacity {
                    // As a kubelet refuses a pod bound past its node's room: Failed, OutOfpods.
                    let why = format!(
                        "Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {capacity}"
                    );
                    tracing::warn!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "{why}");
                    let message = format!("Pod was rejected: {why}");
                    self.say(&run, EventType::Warning, "OutOfpods", why);
                    run.rejected = Some(("OutOfpods".to_owned(), message));
                    run.state = RunState::Finished {
                        phase: Phase::Failed,
                        terminated: Terminated {
                            exit_code: 0,
                            started_at: now,
                            finished_at: now,
                            run: 0,
                        },
                    };
                    return Some(run);
                }
                run.ip_slot = self.ips.take();
                run.pod_ip = run.ip_slot.map(|k| self.ips.ip(k));
                run.deadline = Self::run_deadline(&run.behaviour, now);
                self.start_logs(&run);
                self.say_started(&run);
                tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), "started a pod");
            }
        }
        Some(run)
    }

    /// The end of a run, or of a back-off.
    pub(super) fn advance(&mut self, run: &mut PodRun) {
        let now = Utc::now();
        run.deadline = None;
        match run.state.clone() {
            RunState::Running { since } => {
                let code = run.behaviour.exit_code;
                let terminated = Terminated {
                    exit_code: code,
                    started_at: since,
                    finished_at: now,
                    run: run.restart_count,
                };
                for (container, _) in &run.containers {
                    self.logs.finish(&run.namespace, &run.name, container);
                }
                match after_exit(run.policy, code) {
                    AfterExit::Finish(phase) => {
                        run.state = RunState::Finished { phase, terminated };
                        self.kill_ephemeral(run);
                        if let Some(slot) = run.ip_slot.take() {
                            self.ips.release(slot);
                        }
                        tracing::info!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), phase = phase.as_str(), exit_code = code, "pod finished");
                    }
                    AfterExit::Restart => {
                        run.last_terminated = Some(terminated);
                        let delay = restart_delay(run.restart_count);
                        if delay.is_zero() {
                            self.restart(run);
                        } else {
                            for (container, _) in &run.containers {
                                let message = format!(
                                    "Back-off restarting failed container {container} in pod {}_{}({})",
                                    run.name, run.namespace, run.uid
                                );
                                self.say(run, EventType::Warning, "BackOff", message);
                            }
                            run.state = RunState::BackOff { delay };
                            run.deadline = Some(Instant::now() + delay);
                        }
                    }
                }
            }
            RunState::BackOff { .. } => self.restart(run),
            RunState::Finished { .. } => {}
        }
        run.transition = now;
        run.status_written = false;
    }

    pub(super) fn restart(&mut self, run: &mut PodRun) {
        let now = Utc::now();
        run.restart_count += 1;
        run.state = RunState::Running { since: now };
        run.deadline = Self::run_deadline(&run.behaviour, now);
        self.start_logs(run);
        self.say_started(run);
    }

    /// Have the event writer say `reason` about `run`'s pod.
    pub(super) fn say(&self, run: &PodRun, kind: EventType, reason: &'static str, message: String) {
        let target = EventTarget::pod(&run.namespace, &run.name, Some(run.uid.clone()));
        let _ = self.say.send(Said { target, kind, reason, message });
    }

    /// What a kubelet says as it starts a pod's containers.
    pub(super) fn say_started(&self, run: &PodRun) {
        for (container, image) in &run.containers {
            let pulled = format!("Container image {image:?} already present on machine");
            self.say(run, EventType::Normal, "Pulled", pulled);
            self.say(run, EventType::Normal, "Created", format!("Created container: {container}"));
            self.say(run, EventType::Normal, "Started", format!("Started container {container}"));
        }
    }

    /// What a kubelet says as it stops a pod's running containers.
    pub(super) fn say_stopped(&self, run: &PodRun) {
        for (container, _) in &run.containers {
            self.say(run, EventType::Normal, "Killing", format!("Stopping container {container}"));
        }
    }

    pub(super) async fn write_status(&self, run: &PodRun, host_ip: &str) -> bool {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &run.namespace);
        let patch = json!({"status": run.status(host_ip)});
        match api.patch_status(&run.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 404 => true,
            Err(e) => {
                tracing::warn!(node = %self.node, pod = %format!("{}/{}", run.namespace, run.name), error = %e, "could not write the pod's status");
                false
            }
        }
    }

    /// A pod marked for deletion: its containers terminated, its deletion finished.
    pub(super) async fn finish_deletion(&mut self, pod: &Pod, uid: &str) {
        if self.deleted.contains(uid) {
            return;
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let host_ip = self.host_ip();
        if let Some(mut run) = self.runs.remove(uid) {
            let now = Utc::now();
            let stopped = |since| Terminated {
                exit_code: 0,
                started_at: since,
                finished_at: now,
                run: run.restart_count,
            };
            match &run.state {
                RunState::Running { since } => {
                    self.say_stopped(&run);
                    let terminated = stopped(*since);
                    run.state = RunState::Finished { phase: Phase::Succeeded, terminated };
                }
                RunState::BackOff { .. } => {
                    let terminated = run.last_terminated.clone().unwrap_or_else(|| stopped(now));
                    let phase =
                        if terminated.exit_code == 0 { Phase::Succeeded } else { Phase::Failed };
                    run.state = RunState::Finished { phase, terminated };
                }
                RunState::Finished { .. } => {}
            }
            run.deadline = None;
            for (container, _) in &run.containers {
                self.logs.finish(&run.namespace, &run.name, container);
            }
            self.kill_ephemeral(&mut run);
            run.transition = Utc::now();
            self.write_status(&run, &host_ip).await;
            self.runs.insert(uid.to_owned(), run);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tracing::info!(node = %self.node, pod = %format!("{namespace}/{name}"), "finished the pod's deletion");
                self.deleted.insert(uid.to_owned());
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.deleted.insert(uid.to_owned());
            }
            Err(e) => {
                tracing::warn!(node = %self.node, pod = %format!("{namespace}/{name}"), error = %e, "could not finish the pod's deletion");
            }
        }
    }
}
