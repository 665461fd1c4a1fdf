//! Pods (`pods` in `v1`): how the API server serves them. The subresources that are not views
//! of the stored object are [`subresources`] (`binding`, `log`) and [`eviction`].

#[cfg(test)]
mod ephemeral_tests;
pub mod eviction;
#[cfg(test)]
mod eviction_tests;
pub mod subresources;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use crate::defaults::{default_pod_spec, object_at, requests_from_limits, set_default};
use crate::registry::{served, Strategy, Validate, ALL};
use crate::resource::{Action, ResourceType, Subresource};
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, definitions, name_cell, or_none, str_at, wide, AGE, NAME};
use crate::validation::{
    no_ephemeral_containers, pod_quantities, pod_spec, same, Errors, POD_UPDATE_FORBIDDEN,
};

/// The `pods` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Pod", "pods", "pod", true, &["po"], ALL, VIEWS, &Pods);

/// The views of a pod: its status, and its ephemeral containers.
const VIEWS: &[Subresource] = &[Subresource::EphemeralContainers, Subresource::Status];

/// The strategy for Pods.
#[derive(Debug)]
pub struct Pods;

/// The subresources a pod serves beside its views, as kube-apiserver's discovery lists them
/// (`proxy` is not served).
const ACTIONS: &[Action] = &[
    Action {
        name: "attach",
        group_version: None,
        kind: "PodAttachOptions",
        verbs: &["create", "get"],
    },
    Action { name: "binding", group_version: None, kind: "Binding", verbs: &["create"] },
    Action {
        name: "eviction",
        group_version: Some(("policy", "v1")),
        kind: "Eviction",
        verbs: &["create"],
    },
    Action { name: "exec", group_version: None, kind: "PodExecOptions", verbs: &["create", "get"] },
    Action { name: "log", group_version: None, kind: "Pod", verbs: &["get"] },
    Action {
        name: "portforward",
        group_version: None,
        kind: "PodPortForwardOptions",
        verbs: &["create", "get"],
    },
];

impl Validate for Pods {
    type Object = Pod;

    fn validate(&self, object: &Pod, e: &mut Errors) {
        pod_spec(object.spec.as_ref(), "spec", e);
    }

    fn validate_create(&self, object: &Pod, e: &mut Errors) {
        no_ephemeral_containers(object.spec.as_ref(), e);
    }

    fn validate_update(&self, old: &Pod, new: &Pod, e: &mut Errors) {
        pod_update(old.spec.as_ref(), new.spec.as_ref(), e);
    }

    fn quantities<'a>(&self, object: &'a Pod, found: &mut Vec<&'a Quantity>) {
        pod_quantities(object.spec.as_ref(), found);
    }
}

impl Strategy for Pods {
    fn mutate_create(&self, api: &crate::Api, object: &mut Value) -> crate::ApiResult<()> {
        crate::admission::limit_ranges::admit_pod(api, object)
    }

    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Pod
    }

    fn is_pod(&self) -> bool {
        true
    }

    fn actions(&self) -> &'static [Action] {
        ACTIONS
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            default_pod_spec(spec);
            requests_from_limits(spec);
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn create_defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            if spec.get("serviceAccountName").is_none() {
                spec.insert("serviceAccountName".into(), json!("default"));
                spec.insert("serviceAccount".into(), json!("default"));
            }
            set_default(spec, "priority", json!(0));
            set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
        }
        let qos = qos_class(object);
        object["status"] = json!({"phase": "Pending", "qosClass": qos});
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
                    NAME,
                    col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
                    col("Status", "string", "The aggregate status of the containers in this pod."),
                    col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
                    AGE,
                    wide("IP", "IP address allocated to the pod. Routable at least within the cluster."),
                    wide("Node", "NodeName is a request to schedule this pod onto a specific node."),
                    wide("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node."),
                    wide("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness."),
                ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        let statuses = o.pointer("/status/containerStatuses").and_then(Value::as_array);
        let total = o.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
        let ready = statuses
            .map_or(0, |s| s.iter().filter(|c| c.get("ready") == Some(&Value::Bool(true))).count());
        let restarts: i64 = statuses.map_or(0, |s| {
            s.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum()
        });
        let mut phase = str_at(o, "/status/phase").to_owned();
        if o.pointer("/metadata/deletionTimestamp").is_some() {
            phase = "Terminating".into();
        } else if let Some(reason) = o.pointer("/status/reason").and_then(Value::as_str) {
            phase = reason.into();
        }
        let gates = o.pointer("/spec/readinessGates").and_then(Value::as_array).map_or(0, Vec::len);
        vec![
            name,
            json!(format!("{ready}/{total}")),
            json!(phase),
            json!(restarts.to_string()),
            age,
            json!(or_none(str_at(o, "/status/podIP").into())),
            json!(or_none(str_at(o, "/spec/nodeName").into())),
            json!(or_none(str_at(o, "/status/nominatedNodeName").into())),
            json!(if gates == 0 { "<none>".to_string() } else { format!("0/{gates}") }),
        ]
    }
}

/// The pod update rule: only images (and a few fields this server does not track) may change.
fn pod_update(old: Option<&PodSpec>, new: Option<&PodSpec>, e: &mut Errors) {
    let zero = PodSpec::default();
    let (old, new) = (old.unwrap_or(&zero), new.unwrap_or(&zero));
    let unimaged = |list: &[Container]| -> Vec<Container> {
        list.iter().map(|c| Container { image: None, ..c.clone() }).collect()
    };
    let init = |spec: &PodSpec| unimaged(spec.init_containers.as_deref().unwrap_or_default());
    let changed = unimaged(&old.containers) != unimaged(&new.containers)
        || init(old) != init(new)
        || (old.node_name.is_some() && !same(old.node_name.as_ref(), new.node_name.as_ref()))
        || !same(old.volumes.as_ref(), new.volumes.as_ref())
        || !same(old.restart_policy.as_ref(), new.restart_policy.as_ref());
    if changed {
        e.forbidden("spec", POD_UPDATE_FORBIDDEN);
    }
}

/// The pod's QoS class from its containers' requests and limits.
fn qos_class(pod: &Value) -> &'static str {
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        return "BestEffort";
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let requests = c.pointer("/resources/requests").and_then(Value::as_object);
        let limits = c.pointer("/resources/limits").and_then(Value::as_object);
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource));
            let request = requests.and_then(|r| r.get(resource)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
