//! Pure translations between tenant and host objects: a tenant pod into its host pod, a host
//! pod's status back into the tenant's, the objects a pod references, and a virtual node.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use carrel_gpu::fit::Toleration;
use carrel_gpu::pod_refs::{self, Reference, Referent};
use carrel_gpu::runtime_env::steers_runtime;
use carrel_gpu::Claim;

use crate::host_names;

/// Where a tenant pod's service-account token is mounted, as the kubelet mounts it.
pub const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ConfigMaps and Secrets a pod reads (every volume reference of [`pod_refs`], env, envFrom
/// and image pull secrets), by tenant name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// Secret names.
    pub secrets: BTreeSet<String>,
}

fn containers_of(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(move |f| spec.get(f).and_then(Value::as_array))
        .flatten()
}

/// What `pod` references.
pub fn references(pod: &Value) -> References {
    let mut r = References::default();
    let spec = &pod["spec"];
    let mut add = |kind: &str, name: Option<&str>| {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            match kind {
                "cm" => r.config_maps.insert(n.to_owned()),
                _ => r.secrets.insert(n.to_owned()),
            };
        }
    };
    for found in pod_refs::volume_references(spec) {
        match found.reference.referent {
            Referent::ConfigMap => add("cm", Some(found.name)),
            Referent::Secret => add("secret", Some(found.name)),
            Referent::Unsynced(_) => {}
        }
    }
    for c in containers_of(spec) {
        for e in c["env"].as_array().into_iter().flatten() {
            add("cm", e.pointer("/valueFrom/configMapKeyRef/name").and_then(Value::as_str));
            add("secret", e.pointer("/valueFrom/secretKeyRef/name").and_then(Value::as_str));
        }
        for e in c["envFrom"].as_array().into_iter().flatten() {
            add("cm", e.pointer("/configMapRef/name").and_then(Value::as_str));
            add("secret", e.pointer("/secretRef/name").and_then(Value::as_str));
        }
    }
    for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        add("secret", s["name"].as_str());
    }
    r
}

/// The host copy of a referenced ConfigMap or Secret (`data`, `binaryData`, `stringData`, `type`,
/// `immutable` kept; tenant labels and annotations recorded, not copied).
pub fn host_copy(tenant: &str, host_namespace: &str, object: &Value) -> Value {
    let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let uid = object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let mut copy = json!({
        "apiVersion": "v1",
        "kind": object["kind"],
        "metadata": {
            "name": host_names::host_name(namespace, name),
            "namespace": host_namespace,
            "labels": host_names::host_labels(tenant),
            "annotations": host_names::host_annotations(namespace, name, uid),
        },
    });
    for field in ["data", "binaryData", "type", "immutable"] {
        if let Some(v) = object.get(field) {
            copy[field] = v.clone();
        }
    }
    copy
}

/// The tolerations of tenant pod `pod` that may reach the host: those one of `allowed` (the
/// tenant's `spec.allowedTolerations`) covers. A toleration of everything (`operator: Exists`
/// without a key) or of a host taint meant for others reaches the host only when the admin
/// allowed it.
pub fn tenant_tolerations(pod: &Value, allowed: &[Toleration]) -> Vec<Value> {
    pod.pointer("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|t| {
            serde_json::from_value::<Toleration>((*t).clone())
                .is_ok_and(|t| allowed.iter().any(|a| a.covers(&t)))
        })
        .cloned()
        .collect()
}

/// What every host container gets, as NVIDIA documents for CDI-only device selection: no device
/// is chosen by environment (an image's own `ENV NVIDIA_VISIBLE_DEVICES=all` is overridden,
/// since a pod's `env` wins over the image's), and the claimed MIG devices reach the container
/// only through the CDI annotation (whose spec edits set the variable to the device itself).
pub const VISIBLE_DEVICES: (&str, &str) = ("NVIDIA_VISIBLE_DEVICES", "void");

/// The keys the ConfigMaps and Secrets a pod's `envFrom` reads hold when its host pod is made;
/// a source not in here does not exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSources {
    /// ConfigMap name → its `data` keys.
    pub config_maps: BTreeMap<String, BTreeSet<String>>,
    /// Secret name → its `data` (and `stringData`) keys.
    pub secrets: BTreeMap<String, BTreeSet<String>>,
}

impl EnvSources {
    /// Record tenant object `object` (a ConfigMap or Secret) under `name`.
    pub fn insert(&mut self, object: &Value) {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        // As the kubelet reads them: a ConfigMap's `data`, a Secret's `data`.
        let keys: BTreeSet<String> = ["data", "stringData"]
            .iter()
            .filter_map(|f| object.get(*f).and_then(Value::as_object))
            .flat_map(|m| m.keys().cloned())
            .collect();
        let map =
            if object["kind"] == "Secret" { &mut self.secrets } else { &mut self.config_maps };
        map.insert(name.to_owned(), keys);
    }

