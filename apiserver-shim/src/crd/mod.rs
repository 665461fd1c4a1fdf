//! CustomResourceDefinitions: what apiextensions-apiserver does for a cluster's own types.
//!
//! A definition is checked when it is written ([`validate`]), and its status is the server's
//! answer ([`status_of`]): the names it accepted, `NamesAccepted` and `Established`, and the
//! versions objects were ever stored in. Every established definition's served versions become
//! resource types ([`types_of`]), each carrying its [`Custom`] part: the structural schema that
//! prunes, defaults and validates objects, the printer columns, the scale paths and the
//! deprecation warning. The registry is rebuilt from the stored definitions after each write of
//! one, so a new type is served by the next request.
//!
//! Versions convert with strategy `None`, where every version has the same fields and an object
//! is read in any served version by rewriting its `apiVersion` ([`present`]), or with strategy
//! `Webhook`, by a call of the definition's conversion webhook ([`conversion`]); an object is
//! stored in the storage version of the moment.

mod columns;
pub mod conversion;
pub mod limits;
pub mod strategy;
mod validate;

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::object::now_rfc3339;
use crate::resource::{intern, intern_list, CustomRef, ResourceType, Subresource, VERBS};
use crate::status::{ApiError, ApiResult};

pub use columns::{cells, Column};
pub use validate::{validate, API_APPROVED_ANNOTATION, RESERVED_GROUP};

/// The API group of CustomResourceDefinitions.
pub const GROUP: &str = "apiextensions.k8s.io";

/// The finalizer kube-apiserver puts on every definition, removed once its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// What a definition says of one served version of its type.
#[derive(Debug)]
pub struct Custom {
    /// The definition's name (`<plural>.<group>`).
    pub definition: String,
    /// The version objects are stored in.
    pub storage_version: &'static str,
    /// The list kind (`<Kind>List` unless the definition says otherwise).
    pub list_kind: &'static str,
    /// The version's structural schema.
    pub schema: Arc<carrel_schema::Schema>,
    /// The version's `openAPIV3Schema` as given, for OpenAPI documents and `kubectl explain`.
    pub openapi: Arc<Value>,
    /// `additionalPrinterColumns`, or the default Age column.
    pub columns: Vec<Column>,
    /// `selectableFields`: the paths field selectors may name beside `metadata.name` and
    /// `metadata.namespace`, without their leading dot (`spec.color`).
    pub selectable_fields: &'static [&'static str],
    /// The `scale` subresource's paths, when it is served.
    pub scale: Option<ScalePaths>,
    /// The warning sent with every request for a deprecated version.
    pub deprecation_warning: Option<String>,
    /// The definition is being deleted: no new objects.
    pub terminating: bool,
    /// Whether the schema sets any default: objects written before the definition's last
    /// change are then defaulted when read, too.
    pub defaults: bool,
    /// The revision of the definition's last write: objects written after it were defaulted by
    /// this schema when written.
    pub defined_at: carrel_store::Revision,
    /// The webhook objects are converted between versions with (`strategy: Webhook`); none
    /// when versions differ only in `apiVersion` (`strategy: None`).
    pub conversion: Option<crate::admission::webhook::Hook>,
}

/// Where the `scale` subresource reads and writes replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`, as a JSON pointer (`/spec/replicas`).
    pub spec_replicas: String,
    /// `statusReplicasPath`, as a JSON pointer.
    pub status_replicas: String,
    /// `labelSelectorPath`, as a JSON pointer, if any.
    pub label_selector: Option<String>,
}

/// A `.spec.replicas`-style path as a JSON pointer.
fn pointer(path: &str) -> String {
    path.split('.').filter(|s| !s.is_empty()).fold(String::new(), |mut out, segment| {
        out.push('/');
        out.push_str(&segment.replace('~', "~0").replace('/', "~1"));
        out
    })
}

