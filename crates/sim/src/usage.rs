//! What simulated pods and nodes use, as a kubelet's summary would measure it, for the resource
//! metrics API (`kubectl top`) of `carrel up`'s host. Nothing runs, so nothing is measured: a
//! running container uses what its pod's annotations say
//! ([`ANNOTATION_CPU_USAGE`], [`ANNOTATION_MEMORY_USAGE`]), else half of what it requests (1m
//! CPU and 4Mi of memory when it requests none), the same at every reading. Only the running
//! containers of Running pods use anything; a node uses what its system uses
//! ([`SYSTEM_CPU`], [`SYSTEM_MEMORY`]) and what its running pods use.
//!
//! Pure code over pods as JSON.

use std::time::Duration;

use carrel_machinery::quantity::Quantity;
use serde_json::Value;

use crate::kubelet::{ANNOTATION_CPU_USAGE, ANNOTATION_MEMORY_USAGE};

/// The window each reading covers.
pub const WINDOW: Duration = Duration::from_secs(10);
/// The CPU a node's system uses (the kubelet, the container runtime), whatever it runs.
pub const SYSTEM_CPU: &str = "100m";
/// The memory a node's system uses, whatever it runs.
pub const SYSTEM_MEMORY: &str = "256Mi";
/// The CPU a running container that requests none uses.
const IDLE_CPU: &str = "1m";
/// The memory a running container that requests none uses.
const IDLE_MEMORY: &str = "4Mi";

/// What a container, a pod or a node uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// CPU, in cores.
    pub cpu: Quantity,
    /// Memory, in bytes.
    pub memory: Quantity,
}

impl Usage {
    /// Nothing.
    pub const ZERO: Usage = Usage { cpu: Quantity::ZERO, memory: Quantity::ZERO };

    /// Add `other` to it.
    pub fn add(&mut self, other: &Usage) {
        self.cpu.add(&other.cpu);
        self.memory.add(&other.memory);
    }
}

/// What one running container uses.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUsage {
    /// The container's name.
    pub name: String,
    /// What it uses.
    pub usage: Usage,
}

/// A quantity written by the code here.
fn fixed(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or(Quantity::ZERO)
}

/// A quantity at `pointer` in `value`, if one is there and parses.
fn quantity_at(value: &Value, pointer: &str) -> Option<Quantity> {
    value.pointer(pointer).and_then(Value::as_str).and_then(Quantity::parse)
}

/// Whether container `name` of `pod` runs, by its status.
fn runs(pod: &Value, name: &str) -> bool {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|s| s["name"] == name && s["state"]["running"].is_object())
}

/// What each running container of `pod` uses, in the order of its spec; `None` unless the pod
/// is Running with at least one container running.
pub fn pod_usage(pod: &Value) -> Option<Vec<ContainerUsage>> {
    if pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running") {
        return None;
    }
    let annotations = pod.pointer("/metadata/annotations").unwrap_or(&Value::Null);
    let annotated =
        |key: &str| annotations.get(key).and_then(Value::as_str).and_then(Quantity::parse);
    let (cpu, memory) = (annotated(ANNOTATION_CPU_USAGE), annotated(ANNOTATION_MEMORY_USAGE));
    let containers: Vec<ContainerUsage> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let name = c["name"].as_str()?;
            if !runs(pod, name) {
                return None;
            }
            let requested = |resource: &str, idle: &str| {
                quantity_at(c, &format!("/resources/requests/{resource}"))
                    .map_or_else(|| fixed(idle), |q| q.divided(2))
            };
            let usage = Usage {
                cpu: cpu.unwrap_or_else(|| requested("cpu", IDLE_CPU)),
                // Memory in whole bytes, as a kubelet measures it.
                memory: memory.unwrap_or_else(|| requested("memory", IDLE_MEMORY)).round_up(),
            };
            Some(ContainerUsage { name: name.to_owned(), usage })
        })
        .collect();
    (!containers.is_empty()).then_some(containers)
}

