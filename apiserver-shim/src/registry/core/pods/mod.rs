//! Pods (`pods` in `v1`): how the API server serves them. The subresources that are not views
//! of the stored object (`binding`, `log`) are [`subresources`].

pub mod subresources;

use serde_json::{json, Value};

use crate::defaults::{default_pod_spec, object_at, requests_from_limits, set_default};
use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, definitions, name_cell, or_none, str_at, wide, AGE, NAME};
use crate::validation::{at, field, pod_spec, semantic_eq, Errors};

/// The `pods` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Pod", "pods", "pod", true, &["po"], ALL, STATUS, &Pods);

/// The strategy for Pods.
#[derive(Debug)]
pub struct Pods;

impl crate::registry::form::Validate for Pods {
    type Object = k8s_openapi::api::core::v1::Pod;
}

impl Strategy for Pods {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Pod
    }

    fn is_pod(&self) -> bool {
        true
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        pod_spec(at(object, "spec"), "spec", e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        pod_update(at(old, "spec"), at(new, "spec"), e);
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
fn pod_update(old: &Value, new: &Value, e: &mut Errors) {
    let without_images = |v: Option<&Value>| {
        let mut v = v.cloned();
        if let Some(list) = v.as_mut().and_then(Value::as_array_mut) {
            for c in list.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("image");
            }
        }
        v
    };
    for key in ["containers", "initContainers", "nodeName", "volumes", "restartPolicy"] {
        if key == "nodeName" && field(old, key).is_none() {
            continue;
        }
        let (before, after) = if key.ends_with("ontainers") {
            (without_images(old.get(key)), without_images(new.get(key)))
        } else {
            (old.get(key).cloned(), new.get(key).cloned())
        };
        if !semantic_eq(before.as_ref(), after.as_ref()) {
            e.forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`, \
                 `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, \
                 `spec.tolerations` (only additions to existing tolerations), \
                 `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was \
                 previously negative)",
            );
            return;
        }
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