/// Kubernetes' order of version names: GA before beta before alpha, higher numbers first, then
/// names that do not look like Kubernetes versions, alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (stage, n) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((major, stage, n.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The typed view of a stored or submitted definition.
pub fn parse(object: &Value) -> ApiResult<ext::CustomResourceDefinition> {
    serde_json::from_value(object.clone()).map_err(|e| {
        ApiError::bad_request(format!(
            "CustomResourceDefinition in version \"v1\" cannot be handled as a \
             CustomResourceDefinition: {e}"
        ))
    })
}

/// The version objects are stored in: the one marked `storage`.
pub fn storage_version(spec: &ext::CustomResourceDefinitionSpec) -> Option<&str> {
    spec.versions.iter().find(|v| v.storage).map(|v| v.name.as_str())
}

/// The deprecation warning of `version`, as kube-apiserver words its default.
fn deprecation_warning(
    spec: &ext::CustomResourceDefinitionSpec,
    version: &ext::CustomResourceDefinitionVersion,
) -> Option<String> {
    if !version.deprecated.unwrap_or(false) {
        return None;
    }
    if let Some(warning) = &version.deprecation_warning {
        return Some(warning.clone());
    }
    let (group, kind) = (&spec.group, &spec.names.kind);
    let mut message = format!("{group}/{} {kind} is deprecated", version.name);
    let newer = spec
        .versions
        .iter()
        .filter(|v| {
            v.served
                && !v.deprecated.unwrap_or(false)
                && compare_versions(&v.name, &version.name) == Ordering::Less
        })
        .map(|v| v.name.as_str())
        .min_by(|a, b| compare_versions(a, b));
    if let Some(newer) = newer {
        message.push_str(&format!("; use {group}/{newer} {kind}"));
    }
    Some(message)
}

fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    })
}

/// A condition of a stored definition.
fn condition_of<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// A definition's singular name and list kind, defaulted as the naming controller accepts them:
/// the kind in lower case, and the kind with `List` after it.
fn singular_and_list_kind(names: &ext::CustomResourceDefinitionNames) -> (String, String) {
    let singular = names
        .singular
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| names.kind.to_ascii_lowercase());
    let list_kind = names
        .list_kind
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| format!("{}List", names.kind));
    (singular, list_kind)
}

/// Whether a stored definition is established: its types are served.
pub fn is_established(object: &Value) -> bool {
    condition_of(object, "Established").and_then(|c| c.get("status")).and_then(Value::as_str)
        == Some("True")
}

/// The names of `spec` that another definition in `others` (of the same group) already uses.
fn name_conflict(spec: &ext::CustomResourceDefinitionSpec, others: &[Value]) -> Option<String> {
    let names = &spec.names;
    let short_names = names.short_names.clone().unwrap_or_default();
    for other in others {
        let Ok(other) = parse(other) else { continue };
        if other.spec.group != spec.group {
            continue;
        }
        let Some(taken) = other.status.as_ref().and_then(|s| s.accepted_names.as_ref()) else {
            continue;
        };
        if taken.plural == names.plural {
            return Some(format!("\"{}\" is already in use", names.plural));
        }
        if taken.singular.as_deref() == names.singular.as_deref().filter(|s| !s.is_empty()) {
            return Some(format!(
                "\"{}\" is already in use",
                names.singular.as_deref().unwrap_or_default()
            ));
        }
        if taken.kind == names.kind {
            return Some(format!("\"{}\" is already in use", names.kind));
        }
        let taken_short = taken.short_names.clone().unwrap_or_default();
        if let Some(short) = short_names.iter().find(|s| taken_short.contains(s)) {
            return Some(format!("\"{short}\" is already in use"));
        }
    }
    None
}

