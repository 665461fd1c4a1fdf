//! `metadata.managedFields`: which field manager owns which fields, kept on every write, and
//! server-side apply (`application/apply-patch+yaml`) on top of it.
//!
//! Every create, update and patch names a field manager (the `fieldManager` parameter, or the
//! client's User-Agent up to its first `/`). [`record_update`] gives that manager the fields the
//! write added or changed, in an `Update` entry per manager, API version and subresource, and
//! takes them from every other manager; removed fields leave every set.
//!
//! [`apply`] merges an apply configuration into the live object. The applier's `Apply` entry
//! becomes exactly the configuration's fields; fields it applied last time and leaves out now are
//! removed from the object unless another manager owns them; a changed field owned by another
//! manager is a 409 conflict naming the managers and paths, unless the apply forces, which takes
//! the fields over.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::fieldpath::{display, Element, FieldsError, Set};
use crate::object::{metadata_mut, now_rfc3339};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::typed::Typed;

/// How many `Update` entries an object keeps; older ones merge into [`ANCIENT_CHANGES`].
const MAX_UPDATE_MANAGERS: usize = 10;
/// The manager the oldest updates merge into, as kube-apiserver names it.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// The longest field manager name kube-apiserver accepts.
pub(crate) const MAX_MANAGER_LEN: usize = 128;

/// Metadata fields no manager owns: the server sets them.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// Who makes a write, for `managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The server itself (bootstrap objects): ownership is not tracked.
    Server,
    /// An update by a field manager, through a subresource (`status`, `scale`) or not.
    Update {
        /// The field manager.
        manager: String,
        /// The subresource written through.
        subresource: Option<&'static str>,
    },
    /// Server-side apply has already written the object's `managedFields`.
    Applied,
}

impl Owner {
    /// An update by `manager` through the main resource.
    pub fn manager(manager: impl Into<String>) -> Owner {
        Owner::Update { manager: manager.into(), subresource: None }
    }
}

/// The field manager of a request: `fieldManager`, else the User-Agent up to its first `/`
/// (`kubectl/v1.33.0 (linux/amd64) …` → `kubectl`), as kube-apiserver chooses it.
pub fn manager_of(field_manager: Option<&str>, user_agent: Option<&str>) -> String {
    match field_manager {
        Some(m) => m.to_owned(),
        None => {
            let agent = user_agent.unwrap_or_default();
            let prefix = agent.split('/').next().unwrap_or_default();
            prefix.chars().take(MAX_MANAGER_LEN).collect()
        }
    }
}

/// Check a `fieldManager` parameter; `options` names the options kind for the error
/// (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
pub fn validate_manager(options: &str, manager: &str) -> ApiResult<()> {
    let cause = if manager.len() > MAX_MANAGER_LEN {
        Some(format!("Too long: may not be more than {MAX_MANAGER_LEN} bytes"))
    } else if manager.chars().any(|c| c.is_control()) {
        Some(format!("Invalid value: {manager:?}: must only contain printable characters"))
    } else {
        None
    };
    match cause {
        None => Ok(()),
        Some(message) => Err(ApiError::invalid(
            "meta.k8s.io",
            options,
            "",
            vec![Cause::new(
                "FieldValueInvalid",
                "fieldManager",
                format!("fieldManager: {message}"),
            )],
        )),
    }
}

/// Why a `managedFields` entry does not read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum EntryError {
    /// Neither `Apply` nor `Update`.
    #[error("operation must be Apply or Update, not {0:?}")]
    Operation(Option<String>),
    /// Not `FieldsV1`.
    #[error("fieldsType {0:?} is not FieldsV1")]
    FieldsType(String),
    /// The `fieldsV1` set does not read.
    #[error(transparent)]
    Fields(#[from] FieldsError),
}

/// One `managedFields` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    manager: String,
    operation: Operation,
    api_version: String,
    time: Option<String>,
    subresource: String,
    fields: Set,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// An entry's identity: an applier has one entry whatever its API version, an updater one per
/// API version.
type Identity = (String, Operation, String, String);

impl Entry {
    fn identity(&self) -> Identity {
        let version = match self.operation {
            Operation::Apply => String::new(),
            Operation::Update => self.api_version.clone(),
        };
        (self.manager.clone(), self.operation, version, self.subresource.clone())
    }

