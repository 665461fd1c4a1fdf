//! The Pod Security Standards (`baseline` and `restricted`, latest version) as the PodSecurity
//! admission plugin applies them, plus what Carrel refuses at every level: environment variables
//! that steer the GPU runtime or the dynamic loader (`NVIDIA_*`, `LD_*`; see
//! [`carrel_gpu::runtime_env`]), whether set in `env`, made by an `envFrom` prefix or read from
//! an `envFrom` source, in any container (regular, init, sidecar, ephemeral).
//!
//! [`check`] returns the violations in the plugin's order and words; [`forbidden_message`] joins
//! them as kube-apiserver does (`violates PodSecurity "baseline:latest": …`). This is the one place
//! where a tenant's pod is checked before anything of it can reach the host.

use carrel_gpu::runtime_env::{prefix_may_steer, steers_runtime};
use serde_json::Value;

/// A Pod Security Standard level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// No known privilege escalations.
    Baseline,
    /// Hardened, current best practice.
    Restricted,
}

impl Level {
    /// The level named `name` (`baseline`, `restricted`).
    pub fn parse(name: &str) -> Option<Level> {
        match name {
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// One broken rule: the check's name and what breaks it (`privileged`, `container "c" must not
/// set securityContext.privileged=true`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The check, as the PodSecurity plugin names it.
    pub check: &'static str,
    /// The offending fields.
    pub detail: String,
}

/// Capabilities a baseline container may add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls the baseline level allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Volume types the restricted level allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// SELinux types the baseline level allows.
const SELINUX_TYPES: &[&str] =
    &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

/// A container of the pod and the field list it sits in.
struct Container<'a> {
    name: &'a str,
    spec: &'a Value,
}

fn containers(spec: &Value) -> Vec<Container<'_>> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|field| spec.get(*field).and_then(Value::as_array))
        .flatten()
        .map(|c| Container { name: c["name"].as_str().unwrap_or(""), spec: c })
        .collect()
}

/// `container "a"` or `containers "a", "b"`.
fn named(kind: &str, names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let plural = if names.len() == 1 { "" } else { "s" };
    format!("{kind}{plural} {}", quoted.join(", "))
}

fn must(names: &[String], verb_singular: &str, verb_plural: &str, what: &str) -> String {
    let verb = if names.len() == 1 { verb_singular } else { verb_plural };
    format!("{} {verb} {what}", named("container", names))
}