/// The status a definition gets when it is written: accepted names and conditions as the
/// naming and establishing controllers would set them, and the stored versions so far.
/// `others` are the other definitions in the cluster; `old` the definition replaced, if any.
pub fn status_of(object: &Value, old: Option<&Value>, others: &[Value]) -> ApiResult<Value> {
    let crd = parse(object)?;
    let spec = &crd.spec;
    let now = now_rfc3339();
    let conflict = name_conflict(spec, others);
    let keep_time = |type_: &str, status: bool| -> Option<String> {
        let previous = old.and_then(|o| condition_of(o, type_))?;
        let was = previous.get("status").and_then(Value::as_str) == Some("True");
        (was == status)
            .then(|| previous.get("lastTransitionTime").and_then(Value::as_str).map(str::to_owned))
            .flatten()
    };
    let names = &spec.names;
    let (singular, list_kind) = singular_and_list_kind(names);
    let accepted = match (&conflict, old.and_then(|o| o.pointer("/status/acceptedNames"))) {
        // A conflicting change keeps the names accepted before.
        (Some(_), Some(previous)) => previous.clone(),
        (Some(_), None) => json!({"plural": "", "kind": ""}),
        (None, _) => {
            let mut accepted = json!({
                "plural": names.plural,
                "singular": singular,
                "kind": names.kind,
                "listKind": list_kind,
            });
            if let Some(short) = names.short_names.as_ref().filter(|s| !s.is_empty()) {
                accepted["shortNames"] = json!(short);
            }
            if let Some(categories) = names.categories.as_ref().filter(|c| !c.is_empty()) {
                accepted["categories"] = json!(categories);
            }
            accepted
        }
    };
    let accepted_ok = conflict.is_none();
    let established = accepted_ok || old.is_some_and(is_established);
    let names_condition = match &conflict {
        None => {
            let mut c = condition("NamesAccepted", true, "NoConflicts", "no conflicts found", &now);
            if let Some(t) = keep_time("NamesAccepted", true) {
                c["lastTransitionTime"] = json!(t);
            }
            c
        }
        Some(message) => condition("NamesAccepted", false, "NameConflict", message, &now),
    };
    let established_condition = if established {
        let mut c = condition(
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
            &now,
        );
        if let Some(t) = keep_time("Established", true) {
            c["lastTransitionTime"] = json!(t);
        }
        c
    } else {
        condition("Established", false, "NotAccepted", "not all names are accepted", &now)
    };
    let mut stored: Vec<String> = old
        .and_then(|o| o.pointer("/status/storedVersions"))
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    if let Some(storage) = storage_version(spec) {
        if !stored.iter().any(|v| v == storage) {
            stored.push(storage.to_owned());
        }
    }
    Ok(json!({
        "acceptedNames": accepted,
        "conditions": [names_condition, established_condition],
        "storedVersions": stored,
    }))
}

/// The compiled types of one cluster's stored definitions, kept between reloads of the registry:
/// a definition is compiled again only when it changed (its store revision) and dropped, with
/// its schemas, when it is gone. It also counts the names the cluster's definitions interned.
#[derive(Debug, Default)]
pub struct Compiled {
    /// By store key: the revision compiled and its types.
    types: Mutex<HashMap<String, (carrel_store::Revision, Vec<ResourceType>)>>,
    /// The bytes of names this cluster's definitions added to the interned set.
    interned: AtomicUsize,
}

impl Compiled {
    /// The types of `stored` (every stored definition of the cluster), compiling only those
    /// new or changed since the last call.
    pub fn types(
        &self,
        stored: &[carrel_store::Object],
        decode: impl Fn(&carrel_store::Object) -> ApiResult<Value>,
    ) -> ApiResult<Vec<ResourceType>> {
        let mut cache = self.types.lock();
        let mut next = HashMap::with_capacity(stored.len());
        let mut all = Vec::new();
        for object in stored {
            let types = match cache.remove(&object.key) {
                Some((revision, types)) if revision == object.mod_revision => types,
                _ => types_of(&decode(object)?),
            };
            all.extend(types.iter().cloned());
            next.insert(object.key.clone(), (object.mod_revision, types));
        }
        // What is not in `next` (deleted definitions, old revisions) is dropped here.
        *cache = next;
        Ok(all)
    }

