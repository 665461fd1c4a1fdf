//! A host pod's status back in the tenant's words, and the status of a tenant pod whose host pod
//! was deleted under it.

use super::*;

/// A host pod, and the tenant pod it stands for, each as (namespace, name, uid).
pub type PodNames<'a> = (&'a str, &'a str, &'a str);

/// `text` (an event's or a status's message) about host pod `host` in tenant pod `tenant`'s
/// words: `namespace/name`, the kubelet's `name_namespace(uid)`, and the bare name.
pub fn tenant_words(text: &str, host: PodNames<'_>, tenant: PodNames<'_>) -> String {
    let ((hns, hname, huid), (ns, name, uid)) = (host, tenant);
    if hname.is_empty() || !text.contains(hname) {
        return text.to_owned();
    }
    text.replace(&format!("{hname}_{hns}({huid})"), &format!("{name}_{ns}({uid})"))
        .replace(&format!("{hns}/{hname}"), &format!("{ns}/{name}"))
        .replace(hname, name)
}

/// Every string in `value` in the tenant's words ([`tenant_words`]).
pub fn in_tenant_words(value: &mut Value, host: PodNames<'_>, tenant: PodNames<'_>) {
    match value {
        Value::String(s) => *s = tenant_words(s, host, tenant),
        Value::Array(items) => items.iter_mut().for_each(|v| in_tenant_words(v, host, tenant)),
        Value::Object(map) => map.values_mut().for_each(|v| in_tenant_words(v, host, tenant)),
        _ => {}
    }
}

/// The status the tenant pod should show for its host pod.
pub fn tenant_status(host: &Value) -> Value {
    let mut status = Map::new();
    for field in [
        "phase",
        "conditions",
        "message",
        "reason",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "startTime",
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
        "qosClass",
    ] {
        if let Some(v) = host.pointer(&format!("/status/{field}")) {
            status.insert(field.to_owned(), v.clone());
        }
    }
    Value::Object(status)
}

/// The status of a tenant pod whose host pod was deleted under it.
pub fn failed_status(previous: &Value, why: &str) -> Value {
    let mut status = previous.get("status").cloned().unwrap_or_else(|| json!({}));
    status["phase"] = json!("Failed");
    status["reason"] = json!("HostPodDeleted");
    status["message"] = json!(why);
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for c in conditions.iter_mut() {
            if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                c["status"] = json!("False");
                c["reason"] = json!("PodFailed");
            }
        }
    }
    status
}
