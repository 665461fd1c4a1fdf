//! kube-apiserver 1.33's validation of what users most often get wrong, in its words: object
//! metadata for every kind, the common per-kind spec checks, and the fields an update may not
//! change. Every cause of one object is reported together, each with kube-apiserver's field path,
//! reason (`FieldValueInvalid`, `FieldValueRequired`, …) and message (`Invalid value: "x": …`).
//!
//! Bad values are printed as kube-apiserver prints them: strings quoted as Go's `%q`, numbers
//! bare, label maps and selectors as Go's `%#v`. Other structured values (a whole pod template, a
//! list of owner references) are printed as compact JSON, where kube-apiserver prints Go structs.

use std::collections::{BTreeSet, HashSet};

use serde_json::{Map, Value};

use crate::names::{self, NameRule};
use crate::object::go_quote as quote;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

static NULL: Value = Value::Null;

/// kube-apiserver's `IsNegativeErrorMsg`.
const NEGATIVE: &str = "must be greater than or equal to 0";
/// `InclusiveRangeError(1, 65535)`.
const PORT_RANGE: &str = "must be between 1 and 65535, inclusive";
/// `resource.ParseQuantity`'s error, which kube-apiserver answers while decoding (400).
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// The largest ConfigMap or Secret payload (`core.MaxSecretSize`).
const MAX_DATA_SIZE: usize = 1024 * 1024;
/// The largest total of annotation keys and values (`TotalAnnotationSizeLimitB`).
const MAX_ANNOTATIONS_SIZE: usize = 256 * 1024;
/// The finalizers a name without a `/` may be.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];
/// The largest priority a user-defined PriorityClass may have.
const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// Causes, as `field.ErrorList` collects them.

/// The causes found, in order, each once (kube-apiserver's aggregate drops repeats).
#[derive(Debug, Default)]
struct Errors(Vec<Cause>);

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

impl Errors {
    fn push(&mut self, reason: &'static str, field: &str, message: String) {
        let cause = Cause::new(reason, field, message);
        if !self.0.contains(&cause) {
            self.0.push(cause);
        }
    }

    /// `field.Required`: `Required value[: detail]`.
    fn required(&mut self, field: &str, detail: &str) {
        self.push("FieldValueRequired", field, with_detail("Required value".into(), detail));
    }

    /// `field.Invalid`: `Invalid value: <value>[: detail]`; `value` is already printed.
    fn invalid(&mut self, field: &str, value: &str, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            with_detail(format!("Invalid value: {value}"), detail),
        );
    }

    /// `field.NotSupported`: `Unsupported value: <value>: supported values: "A", "B"`.
    fn not_supported(&mut self, field: &str, value: &str, supported: &[&str]) {
        let list = supported.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", ");
        let detail =
            if supported.is_empty() { String::new() } else { format!("supported values: {list}") };
        self.push(
            "FieldValueNotSupported",
            field,
            with_detail(format!("Unsupported value: {value}"), &detail),
        );
    }

    /// `field.Forbidden`: `Forbidden: detail`.
    fn forbidden(&mut self, field: &str, detail: &str) {
        self.push("FieldValueForbidden", field, with_detail("Forbidden".into(), detail));
    }

    /// `field.TooLong`: `Too long: may not be more than N bytes`.
    fn too_long(&mut self, field: &str, max: usize) {
        let unit = if max == 1 { "byte" } else { "bytes" };
        self.push(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} {unit}"),
        );
    }

    /// `field.Duplicate`: `Duplicate value: <value>`.
    fn duplicate(&mut self, field: &str, value: &str) {
        self.push("FieldValueDuplicate", field, format!("Duplicate value: {value}"));
    }

    /// `field.NotFound`: `Not found: <value>`.
    fn not_found(&mut self, field: &str, value: &str) {
        self.push("FieldValueNotFound", field, format!("Not found: {value}"));
    }

    /// `ValidateNonnegativeField` of an integer field, if set.
    fn nonnegative(&mut self, parent: &Value, key: &str, field: &str) {
        if let Some(n) = parent.get(key).and_then(Value::as_i64).filter(|n| *n < 0) {
            self.invalid(field, &n.to_string(), NEGATIVE);
        }
    }

    /// One `Invalid` per message of a name check.
    fn invalid_each(&mut self, field: &str, value: &str, messages: Vec<String>) {
        for message in messages {
            self.invalid(field, &quote(value), &message);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Values as kube-apiserver prints them.

/// A JSON value as a bad value: strings quoted, numbers and booleans bare, nothing as `"null"`,
/// anything else as compact JSON.
fn shown(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => quote("null"),
        Some(Value::String(s)) => quote(s),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

/// A `map[string]string` as Go's `%#v` prints it (keys sorted).
fn go_string_map(map: Option<&Value>) -> String {
    match map.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), quote(v.as_str().unwrap_or_default())))
                .collect();
            format!("map[string]string{{{}}}", items.join(", "))
        }
    }
}

/// A list of strings as Go's `%#v` prints a `[]T` of string type `T`.
fn go_strings(type_name: &str, list: Option<&Value>) -> String {
    match list.and_then(Value::as_array) {
        None => format!("[]{type_name}(nil)"),
        Some(items) => {
            let items: Vec<String> =
                items.iter().map(|v| quote(v.as_str().unwrap_or_default())).collect();
            format!("[]{type_name}{{{}}}", items.join(", "))
        }
    }
}

/// A `*metav1.LabelSelector` as a bad value.
fn go_label_selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector.filter(|s| !s.is_null()) else {
        return quote("null");
    };
    let labels = go_string_map(field(selector, "matchLabels"));
    let expressions = match field(selector, "matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let items: Vec<String> = list
                .iter()
                .map(|r| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        quote(text(r, "key")),
                        quote(text(r, "operator")),
                        go_strings("string", field(r, "values"))
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}

// ---------------------------------------------------------------------------------------------
// Reading objects.

/// A field that is set (not missing, not null).
fn field<'a>(parent: &'a Value, key: &str) -> Option<&'a Value> {
    parent.get(key).filter(|v| !v.is_null())
}

/// A field, or null.
fn at<'a>(parent: &'a Value, key: &str) -> &'a Value {
    parent.get(key).unwrap_or(&NULL)
}

/// A string field; empty if unset (Go's zero value).
fn text<'a>(parent: &'a Value, key: &str) -> &'a str {
    parent.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A list field; empty if unset.
fn items<'a>(parent: &'a Value, key: &str) -> &'a [Value] {
    parent.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// A map field; `None` if unset.
fn map_of<'a>(parent: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    parent.get(key).and_then(Value::as_object)
}

/// Whether two values are equal as Go's `equality.Semantic` sees them: unset, null, empty maps,
/// lists and strings are all the zero value.
pub fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn zero(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        }
    }
    if zero(a) && zero(b) {
        return true;
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| semantic_eq(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points.

/// The checks kube-apiserver makes on create and update: a 400 for a quantity that does not
/// parse (kube-apiserver refuses it while decoding), else a 422 Invalid listing every cause.
pub fn validate(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    check_quantities(rt, object)?;
    let found = causes(rt, object);
    if found.is_empty() {
        return Ok(());
    }
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid(rt.group, rt.kind, name, found))
}

/// Every validation cause of an object, as kube-apiserver's `Validate<Kind>` finds them.
pub fn causes(rt: &ResourceType, object: &Value) -> Vec<Cause> {
    let mut e = Errors::default();
    object_meta(rt, object, &mut e);
    let spec = at(object, "spec");
    match (rt.group, rt.plural) {
        ("", "pods") => pod_spec(spec, "spec", &mut e),
        ("", "services") => service(spec, &mut e),
        ("", "configmaps") => config_map(object, &mut e),
        ("", "secrets") => secret(object, &mut e),
        ("", "namespaces") => namespace(spec, &mut e),
        ("", "persistentvolumeclaims") => claim_spec(spec, "spec", &mut e),
        ("", "replicationcontrollers") => replication_controller(spec, &mut e),
        ("", "events") => event(object, false, &mut e),
        ("events.k8s.io", "events") => event(object, true, &mut e),
        ("apps", "deployments") => replicated(spec, "deployment", "Deployment", &mut e),
        ("apps", "replicasets") => replicated(spec, "deployment", "ReplicaSet", &mut e),
        ("apps", "statefulsets") => stateful_set(spec, &mut e),
        ("apps", "daemonsets") => daemon_set(spec, &mut e),
        ("batch", "jobs") => job(spec, &mut e),
        ("batch", "cronjobs") => cron_job(object, &mut e),
        ("coordination.k8s.io", "leases") => lease(spec, &mut e),
        ("rbac.authorization.k8s.io", "roles") => {
            policy_rules(items(object, "rules"), true, &mut e)
        }
        ("rbac.authorization.k8s.io", "clusterroles") => {
            policy_rules(items(object, "rules"), false, &mut e)
        }
        ("rbac.authorization.k8s.io", "rolebindings") => role_binding(object, true, &mut e),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => role_binding(object, false, &mut e),
        ("scheduling.k8s.io", "priorityclasses") => priority_class(object, &mut e),
        ("storage.k8s.io", "storageclasses") => storage_class(object, &mut e),
        ("carrel.dev", "tenants") => e.0.extend(crate::tenant::types::validate(object)),
        _ => {}
    }
    e.0
}

/// A 400 BadRequest for the first resource quantity that does not parse, worded as
/// kube-apiserver's decoding error.
pub fn check_quantities(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    let mut lists: Vec<&Value> = Vec::new();
    if let Some(spec) = pod_spec_of(rt, object) {
        for list in ["containers", "initContainers"] {
            for c in items(spec, list) {
                lists.push(at(at(c, "resources"), "limits"));
                lists.push(at(at(c, "resources"), "requests"));
            }
        }
    }
    let spec = at(object, "spec");
    match (rt.group, rt.plural) {
        ("", "persistentvolumeclaims") => {
            lists.push(at(at(spec, "resources"), "requests"));
            lists.push(at(at(spec, "resources"), "limits"));
        }
        ("apps", "statefulsets") => {
            for claim in items(spec, "volumeClaimTemplates") {
                lists.push(at(at(at(claim, "spec"), "resources"), "requests"));
                lists.push(at(at(at(claim, "spec"), "resources"), "limits"));
            }
        }
        ("", "resourcequotas") => lists.push(at(spec, "hard")),
        ("", "persistentvolumes") => lists.push(at(spec, "capacity")),
        ("", "limitranges") => {
            for limit in items(spec, "limits") {
                for key in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
                    lists.push(at(limit, key));
                }
            }
        }
        _ => {}
    }
    let bad = lists
        .iter()
        .filter_map(|list| list.as_object())
        .flat_map(|map| map.values())
        .any(|q| quantity_of(q).is_none());
    if bad {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {QUANTITY_FORMAT}",
            kind = rt.kind,
            version = rt.version,
        )));
    }
    Ok(())
}

/// The pod spec an object carries (a pod's own, or its template's).
fn pod_spec_of<'a>(rt: &ResourceType, object: &'a Value) -> Option<&'a Value> {
    let pointer = match (rt.group, rt.plural) {
        ("", "pods") => "/spec",
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => "/spec/template/spec",
        ("batch", "cronjobs") => "/spec/jobTemplate/spec/template/spec",
        _ => return None,
    };
    object.pointer(pointer).filter(|v| v.is_object())
}

