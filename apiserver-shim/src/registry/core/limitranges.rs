//! LimitRanges (`limitranges` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `limitranges` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "LimitRange",
    "limitranges",
    "limitrange",
    true,
    &["limits"],
    NONE,
    &[],
    &LimitRanges,
);

/// The strategy for LimitRanges.
#[derive(Debug)]
pub struct LimitRanges;

impl Strategy for LimitRanges {}