    fn decode(value: &Value) -> Result<Entry, EntryError> {
        let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
        let operation = match text("operation") {
            Some(o) if o == "Apply" => Operation::Apply,
            Some(o) if o == "Update" => Operation::Update,
            other => return Err(EntryError::Operation(other)),
        };
        match text("fieldsType") {
            Some(t) if t == "FieldsV1" => {}
            None => {}
            Some(other) => return Err(EntryError::FieldsType(other)),
        }
        let fields = match value.get("fieldsV1") {
            Some(v) => Set::from_fields_v1(v)?,
            None => Set::new(),
        };
        Ok(Entry {
            manager: text("manager").unwrap_or_default(),
            operation,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").unwrap_or_default(),
            fields,
        })
    }

    fn encode(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), self.manager.clone().into());
        out.insert("operation".into(), self.operation.name().into());
        out.insert("apiVersion".into(), self.api_version.clone().into());
        if let Some(time) = &self.time {
            out.insert("time".into(), time.clone().into());
        }
        out.insert("fieldsType".into(), "FieldsV1".into());
        out.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            out.insert("subresource".into(), self.subresource.clone().into());
        }
        Value::Object(out)
    }
}

/// The managers of an object, by identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Managers(BTreeMap<Identity, Entry>);

impl Managers {
    /// Decode `managedFields`; an unreadable list counts as none (kube-apiserver resets it).
    fn of(object: &Value) -> Managers {
        let entries = object.pointer("/metadata/managedFields").and_then(Value::as_array);
        let mut out = BTreeMap::new();
        for value in entries.into_iter().flatten() {
            match Entry::decode(value) {
                Ok(entry) => {
                    out.insert(entry.identity(), entry);
                }
                Err(e) => {
                    tracing::debug!("resetting unreadable managedFields: {e}");
                    return Managers::default();
                }
            }
        }
        Managers(out)
    }

    /// Write the entries into `object`, in kube-apiserver's order (appliers first, then by
    /// time and manager); none removes the field.
    fn store(mut self, object: &mut Value) {
        self.0.retain(|_, e| !e.fields.is_empty());
        let mut entries: Vec<Entry> = self.0.into_values().collect();
        entries.sort_by(|a, b| {
            (a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
        });
        let meta = metadata_mut(object);
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert(
                "managedFields".into(),
                Value::Array(entries.iter().map(Entry::encode).collect()),
            );
        }
    }

    /// Keep at most [`MAX_UPDATE_MANAGERS`] `Update` entries: merge the oldest into an
    /// `ancient-changes` entry per API version, as kube-apiserver does.
    fn cap_updates(&mut self) {
        loop {
            let mut updates: Vec<(&Option<String>, &Identity)> = self
                .0
                .iter()
                .filter(|(_, e)| e.operation == Operation::Update)
                .map(|(id, e)| (&e.time, id))
                .collect();
            if updates.len() <= MAX_UPDATE_MANAGERS {
                return;
            }
            updates.sort();
            let Some(oldest) =
                updates.iter().map(|(_, id)| *id).find(|id| id.0 != ANCIENT_CHANGES).cloned()
            else {
                return;
            };
            let Some(entry) = self.0.remove(&oldest) else { return };
            let bucket =
                Entry { manager: ANCIENT_CHANGES.to_owned(), fields: Set::new(), ..entry.clone() };
            let bucket_id = bucket.identity();
            let merged = self.0.entry(bucket_id).or_insert(bucket);
            merged.fields.union_with(&entry.fields);
            if entry.time > merged.time {
                merged.time = entry.time;
            }
        }
    }

    fn remove_from_all(&mut self, paths: &Set) {
        if paths.is_empty() {
            return;
        }
        for entry in self.0.values_mut() {
            entry.fields = entry.fields.difference(paths);
        }
    }
}

/// The managers a write starts from: the ones the client sent, when it sent a non-empty list
/// (`[{}]` clears them), else the stored object's.
fn starting_managers(old: Option<&Value>, new: &Value) -> Managers {
    match new.pointer("/metadata/managedFields").and_then(Value::as_array) {
        Some(sent) if !sent.is_empty() => {
            if sent.iter().all(|e| e.as_object().is_some_and(Map::is_empty)) {
                Managers::default()
            } else {
                Managers::of(new)
            }
        }
        _ => old.map(Managers::of).unwrap_or_default(),
    }
}