/// Every rule the pod breaks at `level`, in the PodSecurity plugin's order, followed by Carrel's
/// own rules.
pub fn check(level: Level, pod: &Value) -> Vec<Violation> {
    let spec = &pod["spec"];
    let all = containers(spec);
    let sc = |c: &Container<'_>, field: &str| {
        c.spec.pointer(&format!("/securityContext/{field}")).cloned()
    };
    let pod_sc = |field: &str| spec.pointer(&format!("/securityContext/{field}")).cloned();
    let mut out = Vec::new();
    let mut push = |check: &'static str, detail: String| out.push(Violation { check, detail });

    // Baseline.
    let host_process: Vec<String> = all
        .iter()
        .filter(|c| sc(c, "windowsOptions/hostProcess") == Some(Value::Bool(true)))
        .map(|c| c.name.to_owned())
        .collect();
    if pod_sc("windowsOptions/hostProcess") == Some(Value::Bool(true)) || !host_process.is_empty() {
        push(
            "hostProcess",
            "pod or containers must not set securityContext.windowsOptions.hostProcess=true".into(),
        );
    }
    let namespaces: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|f| spec[**f] == Value::Bool(true))
        .map(|f| format!("{f}=true"))
        .collect();
    if !namespaces.is_empty() {
        push("host namespaces", namespaces.join(", "));
    }
    let privileged: Vec<String> = all
        .iter()
        .filter(|c| sc(c, "privileged") == Some(Value::Bool(true)))
        .map(|c| c.name.to_owned())
        .collect();
    if !privileged.is_empty() {
        push(
            "privileged",
            must(&privileged, "must not set", "must not set", "securityContext.privileged=true"),
        );
    }
    let mut added: Vec<String> = Vec::new();
    let mut adders: Vec<String> = Vec::new();
    for c in &all {
        let caps = sc(c, "capabilities/add");
        let bad: Vec<String> = caps
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|cap| !BASELINE_CAPABILITIES.contains(cap))
            .map(str::to_owned)
            .collect();
        if !bad.is_empty() {
            adders.push(c.name.to_owned());
            for cap in bad {
                if !added.contains(&cap) {
                    added.push(cap);
                }
            }
        }
    }
    if !adders.is_empty() {
        let caps: Vec<String> = added.iter().map(|c| format!("{c:?}")).collect();
        push(
            "non-default capabilities",
            must(
                &adders,
                "must not include",
                "must not include",
                &format!("{} in securityContext.capabilities.add", caps.join(", ")),
            ),
        );
    }
    let host_paths: Vec<String> = volumes(spec)
        .filter(|v| v.get("hostPath").is_some())
        .map(|v| v["name"].as_str().unwrap_or("").to_owned())
        .collect();
    if !host_paths.is_empty() {
        push("hostPath volumes", named("volume", &host_paths));
    }
    let mut ports: Vec<String> = Vec::new();
    let mut port_users: Vec<String> = Vec::new();
    for c in &all {
        let used: Vec<String> = c.spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["hostPort"].as_i64())
            .filter(|p| *p != 0)
            .map(|p| p.to_string())
            .collect();
        if !used.is_empty() {
            port_users.push(c.name.to_owned());
            ports.extend(used);
        }
    }
    if !port_users.is_empty() {
        push(
            "hostPort",
            format!(
                "{} {} hostPort {}",
                named("container", &port_users),
                if port_users.len() == 1 { "uses" } else { "use" },
                ports.join(", ")
            ),
        );
    }
    let apparmor_bad =
        |v: Option<Value>| v.as_ref().and_then(|p| p["type"].as_str()) == Some("Unconfined");
    let unconfined_annotations: Vec<String> = pod["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !matches!(v.as_str(), Some("runtime/default") | Some("") | None)
                && !v.as_str().is_some_and(|s| s.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if apparmor_bad(pod_sc("appArmorProfile"))
        || all.iter().any(|c| apparmor_bad(sc(c, "appArmorProfile")))
        || !unconfined_annotations.is_empty()
    {
        push(
            "appArmorProfile",
            "pod or containers must not set an Unconfined AppArmor profile".into(),
        );
    }
    let selinux_bad = |v: Option<Value>| {
        v.is_some_and(|o| {
            !SELINUX_TYPES.contains(&o["type"].as_str().unwrap_or(""))
                || o.get("user").is_some()
                || o.get("role").is_some()
        })
    };
    if selinux_bad(pod_sc("seLinuxOptions"))
        || all.iter().any(|c| selinux_bad(sc(c, "seLinuxOptions")))
    {
        push("seLinuxOptions", "pod or containers must not set seLinuxOptions user, role or a type outside the container types".into());
    }
    let proc_mount: Vec<String> = all
        .iter()
        .filter(|c| {
            sc(c, "procMount")
                .and_then(|v| v.as_str().map(str::to_owned))
                .is_some_and(|m| m != "Default")
        })
        .map(|c| c.name.to_owned())
        .collect();
    if !proc_mount.is_empty() {
        push(
            "procMount",
            must(&proc_mount, "must not set", "must not set", "securityContext.procMount"),
        );
    }
    let unconfined =
        |v: Option<Value>| v.as_ref().and_then(|p| p["type"].as_str()) == Some("Unconfined");
    if unconfined(pod_sc("seccompProfile"))
        || all.iter().any(|c| unconfined(sc(c, "seccompProfile")))
    {
        push(
            "seccompProfile",
            "pod or containers must not set securityContext.seccompProfile.type to \"Unconfined\""
                .into(),
        );
    }
    let sysctls: Vec<String> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .map(str::to_owned)
        .collect();
    if !sysctls.is_empty() {
        let q: Vec<String> = sysctls.iter().map(|s| format!("{s:?}")).collect();
        push("forbidden sysctls", q.join(", "));
    }

    if level == Level::Restricted {
        let mut restricted_volumes = Vec::new();
        for v in volumes(spec) {
            let name = v["name"].as_str().unwrap_or("");
            let kind = v.as_object().and_then(|o| o.keys().find(|k| *k != "name").cloned());
            if let Some(kind) = kind.filter(|k| !RESTRICTED_VOLUMES.contains(&k.as_str())) {
                restricted_volumes
                    .push(format!("volume {name:?} uses restricted volume type {kind:?}"));
            }
        }
        if !restricted_volumes.is_empty() {
            push("restricted volume types", restricted_volumes.join(", "));
        }
        let escalating: Vec<String> = all
            .iter()
            .filter(|c| sc(c, "allowPrivilegeEscalation") != Some(Value::Bool(false)))
            .map(|c| c.name.to_owned())
            .collect();
        if !escalating.is_empty() {
            push(
                "allowPrivilegeEscalation != false",
                must(
                    &escalating,
                    "must set",
                    "must set",
                    "securityContext.allowPrivilegeEscalation=false",
                ),
            );
        }
        let pod_non_root = pod_sc("runAsNonRoot");
        let root_capable: Vec<String> = all
            .iter()
            .filter(|c| match sc(c, "runAsNonRoot") {
                Some(Value::Bool(true)) => false,
                Some(Value::Bool(false)) => true,
                _ => pod_non_root != Some(Value::Bool(true)),
            })
            .map(|c| c.name.to_owned())
            .collect();
        if !root_capable.is_empty() {
            push(
                "runAsNonRoot != true",
                format!(
                    "pod or {} must set securityContext.runAsNonRoot=true",
                    named("container", &root_capable)
                ),
            );
        }
        let root_users: Vec<String> = all
            .iter()
            .filter(|c| sc(c, "runAsUser").and_then(|v| v.as_i64()) == Some(0))
            .map(|c| c.name.to_owned())
            .collect();
        if pod_sc("runAsUser").and_then(|v| v.as_i64()) == Some(0) || !root_users.is_empty() {
            push("runAsUser=0", "pod and containers must not set runAsUser=0".into());
        }
        let confined = |v: Option<Value>| {
            matches!(
                v.as_ref().and_then(|p| p["type"].as_str()),
                Some("RuntimeDefault" | "Localhost")
            )
        };
        let pod_confined = confined(pod_sc("seccompProfile"));
        let unset_seccomp: Vec<String> = all
            .iter()
            .filter(|c| {
                let own = sc(c, "seccompProfile");
                if own.is_some() {
                    !confined(own)
                } else {
                    !pod_confined
                }
            })
            .map(|c| c.name.to_owned())
            .collect();
        if !unset_seccomp.is_empty() {
            push(
                "seccompProfile",
                format!(
                    "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                    named("container", &unset_seccomp)
                ),
            );
        }
        let undropped: Vec<String> = all
            .iter()
            .filter(|c| {
                !sc(c, "capabilities/drop")
                    .and_then(|d| d.as_array().cloned())
                    .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL")))
            })
            .map(|c| c.name.to_owned())
            .collect();
        let extra_caps: Vec<String> = all
            .iter()
            .filter(|c| {
                sc(c, "capabilities/add")
                    .and_then(|d| d.as_array().cloned())
                    .is_some_and(|d| d.iter().any(|x| x.as_str() != Some("NET_BIND_SERVICE")))
            })
            .map(|c| c.name.to_owned())
            .collect();
        let mut details = Vec::new();
        if !undropped.is_empty() {
            details.push(must(
                &undropped,
                "must set",
                "must set",
                "securityContext.capabilities.drop=[\"ALL\"]",
            ));
        }
        if !extra_caps.is_empty() {
            details.push(must(
                &extra_caps,
                "must not include",
                "must not include",
                "capabilities beyond \"NET_BIND_SERVICE\" in securityContext.capabilities.add",
            ));
        }
        if !details.is_empty() {
            push("unrestricted capabilities", details.join("; "));
        }
    }

    // Carrel, at every level: nothing that steers the GPU runtime or the dynamic loader, by any
    // path a variable takes into a container (`env`, an `envFrom` prefix; the keys of `envFrom`
    // sources are checked by [`env_source_violations`]).
    let mut steering = Vec::new();
    for c in &all {
        for env in c.spec["env"].as_array().into_iter().flatten() {
            let name = env["name"].as_str().unwrap_or("");
            if steers_runtime(name) {
                steering.push(format!("container {:?} sets {}", c.name, name.trim()));
            }
        }
        for from in c.spec["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or("");
            if prefix_may_steer(prefix) {
                steering.push(format!("container {:?} sets envFrom prefix {prefix:?}", c.name));
            }
        }
    }
    if !steering.is_empty() {
        push(GPU_RUNTIME_ENVIRONMENT, steering.join(", "));
    }
    // Carrel, at every level: no reference the syncer cannot carry, since on the host it would
    // name the host's object of that name.
    let unsynced = carrel_gpu::pod_refs::unsynced_references(spec);
    if !unsynced.is_empty() {
        push(UNSYNCED_REFERENCES, unsynced.join(", "));
    }
    out
}

/// The name of Carrel's check on references the syncer cannot carry.
const UNSYNCED_REFERENCES: &str = "unsynced references";

/// The name of Carrel's own check on environment variables.
const GPU_RUNTIME_ENVIRONMENT: &str = "GPU runtime environment";

/// Where an `envFrom` reads from: `("ConfigMap", name)` or `("Secret", name)`.
pub type EnvSource<'a> = (&'static str, &'a str);

/// The violations of the keys the pod's `envFrom` sources hold now: `keys` gives the keys of a
/// ConfigMap or Secret of the pod's namespace (`None` when it does not exist). A source that
/// changes later is harmless: the syncer hands the host pod only the keys allowed.
pub fn env_source_violations(
    pod: &Value,
    keys: &dyn Fn(EnvSource<'_>) -> Option<Vec<String>>,
) -> Vec<Violation> {
    let mut steering = Vec::new();
    for c in containers(&pod["spec"]) {
        for from in c.spec["envFrom"].as_array().into_iter().flatten() {
            let prefix = from["prefix"].as_str().unwrap_or("");
            let source = if let Some(name) = from.pointer("/configMapRef/name") {
                ("ConfigMap", name.as_str().unwrap_or(""))
            } else if let Some(name) = from.pointer("/secretRef/name") {
                ("Secret", name.as_str().unwrap_or(""))
            } else {
                continue;
            };
            for key in keys(source).unwrap_or_default() {
                let name = format!("{prefix}{key}");
                if steers_runtime(&name) {
                    steering.push(format!(
                        "container {:?} gets {} from key {key:?} of {} {:?} (envFrom)",
                        c.name,
                        name.trim(),
                        source.0,
                        source.1
                    ));
                }
            }
        }
    }
    if steering.is_empty() {
        return Vec::new();
    }
    vec![Violation { check: GPU_RUNTIME_ENVIRONMENT, detail: steering.join(", ") }]
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["volumes"].as_array().into_iter().flatten()
}

/// The reason kube-apiserver gives: `violates PodSecurity "baseline:latest": a (…), b (…)`.
/// Carrel's own rules are named after the standard's violations.
pub fn forbidden_message(level: Level, violations: &[Violation]) -> String {
    let carrel = [GPU_RUNTIME_ENVIRONMENT, UNSYNCED_REFERENCES];
    let standard: Vec<&Violation> =
        violations.iter().filter(|v| !carrel.contains(&v.check)).collect();
    let mut parts = Vec::new();
    if !standard.is_empty() {
        let list: Vec<String> =
            standard.iter().map(|v| format!("{} ({})", v.check, v.detail)).collect();
        parts.push(format!(
            "violates PodSecurity \"{}:latest\": {}",
            level.name(),
            list.join(", ")
        ));
    }
    for v in violations {
        match v.check {
            GPU_RUNTIME_ENVIRONMENT => parts.push(format!(
                "Carrel refuses environment variables that steer the GPU runtime or the dynamic \
                 loader (NVIDIA_*, LD_*): {}",
                v.detail
            )),
            UNSYNCED_REFERENCES => parts.push(format!(
                "Carrel refuses references to objects it does not carry to the host cluster \
                 (the host would resolve them in its own namespace): {}",
                v.detail
            )),
            _ => {}
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests;
