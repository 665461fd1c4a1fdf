//! What kube-apiserver fills in per kind, without controllers: defaults on create and again on
//! every update, and the update rules (fields that may not change), whose checks, like the rest
//! of the validation, live in [`crate::validation`].

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::validation;

/// Set `field` unless it is set: a missing field, null and (Go's zero value) an empty string are
/// unset.
fn set_default(map: &mut Map<String, Value>, field: &str, value: Value) {
    let unset = match map.get(field) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    };
    if unset {
        map.insert(field.into(), value);
    }
}

/// A Secret's `stringData` is write-only: as kube-apiserver's conversion does, its entries go
/// into `data`, base64-encoded and winning over a `data` entry of the same key, and it is not
/// kept. (A value that is not a string never gets here: the typed decoding refuses it.)
fn merge_string_data(secret: &mut Map<String, Value>) {
    use base64::Engine;
    let Some(strings) = secret.remove("stringData") else { return };
    let Value::Object(strings) = strings else { return };
    if strings.is_empty() {
        return;
    }
    let data = secret.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        for (key, value) in strings {
            if let Value::String(text) = value {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(key, Value::String(encoded));
            }
        }
    }
}

fn object_at<'a>(value: &'a mut Value, field: &str) -> Option<&'a mut Map<String, Value>> {
    let root = value.as_object_mut()?;
    let entry = root.entry(field).or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// Pod spec defaults, as `SetDefaults_PodSpec` and `SetDefaults_Container` apply them.
fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                set_default(container, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(container, "terminationMessagePolicy", json!("File"));
                let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
                let policy = if image_tag_is_latest(image) { "Always" } else { "IfNotPresent" };
                set_default(container, "imagePullPolicy", json!(policy));
                set_default(container, "resources", json!({}));
                if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
                    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                        set_default(port, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

/// `latest` or no tag (and no digest) means the image is pulled always.
fn image_tag_is_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

fn default_template(object: &mut Value) {
    if let Some(spec) = object.pointer_mut("/spec/template/spec").and_then(Value::as_object_mut) {
        default_pod_spec(spec);
    }
}

/// Fill in defaults on create.
pub fn on_create(rt: &ResourceType, object: &mut Value) {
    apply_defaults(rt, object);
    match (rt.group, rt.plural) {
        ("", "pods") => {
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
        ("", "namespaces") => {
            let name = object.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
            if let Some(meta) = object_at(object, "metadata") {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("kubernetes.io/metadata.name".into(), name);
                }
            }
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "finalizers", json!(["kubernetes"]));
            }
            object["status"] = json!({"phase": "Active"});
        }
        ("", "services") => set_default_status(object, json!({"loadBalancer": {}})),
        ("", "persistentvolumeclaims") => {
            if let Some(status) = object_at(object, "status") {
                set_default(status, "phase", json!("Pending"));
            }
        }
        _ => {}
    }
}

