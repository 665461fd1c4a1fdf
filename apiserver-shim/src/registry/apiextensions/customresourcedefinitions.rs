//! CustomResourceDefinitions (`customresourcedefinitions` in `apiextensions.k8s.io/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::registry::{served, Strategy, STATUS};
use crate::resource::ResourceType;
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
}
