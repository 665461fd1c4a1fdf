//! Nodes (`nodes` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::{Node, NodeSpec};
use serde_json::{json, Value};

use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, definitions, name_cell, or_none, str_at, wide, AGE, NAME};
use crate::validation::Errors;

/// The `nodes` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Node", "nodes", "node", false, &["no"], NONE, STATUS, &Nodes);

/// The strategy for Nodes.
#[derive(Debug)]
pub struct Nodes;

impl Validate for Nodes {
    type Object = Node;

    fn validate_update(&self, old: &Node, new: &Node, e: &mut Errors) {
        let zero = NodeSpec::default();
        let old_spec = old.spec.as_ref().unwrap_or(&zero);
        let new_spec = new.spec.as_ref().unwrap_or(&zero);
        let (before, after) = (pod_cidrs(old_spec), pod_cidrs(new_spec));
        if !before.is_empty() {
            let message = "node updates may not change podCIDR except from \"\" to valid";
            if before.len() != after.len() {
                e.forbidden("spec.podCIDRs", message);
            } else {
                for (a, b) in before.iter().zip(&after) {
                    if a != b {
                        e.forbidden("spec.podCIDRs", message);
                    }
                }
            }
        }
        let provider = old_spec.provider_id.as_deref().unwrap_or_default();
        if !provider.is_empty() && provider != new_spec.provider_id.as_deref().unwrap_or_default() {
            e.forbidden(
                "spec.providerID",
                "node updates may not change providerID except from \"\" to valid",
            );
        }
    }
}

impl Strategy for Nodes {
    /// A kubelet registers its node with its status.
    fn keeps_status_on_create(&self) -> bool {
        true
    }

    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Node
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
                    NAME,
                    col("Status", "string", "The status of the node"),
                    col("Roles", "string", "The roles of the node"),
                    AGE,
                    col("Version", "string", "Kubelet Version reported by the node."),
                    wide("Internal-IP", "List of addresses reachable to the node. Queried from cloud provider, if available."),
                    wide("External-IP", "List of addresses reachable to the node. Queried from cloud provider, if available."),
                    wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
                    wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
                    wide("Container-Runtime", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
                ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        let ready = o
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| c["status"].as_str().unwrap_or(""));
        let mut status = match ready {
            Some("True") => "Ready".to_owned(),
            _ => "NotReady".to_owned(),
        };
        if o.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
            status.push_str(",SchedulingDisabled");
        }
        let roles: Vec<&str> = o
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
            .collect();
        let address = |kind: &str| {
            o.pointer("/status/addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|a| a["type"] == kind)
                .and_then(|a| a["address"].as_str())
                .unwrap_or("<none>")
                .to_owned()
        };
        vec![
            name,
            json!(status),
            json!(or_none(roles.join(","))),
            age,
            json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
            json!(address("InternalIP")),
            json!(address("ExternalIP")),
            json!(or_none(str_at(o, "/status/nodeInfo/osImage").into())),
            json!(or_none(str_at(o, "/status/nodeInfo/kernelVersion").into())),
            json!(or_none(str_at(o, "/status/nodeInfo/containerRuntimeVersion").into())),
        ]
    }
}

/// A Node's pod CIDRs: `podCIDRs`, else `podCIDR` alone.
fn pod_cidrs(spec: &NodeSpec) -> Vec<&str> {
    let list: Vec<&str> = spec.pod_cidrs.iter().flatten().map(String::as_str).collect();
    match (list.is_empty(), spec.pod_cidr.as_deref().unwrap_or_default()) {
        (true, one) if !one.is_empty() => vec![one],
        _ => list,
    }
}
