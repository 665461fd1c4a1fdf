//! The ConfigMaps and Secrets a tenant pod reads, their host copies, and the keys its `envFrom`
//! sources hold; the references the syncer cannot carry.

use super::*;

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

pub(super) fn containers_of(spec: &Value) -> impl Iterator<Item = &Value> {
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
            // Claims are carried on their own ([`pod_claims`]), not copied.
            Referent::PersistentVolumeClaim | Referent::Unsynced(_) => {}
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
pub(super) fn allowed_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| (' '..='~').contains(&c) && c != '=')
        && !steers_runtime(name)
}

/// Container `c`'s `envFrom` as explicit `env` entries (see [`host_pod`]).
pub(super) fn expand_env_from(c: &mut Value, namespace: &str, sources: &EnvSources) {
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

/// The references of `pod` the syncer cannot carry to the host ([`pod_refs`]: Endpoints,
/// PersistentVolumes, data sources, trust bundles, signers), as
/// `spec.volumes[0].glusterfs.endpoints: Endpoints "gl"`. The tenant API refuses such pods; the
/// syncer makes no host pod for one (a pod stored before that rule).
pub fn unsynced_references(pod: &Value) -> Vec<String> {
    pod_refs::unsynced_references(&pod["spec"])
}
