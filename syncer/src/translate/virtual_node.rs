//! The tenant's view of a host node (a virtual node), what of it the tenant is shown, and the
//! merge patches that bring one in line.

use super::*;

/// The tenant's view of host node `host_node`: its name, its hostname and GPU product labels, its
/// CPU, memory and pod capacity, and as GPU resources the tenant's own quota only.
///
/// It is cordoned when the host node is (marked [`host_names::ANNOTATION_HOST_UNSCHEDULABLE`])
/// or when the tenant cordoned it itself (`tenant_cordoned`, as [`tenant_cordoned`] reads it),
/// with the `node.kubernetes.io/unschedulable:NoSchedule` taint a cordoned node carries.
pub fn virtual_node(
    host_node: &Value,
    quota: &BTreeMap<String, i64>,
    tenant_cordoned: bool,
) -> Value {
    let name = host_node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let mut labels = Map::new();
    for (k, v) in
        host_node.pointer("/metadata/labels").and_then(Value::as_object).into_iter().flatten()
    {
        if k.starts_with("kubernetes.io/")
            || k.starts_with("node.kubernetes.io/instance-type")
            || k.starts_with("topology.kubernetes.io/")
            || k == "nvidia.com/gpu.product"
        {
            labels.insert(k.clone(), v.clone());
        }
    }
    labels.insert(host_names::LABEL_VIRTUAL_NODE.to_owned(), json!("true"));
    let mut resources = Map::new();
    for key in ["cpu", "memory", "pods", "ephemeral-storage"] {
        if let Some(v) = host_node.pointer(&format!("/status/allocatable/{key}")) {
            resources.insert(key.to_owned(), v.clone());
        }
    }
    for (profile, n) in quota {
        resources.insert(carrel_gpu::resource_name(profile), json!(n.to_string()));
    }
    let ready = host_node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap_or_else(|| json!({"type": "Ready", "status": "Unknown"}));
    let mut spec = Map::new();
    let mut taints: Vec<Value> =
        host_node.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
    let host_cordoned = host_node.pointer("/spec/unschedulable") == Some(&json!(true));
    let mut annotations = Map::new();
    if host_cordoned {
        annotations.insert(host_names::ANNOTATION_HOST_UNSCHEDULABLE.to_owned(), json!("true"));
    }
    if host_cordoned || tenant_cordoned {
        spec.insert("unschedulable".to_owned(), json!(true));
        if !taints.iter().any(|t| t["key"] == carrel_gpu::fit::TAINT_UNSCHEDULABLE) {
            taints
                .push(json!({"key": carrel_gpu::fit::TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}));
        }
    }
    if !taints.is_empty() {
        spec.insert("taints".to_owned(), Value::Array(taints));
    }
    let mut status = json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [ready],
        "nodeInfo": host_node.pointer("/status/nodeInfo").cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(addresses) = host_node.pointer("/status/addresses") {
        status["addresses"] = addresses.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": status,
    })
}

/// Whether the tenant cordoned virtual node `node` itself (`kubectl cordon`, `kubectl drain`):
/// it is unschedulable, and not because its host node is.
pub fn tenant_cordoned(node: &Value) -> bool {
    node.pointer("/spec/unschedulable") == Some(&json!(true))
        && node
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(host_names::ANNOTATION_HOST_UNSCHEDULABLE))
            .is_none()
}

/// What a tenant sees of virtual node `node` (as [`virtual_node`] makes it), less what changes
/// with every heartbeat: two virtual nodes that show the same need no write between them.
pub fn virtual_node_shown(node: &Value) -> Value {
    let mut shown = node.clone();
    if let Some(conditions) = shown.pointer_mut("/status/conditions").and_then(Value::as_array_mut)
    {
        for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
            c.remove("lastHeartbeatTime");
        }
    }
    shown
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: members that changed, `null`
/// for members `new` lacks; arrays and scalars are replaced whole.
pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(was) if was == v => {}
                    Some(was @ Value::Object(_)) if v.is_object() => {
                        patch.insert(k.clone(), merge_patch(was, v));
                    }
                    _ => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}
