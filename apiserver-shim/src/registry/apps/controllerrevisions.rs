//! ControllerRevisions (`controllerrevisions` in `apps/v1`): how the API server serves them.
//! StatefulSets and DaemonSets keep their history in them; `kubectl rollout history` and
//! `rollout undo` read them.

use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::{json, Value};

use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{compact, Errors};

/// The `controllerrevisions` resource type.
pub const TYPE: ResourceType = served(
    "apps",
    "v1",
    "ControllerRevision",
    "controllerrevisions",
    "controllerrevision",
    true,
    NONE,
    NONE,
    &[],
    &ControllerRevisions,
);

/// The strategy for ControllerRevisions.
#[derive(Debug)]
pub struct ControllerRevisions;

impl Validate for ControllerRevisions {
    type Object = ControllerRevision;

    /// `ValidateControllerRevision` (the name is a DNS subdomain, the default rule).
    fn validate(&self, object: &ControllerRevision, e: &mut Errors) {
        if object.data.is_none() {
            e.required("data", "data is mandatory");
        }
        e.nonnegative(Some(object.revision), "revision");
    }

    /// `ValidateControllerRevisionUpdate`: the data is immutable.
    fn validate_update(&self, old: &ControllerRevision, new: &ControllerRevision, e: &mut Errors) {
        let data = |r: &ControllerRevision| r.data.as_ref().map(|d| &d.0).cloned();
        if data(old) != data(new) {
            e.invalid("data", &compact(&new.data), "field is immutable");
        }
    }
}

impl Strategy for ControllerRevisions {
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Controller", "string", "Controller of the object"),
            col(
                "Revision",
                "string",
                "Revision indicates the revision of the state represented by Data.",
            ),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        vec![name_cell(o), json!(controller(o)), o["revision"].clone(), age_cell(o)]
    }
}

/// The controller of a revision as `kubectl get` prints it: `statefulset.apps/web`, or `<none>`.
fn controller(o: &Value) -> String {
    let refs = o.pointer("/metadata/ownerReferences").and_then(Value::as_array);
    let Some(owner) = refs.into_iter().flatten().find(|r| r["controller"] == json!(true)) else {
        return "<none>".into();
    };
    let kind = owner["kind"].as_str().unwrap_or_default().to_lowercase();
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let name = owner["name"].as_str().unwrap_or_default();
    match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_column_names_kind_group_and_name() {
        let owned = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u0"},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1", "controller": true},
        ]}});
        assert_eq!(controller(&owned), "statefulset.apps/web");
        let core = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": true},
        ]}});
        assert_eq!(controller(&core), "pod/p");
        assert_eq!(controller(&json!({"metadata": {}})), "<none>");
    }
}
