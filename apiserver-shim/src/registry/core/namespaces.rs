//! Namespaces (`namespaces` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::{Namespace, NamespaceSpec};
use serde_json::{json, Value};

use crate::api::{Api, SYSTEM_NAMESPACES};
use crate::defaults::{object_at, set_default};
use crate::object::go_quote as quote;
use crate::object_names::{self as names, NameRule};
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::status::{ApiError, ApiResult};
use crate::table::{age_cell, col, definitions, name_cell, str_at, AGE, NAME};
use crate::validation::{Errors, STANDARD_FINALIZERS};

/// The `namespaces` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "Namespace",
    "namespaces",
    "namespace",
    false,
    &["ns"],
    NONE,
    STATUS,
    &Namespaces,
);

/// The strategy for Namespaces.
#[derive(Debug)]
pub struct Namespaces;

impl Validate for Namespaces {
    type Object = Namespace;

    fn validate(&self, object: &Namespace, e: &mut Errors) {
        if let Some(spec) = &object.spec {
            namespace(spec, e);
        }
    }
}

impl Strategy for Namespaces {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Namespace
    }

    fn is_namespace(&self) -> bool {
        true
    }

    /// The first three system namespaces stay.
    fn check_delete(&self, rt: &ResourceType, name: &str) -> ApiResult<()> {
        if SYSTEM_NAMESPACES[..3].contains(&name) {
            return Err(ApiError::forbidden(
                rt.group,
                rt.plural,
                name,
                "this namespace may not be deleted",
            ));
        }
        Ok(())
    }

    /// A namespace is emptied first.
    fn deleted_in_steps(&self) -> bool {
        true
    }

    fn mark_deleting(&self, object: &mut Value) {
        object["status"] = json!({"phase": "Terminating"});
    }

    fn after_marked(&self, api: &Api, name: &str) -> ApiResult<()> {
        api.finish_namespace(name)
    }

    /// Every namespace gets a `default` ServiceAccount.
    fn after_create(&self, api: &Api, name: &str) -> ApiResult<()> {
        api.bootstrap_namespace(name)
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn create_defaults(&self, object: &mut Value) {
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

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[NAME, col("Status", "string", "The status of the namespace"), AGE])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        vec![name, json!(str_at(o, "/status/phase")), age]
    }
}

/// `ValidateNamespace`: the finalizers in its spec.
pub(crate) fn namespace(spec: &NamespaceSpec, e: &mut Errors) {
    for f in spec.finalizers.iter().flatten().map(String::as_str) {
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
