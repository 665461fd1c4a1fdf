//! Object metadata (`ValidateObjectMeta`), for every kind.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ManagedFieldsEntry, ObjectMeta, OwnerReference,
};

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::resource::ResourceType;
use crate::validation::{compact, go_strings, Errors};

/// The largest total of annotation keys and values (`TotalAnnotationSizeLimitB`).
pub(crate) const MAX_ANNOTATIONS_SIZE: usize = 256 * 1024;

/// The finalizers a name without a `/` may be.
pub(crate) const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

pub(crate) fn object_meta(rt: &ResourceType, meta: &ObjectMeta, e: &mut Errors) {
    let prefix = meta.generate_name.as_deref().unwrap_or_default();
    if !prefix.is_empty() {
        let rule = rt.strategy.name_rule();
        e.invalid_each("metadata.generateName", prefix, rule.check_prefix(prefix));
    }
    labels(meta.labels.as_ref(), "metadata.labels", e);
    annotations(meta.annotations.as_ref(), "metadata.annotations", e);
    owner_references(meta.owner_references.as_deref().unwrap_or_default(), e);
    finalizers(meta.finalizers.as_deref().unwrap_or_default(), e);
    managed_fields(meta.managed_fields.as_deref().unwrap_or_default(), e);
}

/// `ValidateObjectMetaUpdate`, in part: no new finalizers once the object is being deleted.
pub(crate) fn object_meta_update(old: &ObjectMeta, new: &ObjectMeta, e: &mut Errors) {
    if old.deletion_timestamp.is_none() {
        return;
    }
    let before: BTreeSet<&str> = old.finalizers.iter().flatten().map(String::as_str).collect();
    let extra: BTreeSet<&str> = new
        .finalizers
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|f| !before.contains(f))
        .collect();
    if !extra.is_empty() {
        let list = extra.iter().map(|f| quote(f)).collect::<Vec<_>>().join(", ");
        e.forbidden(
            "metadata.finalizers",
            &format!(
                "no new finalizers can be added if the object is being deleted, found new \
                 finalizers []string{{{list}}}"
            ),
        );
    }
}

/// `ValidateManagedFields`: the operation, the fields type, the manager (`ValidateFieldManager`:
/// at most 128 bytes, printable) and the subresource (at most 256 bytes) of each entry.
pub(crate) fn managed_fields(entries: &[ManagedFieldsEntry], e: &mut Errors) {
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("metadata.managedFields[{i}]");
        let operation = entry.operation.as_deref().unwrap_or_default();
        if !matches!(operation, "Apply" | "Update") {
            e.invalid(
                &format!("{path}.operation"),
                &quote(operation),
                "must be `Apply` or `Update`",
            );
        }
        let fields_type = entry.fields_type.as_deref().unwrap_or_default();
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            e.invalid(&format!("{path}.fieldsType"), &quote(fields_type), "must be `FieldsV1`");
        }
        let manager = entry.manager.as_deref().unwrap_or_default();
        if manager.len() > crate::managed::MAX_MANAGER_LEN {
            e.too_long(&format!("{path}.manager"), crate::managed::MAX_MANAGER_LEN);
        } else if let Some(c) = manager.chars().find(|c| c.is_control()) {
            e.invalid(
                &format!("{path}.manager"),
                &quote(manager),
                &format!("invalid character U+{:04X}", u32::from(c)),
            );
        }
        if entry.subresource.as_deref().unwrap_or_default().len() > MAX_SUBRESOURCE_NAME_LEN {
            e.too_long(&format!("{path}.subresource"), MAX_SUBRESOURCE_NAME_LEN);
        }
    }
}

/// `MaxSubresourceNameLength`.
pub(crate) const MAX_SUBRESOURCE_NAME_LEN: usize = 256;

/// `ValidateLabels`: qualified-name keys, label values; the path is the map's.
pub(crate) fn labels(map: Option<&BTreeMap<String, String>>, path: &str, e: &mut Errors) {
    for (key, value) in map.into_iter().flatten() {
        e.invalid_each(path, key, names::qualified_name(key));
        e.invalid_each(path, value, names::label_value(value));
    }
}

/// `ValidateAnnotations`: qualified-name keys (case aside) and at most 256 KiB in all.
pub(crate) fn annotations(map: Option<&BTreeMap<String, String>>, path: &str, e: &mut Errors) {
    let Some(map) = map else { return };
    let mut size = 0;
    for (key, value) in map {
        e.invalid_each(path, key, names::qualified_name(&key.to_lowercase()));
        size += key.len() + value.len();
    }
    if size > MAX_ANNOTATIONS_SIZE {
        e.too_long(path, MAX_ANNOTATIONS_SIZE);
    }
}

/// `ValidateOwnerReferences`.
pub(crate) fn owner_references(refs: &[OwnerReference], e: &mut Errors) {
    let path = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    for r in refs {
        let api_version = r.api_version.as_str();
        let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
            [version] | [_, version] => *version,
            _ => "",
        };
        let (kind, name) = (r.kind.as_str(), r.name.as_str());
        if version.is_empty() {
            e.invalid(
                &format!("{path}.apiVersion"),
                &quote(api_version),
                "version must not be empty",
            );
        }
        if kind.is_empty() {
            e.invalid(&format!("{path}.kind"), &quote(kind), "kind must not be empty");
        }
        if name.is_empty() {
            e.invalid(&format!("{path}.name"), &quote(name), "name must not be empty");
        }
        if r.uid.is_empty() {
            e.invalid(&format!("{path}.uid"), &quote(&r.uid), "uid must not be empty");
        }
        if api_version == "v1" && kind == "Event" {
            e.invalid(path, &compact(r), "/v1, Kind=Event is disallowed from being an owner");
        }
        if r.controller == Some(true) {
            let current = format!("{kind}/{name}");
            match &controller {
                Some(first) => e.invalid(
                    path,
                    &compact(&refs),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in \
                         references for {first} and {current}"
                    ),
                ),
                None => controller = Some(current),
            }
        }
    }
}

/// `ValidateFinalizers` (qualified names, not both orphan and foregroundDeletion), then the
/// core group's rule that a name without a `/` be a standard one.
pub(crate) fn finalizers(list: &[String], e: &mut Errors) {
    let path = "metadata.finalizers";
    for f in list {
        e.invalid_each(path, f, names::qualified_name(f));
    }
    if list.iter().any(|f| f == "orphan") && list.iter().any(|f| f == "foregroundDeletion") {
        let shown = go_strings("string", Some(list));
        e.invalid(path, &shown, "finalizer orphan and foregroundDeletion cannot be both set");
    }
    for (i, f) in list.iter().enumerate() {
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
            e.invalid(
                &format!("{path}[{i}]"),
                &quote(f),
                "name is neither a standard finalizer name nor is it fully qualified",
            );
        }
    }
}
