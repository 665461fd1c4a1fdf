//! LimitRanges (`limitranges` in `v1`): how the API server serves them.

use serde_json::Value;

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;
use crate::validation::{at, items};

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

impl crate::registry::form::Validate for LimitRanges {
    type Object = k8s_openapi::api::core::v1::LimitRange;
}

impl Strategy for LimitRanges {
    fn quantities<'a>(&self, object: &'a Value, lists: &mut Vec<&'a Value>) {
        let spec = at(object, "spec");
        for limit in items(spec, "limits") {
            for key in ["max", "min", "default", "defaultRequest", "maxLimitRequestRatio"] {
                lists.push(at(limit, key));
            }
        }
    }
}