/// The causes an update adds to validation: fields it may not change, in kube-apiserver's words.
/// `old` and `new` both carry their defaults.
pub fn update_causes(rt: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    let mut e = Errors::default();
    // `ValidateObjectMetaUpdate`: no new finalizers once the object is being deleted.
    let (old_meta, new_meta) = (at(old, "metadata"), at(new, "metadata"));
    if field(old_meta, "deletionTimestamp").is_some() {
        let before: BTreeSet<&str> =
            items(old_meta, "finalizers").iter().filter_map(Value::as_str).collect();
        let extra: BTreeSet<&str> = items(new_meta, "finalizers")
            .iter()
            .filter_map(Value::as_str)
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
    let (old_spec, new_spec) = (at(old, "spec"), at(new, "spec"));
    let changed = |a: &Value, b: &Value, key: &str| !semantic_eq(a.get(key), b.get(key));
    match (rt.group, rt.plural) {
        ("", "configmaps") | ("", "secrets") => {
            if rt.plural == "secrets" && changed(old, new, "type") {
                e.invalid("type", &shown(new.get("type")), "field is immutable");
            }
            if old.get("immutable") == Some(&Value::Bool(true)) {
                let sealed = "field is immutable when `immutable` is set";
                if new.get("immutable") != Some(&Value::Bool(true)) {
                    e.forbidden("immutable", sealed);
                }
                if changed(old, new, "data")
                    || (rt.plural == "secrets" && changed(old, new, "stringData"))
                {
                    e.forbidden("data", sealed);
                }
                if rt.plural == "configmaps" && changed(old, new, "binaryData") {
                    e.forbidden("binaryData", sealed);
                }
            }
        }
        ("", "pods") => pod_update(old_spec, new_spec, &mut e),
        ("apps", "deployments" | "replicasets" | "daemonsets")
            if changed(old_spec, new_spec, "selector") =>
        {
            e.invalid(
                "spec.selector",
                &go_label_selector(field(new_spec, "selector")),
                "field is immutable",
            );
        }
        ("apps", "statefulsets") => {
            let mutable = [
                "replicas",
                "ordinals",
                "template",
                "updateStrategy",
                "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds",
            ];
            let keys: BTreeSet<&String> =
                object_keys(old_spec).chain(object_keys(new_spec)).collect();
            if keys
                .iter()
                .any(|k| !mutable.contains(&k.as_str()) && changed(old_spec, new_spec, k.as_str()))
            {
                e.forbidden(
                    "spec",
                    "updates to statefulset spec for fields other than 'replicas', 'ordinals', \
                     'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and \
                     'minReadySeconds' are forbidden",
                );
            }
        }
        ("batch", "jobs") => job_update(old, new, &mut e),
        ("", "services") => service_update(old_spec, new_spec, &mut e),
        ("", "persistentvolumeclaims") => claim_update(old, new, &mut e),
        ("", "nodes") => {
            let cidrs = |spec: &Value| -> Vec<String> {
                let list: Vec<String> = items(spec, "podCIDRs")
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect();
                match (list.is_empty(), text(spec, "podCIDR")) {
                    (true, one) if !one.is_empty() => vec![one.to_owned()],
                    _ => list,
                }
            };
            let (before, after) = (cidrs(old_spec), cidrs(new_spec));
            if !before.is_empty() {
                let message = "node updates may not change podCIDR except from \"\" to valid";
                if before.len() != after.len() {
                    e.forbidden("spec.podCIDRs", message);
                } else {
                    for (a, b) in before.iter().zip(&after) {
                        if a != b {
                            e.forbidden("spec.podCIDRs", message);
                        }
                    }
                }
            }
            let provider = text(old_spec, "providerID");
            if !provider.is_empty() && provider != text(new_spec, "providerID") {
                e.forbidden(
                    "spec.providerID",
                    "node updates may not change providerID except from \"\" to valid",
                );
            }
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings")
            if changed(old, new, "roleRef") =>
        {
            let role_ref = at(new, "roleRef");
            let shown = format!(
                "rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}",
                quote(text(role_ref, "apiGroup")),
                quote(text(role_ref, "kind")),
                quote(text(role_ref, "name"))
            );
            e.invalid("roleRef", &shown, "cannot change roleRef");
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            if changed(old, new, "value") {
                e.forbidden("value", "may not be changed in an update.");
            }
            if changed(old, new, "preemptionPolicy") {
                e.invalid(
                    "preemptionPolicy",
                    &shown(new.get("preemptionPolicy")),
                    "field is immutable",
                );
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            for key in ["parameters", "provisioner", "reclaimPolicy"] {
                if changed(old, new, key) {
                    e.forbidden(key, &format!("updates to {key} are forbidden."));
                }
            }
            if changed(old, new, "volumeBindingMode") {
                e.invalid(
                    "volumeBindingMode",
                    &shown(new.get("volumeBindingMode")),
                    "field is immutable",
                );
            }
        }
        _ => {}
    }
    e.0
}

fn object_keys(v: &Value) -> impl Iterator<Item = &String> {
    v.as_object().into_iter().flat_map(|m| m.keys())
}

// ---------------------------------------------------------------------------------------------
// Object metadata (`ValidateObjectMeta`), for every kind.

fn object_meta(rt: &ResourceType, object: &Value, e: &mut Errors) {
    let meta = at(object, "metadata");
    let prefix = text(meta, "generateName");
    if !prefix.is_empty() {
        let rule = NameRule::for_resource(rt.group, rt.plural);
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
fn managed_fields(entries: &[Value], e: &mut Errors) {
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
const MAX_SUBRESOURCE_NAME_LEN: usize = 256;

/// `ValidateLabels`: qualified-name keys, label values; the path is the map's.
fn labels(map: Option<&Value>, path: &str, e: &mut Errors) {
    for (key, value) in map.and_then(Value::as_object).into_iter().flatten() {
        e.invalid_each(path, key, names::qualified_name(key));
        let value = value.as_str().unwrap_or_default();
        e.invalid_each(path, value, names::label_value(value));
    }
}

/// `ValidateAnnotations`: qualified-name keys (case aside) and at most 256 KiB in all.
fn annotations(map: Option<&Value>, path: &str, e: &mut Errors) {
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
fn owner_references(refs: &[Value], e: &mut Errors) {
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
fn finalizers(list: &[Value], e: &mut Errors) {
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

// ---------------------------------------------------------------------------------------------
// Label selectors.

/// `ValidateLabelSelector` (strict: label values must be valid).
fn label_selector(selector: Option<&Value>, path: &str, e: &mut Errors) {
    let Some(selector) = selector.filter(|s| !s.is_null()) else { return };
    labels(selector.get("matchLabels"), &format!("{path}.matchLabels"), e);
    for (i, r) in items(selector, "matchExpressions").iter().enumerate() {
        let rpath = format!("{path}.matchExpressions[{i}]");
        let values = items(r, "values");
        match text(r, "operator") {
            "In" | "NotIn" if values.is_empty() => e.required(
                &format!("{rpath}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => e.forbidden(
                &format!("{rpath}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => {
                e.invalid(&format!("{rpath}.operator"), &quote(op), "not a valid selector operator")
            }
        }
        let key = text(r, "key");
        e.invalid_each(&format!("{rpath}.key"), key, names::qualified_name(key));
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or_default();
            e.invalid_each(&format!("{rpath}.values[{j}]"), v, names::label_value(v));
        }
    }
}

/// What `metav1.LabelSelectorAsSelector` makes of a selector.
enum Selector<'a> {
    /// No selector: matches nothing.
    Nothing,
    /// An empty selector: matches everything.
    Everything,
    /// A selector with requirements.
    Some(&'a Value),
    /// A selector that does not convert (a bad operator, key or value).
    Invalid,
}

impl<'a> Selector<'a> {
    fn of(selector: Option<&'a Value>) -> Selector<'a> {
        let Some(selector) = selector.filter(|s| !s.is_null()) else { return Selector::Nothing };
        let match_labels = map_of(selector, "matchLabels");
        let expressions = items(selector, "matchExpressions");
        if match_labels.is_none_or(Map::is_empty) && expressions.is_empty() {
            return Selector::Everything;
        }
        let label_ok = |k: &str, v: &str| {
            names::qualified_name(k).is_empty() && names::label_value(v).is_empty()
        };
        let labels_ok = match_labels
            .into_iter()
            .flatten()
            .all(|(k, v)| label_ok(k, v.as_str().unwrap_or_default()));
        let expressions_ok = expressions.iter().all(|r| {
            let values = items(r, "values");
            let values_ok = values
                .iter()
                .all(|v| names::label_value(v.as_str().unwrap_or_default()).is_empty());
            let shape = match text(r, "operator") {
                "In" | "NotIn" => !values.is_empty(),
                "Exists" | "DoesNotExist" => values.is_empty(),
                _ => false,
            };
            shape && values_ok && names::qualified_name(text(r, "key")).is_empty()
        });
        if labels_ok && expressions_ok {
            Selector::Some(selector)
        } else {
            Selector::Invalid
        }
    }

    /// `selector.Empty()`.
    fn is_empty(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    fn matches(&self, labels: Option<&Value>) -> bool {
        let labels = labels.and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        match self {
            Selector::Nothing | Selector::Invalid => false,
            Selector::Everything => true,
            Selector::Some(selector) => {
                let by_label = map_of(selector, "matchLabels")
                    .into_iter()
                    .flatten()
                    .all(|(k, v)| get(k) == v.as_str());
                let by_expression = items(selector, "matchExpressions").iter().all(|r| {
                    let value = get(text(r, "key"));
                    let listed = |v: &str| items(r, "values").iter().any(|x| x.as_str() == Some(v));
                    match text(r, "operator") {
                        "In" => value.is_some_and(listed),
                        "NotIn" => !value.is_some_and(listed),
                        "Exists" => value.is_some(),
                        _ => value.is_none(),
                    }
                });
                by_label && by_expression
            }
        }
    }
}

/// The template labels check of the workload kinds.
fn template_matches(selector: &Selector<'_>, spec: &Value, e: &mut Errors) {
    let labels = at(at(spec, "template"), "metadata").get("labels").filter(|v| !v.is_null());
    if !selector.matches(labels) {
        e.invalid(
            "spec.template.metadata.labels",
            &go_string_map(labels),
            "`selector` does not match template `labels`",
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Pods and pod templates.

/// `ValidatePodTemplateSpec` at `path`.
fn pod_template(template: &Value, path: &str, e: &mut Errors) {
    let meta = at(template, "metadata");
    labels(meta.get("labels"), &format!("{path}.labels"), e);
    annotations(meta.get("annotations"), &format!("{path}.annotations"), e);
    pod_spec(at(template, "spec"), &format!("{path}.spec"), e);
}

/// The parts of `ValidatePodSpec` users meet most.
fn pod_spec(spec: &Value, path: &str, e: &mut Errors) {
    // Volumes: named, uniquely, with DNS labels.
    let mut volumes = HashSet::new();
    for (i, volume) in items(spec, "volumes").iter().enumerate() {
        let name_path = format!("{path}.volumes[{i}].name");
        let name = text(volume, "name");
        let problems = names::dns1123_label(name);
        if name.is_empty() {
            e.required(&name_path, "");
        } else {
            e.invalid_each(&name_path, name, problems.clone());
        }
        if volumes.contains(name) {
            e.duplicate(&name_path, &quote(name));
        } else if problems.is_empty() {
            volumes.insert(name);
        }
    }

    // Containers, then init containers; names unique across both.
    let containers = items(spec, "containers");
    let mut taken = HashSet::new();
    if containers.is_empty() {
        e.required(&format!("{path}.containers"), "");
    }
    for (i, c) in containers.iter().enumerate() {
        let cpath = format!("{path}.containers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = text(c, "name");
        if !taken.insert(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        }
    }
    for (i, c) in items(spec, "initContainers").iter().enumerate() {
        let cpath = format!("{path}.initContainers[{i}]");
        container(c, &cpath, &volumes, e);
        let name = text(c, "name");
        if taken.contains(name) {
            e.duplicate(&format!("{cpath}.name"), &quote(name));
        } else if !name.is_empty() {
            taken.insert(name);
        }
    }

    let restart = text(spec, "restartPolicy");
    match restart {
        "Always" | "OnFailure" | "Never" => {}
        "" => e.required(&format!("{path}.restartPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.restartPolicy"),
            &quote(other),
            &["Always", "OnFailure", "Never"],
        ),
    }
    match text(spec, "dnsPolicy") {
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        "" => e.required(&format!("{path}.dnsPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.dnsPolicy"),
            &quote(other),
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        ),
    }
    labels(spec.get("nodeSelector"), &format!("{path}.nodeSelector"), e);
    let account = text(spec, "serviceAccountName");
    if !account.is_empty() {
        e.invalid_each(
            &format!("{path}.serviceAccountName"),
            account,
            names::dns1123_subdomain(account),
        );
    }
}

/// `validateContainerCommon`, in part.
fn container(c: &Value, path: &str, volumes: &HashSet<&str>, e: &mut Errors) {
    let name = text(c, "name");
    if name.is_empty() {
        e.required(&format!("{path}.name"), "");
    } else {
        e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
    }
    if text(c, "image").is_empty() {
        e.required(&format!("{path}.image"), "");
    }
    match text(c, "terminationMessagePolicy") {
        "File" | "FallbackToLogsOnError" => {}
        "" => e.required(&format!("{path}.terminationMessagePolicy"), ""),
        other => e.not_supported(
            &format!("{path}.terminationMessagePolicy"),
            &quote(other),
            &["File", "FallbackToLogsOnError"],
        ),
    }
    container_ports(items(c, "ports"), &format!("{path}.ports"), e);
    for (i, var) in items(c, "env").iter().enumerate() {
        let name_path = format!("{path}.env[{i}].name");
        let name = text(var, "name");
        if name.is_empty() {
            e.required(&name_path, "");
        }
        e.invalid_each(&name_path, name, names::env_var_name(name));
    }
    for (i, from) in items(c, "envFrom").iter().enumerate() {
        let prefix = text(from, "prefix");
        if !prefix.is_empty() {
            let prefix_path = format!("{path}.envFrom[{i}].prefix");
            e.invalid_each(&prefix_path, prefix, names::env_var_name(prefix));
        }
    }
    let mut mount_points = HashSet::new();
    for (i, mount) in items(c, "volumeMounts").iter().enumerate() {
        let mpath = format!("{path}.volumeMounts[{i}]");
        let name = text(mount, "name");
        if name.is_empty() {
            e.required(&format!("{mpath}.name"), "");
        }
        if !volumes.contains(name) {
            e.not_found(&format!("{mpath}.name"), &quote(name));
        }
        let mount_path = text(mount, "mountPath");
        if mount_path.is_empty() {
            e.required(&format!("{mpath}.mountPath"), "");
        }
        if !mount_points.insert(mount_path) {
            e.invalid(&format!("{mpath}.mountPath"), &quote(mount_path), "must be unique");
        }
    }
    match text(c, "imagePullPolicy") {
        "Always" | "IfNotPresent" | "Never" => {}
        "" => e.required(&format!("{path}.imagePullPolicy"), ""),
        other => e.not_supported(
            &format!("{path}.imagePullPolicy"),
            &quote(other),
            &["Always", "IfNotPresent", "Never"],
        ),
    }
    container_resources(at(c, "resources"), &format!("{path}.resources"), e);
}

/// `validateContainerPorts`.
fn container_ports(ports: &[Value], path: &str, e: &mut Errors) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let ppath = format!("{path}[{i}]");
        let name = text(port, "name");
        if !name.is_empty() {
            let problems = names::port_name(name);
            if !problems.is_empty() {
                e.invalid_each(&format!("{ppath}.name"), name, problems);
            } else if !names.insert(name) {
                e.duplicate(&format!("{ppath}.name"), &quote(name));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64).unwrap_or(0) {
            0 => e.required(&format!("{ppath}.containerPort"), ""),
            n if !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.containerPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        match port.get("hostPort").and_then(Value::as_i64).unwrap_or(0) {
            n if n != 0 && !(1..=65535).contains(&n) => {
                e.invalid(&format!("{ppath}.hostPort"), &n.to_string(), PORT_RANGE)
            }
            _ => {}
        }
        protocol(port, &ppath, e);
    }
}

/// A port's protocol: required, and one of SCTP, TCP, UDP.
fn protocol(port: &Value, path: &str, e: &mut Errors) {
    match text(port, "protocol") {
        "TCP" | "UDP" | "SCTP" => {}
        "" => e.required(&format!("{path}.protocol"), ""),
        other => {
            e.not_supported(&format!("{path}.protocol"), &quote(other), &["SCTP", "TCP", "UDP"])
        }
    }
}

/// `ValidateContainerResourceRequirements`: resource names, quantities, requests within limits.
fn container_resources(resources: &Value, path: &str, e: &mut Errors) {
    let limits = map_of(resources, "limits");
    let requests = map_of(resources, "requests");
    for (name, q) in limits.into_iter().flatten() {
        let qpath = format!("{path}.limits[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
    }
    for (name, q) in requests.into_iter().flatten() {
        let qpath = format!("{path}.requests[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
        let (Some(request), Some(raw)) = (quantity_of(q), quantity_text(q)) else { continue };
        match limits.and_then(|l| l.get(name)) {
            Some(limit_value) => {
                let (Some(limit), Some(limit_raw)) =
                    (quantity_of(limit_value), quantity_text(limit_value))
                else {
                    continue;
                };
                if request != limit && !overcommit_allowed(name) {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&raw),
                        &format!("must be equal to {name} limit of {limit_raw}"),
                    );
                } else if request > limit {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&raw),
                        &format!("must be less than or equal to {name} limit of {limit_raw}"),
                    );
                }
            }
            None if !overcommit_allowed(name) => e.required(
                &format!("{path}.limits"),
                "Limit must be set for non overcommitable resources",
            ),
            None => {}
        }
    }
}

/// Whether a resource is native (`cpu`, `kubernetes.io/…`).
fn native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Requests may be below limits for native resources but hugepages.
fn overcommit_allowed(name: &str) -> bool {
    native_resource(name) && !name.starts_with("hugepages-")
}

/// An extended resource (`nvidia.com/gpu`): not native, a qualified name, counted in integers.
fn extended_resource(name: &str) -> bool {
    !native_resource(name)
        && !name.starts_with("requests.")
        && names::qualified_name(&format!("requests.{name}")).is_empty()
}

/// `validateContainerResourceName`.
fn container_resource_name(name: &str, path: &str, e: &mut Errors) {
    e.invalid_each(path, name, names::qualified_name(name));
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage")
            || name.starts_with("hugepages-");
        if !standard {
            e.invalid(path, &quote(name), "must be a standard resource for containers");
        }
    } else if !native_resource(name) && !extended_resource(name) {
        e.invalid(path, &quote(name), "doesn't follow extended resource name standard");
    }
}

/// `ValidateResourceQuantityValue`: not negative; whole for extended resources.
fn resource_quantity(name: &str, q: &Value, path: &str, e: &mut Errors) {
    let (Some(value), Some(raw)) = (quantity_of(q), quantity_text(q)) else { return };
    if value < 0 {
        e.invalid(path, &quote(&raw), NEGATIVE);
    }
    if extended_resource(name) && value % 1_000_000_000 != 0 {
        e.invalid(path, &raw, "must be an integer");
    }
}

/// The pod update rule: only images (and a few fields this server does not track) may change.
fn pod_update(old: &Value, new: &Value, e: &mut Errors) {
    let without_images = |v: Option<&Value>| {
        let mut v = v.cloned();
        if let Some(list) = v.as_mut().and_then(Value::as_array_mut) {
            for c in list.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("image");
            }
        }
        v
    };
    for key in ["containers", "initContainers", "nodeName", "volumes", "restartPolicy"] {
        if key == "nodeName" && field(old, key).is_none() {
            continue;
        }
        let (before, after) = if key.ends_with("ontainers") {
            (without_images(old.get(key)), without_images(new.get(key)))
        } else {
            (old.get(key).cloned(), new.get(key).cloned())
        };
        if !semantic_eq(before.as_ref(), after.as_ref()) {
            e.forbidden(
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`, \
                 `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, \
                 `spec.tolerations` (only additions to existing tolerations), \
                 `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was \
                 previously negative)",
            );
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads.

/// `ValidateDeploymentSpec` / `ValidateReplicaSetSpec` (their empty-selector message is the
/// same), with `ValidatePodTemplateSpecForReplicaSet`.
fn replicated(spec: &Value, word: &str, kind: &str, e: &mut Errors) {
    e.nonnegative(spec, "replicas", "spec.replicas");
    if kind == "ReplicaSet" {
        e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    }
    let raw = field(spec, "selector");
    match raw {
        None => e.required("spec.selector", ""),
        Some(sel) => {
            label_selector(Some(sel), "spec.selector", e);
            if Selector::of(Some(sel)).is_empty() {
                e.invalid(
                    "spec.selector",
                    &go_label_selector(Some(sel)),
                    &format!("empty selector is invalid for {word}"),
                );
            }
        }
    }
    let selector = Selector::of(raw);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector(raw), "invalid label selector");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, spec, e);
        }
        pod_template(at(spec, "template"), "spec.template", e);
        // Deployments share the ReplicaSet template check, and its words.
        always_restarts(spec, "ReplicaSet", e);
    }
    if kind == "Deployment" {
        let strategy = at(spec, "strategy");
        match text(strategy, "type") {
            "Recreate" if field(strategy, "rollingUpdate").is_some() => e.forbidden(
                "spec.strategy.rollingUpdate",
                "may not be specified when strategy `type` is 'Recreate'",
            ),
            "Recreate" => {}
            "RollingUpdate" => match field(strategy, "rollingUpdate") {
                None => e.required(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                ),
                Some(rolling) => {
                    let path = "spec.strategy.rollingUpdate";
                    let unavailable = rolling.get("maxUnavailable");
                    int_or_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                    int_or_percent(rolling.get("maxSurge"), &format!("{path}.maxSurge"), e);
                    if int_or_percent_value(unavailable) == 0
                        && int_or_percent_value(rolling.get("maxSurge")) == 0
                    {
                        e.invalid(
                            &format!("{path}.maxUnavailable"),
                            &int_or_string(unavailable),
                            "may not be 0 when `maxSurge` is 0",
                        );
                    }
                    at_most_100_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                }
            },
            other => e.not_supported(
                "spec.strategy",
                &format!(
                    "apps.DeploymentStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}}",
                    quote(other)
                ),
                &["Recreate", "RollingUpdate"],
            ),
        }
        e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
        e.nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit");
        if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
            e.nonnegative(spec, "progressDeadlineSeconds", "spec.progressDeadlineSeconds");
            let ready = spec.get("minReadySeconds").and_then(Value::as_i64).unwrap_or(0);
            if deadline <= ready {
                e.invalid(
                    "spec.progressDeadlineSeconds",
                    &deadline.to_string(),
                    "must be greater than minReadySeconds",
                );
            }
        }
    }
}

/// An `IntOrString` as kube-apiserver prints one (its `String()`: unquoted).
fn int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".into(),
    }
}

/// `N%`, as `IsValidPercent` accepts it; its number.
fn percent(s: &str) -> Option<i64> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(i64::MAX))
}

/// `getIntOrPercentValue`.
fn int_or_percent_value(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::String(s)) => percent(s).unwrap_or_else(|| s.parse().unwrap_or(0)),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// `ValidatePositiveIntOrPercent`.
fn int_or_percent(v: Option<&Value>, path: &str, e: &mut Errors) {
    match v {
        Some(Value::String(s)) if percent(s).is_none() => e.invalid(
            path,
            s,
            &names::regex_error(
                "a valid percent string must be a numeric string followed by an ending '%'",
                "[0-9]+%",
                &["1%", "93%"],
            ),
        ),
        Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => {
            e.invalid(path, &n.to_string(), NEGATIVE)
        }
        _ => {}
    }
}

/// `IsNotMoreThan100Percent`.
fn at_most_100_percent(v: Option<&Value>, path: &str, e: &mut Errors) {
    if let Some(Value::String(s)) = v {
        if percent(s).is_some_and(|p| p > 100) {
            e.invalid(path, s, "must not be greater than 100%");
        }
    }
}

/// The controllers whose pods run forever: restartPolicy Always, no activeDeadlineSeconds.
fn always_restarts(spec: &Value, kind: &str, e: &mut Errors) {
    let pod = at(at(spec, "template"), "spec");
    let restart = text(pod, "restartPolicy");
    if restart != "Always" {
        e.not_supported("spec.template.spec.restartPolicy", &quote(restart), &["Always"]);
    }
    if field(pod, "activeDeadlineSeconds").is_some() {
        e.forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        );
    }
}

/// `ValidateReplicationControllerSpec`.
fn replication_controller(spec: &Value, e: &mut Errors) {
    e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    let selector = map_of(spec, "selector").filter(|s| !s.is_empty());
    if selector.is_none() {
        e.required("spec.selector", "");
    }
    e.nonnegative(spec, "replicas", "spec.replicas");
    let Some(template) = field(spec, "template") else {
        e.required("spec.template", "");
        return;
    };
    if let Some(selector) = selector {
        let labels = at(template, "metadata").get("labels").filter(|v| !v.is_null());
        let matched = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == v.as_str());
        if !matched {
            e.invalid(
                "spec.template.metadata.labels",
                &go_string_map(labels),
                "`selector` does not match template `labels`",
            );
        }
    }
    pod_template(template, "spec.template", e);
    always_restarts(spec, "ReplicationController", e);
}

/// `ValidateStatefulSetSpec`. (kube-apiserver does not validate a StatefulSet's pod spec, only
/// its template's labels and annotations.)
fn stateful_set(spec: &Value, e: &mut Errors) {
    match text(spec, "podManagementPolicy") {
        "OrderedReady" | "Parallel" => {}
        "" => e.required("spec.podManagementPolicy", ""),
        other => e.invalid(
            "spec.podManagementPolicy",
            &quote(other),
            "must be 'OrderedReady' or 'Parallel'",
        ),
    }
    let strategy = at(spec, "updateStrategy");
    match text(strategy, "type") {
        "" => e.required("spec.updateStrategy", ""),
        "OnDelete" => {
            if let Some(rolling) = field(strategy, "rollingUpdate") {
                e.invalid(
                    "spec.updateStrategy.rollingUpdate",
                    &rolling.to_string(),
                    "only allowed for updateStrategy 'RollingUpdate'",
                );
            }
        }
        "RollingUpdate" => e.nonnegative(
            at(strategy, "rollingUpdate"),
            "partition",
            "spec.updateStrategy.rollingUpdate.partition",
        ),
        other => e.invalid(
            "spec.updateStrategy",
            &format!(
                "apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateStatefulSetStrategy)(nil)}}",
                quote(other)
            ),
            "must be 'RollingUpdate' or 'OnDelete'",
        ),
    }
    let retention = at(spec, "persistentVolumeClaimRetentionPolicy");
    if !retention.is_null() {
        for key in ["whenDeleted", "whenScaled"] {
            let policy = text(retention, key);
            if !matches!(policy, "Retain" | "Delete") {
                e.not_supported(
                    &format!("spec.persistentVolumeClaimRetentionPolicy.{key}"),
                    &quote(policy),
                    &["Retain", "Delete"],
                );
            }
        }
    }
    e.nonnegative(spec, "replicas", "spec.replicas");
    e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    e.nonnegative(at(spec, "ordinals"), "start", "spec.ordinals.start");
    let raw = field(spec, "selector");
    match raw {
        None => e.required("spec.selector", ""),
        Some(sel) => {
            label_selector(Some(sel), "spec.selector", e);
            if Selector::of(Some(sel)).is_empty() {
                e.invalid(
                    "spec.selector",
                    &go_label_selector(Some(sel)),
                    "empty selector is invalid for statefulset",
                );
            }
        }
    }
    let selector = Selector::of(raw);
    if matches!(selector, Selector::Invalid) {
        e.invalid("spec.selector", &go_label_selector(raw), "");
    } else {
        if !selector.is_empty() {
            template_matches(&selector, spec, e);
        }
        let meta = at(at(spec, "template"), "metadata");
        labels(meta.get("labels"), "spec.template.labels", e);
        annotations(meta.get("annotations"), "spec.template.annotations", e);
    }
    always_restarts(spec, "StatefulSet", e);
}

/// `ValidateDaemonSetSpec`.
fn daemon_set(spec: &Value, e: &mut Errors) {
    let raw = field(spec, "selector");
    label_selector(raw, "spec.selector", e);
    let selector = Selector::of(raw);
    if !matches!(selector, Selector::Invalid) {
        template_matches(&selector, spec, e);
    }
    if raw.is_some() && selector.is_empty() {
        e.invalid(
            "spec.selector",
            &go_label_selector(raw),
            "empty selector is invalid for daemonset",
        );
    }
    pod_template(at(spec, "template"), "spec.template", e);
    always_restarts(spec, "DaemonSet", e);
    e.nonnegative(spec, "minReadySeconds", "spec.minReadySeconds");
    let strategy = at(spec, "updateStrategy");
    match text(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match field(strategy, "rollingUpdate") {
            None => e.required("spec.updateStrategy.rollingUpdate", ""),
            Some(rolling) => {
                let path = "spec.updateStrategy.rollingUpdate";
                let (unavailable, surge) = (rolling.get("maxUnavailable"), rolling.get("maxSurge"));
                int_or_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                int_or_percent(surge, &format!("{path}.maxSurge"), e);
                at_most_100_percent(unavailable, &format!("{path}.maxUnavailable"), e);
                at_most_100_percent(surge, &format!("{path}.maxSurge"), e);
                match (int_or_percent_value(unavailable) != 0, int_or_percent_value(surge) != 0) {
                    (true, true) => e.invalid(
                        &format!("{path}.maxSurge"),
                        &int_or_string(surge),
                        "may not be set when maxUnavailable is non-zero",
                    ),
                    (false, false) => e.required(
                        &format!("{path}.maxUnavailable"),
                        "cannot be 0 when maxSurge is 0",
                    ),
                    _ => {}
                }
            }
        },
        other => e.not_supported(
            "spec.updateStrategy",
            &format!(
                "apps.DaemonSetUpdateStrategy{{Type:{}, RollingUpdate:(*apps.RollingUpdateDaemonSet)(nil)}}",
                quote(other)
            ),
            &["RollingUpdate", "OnDelete"],
        ),
    }
    e.nonnegative(spec, "revisionHistoryLimit", "spec.revisionHistoryLimit");
}

/// `validateJobSpec` at `path` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
fn job_spec(spec: &Value, path: &str, e: &mut Errors) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        e.nonnegative(spec, key, &format!("{path}.{key}"));
    }
    if let Some(mode) = field(spec, "completionMode").and_then(Value::as_str) {
        match mode {
            "NonIndexed" => {}
            "Indexed" => {
                if field(spec, "completions").is_none() {
                    e.required(&format!("{path}.completions"), "when completion mode is Indexed");
                }
            }
            other => e.not_supported(
                &format!("{path}.completionMode"),
                &quote(other),
                &["NonIndexed", "Indexed"],
            ),
        }
    }
    pod_template(at(spec, "template"), &format!("{path}.template"), e);
    let rpath = format!("{path}.template.spec.restartPolicy");
    match text(at(at(spec, "template"), "spec"), "restartPolicy") {
        "Always" | "" => e.required(&rpath, "valid values: \"OnFailure\", \"Never\""),
        "OnFailure" | "Never" => {}
        other => e.not_supported(&rpath, &quote(other), &["OnFailure", "Never"]),
    }
}

/// `ValidateJobSpec`. This server does not generate a Job's selector, so none is required; one
/// given must match the template.
fn job(spec: &Value, e: &mut Errors) {
    job_spec(spec, "spec", e);
    if let Some(raw) = field(spec, "selector") {
        label_selector(Some(raw), "spec.selector", e);
        let selector = Selector::of(Some(raw));
        if !matches!(selector, Selector::Invalid) {
            template_matches(&selector, spec, e);
        }
    }
}

/// `ValidateCronJobCreate` / `validateCronJobSpec`.
fn cron_job(object: &Value, e: &mut Errors) {
    let spec = at(object, "spec");
    let schedule = text(spec, "schedule");
    if schedule.is_empty() {
        e.required("spec.schedule", "");
    } else {
        if let Err(problem) = parse_cron(schedule) {
            e.invalid("spec.schedule", &quote(schedule), &problem);
        }
        if schedule.contains("TZ") {
            e.invalid(
                "spec.schedule",
                &quote(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            );
        }
    }
    e.nonnegative(spec, "startingDeadlineSeconds", "spec.startingDeadlineSeconds");
    match text(spec, "concurrencyPolicy") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => e.required("spec.concurrencyPolicy", ""),
        other => e.not_supported(
            "spec.concurrencyPolicy",
            &quote(other),
            &["Allow", "Forbid", "Replace"],
        ),
    }
    let job = at(at(spec, "jobTemplate"), "spec");
    job_spec(job, "spec.jobTemplate.spec", e);
    if let Some(selector) = field(job, "selector") {
        e.invalid(
            "spec.jobTemplate.spec.selector",
            &go_label_selector(Some(selector)),
            "`selector` will be auto-generated",
        );
    }
    if job.get("manualSelector") == Some(&Value::Bool(true)) {
        e.not_supported("spec.jobTemplate.spec.manualSelector", "true", &["nil", "false"]);
    }
    e.nonnegative(spec, "successfulJobsHistoryLimit", "spec.successfulJobsHistoryLimit");
    e.nonnegative(spec, "failedJobsHistoryLimit", "spec.failedJobsHistoryLimit");
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if name.len() > 52 {
        // The controller appends an 11-character suffix to name the Jobs (63 at most).
        e.invalid("metadata.name", &quote(name), "must be no more than 52 characters");
    }
}

/// `ValidateJobSpecUpdate`: selector, completion mode and (unless suspended and never started,
/// for its scheduling directives) template are immutable; completions only change with
/// parallelism for Indexed Jobs.
fn job_update(old: &Value, new: &Value, e: &mut Errors) {
    let (before, after) = (at(old, "spec"), at(new, "spec"));
    let indexed = text(after, "completionMode") == "Indexed";
    if !semantic_eq(before.get("completions"), after.get("completions")) {
        if !indexed {
            e.invalid("spec.completions", &shown(after.get("completions")), "field is immutable");
        } else if after.get("completions") != after.get("parallelism") {
            e.invalid(
                "spec.completions",
                &shown(after.get("completions")),
                "can only be modified in tandem with spec.parallelism",
            );
        }
    }
    if !semantic_eq(before.get("selector"), after.get("selector")) {
        e.invalid(
            "spec.selector",
            &go_label_selector(field(after, "selector")),
            "field is immutable",
        );
    }
    let mut template = at(before, "template").clone();
    let unstarted = at(at(old, "status"), "startTime").is_null();
    if after.get("suspend") == Some(&Value::Bool(true)) && unstarted {
        // Scheduling directives of a suspended Job that never started may change.
        let new_template = at(after, "template");
        if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in ["labels", "annotations"] {
                meta.remove(key);
                if let Some(v) = at(new_template, "metadata").get(key) {
                    meta.insert(key.into(), v.clone());
                }
            }
        }
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            for key in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                spec.remove(key);
                if let Some(v) = at(new_template, "spec").get(key) {
                    spec.insert(key.into(), v.clone());
                }
            }
        }
    }
    if !semantic_eq(Some(&template), after.get("template")) {
        e.invalid("spec.template", &shown(after.get("template")), "field is immutable");
    }
    if !semantic_eq(before.get("completionMode"), after.get("completionMode")) {
        e.invalid("spec.completionMode", &shown(after.get("completionMode")), "field is immutable");
    }
}

// ---------------------------------------------------------------------------------------------
// Cron schedules, as robfig/cron's standard parser reads them (kube-apiserver's words are its
// errors).

const MONTHS: &[&str] =
    &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// `cron.ParseStandard`: five fields (minute, hour, day of month, month, day of week) or a
/// descriptor (`@daily`, `@every 1h`, …); its error message otherwise.
pub fn parse_cron(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let spec = if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        // The time zone itself is not checked here; the TZ error says enough.
        spec.find(' ').map_or("", |i| spec[i..].trim())
    } else {
        spec
    };
    if spec.starts_with('@') {
        return descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let bounds: [(u64, u64, &[&str]); 5] =
        [(0, 59, &[]), (0, 23, &[]), (1, 31, &[]), (1, 12, MONTHS), (0, 6, DAYS)];
    for (field, (min, max, names)) in fields.iter().zip(bounds) {
        for expr in field.split(',').filter(|e| !e.is_empty()) {
            cron_range(expr, min, max, names)?;
        }
    }
    Ok(())
}

fn descriptor(spec: &str) -> Result<(), String> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match spec.strip_prefix("@every ") {
            Some(duration) => carrel_machinery::duration::parse(duration)
                .map(drop)
                .map_err(|e| format!("failed to parse duration {spec}: {e}")),
            None => Err(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// `strconv.Atoi`, then robfig/cron's refusal of negative numbers.
fn cron_int(expr: &str) -> Result<u64, String> {
    let n: i64 = expr.parse().map_err(|e: std::num::ParseIntError| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("failed to parse int from {expr}: strconv.Atoi: parsing {}: {why}", quote(expr))
    })?;
    u64::try_from(n).map_err(|_| format!("negative number ({n}) not allowed: {expr}"))
}

fn cron_int_or_name(expr: &str, names: &[&str]) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    match names.iter().position(|n| *n == lower) {
        // Months count from 1, days of the week from 0.
        Some(i) => Ok(i as u64 + u64::from(names.len() == 12)),
        None => cron_int(expr),
    }
}

/// robfig/cron's `getRange`: `*`, `?`, `N`, `N-M`, each with an optional `/step`.
fn cron_range(expr: &str, min: u64, max: u64, names: &[&str]) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end) = if low_high[0] == "*" || low_high[0] == "?" {
        (min, max)
    } else {
        let start = cron_int_or_name(low_high[0], names)?;
        match low_high.len() {
            1 => (start, start),
            2 => (start, cron_int_or_name(low_high[1], names)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = cron_int(range_and_step[1])?;
            if single {
                end = max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < min {
        return Err(format!("beginning of range ({start}) below minimum ({min}): {expr}"));
    }
    if end > max {
        return Err(format!("end of range ({end}) above maximum ({max}): {expr}"));
    }
    if start > end {
        return Err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}"));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Services.

/// A Service's cluster IPs: `clusterIPs`, else `clusterIP` alone.
fn cluster_ips(spec: &Value) -> Vec<&str> {
    let list: Vec<&str> = items(spec, "clusterIPs").iter().filter_map(Value::as_str).collect();
    match text(spec, "clusterIP") {
        one if list.is_empty() && !one.is_empty() => vec![one],
        _ => list,
    }
}

fn headless(spec: &Value) -> bool {
    text(spec, "type") == "ClusterIP" && cluster_ips(spec).first() == Some(&"None")
}

/// `ValidateService`, in part.
fn service(spec: &Value, e: &mut Errors) {
    let kind = text(spec, "type");
    let ports = items(spec, "ports");
    if ports.is_empty() && !headless(spec) && kind != "ExternalName" {
        e.required("spec.ports", "");
    }
    if kind == "ExternalName" {
        if cluster_ips(spec).iter().any(|ip| !ip.is_empty()) {
            e.forbidden("spec.clusterIPs", "may not be set for ExternalName services");
        }
        let name = text(spec, "externalName");
        let cname = name.strip_suffix('.').unwrap_or(name);
        if cname.is_empty() {
            e.required("spec.externalName", "");
        } else {
            e.invalid_each("spec.externalName", cname, names::dns1123_subdomain(cname));
        }
    }
    let mut taken = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = text(port, "name");
        if ports.len() > 1 && name.is_empty() {
            e.required(&format!("{path}.name"), "");
        } else if !name.is_empty() {
            e.invalid_each(&format!("{path}.name"), name, names::dns1123_label(name));
            if !taken.insert(name) {
                e.duplicate(&format!("{path}.name"), &quote(name));
            }
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !(1..=65535).contains(&number) {
            e.invalid(&format!("{path}.port"), &number.to_string(), PORT_RANGE);
        }
        protocol(port, &path, e);
        match port.get("targetPort") {
            Some(Value::String(target)) => {
                e.invalid_each(&format!("{path}.targetPort"), target, names::port_name(target))
            }
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                if !(1..=65535).contains(&n) {
                    e.invalid(&format!("{path}.targetPort"), &n.to_string(), PORT_RANGE);
                }
            }
            _ => {}
        }
        if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
            e.invalid_each(&format!("{path}.appProtocol"), app, names::qualified_name(app));
        }
    }
    labels(spec.get("selector"), "spec.selector", e);
    match text(spec, "sessionAffinity") {
        "ClientIP" | "None" => {}
        "" => e.required("spec.sessionAffinity", ""),
        other => e.not_supported("spec.sessionAffinity", &quote(other), &["ClientIP", "None"]),
    }
    match kind {
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName" => {}
        "" => e.required("spec.type", ""),
        other => e.not_supported(
            "spec.type",
            &quote(other),
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        ),
    }
    if kind == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                e.forbidden(
                    &format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                );
            }
        }
    }
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let key = (text(port, "protocol"), port.get("port").and_then(Value::as_i64).unwrap_or(0));
        if !seen.insert(key) {
            e.duplicate(
                &format!("spec.ports[{i}]"),
                &format!(
                    "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), \
                     Port:{}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, \
                     NodePort:0}}",
                    quote(key.0),
                    key.1
                ),
            );
        }
    }
}

/// `validateUpgradeDowngradeClusterIPs` and `validateUpgradeDowngradeIPFamilies`.
fn service_update(old: &Value, new: &Value, e: &mut Errors) {
    if text(old, "type") == "ExternalName" || text(new, "type") == "ExternalName" {
        return;
    }
    let (before, after) = (cluster_ips(old), cluster_ips(new));
    let after_list = Value::from(after.clone());
    let shown_ips = go_strings("string", Some(&after_list).filter(|_| !after.is_empty()));
    if !(headless(old) && headless(new)) {
        if before.len() == after.len() {
            for (i, (a, b)) in before.iter().zip(&after).enumerate() {
                if a != b {
                    e.invalid(
                        &format!("spec.clusterIPs[{i}]"),
                        &shown_ips,
                        "may not change once set",
                    );
                }
            }
        } else if before.len() > after.len() {
            if after.is_empty() {
                e.invalid("spec.clusterIPs[0]", &shown_ips, "primary clusterIP can not be unset");
            } else if after[0] != before[0] {
                e.invalid("spec.clusterIPs[0]", &shown_ips, "may not change once set");
            }
            if after.len() == 1 && text(new, "ipFamilyPolicy") != "SingleStack" {
                e.invalid(
                    "spec.clusterIPs[0]",
                    &shown_ips,
                    "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
                );
            }
        } else if !before.is_empty() && after[0] != before[0] {
            e.invalid("spec.clusterIPs[0]", &shown_ips, "may not change once set");
        }
    }
    if headless(old) || headless(new) {
        return;
    }
    let families = |spec: &Value| -> Vec<String> {
        items(spec, "ipFamilies").iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
    };
    let (before, after) = (families(old), families(new));
    let shown_families = go_strings("core.IPFamily", field(new, "ipFamilies"));
    let path = "spec.ipFamilies[0]";
    if before.len() == after.len() {
        if before != after {
            e.invalid(path, &shown_families, "may not change once set");
        }
    } else if before.len() > after.len() {
        if after.is_empty() {
            e.invalid(path, &shown_families, "primary ipFamily can not be unset");
        } else if after[0] != before[0] {
            e.invalid(path, &shown_ips, "may not change once set");
        }
        if after.len() == 1 && text(new, "ipFamilyPolicy") != "SingleStack" {
            e.invalid(
                path,
                &shown_ips,
                "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary ipFamily",
            );
        }
    } else if !before.is_empty() && after[0] != before[0] {
        e.invalid(path, &shown_ips, "may not change once set");
    }
}

// ---------------------------------------------------------------------------------------------
// Configuration and storage.

/// The length of base64 data once decoded.
fn decoded_len(encoded: &str) -> usize {
    let trimmed = encoded.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

/// `ValidateConfigMap`.
fn config_map(object: &Value, e: &mut Errors) {
    for key in ["data", "binaryData"] {
        if object.get(key).is_some_and(|v| !v.is_object() && !v.is_null()) {
            e.invalid(key, &shown(object.get(key)), "must be a map of strings");
        }
    }
    let binary = map_of(object, "binaryData");
    let mut size = 0;
    for (key, value) in map_of(object, "data").into_iter().flatten() {
        let path = format!("data[{key}]");
        e.invalid_each(&path, key, names::config_map_key(key));
        if binary.is_some_and(|b| b.contains_key(key)) {
            e.invalid(&path, &quote(key), "duplicate of key present in binaryData");
        }
        size += value.as_str().map_or(0, str::len);
    }
    for (key, value) in binary.into_iter().flatten() {
        e.invalid_each(&format!("binaryData[{key}]"), key, names::config_map_key(key));
        size += value.as_str().map_or(0, decoded_len);
    }
    if size > MAX_DATA_SIZE {
        e.too_long("[]", MAX_DATA_SIZE);
    }
}

/// `ValidateSecret`. `stringData` counts as the `data` kube-apiserver would merge it into.
fn secret(object: &Value, e: &mut Errors) {
    let data = map_of(object, "data");
    let strings = map_of(object, "stringData");
    let mut size = 0;
    let mut keys = BTreeSet::new();
    for (key, value) in data.into_iter().flatten() {
        keys.insert(key.as_str());
        if !strings.is_some_and(|s| s.contains_key(key)) {
            size += value.as_str().map_or(0, decoded_len);
        }
    }
    for (key, value) in strings.into_iter().flatten() {
        keys.insert(key.as_str());
        size += value.as_str().map_or(0, str::len);
    }
    for key in &keys {
        e.invalid_each(&format!("data[{key}]"), key, names::config_map_key(key));
    }
    if size > MAX_DATA_SIZE {
        e.too_long("data", MAX_DATA_SIZE);
    }
    let has = |key: &str| keys.contains(key);
    let require = |e: &mut Errors, key: &str| {
        if !has(key) {
            e.required(&format!("data[{key}]"), "");
        }
    };
    match text(object, "type") {
        "kubernetes.io/service-account-token" => {
            let account = object
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if account.is_empty() {
                e.required("metadata.annotations[kubernetes.io/service-account.name]", "");
            }
        }
        "kubernetes.io/dockercfg" => require(e, ".dockercfg"),
        "kubernetes.io/dockerconfigjson" => require(e, ".dockerconfigjson"),
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            require(e, "username");
            require(e, "password");
        }
        "kubernetes.io/ssh-auth" => require(e, "ssh-privatekey"),
        "kubernetes.io/tls" => {
            require(e, "tls.crt");
            require(e, "tls.key");
        }
        _ => {}
    }
}

/// `ValidateNamespace`: the finalizers in its spec.
fn namespace(spec: &Value, e: &mut Errors) {
    for f in items(spec, "finalizers").iter().filter_map(Value::as_str) {
        e.invalid_each("spec.finalizers", f, names::qualified_name(f));
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
            e.invalid(
                "spec.finalizers",
                &quote(f),
                "name is neither a standard finalizer name nor is it fully qualified",
            );
        }
    }
}

/// A resource quantity as text, as it was sent (kube-apiserver prints it canonicalized).
fn quantity_text(q: &Value) -> Option<String> {
    match q {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn quantity_of(q: &Value) -> Option<i128> {
    parse_quantity(&quantity_text(q)?)
}

/// A resource quantity as `resource.ParseQuantity` reads it, in nano-units (rounded up, and
/// saturating far beyond anything a cluster counts); `None` if it does not parse.
pub use carrel_machinery::quantity::parse_nanos as parse_quantity;

/// `ValidatePersistentVolumeClaimSpec`, in part.
fn claim_spec(spec: &Value, path: &str, e: &mut Errors) {
    let modes: Vec<&str> = items(spec, "accessModes").iter().filter_map(Value::as_str).collect();
    if modes.is_empty() {
        e.required(&format!("{path}.accessModes"), "at least 1 access mode is required");
    }
    if modes.contains(&"ReadWriteOncePod") && modes.len() > 1 {
        e.forbidden(
            &format!("{path}.accessModes"),
            "may not use ReadWriteOncePod with other access modes",
        );
    }
    let supported = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"];
    for mode in &modes {
        if !supported.contains(mode) {
            e.not_supported(&format!("{path}.accessModes"), &quote(mode), &supported);
        }
    }
    let storage_path = format!("{path}.resources[storage]");
    match at(at(spec, "resources"), "requests").get("storage") {
        None | Some(Value::Null) => e.required(&storage_path, ""),
        Some(q) => {
            if let (Some(value), Some(raw)) = (quantity_of(q), quantity_text(q)) {
                if value <= 0 {
                    e.invalid(&storage_path, &quote(&raw), "must be greater than zero");
                }
            }
        }
    }
    if let Some(mode) = field(spec, "volumeMode").and_then(Value::as_str) {
        if !matches!(mode, "Block" | "Filesystem") {
            e.not_supported(&format!("{path}.volumeMode"), &quote(mode), &["Block", "Filesystem"]);
        }
    }
    let class = text(spec, "storageClassName");
    if !class.is_empty() {
        e.invalid_each(&format!("{path}.storageClassName"), class, names::dns1123_subdomain(class));
    }
}

/// `ValidatePersistentVolumeClaimUpdate`: the spec is immutable but for `resources.requests`
/// (of a bound claim; never below its capacity), `volumeAttributesClassName`, and a
/// `volumeName` not yet set.
fn claim_update(old: &Value, new: &Value, e: &mut Errors) {
    let (before, after) = (at(old, "spec"), at(new, "spec"));
    let bound = text(at(new, "status"), "phase") == "Bound";
    let strip = |spec: &Value, requests_from: &Value| {
        let mut spec = spec.clone();
        if let Some(map) = spec.as_object_mut() {
            map.remove("volumeAttributesClassName");
            if text(before, "volumeName").is_empty() {
                map.remove("volumeName");
            }
        }
        if bound {
            // A bound claim's storage request may change: compare it as the old one.
            let storage = at(at(requests_from, "resources"), "requests").get("storage").cloned();
            if let Some(requests) =
                spec.pointer_mut("/resources/requests").and_then(Value::as_object_mut)
            {
                match storage {
                    Some(s) => requests.insert("storage".into(), s),
                    None => requests.remove("storage"),
                };
            }
        }
        spec
    };
    if !semantic_eq(Some(&strip(before, before)), Some(&strip(after, before))) {
        e.forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and \
             volumeAttributesClassName for bound claims",
        );
    }
    let storage = |spec: &Value| {
        at(at(spec, "resources"), "requests").get("storage").and_then(quantity_of).unwrap_or(0)
    };
    if storage(after) < storage(before) {
        let capacity =
            at(at(old, "status"), "capacity").get("storage").and_then(quantity_of).unwrap_or(0);
        if storage(after) <= capacity {
            e.forbidden(
                "spec.resources.requests.storage",
                "field can not be less than status.capacity",
            );
        }
    }
}

/// `ValidateStorageClass`.
fn storage_class(object: &Value, e: &mut Errors) {
    let provisioner = text(object, "provisioner");
    if provisioner.is_empty() {
        e.required("provisioner", "");
    } else {
        e.invalid_each(
            "provisioner",
            provisioner,
            names::qualified_name(&provisioner.to_lowercase()),
        );
    }
    let reclaim = text(object, "reclaimPolicy");
    if !reclaim.is_empty() && !matches!(reclaim, "Delete" | "Retain") {
        e.not_supported("reclaimPolicy", &quote(reclaim), &["Delete", "Retain"]);
    }
    match field(object, "volumeBindingMode").and_then(Value::as_str) {
        None => e.required("volumeBindingMode", ""),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => e.not_supported(
            "volumeBindingMode",
            &quote(other),
            &["Immediate", "WaitForFirstConsumer"],
        ),
    }
}

/// `ValidatePriorityClass`.
fn priority_class(object: &Value, e: &mut Errors) {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let value = object.get("value").and_then(Value::as_i64).unwrap_or(0);
    if let Some(system) = name.strip_prefix("system-").map(|_| name) {
        let known = match system {
            "system-node-critical" => Some(2_000_001_000),
            "system-cluster-critical" => Some(2_000_000_000),
            _ => None,
        };
        let problem = match known {
            None => Some(format!("{system} is not a known system priority class")),
            Some(v) if v != value => Some(format!("value of {system} PriorityClass must be {v}")),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            e.forbidden(
                "metadata.name",
                &format!(
                    "priority class names with 'system-' prefix are reserved for system use \
                     only. error: {problem}"
                ),
            );
        }
    } else if value > HIGHEST_USER_PRIORITY {
        e.forbidden(
            "value",
            &format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        );
    }
    if let Some(policy) = field(object, "preemptionPolicy").and_then(Value::as_str) {
        match policy {
            "PreemptLowerPriority" | "Never" => {}
            "" => e.required("preemptionPolicy", ""),
            other => e.not_supported(
                "preemptionPolicy",
                &quote(other),
                &["PreemptLowerPriority", "Never"],
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Coordination, events, RBAC.

/// `ValidateLeaseSpec`, in part.
fn lease(spec: &Value, e: &mut Errors) {
    if let Some(n) = spec.get("leaseDurationSeconds").and_then(Value::as_i64).filter(|n| *n <= 0) {
        e.invalid("spec.leaseDurationSeconds", &n.to_string(), "must be greater than 0");
    }
    e.nonnegative(spec, "leaseTransitions", "spec.leaseTransitions");
}

/// `ValidateEventCreate`: the legacy rules for core/v1 Events; events.k8s.io/v1 ones must also
/// be new-style. Field paths name the core fields, as kube-apiserver's do.
fn event(object: &Value, new_api: bool, e: &mut Errors) {
    let namespace =
        object.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default();
    let (involved, controller, message) = if new_api {
        (at(object, "regarding"), "reportingController", text(object, "note"))
    } else {
        (at(object, "involvedObject"), "reportingComponent", text(object, "message"))
    };
    let involved_namespace = text(involved, "namespace");
    let mismatch = |e: &mut Errors| {
        e.invalid(
            "involvedObject.namespace",
            &quote(involved_namespace),
            "does not match event.namespace",
        )
    };
    let event_time = field(object, "eventTime").is_some_and(|t| t.as_str() != Some(""));
    if !event_time {
        let fine = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_namespace
        };
        if !fine {
            mismatch(e);
        }
    } else {
        if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
            mismatch(e);
        }
        let reporting = text(object, controller);
        if reporting.is_empty() {
            e.required(controller, "");
        }
        e.invalid_each(controller, reporting, names::qualified_name(reporting));
        for (key, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = text(object, key);
            if value.is_empty() {
                e.required(key, "");
            }
            if value.len() > limit {
                e.invalid(key, "\"\"", &format!("can have at most {limit} characters"));
            }
        }
        if message.len() > 1024 {
            e.invalid(
                if new_api { "note" } else { "message" },
                "\"\"",
                "can have at most 1024 characters",
            );
        }
    }
    if new_api {
        if !event_time {
            e.required("eventTime", "");
        }
        let kind = text(object, "type");
        if kind != "Normal" && kind != "Warning" {
            e.invalid("type", "\"\"", &format!("has invalid value: {kind}"));
        }
        for (key, core) in [
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
        ] {
            if field(object, key).is_some() {
                e.invalid(core, "\"\"", "needs to be unset");
            }
        }
        if object.get("deprecatedCount").and_then(Value::as_i64).unwrap_or(0) != 0 {
            e.invalid("count", "\"\"", "needs to be unset");
        }
        let source = at(object, "deprecatedSource");
        if !text(source, "component").is_empty() || !text(source, "host").is_empty() {
            e.invalid("source", "\"\"", "needs to be unset");
        }
    }
}

/// `ValidatePolicyRule` for each of a Role's or ClusterRole's rules.
fn policy_rules(rules: &[Value], namespaced: bool, e: &mut Errors) {
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("rules[{i}]");
        if items(rule, "verbs").is_empty() {
            e.required(&format!("{path}.verbs"), "verbs must contain at least one value");
        }
        let urls =
            field(rule, "nonResourceURLs").filter(|u| u.as_array().is_some_and(|a| !a.is_empty()));
        if let Some(urls) = urls {
            let shown = go_strings("string", Some(urls));
            if namespaced {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "namespaced rules cannot apply to non-resource URLs",
                );
            }
            let resources = ["apiGroups", "resources", "resourceNames"];
            if resources.iter().any(|k| !items(rule, k).is_empty()) {
                e.invalid(
                    &format!("{path}.nonResourceURLs"),
                    &shown,
                    "rules cannot apply to both regular resources and non-resource URLs",
                );
            }
            continue;
        }
        if items(rule, "apiGroups").is_empty() {
            e.required(
                &format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            );
        }
        if items(rule, "resources").is_empty() {
            e.required(
                &format!("{path}.resources"),
                "resource rules must supply at least one resource",
            );
        }
    }
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding`.
fn role_binding(object: &Value, namespaced: bool, e: &mut Errors) {
    const GROUP: &str = "rbac.authorization.k8s.io";
    let role_ref = at(object, "roleRef");
    let group = text(role_ref, "apiGroup");
    if group != GROUP {
        e.not_supported("roleRef.apiGroup", &quote(group), &[GROUP]);
    }
    let kind = text(role_ref, "kind");
    match (namespaced, kind) {
        (true, "Role" | "ClusterRole") | (false, "ClusterRole") => {}
        (true, _) => e.not_supported("roleRef.kind", &quote(kind), &["Role", "ClusterRole"]),
        (false, _) => e.not_supported("roleRef.kind", &quote(kind), &["ClusterRole"]),
    }
    let name = text(role_ref, "name");
    if name.is_empty() {
        e.required("roleRef.name", "");
    } else {
        e.invalid_each("roleRef.name", name, names::path_segment(name));
    }
    for (i, subject) in items(object, "subjects").iter().enumerate() {
        let path = format!("subjects[{i}]");
        let name = text(subject, "name");
        if name.is_empty() {
            e.required(&format!("{path}.name"), "");
        }
        let group = text(subject, "apiGroup");
        match text(subject, "kind") {
            "ServiceAccount" => {
                if !name.is_empty() {
                    e.invalid_each(&format!("{path}.name"), name, names::dns1123_subdomain(name));
                }
                if !group.is_empty() {
                    e.not_supported(&format!("{path}.apiGroup"), &quote(group), &[""]);
                }
                if !namespaced && text(subject, "namespace").is_empty() {
                    e.required(&format!("{path}.namespace"), "");
                }
            }
            "User" | "Group" => {
                if group != GROUP {
                    e.not_supported(&format!("{path}.apiGroup"), &quote(group), &[GROUP]);
                }
            }
            other => e.not_supported(
                &format!("{path}.kind"),
                &quote(other),
                &["ServiceAccount", "User", "Group"],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::defaults::{on_create, on_update};
    use crate::resource::BUILT_IN;

    fn rt(group: &str, plural: &str) -> &'static ResourceType {
        BUILT_IN.iter().find(|t| t.group == group && t.plural == plural).expect("served")
    }

    /// Create as the API does: defaults, then validation.
    fn create(group: &str, plural: &str, mut object: Value) -> ApiResult<Value> {
        let rt = rt(group, plural);
        on_create(rt, &mut object);
        validate(rt, &object)?;
        Ok(object)
    }

    /// Update as the API does: update defaults and checks, then validation.
    fn update(group: &str, plural: &str, old: &Value, mut new: Value) -> ApiResult<Value> {
        let rt = rt(group, plural);
        on_update(rt, old, &mut new)?;
        validate(rt, &new)?;
        Ok(new)
    }

    /// The causes of a refused write, as (field, reason, message).
    fn causes_of(result: ApiResult<Value>) -> Vec<(String, &'static str, String)> {
        let e = result.expect_err("refused");
        assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{e:?}");
        e.into_causes().into_iter().map(|c| (c.field, c.reason, c.message)).collect()
    }

    /// Whether a cause is at `field` with `reason` and a message starting with `message`.
    #[track_caller]
    fn assert_cause(
        causes: &[(String, &'static str, String)],
        field: &str,
        reason: &str,
        message: &str,
    ) {
        assert!(
            causes.iter().any(|(f, r, m)| f == field && *r == reason && m.starts_with(message)),
            "no {reason} at {field} starting {message:?} in {causes:#?}"
        );
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "d"}, "spec": spec})
    }

    fn deployment(selector: Value, labels: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {
            "selector": selector,
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    }

    #[test]
    fn go_values_print_as_kube_apiserver_prints_them() {
        assert_eq!(quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
        assert_eq!(
            go_string_map(Some(&json!({"b": "2", "a": "1"}))),
            r#"map[string]string{"a":"1", "b":"2"}"#
        );
        assert_eq!(go_string_map(None), "map[string]string(nil)");
        assert_eq!(
            go_label_selector(Some(&json!({}))),
            "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
        );
        assert_eq!(go_strings("string", Some(&json!(["a", "b"]))), r#"[]string{"a", "b"}"#);
        assert!(semantic_eq(Some(&json!({"a": {}, "b": null})), Some(&json!({"c": []}))));
        assert!(!semantic_eq(Some(&json!({"a": 1})), Some(&json!({"a": 2}))));
    }

    #[test]
    fn object_metadata_is_checked_for_every_kind() {
        let ok = json!({"metadata": {"name": "c", "namespace": "d",
            "labels": {"app.kubernetes.io/name": "web", "tier": "", "A_b.c": "x-Y_z.1"},
            "annotations": {"Example.com/Note": "anything at all"},
            "finalizers": ["example.com/hold", "kubernetes"],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]}});
        create("", "configmaps", ok).expect("valid metadata");

        let bad = json!({"metadata": {"name": "c", "namespace": "d", "generateName": "Bad_",
            "labels": {"bad key!": "ok", "k": "-bad", "x/y/z": "v"},
            "annotations": {"/empty-prefix": "v"},
            "finalizers": ["hold", "a/b/c"],
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "controller": true},
                {"apiVersion": "", "kind": "", "name": "", "uid": "u2", "controller": true}]}});
        let causes = causes_of(create("", "configmaps", bad));
        assert_cause(
            &causes,
            "metadata.generateName",
            "FieldValueInvalid",
            "Invalid value: \"Bad_\": a lowercase RFC 1123 subdomain",
        );
        assert_cause(
            &causes,
            "metadata.labels",
            "FieldValueInvalid",
            "Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        );
        assert_cause(
            &causes,
            "metadata.labels",
            "FieldValueInvalid",
            "Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters",
        );
        assert_cause(
            &causes,
            "metadata.labels",
            "FieldValueInvalid",
            "Invalid value: \"x/y/z\": a qualified name must consist of",
        );
        assert_cause(
            &causes,
            "metadata.annotations",
            "FieldValueInvalid",
            "Invalid value: \"/empty-prefix\": prefix part must be non-empty",
        );
        assert_cause(
            &causes,
            "metadata.finalizers",
            "FieldValueInvalid",
            "Invalid value: \"a/b/c\": a qualified name",
        );
        assert_cause(
            &causes,
            "metadata.finalizers[0]",
            "FieldValueInvalid",
            "Invalid value: \"hold\": name is neither a standard finalizer name nor is it fully qualified",
        );
        assert_cause(
            &causes,
            "metadata.ownerReferences.uid",
            "FieldValueInvalid",
            "Invalid value: \"\": uid must not be empty",
        );
        assert_cause(
            &causes,
            "metadata.ownerReferences.apiVersion",
            "FieldValueInvalid",
            "Invalid value: \"\": version must not be empty",
        );
        assert_cause(
            &causes,
            "metadata.ownerReferences.kind",
            "FieldValueInvalid",
            "Invalid value: \"\": kind must not be empty",
        );
        assert_cause(
            &causes,
            "metadata.ownerReferences.name",
            "FieldValueInvalid",
            "Invalid value: \"\": name must not be empty",
        );
        assert!(causes.iter().any(|(f, _, m)| f == "metadata.ownerReferences" && m.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and /")));
    }

    #[test]
    fn annotations_over_256_kib_are_too_long() {
        let big = "x".repeat(256 * 1024);
        let object =
            json!({"metadata": {"name": "c", "namespace": "d", "annotations": {"a": big}}});
        let causes = causes_of(create("", "configmaps", object));
        assert_eq!(
            causes,
            vec![(
                "metadata.annotations".into(),
                "FieldValueTooLong",
                "Too long: may not be more than 262144 bytes".into()
            )]
        );
    }

    #[test]
    fn env_from_prefixes_are_environment_variable_names() {
        let p = pod(json!({"containers": [{"name": "web", "image": "nginx", "envFrom": [
            {"prefix": "A=B", "configMapRef": {"name": "c"}},
            {"prefix": "OK_", "configMapRef": {"name": "c"}},
        ]}]}));
        let causes = causes_of(create("", "pods", p));
        assert_cause(
            &causes,
            "spec.containers[0].envFrom[0].prefix",
            "FieldValueInvalid",
            "Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        );
        assert_eq!(causes.len(), 1, "{causes:?}");
    }

    #[test]
    fn managed_fields_are_validated_as_kube_apiserver_does() {
        let entry = |manager: &str, operation: &str| {
            json!({"manager": manager, "operation": operation, "apiVersion": "v1",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}})
        };
        let cm = |entries: Value| json!({"metadata": {"name": "c", "namespace": "default", "managedFields": entries}, "data": {"a": "b"}});
        let huge = "m".repeat(1 << 20);
        let causes = causes_of(create("", "configmaps", cm(json!([entry(&huge, "Update")]))));
        assert_eq!(
            causes,
            vec![(
                "metadata.managedFields[0].manager".into(),
                "FieldValueTooLong",
                "Too long: may not be more than 128 bytes".into()
            )]
        );
        let mut odd = entry("kubectl", "Delete");
        odd["fieldsType"] = json!("FieldsV2");
        odd["subresource"] = json!("s".repeat(257));
        let causes = causes_of(create(
            "",
            "configmaps",
            cm(json!([entry("ok", "Apply"), odd, entry("bell\u{7}", "Update")])),
        ));
        assert_eq!(
            causes,
            vec![
                (
                    "metadata.managedFields[1].operation".into(),
                    "FieldValueInvalid",
                    "Invalid value: \"Delete\": must be `Apply` or `Update`".into()
                ),
                (
                    "metadata.managedFields[1].fieldsType".into(),
                    "FieldValueInvalid",
                    "Invalid value: \"FieldsV2\": must be `FieldsV1`".into()
                ),
                (
                    "metadata.managedFields[1].subresource".into(),
                    "FieldValueTooLong",
                    "Too long: may not be more than 256 bytes".into()
                ),
                (
                    "metadata.managedFields[2].manager".into(),
                    "FieldValueInvalid",
                    "Invalid value: \"bell\\a\": invalid character U+0007".into()
                ),
            ]
        );
        let limit = "m".repeat(128);
        create("", "configmaps", cm(json!([entry(&limit, "Update")]))).expect("128 bytes is fine");
    }

    #[test]
    fn valid_pods_pass_with_their_defaults() {
        let p = pod(json!({
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "web", "image": "nginx:1.27",
                "ports": [{"name": "http", "containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                "env": [{"name": "MY.VAR-1", "value": "x"}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                              "limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": 2}}}]}));
        let stored = create("", "pods", p).expect("valid");
        // Requests default to limits (SetDefaults_Pod).
        assert_eq!(stored["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"], 2);
    }

    #[test]
    fn container_mistakes_are_each_reported() {
        let p = pod(json!({
            "restartPolicy": "Sometimes", "dnsPolicy": "Google",
            "initContainers": [{"name": "web", "image": "busybox"}],
            "containers": [
                {"name": "web", "image": "nginx", "imagePullPolicy": "Maybe",
                 "ports": [{"containerPort": 70000, "protocol": "HTTP"}, {"containerPort": 0}],
                 "volumeMounts": [{"name": "missing", "mountPath": "/m"}]},
                {"name": "Web_2", "image": ""},
                {"name": "web", "image": "nginx"}]}));
        let causes = causes_of(create("", "pods", p));
        assert_cause(&causes, "spec.containers[0].imagePullPolicy", "FieldValueNotSupported",
            "Unsupported value: \"Maybe\": supported values: \"Always\", \"IfNotPresent\", \"Never\"");
        assert_cause(
            &causes,
            "spec.containers[0].ports[0].containerPort",
            "FieldValueInvalid",
            "Invalid value: 70000: must be between 1 and 65535, inclusive",
        );
        assert_cause(
            &causes,
            "spec.containers[0].ports[0].protocol",
            "FieldValueNotSupported",
            "Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        );
        assert_cause(
            &causes,
            "spec.containers[0].ports[1].containerPort",
            "FieldValueRequired",
            "Required value",
        );
        assert_cause(
            &causes,
            "spec.containers[0].volumeMounts[0].name",
            "FieldValueNotFound",
            "Not found: \"missing\"",
        );
        assert_cause(&causes, "spec.containers[1].name", "FieldValueInvalid",
            "Invalid value: \"Web_2\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'");
        assert_cause(&causes, "spec.containers[1].image", "FieldValueRequired", "Required value");
        assert_cause(
            &causes,
            "spec.containers[2].name",
            "FieldValueDuplicate",
            "Duplicate value: \"web\"",
        );
        assert_cause(
            &causes,
            "spec.initContainers[0].name",
            "FieldValueDuplicate",
            "Duplicate value: \"web\"",
        );
        assert_cause(&causes, "spec.restartPolicy", "FieldValueNotSupported",
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"");
        assert_cause(&causes, "spec.dnsPolicy", "FieldValueNotSupported",
            "Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"");
        let e = create("", "pods", pod(json!({}))).unwrap_err();
        assert_eq!(e.causes()[0].field, "spec.containers");
        assert_eq!(e.message(), "Pod \"p\" is invalid: spec.containers: Required value");
    }

    #[test]
    fn resources_parse_and_requests_stay_within_limits() {
        let with = |resources: Value| {
            pod(json!({"containers": [{"name": "c", "image": "i", "resources": resources}]}))
        };
        let causes = causes_of(create(
            "",
            "pods",
            with(json!({
            "requests": {"cpu": "2", "memory": "-1", "nvidia.com/gpu": "500m", "cpus": "1"},
            "limits": {"cpu": "1", "nvidia.com/gpu": "1"}})),
        ));
        assert_cause(
            &causes,
            "spec.containers[0].resources.requests",
            "FieldValueInvalid",
            "Invalid value: \"2\": must be less than or equal to cpu limit of 1",
        );
        assert_cause(
            &causes,
            "spec.containers[0].resources.requests",
            "FieldValueInvalid",
            "Invalid value: \"500m\": must be equal to nvidia.com/gpu limit of 1",
        );
        assert_cause(
            &causes,
            "spec.containers[0].resources.requests[memory]",
            "FieldValueInvalid",
            "Invalid value: \"-1\": must be greater than or equal to 0",
        );
        assert_cause(
            &causes,
            "spec.containers[0].resources.requests[nvidia.com/gpu]",
            "FieldValueInvalid",
            "Invalid value: 500m: must be an integer",
        );
        assert_cause(
            &causes,
            "spec.containers[0].resources.requests[cpus]",
            "FieldValueInvalid",
            "Invalid value: \"cpus\": must be a standard resource for containers",
        );
        let causes =
            causes_of(create("", "pods", with(json!({"requests": {"example.com/dongle": "1"}}))));
        assert_cause(
            &causes,
            "spec.containers[0].resources.limits",
            "FieldValueRequired",
            "Required value: Limit must be set for non overcommitable resources",
        );
        create("", "pods", with(json!({"requests": {"cpu": "0.5"}, "limits": {"cpu": "500m"}})))
            .expect("equal");

        // A quantity that does not parse is refused while decoding, as a 400.
        let e = create("", "pods", with(json!({"limits": {"memory": "1 GB"}}))).unwrap_err();
        assert_eq!(e.code(), 400);
        assert_eq!(
            e.message(),
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    #[test]
    fn quantities_parse_as_kubernetes_reads_them() {
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("500m"), Some(500_000_000));
        assert_eq!(parse_quantity("0.5"), parse_quantity("500m"));
        assert_eq!(parse_quantity("1Ki"), Some(1024 * 1_000_000_000));
        assert_eq!(parse_quantity("1Gi"), parse_quantity("1073741824"));
        assert_eq!(parse_quantity("1e3"), parse_quantity("1k"));
        assert_eq!(parse_quantity("1E"), Some(1_000_000_000_000_000_000 * 1_000_000_000));
        assert_eq!(parse_quantity("-2"), Some(-2_000_000_000));
        assert_eq!(parse_quantity(".5"), parse_quantity("500m"));
        assert_eq!(parse_quantity("1n"), Some(1));
        for bad in ["", "1 GB", "1e", "one", "1.5.3", "1KB", "--1", "1Kii", "."] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn deployments_need_a_selector_that_matches_the_template() {
        create(
            "apps",
            "deployments",
            deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web", "v": "1"})),
        )
        .expect("valid");
        let e = create(
            "apps",
            "deployments",
            deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "api"})),
        )
        .unwrap_err();
        assert_eq!(
            e.message(),
            "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"api\"}: `selector` does not match template `labels`"
        );
        let causes =
            causes_of(create("apps", "deployments", deployment(json!({}), json!({"app": "web"}))));
        assert_eq!(
            causes,
            vec![(
                "spec.selector".to_string(),
                "FieldValueInvalid",
                "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment".to_string()
            )]
        );
        let mut missing = deployment(json!(null), json!({"app": "web"}));
        missing["spec"]["replicas"] = json!(-1);
        missing["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        let causes = causes_of(create("apps", "deployments", missing));
        assert_cause(
            &causes,
            "spec.replicas",
            "FieldValueInvalid",
            "Invalid value: -1: must be greater than or equal to 0",
        );
        assert_cause(&causes, "spec.selector", "FieldValueRequired", "Required value");
        assert_cause(
            &causes,
            "spec.template.metadata.labels",
            "FieldValueInvalid",
            "Invalid value: map[string]string{\"app\":\"web\"}",
        );
        assert_cause(
            &causes,
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
            "Unsupported value: \"Never\": supported values: \"Always\"",
        );
        let expressions = json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]},
                                                        {"key": "canary", "operator": "DoesNotExist"}]});
        create("apps", "deployments", deployment(expressions, json!({"app": "api"})))
            .expect("expressions match");
        let bad =
            json!({"matchExpressions": [{"key": "app", "operator": "Is", "values": ["web"]}]});
        let causes =
            causes_of(create("apps", "deployments", deployment(bad, json!({"app": "web"}))));
        assert_cause(
            &causes,
            "spec.selector.matchExpressions[0].operator",
            "FieldValueInvalid",
            "Invalid value: \"Is\": not a valid selector operator",
        );
        assert_cause(&causes, "spec.selector", "FieldValueInvalid", "Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Is\", Values:[]string{\"web\"}}}}: invalid label selector");
    }

    #[test]
    fn other_workloads_follow_their_own_rules() {
        // ReplicaSets speak of deployments, as kube-apiserver does.
        let causes =
            causes_of(create("apps", "replicasets", deployment(json!({}), json!({"a": "b"}))));
        assert_cause(
            &causes,
            "spec.selector",
            "FieldValueInvalid",
            "Invalid value: v1.LabelSelector{",
        );
        assert!(causes[0].2.ends_with("empty selector is invalid for deployment"));
        // A DaemonSet without a selector matches nothing.
        let mut ds = deployment(json!(null), json!({"app": "agent"}));
        ds["metadata"]["name"] = json!("agent");
        let causes = causes_of(create("apps", "daemonsets", ds));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_cause(&causes, "spec.template.metadata.labels", "FieldValueInvalid", "Invalid value: map[string]string{\"app\":\"agent\"}: `selector` does not match template `labels`");
        // StatefulSets: their pod spec is not validated, their policies are.
        let mut sts = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
        sts["spec"]["template"]["spec"]["containers"] = json!([]);
        create("apps", "statefulsets", sts.clone())
            .expect("kube-apiserver leaves the pod spec alone");
        sts["spec"]["podManagementPolicy"] = json!("Sometimes");
        sts["spec"]["persistentVolumeClaimRetentionPolicy"] =
            json!({"whenDeleted": "Keep", "whenScaled": "Retain"});
        let causes = causes_of(create("apps", "statefulsets", sts));
        assert_cause(
            &causes,
            "spec.podManagementPolicy",
            "FieldValueInvalid",
            "Invalid value: \"Sometimes\": must be 'OrderedReady' or 'Parallel'",
        );
        assert_cause(
            &causes,
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
            "FieldValueNotSupported",
            "Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\"",
        );
        // ReplicationControllers default their selector to the template's labels.
        let rc = json!({"metadata": {"name": "rc", "namespace": "d"}, "spec": {"replicas": 2,
            "template": {"metadata": {"labels": {"app": "rc"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let stored = create("", "replicationcontrollers", rc).expect("defaulted selector");
        assert_eq!(stored["spec"]["selector"], json!({"app": "rc"}));
        let causes = causes_of(create(
            "",
            "replicationcontrollers",
            json!({"metadata": {"name": "rc"}, "spec": {}}),
        ));
        assert_cause(&causes, "spec.selector", "FieldValueRequired", "Required value");
        assert_cause(&causes, "spec.template", "FieldValueRequired", "Required value");
    }

    #[test]
    fn rollout_strategies() {
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}});
        d["spec"]["minReadySeconds"] = json!(700);
        d["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(10);
        let causes = causes_of(create("apps", "deployments", d));
        assert_cause(
            &causes,
            "spec.strategy.rollingUpdate.maxUnavailable",
            "FieldValueInvalid",
            "Invalid value: 0: may not be 0 when `maxSurge` is 0",
        );
        assert_cause(
            &causes,
            "spec.progressDeadlineSeconds",
            "FieldValueInvalid",
            "Invalid value: 600: must be greater than minReadySeconds",
        );
        assert_cause(
            &causes,
            "spec.template.spec.activeDeadlineSeconds",
            "FieldValueForbidden",
            "Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
        );
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        d["spec"]["strategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "half"}});
        let causes = causes_of(create("apps", "deployments", d));
        assert_cause(&causes, "spec.strategy.rollingUpdate.maxUnavailable", "FieldValueInvalid",
            "Invalid value: half: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')");
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        d["spec"]["strategy"] = json!({"type": "Recreate"});
        let stored = create("apps", "deployments", d).expect("Recreate");
        assert!(stored["spec"]["strategy"].get("rollingUpdate").is_none());

        let mut ds = deployment(json!({"matchLabels": {"app": "a"}}), json!({"app": "a"}));
        let stored = create("apps", "daemonsets", ds.clone()).expect("defaults");
        assert_eq!(
            stored["spec"]["updateStrategy"]["rollingUpdate"],
            json!({"maxUnavailable": 1, "maxSurge": 0})
        );
        ds["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}});
        let causes = causes_of(create("apps", "daemonsets", ds));
        assert_eq!(
            causes,
            vec![(
                "spec.updateStrategy.rollingUpdate.maxSurge".into(),
                "FieldValueInvalid",
                "Invalid value: 1: may not be set when maxUnavailable is non-zero".into()
            )]
        );
    }

    #[test]
    fn jobs_must_not_restart_forever() {
        let job = |restart: Value| {
            json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": {"spec": {
            "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}}}})
        };
        let stored = create("batch", "jobs", job(json!("Never"))).expect("valid");
        assert_eq!(
            (&stored["spec"]["completions"], &stored["spec"]["parallelism"]),
            (&json!(1), &json!(1))
        );
        let e = create("batch", "jobs", job(json!(null))).unwrap_err();
        assert_eq!(
            e.message(),
            "Job.batch \"j\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        );
        let mut bad = job(json!("OnFailure"));
        bad["spec"]["completionMode"] = json!("Sometimes");
        bad["spec"]["backoffLimit"] = json!(-1);
        let causes = causes_of(create("batch", "jobs", bad));
        assert_cause(
            &causes,
            "spec.backoffLimit",
            "FieldValueInvalid",
            "Invalid value: -1: must be greater than or equal to 0",
        );
        assert_cause(
            &causes,
            "spec.completionMode",
            "FieldValueNotSupported",
            "Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\"",
        );
        // Parallelism alone leaves completions unset (a work queue).
        let mut queue = job(json!("Never"));
        queue["spec"]["parallelism"] = json!(3);
        assert!(create("batch", "jobs", queue).expect("valid")["spec"]
            .get("completions")
            .is_none());
    }

    #[test]
    fn cron_jobs_need_a_schedule_cron_understands() {
        let cron = |schedule: &str, restart: &str| {
            json!({"metadata": {"name": "cj", "namespace": "d"}, "spec": {
            "schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}}}}}})
        };
        for ok in [
            "*/5 * * * *",
            "0 3 * * 1-5",
            "@hourly",
            "@every 1h30m",
            "0 0 1 jan,jul sun",
            "15,45 */2 ? * *",
        ] {
            create("batch", "cronjobs", cron(ok, "OnFailure"))
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let causes = causes_of(create("batch", "cronjobs", cron("* * *", "Always")));
        assert_cause(
            &causes,
            "spec.schedule",
            "FieldValueInvalid",
            "Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]",
        );
        assert_cause(
            &causes,
            "spec.jobTemplate.spec.template.spec.restartPolicy",
            "FieldValueRequired",
            "Required value: valid values: \"OnFailure\", \"Never\"",
        );
        let causes = causes_of(create("batch", "cronjobs", cron("", "Never")));
        assert_cause(&causes, "spec.schedule", "FieldValueRequired", "Required value");
        let causes = causes_of(create("batch", "cronjobs", cron("TZ=UTC 0 * * * *", "Never")));
        assert_cause(&causes, "spec.schedule", "FieldValueInvalid",
            "Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead");
        assert_eq!(
            parse_cron("60 * * * *").unwrap_err(),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            parse_cron("* * 0 * *").unwrap_err(),
            "beginning of range (0) below minimum (1): 0"
        );
        assert_eq!(
            parse_cron("5-1 * * * *").unwrap_err(),
            "beginning of range (5) beyond end of range (1): 5-1"
        );
        assert_eq!(
            parse_cron("*/0 * * * *").unwrap_err(),
            "step of range should be a positive number: */0"
        );
        assert_eq!(
            parse_cron("x * * * *").unwrap_err(),
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            parse_cron("@fortnightly").unwrap_err(),
            "unrecognized descriptor: @fortnightly"
        );
        assert_eq!(
            parse_cron("@every 1d").unwrap_err(),
            "failed to parse duration @every 1d: time: unknown unit \"d\" in duration \"1d\""
        );
        assert_eq!(
            parse_cron("* * * 13 *").unwrap_err(),
            "end of range (13) above maximum (12): 13"
        );
    }

    /// `@every` reads its duration with Go's parser: one beyond an int64 of nanoseconds is
    /// refused, as robfig/cron refuses it, where only the syntax was checked before.
    #[test]
    fn cron_every_durations_must_fit_go() {
        for too_long in ["99999999999999999999h", "2562048h", "9223372036854775808ns"] {
            assert_eq!(
                parse_cron(&format!("@every {too_long}")).unwrap_err(),
                format!(
                    "failed to parse duration @every {too_long}: time: invalid duration \"{too_long}\""
                )
            );
        }
        assert!(parse_cron("@every 2562047h").is_ok());
        assert!(parse_cron("@every 1.5μs").is_ok());
    }

    #[test]
    fn services_ports_types_and_names() {
        let svc =
            |spec: Value| json!({"metadata": {"name": "web", "namespace": "d"}, "spec": spec});
        create(
            "",
            "services",
            svc(json!({"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]})),
        )
        .expect("valid");
        create("", "services", svc(json!({"clusterIP": "None"}))).expect("headless needs no ports");
        create(
            "",
            "services",
            svc(json!({"type": "ExternalName", "externalName": "db.example.com."})),
        )
        .expect("external");
        let causes = causes_of(create("", "services", svc(json!({}))));
        assert_eq!(
            causes,
            vec![("spec.ports".into(), "FieldValueRequired", "Required value".into())]
        );
        let causes = causes_of(create(
            "",
            "services",
            svc(json!({"type": "Cluster", "sessionAffinity": "Sticky", "ports": [
            {"name": "http", "port": 70000, "targetPort": "HTTP_PORT"},
            {"port": 443, "targetPort": 0, "protocol": "TCP", "nodePort": 30000},
            {"name": "http", "port": 70000}]})),
        ));
        assert_cause(
            &causes,
            "spec.ports[0].port",
            "FieldValueInvalid",
            "Invalid value: 70000: must be between 1 and 65535, inclusive",
        );
        assert_cause(
            &causes,
            "spec.ports[0].targetPort",
            "FieldValueInvalid",
            "Invalid value: \"HTTP_PORT\": must contain at least one letter (a-z)",
        );
        assert_cause(&causes, "spec.ports[0].targetPort", "FieldValueInvalid",
            "Invalid value: \"HTTP_PORT\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
        assert_cause(&causes, "spec.ports[1].name", "FieldValueRequired", "Required value");
        assert_cause(
            &causes,
            "spec.ports[2].name",
            "FieldValueDuplicate",
            "Duplicate value: \"http\"",
        );
        assert_cause(
            &causes,
            "spec.ports[2]",
            "FieldValueDuplicate",
            "Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\"",
        );
        assert_cause(&causes, "spec.type", "FieldValueNotSupported",
            "Unsupported value: \"Cluster\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"");
        assert_cause(
            &causes,
            "spec.sessionAffinity",
            "FieldValueNotSupported",
            "Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
        );
        let causes = causes_of(create("", "services", svc(json!({"type": "ExternalName"}))));
        assert_cause(&causes, "spec.externalName", "FieldValueRequired", "Required value");
    }

    #[test]
    fn configmap_and_secret_keys_and_sizes() {
        let cm = |data: Value| json!({"metadata": {"name": "c", "namespace": "d"}, "data": data});
        create("", "configmaps", cm(json!({"app.properties": "x", "KEY_1": "y", "-a.b_c": "z"})))
            .expect("valid keys");
        let causes = causes_of(create("", "configmaps", cm(json!({"a/b": "x", "..": "y"}))));
        assert_cause(&causes, "data[a/b]", "FieldValueInvalid",
            "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
        assert_cause(
            &causes,
            "data[..]",
            "FieldValueInvalid",
            "Invalid value: \"..\": must not be '..'",
        );
        let big = "x".repeat(MAX_DATA_SIZE);
        let causes = causes_of(create("", "configmaps", cm(json!({"a": big, "b": "y"}))));
        assert_eq!(
            causes,
            vec![(
                "[]".into(),
                "FieldValueTooLong",
                "Too long: may not be more than 1048576 bytes".into()
            )]
        );

        let secret = |kind: &str, data: Value| json!({"metadata": {"name": "s", "namespace": "d"}, "type": kind, "data": data});
        create(
            "",
            "secrets",
            secret("kubernetes.io/tls", json!({"tls.crt": "YQ==", "tls.key": "Yg=="})),
        )
        .expect("tls");
        let causes = causes_of(create(
            "",
            "secrets",
            secret("kubernetes.io/tls", json!({"tls.crt": "YQ=="})),
        ));
        assert_eq!(
            causes,
            vec![("data[tls.key]".into(), "FieldValueRequired", "Required value".into())]
        );
        let mut with_strings = secret("kubernetes.io/basic-auth", json!({}));
        with_strings["stringData"] = json!({"username": "u"});
        create("", "secrets", with_strings).expect("stringData counts as data");
        // stringData is merged into data, base64-encoded and winning, and not kept.
        let mut mixed = secret("Opaque", json!({"a": "eA==", "b": "eQ=="}));
        mixed["stringData"] = json!({"a": "hi", "c": "héllo"});
        let stored = create("", "secrets", mixed).expect("stringData");
        assert_eq!(stored["data"], json!({"a": "aGk=", "b": "eQ==", "c": "aMOpbGxv"}));
        assert!(stored.get("stringData").is_none(), "{stored}");
        let mut only_strings = secret("Opaque", Value::Null);
        only_strings["stringData"] = json!({"token": "t"});
        let stored = create("", "secrets", only_strings).expect("stringData alone");
        assert_eq!(stored["data"], json!({"token": "dA=="}));
        // An update through stringData changes data, and an immutable Secret refuses it.
        let mut frozen = secret("Opaque", json!({"a": "eA=="}));
        frozen["immutable"] = json!(true);
        let old = create("", "secrets", frozen.clone()).expect("immutable");
        let mut same = frozen.clone();
        same["stringData"] = json!({"a": "x"});
        update("", "secrets", &old, same).expect("the same data, written as a string");
        let mut changed = frozen;
        changed["stringData"] = json!({"a": "y"});
        let causes = causes_of(update("", "secrets", &old, changed));
        assert_eq!(causes[0].1, "FieldValueForbidden", "{causes:?}");
        let big = "QUFB".repeat(MAX_DATA_SIZE / 3 + 1);
        let causes = causes_of(create("", "secrets", secret("Opaque", json!({"big": big}))));
        assert_eq!(
            causes,
            vec![(
                "data".into(),
                "FieldValueTooLong",
                "Too long: may not be more than 1048576 bytes".into()
            )]
        );
    }

    #[test]
    fn namespaces_leases_events_and_claims() {
        let ns = json!({"metadata": {"name": "team"}, "spec": {"finalizers": ["kubernetes", "custom", "example.com/x"]}});
        let causes = causes_of(create("", "namespaces", ns));
        assert_eq!(causes, vec![("spec.finalizers".into(), "FieldValueInvalid",
            "Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified".into())]);

        let lease = json!({"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
        let causes = causes_of(create("coordination.k8s.io", "leases", lease));
        assert_cause(
            &causes,
            "spec.leaseDurationSeconds",
            "FieldValueInvalid",
            "Invalid value: 0: must be greater than 0",
        );
        assert_cause(
            &causes,
            "spec.leaseTransitions",
            "FieldValueInvalid",
            "Invalid value: -1: must be greater than or equal to 0",
        );

        let event = |ns: &str, involved: &str| {
            json!({"metadata": {"name": "e", "namespace": ns},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": involved}, "reason": "Started"})
        };
        create("", "events", event("d", "d")).expect("matching namespaces");
        create("", "events", event("default", "")).expect("cluster-scoped object");
        let causes = causes_of(create("", "events", event("d", "other")));
        assert_eq!(
            causes,
            vec![(
                "involvedObject.namespace".into(),
                "FieldValueInvalid",
                "Invalid value: \"other\": does not match event.namespace".into()
            )]
        );
        let new_style = json!({"metadata": {"name": "e", "namespace": "d"}, "regarding": {"namespace": "d"},
            "eventTime": "2024-01-01T00:00:00.000000Z", "type": "Loud"});
        let causes = causes_of(create("events.k8s.io", "events", new_style));
        assert_cause(&causes, "reportingController", "FieldValueRequired", "Required value");
        assert_cause(&causes, "action", "FieldValueRequired", "Required value");
        assert_cause(
            &causes,
            "type",
            "FieldValueInvalid",
            "Invalid value: \"\": has invalid value: Loud",
        );

        let claim =
            |spec: Value| json!({"metadata": {"name": "c", "namespace": "d"}, "spec": spec});
        create(
            "",
            "persistentvolumeclaims",
            claim(json!({"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}})),
        )
        .expect("valid claim");
        let causes = causes_of(create(
            "",
            "persistentvolumeclaims",
            claim(json!({"accessModes": ["ReadWriteSometimes"]})),
        ));
        assert_cause(&causes, "spec.accessModes", "FieldValueNotSupported",
            "Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"");
        assert_cause(&causes, "spec.resources[storage]", "FieldValueRequired", "Required value");
        let causes = causes_of(create("", "persistentvolumeclaims", claim(json!({}))));
        assert_cause(
            &causes,
            "spec.accessModes",
            "FieldValueRequired",
            "Required value: at least 1 access mode is required",
        );
    }

    #[test]
    fn rbac_rules_bindings_and_classes() {
        let role = json!({"metadata": {"name": "r", "namespace": "d"}, "rules": [
            {"resources": ["pods"], "verbs": ["get"]}, {"apiGroups": [""], "resources": ["pods"]},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
        let causes = causes_of(create("rbac.authorization.k8s.io", "roles", role));
        assert_cause(
            &causes,
            "rules[0].apiGroups",
            "FieldValueRequired",
            "Required value: resource rules must supply at least one api group",
        );
        assert_cause(
            &causes,
            "rules[1].verbs",
            "FieldValueRequired",
            "Required value: verbs must contain at least one value",
        );
        assert_cause(&causes, "rules[2].nonResourceURLs", "FieldValueInvalid",
            "Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs");

        let binding = json!({"metadata": {"name": "b", "namespace": "d"}, "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "sa", "namespace": "d"}]});
        let stored = create("rbac.authorization.k8s.io", "rolebindings", binding.clone())
            .expect("defaulted groups");
        assert_eq!(stored["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
        let mut cluster = binding.clone();
        cluster["subjects"] =
            json!([{"kind": "ServiceAccount", "name": "sa"}, {"kind": "Robot", "name": "r2"}]);
        let causes = causes_of(create("rbac.authorization.k8s.io", "clusterrolebindings", cluster));
        assert_cause(
            &causes,
            "roleRef.kind",
            "FieldValueNotSupported",
            "Unsupported value: \"Role\": supported values: \"ClusterRole\"",
        );
        assert_cause(&causes, "subjects[0].namespace", "FieldValueRequired", "Required value");
        assert_cause(&causes, "subjects[1].kind", "FieldValueNotSupported",
            "Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"");

        let causes = causes_of(create(
            "storage.k8s.io",
            "storageclasses",
            json!({"metadata": {"name": "s"},
            "reclaimPolicy": "Recycle", "volumeBindingMode": "Later"}),
        ));
        assert_cause(&causes, "provisioner", "FieldValueRequired", "Required value");
        assert_cause(
            &causes,
            "reclaimPolicy",
            "FieldValueNotSupported",
            "Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\"",
        );
        assert_cause(&causes, "volumeBindingMode", "FieldValueNotSupported",
            "Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\"");
        let causes = causes_of(create(
            "scheduling.k8s.io",
            "priorityclasses",
            json!({"metadata": {"name": "huge"}, "value": 2_000_000_000}),
        ));
        assert_cause(
            &causes,
            "value",
            "FieldValueForbidden",
            "Forbidden: maximum allowed value of a user defined priority is 1000000000",
        );
    }

    #[test]
    fn immutable_fields_are_refused_on_update_with_every_other_cause() {
        // Deployment selector.
        let old = create(
            "apps",
            "deployments",
            deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"})),
        )
        .unwrap();
        let mut new = deployment(json!({"matchLabels": {"app": "api"}}), json!({"app": "api"}));
        new["spec"]["replicas"] = json!(-2);
        let causes = causes_of(update("apps", "deployments", &old, new));
        assert_cause(&causes, "spec.replicas", "FieldValueInvalid", "Invalid value: -2");
        assert_eq!(causes.last().unwrap(), &(
            "spec.selector".to_string(),
            "FieldValueInvalid",
            "Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"api\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable".to_string()
        ));
        // A PUT without the defaults is defaulted again, so it changes nothing it may not.
        let resent = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        update("apps", "deployments", &old, resent).expect("defaults re-applied");

        // StatefulSet: only some fields change.
        let sts = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
        let old = create("apps", "statefulsets", sts.clone()).unwrap();
        let mut scaled = sts.clone();
        scaled["spec"]["replicas"] = json!(5);
        scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:17");
        update("apps", "statefulsets", &old, scaled).expect("replicas and template change");
        let mut renamed = sts.clone();
        renamed["spec"]["serviceName"] = json!("other");
        let causes = causes_of(update("apps", "statefulsets", &old, renamed));
        assert_eq!(causes, vec![("spec".into(), "FieldValueForbidden",
            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".into())]);

        // RoleBinding roleRef.
        let binding = json!({"metadata": {"name": "b", "namespace": "d"}, "roleRef": {"kind": "ClusterRole", "name": "view"}});
        let old = create("rbac.authorization.k8s.io", "rolebindings", binding.clone()).unwrap();
        update("rbac.authorization.k8s.io", "rolebindings", &old, binding.clone())
            .expect("same roleRef");
        let mut changed = binding;
        changed["roleRef"]["name"] = json!("edit");
        let causes = causes_of(update("rbac.authorization.k8s.io", "rolebindings", &old, changed));
        assert_eq!(causes, vec![("roleRef".into(), "FieldValueInvalid",
            "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"edit\"}: cannot change roleRef".into())]);
    }

    #[test]
    fn no_new_finalizers_while_deleting() {
        let mut old = create(
            "",
            "configmaps",
            json!({"metadata": {"name": "c", "namespace": "d",
            "finalizers": ["example.com/a"]}}),
        )
        .unwrap();
        old["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        let mut new = old.clone();
        new["metadata"]["finalizers"] = json!(["example.com/a", "example.com/c", "example.com/b"]);
        assert_eq!(causes_of(update("", "configmaps", &old, new)), vec![("metadata.finalizers".into(), "FieldValueForbidden",
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\", \"example.com/c\"}".into())]);
        let mut fewer = old.clone();
        fewer["metadata"]["finalizers"] = json!([]);
        update("", "configmaps", &old, fewer).expect("finalizers may go");
    }

    #[test]
    fn more_immutable_fields() {
        // PersistentVolumeClaims: only a bound claim's storage request grows.
        let claim = json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
        let mut old = create("", "persistentvolumeclaims", claim.clone()).unwrap();
        let mut bigger = claim.clone();
        bigger["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        let causes = causes_of(update("", "persistentvolumeclaims", &old, bigger.clone()));
        assert_cause(
            &causes,
            "spec",
            "FieldValueForbidden",
            "Forbidden: spec is immutable after creation except resources.requests",
        );
        old["status"] = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        bigger["status"] = old["status"].clone();
        update("", "persistentvolumeclaims", &old, bigger).expect("a bound claim grows");
        let mut named = claim.clone();
        named["spec"]["volumeName"] = json!("pv-1");
        named["status"] = old["status"].clone();
        let old =
            update("", "persistentvolumeclaims", &old, named.clone()).expect("volumeName once");
        let mut renamed = named;
        renamed["spec"]["volumeName"] = json!("pv-2");
        assert_cause(
            &causes_of(update("", "persistentvolumeclaims", &old, renamed)),
            "spec",
            "FieldValueForbidden",
            "Forbidden: spec is immutable",
        );

        // PriorityClass value, StorageClass parameters.
        let pc = json!({"metadata": {"name": "high"}, "value": 1000});
        let old = create("scheduling.k8s.io", "priorityclasses", pc.clone()).unwrap();
        let mut changed = pc;
        changed["value"] = json!(2000);
        assert_eq!(
            causes_of(update("scheduling.k8s.io", "priorityclasses", &old, changed)),
            vec![(
                "value".into(),
                "FieldValueForbidden",
                "Forbidden: may not be changed in an update.".into()
            )]
        );
        let sc = json!({"metadata": {"name": "fast"}, "provisioner": "csi.example.com", "parameters": {"type": "ssd"}});
        let old = create("storage.k8s.io", "storageclasses", sc.clone()).unwrap();
        let mut changed = sc;
        changed["parameters"]["type"] = json!("hdd");
        changed["volumeBindingMode"] = json!("WaitForFirstConsumer");
        let causes = causes_of(update("storage.k8s.io", "storageclasses", &old, changed));
        assert_eq!(
            causes,
            vec![
                (
                    "parameters".into(),
                    "FieldValueForbidden",
                    "Forbidden: updates to parameters are forbidden.".into()
                ),
                (
                    "volumeBindingMode".into(),
                    "FieldValueInvalid",
                    "Invalid value: \"WaitForFirstConsumer\": field is immutable".into()
                ),
            ]
        );

        // Job completions.
        let job = json!({"metadata": {"name": "j", "namespace": "d"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        let old = create("batch", "jobs", job.clone()).unwrap();
        let mut more = old.clone();
        more["spec"]["completions"] = json!(3);
        assert_cause(
            &causes_of(update("batch", "jobs", &old, more)),
            "spec.completions",
            "FieldValueInvalid",
            "Invalid value: 3: field is immutable",
        );
        update("batch", "jobs", &old, job).expect("a PUT of the same Job");

        // Node pod CIDRs, once set.
        let node = json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.1.0/24"}});
        let unset = create("", "nodes", json!({"metadata": {"name": "n"}})).unwrap();
        let old = update("", "nodes", &unset, node).expect("set once");
        let moved = json!({"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.2.0/24", "podCIDRs": ["10.0.2.0/24"]}});
        assert_eq!(
            causes_of(update("", "nodes", &old, moved)),
            vec![(
                "spec.podCIDRs".into(),
                "FieldValueForbidden",
                "Forbidden: node updates may not change podCIDR except from \"\" to valid".into()
            )]
        );

        // Service cluster IPs: kept when left out, refused when changed.
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
        let old = create("", "services", svc).unwrap();
        let resent = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"ports": [{"port": 80}]}});
        assert_eq!(
            update("", "services", &old, resent).unwrap()["spec"]["clusterIP"],
            "10.96.0.10"
        );
        let moved = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}});
        assert_eq!(
            causes_of(update("", "services", &old, moved)),
            vec![(
                "spec.clusterIPs[0]".into(),
                "FieldValueInvalid",
                "Invalid value: []string{\"10.96.0.11\"}: may not change once set".into()
            )]
        );

        // Secret type and immutable ConfigMaps.
        let secret = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "kubernetes.io/tls",
            "data": {"tls.crt": "YQ==", "tls.key": "Yg=="}});
        let old = create("", "secrets", secret.clone()).unwrap();
        let mut opaque = secret;
        opaque.as_object_mut().unwrap().remove("type");
        assert_cause(
            &causes_of(update("", "secrets", &old, opaque)),
            "type",
            "FieldValueInvalid",
            "Invalid value: \"Opaque\": field is immutable",
        );
        let cm = json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "1"}});
        let old = create("", "configmaps", cm).unwrap();
        let thawed = json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"a": "2"}});
        assert_eq!(
            causes_of(update("", "configmaps", &old, thawed)),
            vec![
                (
                    "immutable".into(),
                    "FieldValueForbidden",
                    "Forbidden: field is immutable when `immutable` is set".into()
                ),
                (
                    "data".into(),
                    "FieldValueForbidden",
                    "Forbidden: field is immutable when `immutable` is set".into()
                ),
            ]
        );
    }
}
