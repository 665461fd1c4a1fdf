//! Ephemeral containers (`kubectl debug`) of the pods the simulated kubelet plays: each one added
//! to a running pod's spec is started once, runs its command with the built-in commands of
//! [`crate::exec`] (output into its log, standard input from an attach when it keeps one open),
//! and shows in the pod's `ephemeralContainerStatuses` as running, then terminated with the
//! command's exit code. Nothing runs on the machine.

use chrono::Utc;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{EphemeralContainer, Pod};
use tokio::io::AsyncWriteExt;

use carrel_events::EventType;

use super::pod_run::{EphemeralRun, PodRun, RunState, Terminated};
use super::Kubelet;
use crate::exec::{self, Container, Io};

/// The exit code of a container whose command could not start (as runc's `StartError`).
const START_ERROR: i32 = 128;
/// The exit code of a container killed with its pod (SIGKILL).
const KILLED: i32 = 137;

/// What the simulated kubelet's containers see when it runs their commands: the pod's files and
/// GPU devices, which whoever serves the pods' `exec` knows (in `carrel up`, the same view an
/// exec gets).
pub trait Views: Send + Sync + std::fmt::Debug {
    /// What container `container` of `pod` sees.
    fn view(&self, pod: &Pod, container: &str) -> BoxFuture<'static, Container>;
}

/// A container's command ended: the pod's UID, the container, its exit code.
#[derive(Debug)]
pub(super) struct Exit {
    pub(super) uid: String,
    pub(super) container: String,
    pub(super) code: i32,
}

/// What a container of `pod` sees without [`Views`]: the pod's name as its host name, the
/// literal values of its environment, no devices and no files.
fn plain_view(pod: &Pod, container: &EphemeralContainer) -> Container {
    let env = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    let hostname = pod.metadata.name.clone().unwrap_or_default();
    Container { hostname, env, ..Container::default() }
}

/// The command an ephemeral container runs: its `command` and `args`, or the shell (what the
/// debugging images' entry points run).
fn argv(container: &EphemeralContainer) -> Vec<String> {
    let argv: Vec<String> =
        container.command.iter().chain(container.args.iter()).flatten().cloned().collect();
    if argv.is_empty() {
        vec!["sh".to_owned()]
    } else {
        argv
    }
}

impl Kubelet {
    /// Start the ephemeral containers of `pod` that `run` has not started, if the pod runs.
    pub(super) fn start_ephemeral(&mut self, pod: &Pod, run: &mut PodRun) {
        if !matches!(run.state, RunState::Running { .. } | RunState::BackOff { .. }) {
            return;
        }
        let added = pod.spec.as_ref().and_then(|s| s.ephemeral_containers.as_ref());
        for container in added.into_iter().flatten() {
            if run.ephemeral.iter().any(|e| e.name == container.name) {
                continue;
            }
            let name = container.name.clone();
            let image = container.image.clone().unwrap_or_default();
            run.ephemeral.push(EphemeralRun {
                name: name.clone(),
                image: image.clone(),
                started_at: Utc::now(),
                terminated: None,
            });
            run.status_written = false;
            let (namespace, pod_name) = (run.namespace.clone(), run.name.clone());
            let stdin = match container.stdin {
                Some(true) => Some(self.logs.start_with_stdin(&namespace, &pod_name, &name)),
                _ => {
                    self.logs.start(&namespace, &pod_name, &name);
                    None
                }
            };
            let pulled = format!("Container image {image:?} already present on machine");
            self.say(run, EventType::Normal, "Pulled", pulled);
            self.say(run, EventType::Normal, "Created", format!("Created container: {name}"));
            self.say(run, EventType::Normal, "Started", format!("Started container {name}"));
            tracing::info!(node = %self.node, pod = %format!("{namespace}/{pod_name}"), container = %name, "started an ephemeral container");

            let view = match &self.views {
                Some(views) => views.view(pod, &name),
                None => {
                    let view = plain_view(pod, container);
                    Box::pin(async move { view })
                }
            };
            let command = argv(container);
            let tty = container.tty == Some(true);
            let (logs, exits, uid) = (self.logs.clone(), self.exits.clone(), run.uid.clone());
            let task = tokio::spawn(async move {
                let view = view.await;
                let mut stdout = logs.writer(&namespace, &pod_name, &name);
                let mut stderr = logs.writer(&namespace, &pod_name, &name);
                let io = Io { stdin, stdout: &mut stdout, stderr: &mut stderr, tty, sizes: None };
                let code = match exec::run(&view, &command, io).await {
                    Ok(code) => code,
                    Err(message) => {
                        logs.push(&namespace, &pod_name, &name, &message);
                        START_ERROR
                    }
                };
                let _ = stdout.shutdown().await;
                let _ = stderr.shutdown().await;
                let _ = exits.send(Exit { uid, container: name, code });
            });
            self.debugging.insert((run.uid.clone(), container.name.clone()), task);
        }
    }

    /// An ephemeral container's command ended: it terminates with its exit code.
    pub(super) fn ephemeral_ended(&mut self, exit: Exit) {
        self.debugging.remove(&(exit.uid.clone(), exit.container.clone()));
        let Some(run) = self.runs.get_mut(&exit.uid) else { return };
        let Some(container) = run.ephemeral.iter_mut().find(|e| e.name == exit.container) else {
            return;
        };
        container.terminated = Some(Terminated {
            exit_code: exit.code,
            started_at: container.started_at,
            finished_at: Utc::now(),
            run: 0,
        });
        run.status_written = false;
        self.logs.finish(&run.namespace, &run.name, &exit.container);
    }

    /// The pod of `run` ends: its ephemeral containers still running are killed (exit code 137,
    /// as SIGKILL leaves them).
    pub(super) fn kill_ephemeral(&mut self, run: &mut PodRun) {
        self.stop_ephemeral(&run.uid);
        let now = Utc::now();
        for container in run.ephemeral.iter_mut().filter(|e| e.terminated.is_none()) {
            container.terminated = Some(Terminated {
                exit_code: KILLED,
                started_at: container.started_at,
                finished_at: now,
                run: 0,
            });
            self.logs.finish(&run.namespace, &run.name, &container.name);
        }
    }

    /// The commands of the ephemeral containers of the pod with UID `uid` stop (the pod ended or
    /// is gone).
    pub(super) fn stop_ephemeral(&mut self, uid: &str) {
        self.debugging.retain(|(pod, _), task| {
            if pod == uid {
                task.abort();
            }
            pod != uid
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ephemeral_container_runs_its_command_or_a_shell() {
        let container: EphemeralContainer = serde_json::from_value(serde_json::json!({
            "name": "dbg", "command": ["sh", "-c"], "args": ["echo hi"],
            "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
        }))
        .expect("container");
        assert_eq!(argv(&container), ["sh", "-c", "echo hi"]);
        let bare = EphemeralContainer { name: "dbg".into(), ..Default::default() };
        assert_eq!(argv(&bare), ["sh"]);
        let pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "train"}}))
            .expect("pod");
        let view = plain_view(&pod, &container);
        assert_eq!(view.hostname, "train");
        assert_eq!(view.env, [("A".to_owned(), "1".to_owned())]);
    }
}
