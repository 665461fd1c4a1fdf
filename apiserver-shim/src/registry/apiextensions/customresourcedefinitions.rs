//! CustomResourceDefinitions (`customresourcedefinitions` in `apiextensions.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, STATUS};
use crate::resource::ResourceType;

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

impl Strategy for CustomResourceDefinitions {}
