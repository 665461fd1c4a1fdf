//! Pod specs and pod templates, shared by pods and every workload kind.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EphemeralContainer, PodSpec, PodTemplateSpec,
};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{annotations, container_resources, labels, Errors};

/// `InclusiveRangeError(1, 65535)`.
pub(crate) const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";

/// `ValidatePodTemplateSpec` at `path`.
pub(crate) fn pod_template(template: Option<&PodTemplateSpec>, path: &str, e: &mut Errors) {
    let meta = template.and_then(|t| t.metadata.as_ref());
    labels(meta.and_then(|m| m.labels.as_ref()), &format!("{path}.labels"), e);
    annotations(meta.and_then(|m| m.annotations.as_ref()), &format!("{path}.annotations"), e);
    let spec = template.and_then(|t| t.spec.as_ref());
    pod_spec(spec, &format!("{path}.spec"), e);
    if spec.is_some_and(|s| s.ephemeral_containers.as_ref().is_some_and(|l| !l.is_empty())) {
        e.forbidden(
            &format!("{path}.spec.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        );
    }
}

/// What kube-apiserver says of a pod update that changes more than it may.
pub(crate) const POD_UPDATE_FORBIDDEN: &str =
    "pod updates may not change fields other than `spec.containers[*].image`, \
     `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, \
     `spec.tolerations` (only additions to existing tolerations), \
     `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was \
     previously negative)";

/// A new pod may not come with ephemeral containers: they are added to a running pod, through
/// its `ephemeralcontainers` subresource.
pub(crate) fn no_ephemeral_containers(spec: Option<&PodSpec>, e: &mut Errors) {
    if spec.is_some_and(|s| s.ephemeral_containers.as_ref().is_some_and(|l| !l.is_empty())) {
        e.forbidden("spec.ephemeralContainers", "cannot be set on create");
    }
}

/// The rule on a pod update's ephemeral containers (`old` and `new`, from the stored and the
/// updated pod): through the `ephemeralcontainers` subresource (`through_subresource`) they may
/// only be added to, never removed or changed; through the pod itself they may not change at all.
pub(crate) fn ephemeral_containers_update(
    old: &[EphemeralContainer],
    new: &[EphemeralContainer],
    through_subresource: bool,
    e: &mut Errors,
) {
    if old == new {
        return;
    }
    if !through_subresource {
        e.forbidden("spec", POD_UPDATE_FORBIDDEN);
        return;
    }
    for container in old {
        let name = quote(&container.name);
        match new.iter().find(|c| c.name == container.name) {
            None => e.forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers {name} may not be removed"),
            ),
            Some(now) if now != container => e.forbidden(
                "spec.ephemeralContainers",
                &format!("existing ephemeral containers {name} may not be changed"),
            ),
            Some(_) => {}
        }
    }
}

/// `validateEphemeralContainers`: each one a valid container, named uniquely among all the pod's
/// containers (`taken`), setting none of [`EPHEMERAL_FORBIDDEN`] nor a `subPath`, and targeting
/// (when it names one) a container of the pod.
fn ephemeral_containers(
    list: &[EphemeralContainer],
    spec: &PodSpec,
    taken: &HashSet<&str>,
    volumes: &HashSet<&str>,
    path: &str,
    e: &mut Errors,
) {
    let mut seen = HashSet::new();
    for (i, ec) in list.iter().enumerate() {
        let cpath = format!("{path}.ephemeralContainers[{i}]");
        let nonempty = |l: Option<usize>| l.is_some_and(|n| n > 0);
        let resources = ec.resources.as_ref().is_some_and(|r| {
            nonempty(r.limits.as_ref().map(|m| m.len()))
                || nonempty(r.requests.as_ref().map(|m| m.len()))
                || nonempty(r.claims.as_ref().map(Vec::len))
        });
        let set = [
            ("ports", nonempty(ec.ports.as_ref().map(Vec::len))),
            ("livenessProbe", ec.liveness_probe.is_some()),
            ("readinessProbe", ec.readiness_probe.is_some()),
            ("startupProbe", ec.startup_probe.is_some()),
            ("lifecycle", ec.lifecycle.is_some()),
            ("resources", resources),
            ("resizePolicy", nonempty(ec.resize_policy.as_ref().map(Vec::len))),
            ("restartPolicy", ec.restart_policy.is_some()),
        ];
        for (field, _) in set.iter().filter(|(_, set)| *set) {
            e.forbidden(&format!("{cpath}.{field}"), "cannot be set for an Ephemeral Container");
        }
        for (j, mount) in ec.volume_mounts.iter().flatten().enumerate() {
            if mount.sub_path.as_deref().is_some_and(|p| !p.is_empty()) {
                e.forbidden(
                    &format!("{cpath}.volumeMounts[{j}].subPath"),
                    "cannot be set for an Ephemeral Container",
                );
            }
        }
        // Its common fields are a container's.
        let common = Container {
            name: ec.name.clone(),
            image: ec.image.clone(),
            termination_message_policy: ec.termination_message_policy.clone(),
            env: ec.env.clone(),
            env_from: ec.env_from.clone(),
            volume_mounts: ec.volume_mounts.clone(),
            image_pull_policy: ec.image_pull_policy.clone(),
            ..Container::default()
        };
        container(&common, &cpath, volumes, e);
        let name = ec.name.as_str();
        if taken.contains(name) || !seen.insert(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        }
        if let Some(target) = ec.target_container_name.as_deref().filter(|t| !t.is_empty()) {
            let in_pod = spec.containers.iter().chain(spec.init_containers.iter().flatten());
            if !in_pod.clone().any(|c| c.name == target) {
                e.not_found(&format!("{cpath}.targetContainerName"), &quote(target));
            }
        }
    }
}

/// The parts of `ValidatePodSpec` users meet most.
pub(crate) fn pod_spec(spec: Option<&PodSpec>, path: &str, e: &mut Errors) {
    let zero = PodSpec::default();
    let spec = spec.unwrap_or(&zero);
    // Volumes: named, uniquely, with DNS labels.
    let mut volumes = HashSet::new();
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let name_path = format!("{path}.volumes[{i}].name");
        let name = volume.name.as_str();
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
    let containers = &spec.containers;
    let mut taken = HashSet::new();
    if containers.is_empty() {
        e.required(&format!("{path}.containers"), "");
    }
    for (i, c) in containers.iter().enumerate() {
        let cpath = format!("{path}.containers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = c.name.as_str();
        if !taken.insert(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        }
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let cpath = format!("{path}.initContainers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = c.name.as_str();
        if taken.contains(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        } else if !name.is_empty() {
            taken.insert(name);
        }
    }

    if let Some(list) = spec.ephemeral_containers.as_deref().filter(|l| !l.is_empty()) {
        ephemeral_containers(list, spec, &taken, &volumes, path, e);
    }

    match spec.restart_policy.as_deref().unwrap_or_default() {
        "Always" | "OnFailure" | "Never" => {}
        "" => e.required(&format!("{path}.restartPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.restartPolicy"),
            &quote(other),
            &["Always", "OnFailure", "Never"],
        ),
    }
    match spec.dns_policy.as_deref().unwrap_or_default() {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => e.required(&format!("{path}.dnsPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.dnsPolicy"),
            &quote(other),
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        ),
    }
    labels(spec.node_selector.as_ref(), &format!("{path}.nodeSelector"), e);
    let account = spec.service_account_name.as_deref().unwrap_or_default();
    if !account.is_empty() {
        e.invalid_each(
            &format!("{path}.serviceAccountName"),
            account,
            names::dns1123_subdomain(account),
        );
    }
}

/// `validateContainerCommon`, in part.
pub(crate) fn container(c: &Container, path: &str, volumes: &HashSet<&str>, e: &mut Errors) {
    let name = c.name.as_str();
    if name.is_empty() {
        e.required(&format!("{path}.name"), "");
    } else {
        e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
    }
    if c.image.as_deref().unwrap_or_default().is_empty() {
        e.required(&format!("{path}.image"), "");
    }
    match c.termination_message_policy.as_deref().unwrap_or_default() {
        "File" | "FallbackToLogsOnError" => {}
        "" => e.required(&format!("{path}.terminationMessagePolicy"), ""),
        other => e.not_supported(
            &format!("{path}.terminationMessagePolicy"),
            &quote(other),
            &["File", "FallbackToLogsOnError"],
        ),
    }
    let ports = c.ports.as_deref().unwrap_or_default();
    container_ports(ports, &format!("{path}.ports"), e);
    for (i, var) in c.env.iter().flatten().enumerate() {
        let name_path = format!("{path}.env[{i}].name");
        let name = var.name.as_str();
        if name.is_empty() {
            e.required(&name_path, "");
        }
        e.invalid_each(&name_path, name, names::env_var_name(name));
    }
    for (i, from) in c.env_from.iter().flatten().enumerate() {
        let prefix = from.prefix.as_deref().unwrap_or_default();
        if !prefix.is_empty() {
            let prefix_path = format!("{path}.envFrom[{i}].prefix");
            e.invalid_each(&prefix_path, prefix, names::env_var_name(prefix));
        }
    }
    let mut mount_points = HashSet::new();
    for (i, mount) in c.volume_mounts.iter().flatten().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        let name = mount.name.as_str();
        if name.is_empty() {
            e.required(&format!("{mpath}.name"), "");
        }
        if !volumes.contains(name) {
            e.not_found(&format!("{mpath}.name"), &quote(name));
        }
        let mount_path = mount.mount_path.as_str();
        if mount_path.is_empty() {
            e.required(&format!("{mpath}.mountPath"), "");
        }
        if !mount_points.insert(mount_path) {
            e.invalid(&format!("{mpath}.mountPath"), &quote(mount_path), "must be unique");
        }
    }
    match c.image_pull_policy.as_deref().unwrap_or_default() {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => e.required(&format!("{path}.imagePullPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.imagePullPolicy"),
            &quote(other),
            &["Always", "IfNotPresent", "Never"],
        ),
    }
    container_resources(c.resources.as_ref(), &format!("{path}.resources"), e);
}

/// `validateContainerPorts`.
pub(crate) fn container_ports(ports: &[ContainerPort], path: &str, e: &mut Errors) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let ppath = format!("{path}[{i}]");
        let name = port.name.as_deref().unwrap_or_default();
        if !name.is_empty() {
            let problems = names::port_name(name);
            if !problems.is_empty() {
                e.invalid_each(&format!("{ppath}.name"), name, problems);
            } else if !names.insert(name) {
                e.duplicate(&format!("{ppath}.name"), &quote(name));
            }
        }
        match port.container_port {
            0 => e.required(&format!("{ppath}.containerPort"), ""),
            n if !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.containerPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        match port.host_port.unwrap_or(0) {
            n if n != 0 && !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.hostPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        protocol(port.protocol.as_deref(), &ppath, e);
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
pub(crate) fn always_restarts(template: Option<&PodTemplateSpec>, kind: &str, e: &mut Errors) {
    let pod = template.and_then(|t| t.spec.as_ref());
    let restart = pod.and_then(|p| p.restart_policy.as_deref()).unwrap_or_default();
    if restart != "Always" {
        e.not_supported("spec.template.spec.restartPolicy", &quote(restart), &["Always"]);
    }
    if pod.is_some_and(|p| p.active_deadline_seconds.is_some()) {
        e.forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        );
    }
}
