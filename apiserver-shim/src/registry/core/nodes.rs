//! Nodes (`nodes` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

/// The `nodes` resource type.
pub const TYPE: ResourceType =
    served("", "v1", "Node", "nodes", "node", false, &["no"], NONE, STATUS, &Nodes);

/// The strategy for Nodes.
#[derive(Debug)]
pub struct Nodes;

impl Strategy for Nodes {}
