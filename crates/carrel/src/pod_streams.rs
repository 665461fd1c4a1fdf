//! A pod's streams (`exec`, `attach`, `portforward`) in `carrel up`: a tenant's go to its host
//! pod through the host's API, as its logs do ([`TenantPodStreams`]); the host's go to the
//! simulated kubelet of the pod's node ([`SimPodStreams`]), which runs nothing on the machine.

use std::collections::{BTreeMap, HashMap};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use kube::Api;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;

use carrel_apiserver::streams::{
    self, check_pod, Action, Forwarded, PodStreams, Reader, Session, StreamOptions, TerminalSize,
    Writer,
};
use carrel_apiserver::{ApiError, ApiResult};
use carrel_gpu::Profile;
use carrel_sim::exec::{self, Container, Device, Files, Io};
use carrel_sim::LogStore;
use carrel_syncer::host_names;

use crate::syncers::AbortOnDrop;

/// Bytes buffered on each in-memory stream of a session.
const PIPE: usize = 64 * 1024;

/// The name of a pod's container a request reaches: the one named, or the default.
fn container_name(pod: &Value, options: Option<&StreamOptions>, what: &str) -> ApiResult<String> {
    check_pod(pod, options.and_then(|o| o.container.as_deref()), what)
}

fn meta<'a>(pod: &'a Value, field: &str) -> &'a str {
    pod["metadata"][field].as_str().unwrap_or_default()
}

/// Whether `container` of `pod` runs, by its status.
fn runs(pod: &Value, container: &str) -> bool {
    ["containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"]
        .iter()
        .filter_map(|f| pod["status"][*f].as_array())
        .flatten()
        .any(|s| s["name"] == container && s["state"]["running"].is_object())
}

/// kubelet's answer for a container that is not running.
fn not_running(container: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to upgrade connection: container not found (\"{container}\")"
    ))
}

/// A tenant pod's streams are its host pod's, opened on the host's API with the syncer's
/// credentials (so that on a real host the real kubelet serves them).
pub struct TenantPodStreams {
    /// The host's API.
    pub host: kube::Client,
    /// The tenant's namespace on the host.
    pub host_namespace: String,
}

impl std::fmt::Debug for TenantPodStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantPodStreams").field("host_namespace", &self.host_namespace).finish()
    }
}

impl TenantPodStreams {
    /// The host pod of tenant pod `pod` in `namespace`, once it runs `container` (any
    /// container when `None`).
    async fn host_pod(
        api: &Api<Pod>,
        namespace: &str,
        pod: &Value,
        container: Option<&str>,
    ) -> ApiResult<String> {
        let host_name = host_names::host_pod(namespace, meta(pod, "name"));
        let found = match api.get_opt(&host_name).await {
            Ok(found) => found,
            Err(e) => return Err(ApiError::unavailable(format!("reading the host pod: {e}"))),
        };
        // Only the host pod of this very pod: not one left from an earlier pod of its name.
        let found = found.and_then(|p| serde_json::to_value(p).ok()).filter(|p| {
            p["metadata"]["annotations"][host_names::ANNOTATION_UID] == pod["metadata"]["uid"]
        });
        let running = found.as_ref().is_some_and(|p| match container {
            Some(c) => runs(p, c),
            None => p["status"]["phase"] == "Running",
        });
        if !running {
            return Err(match container {
                Some(c) => not_running(c),
                None => ApiError::bad_request(format!(
                    "unable to upgrade connection: pod {} is not running",
                    meta(pod, "name")
                )),
            });
        }
        Ok(host_name)
    }
}

/// An exec or attach on the host, ended when dropped.
struct Aborting(kube::api::AttachedProcess);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A port forward on the host, ended when dropped.
struct AbortingForward(kube::api::Portforwarder);

impl Drop for AbortingForward {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A host API refusal, in the tenant's words.
fn host_error(e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) if s.code == 400 => ApiError::bad_request(s.message),
        kube::Error::Api(s) if s.code == 404 => {
            ApiError::bad_request("the pod has not started on a node yet")
        }
        other => ApiError::unavailable(format!("connecting to the host pod: {other}")),
    }
}