    fn of(&self, from: &Value) -> Option<EnvFrom<'_>> {
        let (kind, pointer) = if from.get("configMapRef").is_some() {
            ("configMapKeyRef", "/configMapRef")
        } else {
            ("secretKeyRef", "/secretRef")
        };
        let source = from.pointer(pointer)?;
        let name = source["name"].as_str().unwrap_or("");
        let keys = if kind == "configMapKeyRef" { &self.config_maps } else { &self.secrets };
        Some(EnvFrom {
            kind,
            name: name.to_owned(),
            optional: source.get("optional").cloned(),
            prefix: from["prefix"].as_str().unwrap_or("").to_owned(),
            keys: keys.get(name),
        })
    }
}

/// One `envFrom` entry, read.
struct EnvFrom<'a> {
    /// `configMapKeyRef` or `secretKeyRef`.
    kind: &'static str,
    name: String,
    optional: Option<Value>,
    prefix: String,
    keys: Option<&'a BTreeSet<String>>,
}

/// Whether `name` is an environment variable name a container may be given: valid (printable
/// ASCII other than `=`, as kube-apiserver's relaxed rule and the kubelet want) and allowed.
fn allowed_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| (' '..='~').contains(&c) && c != '=')
        && !steers_runtime(name)
}

/// Container `c`'s `envFrom` as explicit `env` entries (see [`host_pod`]).
fn expand_env_from(c: &mut Value, namespace: &str, sources: &EnvSources) {
    let Some(Value::Array(from)) = c.as_object_mut().and_then(|o| o.remove("envFrom")) else {
        return;
    };
    let mut env = Vec::new();
    for entry in &from {
        let Some(source) = sources.of(entry) else { continue };
        for key in source.keys.into_iter().flatten() {
            let name = format!("{}{key}", source.prefix);
            if !allowed_env_name(&name) {
                continue;
            }
            let mut reference =
                json!({"name": host_names::host_name(namespace, &source.name), "key": key});
            if let Some(optional) = &source.optional {
                reference["optional"] = optional.clone();
            }
            env.push(json!({"name": name, "valueFrom": {source.kind: reference}}));
        }
    }
    if let Some(Value::Array(own)) = c.get_mut("env").map(Value::take) {
        env.extend(own);
    }
    if !env.is_empty() {
        c["env"] = Value::Array(env);
    } else if let Some(o) = c.as_object_mut() {
        o.remove("env");
    }
}

/// The `envFrom` sources of `pod` that must exist (not `optional`) and do not, as
/// `ConfigMap "cfg"`: the host pod waits for them, as the kubelet would wait.
pub fn missing_env_sources(pod: &Value, sources: &EnvSources) -> Vec<String> {
    let mut missing = Vec::new();
    for c in ["containers", "initContainers"]
        .iter()
        .filter_map(|f| pod["spec"].get(*f).and_then(Value::as_array))
        .flatten()
    {
        for entry in c["envFrom"].as_array().into_iter().flatten() {
            let Some(source) = sources.of(entry) else { continue };
            if source.keys.is_none() && source.optional != Some(Value::Bool(true)) {
                let kind = if source.kind == "secretKeyRef" { "Secret" } else { "ConfigMap" };
                let text = format!("{kind} {:?}", source.name);
                if !missing.contains(&text) {
                    missing.push(text);
                }
            }
        }
    }
    missing
}

/// Downward API files show the workload its tenant pod's name, namespace and UID, not the host
/// pod's: those fields are read from the annotations that record them on the host pod.
fn tenant_downward_items(items: Option<&mut Value>) {
    for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(path) = item.pointer_mut("/fieldRef/fieldPath") else {
            continue;
        };
        let recorded = match path.as_str() {
            Some("metadata.name") => host_names::ANNOTATION_NAME,
            Some("metadata.namespace") => host_names::ANNOTATION_NAMESPACE,
            Some("metadata.uid") => host_names::ANNOTATION_UID,
            _ => continue,
        };
        *path = json!(format!("metadata.annotations['{recorded}']"));
    }
}

/// Every ConfigMap and Secret reference of `source` (a volume or a projected source) named as
/// the host copy of the tenant's object. What the syncer does not carry is refused before it
/// gets here (the tenant API's admission, [`unsynced_references`]).
fn rename_references(source: &mut Value, table: &[Reference], namespace: &str) {
    for r in table.iter().filter(|r| !matches!(r.referent, Referent::Unsynced(_))) {
        rename(source, &format!("/{}{}", r.source, r.pointer), namespace);
    }
}

fn rename(value: &mut Value, pointer: &str, namespace: &str) {
    if let Some(slot) = value.pointer_mut(pointer) {
        if let Some(name) = slot.as_str().filter(|n| !n.is_empty()) {
            *slot = Value::String(host_names::host_name(namespace, name));
        }
    }
}

