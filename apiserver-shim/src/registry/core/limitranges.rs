//! LimitRanges (`limitranges` in `v1`): how the API server serves them.

use k8s_openapi::api::core::v1::LimitRange;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::registry::{served, Strategy, Validate, NONE};
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

impl Validate for LimitRanges {
    type Object = LimitRange;

    fn quantities<'a>(&self, object: &'a LimitRange, found: &mut Vec<&'a Quantity>) {
        for limit in object.spec.iter().flat_map(|s| &s.limits) {
            let maps = [
                &limit.max,
                &limit.min,
                &limit.default,
                &limit.default_request,
                &limit.max_limit_request_ratio,
            ];
            found.extend(maps.into_iter().flatten().flat_map(|m| m.values()));
        }
    }
}

impl Strategy for LimitRanges {}
