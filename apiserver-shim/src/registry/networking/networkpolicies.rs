//! NetworkPolicys (`networkpolicies` in `networking.k8s.io/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `networkpolicies` resource type.
pub const TYPE: ResourceType = served(
    "networking.k8s.io",
    "v1",
    "NetworkPolicy",
    "networkpolicies",
    "networkpolicy",
    true,
    &["netpol"],
    NONE,
    &[],
    &NetworkPolicies,
);

/// The strategy for NetworkPolicys.
#[derive(Debug)]
pub struct NetworkPolicies;

impl crate::registry::form::Validate for NetworkPolicies {
    type Object = k8s_openapi::api::networking::v1::NetworkPolicy;
}

impl Strategy for NetworkPolicies {}
