//! A tenant pod as its host pod: pinned, renamed, its references and downward API pointed at
//! the host copies and the tenant's names, only allowed annotations and tolerations kept.

use super::*;

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

/// Downward API files show the workload its tenant pod's name, namespace and UID, not the host
/// pod's: those fields are read from the annotations that record them on the host pod.
pub(super) fn tenant_downward_items(items: Option<&mut Value>) {
    for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
        let Some(path) = item.pointer_mut("/fieldRef/fieldPath") else {
            continue;
        };
        if let Some(label) = path.as_str().and_then(host_label_path) {
            *path = json!(label);
            continue;
        }
        let recorded = match path.as_str() {
            Some("metadata.name") => host_names::ANNOTATION_NAME,
            Some("metadata.namespace") => host_names::ANNOTATION_NAMESPACE,
            Some("metadata.uid") => host_names::ANNOTATION_UID,
            _ => continue,
        };
        *path = json!(format!("metadata.annotations['{recorded}']"));
    }
}

/// A downward API path to one tenant pod label (`metadata.labels['app']`) as the path to that
/// label on the host pod ([`host_names::host_label_key`]); `None` for any other path.
pub(super) fn host_label_path(path: &str) -> Option<String> {
    let key = path.strip_prefix("metadata.labels['")?.strip_suffix("']")?;
    Some(format!("metadata.labels['{}']", host_names::host_label_key(key)))
}

/// Every ConfigMap, Secret and PersistentVolumeClaim reference of `source` (a volume or a
/// projected source) named as the host object the syncer carries the tenant's to. What the syncer
/// does not carry is refused before it gets here (the tenant API's admission,
/// [`unsynced_references`]).
pub(super) fn rename_references(source: &mut Value, table: &[Reference], namespace: &str) {
    for r in table.iter().filter(|r| !matches!(r.referent, Referent::Unsynced(_))) {
        rename(source, &format!("/{}{}", r.source, r.pointer), namespace);
    }
}

pub(super) fn rename(value: &mut Value, pointer: &str, namespace: &str) {
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

pub(super) fn is_gpu_resource(name: &str) -> bool {
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
            host_container(c, (namespace, name, uid), env_sources, mount_token);
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
            "labels": host_pod_labels(tenant, pod),
            "annotations": annotations,
        },
        "spec": host_spec,
    })
}

/// Container `c` of tenant pod `(namespace, name, uid)` as its host pod runs it: no GPU
/// resources, its references renamed to the host copies, the downward API reading the tenant's
/// names, `envFrom` made explicit ([`host_pod`]), [`VISIBLE_DEVICES`] last, and the tenant's
/// token mounted when the host pod carries it (`mount_token`).
fn host_container(
    c: &mut Value,
    (namespace, name, uid): (&str, &str, &str),
    env_sources: &EnvSources,
    mount_token: bool,
) {
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
        if let Some(path) = e.pointer_mut("/valueFrom/fieldRef/fieldPath") {
            if let Some(label) = path.as_str().and_then(host_label_path) {
                *path = json!(label);
            }
        }
        // The workload sees its tenant names, not the host's.
        let literal = match e.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
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

/// The ephemeral containers tenant pod `pod` has and host pod `host` lacks, as the host pod
/// gets them (each as `host_container` makes a container, the tenant's token mounted when the
/// host pod mounts it in its own containers): what the syncer adds through the host pod's
/// `ephemeralcontainers` subresource after `kubectl debug` added them to the tenant pod.
pub fn new_host_ephemeral_containers(
    pod: &Value,
    host: &Value,
    env_sources: &EnvSources,
) -> Vec<Value> {
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
    let list =
        |p: &Value| p.pointer("/spec/ephemeralContainers").and_then(Value::as_array).cloned();
    let present: Vec<Value> = list(host).unwrap_or_default();
    let mount_token = host
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|v| v["name"] == host_names::TOKEN_VOLUME);
    list(pod)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !present.iter().any(|p| p["name"] == c["name"]))
        .map(|mut c| {
            host_container(&mut c, (namespace, name, uid), env_sources, mount_token);
            c
        })
        .collect()
}