impl PodStreams for TenantPodStreams {
    fn session(
        &self,
        namespace: &str,
        pod: &Value,
        action: Action,
        options: StreamOptions,
    ) -> BoxFuture<'static, ApiResult<Session>> {
        let api: Api<Pod> = Api::namespaced(self.host.clone(), &self.host_namespace);
        let container = container_name(pod, Some(&options), action.subresource());
        let (namespace, pod) = (namespace.to_owned(), pod.clone());
        Box::pin(async move {
            let container = container?;
            let host_name = Self::host_pod(&api, &namespace, &pod, Some(&container)).await?;
            let params = AttachParams::default()
                .container(container)
                .stdin(options.stdin)
                .stdout(options.stdout)
                .stderr(options.stderr)
                .tty(options.tty);
            let mut process = match action {
                Action::Exec => api.exec(&host_name, options.command.clone(), &params).await,
                Action::Attach => api.attach(&host_name, &params).await,
            }
            .map_err(host_error)?;
            let stdin = process.stdin().map(|w| Box::new(w) as Writer);
            let stdout = process.stdout().map(|r| Box::new(r) as Reader);
            let stderr = process.stderr().map(|r| Box::new(r) as Reader);
            let resize = process.terminal_size().map(|mut far| {
                let (near, mut sizes) = mpsc::channel::<TerminalSize>(4);
                tokio::spawn(async move {
                    use futures::SinkExt;
                    while let Some(size) = sizes.recv().await {
                        let size =
                            kube::api::TerminalSize { width: size.width, height: size.height };
                        if far.send(size).await.is_err() {
                            return;
                        }
                    }
                });
                near
            });
            let status = process.take_status();
            // A session dropped before its end (its client gone) ends the host's.
            let process = Aborting(process);
            let status = async move {
                let ended = match status {
                    Some(status) => status.await,
                    None => None,
                };
                drop(process);
                match ended.and_then(|s| serde_json::to_value(s).ok()) {
                    Some(status) => status,
                    None => json!({
                        "metadata": {},
                        "status": "Failure",
                        "message": "the connection to the host pod ended",
                        "reason": "InternalError",
                        "code": 500,
                    }),
                }
            };
            Ok(Session { stdin, stdout, stderr, resize, status: status.boxed() })
        })
    }

    fn forward(
        &self,
        namespace: &str,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, ApiResult<Forwarded>> {
        let api: Api<Pod> = Api::namespaced(self.host.clone(), &self.host_namespace);
        let (namespace, pod) = (namespace.to_owned(), pod.clone());
        Box::pin(async move {
            let host_name = Self::host_pod(&api, &namespace, &pod, None).await?;
            let mut forwarder = api.portforward(&host_name, &[port]).await.map_err(host_error)?;
            let data = forwarder.take_stream(port).ok_or_else(|| {
                ApiError::internal(format!("the host forwarded no stream for port {port}"))
            })?;
            let error = forwarder.take_error(port);
            // A forward dropped (its client gone) ends the host's.
            let forwarder = AbortingForward(forwarder);
            let error = async move {
                let said = match error {
                    Some(error) => error.await,
                    None => None,
                };
                drop(forwarder);
                said
            };
            Ok(Forwarded { data: Box::new(data), error: error.boxed() })
        })
    }
}

/// The host's pod streams, played by the simulated kubelets: an exec runs the built-in
/// commands of [`carrel_sim::exec`], an attach shows the container's simulated output of its
/// current run and follows it until the run ends, and a
/// forwarded port declared by a container answers HTTP with the pod's name.
pub struct SimPodStreams {
    /// The host, for the GPU devices pinned to a pod.
    host: kube::Client,
    /// Each node's simulated containers.
    nodes: BTreeMap<String, LogStore>,
    /// Each pod's files, by (namespace, name, uid).
    files: Mutex<HashMap<(String, String, String), Files>>,
}

impl std::fmt::Debug for SimPodStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimPodStreams").field("nodes", &self.nodes.len()).finish()
    }
}

impl SimPodStreams {
    /// The streams of these nodes' simulated containers.
    pub fn new(host: kube::Client, nodes: BTreeMap<String, LogStore>) -> SimPodStreams {
        SimPodStreams { host, nodes, files: Mutex::default() }
    }

    /// The node's containers of `pod`, once `container` runs there.
    fn running(&self, namespace: &str, pod: &Value, container: &str) -> ApiResult<LogStore> {
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let store = self.nodes.get(node).ok_or_else(|| {
            ApiError::bad_request(format!(
                "pod {} does not have a host assigned",
                meta(pod, "name")
            ))
        })?;
        if !store.running(namespace, meta(pod, "name"), Some(container)) {
            return Err(not_running(container));
        }
        Ok(store.clone())
    }

    /// The files of `pod`; those of pods gone from every node are dropped.
    fn files(&self, namespace: &str, pod: &Value) -> Files {
        let key = (namespace.to_owned(), meta(pod, "name").to_owned(), meta(pod, "uid").to_owned());
        let mut files = self.files.lock();
        let nodes = &self.nodes;
        files.retain(|(ns, name, _), _| {
            nodes.values().any(|store| store.containers(ns, name).is_some())
        });
        files.entry(key).or_default().clone()
    }
}