/// The part of an object whose ownership is tracked through `subresource`: no server-set
/// metadata; a main resource with a status subresource without its status, the status
/// subresource only its status.
fn tracked(rt: &ResourceType, object: &Value, subresource: Option<&str>) -> Value {
    let mut view = match subresource {
        Some("status") => json!({"status": object.get("status").cloned().unwrap_or(Value::Null)}),
        Some("scale") => json!({"spec": {"replicas": object.pointer("/spec/replicas")}}),
        _ => {
            let mut view = object.clone();
            if let Value::Object(root) = &mut view {
                root.remove("apiVersion");
                root.remove("kind");
                if rt.has(crate::resource::Subresource::Status) {
                    root.remove("status");
                }
            }
            view
        }
    };
    if let Some(Value::Object(meta)) = view.get_mut("metadata") {
        for field in SERVER_METADATA {
            meta.remove(*field);
        }
        if meta.is_empty() {
            view.as_object_mut().expect("object").remove("metadata");
        }
    }
    if view.get("status").is_some_and(Value::is_null) {
        view.as_object_mut().expect("object").remove("status");
    }
    view
}

/// Record an update of `old` (absent on create) into `new` by `owner`: set `new`'s
/// `managedFields`.
pub fn record_update(rt: &ResourceType, old: Option<&Value>, new: &mut Value, owner: &Owner) {
    let Owner::Update { manager, subresource } = owner else { return };
    let mut managers = starting_managers(old, new);
    let typed = Typed::for_resource(rt);
    let before = old.map(|o| tracked(rt, o, *subresource));
    let after = tracked(rt, new, *subresource);
    let comparison = typed.compare(before.as_ref(), Some(&after));
    if !comparison.is_same() {
        for entry in managers.0.values_mut() {
            entry.fields = entry.fields.difference(&comparison.changed);
        }
        managers.remove_from_all(&comparison.removed);
        let mut entry = Entry {
            manager: manager.clone(),
            operation: Operation::Update,
            api_version: rt.group_version(),
            time: Some(now_rfc3339()),
            subresource: subresource.unwrap_or_default().to_owned(),
            fields: Set::new(),
        };
        let identity = entry.identity();
        if let Some(previous) = managers.0.remove(&identity) {
            entry.fields = previous.fields;
        }
        entry.fields.union_with(&comparison.changed);
        managers.0.insert(identity, entry);
        managers.cap_updates();
    }
    managers.store(new);
}

/// What an apply asks for.
#[derive(Clone, Debug)]
pub struct Apply<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// The subresource applied to (`status`), if any.
    pub subresource: Option<&'static str>,
    /// `force=true`: take conflicting fields over.
    pub force: bool,
}

/// Server-side apply of `config` to `live` (an empty object of the kind when there is none
/// yet): the merged object, with its `managedFields` set, or a 409 listing the conflicts.
pub fn apply(rt: &ResourceType, live: &Value, config: &Value, how: &Apply<'_>) -> ApiResult<Value> {
    let typed = Typed::for_resource(rt);
    let mut managers = Managers::of(live);
    let config = tracked(rt, config, how.subresource);
    let applied = typed.field_set(&config);
    let live_view = tracked(rt, live, how.subresource);

    let identity: Identity = (
        how.manager.to_owned(),
        Operation::Apply,
        String::new(),
        how.subresource.unwrap_or_default().to_owned(),
    );
    let previous = managers.0.get(&identity).cloned();
    let last = previous.as_ref().map(|e| e.fields.clone()).unwrap_or_default();

    // Merge, then prune what this manager applied before and no longer does, unless someone
    // else owns it (or something below it).
    let mut merged_view = typed.merge(&live_view, &config);
    let mut owned_by_others = Set::new();
    for (id, entry) in &managers.0 {
        if *id != identity {
            owned_by_others.union_with(&entry.fields);
        }
    }
    let mut kept = applied.clone();
    kept.union_with(&owned_by_others);
    for path in last.difference(&applied).paths() {
        if !kept.touches(&path) {
            typed.remove(&mut merged_view, &path);
        }
    }

    // Conflicts: fields this apply changes that other managers own.
    let comparison = typed.compare(Some(&live_view), Some(&merged_view));
    let mut conflicts: Vec<(String, Vec<Element>)> = Vec::new();
    for (id, entry) in &managers.0 {
        if *id == identity {
            continue;
        }
        for path in entry.fields.intersection(&comparison.changed).paths() {
            conflicts.push((describe_manager(entry), path));
        }
    }
    if !conflicts.is_empty() && !how.force {
        return Err(conflict_error(conflicts));
    }
    for (id, entry) in managers.0.iter_mut() {
        if *id != identity {
            entry.fields = entry.fields.difference(&comparison.changed);
        }
    }
    managers.remove_from_all(&comparison.removed);

    let unchanged = comparison.is_same() && previous.as_ref().is_some_and(|e| e.fields == applied);
    let entry = Entry {
        manager: how.manager.to_owned(),
        operation: Operation::Apply,
        api_version: rt.group_version(),
        time: match (&previous, unchanged) {
            (Some(previous), true) => previous.time.clone(),
            _ => Some(now_rfc3339()),
        },
        subresource: how.subresource.unwrap_or_default().to_owned(),
        fields: applied,
    };
    managers.0.insert(identity, entry);

    let mut merged = write_back(live, merged_view, rt, how.subresource);
    managers.store(&mut merged);
    Ok(merged)
}