/// The defaults kube-apiserver applies whenever it decodes an object (on create and on every
/// update), as its `SetDefaults_*` functions do; the status is left alone.
fn apply_defaults(rt: &ResourceType, object: &mut Value) {
    match (rt.group, rt.plural) {
        ("carrel.dev", "tenants") => {
            let root = object.as_object_mut().expect("objects are JSON objects");
            let spec = root.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut() {
                set_default(spec, "podSecurity", json!("baseline"));
            }
        }
        ("", "pods") => {
            if let Some(spec) = object_at(object, "spec") {
                default_pod_spec(spec);
                requests_from_limits(spec);
            }
        }
        ("", "services") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                        set_default(port, "protocol", json!("TCP"));
                        let unset = match port.get("targetPort") {
                            None | Some(Value::Null) => true,
                            Some(Value::String(s)) => s.is_empty(),
                            Some(n) => n.as_i64() == Some(0),
                        };
                        if let Some(p) = port.get("port").cloned().filter(|_| unset) {
                            port.insert("targetPort".into(), p);
                        }
                    }
                }
            }
        }
        ("", "secrets") => {
            if let Some(root) = object.as_object_mut() {
                merge_string_data(root);
                set_default(root, "type", json!("Opaque"));
            }
        }
        ("", "persistentvolumeclaims") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "volumeMode", json!("Filesystem"));
            }
        }
        ("", "replicationcontrollers") => {
            // The selector and the labels default to the template's labels.
            let labels = object.pointer("/spec/template/metadata/labels").cloned();
            if let Some(labels) = labels.filter(|l| l.as_object().is_some_and(|m| !m.is_empty())) {
                if let Some(spec) = object_at(object, "spec") {
                    if spec.get("selector").and_then(Value::as_object).is_none_or(Map::is_empty) {
                        spec.insert("selector".into(), labels.clone());
                    }
                }
                if let Some(meta) = object_at(object, "metadata") {
                    if meta.get("labels").and_then(Value::as_object).is_none_or(Map::is_empty) {
                        meta.insert("labels".into(), labels);
                    }
                }
            }
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(object);
        }
        ("apps", "deployments") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                if spec.get("strategy").is_none_or(Value::is_null) {
                    spec.insert("strategy".into(), json!({}));
                }
                if let Some(strategy) = spec.get_mut("strategy").and_then(Value::as_object_mut) {
                    set_default(strategy, "type", json!("RollingUpdate"));
                    if strategy.get("type") == Some(&json!("RollingUpdate")) {
                        set_default(strategy, "rollingUpdate", json!({}));
                        if let Some(rolling) =
                            strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                        {
                            set_default(rolling, "maxUnavailable", json!("25%"));
                            set_default(rolling, "maxSurge", json!("25%"));
                        }
                    }
                }
            }
            default_template(object);
        }
        ("apps", "replicasets") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(object);
        }
        ("apps", "statefulsets") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "podManagementPolicy", json!("OrderedReady"));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
                if spec.get("updateStrategy").is_none_or(Value::is_null) {
                    spec.insert("updateStrategy".into(), json!({}));
                }
                if let Some(strategy) =
                    spec.get_mut("updateStrategy").and_then(Value::as_object_mut)
                {
                    if strategy.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
                        strategy.insert("type".into(), json!("RollingUpdate"));
                        set_default(strategy, "rollingUpdate", json!({}));
                    }
                    if strategy.get("type") == Some(&json!("RollingUpdate")) {
                        if let Some(rolling) =
                            strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                        {
                            set_default(rolling, "partition", json!(0));
                        }
                    }
                }
            }
            default_template(object);
        }
        ("apps", "daemonsets") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "revisionHistoryLimit", json!(10));
                if spec.get("updateStrategy").is_none_or(Value::is_null) {
                    spec.insert("updateStrategy".into(), json!({}));
                }
                if let Some(strategy) =
                    spec.get_mut("updateStrategy").and_then(Value::as_object_mut)
                {
                    set_default(strategy, "type", json!("RollingUpdate"));
                    if strategy.get("type") == Some(&json!("RollingUpdate")) {
                        set_default(strategy, "rollingUpdate", json!({}));
                        if let Some(rolling) =
                            strategy.get_mut("rollingUpdate").and_then(Value::as_object_mut)
                        {
                            set_default(rolling, "maxUnavailable", json!(1));
                            set_default(rolling, "maxSurge", json!(0));
                        }
                    }
                }
            }
            default_template(object);
        }
        ("batch", "jobs") => {
            if let Some(spec) = object_at(object, "spec") {
                default_job_spec(spec);
            }
            // A Job's template gets the pod defaults, restartPolicy Always included, which
            // validation then refuses: kube-apiserver asks for OnFailure or Never explicitly.
            default_template(object);
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
            if let Some(pod) = object
                .pointer_mut("/spec/jobTemplate/spec/template/spec")
                .and_then(Value::as_object_mut)
            {
                default_pod_spec(pod);
            }
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            if let Some(role_ref) = object_at(object, "roleRef") {
                set_default(role_ref, "apiGroup", json!("rbac.authorization.k8s.io"));
            }
            if let Some(subjects) = object.get_mut("subjects").and_then(Value::as_array_mut) {
                for subject in subjects.iter_mut().filter_map(Value::as_object_mut) {
                    if matches!(subject.get("kind").and_then(Value::as_str), Some("User" | "Group"))
                    {
                        set_default(subject, "apiGroup", json!("rbac.authorization.k8s.io"));
                    }
                }
            }
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            if let Some(root) = object.as_object_mut() {
                set_default(root, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            if let Some(root) = object.as_object_mut() {
                set_default(root, "reclaimPolicy", json!("Delete"));
                set_default(root, "volumeBindingMode", json!("Immediate"));
            }
        }
        _ => {}
    }
}

/// Whether [`apply_defaults`] fills anything in for a kind.
fn has_defaults(rt: &ResourceType) -> bool {
    matches!(
        (rt.group, rt.plural),
        ("", "pods" | "services" | "secrets" | "persistentvolumeclaims" | "replicationcontrollers")
            | ("apps", _)
            | ("batch", _)
            | ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings")
            | ("scheduling.k8s.io", "priorityclasses")
            | ("storage.k8s.io", "storageclasses")
    )
}

