//! What kube-apiserver fills in and checks per kind, without controllers: defaults on create,
//! immutable fields on update, and the validation clients most often trip over.

use serde_json::{json, Map, Value};

use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

fn set_default(map: &mut Map<String, Value>, field: &str, value: Value) {
    if map.get(field).is_none_or(Value::is_null) {
        map.insert(field.into(), value);
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
    match (rt.group, rt.plural) {
        ("", "pods") => {
            if let Some(spec) = object_at(object, "spec") {
                default_pod_spec(spec);
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
        ("", "services") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "type", json!("ClusterIP"));
                set_default(spec, "sessionAffinity", json!("None"));
                if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
                    for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                        set_default(port, "protocol", json!("TCP"));
                        if let Some(p) = port.get("port").cloned() {
                            set_default(port, "targetPort", p);
                        }
                    }
                }
            }
            set_default_status(object, json!({"loadBalancer": {}}));
        }
        ("apps", "deployments") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
                set_default(spec, "revisionHistoryLimit", json!(10));
                set_default(spec, "progressDeadlineSeconds", json!(600));
                set_default(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
            }
            default_template(object);
        }
        ("apps", "replicasets") | ("apps", "statefulsets") | ("", "replicationcontrollers") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "replicas", json!(1));
            }
            default_template(object);
        }
        ("apps", "daemonsets") => default_template(object),
        ("batch", "jobs") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "parallelism", json!(1));
                set_default(spec, "backoffLimit", json!(6));
                set_default(spec, "completionMode", json!("NonIndexed"));
                set_default(spec, "suspend", json!(false));
            }
            if let Some(spec) = object.pointer("/spec/completions") {
                if spec.is_null() {
                    object["spec"]["completions"] = json!(1);
                }
            } else if object.get("spec").is_some() {
                object["spec"]["completions"] = json!(1);
            }
            default_template(object);
            if let Some(spec) =
                object.pointer_mut("/spec/template/spec").and_then(Value::as_object_mut)
            {
                // A Job's pods must not restart forever; Kubernetes requires Never or OnFailure.
                set_default(spec, "restartPolicy", json!("Never"));
            }
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = object_at(object, "spec") {
                set_default(spec, "concurrencyPolicy", json!("Allow"));
                set_default(spec, "suspend", json!(false));
                set_default(spec, "successfulJobsHistoryLimit", json!(3));
                set_default(spec, "failedJobsHistoryLimit", json!(1));
            }
        }
        ("", "secrets") => {
            if let Some(root) = object.as_object_mut() {
                set_default(root, "type", json!("Opaque"));
            }
        }
        _ => {}
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

fn immutable(rt: &ResourceType, name: &str, field: &str) -> ApiError {
    ApiError::invalid(
        rt.group,
        rt.kind,
        name,
        vec![Cause::new("FieldValueInvalid", field, "field is immutable")],
    )
}

/// Immutable fields on update; also re-applies create-time defaults the update dropped.
pub fn on_update(rt: &ResourceType, old: &Value, new: &mut Value) -> ApiResult<()> {
    let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let same = |path: &str, new: &Value| old.pointer(path) == new.pointer(path);
    match (rt.group, rt.plural) {
        ("", "configmaps") | ("", "secrets") => {
            if old.get("immutable") == Some(&Value::Bool(true)) {
                for field in ["data", "binaryData", "immutable"] {
                    if old.get(field) != new.get(field) {
                        return Err(immutable(rt, &name, field));
                    }
                }
            }
            if rt.plural == "secrets" && !same("/type", new) && new.get("type").is_some() {
                return Err(immutable(rt, &name, "type"));
            }
        }
        ("", "pods") => {
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                default_pod_spec(spec);
            }
            for path in
                ["/spec/containers", "/spec/nodeName", "/spec/volumes", "/spec/restartPolicy"]
            {
                let strip_images = |v: Option<&Value>| {
                    let mut v = v.cloned();
                    if path == "/spec/containers" {
                        if let Some(cs) = v.as_mut().and_then(Value::as_array_mut) {
                            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                                c.remove("image");
                            }
                        }
                    }
                    v
                };
                let was_unset = path == "/spec/nodeName" && old.pointer(path).is_none();
                if !was_unset && strip_images(old.pointer(path)) != strip_images(new.pointer(path))
                {
                    return Err(ApiError::invalid(
                        rt.group,
                        rt.kind,
                        &name,
                        vec![Cause::new(
                            "FieldValueForbidden",
                            "spec",
                            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
                        )],
                    ));
                }
            }
        }
        ("apps", "deployments")
        | ("apps", "replicasets")
        | ("apps", "statefulsets")
        | ("apps", "daemonsets")
        | ("batch", "jobs") => {
            if !same("/spec/selector", new) && new.pointer("/spec/selector").is_some() {
                return Err(immutable(rt, &name, "spec.selector"));
            }
            if rt.plural == "jobs"
                && !same("/spec/template", new)
                && new.pointer("/spec/template").is_some()
            {
                return Err(immutable(rt, &name, "spec.template"));
            }
        }
        ("", "services")
            if old.pointer("/spec/clusterIP").is_some() && !same("/spec/clusterIP", new) =>
        {
            return Err(immutable(rt, &name, "spec.clusterIP"));
        }
        _ => {}
    }
    Ok(())
}

/// The checks kube-apiserver makes that clients most often meet.
pub fn validate(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut causes = Vec::new();
    let mut check_pod_spec = |spec: Option<&Value>, path: &str| {
        let containers = spec.and_then(|s| s.get("containers")).and_then(Value::as_array);
        match containers {
            None => causes.push(Cause::new(
                "FieldValueRequired",
                format!("{path}.containers"),
                "Required value",
            )),
            Some(containers) => {
                for (i, c) in containers.iter().enumerate() {
                    if c.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::new(
                            "FieldValueRequired",
                            format!("{path}.containers[{i}].name"),
                            "Required value",
                        ));
                    }
                    if c.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::new(
                            "FieldValueRequired",
                            format!("{path}.containers[{i}].image"),
                            "Required value",
                        ));
                    }
                }
            }
        }
    };
    match (rt.group, rt.plural) {
        ("", "pods") => check_pod_spec(object.get("spec"), "spec"),
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => {
            check_pod_spec(object.pointer("/spec/template/spec"), "spec.template.spec");
            if rt.group == "apps" && object.pointer("/spec/selector").is_none() {
                causes.push(Cause::new("FieldValueRequired", "spec.selector", "Required value"));
            }
        }
        ("", "configmaps") => {
            for field in ["data", "binaryData"] {
                if let Some(map) = object.get(field) {
                    if !map.is_object() {
                        causes.push(Cause::new(
                            "FieldValueInvalid",
                            field,
                            "Invalid value: must be a map of strings",
                        ));
                    }
                }
            }
        }
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt.group, rt.kind, name, causes))
    }
}

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
        assert_eq!(e.code, 422);
        assert_eq!(e.causes[0].field, "spec.containers[0].image");
    }

    #[test]
    fn immutable_configmaps_stay_immutable() {
        let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}});
        let mut new = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "2"}});
        assert_eq!(on_update(rt("configmaps"), &old, &mut new).unwrap_err().code, 422);
    }
}
