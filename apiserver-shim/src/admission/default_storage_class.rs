//! The default StorageClass at admission, as kube-apiserver's `DefaultStorageClass` plugin sets
//! it: a new PersistentVolumeClaim that names no class (no `spec.storageClassName`, not even
//! `""`, and no beta class annotation) gets the cluster's default class, the StorageClass
//! annotated `storageclass.kubernetes.io/is-default-class: "true"` (or its beta key). With several
//! defaults the newest wins, ties broken by name; with none the claim is left as it is.

use serde_json::Value;

use crate::api::{Api, ListParams, Target};
use crate::status::{ApiError, ApiResult};

/// The annotation that marks the default StorageClass.
pub const IS_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
/// Its beta key, still honoured.
pub const BETA_IS_DEFAULT_CLASS: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The beta annotation a claim could name its class with before `spec.storageClassName`.
pub const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// Whether StorageClass `class` is marked as a default (`IsDefaultAnnotation`).
pub fn is_default(class: &Value) -> bool {
    [IS_DEFAULT_CLASS, BETA_IS_DEFAULT_CLASS].iter().any(|key| {
        class.pointer("/metadata/annotations").and_then(|a| a.get(*key)).and_then(Value::as_str)
            == Some("true")
    })
}

/// The default class among `classes` (`GetDefaultClass`): of those marked default, the newest
/// by `creationTimestamp`, then the first by name.
pub fn default_class(classes: &[Value]) -> Option<&str> {
    newest_marked(classes, is_default)
}

/// Of the `classes` that `marked` says are the default, the newest by `creationTimestamp`, then
/// the first by name: how kube-apiserver picks a default class of any kind.
pub(crate) fn newest_marked(classes: &[Value], marked: fn(&Value) -> bool) -> Option<&str> {
    let created = |c: &Value| {
        c.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    fn name(c: &Value) -> &str {
        c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
    }
    classes
        .iter()
        .filter(|c| marked(c) && !name(c).is_empty())
        .min_by(|a, b| created(b).cmp(&created(a)).then_with(|| name(a).cmp(name(b))))
        .map(name)
}

/// Whether claim `claim` names a class (`PersistentVolumeClaimHasClass`): a
/// `spec.storageClassName`, `""` included, or the beta annotation.
pub fn claim_has_class(claim: &Value) -> bool {
    let annotated = claim
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(BETA_STORAGE_CLASS));
    annotated || claim.pointer("/spec/storageClassName").is_some_and(|c| !c.is_null())
}

/// A new claim without a class gets the cluster's default one, if there is one.
pub fn admit_claim(api: &Api, claim: &mut Value) -> ApiResult<()> {
    if claim_has_class(claim) {
        return Ok(());
    }
    let classes = DefaultClass {
        classes: ("storage.k8s.io", "storageclasses"),
        marked: is_default,
        object: ("", "persistentvolumeclaims"),
        field: "storageClassName",
    };
    classes.give(api, claim)
}

/// How a kind of object is given the cluster's default class of some kind.
pub(crate) struct DefaultClass {
    /// The classes' group and resource (version `v1`).
    pub classes: (&'static str, &'static str),
    /// Whether a class is marked as the default.
    pub marked: fn(&Value) -> bool,
    /// The object's group and resource, for a refusal.
    pub object: (&'static str, &'static str),
    /// The field of the object's `spec` that names its class.
    pub field: &'static str,
}

impl DefaultClass {
    /// Set `object`'s class to the newest default class, if there is one.
    pub fn give(&self, api: &Api, object: &mut Value) -> ApiResult<()> {
        let registry = api.registry();
        let (group, resource) = self.classes;
        let Some(rt) = registry.get(group, "v1", resource) else { return Ok(()) };
        let list =
            api.list(&Target { rt, namespace: None }, &ListParams::default()).map_err(|e| {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                ApiError::forbidden(self.object.0, self.object.1, name, e.message())
            })?;
        let classes = list["items"].as_array().cloned().unwrap_or_default();
        if let (Some(class), Some(spec)) = (
            newest_marked(&classes, self.marked),
            object.get_mut("spec").and_then(Value::as_object_mut),
        ) {
            spec.insert(self.field.into(), Value::String(class.to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: &str, default: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if let Some(v) = default {
            c["metadata"]["annotations"] = json!({IS_DEFAULT_CLASS: v});
        }
        c
    }

    #[test]
    fn the_newest_default_wins_then_the_first_by_name() {
        let classes = vec![
            class("old", "2024-01-01T00:00:00Z", Some("true")),
            class("plain", "2026-01-01T00:00:00Z", None),
            class("off", "2026-01-01T00:00:00Z", Some("false")),
            class("newer-b", "2025-01-01T00:00:00Z", Some("true")),
            class("newer-a", "2025-01-01T00:00:00Z", Some("true")),
        ];
        assert_eq!(default_class(&classes), Some("newer-a"));
        assert_eq!(default_class(&classes[..3]), Some("old"));
        assert_eq!(default_class(&classes[1..3]), None);
        let beta =
            json!({"metadata": {"name": "beta", "annotations": {BETA_IS_DEFAULT_CLASS: "true"}}});
        assert!(is_default(&beta));
    }

    #[test]
    fn only_a_claim_naming_no_class_is_defaulted() {
        assert!(!claim_has_class(&json!({"spec": {}})));
        assert!(!claim_has_class(&json!({"spec": {"storageClassName": null}})));
        assert!(claim_has_class(&json!({"spec": {"storageClassName": ""}})));
        assert!(claim_has_class(&json!({"spec": {"storageClassName": "fast"}})));
        assert!(claim_has_class(
            &json!({"metadata": {"annotations": {BETA_STORAGE_CLASS: "x"}}, "spec": {}})
        ));
    }
}
