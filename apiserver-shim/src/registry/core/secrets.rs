//! Secrets (`secrets` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `secrets` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Secret", "secrets", "secret", true, NONE, NONE, &[], &Secrets);

/// The strategy for Secrets.
#[derive(Debug)]
pub struct Secrets;

impl Strategy for Secrets {}
