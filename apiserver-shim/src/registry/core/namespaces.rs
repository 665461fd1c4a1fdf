//! Namespaces (`namespaces` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

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

impl Strategy for Namespaces {}