/// Whether a tenant pod annotation may reach its host pod. Container runtimes, the kubelet and
/// host add-ons read annotations (`io.kubernetes.cri-o.Devices`, `io.containerd.*`,
/// `cdi.k8s.io/*`, AppArmor and seccomp keys, `nvidia.com/*`, mesh injection…), so only an
/// allow-list passes: plain words (`description`: no prefix and no dots, since runtimes also
/// read dotted keys such as `io.kubernetes.cri-o.Devices`), kubectl's `default-container`, and
/// the simulated kubelet's `sim.carrel.dev/*`. Carrel's own annotations (tenant identity, CDI
/// devices) are the syncer's to write.
pub fn host_annotation_allowed(key: &str) -> bool {
    !key.contains(['/', '.'])
        || key == "kubectl.kubernetes.io/default-container"
        || key.starts_with("sim.carrel.dev/")
}

fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/")
}

/// The host pod for tenant pod `pod` of `tenant` (its node selector and affinity kept: the
/// tenant's virtual nodes carry the host nodes' names and topology labels): in `host_namespace`, named by
/// [`host_names::host_pod`], its references renamed, no `nvidia.com/*` resources, no service-account
/// token of the host (the tenant's comes from `token_secret`, mounted where the kubelet would
/// mount one), bound to the claimed devices' node with the devices named for CDI injection.
///
/// `envFrom` never reaches the host: each one becomes explicit `env` entries, one per key its
/// source holds now ([`EnvSources`]) that makes an allowed name, read by reference from the host
/// copy (so values follow the tenant's object), ahead of the container's own `env` (which wins,
/// as over `envFrom`). A key the tenant adds later, such as `LD_PRELOAD`, reaches no container.
/// Every container gets [`VISIBLE_DEVICES`] last. Tenant tolerations reach the host as far as
/// `allowed_tolerations` covers them ([`tenant_tolerations`]). Only an allow-list of tenant annotations
/// ([`host_annotation_allowed`]) is kept.
pub fn host_pod(
    tenant: &str,
    host_namespace: &str,
    pod: &Value,
    claims: &[Claim],
    token_secret: Option<&str>,
    env_sources: &EnvSources,
    allowed_tolerations: &[Toleration],
) -> Value {
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let spec = &pod["spec"];
    let mut host_spec = Map::new();
    for field in [
        "containers",
        "initContainers",
        "volumes",
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "securityContext",
        "subdomain",
        "tolerations",
        "nodeSelector",
        "affinity",
        "topologySpreadConstraints",
        "imagePullSecrets",
        "dnsPolicy",
        "dnsConfig",
        "hostAliases",
        "shareProcessNamespace",
        "setHostnameAsFQDN",
        "os",
    ] {
        if let Some(v) = spec.get(field) {
            host_spec.insert(field.to_owned(), v.clone());
        }
    }
    // The workload sees its tenant pod's name as its hostname, not the host pod's.
    host_spec.insert(
        "hostname".into(),
        spec.get("hostname").cloned().unwrap_or_else(|| json!(hostname_of(name))),
    );
    // The GPU tolerations Carrel itself needs are counted where it places a pod (the allocator,
    // `gpu_pod_needs`); the host pod is bound by `nodeName`, which the kubelet admits whatever
    // the node's NoSchedule taints.
    let tolerations = tenant_tolerations(pod, allowed_tolerations);
    if tolerations.is_empty() {
        host_spec.remove("tolerations");
    } else {
        host_spec.insert("tolerations".into(), Value::Array(tolerations));
    }
    host_spec.insert("automountServiceAccountToken".into(), json!(false));
    host_spec.insert("enableServiceLinks".into(), json!(false));
    let mut host_spec = Value::Object(host_spec);

    for v in host_spec.get_mut("volumes").and_then(Value::as_array_mut).into_iter().flatten() {
        rename_references(v, pod_refs::VOLUME_REFERENCES, namespace);
        tenant_downward_items(v.pointer_mut("/downwardAPI/items"));
        if let Some(sources) = v.pointer_mut("/projected/sources").and_then(Value::as_array_mut) {
            // The tenant's token comes through `token_secret`; a host token must never be asked for.
            sources.retain(|s| s.get("serviceAccountToken").is_none());
            for s in sources.iter_mut() {
                rename_references(s, pod_refs::PROJECTED_REFERENCES, namespace);
                tenant_downward_items(s.pointer_mut("/downwardAPI/items"));
            }
        }
    }
    for s in
        host_spec.get_mut("imagePullSecrets").and_then(Value::as_array_mut).into_iter().flatten()
    {
        rename(s, "/name", namespace);
    }
    let mount_token =
        token_secret.is_some() && spec["automountServiceAccountToken"] != json!(false);
    for list in ["containers", "initContainers"] {
        for c in host_spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
            for field in ["limits", "requests"] {
                if let Some(map) =
                    c.pointer_mut(&format!("/resources/{field}")).and_then(Value::as_object_mut)
                {
                    map.retain(|k, _| !is_gpu_resource(k));
                }
            }
            for e in c.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
                rename(e, "/valueFrom/configMapKeyRef/name", namespace);
                rename(e, "/valueFrom/secretKeyRef/name", namespace);
                // The workload sees its tenant names, not the host's.
                let literal =
                    match e.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
                        Some("metadata.name") => Some(name),
                        Some("metadata.namespace") => Some(namespace),
                        Some("metadata.uid") => Some(uid),
                        _ => None,
                    };
                if let Some(value) = literal {
                    let env_name = e["name"].clone();
                    *e = json!({"name": env_name, "value": value});
                }
            }
            expand_env_from(c, namespace, env_sources);
            // Last, so that it is what the container gets; the claimed devices come by CDI.
            let env = c.as_object_mut().map(|o| o.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(env)) = env {
                env.push(json!({"name": VISIBLE_DEVICES.0, "value": VISIBLE_DEVICES.1}));
            }
            if mount_token {
                let mounts =
                    c.as_object_mut().map(|o| o.entry("volumeMounts").or_insert_with(|| json!([])));
                if let Some(Value::Array(mounts)) = mounts {
                    if !mounts.iter().any(|m| m["mountPath"] == TOKEN_MOUNT) {
                        mounts.push(json!({
                            "name": host_names::TOKEN_VOLUME,
                            "mountPath": TOKEN_MOUNT,
                            "readOnly": true,
                        }));
                    }
                }
            }
        }
    }
    if let (true, Some(secret)) = (mount_token, token_secret) {
        let volumes =
            host_spec.as_object_mut().map(|o| o.entry("volumes").or_insert_with(|| json!([])));
        if let Some(Value::Array(volumes)) = volumes {
            volumes
                .push(json!({"name": host_names::TOKEN_VOLUME, "secret": {"secretName": secret}}));
        }
    }

    let mut annotations: BTreeMap<String, String> = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| host_annotation_allowed(k))
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    annotations.extend(host_names::host_annotations(namespace, name, uid));
    if let Some(first) = claims.first() {
        host_spec["nodeName"] = json!(first.node);
        let devices: Vec<String> =
            claims.iter().map(|c| format!("nvidia.com/gpu={}", c.instance_uuid)).collect();
        annotations.insert(host_names::ANNOTATION_CDI.to_owned(), devices.join(","));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": host_names::host_pod(namespace, name),
            "namespace": host_namespace,
            "labels": host_names::host_labels(tenant),
            "annotations": annotations,
        },
        "spec": host_spec,
    })
}

