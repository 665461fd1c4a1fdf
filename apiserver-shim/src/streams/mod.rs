//! A pod's streams: `pods/exec`, `pods/attach` and `pods/portforward`.
//!
//! Two halves meet here. What a cluster connects a pod's streams to is its [`PodStreams`]: the
//! (simulated) kubelets of a host, or, for a tenant, its host pods through the host's API. How a
//! client's bytes reach them is the protocol the client upgraded its request to: the WebSocket
//! channel protocols ([`websocket`]) or SPDY/3.1 ([`spdy`]). A [`Session`] (an exec or attach) and a [`Forwarded`] port
//! are what passes between the two, protocol-free.

pub mod spdy;
pub mod websocket;

use std::fmt;

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::status::{ApiError, ApiResult};

/// Which of a container's streams a session reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A new process in the container (`pods/exec`).
    Exec,
    /// The container's own process (`pods/attach`).
    Attach,
}

impl Action {
    /// The subresource that names it.
    pub fn subresource(self) -> &'static str {
        match self {
            Action::Exec => "exec",
            Action::Attach => "attach",
        }
    }
}

/// What an exec or attach asks for (`PodExecOptions`, `PodAttachOptions`, from the query).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// The container named; `None`: the pod's only (or default) container.
    pub container: Option<String>,
    /// The command of an exec (empty for an attach).
    pub command: Vec<String>,
    /// Whether the client sends standard input.
    pub stdin: bool,
    /// Whether the client reads standard output (default true).
    pub stdout: bool,
    /// Whether the client reads standard error (default true; never with a terminal, whose
    /// output is one stream).
    pub stderr: bool,
    /// Whether the process has a terminal.
    pub tty: bool,
}

impl StreamOptions {
    /// The options of `action` from a query's parameters, checked as kube-apiserver checks them.
    pub fn parse(action: Action, params: &[(String, String)]) -> ApiResult<StreamOptions> {
        let last = |key: &str| params.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let flag = |key: &str, default: bool| -> ApiResult<bool> {
            match last(key) {
                None | Some("") => Ok(default),
                Some("true" | "1") => Ok(true),
                Some("false" | "0") => Ok(false),
                Some(v) => {
                    Err(ApiError::bad_request(format!("invalid {key} {v:?}: not a boolean")))
                }
            }
        };
        let tty = flag("tty", false)?;
        let options = StreamOptions {
            container: last("container").filter(|c| !c.is_empty()).map(str::to_owned),
            command: match action {
                Action::Exec => {
                    params.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.clone()).collect()
                }
                Action::Attach => Vec::new(),
            },
            stdin: flag("stdin", false)?,
            stdout: flag("stdout", true)?,
            stderr: flag("stderr", true)? && !tty,
            tty,
        };
        if !(options.stdin || options.stdout || options.stderr) {
            return Err(ApiError::bad_request(
                "you must specify at least 1 of stdin, stdout, stderr",
            ));
        }
        if action == Action::Exec && options.command.is_empty() {
            return Err(ApiError::bad_request(
                "you must specify at least one command for the container",
            ));
        }
        Ok(options)
    }
}

/// A terminal's size, as the resize channel carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct TerminalSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

/// Bytes read from a local stream at a time, for one message or frame.
const CHUNK: usize = 32 * 1024;