    /// Intern the names `definition` will be served under, charging those new to the process
    /// to this cluster: 403 once the cluster has added [`limits::MAX_INTERNED_BYTES`].
    pub fn intern_names(&self, definition: &Value) -> ApiResult<()> {
        use crate::resource::{intern, intern_cost};
        let crd = parse(definition)?;
        let (spec, names) = (&crd.spec, &crd.spec.names);
        let (singular, list_kind) = singular_and_list_kind(names);
        let mut plain: Vec<&str> =
            vec![&spec.group, &names.kind, &names.plural, &singular, &list_kind];
        plain.extend(spec.versions.iter().map(|v| v.name.as_str()));
        let empty = Vec::new();
        let selectable: Vec<Vec<String>> = spec.versions.iter().map(selectable_fields).collect();
        let mut lists: Vec<&[String]> = vec![
            names.short_names.as_ref().unwrap_or(&empty),
            names.categories.as_ref().unwrap_or(&empty),
        ];
        lists.extend(selectable.iter().map(Vec::as_slice));
        let cost = intern_cost(&plain, &lists);
        let charged = self.interned.load(AtomicOrdering::Acquire);
        if charged + cost > limits::MAX_INTERNED_BYTES {
            return Err(ApiError::forbidden(
                GROUP,
                "customresourcedefinitions",
                crd.metadata.name.as_deref().unwrap_or_default(),
                &format!(
                    "exceeded quota: the cluster's CustomResourceDefinitions have defined {charged} \
                     bytes of distinct names, the limit is {}",
                    limits::MAX_INTERNED_BYTES
                ),
            ));
        }
        for name in plain {
            intern(name);
        }
        for list in lists {
            crate::resource::intern_list(list);
        }
        self.interned.fetch_add(cost, AtomicOrdering::AcqRel);
        Ok(())
    }
}

/// The field paths `version` lets field selectors name (`.spec.color` as `spec.color`).
fn selectable_fields(version: &ext::CustomResourceDefinitionVersion) -> Vec<String> {
    let declared = version.selectable_fields.iter().flatten();
    declared.map(|f| f.json_path.trim_start_matches('.').to_owned()).collect()
}