/// Pod fields that name things only the tenant's cluster has (its priority classes, schedulers,
/// runtime classes, readiness-gate controllers, resource claims), so the host pod goes without
/// them; the syncer tells the tenant which ones a pod set.
pub const TENANT_ONLY_FIELDS: &[&str] = &[
    "priorityClassName",
    "priority",
    "preemptionPolicy",
    "schedulerName",
    "runtimeClassName",
    "readinessGates",
    "resourceClaims",
    "schedulingGates",
];

/// The fields of [`TENANT_ONLY_FIELDS`] that `pod` sets.
pub fn tenant_only_fields(pod: &Value) -> Vec<&'static str> {
    let spec = &pod["spec"];
    TENANT_ONLY_FIELDS
        .iter()
        .copied()
        .filter(|f| match spec.get(*f) {
            None | Some(Value::Null) => false,
            // The defaults kube-apiserver writes are no request of the tenant's.
            Some(Value::String(v)) if *f == "schedulerName" => v != "default-scheduler",
            Some(Value::String(v)) if *f == "preemptionPolicy" => v != "PreemptLowerPriority",
            Some(Value::Number(n)) if *f == "priority" => n.as_i64() != Some(0),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        })
        .collect()
}

/// The hostname of a host pod for a tenant pod named `name`. A kubelet would use the name
/// itself, but `spec.hostname` must be a DNS label: the name up to its first dot, at most 63
/// characters, without a trailing dash.
pub fn hostname_of(name: &str) -> String {
    let first = name.split('.').next().unwrap_or(name);
    let cut: String = first.chars().take(63).collect();
    cut.trim_end_matches('-').to_owned()
}

/// The references of `pod` the syncer cannot carry to the host ([`pod_refs`]: persistent volume
/// claims, Endpoints, data sources, trust bundles, signers), as
/// `spec.volumes[0].persistentVolumeClaim.claimName: PersistentVolumeClaim "data"`. The tenant
/// API refuses such pods; the syncer makes no host pod for one (a pod stored before that rule).
pub fn unsynced_references(pod: &Value) -> Vec<String> {
    pod_refs::unsynced_references(&pod["spec"])
}

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

