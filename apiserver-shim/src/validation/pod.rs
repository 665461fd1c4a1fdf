//! Pod specs and pod templates, shared by pods and every workload kind.

use serde_json::Value;
use std::collections::HashSet;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{
    annotations_value, at, container_resources, field, items, labels_value, text, Errors,
};

/// `InclusiveRangeError(1, 65535)`.
pub(crate) const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// `ValidatePodTemplateSpec` at `path`.
pub(crate) fn pod_template(template: &Value, path: &str, e: &mut Errors) {
    let meta = at(template, "metadata");
    labels_value(meta.get("labels"), &format!("{path}.labels"), e);
    annotations_value(meta.get("annotations"), &format!("{path}.annotations"), e);
    pod_spec(at(template, "spec"), &format!("{path}.spec"), e);
}

/// The parts of `ValidatePodSpec` users meet most.
pub(crate) fn pod_spec(spec: &Value, path: &str, e: &mut Errors) {
    // Volumes: named, uniquely, with DNS labels.
    let mut volumes = HashSet::new();
    for (i, volume) in items(spec, "volumes").iter().enumerate() {
        let name_path = format!("{path}.volumes[{i}].name");
        let name = text(volume, "name");
        let problems = names::dns1123_label(name);
        if name.is_empty() {
            e.required(&name_path, "");
        } else {
            e.invalid_each(&name_path, name, problems.clone());
        }
        if volumes.contains(name) {
            e.duplicate(&name_path, &quote(name));
        } else if problems.is_empty() {
            volumes.insert(name);
        }
    }

    // Containers, then init containers; names unique across both.
    let containers = items(spec, "containers");
    let mut taken = HashSet::new();
    if containers.is_empty() {
        e.required(&format!("{path}.containers"), "");
    }
    for (i, c) in containers.iter().enumerate() {
        let cpath = format!("{path}.containers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = text(c, "name");
        if !taken.insert(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        }
    }
    for (i, c) in items(spec, "initContainers").iter().enumerate() {
        let cpath = format!("{path}.initContainers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = text(c, "name");
        if taken.contains(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        } else if !name.is_empty() {
            taken.insert(name);
        }
    }

    let restart = text(spec, "restartPolicy");
    match restart {
        "Always" | "OnFailure" | "Never" => {}
        "" => e.required(&format!("{path}.restartPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.restartPolicy"),
            &quote(other),
            &["Always", "OnFailure", "Never"],
        ),
    }
    match text(spec, "dnsPolicy") {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => e.required(&format!("{path}.dnsPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.dnsPolicy"),
            &quote(other),
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        ),
    }
    labels_value(spec.get("nodeSelector"), &format!("{path}.nodeSelector"), e);
    let account = text(spec, "serviceAccountName");
    if !account.is_empty() {
        e.invalid_each(
            &format!("{path}.serviceAccountName"),
            account,
            names::dns1123_subdomain(account),
        );
    }
}

/// `validateContainerCommon`, in part.
pub(crate) fn container(c: &Value, path: &str, volumes: &HashSet<&str>, e: &mut Errors) {
    let name = text(c, "name");
    if name.is_empty() {
        e.required(&format!("{path}.name"), "");
    } else {
        e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
    }
    if text(c, "image").is_empty() {
        e.required(&format!("{path}.image"), "");
    }
    match text(c, "terminationMessagePolicy") {
        "File" | "FallbackToLogsOnError" => {}
        "" => e.required(&format!("{path}.terminationMessagePolicy"), ""),
        other => e.not_supported(
            &format!("{path}.terminationMessagePolicy"),
            &quote(other),
            &["File", "FallbackToLogsOnError"],
        ),
    }
    container_ports(items(c, "ports"), &format!("{path}.ports"), e);
    for (i, var) in items(c, "env").iter().enumerate() {
        let name_path = format!("{path}.env[{i}].name");
        let name = text(var, "name");
        if name.is_empty() {
            e.required(&name_path, "");
        }
        e.invalid_each(&name_path, name, names::env_var_name(name));
    }
    for (i, from) in items(c, "envFrom").iter().enumerate() {
        let prefix = text(from, "prefix");
        if !prefix.is_empty() {
            let prefix_path = format!("{path}.envFrom[{i}].prefix");
            e.invalid_each(&prefix_path, prefix, names::env_var_name(prefix));
        }
    }
    let mut mount_points = HashSet::new();
    for (i, mount) in items(c, "volumeMounts").iter().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        let name = text(mount, "name");
        if name.is_empty() {
            e.required(&format!("{mpath}.name"), "");
        }
        if !volumes.contains(name) {
            e.not_found(&format!("{mpath}.name"), &quote(name));
        }
        let mount_path = text(mount, "mountPath");
        if mount_path.is_empty() {
            e.required(&format!("{mpath}.mountPath"), "");
        }
        if !mount_points.insert(mount_path) {
            e.invalid(&format!("{mpath}.mountPath"), &quote(mount_path), "must be unique");
        }
    }
    match text(c, "imagePullPolicy") {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => e.required(&format!("{path}.imagePullPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.imagePullPolicy"),
            &quote(other),
            &["Always", "IfNotPresent", "Never"],
        ),
    }
    container_resources(at(c, "resources"), &format!("{path}.resources"), e);
}

/// `validateContainerPorts`.
pub(crate) fn container_ports(ports: &[Value], path: &str, e: &mut Errors) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let ppath = format!("{path}[{i}]");
        let name = text(port, "name");
        if !name.is_empty() {
            let problems = names::port_name(name);
            if !problems.is_empty() {
                e.invalid_each(&format!("{ppath}.name"), name, problems);
            } else if !names.insert(name) {
                e.duplicate(&format!("{ppath}.name"), &quote(name));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64).unwrap_or(0) {
            0 => e.required(&format!("{ppath}.containerPort"), ""),
            n if !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.containerPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        match port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) {
            n if n != 0 && !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.hostPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        protocol(port.get("protocol").and_then(Value::as_str), &ppath, e);
    }
}

/// A port's protocol: required, and one of SCTP, TCP, UDP.
pub(crate) fn protocol(protocol: Option<&str>, path: &str, e: &mut Errors) {
    match protocol.unwrap_or_default() {
        "TCP" | "UDP" | "SCTP" => {}
        "" => e.required(&format!("{path}.protocol"), ""),
        other => {
            e.not_supported(&format!("{path}.protocol"), &quote(other), &["SCTP", "TCP", "UDP"])
        }
    }
}

/// The controllers whose pods run forever: restartPolicy Always, no activeDeadlineSeconds.
pub(crate) fn always_restarts(spec: &Value, kind: &str, e: &mut Errors) {
    let pod = at(at(spec, "template"), "spec");
    let restart = text(pod, "restartPolicy");
    if restart != "Always" {
        e.not_supported("spec.template.spec.restartPolicy", &quote(restart), &["Always"]);
    }
    if field(pod, "activeDeadlineSeconds").is_some() {
        e.forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        );
    }
}