/// The protocols a client offers in header `name` (repeated, or comma-separated), in its order.
fn offered(
    headers: &axum::http::HeaderMap,
    name: impl axum::http::header::AsHeaderName,
) -> Vec<&str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The first of the `offered` protocols that is `supported`, as kube-apiserver and the kubelet
/// choose.
fn negotiate(offered: &[&str], supported: &[&'static str]) -> Option<&'static str> {
    offered.iter().find_map(|p| supported.iter().find(|s| *s == p).copied())
}

/// Bytes read from a process.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// Bytes written to a process.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Both directions of one connection.
pub trait Duplex: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Duplex for T {}

/// An exec or attach under way: the process's streams (those the options asked for) and how it
/// ended.
pub struct Session {
    /// Its standard input; shutting it down is end of input.
    pub stdin: Option<Writer>,
    /// Its standard output (with a terminal: everything it prints).
    pub stdout: Option<Reader>,
    /// Its standard error.
    pub stderr: Option<Reader>,
    /// Where new terminal sizes go (with a terminal).
    pub resize: Option<mpsc::Sender<TerminalSize>>,
    /// The `Status` it ended with ([`exited`]), once it has ended.
    pub status: BoxFuture<'static, Value>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("tty", &self.resize.is_some())
            .finish()
    }
}

/// One forwarded port of a pod: the connection to it, and the error the far side reports on it
/// (a refused connection, say), if any.
pub struct Forwarded {
    /// The connection.
    pub data: Box<dyn Duplex>,
    /// Resolves with the far side's error message, or `None` when it has none. A message the far
    /// side has has arrived by the time `data` reads its end, but the future itself may stay
    /// pending long after (until the whole session to the far side ends): read it then with
    /// [`error_once_ended`].
    pub error: BoxFuture<'static, Option<String>>,
}

/// The error a forwarded connection's far side reported, read once its data has ended.
pub fn error_once_ended(error: BoxFuture<'static, Option<String>>) -> Option<String> {
    use futures::FutureExt;
    error.now_or_never().flatten()
}

impl fmt::Debug for Forwarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarded").finish_non_exhaustive()
    }
}

/// Where a cluster's pod streams go: the (simulated) kubelets of a host, or the host pods of a
/// tenant. Errors are Kubernetes errors, answered before the client's connection is upgraded.
pub trait PodStreams: Send + Sync + fmt::Debug {
    /// Start `action` in `pod` (found in the cluster) in `namespace`.
    fn session(
        &self,
        namespace: &str,
        pod: &Value,
        action: Action,
        options: StreamOptions,
    ) -> BoxFuture<'static, ApiResult<Session>>;

    /// Connect to `port` of `pod` in `namespace`.
    fn forward(
        &self,
        namespace: &str,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, ApiResult<Forwarded>>;
}

/// The `Status` a process that exited with `code` ends its session with, as the kubelet writes
/// it: `Success`, or `NonZeroExitCode` with the code as the `ExitCode` cause.
pub fn exited(command: &[String], code: i32) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: command '{}' exited with {code}",
            command.join(" ")
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The exit code a session's `Status` reports (0 for `Success`), when it reports one.
pub fn exit_code(status: &Value) -> Option<i32> {
    if status["status"] == "Success" {
        return Some(0);
    }
    status.pointer("/details/causes")?.as_array()?.iter().find_map(|cause| {
        (cause["reason"] == "ExitCode").then(|| cause["message"].as_str()?.parse().ok())?
    })
}

/// The checks kube-apiserver makes before it connects a pod's streams: the pod is on a node
/// and not finished, and the container named is one of its own (the pod's only one when none
/// is named); the container's name.
pub fn check_pod(pod: &Value, container: Option<&str>, what: &str) -> ApiResult<String> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
    if matches!(phase, "Succeeded" | "Failed") {
        return Err(ApiError::bad_request(format!(
            "cannot {what} into a container in a completed pod; current phase is {phase}"
        )));
    }
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let all: Vec<String> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| names(f))
        .collect();
    match container {
        Some(c) if all.iter().any(|n| n == c) => Ok(c.to_owned()),
        Some(c) => Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None => {
            let main = names("containers");
            let default = pod
                .pointer("/metadata/annotations/kubectl.kubernetes.io~1default-container")
                .and_then(Value::as_str)
                .filter(|d| main.iter().any(|n| n == d));
            match (default, main.as_slice()) {
                (Some(d), _) => Ok(d.to_owned()),
                (None, [only]) => Ok(only.clone()),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    main.join(" ")
                ))),
            }
        }
    }
}

