//! What kube-apiserver fills in, without controllers: defaults on create and again on every
//! update, and the update rules (fields that may not change). Each kind's defaults and checks are
//! its strategy's ([`crate::registry`]); this module runs them in order and holds the defaulting
//! shared by pods and pod templates.

use std::borrow::Cow;

use serde_json::{json, Map, Value};

use crate::resource::{ResourceType, Subresource};

/// Set `field` unless it is set: a missing field, null and (Go's zero value) an empty string are
/// unset.
pub(crate) fn set_default(map: &mut Map<String, Value>, field: &str, value: Value) {
    let unset = match map.get(field) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    };
    if unset {
        map.insert(field.into(), value);
    }
}

pub(crate) fn object_at<'a>(
    value: &'a mut Value,
    field: &str,
) -> Option<&'a mut Map<String, Value>> {
    let root = value.as_object_mut()?;
    let entry = root.entry(field).or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

/// Pod spec defaults, as `SetDefaults_PodSpec` and `SetDefaults_Container` apply them.
pub(crate) fn default_pod_spec(spec: &mut Map<String, Value>) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                set_default(container, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(container, "terminationMessagePolicy", json!("File"));
                let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
                let policy = if image_tag_is_latest(image) { "Always" } else { "IfNotPresent" };
                set_default(container, "imagePullPolicy", json!(policy));
                if list == "ephemeralContainers" {
                    // An ephemeral container may not have resources at all.
                    continue;
                }
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

pub(crate) fn default_template(object: &mut Value) {
    if let Some(spec) = object.pointer_mut("/spec/template/spec").and_then(Value::as_object_mut) {
        default_pod_spec(spec);
    }
}

/// Fill in defaults on create.
pub fn on_create(rt: &ResourceType, object: &mut Value) {
    if rt.has(Subresource::Status) && !rt.strategy.keeps_status_on_create() {
        // The status is the server's to write, through `/status`.
        if let Some(root) = object.as_object_mut() {
            root.remove("status");
        }
    }
    apply_defaults(rt, object);
    rt.strategy.create_defaults(object);
}

/// The defaults kube-apiserver applies whenever it decodes an object (on create and on every
/// update), as its `SetDefaults_*` functions do; the status is left alone.
pub(crate) fn apply_defaults(rt: &ResourceType, object: &mut Value) {
    rt.strategy.defaults(object);
}

/// Whether [`apply_defaults`] fills anything in for a kind.
fn has_defaults(rt: &ResourceType) -> bool {
    rt.strategy.has_defaults()
}

/// `SetDefaults_Pod`: a container's requests default to its limits.
pub(crate) fn requests_from_limits(spec: &mut Map<String, Value>) {
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

pub(crate) fn set_default_status(object: &mut Value, status: Value) {
    if let Some(root) = object.as_object_mut() {
        set_default(root, "status", status);
    }
}

/// On update: re-applies the defaults (kube-apiserver defaults every object it decodes) and keeps
/// what the server allocated that a client left out. Returns the stored object as validation
/// compares the new one with: with its defaults, unless it was stored before a default existed.
pub fn on_update<'a>(rt: &ResourceType, old: &'a Value, new: &mut Value) -> Cow<'a, Value> {
    apply_defaults(rt, new);
    rt.strategy.prepare_update(old, new);
    if has_defaults(rt) {
        let mut old = old.clone();
        apply_defaults(rt, &mut old);
        Cow::Owned(old)
    } else {
        Cow::Borrowed(old)
    }
}

/// The checks kube-apiserver makes on every write (see `validation`).
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
        let e = validate(rt("pods"), &pod, None).unwrap_err();
        assert_eq!(e.code(), 422);
        assert_eq!(e.causes()[0].field, "spec.containers[0].image");
    }

    #[test]
    fn immutable_configmaps_stay_immutable() {
        let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "1"}});
        let mut new = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"a": "2"}});
        let old = on_update(rt("configmaps"), &old, &mut new);
        assert_eq!(validate(rt("configmaps"), &new, Some(&old)).unwrap_err().code(), 422);
    }
}