/// The live object with its tracked part replaced by `view`.
fn write_back(live: &Value, view: Value, rt: &ResourceType, subresource: Option<&str>) -> Value {
    let Value::Object(mut view) = view else { return live.clone() };
    let mut out = Map::new();
    if subresource == Some("status") {
        out = live.as_object().cloned().unwrap_or_default();
        match view.remove("status") {
            Some(status) => out.insert("status".into(), status),
            None => out.remove("status"),
        };
        return Value::Object(out);
    }
    // apiVersion, kind, the server's metadata and (with a status subresource) the status stay
    // as they are; everything else is the view.
    for key in ["apiVersion", "kind"] {
        if let Some(v) = live.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    if rt.has(crate::resource::Subresource::Status) {
        if let Some(status) = live.get("status") {
            out.insert("status".into(), status.clone());
        }
    }
    let mut meta = match view.remove("metadata") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    if let Some(Value::Object(live_meta)) = live.get("metadata") {
        for field in SERVER_METADATA {
            if let Some(v) = live_meta.get(*field) {
                meta.insert((*field).to_owned(), v.clone());
            }
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    out.extend(view);
    Value::Object(out)
}

/// A manager as kube-apiserver names it in conflicts: `"kubectl"`, or for an updater
/// `"kubectl-edit" using apps/v1`, with the subresource when there is one.
fn describe_manager(entry: &Entry) -> String {
    let mut out = format!("{:?}", entry.manager);
    if !entry.subresource.is_empty() {
        out.push_str(&format!(" with subresource {:?}", entry.subresource));
    }
    if entry.operation == Operation::Update {
        out.push_str(&format!(" using {}", entry.api_version));
    }
    out
}

/// 409 Conflict for an apply, in kube-apiserver's words.
fn conflict_error(conflicts: Vec<(String, Vec<Element>)>) -> ApiError {
    let causes: Vec<Cause> = conflicts
        .iter()
        .map(|(manager, path)| {
            Cause::new("FieldManagerConflict", display(path), format!("conflict with {manager}"))
        })
        .collect();
    let message = if let [(manager, path)] = conflicts.as_slice() {
        format!("Apply failed with 1 conflict: conflict with {manager}: {}", display(path))
    } else {
        let mut by_manager: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (manager, path) in &conflicts {
            by_manager.entry(manager).or_default().push(display(path));
        }
        let lines: Vec<String> = by_manager
            .iter()
            .map(|(manager, paths)| {
                let list: Vec<String> = paths.iter().map(|p| format!("- {p}")).collect();
                format!("conflicts with {manager}:\n{}", list.join("\n"))
            })
            .collect();
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    ApiError::apply_conflict(message, causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::BUILT_IN;

    fn rt(plural: &str) -> &'static ResourceType {
        BUILT_IN.iter().find(|t| t.plural == plural).unwrap()
    }

    fn entries(object: &Value) -> Vec<(String, String, Value)> {
        object["metadata"]["managedFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap().to_owned(),
                            e["operation"].as_str().unwrap().to_owned(),
                            e["fieldsV1"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default", "uid": "u"}, "data": data})
    }

    #[test]
    fn create_and_update_give_changed_fields_to_their_manager() {
        let cms = rt("configmaps");
        let mut created = cm(json!({"a": "1", "b": "2"}));
        record_update(cms, None, &mut created, &Owner::manager("kubectl-create"));
        assert_eq!(
            entries(&created),
            vec![(
                "kubectl-create".into(),
                "Update".into(),
                json!({"f:data": {"f:a": {}, "f:b": {}}})
            )]
        );
        let mut edited = created.clone();
        edited["data"] = json!({"a": "1", "b": "3", "c": "4"});
        record_update(cms, Some(&created), &mut edited, &Owner::manager("kubectl-edit"));
        let e = entries(&edited);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].2, json!({"f:data": {"f:a": {}}}));
        assert_eq!(e[1].2, json!({"f:data": {"f:b": {}, "f:c": {}}}));
        // A write that changes nothing changes no entry (not even its time).
        let mut same = edited.clone();
        record_update(cms, Some(&edited), &mut same, &Owner::manager("other"));
        assert_eq!(same, edited);
    }

    #[test]
    fn apply_owns_its_fields_prunes_what_it_dropped_and_conflicts_with_others() {
        let cms = rt("configmaps");
        let how = Apply { manager: "ci", subresource: None, force: false };
        let live = cm(json!(null));
        let first = apply(cms, &live, &cm(json!({"a": "1", "b": "2"})), &how).unwrap();
        assert_eq!(first["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(first["metadata"]["uid"], "u", "server metadata is kept");
        // Dropping b from the configuration removes it.
        let second = apply(cms, &first, &cm(json!({"a": "1"})), &how).unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));

        // Someone else edits a; applying a different a conflicts, naming them.
        let mut edited = second.clone();
        edited["data"]["a"] = json!("9");
        record_update(cms, Some(&second), &mut edited, &Owner::manager("kubectl-edit"));
        let err = apply(cms, &edited, &cm(json!({"a": "1"})), &how).unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "Conflict"));
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl-edit\" using v1: .data.a"
        );
        assert_eq!(err.causes()[0].reason, "FieldManagerConflict");
        // Applying the value they set is no conflict: both own it.
        let shared = apply(cms, &edited, &cm(json!({"a": "9"})), &how).unwrap();
        assert_eq!(entries(&shared).len(), 2);
        // Force takes it over.
        let forced =
            apply(cms, &edited, &cm(json!({"a": "1"})), &Apply { force: true, ..how.clone() })
                .unwrap();
        assert_eq!(forced["data"]["a"], "1");
        assert_eq!(
            entries(&forced),
            vec![("ci".into(), "Apply".into(), json!({"f:data": {"f:a": {}}}))]
        );
    }

    #[test]
    fn a_field_another_manager_owns_survives_the_appliers_prune() {
        let cms = rt("configmaps");
        let how = Apply { manager: "ci", subresource: None, force: false };
        let first = apply(cms, &cm(json!(null)), &cm(json!({"a": "1"})), &how).unwrap();
        let other = Apply { manager: "ops", ..how.clone() };
        let shared = apply(cms, &first, &cm(json!({"a": "1"})), &other).unwrap();
        let dropped = apply(cms, &shared, &cm(json!({"b": "2"})), &how).unwrap();
        assert_eq!(dropped["data"], json!({"a": "1", "b": "2"}));
    }

    #[test]
    fn managers_come_from_the_parameter_or_the_user_agent() {
        assert_eq!(manager_of(None, Some("kubectl/v1.33.0 (linux/amd64)")), "kubectl");
        assert_eq!(manager_of(Some("ci"), Some("kubectl/v1.33.0")), "ci");
        assert_eq!(validate_manager("PatchOptions", &"x".repeat(129)).unwrap_err().code(), 422);
        assert!(validate_manager("PatchOptions", "kubectl-client-side-apply").is_ok());
    }

    #[test]
    fn the_oldest_of_more_than_ten_updaters_merge_into_ancient_changes() {
        let cms = rt("configmaps");
        let mut object = cm(json!({}));
        for i in 0..12 {
            let before = object.clone();
            object["data"][format!("k{i}")] = json!("v");
            // Distinct, increasing times: the entry of updater i is older than i + 1's.
            record_update(cms, Some(&before), &mut object, &Owner::manager(format!("m{i:02}")));
            let entries = object["metadata"]["managedFields"].as_array_mut().unwrap();
            for e in entries.iter_mut() {
                let n: u32 =
                    e["manager"].as_str().unwrap().trim_start_matches('m').parse().unwrap_or(0);
                if e["manager"] != ANCIENT_CHANGES {
                    e["time"] = json!(format!("2026-01-01T00:00:{n:02}Z"));
                }
            }
        }
        let e = entries(&object);
        assert_eq!(e.len(), 10, "{e:?}");
        let ancient = e.iter().find(|(m, _, _)| m == ANCIENT_CHANGES).expect("a bucket");
        assert_eq!(ancient.2, json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}}}));
        assert!(!e.iter().any(|(m, _, _)| m == "m00" || m == "m02"));
        assert!(e.iter().any(|(m, _, _)| m == "m03"));
    }
}
