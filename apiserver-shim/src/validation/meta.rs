//! Object metadata (`ValidateObjectMeta`), for every kind.

use serde_json::Value;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::resource::ResourceType;
use crate::validation::{at, go_strings, items, text, Errors};

/// The largest total of annotation keys and values (`TotalAnnotationSizeLimitB`).
pub(crate) const MAX_ANNOTATIONS_SIZE: usize = 256 * 1024;

/// The finalizers a name without a `/` may be.
pub(crate) const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

pub(crate) fn object_meta(rt: &ResourceType, object: &Value, e: &mut Errors) {
    let meta = at(object, "metadata");
    let prefix = text(meta, "generateName");
    if !prefix.is_empty() {
        let rule = rt.strategy.name_rule();
        e.invalid_each("metadata.generateName", prefix, rule.check_prefix(prefix));
    }
    labels(meta.get("labels"), "metadata.labels", e);
    annotations(meta.get("annotations"), "metadata.annotations", e);
    owner_references(items(meta, "ownerReferences"), e);
    finalizers(items(meta, "finalizers"), e);
    managed_fields(items(meta, "managedFields"), e);
}

/// `ValidateManagedFields`: the operation, the fields type, the manager (`ValidateFieldManager`:
/// at most 128 bytes, printable) and the subresource (at most 256 bytes) of each entry.
pub(crate) fn managed_fields(entries: &[Value], e: &mut Errors) {
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("metadata.managedFields[{i}]");
        let operation = text(entry, "operation");
        if !matches!(operation, "Apply" | "Update") {
            e.invalid(
                &format!("{path}.operation"),
                &quote(operation),
                "must be `Apply` or `Update`",
            );
        }
        let fields_type = text(entry, "fieldsType");
        if !fields_type.is_empty() && fields_type != "FieldsV1" {
            e.invalid(&format!("{path}.fieldsType"), &quote(fields_type), "must be `FieldsV1`");
        }
        let manager = text(entry, "manager");
        if manager.len() > crate::managed::MAX_MANAGER_LEN {
            e.too_long(&format!("{path}.manager"), crate::managed::MAX_MANAGER_LEN);
        } else if let Some(c) = manager.chars().find(|c| c.is_control()) {
            e.invalid(
                &format!("{path}.manager"),
                &quote(manager),
                &format!("invalid character U+{:04X}", u32::from(c)),
            );
        }
        if text(entry, "subresource").len() > MAX_SUBRESOURCE_NAME_LEN {
            e.too_long(&format!("{path}.subresource"), MAX_SUBRESOURCE_NAME_LEN);
        }
    }
}

/// `MaxSubresourceNameLength`.
pub(crate) const MAX_SUBRESOURCE_NAME_LEN: usize = 256;

/// `ValidateLabels`: qualified-name keys, label values; the path is the map's.
pub(crate) fn labels(map: Option<&Value>, path: &str, e: &mut Errors) {
    for (key, value) in map.and_then(Value::as_object).into_iter().flatten() {
        e.invalid_each(path, key, names::qualified_name(key));
        let value = value.as_str().unwrap_or_default();
        e.invalid_each(path, value, names::label_value(value));
    }
}

/// `ValidateAnnotations`: qualified-name keys (case aside) and at most 256 KiB in all.
pub(crate) fn annotations(map: Option<&Value>, path: &str, e: &mut Errors) {
    let Some(map) = map.and_then(Value::as_object) else { return };
    let mut size = 0;
    for (key, value) in map {
        e.invalid_each(path, key, names::qualified_name(&key.to_lowercase()));
        size += key.len() + value.as_str().map_or(0, str::len);
    }
    if size > MAX_ANNOTATIONS_SIZE {
        e.too_long(path, MAX_ANNOTATIONS_SIZE);
    }
}

/// `ValidateOwnerReferences`.
pub(crate) fn owner_references(refs: &[Value], e: &mut Errors) {
    let path = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    for r in refs {
        let api_version = text(r, "apiVersion");
        let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
            [version] | [_, version] => *version,
            _ => "",
        };
        let (kind, name) = (text(r, "kind"), text(r, "name"));
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
        if text(r, "uid").is_empty() {
            e.invalid(&format!("{path}.uid"), &quote(text(r, "uid")), "uid must not be empty");
        }
        if api_version == "v1" && kind == "Event" {
            e.invalid(path, &r.to_string(), "/v1, Kind=Event is disallowed from being an owner");
        }
        if r.get("controller") == Some(&Value::Bool(true)) {
            let current = format!("{kind}/{name}");
            match &controller {
                Some(first) => e.invalid(
                    path,
                    &Value::Array(refs.to_vec()).to_string(),
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
pub(crate) fn finalizers(list: &[Value], e: &mut Errors) {
    let path = "metadata.finalizers";
    let all: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    for f in &all {
        e.invalid_each(path, f, names::qualified_name(f));
    }
    if all.contains(&"orphan") && all.contains(&"foregroundDeletion") {
        let shown = go_strings("string", Some(&Value::Array(list.to_vec())));
        e.invalid(path, &shown, "finalizer orphan and foregroundDeletion cannot be both set");
    }
    for (i, f) in list.iter().enumerate() {
        let f = f.as_str().unwrap_or_default();
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
            e.invalid(
                &format!("{path}[{i}]"),
                &quote(f),
                "name is neither a standard finalizer name nor is it fully qualified",
            );
        }
    }
}
