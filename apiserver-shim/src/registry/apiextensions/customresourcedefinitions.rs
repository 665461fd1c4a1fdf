//! CustomResourceDefinitions (`customresourcedefinitions` in `apiextensions.k8s.io/v1`): how the API server serves them.

use serde_json::{json, Value};

use carrel_store::Revision;
use parking_lot::MutexGuard;

use crate::api::{encode, written, Api, DeleteParams};
use crate::crd;
use crate::object::is_deleting;
use crate::registry::{served, Strategy, STATUS};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::table::{definitions, name_cell, str_at, Column, NAME};

/// The `customresourcedefinitions` resource type.
pub const TYPE: ResourceType = served(
    "apiextensions.k8s.io",
    "v1",
    "CustomResourceDefinition",
    "customresourcedefinitions",
    "customresourcedefinition",
    false,
    &["crd", "crds"],
    &["api-extensions"],
    STATUS,
    &CustomResourceDefinitions,
);

/// The strategy for CustomResourceDefinitions.
#[derive(Debug)]
pub struct CustomResourceDefinitions;

impl crate::registry::form::Validate for CustomResourceDefinitions {
    type Object = k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
}

impl Strategy for CustomResourceDefinitions {
    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
                    NAME,
                    Column {
                        name: "Created At",
                        kind: "date",
                        format: "",
                        description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
                        priority: 0,
                    },
                ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        vec![name, json!(str_at(o, "/metadata/creationTimestamp"))]
    }

    /// A definition's own rules, its names against the built-in types'.
    fn admit(&self, api: &Api, old: Option<&Value>, object: &Value) -> ApiResult<()> {
        crd::validate(object, old, &api.base)
    }

    /// Two definitions written at once cannot both take one name.
    fn write_lock<'a>(&self, api: &'a Api) -> Option<MutexGuard<'a, ()>> {
        Some(api.definitions_lock.lock())
    }

    /// The status is the server's answer: the names accepted against the other definitions'.
    fn before_store(
        &self,
        api: &Api,
        name: &str,
        old: Option<&Value>,
        new: &mut Value,
        status_only: bool,
    ) -> ApiResult<()> {
        if status_only {
            return crd::check_status(new);
        }
        let others = api.definitions_except(name)?;
        crd::limits::check_room(new, &others)?;
        api.compiled.intern_names(new)?;
        new["status"] = crd::status_of(new, old, &others)?;
        if old.is_some() && is_deleting(new) {
            crd::mark_terminating(new);
        }
        Ok(())
    }

    /// A definition is marked Terminating, its objects are deleted, and it goes once the last
    /// of them is gone.
    fn delete(
        &self,
        api: &Api,
        key: &str,
        name: &str,
        old: &Value,
        params: &DeleteParams,
    ) -> Option<ApiResult<Value>> {
        Some(api.delete_definition(key, name, old.clone(), params))
    }

    /// A definition goes once its objects are gone too.
    fn complete_deletion(
        &self,
        api: &Api,
        rt: &ResourceType,
        key: &str,
        name: &str,
        revision: Revision,
        last: Value,
    ) -> ApiResult<Value> {
        let stored = api
            .store()
            .update(key, encode(&last)?, Some(revision))
            .map_err(|e| ApiError::from_store(e, rt.group, rt.plural, name))?;
        let written = written(last, &stored);
        Ok(api.finish_definition(name)?.unwrap_or(written))
    }

    /// The served types follow the stored definitions.
    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        api.reload_definitions()
    }
}
