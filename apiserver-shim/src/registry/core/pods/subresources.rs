//! The pod subresources that are not views of the stored object: `binding` (a scheduler assigns
//! a node) and `log` (read from whatever runs the pod, through [`PodLogs`]).

use std::fmt;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::{json, Value};

use crate::api::{Api, Target, Write};
use crate::object::meta_str;
use crate::status::{ApiError, ApiResult};

/// What `kubectl logs` asks for (`PodLogOptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// The container; `None` for the pod's only one.
    pub container: Option<String>,
    /// Keep streaming new lines.
    pub follow: bool,
    /// The previous instance of a restarted container.
    pub previous: bool,
    /// Prefix each line with its RFC 3339 timestamp.
    pub timestamps: bool,
    /// Only the last lines.
    pub tail_lines: Option<u64>,
    /// Only lines newer than this many seconds.
    pub since_seconds: Option<u64>,
    /// Stop after this many bytes.
    pub limit_bytes: Option<u64>,
}

impl LogOptions {
    /// From the query parameters of a `log` request.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> ApiResult<LogOptions> {
        let flag = |k: &str| -> ApiResult<bool> {
            match get(k).as_deref() {
                None | Some("") | Some("false") | Some("0") => Ok(false),
                Some("true") | Some("1") => Ok(true),
                Some(v) => Err(ApiError::bad_request(format!("invalid {k} {v:?}: not a boolean"))),
            }
        };
        let number = |k: &str| -> ApiResult<Option<u64>> {
            match get(k).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid {k} {v:?}: must be a non-negative integer"
                    ))
                }),
            }
        };
        Ok(LogOptions {
            container: get("container").filter(|c| !c.is_empty()),
            follow: flag("follow")?,
            previous: flag("previous")?,
            timestamps: flag("timestamps")?,
            tail_lines: number("tailLines")?,
            since_seconds: number("sinceSeconds")?,
            limit_bytes: number("limitBytes")?,
        })
    }
}

/// The bytes of a log, as they come.
pub type LogStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// Where a cluster's pod logs come from: the (simulated) kubelets of a host, or the syncer of a
/// tenant.
pub trait PodLogs: Send + Sync + fmt::Debug {
    /// The log of `pod` (found in the cluster) in `namespace`. Errors are Kubernetes errors
    /// (`container "x" is not valid for pod "p"` is a 400).
    fn logs(
        &self,
        namespace: &str,
        pod: &Value,
        options: LogOptions,
    ) -> BoxFuture<'static, ApiResult<LogStream>>;
}

/// The container a log request means: the one named, or the pod's only one.
pub fn container_of(pod: &Value, options: &LogOptions) -> ApiResult<String> {
    let name = meta_str(pod, "name").unwrap_or_default();
    let names: Vec<&str> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|f| pod["spec"][*f].as_array())
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    match &options.container {
        Some(c) if names.contains(&c.as_str()) => Ok(c.clone()),
        Some(c) => Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None => {
            let main: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            match main.as_slice() {
                [only] => Ok((*only).to_owned()),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    main.join(" ")
                ))),
            }
        }
    }
}

/// `POST pods/<name>/binding`: assign the pod to a node, once.
pub fn bind(api: &Api, target: &Target<'_>, name: &str, binding: &Value) -> ApiResult<Value> {
    let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            name,
            vec![crate::Cause::new("FieldValueRequired", "target.name", "Required value")],
        ));
    }
    if let Some(kind) = binding.pointer("/target/kind").and_then(Value::as_str) {
        if !kind.is_empty() && kind != "Node" {
            return Err(ApiError::invalid(
                "",
                "Binding",
                name,
                vec![crate::Cause::new(
                    "FieldValueNotSupported",
                    "target.kind",
                    format!("Unsupported value: \"{kind}\": supported values: \"Node\""),
                )],
            ));
        }
    }
    let write = Write::by("kube-scheduler", false);
    for _ in 0..8 {
        let mut pod = api.get(target, name)?;
        if let Some(current) =
            pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                "",
                "pods",
                name,
                &format!("pod {name} is already assigned to node \"{current}\""),
            ));
        }
        pod["spec"]["nodeName"] = json!(node);
        let conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conditions: Vec<Value> =
            conditions.into_iter().filter(|c| c["type"] != "PodScheduled").collect();
        conditions.push(json!({
            "type": "PodScheduled",
            "status": "True",
            "lastTransitionTime": crate::object::now_rfc3339(),
        }));
        if !pod["status"].is_object() {
            pod["status"] = json!({});
        }
        pod["status"]["conditions"] = Value::Array(conditions);
        match api.update_with_status(target, name, pod, &write) {
            Ok(_) => {
                return Ok(json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                }));
            }
            Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict("", "pods", name, "the pod kept changing while it was being bound"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_bound_once() {
        let (_dir, api) = crate::api::scratch();
        let rt = crate::resource::built_in("", "pods").expect("pods").clone();
        let target = Target { rt: &rt, namespace: Some("default".into()) };
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        api.create(&target, pod, &Write::by("test", false)).expect("created");
        let binding = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
        bind(&api, &target, "p", &binding).expect("bound");
        let pod = api.get(&target, "p").expect("pod");
        assert_eq!(pod["spec"]["nodeName"], "n1");
        assert_eq!(pod["status"]["conditions"][0]["type"], "PodScheduled");
        let again = bind(&api, &target, "p", &binding).expect_err("already bound");
        assert_eq!(again.code(), 409);
        assert!(again.message().contains("already assigned to node \"n1\""), "{}", again.message());
        let nowhere = bind(&api, &target, "p", &json!({"target": {}})).expect_err("no node");
        assert_eq!(nowhere.code(), 422);
        assert_eq!(bind(&api, &target, "q", &binding).expect_err("absent").code(), 404);
    }

    #[test]
    fn log_options_and_containers() {
        let q = |k: &str| match k {
            "follow" => Some("true".to_owned()),
            "tailLines" => Some("5".to_owned()),
            _ => None,
        };
        let o = LogOptions::parse(q).expect("valid");
        assert!(o.follow && o.tail_lines == Some(5) && o.container.is_none());
        assert!(LogOptions::parse(|k| (k == "tailLines").then(|| "-1".to_owned())).is_err());
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let err = container_of(&pod, &o).expect_err("two containers");
        assert_eq!(
            err.message(),
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        let named = LogOptions { container: Some("b".into()), ..Default::default() };
        assert_eq!(container_of(&pod, &named).expect("b"), "b");
        let wrong = LogOptions { container: Some("z".into()), ..Default::default() };
        assert_eq!(container_of(&pod, &wrong).expect_err("z").code(), 400);
    }
}
