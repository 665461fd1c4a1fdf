//! PodDisruptionBudgets (`poddisruptionbudgets` in `policy/v1`): how the API server serves them.

use crate::registry::{served, Strategy, NONE, STATUS};
use crate::resource::ResourceType;

/// The `poddisruptionbudgets` resource type.
pub const TYPE: ResourceType = served(
    "policy",
    "v1",
    "PodDisruptionBudget",
    "poddisruptionbudgets",
    "poddisruptionbudget",
    true,
    &["pdb"],
    NONE,
    STATUS,
    &PodDisruptionBudgets,
);

/// The strategy for PodDisruptionBudgets.
#[derive(Debug)]
pub struct PodDisruptionBudgets;

impl crate::registry::form::Validate for PodDisruptionBudgets {
    type Object = k8s_openapi::api::policy::v1::PodDisruptionBudget;
}

impl Strategy for PodDisruptionBudgets {}