/// The ports of a `pods/portforward` request (`ports`, comma-separated or repeated), checked as
/// kube-apiserver checks them.
pub fn ports(params: &[(String, String)]) -> ApiResult<Vec<u16>> {
    let mut ports = Vec::new();
    for value in params.iter().filter(|(k, _)| k == "ports").map(|(_, v)| v) {
        for port in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match port.parse::<u16>() {
                Ok(p) if p > 0 => ports.push(p),
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "invalid port {port:?}: ports must be between 1 and 65535"
                    )))
                }
            }
        }
    }
    if ports.is_empty() {
        return Err(ApiError::bad_request("at least one port must be specified"));
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn exec_options_take_every_command_word_and_default_to_stdout_and_stderr() {
        let o = StreamOptions::parse(
            Action::Exec,
            &params(&[
                ("command", "sh"),
                ("command", "-c"),
                ("command", "exit 3"),
                ("stdin", "true"),
            ]),
        )
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "exit 3"]);
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        let tty = StreamOptions::parse(Action::Exec, &params(&[("command", "sh"), ("tty", "1")]));
        assert!(!tty.unwrap().stderr, "a terminal has one output stream");
        let none = params(&[("command", "ls"), ("stdout", "false"), ("stderr", "false")]);
        let e = StreamOptions::parse(Action::Exec, &none).unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (400, "you must specify at least 1 of stdin, stdout, stderr")
        );
        let e = StreamOptions::parse(Action::Exec, &params(&[("stdin", "yes")])).unwrap_err();
        assert_eq!(e.code(), 400);
        let e = StreamOptions::parse(Action::Exec, &[]).unwrap_err();
        assert_eq!(e.message(), "you must specify at least one command for the container");
        assert!(StreamOptions::parse(Action::Attach, &[]).unwrap().command.is_empty());
    }

    #[test]
    fn an_exit_code_goes_there_and_back() {
        let cmd = vec!["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];
        assert_eq!(exit_code(&exited(&cmd, 3)), Some(3));
        assert_eq!(exit_code(&exited(&cmd, 0)), Some(0));
        assert_eq!(exited(&cmd, 3)["reason"], "NonZeroExitCode");
        assert_eq!(exit_code(&json!({"status": "Failure", "message": "x"})), None);
    }

    fn pod(node: &str, phase: &str, containers: &[&str]) -> Value {
        let containers: Vec<Value> = containers.iter().map(|c| json!({"name": c})).collect();
        json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": containers},
               "status": {"phase": phase}})
    }

    #[test]
    fn a_pod_is_checked_as_kube_apiserver_checks_it() {
        assert_eq!(check_pod(&pod("n", "Running", &["a"]), None, "exec").unwrap(), "a");
        let e = check_pod(&pod("", "Pending", &["a"]), None, "exec").unwrap_err();
        assert_eq!(e.message(), "pod p does not have a host assigned");
        let e = check_pod(&pod("n", "Succeeded", &["a"]), None, "exec").unwrap_err();
        assert_eq!(
            e.message(),
            "cannot exec into a container in a completed pod; current phase is Succeeded"
        );
        let e = check_pod(&pod("n", "Running", &["a"]), Some("b"), "exec").unwrap_err();
        assert_eq!(e.message(), "container b is not valid for pod p");
        let e = check_pod(&pod("n", "Running", &["a", "b"]), None, "attach").unwrap_err();
        assert!(e.message().starts_with("a container name must be specified"), "{e:?}");
        let mut two = pod("n", "Running", &["a", "b"]);
        two["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/default-container": "b"});
        assert_eq!(check_pod(&two, None, "exec").unwrap(), "b");
    }

    #[test]
    fn ports_come_comma_separated_or_repeated() {
        assert_eq!(
            ports(&params(&[("ports", "80,443"), ("ports", "8888")])).unwrap(),
            [80, 443, 8888]
        );
        assert_eq!(ports(&[]).unwrap_err().message(), "at least one port must be specified");
        assert_eq!(ports(&params(&[("ports", "0")])).unwrap_err().code(), 400);
        assert_eq!(ports(&params(&[("ports", "70000")])).unwrap_err().code(), 400);
    }
}