/// The resource types a stored definition serves: one per served version, once established.
pub fn types_of(object: &Value) -> Vec<ResourceType> {
    if !is_established(object) {
        return Vec::new();
    }
    let Ok(crd) = parse(object) else { return Vec::new() };
    let Some(status) = crd.status.as_ref() else { return Vec::new() };
    let spec = &crd.spec;
    let Some(storage) = storage_version(spec) else { return Vec::new() };
    let Some(accepted) = status.accepted_names.as_ref() else { return Vec::new() };
    let terminating = object.pointer("/metadata/deletionTimestamp").is_some();
    let mut versions: Vec<&ext::CustomResourceDefinitionVersion> =
        spec.versions.iter().filter(|v| v.served).collect();
    versions.sort_by(|a, b| compare_versions(&a.name, &b.name));
    let mut types = Vec::new();
    for version in versions {
        let openapi = object
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter().find(|v| v.get("name").and_then(Value::as_str) == Some(&version.name))
            })
            .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
            .cloned()
            .unwrap_or(Value::Null);
        // Accepted when it was written: a later change of the cost estimates does not stop it.
        let Ok(schema) = carrel_schema::Schema::parse_accepted(&openapi, "") else {
            tracing::warn!(definition = ?crd.metadata.name, version = %version.name, "stored definition has a schema that does not parse; its version is not served");
            continue;
        };
        let subresources = version.subresources.as_ref();
        let status_sub = subresources.is_some_and(|s| s.status.is_some());
        let scale = subresources.and_then(|s| s.scale.as_ref()).map(|scale| ScalePaths {
            spec_replicas: pointer(&scale.spec_replicas_path),
            status_replicas: pointer(&scale.status_replicas_path),
            label_selector: scale.label_selector_path.as_deref().map(pointer),
        });
        let subresources: &'static [Subresource] = match (status_sub, scale.is_some()) {
            (true, true) => crate::resource::STATUS_SCALE,
            (true, false) => crate::resource::STATUS,
            (false, true) => crate::resource::SCALE,
            (false, false) => &[],
        };
        let defaults = sets_defaults(&openapi);
        let defined_at = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(carrel_store::Revision::MAX);
        let custom = Custom {
            definition: crd.metadata.name.clone().unwrap_or_default(),
            storage_version: intern(storage),
            list_kind: intern(
                accepted.list_kind.as_deref().unwrap_or(&format!("{}List", accepted.kind)),
            ),
            schema: Arc::new(schema),
            openapi: Arc::new(openapi),
            columns: columns::of(version.additional_printer_columns.as_deref()),
            selectable_fields: intern_list(&selectable_fields(version)),
            scale,
            deprecation_warning: deprecation_warning(spec, version),
            terminating,
            defaults,
            defined_at,
            conversion: conversion::hook_of(
                crd.metadata.name.as_deref().unwrap_or_default(),
                spec.conversion.as_ref(),
            ),
        };
        types.push(ResourceType {
            group: intern(&spec.group),
            version: intern(&version.name),
            kind: intern(&accepted.kind),
            plural: intern(&accepted.plural),
            singular: intern(accepted.singular.as_deref().unwrap_or_default()),
            namespaced: spec.scope == "Namespaced",
            short_names: intern_list(accepted.short_names.as_deref().unwrap_or_default()),
            categories: intern_list(accepted.categories.as_deref().unwrap_or_default()),
            subresources,
            verbs: VERBS,
            custom: Some(CustomRef(Arc::new(custom))),
            strategy: &strategy::CustomResources,
        });
    }
    types
}

/// A custom resource as read in `rt`'s version (converted already, where its definition
/// converts by webhook): conversion strategy `None` rewrites only `apiVersion`, and the
/// schema's defaults are applied (as kube-apiserver defaults what it reads
/// from storage: an object stored before a default existed shows it). Built-in types are shown
/// as stored.
/// `revision` is the one the object was written at.
pub fn present(rt: &ResourceType, mut object: Value, revision: carrel_store::Revision) -> Value {
    if let Some(custom) = &rt.custom {
        if let Some(root) = object.as_object_mut() {
            root.insert("apiVersion".into(), rt.group_version().into());
        }
        if custom.written_before(revision) {
            custom.schema.apply_defaults(&mut object);
        }
    }
    object
}

impl Custom {
    /// Whether an object written at `revision` may miss defaults of this schema: it has some,
    /// and the object was written before the definition last changed.
    fn written_before(&self, revision: carrel_store::Revision) -> bool {
        self.defaults && revision <= self.defined_at
    }
}

/// Whether a schema sets a default anywhere.
fn sets_defaults(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.contains_key("default") || map.values().any(sets_defaults),
        Value::Array(items) => items.iter().any(sets_defaults),
        _ => false,
    }
}

