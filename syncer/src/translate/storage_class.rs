//! The tenant's view of a host StorageClass: what a tenant needs to choose a class (its name,
//! provisioner, reclaim policy, binding mode, expansion and whether it is the default), without
//! the host's `parameters`, mount options or allowed topologies, which may name the host's own
//! objects (provisioner Secrets) and mean nothing to a tenant.

use super::*;

/// The tenant's mirror of host StorageClass `host`, labelled [`host_names::LABEL_HOST_STORAGE_CLASS`].
pub fn tenant_storage_class(host: &Value) -> Value {
    let name = host.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
    let mut annotations = Map::new();
    if claim::is_default_class(host) {
        annotations.insert(claim::IS_DEFAULT_CLASS.to_owned(), json!("true"));
    }
    let mut class = json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            "labels": {host_names::LABEL_HOST_STORAGE_CLASS: "true"},
            "annotations": annotations,
        },
        "provisioner": host.get("provisioner").cloned().unwrap_or(Value::Null),
        // kube-apiserver's defaults, written out so that a mirror compares equal to what the
        // tenant API stores.
        "reclaimPolicy": host.get("reclaimPolicy").filter(|v| !v.is_null()).cloned()
            .unwrap_or_else(|| json!("Delete")),
        "volumeBindingMode": host.get("volumeBindingMode").filter(|v| !v.is_null()).cloned()
            .unwrap_or_else(|| json!("Immediate")),
    });
    if let Some(expand) = host.get("allowVolumeExpansion").filter(|v| !v.is_null()) {
        class["allowVolumeExpansion"] = expand.clone();
    }
    class
}

/// The fields of a StorageClass the tenant API refuses to change (`provisioner`,
/// `reclaimPolicy`, `volumeBindingMode`, `parameters`): a mirror that differs in one is made
/// again.
pub fn storage_class_immutable(class: &Value) -> Value {
    json!({
        "provisioner": class.get("provisioner"),
        "reclaimPolicy": class.get("reclaimPolicy"),
        "volumeBindingMode": class.get("volumeBindingMode"),
        "parameters": class.get("parameters").filter(|p| p.as_object().is_some_and(|m| !m.is_empty())),
    })
}

/// What a tenant is shown of a StorageClass (its mirror as [`tenant_storage_class`] writes it):
/// two that show the same need no write between them.
pub fn storage_class_shown(class: &Value) -> Value {
    let mut shown = storage_class_immutable(class);
    shown["default"] = json!(claim::is_default_class(class));
    shown["labelled"] = json!(
        class
            .pointer(&format!(
                "/metadata/labels/{}",
                host_names::LABEL_HOST_STORAGE_CLASS.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true")
    );
    shown["allowVolumeExpansion"] =
        class.get("allowVolumeExpansion").cloned().unwrap_or(Value::Null);
    shown
}
