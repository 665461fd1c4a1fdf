//! ServiceAccounts (`serviceaccounts` in `v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE};
use crate::resource::ResourceType;

/// The `serviceaccounts` resource type.
pub const TYPE: ResourceType = served(
    "",
    "v1",
    "ServiceAccount",
    "serviceaccounts",
    "serviceaccount",
    true,
    &["sa"],
    NONE,
    &[],
    &ServiceAccounts,
);

/// The strategy for ServiceAccounts.
#[derive(Debug)]
pub struct ServiceAccounts;

impl crate::registry::form::Validate for ServiceAccounts {
    type Object = k8s_openapi::api::core::v1::ServiceAccount;
}

impl Strategy for ServiceAccounts {}