/// Whether a stored object's bytes are already what `rt`'s version shows (so they can be served
/// as they are): for a built-in type, when it is the version its kind is stored in; for a custom
/// resource, when it was stored in the version asked for and after the definition last changed
/// (or its schema has no defaults), so that no default is missing. Stored objects are serialised
/// with their keys in order, so `apiVersion` comes first. A built-in kind's object is shown as
/// stored in its storage version, unless it was stored before objects were written in their
/// Go order ([`crate::go_json`]): such bytes are re-encoded.
pub fn shown_as_stored(rt: &ResourceType, stored: &[u8], revision: carrel_store::Revision) -> bool {
    let Some(custom) = &rt.custom else {
        return rt.strategy.is_storage_version()
            && (stored.starts_with(br#"{"kind":"#)
                || !crate::go_json::is_typed(&rt.group_version(), rt.kind));
    };
    if custom.written_before(revision) {
        return false;
    }
    let rest = stored.strip_prefix(br#"{"apiVersion":""#).unwrap_or_default();
    let group_version = rt.group_version();
    rest.strip_prefix(group_version.as_bytes()).is_some_and(|r| r.first() == Some(&b'"'))
}

/// The conversion webhook of `rt`'s definition, if it converts by one.
pub fn conversion_webhook(rt: &ResourceType) -> Option<&crate::admission::webhook::Hook> {
    rt.custom.as_ref()?.conversion.as_ref()
}

/// The `apiVersion` a custom resource is stored with.
pub fn storage_api_version(rt: &ResourceType, custom: &Custom) -> String {
    format!("{}/{}", rt.group, custom.storage_version)
}

/// Default, then validate, a custom resource: its metadata as every kind's, the rest against its
/// version's schema (and its CEL rules, with `old` for transition rules); 422 with every problem.
pub fn admit(
    rt: &ResourceType,
    custom: &Custom,
    old: Option<&Value>,
    object: &mut Value,
) -> ApiResult<()> {
    custom.schema.apply_defaults(object);
    // The metadata's checks are every kind's; the rest is the schema's. On an update, a value
    // the update leaves as it was is not held against it (kube-apiserver's validation
    // ratcheting): a tightened schema does not lock objects stored under the old one.
    let mut causes = crate::validation::meta_causes(rt, object)?;
    causes.extend(
        custom
            .schema
            .validate(object, old)
            .into_iter()
            .filter(|e| old.is_none_or(|old| !unchanged_at(object, old, &e.field)))
            .map(cause),
    );
    if causes.is_empty() {
        return Ok(());
    }
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid(rt.group, rt.kind, name, causes))
}

/// The value at a field path as errors name it (`spec.ports[0].port`, `<nil>` for the root).
fn value_at<'a>(object: &'a Value, field: &str) -> Option<&'a Value> {
    if field == "<nil>" {
        return Some(object);
    }
    let mut node = object;
    for part in field.split('.') {
        let (name, indexes) = part.split_once('[').map_or((part, ""), |(n, rest)| (n, rest));
        if !name.is_empty() {
            node = node.get(name)?;
        }
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            node = node.get(index.strip_suffix(']')?.parse::<usize>().ok()?)?;
        }
    }
    Some(node)
}

/// Whether an update leaves the value at `field` as it was (both absent counts as unchanged).
fn unchanged_at(new: &Value, old: &Value, field: &str) -> bool {
    value_at(new, field) == value_at(old, field)
}

/// A schema's complaint as a `Status` cause: the message without the field in front, as every
/// cause's message reads.
pub fn cause(e: carrel_schema::FieldError) -> crate::status::Cause {
    let prefix = format!("{}: ", e.field);
    let message = e.message.strip_prefix(&prefix).unwrap_or(&e.message).to_owned();
    crate::status::Cause::new(e.reason.as_cause(), e.field, message)
}

/// A status written through `customresourcedefinitions/status` must still list the storage
/// version among the stored ones.
pub fn check_status(object: &Value) -> ApiResult<()> {
    let crd = parse(object)?;
    let Some(storage) = storage_version(&crd.spec) else { return Ok(()) };
    let stored = crd.status.as_ref().and_then(|s| s.stored_versions.clone()).unwrap_or_default();
    if stored.iter().any(|v| v == storage) {
        return Ok(());
    }
    Err(ApiError::invalid(
        GROUP,
        "CustomResourceDefinition",
        crd.metadata.name.as_deref().unwrap_or_default(),
        vec![crate::status::Cause::new(
            "FieldValueInvalid",
            "status.storedVersions",
            format!("Invalid value: {stored:?}: must have the storage version {storage}"),
        )],
    ))
}