/// What a container of `pod` (regular, init or ephemeral) sees: its host name, its literal
/// environment, its files and the devices in `devices`.
fn container_view(pod: &Value, container: &str, devices: Vec<Device>, files: Files) -> Container {
    let spec = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .filter_map(|list| pod["spec"][*list].as_array())
        .flatten()
        .find(|c| c["name"] == container);
    let env = spec
        .and_then(|c| c["env"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e["name"].as_str()?.to_owned(), e["value"].as_str()?.to_owned())))
        .collect();
    let hostname = pod["spec"]["hostname"]
        .as_str()
        .or_else(|| pod["metadata"]["annotations"][host_names::ANNOTATION_NAME].as_str())
        .unwrap_or_else(|| meta(pod, "name"))
        .to_owned();
    Container { hostname, env, devices, files }
}

/// The MIG devices pinned to host pod `name` in `namespace`, by its claims.
async fn devices(host: &kube::Client, namespace: &str, name: &str) -> Vec<Device> {
    let claims = match carrel_syncer::placement::fleet(host).await {
        Ok((_, claims)) => claims,
        Err(e) => {
            tracing::warn!(error = %e, "reading the GPU claims for nvidia-smi");
            return Vec::new();
        }
    };
    claims
        .into_iter()
        .filter(|c| c.host_namespace == namespace && c.host_pod == name)
        .filter(|c| !c.instance_uuid.is_empty())
        .map(|c| Device {
            gpu_name: c.model.product_name().to_owned(),
            gpu_uuid: c.gpu_uuid,
            profile: Profile { model: c.model, shape: c.shape }.name().to_owned(),
            uuid: c.instance_uuid,
        })
        .collect()
}

/// Copy what an attach's client types into the container's standard input, until either ends.
async fn feed(mut typed: DuplexStream, input: carrel_sim::logs::Stdin) {
    use tokio::io::AsyncReadExt;
    let mut chunk = vec![0u8; PIPE];
    loop {
        match typed.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) if !input.write(&chunk[..n]).await => return,
            Ok(_) => {}
        }
    }
}

/// A pipe's two ends, boxed for a session.
fn pipe() -> (DuplexStream, DuplexStream) {
    tokio::io::duplex(PIPE)
}

/// The `Status` of an exec whose command never started.
fn not_started(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "Internal error occurred: error executing command in container: {message}"
        ),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

/// What the simulated kubelet's ephemeral containers see when it runs their commands: what an
/// exec into them sees.
impl carrel_sim::kubelet::Views for SimPodStreams {
    fn view(&self, pod: &Pod, container: &str) -> BoxFuture<'static, Container> {
        let pod = serde_json::to_value(pod).unwrap_or_default();
        let namespace = meta(&pod, "namespace").to_owned();
        let files = self.files(&namespace, &pod);
        let (host, container) = (self.host.clone(), container.to_owned());
        Box::pin(async move {
            let devices = devices(&host, &namespace, meta(&pod, "name")).await;
            container_view(&pod, &container, devices, files)
        })
    }
}