/// The tenant's view of host node `host_node`: its name, its hostname and GPU product labels, its
/// CPU, memory and pod capacity, and as GPU resources the tenant's own quota only.
pub fn virtual_node(host_node: &Value, quota: &BTreeMap<String, i64>) -> Value {
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
    if let Some(taints) =
        host_node.pointer("/spec/taints").filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        spec.insert("taints".to_owned(), taints.clone());
    }
    if host_node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        spec.insert("unschedulable".to_owned(), json!(true));
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
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use carrel_gpu::{GpuModel, Holder, Placement, Shape};

    fn tenant_pod() -> Value {
        json!({
            "metadata": {
                "name": "train", "namespace": "ml", "uid": "u-1", "labels": {"app": "x"},
                "annotations": {
                    "sim.carrel.dev/run-seconds": "2",
                    "cdi.k8s.io/steal": "nvidia.com/gpu=all",
                    "carrel.dev/tenant-uid": "forged",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                },
            },
            "spec": {
                "serviceAccountName": "trainer",
                "nodeName": "somewhere",
                "priorityClassName": "high",
                "containers": [{
                    "name": "main", "image": "cuda",
                    "resources": {"limits": {"nvidia.com/mig-1g.18gb": "1", "cpu": "2"}},
                    "env": [
                        {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    ],
                    "envFrom": [{"secretRef": {"name": "creds"}}],
                }],
                "volumes": [
                    {"name": "data", "configMap": {"name": "data"}},
                    {"name": "p", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "t"}},
                        {"secret": {"name": "tls"}},
                    ]}},
                ],
                "imagePullSecrets": [{"name": "pull"}],
            }
        })
    }

    fn claim() -> Claim {
        Claim {
            node: "gpu-node-1".into(),
            gpu_uuid: "GPU-1".into(),
            model: GpuModel::H200_141GB,
            shape: Shape::G1,
            placement: Placement { start: 3, size: 1 },
            instance_uuid: "MIG-abc".into(),
            holder: Holder { tenant: "t".into(), namespace: "ml".into(), pod: "train".into() },
            host_namespace: "carrel-t".into(),
            host_pod: "train-x-ml".into(),
        }
    }

    #[test]
    fn references_the_host_cannot_have_are_named() {
        let p = json!({"spec": {"volumes": [
            {"name": "cfg", "configMap": {"name": "c"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
            {"name": "scratch", "emptyDir": {}},
        ]}});
        assert_eq!(
            unsynced_references(&p),
            ["spec.volumes[1].persistentVolumeClaim.claimName: PersistentVolumeClaim \"d\""]
        );
    }

    /// Every ConfigMap and Secret reference of every volume source type names the tenant's host
    /// copy, and the object is copied: `admin-kubeconfig` in a tenant pod is the tenant's own.
    #[test]
    fn every_volume_reference_names_the_tenants_copy() {
        for (table, projected) in
            [(pod_refs::VOLUME_REFERENCES, false), (pod_refs::PROJECTED_REFERENCES, true)]
        {
            for r in table.iter().filter(|r| !matches!(r.referent, Referent::Unsynced(_))) {
                let segments: Vec<&str> = r.pointer.trim_start_matches('/').split('/').collect();
                let mut source = json!({});
                let mut at = &mut source;
                for s in &segments[..segments.len() - 1] {
                    at = &mut at[*s];
                }
                at[segments[segments.len() - 1]] = json!("admin-kubeconfig");
                let volume = if projected {
                    json!({"name": "v", "projected": {"sources": [{r.source: source}]}})
                } else {
                    json!({"name": "v", r.source: source})
                };
                let p = json!({"metadata": {"name": "p", "namespace": "ml"}, "spec": {
                    "containers": [{"name": "c", "image": "x"}], "volumes": [volume]}});
                let refs = references(&p);
                let copied = match r.referent {
                    Referent::ConfigMap => &refs.config_maps,
                    _ => &refs.secrets,
                };
                assert_eq!(copied, &BTreeSet::from(["admin-kubeconfig".to_owned()]), "{r:?}");
                let h = host_pod("t", "carrel-t", &p, &[], None, &EnvSources::default(), &[]);
                let v = &h["spec"]["volumes"][0];
                let at = if projected { &v["projected"]["sources"][0] } else { v };
                let pointer = format!("/{}{}", r.source, r.pointer);
                assert_eq!(
                    at.pointer(&pointer),
                    Some(&json!(host_names::host_name("ml", "admin-kubeconfig"))),
                    "{r:?}: {h}"
                );
            }
        }
    }

    #[test]
    fn env_from_becomes_explicit_allowed_entries() {
        let p = json!({"metadata": {"name": "p", "namespace": "ml"}, "spec": {
            "initContainers": [{"name": "side", "image": "x", "restartPolicy": "Always",
                "envFrom": [{"configMapRef": {"name": "cfg"}}]}],
            "containers": [{"name": "c", "image": "x",
                "envFrom": [
                    {"configMapRef": {"name": "cfg"}},
                    {"prefix": "S_", "secretRef": {"name": "sec", "optional": true}},
                    {"configMapRef": {"name": "gone", "optional": true}},
                ],
                "env": [{"name": "A", "value": "own"}]}],
            "ephemeralContainers": [{"name": "debug", "image": "x", "env": [{"name": "LD_PRELOAD", "value": "x"}]}],
        }});
        let mut sources = EnvSources::default();
        sources.insert(&json!({"kind": "ConfigMap", "metadata": {"name": "cfg"},
            "data": {"A": "1", "LD_PRELOAD": "/x.so", "LD_AUDIT": "/a.so", "NVIDIA_VISIBLE_DEVICES": "all", "B": "2"}}));
        sources
            .insert(&json!({"kind": "Secret", "metadata": {"name": "sec"}, "data": {"K": "eA=="}}));
        assert!(missing_env_sources(&p, &sources).is_empty());
        let h = host_pod("t", "carrel-t", &p, &[], None, &sources, &[]);
        let cfg = host_names::host_name("ml", "cfg");
        let sec = host_names::host_name("ml", "sec");
        let c = &h["spec"]["containers"][0];
        assert!(c.get("envFrom").is_none(), "{c}");
        assert_eq!(
            c["env"],
            json!([
                {"name": "A", "valueFrom": {"configMapKeyRef": {"name": cfg, "key": "A"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": cfg, "key": "B"}}},
                {"name": "S_K", "valueFrom": {"secretKeyRef": {"name": sec, "key": "K", "optional": true}}},
                {"name": "A", "value": "own"},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
            ])
        );
        let side = &h["spec"]["initContainers"][0];
        assert!(side.get("envFrom").is_none(), "{side}");
        assert_eq!(side["env"].as_array().map(Vec::len), Some(3), "{side}");
        assert_eq!(side["env"][2], json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}));
        // Ephemeral containers never reach the host.
        assert!(h["spec"].get("ephemeralContainers").is_none());
        let text = h.to_string();
        assert!(!text.contains("LD_") && !text.contains("\"all\""), "{text}");
        // A source that must exist and does not holds the host pod back.
        let mut q = p.clone();
        q["spec"]["containers"][0]["envFrom"] =
            json!([{"configMapRef": {"name": "later"}}, {"secretRef": {"name": "sec"}}]);
        assert_eq!(missing_env_sources(&q, &sources), ["ConfigMap \"later\""]);
    }

    #[test]
    fn only_allowed_annotations_reach_the_host() {
        for key in [
            "io.kubernetes.cri-o.Devices",
            "io.kubernetes.cri-o.userns-mode",
            "io.containerd.cri.runtime-handler",
            "cdi.k8s.io/steal",
            "container.apparmor.security.beta.kubernetes.io/c",
            "seccomp.security.alpha.kubernetes.io/pod",
            "nvidia.com/gpu.present",
            "sidecar.istio.io/inject",
            "carrel.dev/tenant-uid",
            "kubectl.kubernetes.io/last-applied-configuration",
        ] {
            assert!(!host_annotation_allowed(key), "{key}");
        }
        for key in
            ["description", "sim.carrel.dev/run-seconds", "kubectl.kubernetes.io/default-container"]
        {
            assert!(host_annotation_allowed(key), "{key}");
        }
        let mut p = tenant_pod();
        p["metadata"]["annotations"]["io.kubernetes.cri-o.Devices"] = json!("/dev/nvidia0");
        p["metadata"]["annotations"]["note"] = json!("kept");
        let h = host_pod("t", "carrel-t", &p, &[claim()], None, &EnvSources::default(), &[]);
        let a = h["metadata"]["annotations"].as_object().expect("annotations");
        assert!(a.get("io.kubernetes.cri-o.Devices").is_none());
        assert_eq!(a["note"], "kept");
        assert_eq!(a["cdi.k8s.io/carrel-gpu"], "nvidia.com/gpu=MIG-abc");
    }

    #[test]
    fn hostnames_are_dns_labels() {
        assert_eq!(hostname_of("train"), "train");
        assert_eq!(hostname_of("web.v2"), "web");
        let long = format!("{}-{}", "a".repeat(62), "b");
        assert_eq!(hostname_of(&long), "a".repeat(62));
    }

    #[test]
    fn fields_only_the_tenant_has_are_named() {
        let p = json!({"spec": {
            "priorityClassName": "high", "schedulerName": "default-scheduler", "priority": 0,
            "runtimeClassName": "gvisor", "readinessGates": [], "dnsPolicy": "ClusterFirst",
        }});
        assert_eq!(tenant_only_fields(&p), ["priorityClassName", "runtimeClassName"]);
        let h = host_pod(
            "t",
            "carrel-t",
            &json!({"metadata": {"name": "p", "namespace": "d"}, "spec": p["spec"]}),
            &[],
            None,
            &EnvSources::default(),
            &[],
        );
        assert!(
            h["spec"].get("priorityClassName").is_none()
                && h["spec"].get("runtimeClassName").is_none()
        );
        assert_eq!(h["spec"]["dnsPolicy"], "ClusterFirst");
    }

    #[test]
    fn references_are_found_everywhere() {
        let r = references(&tenant_pod());
        assert_eq!(r.config_maps, BTreeSet::from(["cfg".into(), "data".into()]));
        assert_eq!(r.secrets, BTreeSet::from(["creds".into(), "pull".into(), "tls".into()]));
    }

    #[test]
    fn the_host_pod_is_pinned_renamed_and_carries_no_host_token() {
        let h = host_pod(
            "t",
            "carrel-t",
            &tenant_pod(),
            &[claim()],
            Some("train-x-ml-token"),
            &EnvSources::default(),
            &[],
        );
        assert_eq!(h["metadata"]["name"], "train-x-ml");
        assert_eq!(h["metadata"]["namespace"], "carrel-t");
        assert_eq!(h["metadata"]["labels"]["carrel.dev/tenant"], "t");
        assert_eq!(h["metadata"]["annotations"]["carrel.dev/tenant-uid"], "u-1");
        assert_eq!(h["metadata"]["annotations"]["cdi.k8s.io/carrel-gpu"], "nvidia.com/gpu=MIG-abc");
        // The tenant's own annotations come along, but none that injects devices or forges ours.
        assert_eq!(h["metadata"]["annotations"]["sim.carrel.dev/run-seconds"], "2");
        assert!(h["metadata"]["annotations"].get("cdi.k8s.io/steal").is_none());
        assert!(h["metadata"]["annotations"]
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none());
        let spec = &h["spec"];
        assert_eq!(spec["nodeName"], "gpu-node-1");
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert!(spec.get("serviceAccountName").is_none());
        assert!(spec.get("priorityClassName").is_none());
        let c = &spec["containers"][0];
        assert_eq!(c["resources"]["limits"], json!({"cpu": "2"}));
        assert_eq!(c["env"][0]["valueFrom"]["configMapKeyRef"]["name"], "cfg-x-ml");
        assert_eq!(c["env"][1], json!({"name": "POD", "value": "train"}));
        assert_eq!(c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
        // envFrom never reaches the host (its expansion: `env_from_becomes_explicit_allowed_entries`).
        assert!(c.get("envFrom").is_none(), "{c}");
        assert_eq!(c["volumeMounts"][0]["mountPath"], TOKEN_MOUNT);
        assert_eq!(spec["volumes"][0]["configMap"]["name"], "data-x-ml");
        assert_eq!(
            spec["volumes"][1]["projected"]["sources"],
            json!([{"secret": {"name": "tls-x-ml"}}])
        );
        assert_eq!(spec["volumes"][2]["secret"]["secretName"], "train-x-ml-token");
        assert_eq!(spec["imagePullSecrets"][0]["name"], "pull-x-ml");
        let text = h.to_string();
        assert!(!text.contains("serviceAccountToken"), "{text}");
    }

    #[test]
    fn downward_api_files_show_the_tenant_pod() {
        let mut pod = tenant_pod();
        let items = json!([
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
            {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
        ]);
        pod["spec"]["volumes"] = json!([
            {"name": "info", "downwardAPI": {"items": items}},
            {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": items}}]}},
        ]);
        let h = host_pod("t", "carrel-t", &pod, &[], None, &EnvSources::default(), &[]);
        let want = json!([
            {"path": "name", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-name']"}},
            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-namespace']"}},
            {"path": "uid", "fieldRef": {"fieldPath": "metadata.annotations['carrel.dev/tenant-uid']"}},
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
        ]);
        assert_eq!(h["spec"]["volumes"][0]["downwardAPI"]["items"], want);
        assert_eq!(
            h["spec"]["volumes"][1]["projected"]["sources"][0]["downwardAPI"]["items"],
            want
        );
        // And those annotations hold the tenant pod's values.
        let annotations = &h["metadata"]["annotations"];
        assert_eq!(annotations["carrel.dev/tenant-name"], "train");
        assert_eq!(annotations["carrel.dev/tenant-namespace"], "ml");
        assert_eq!(annotations["carrel.dev/tenant-uid"], "u-1");
    }

    #[test]
    fn without_claims_the_host_schedules_and_opting_out_of_the_token_is_kept() {
        let mut p = tenant_pod();
        p["spec"]["automountServiceAccountToken"] = json!(false);
        let h = host_pod("t", "carrel-t", &p, &[], Some("s"), &EnvSources::default(), &[]);
        assert!(h["spec"].get("nodeName").is_none());
        assert!(h["spec"].as_object().expect("spec").values().all(|v| !v.is_null()), "{h}");
        assert!(h["metadata"]["annotations"].get("cdi.k8s.io/carrel-gpu").is_none());
        assert!(h["spec"]["containers"][0].get("volumeMounts").is_none());
        let bare = json!({"metadata": {"name": "b", "namespace": "d"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let h =
            host_pod("t", "carrel-t", &bare, &[], Some("b-x-d-token"), &EnvSources::default(), &[]);
        assert_eq!(h["spec"]["volumes"][0]["secret"]["secretName"], "b-x-d-token", "{h}");
        assert!(h["spec"].get("initContainers").is_none(), "{h}");
    }

    #[test]
    fn status_goes_back_and_virtual_nodes_show_only_the_quota() {
        let host =
            json!({"status": {"phase": "Running", "podIP": "10.0.0.5", "nominatedNodeName": "x"}});
        assert_eq!(tenant_status(&host), json!({"phase": "Running", "podIP": "10.0.0.5"}));
        let node = json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "secret-host-label": "x"}},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/mig-1g.18gb": "56"}, "conditions": [{"type": "Ready", "status": "True"}]}
        });
        let quota = BTreeMap::from([("1g.18gb".to_owned(), 2)]);
        let v = virtual_node(&node, &quota);
        assert_eq!(v["status"]["allocatable"]["nvidia.com/mig-1g.18gb"], "2");
        assert_eq!(v["status"]["allocatable"]["cpu"], "64");
        assert!(v["metadata"]["labels"].get("secret-host-label").is_none());
        assert_eq!(v["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn virtual_nodes_show_cordon_taints_and_addresses() {
        let node = json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.1.1"}],
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}],
            },
        });
        let v = virtual_node(&node, &BTreeMap::new());
        assert_eq!(v["spec"]["unschedulable"], true);
        assert_eq!(v["spec"]["taints"][0]["key"], "nvidia.com/gpu");
        assert_eq!(v["status"]["addresses"][0]["address"], "10.0.1.1");
        // A heartbeat alone changes nothing a tenant is shown.
        let mut later = node.clone();
        later["status"]["conditions"][0]["lastHeartbeatTime"] = json!("t2");
        let w = virtual_node(&later, &BTreeMap::new());
        assert_ne!(v, w);
        assert_eq!(virtual_node_shown(&v), virtual_node_shown(&w));
        let bare = virtual_node(&json!({"metadata": {"name": "n2"}}), &BTreeMap::new());
        assert_eq!(bare["spec"], json!({}));
    }

    #[test]
    fn a_merge_patch_changes_what_changed_and_removes_what_went() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2], "f": "x"});
        let new = json!({"a": 1, "b": {"c": 2, "d": 4}, "e": [1], "g": true});
        let patch = merge_patch(&old, &new);
        assert_eq!(patch, json!({"b": {"d": 4}, "e": [1], "f": null, "g": true}));
        assert_eq!(merge_patch(&new, &new), json!({}));
        // Applying it to the old value gives the new one.
        let mut applied = old.clone();
        json_patch::merge(&mut applied, &patch);
        assert_eq!(applied, new);
    }

    #[test]
    fn host_names_in_messages_read_as_the_tenant_pods() {
        let host = ("carrel-team-a", "train-x-ml", "h-uid");
        let tenant = ("ml", "train", "t-uid");
        assert_eq!(
            tenant_words("Successfully assigned carrel-team-a/train-x-ml to n1", host, tenant),
            "Successfully assigned ml/train to n1"
        );
        assert_eq!(
            tenant_words(
                "Back-off restarting failed container main in pod train-x-ml_carrel-team-a(h-uid)",
                host,
                tenant
            ),
            "Back-off restarting failed container main in pod train_ml(t-uid)"
        );
        assert_eq!(tenant_words("Started container main", host, tenant), "Started container main");
        let mut status = json!({"containerStatuses": [{"state": {"waiting": {
            "message": "back-off 10s restarting failed container=main pod=train-x-ml_carrel-team-a(h-uid)"}}}],
            "phase": "Running", "restartCount": 2});
        in_tenant_words(&mut status, host, tenant);
        assert_eq!(
            status["containerStatuses"][0]["state"]["waiting"]["message"],
            "back-off 10s restarting failed container=main pod=train_ml(t-uid)"
        );
        assert_eq!(status["restartCount"], 2);
    }

    #[test]
    fn only_tolerations_the_admin_allows_reach_the_host() {
        let mut p = tenant_pod();
        p["spec"]["tolerations"] = json!([
            {"operator": "Exists"},
            {"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"},
            {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
        ]);
        let allowed = [Toleration {
            key: "team".into(),
            operator: "Equal".into(),
            value: "a".into(),
            effect: "NoSchedule".into(),
        }];
        assert_eq!(tenant_tolerations(&p, &allowed), [p["spec"]["tolerations"][2].clone()]);
        assert!(tenant_tolerations(&p, &[]).is_empty());
        let h = host_pod("t", "carrel-t", &p, &[claim()], None, &EnvSources::default(), &allowed);
        assert_eq!(h["spec"]["tolerations"], json!([p["spec"]["tolerations"][2]]));
        // None of the tenant's that the admin did not allow.
        let h = host_pod("t", "carrel-t", &p, &[], None, &EnvSources::default(), &[]);
        assert!(h["spec"].get("tolerations").is_none(), "{h}");
    }
}