/// A definition marked for deletion, with the condition kube-apiserver sets while its objects go.
pub fn mark_terminating(object: &mut Value) {
    let now = now_rfc3339();
    crate::object::metadata_mut(object)
        .entry("deletionTimestamp")
        .or_insert_with(|| Value::String(now.clone()));
    let terminating = condition(
        "Terminating",
        true,
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
        &now,
    );
    let status =
        object.as_object_mut().map(|root| root.entry("status").or_insert_with(|| json!({})));
    if let Some(Value::Object(status)) = status {
        let conditions = status.entry("conditions").or_insert_with(|| json!([]));
        if let Value::Array(conditions) = conditions {
            conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("Terminating"));
            conditions.push(terminating);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_kubernetes_sorts_them() {
        let mut versions = vec![
            "v1alpha1",
            "foo",
            "v2",
            "v1beta2",
            "v1",
            "v11alpha2",
            "v10beta3",
            "v1beta1",
            "abc",
        ];
        versions.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            versions,
            ["v2", "v1", "v10beta3", "v1beta2", "v1beta1", "v11alpha2", "v1alpha1", "abc", "foo"]
        );
    }

    #[test]
    fn stored_bytes_are_served_as_they_are_only_in_their_own_version() {
        let types = types_of(&{
            let mut crd = json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "jobs.ml.carrel.dev"},
                "spec": {"group": "ml.carrel.dev", "scope": "Namespaced",
                         "names": {"plural": "jobs", "kind": "Job"},
                         "versions": [
                            {"name": "v1", "served": true, "storage": true,
                             "schema": {"openAPIV3Schema": {"type": "object"}}},
                            {"name": "v1beta1", "served": true, "storage": false,
                             "schema": {"openAPIV3Schema": {"type": "object"}}}]},
            });
            let status = status_of(&crd, None, &[]).expect("status");
            crd["status"] = status;
            crd
        });
        let (v1, beta) = (&types[0], &types[1]);
        assert_eq!((v1.version, beta.version), ("v1", "v1beta1"));
        let stored = serde_json::to_vec(&json!({"apiVersion": "ml.carrel.dev/v1", "kind": "Job",
                                                "metadata": {"name": "a"}}))
        .expect("json");
        assert!(shown_as_stored(v1, &stored, 1));
        assert!(!shown_as_stored(beta, &stored, 1));
        let longer = br#"{"apiVersion":"ml.carrel.dev/v1beta1","kind":"Job"}"#;
        assert!(!shown_as_stored(v1, longer, 1));
        assert!(shown_as_stored(beta, longer, 1));
    }

    #[test]
    fn error_paths_find_their_values() {
        let object = json!({"spec": {"ports": [{"port": 1}, {"port": 70000}], "env": {"A": 1}}});
        assert_eq!(value_at(&object, "spec.ports[1].port"), Some(&json!(70000)));
        assert_eq!(value_at(&object, "spec.env.A"), Some(&json!(1)));
        assert_eq!(value_at(&object, "<nil>"), Some(&object));
        assert_eq!(value_at(&object, "spec.missing"), None);
        let changed = json!({"spec": {"ports": [{"port": 1}, {"port": 70001}], "env": {"A": 1}}});
        assert!(!unchanged_at(&changed, &object, "spec.ports[1].port"));
        assert!(unchanged_at(&changed, &object, "spec.env.A"));
        assert!(unchanged_at(&changed, &object, "spec.missing"));
    }

    #[test]
    fn paths_become_pointers() {
        assert_eq!(pointer(".spec.replicas"), "/spec/replicas");
        assert_eq!(pointer(".status.a/b"), "/status/a~1b");
    }
}

#[cfg(test)]
mod api_tests;

#[cfg(test)]
mod conversion_tests;

#[cfg(test)]
pub(crate) mod limit_tests;