impl PodStreams for SimPodStreams {
    fn session(
        &self,
        namespace: &str,
        pod: &Value,
        action: Action,
        options: StreamOptions,
    ) -> BoxFuture<'static, ApiResult<Session>> {
        let checked = container_name(pod, Some(&options), action.subresource())
            .and_then(|c| self.running(namespace, pod, &c).map(|store| (c, store)));
        let (container, store) = match checked {
            Ok(found) => found,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let files = self.files(namespace, pod);
        let host = self.host.clone();
        let (namespace, pod) = (namespace.to_owned(), pod.clone());
        Box::pin(async move {
            let (stdin_near, stdin_far) = pipe();
            let (stdout_far, stdout_near) = pipe();
            let (stderr_far, stderr_near) = pipe();
            let (done, ended) = tokio::sync::oneshot::channel::<Value>();
            let tty = options.tty;
            let (resize, mut sizes) = mpsc::channel::<TerminalSize>(4);
            let task = match action {
                Action::Exec => {
                    let devices = devices(&host, &namespace, meta(&pod, "name")).await;
                    let view = container_view(&pod, &container, devices, files);
                    let command = options.command.clone();
                    // The terminal's sizes, as the command sees them.
                    let (sized, seen) = mpsc::channel(4);
                    tokio::spawn(async move {
                        while let Some(size) = sizes.recv().await {
                            if sized.send((size.width, size.height)).await.is_err() {
                                return;
                            }
                        }
                    });
                    tokio::spawn(async move {
                        let io = Io {
                            stdin: Some(stdin_far),
                            stdout: stdout_far,
                            stderr: stderr_far,
                            tty,
                            sizes: tty.then_some(seen),
                        };
                        let status = match exec::run(&view, &command, io).await {
                            Ok(code) => streams::exited(&command, code),
                            Err(message) => not_started(&message),
                        };
                        let _ = done.send(status);
                    })
                }
                Action::Attach => {
                    let name = meta(&pod, "name").to_owned();
                    let followed = store.follow(&namespace, &name, Some(&container));
                    let input = store.stdin(&namespace, &name, &container);
                    tokio::spawn(async move {
                        let mut stdout = stdout_far;
                        let _keep = stderr_far;
                        // What the client types reaches a container that keeps its input open.
                        let typed =
                            input.map(|input| AbortOnDrop(tokio::spawn(feed(stdin_far, input))));
                        let end = if tty { "\r\n" } else { "\n" };
                        if let Some((so_far, mut lines)) = followed {
                            // What this run has printed, then what it prints, until it ends.
                            let text: String =
                                so_far.iter().map(|l| format!("{}{end}", l.text)).collect();
                            let mut open = stdout.write_all(text.as_bytes()).await.is_ok();
                            while open {
                                let Ok(line) = lines.recv().await else { break };
                                let text = format!("{}{end}", line.text);
                                open = stdout.write_all(text.as_bytes()).await.is_ok();
                            }
                        }
                        drop((stdout, typed));
                        let _ = done.send(json!({"metadata": {}, "status": "Success"}));
                    })
                }
            };
            // A session dropped before its end (its client gone) ends what it ran.
            let running = AbortOnDrop(task);
            let status = async move {
                let status = ended.await;
                drop(running);
                status.unwrap_or_else(|_| not_started("the simulated container went away"))
            };
            Ok(Session {
                stdin: options.stdin.then(|| Box::new(stdin_near) as Writer),
                stdout: options.stdout.then(|| Box::new(stdout_near) as Reader),
                stderr: options.stderr.then(|| Box::new(stderr_near) as Reader),
                resize: tty.then_some(resize),
                status: status.boxed(),
            })
        })
    }

    fn forward(
        &self,
        namespace: &str,
        pod: &Value,
        port: u16,
    ) -> BoxFuture<'static, ApiResult<Forwarded>> {
        let name = meta(pod, "name").to_owned();
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let running =
            self.nodes.get(node).is_some_and(|store| store.containers(namespace, &name).is_some())
                && pod["status"]["phase"] == "Running";
        let declared = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["ports"].as_array())
            .flatten()
            .any(|p| p["containerPort"].as_u64() == Some(u64::from(port)));
        let answer = pod["metadata"]["annotations"][host_names::ANNOTATION_NAME]
            .as_str()
            .unwrap_or(&name)
            .to_owned();
        let uid = meta(pod, "uid").to_owned();
        Box::pin(async move {
            if !running {
                return Err(ApiError::bad_request(format!(
                    "unable to upgrade connection: pod {name} is not running"
                )));
            }
            let (near, far) = pipe();
            if !declared {
                drop(far);
                let message = format!(
                    "error forwarding port {port} to pod {uid}: failed to connect to \
                     localhost:{port} inside the pod's network namespace: connection refused"
                );
                return Ok(Forwarded {
                    data: Box::new(near),
                    error: futures::future::ready(Some(message)).boxed(),
                });
            }
            tokio::spawn(serve_name(far, answer));
            Ok(Forwarded { data: Box::new(near), error: futures::future::ready(None).boxed() })
        })
    }
}

/// Answer every HTTP request on `io` with `name` and a new line, once its body is read: the
/// simulated server behind a forwarded port.
async fn serve_name(io: DuplexStream, name: String) {
    use http_body_util::BodyExt;
    let body = bytes::Bytes::from(format!("{name}\n"));
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let body = body.clone();
            async move {
                // What is sent is read (and dropped), as a server reads an upload.
                let mut sent = request.into_body();
                while let Some(frame) = sent.frame().await {
                    if frame.is_err() {
                        break;
                    }
                }
                let mut response = hyper::Response::new(http_body_util::Full::new(body));
                response.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain"),
                );
                Ok::<_, std::convert::Infallible>(response)
            }
        });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    if let Err(e) = connection.await {
        tracing::debug!(error = %e, "a forwarded connection to a simulated pod ended");
    }
}