/// The labels the host pod of tenant pod `pod` of `tenant` carries
/// ([`host_names::host_pod_labels`]): the syncer's, the tenant namespace, and the tenant pod's
/// own under Carrel's domain. They follow the tenant pod's labels as these change.
pub fn host_pod_labels(tenant: &str, pod: &Value) -> BTreeMap<String, String> {
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("");
    let labels: BTreeMap<String, String> = pod
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    host_names::host_pod_labels(tenant, namespace, &labels)
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

/// Whether tenant pod `pod` tolerates a cordoned node (the `node.kubernetes.io/unschedulable`
/// taint, as DaemonSet pods do): the tenant's own cordons do not keep it off.
pub fn tolerates_cordon(pod: &Value) -> bool {
    let cordon = carrel_gpu::fit::Taint {
        key: carrel_gpu::fit::TAINT_UNSCHEDULABLE.to_owned(),
        value: String::new(),
        effect: "NoSchedule".to_owned(),
    };
    pod.pointer("/spec/tolerations").and_then(Value::as_array).into_iter().flatten().any(|t| {
        serde_json::from_value::<Toleration>(t.clone()).is_ok_and(|t| t.tolerates(&cordon))
    })
}

/// Keep host pod `host` (not yet bound) off `nodes`, the nodes its tenant cordoned: a required
/// node affinity on `metadata.name` added to each of its node selector terms (terms are ORed, so
/// each must exclude them), or a term of its own when it has none.
pub fn keep_off_nodes(host: &mut Value, nodes: &BTreeSet<String>) {
    if nodes.is_empty() || host.pointer("/spec/nodeName").is_some_and(|n| n != "") {
        return;
    }
    let requirement = json!({"key": "metadata.name", "operator": "NotIn", "values": nodes});
    let Some(spec) = host.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let required = spec
        .entry("affinity")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(|a| a.entry("nodeAffinity").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .map(|n| {
            n.entry("requiredDuringSchedulingIgnoredDuringExecution")
                .or_insert_with(|| json!({"nodeSelectorTerms": []}))
        })
        .and_then(Value::as_object_mut)
        .map(|r| r.entry("nodeSelectorTerms").or_insert_with(|| json!([])));
    let Some(terms) = required.and_then(Value::as_array_mut) else { return };
    if terms.is_empty() {
        terms.push(json!({}));
    }
    for term in terms.iter_mut().filter_map(Value::as_object_mut) {
        let fields = term.entry("matchFields").or_insert_with(|| json!([]));
        if let Some(fields) = fields.as_array_mut() {
            fields.push(requirement.clone());
        }
    }
}

/// The variables the kubelet sets in every container for the `kubernetes` Service (port 443),
/// naming `(host, port)` instead: where the tenant's API answers. In-cluster clients
/// (`rest.InClusterConfig`, `config.load_incluster_config`, `kube::Config::incluster`) read
/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`; the rest are set too so that none
/// names the host's API.
pub fn api_env((host, port): (&str, u16)) -> Vec<Value> {
    let url = format!("tcp://{host}:{port}");
    [
        ("KUBERNETES_SERVICE_HOST", host.to_owned()),
        ("KUBERNETES_SERVICE_PORT", port.to_string()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string()),
        ("KUBERNETES_PORT", url.clone()),
        ("KUBERNETES_PORT_443_TCP", url),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp".to_owned()),
        ("KUBERNETES_PORT_443_TCP_PORT", port.to_string()),
        ("KUBERNETES_PORT_443_TCP_ADDR", host.to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| json!({"name": name, "value": value}))
    .collect()
}

/// Have host pod `pod`, which holds MIG devices, run with RuntimeClass `class` where one is
/// given: the runtime handler that injects the devices its CDI annotation names.
pub fn run_devices_with(pod: &mut Value, class: Option<&str>) {
    if let (Some(class), Some(spec)) = (class, pod.get_mut("spec").and_then(Value::as_object_mut)) {
        spec.insert("runtimeClassName".into(), json!(class));
    }
}

/// Give every container of `pod` (a host pod, or a patch of its ephemeral containers)
/// [`api_env`] for `api`, ahead of its own variables, which win as they win over the kubelet's.
pub fn point_api_at(pod: &mut Value, api: Option<(&str, u16)>) {
    let Some(api) = api else { return };
    let wanted = api_env(api);
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let containers = pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten().filter_map(Value::as_object_mut) {
            let own = c.remove("env").and_then(|e| e.as_array().cloned()).unwrap_or_default();
            let mut env = wanted.clone();
            env.extend(own);
            c.insert("env".into(), Value::Array(env));
        }
    }
}

/// The tenant's cluster domain, the one its DNS answers for.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The search path cluster-first DNS gives a pod in `namespace`, as the kubelet writes it.
pub fn cluster_search_path(namespace: &str, domain: &str) -> [String; 3] {
    [format!("{namespace}.svc.{domain}"), format!("svc.{domain}"), domain.to_owned()]
}

/// Point host pod `host` of a tenant pod in `namespace` at its tenant's cluster DNS, as the
/// kubelet points a pod at the cluster's: a tenant pod with `dnsPolicy: ClusterFirst` (the
/// default) or `ClusterFirstWithHostNet` gets `dnsPolicy: None` on the host, with `nameserver`
/// (the tenant's `kube-system/kube-dns` address), the tenant's search path and `ndots:5`, its
/// own `dnsConfig` merged in as the kubelet merges it (nameservers and searches appended
/// without repeats, options overriding by name). It never resolves through the host cluster's
/// DNS, which knows every tenant's host Services: with no `nameserver` (the tenant removed its
/// DNS Service) it gets the node's resolver (`Default`). `Default` and `None` are kept.
pub fn point_dns_at(host: &mut Value, namespace: &str, domain: &str, nameserver: Option<&str>) {
    let Some(spec) = host.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let policy = spec.get("dnsPolicy").and_then(Value::as_str).unwrap_or("ClusterFirst");
    if !matches!(policy, "ClusterFirst" | "ClusterFirstWithHostNet") {
        return;
    }
    let Some(nameserver) = nameserver else {
        spec.insert("dnsPolicy".into(), json!("Default"));
        return;
    };
    let own = spec.remove("dnsConfig").unwrap_or_else(|| json!({}));
    let strings = |key: &str| -> Vec<String> {
        own.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    };
    let mut nameservers = vec![nameserver.to_owned()];
    let mut searches = cluster_search_path(namespace, domain).to_vec();
    for (merged, key) in [(&mut nameservers, "nameservers"), (&mut searches, "searches")] {
        for value in strings(key) {
            if !merged.contains(&value) {
                merged.push(value);
            }
        }
    }
    let mut options: Vec<Value> = vec![json!({"name": "ndots", "value": "5"})];
    for option in own.get("options").and_then(Value::as_array).into_iter().flatten() {
        match options.iter_mut().find(|o| o["name"] == option["name"]) {
            Some(existing) => *existing = option.clone(),
            None => options.push(option.clone()),
        }
    }
    spec.insert("dnsPolicy".into(), json!("None"));
    spec.insert(
        "dnsConfig".into(),
        json!({"nameservers": nameservers, "searches": searches, "options": options}),
    );
}