/// What node `node` uses: its system's share and what its pods (of `pods`, those bound to it)
/// use.
pub fn node_usage<'a>(node: &str, pods: impl IntoIterator<Item = &'a Value>) -> Usage {
    let mut total = Usage { cpu: fixed(SYSTEM_CPU), memory: fixed(SYSTEM_MEMORY) };
    let on_node = pods
        .into_iter()
        .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node));
    for pod in on_node {
        for container in pod_usage(pod).into_iter().flatten() {
            total.add(&container.usage);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A pod on `node` in `phase`, its containers `(name, requests, running)`, with
    /// `annotations`.
    fn pod(
        node: &str,
        phase: &str,
        containers: &[(&str, Value, bool)],
        annotations: Value,
    ) -> Value {
        let specs: Vec<Value> = containers
            .iter()
            .map(|(name, requests, _)| json!({"name": name, "resources": {"requests": requests}}))
            .collect();
        let statuses: Vec<Value> = containers
            .iter()
            .map(|(name, _, running)| {
                let state = match running {
                    true => json!({"running": {"startedAt": "2025-01-01T00:00:00Z"}}),
                    false => json!({"waiting": {"reason": "ContainerCreating"}}),
                };
                json!({"name": name, "state": state})
            })
            .collect();
        json!({
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": {"nodeName": node, "containers": specs},
            "status": {"phase": phase, "containerStatuses": statuses},
        })
    }

    fn shown(usage: &[ContainerUsage]) -> Vec<(String, String, String)> {
        usage
            .iter()
            .map(|c| (c.name.clone(), c.usage.cpu.to_string(), c.usage.memory.to_string()))
            .collect()
    }

    fn row(name: &str, cpu: &str, memory: &str) -> (String, String, String) {
        (name.to_owned(), cpu.to_owned(), memory.to_owned())
    }

    #[test]
    fn a_running_container_uses_half_its_request_or_a_little_when_it_requests_nothing() {
        let p = pod(
            "n1",
            "Running",
            &[
                ("main", json!({"cpu": "1", "memory": "1Gi"}), true),
                ("sidecar", json!({"cpu": "250m"}), true),
                ("bare", json!({}), true),
            ],
            json!({}),
        );
        assert_eq!(
            shown(&pod_usage(&p).expect("running")),
            [row("main", "500m", "512Mi"), row("sidecar", "125m", "4Mi"), row("bare", "1m", "4Mi")]
        );
    }

    #[test]
    fn annotations_set_every_running_containers_usage() {
        let annotations = json!({ANNOTATION_CPU_USAGE: "250m", ANNOTATION_MEMORY_USAGE: "64Mi"});
        let p = pod(
            "n1",
            "Running",
            &[("a", json!({"cpu": "2"}), true), ("b", json!({}), true)],
            annotations,
        );
        assert_eq!(
            shown(&pod_usage(&p).expect("running")),
            [row("a", "250m", "64Mi"), row("b", "250m", "64Mi")]
        );
        // One annotation alone sets its resource; one that does not parse sets nothing.
        let annotations = json!({ANNOTATION_CPU_USAGE: "lots", ANNOTATION_MEMORY_USAGE: "1Gi"});
        let p = pod("n1", "Running", &[("a", json!({"cpu": "2"}), true)], annotations);
        assert_eq!(shown(&pod_usage(&p).expect("running")), [row("a", "1", "1Gi")]);
    }

    #[test]
    fn only_the_running_containers_of_running_pods_use_anything() {
        let containers = [("up", json!({"cpu": "1"}), true), ("down", json!({"cpu": "1"}), false)];
        let p = pod("n1", "Running", &containers, json!({}));
        assert_eq!(shown(&pod_usage(&p).expect("running")), [row("up", "500m", "4Mi")]);
        for phase in ["Pending", "Succeeded", "Failed"] {
            assert_eq!(pod_usage(&pod("n1", phase, &containers, json!({}))), None, "{phase}");
        }
        let none_running = [("down", json!({}), false)];
        assert_eq!(pod_usage(&pod("n1", "Running", &none_running, json!({}))), None);
    }

    #[test]
    fn a_node_uses_its_systems_share_and_its_running_pods_usage() {
        let annotated = json!({ANNOTATION_CPU_USAGE: "250m", ANNOTATION_MEMORY_USAGE: "64Mi"});
        let pods = [
            pod("n1", "Running", &[("a", json!({}), true)], annotated.clone()),
            pod(
                "n1",
                "Running",
                &[("b", json!({"cpu": "200m", "memory": "128Mi"}), true)],
                json!({}),
            ),
            pod("n1", "Pending", &[("c", json!({"cpu": "8"}), false)], json!({})),
            pod("n2", "Running", &[("d", json!({}), true)], annotated),
        ];
        let n1 = node_usage("n1", &pods);
        assert_eq!((n1.cpu.to_string(), n1.memory.to_string()), ("450m".into(), "384Mi".into()));
        let n2 = node_usage("n2", &pods);
        assert_eq!((n2.cpu.to_string(), n2.memory.to_string()), ("350m".into(), "320Mi".into()));
        let idle = node_usage("n3", &pods);
        assert_eq!(
            (idle.cpu.to_string(), idle.memory.to_string()),
            ("100m".into(), "256Mi".into())
        );
    }
}