/// `SetDefaults_Job`: a Job with neither completions nor parallelism runs one pod to completion.
fn default_job_spec(spec: &mut Map<String, Value>) {
    let unset = |spec: &Map<String, Value>, key: &str| spec.get(key).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
}

/// `SetDefaults_Pod`: a container's requests default to its limits.
fn requests_from_limits(spec: &mut Map<String, Value>) {
    for list in ["containers", "initContainers"] {
        let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) else { continue };
        for resources in containers.iter_mut().filter_map(|c| c.get_mut("resources")) {
            let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let Some(resources) = resources.as_object_mut() else { continue };
            if resources.get("requests").is_none_or(|r| !r.is_object()) {
                resources.insert("requests".into(), json!({}));
            }
            if let Some(requests) = resources.get_mut("requests").and_then(Value::as_object_mut) {
                for (name, limit) in limits {
                    requests.entry(name).or_insert(limit);
                }
            }
        }
    }
}

fn set_default_status(object: &mut Value, status: Value) {
    if let Some(root) = object.as_object_mut() {
        set_default(root, "status", status);
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

/// On update: re-applies the defaults (kube-apiserver defaults every object it decodes), keeps
/// what the server allocated that a client left out, and refuses changes to immutable fields,
/// reporting them together with every other validation cause of the new object.
pub fn on_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
    apply_defaults(rt, new);
    if (rt.group, rt.plural) == ("", "services") {
        keep_allocated(old, new);
    }
    // The stored object has its defaults, unless it was stored before a default existed.
    let old = if has_defaults(rt) {
        let mut old = old.clone();
        apply_defaults(rt, &mut old);
        Cow::Owned(old)
    } else {
        Cow::Borrowed(old)
    };
    let changes = validation::update_causes(rt, &old, new);
    if changes.is_empty() {
        return Ok(());
    }
    validation::check_quantities(rt, new)?;
    let mut causes = validation::causes(rt, new);
    causes.extend(changes);
    let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid(rt.group, rt.kind, name, causes))
}

/// A Service update that leaves out its cluster IPs or IP families keeps the old ones, as
/// kube-apiserver's registry does (`patchAllocatedValues`).
fn keep_allocated(old: &Value, new: &mut Value) {
    let external =
        |v: &Value| v.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    if external(old) || external(new) {
        return;
    }
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let unset = |spec: &Map<String, Value>, key: &str| match spec.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    let cluster_ip_unset = unset(spec, "clusterIP");
    for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let carries = match key {
            "clusterIPs" => {
                cluster_ip_unset || spec.get("clusterIP") == old.pointer("/spec/clusterIP")
            }
            _ => true,
        };
        if unset(spec, key) && carries {
            if let Some(value) = old.pointer(&format!("/spec/{key}")).filter(|v| !v.is_null()) {
                spec.insert(key.into(), value.clone());
            }
        }
    }
}

/// The checks kube-apiserver makes on every write (see [`validation`]).
pub use crate::validation::validate;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::BUILT_IN;

    fn rt(plural: &str) -> &'static ResourceType {
        BUILT_IN.iter().find(|t| t.plural == plural).unwrap()
    }

    #[test]
    fn pods_get_kubernetes_defaults_and_pending() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        on_create(rt("pods"), &mut pod);
        assert_eq!(pod["status"]["phase"], "Pending");
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(pod["status"]["qosClass"], "BestEffort");
    }

    #[test]
    fn image_pull_policy_follows_the_tag() {
        assert!(image_tag_is_latest("nginx"));
        assert!(image_tag_is_latest("registry:5000/nginx"));
        assert!(image_tag_is_latest("nginx:latest"));
        assert!(!image_tag_is_latest("nginx:1.27"));
        assert!(!image_tag_is_latest("nginx@sha256:abc"));
    }

    #[test]
    fn pods_without_images_are_invalid_with_field_paths() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        let e = validate(rt("pods"), &pod).unwrap_err();
        assert_eq!(e.code(), 422);
        assert_eq!(e.causes()[0].field, "spec.containers[0].image");
    }

    #[test]
    fn immutable_configmaps_stay_immutable() {
        let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}});
        let mut new = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "2"}});
        assert_eq!(on_update(rt("configmaps"), &old, &mut new).unwrap_err().code(), 422);
    }
}
