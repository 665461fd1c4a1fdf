//! ValidatingWebhookConfigurations (`validatingwebhookconfigurations` in
//! `admissionregistration.k8s.io/v1`): how the API server serves them. Called by
//! [`crate::admission::webhook`], which reads them again after every write of one.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use serde_json::Value;

use super::{default_webhooks, webhooks, GROUP};
use crate::admission::webhook as called;
use crate::api::Api;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::Errors;

/// The `validatingwebhookconfigurations` resource type.
pub const TYPE: ResourceType = served(
    GROUP,
    "v1",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    "validatingwebhookconfiguration",
    false,
    NONE,
    &["api-extensions"],
    &[],
    &ValidatingWebhookConfigurations,
);

/// The strategy for ValidatingWebhookConfigurations.
#[derive(Debug)]
pub struct ValidatingWebhookConfigurations;

impl Validate for ValidatingWebhookConfigurations {
    type Object = ValidatingWebhookConfiguration;

    fn validate(&self, object: &ValidatingWebhookConfiguration, e: &mut Errors) {
        webhooks(object.webhooks.as_deref().unwrap_or_default(), e);
    }

    fn validate_update(
        &self,
        _old: &ValidatingWebhookConfiguration,
        new: &ValidatingWebhookConfiguration,
        e: &mut Errors,
    ) {
        self.validate(new, e);
    }
}

impl Strategy for ValidatingWebhookConfigurations {
    fn defaults(&self, object: &mut Value) {
        default_webhooks(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn has_generation(&self, _rt: &ResourceType) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        super::webhook_columns()
    }

    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        super::webhook_cells(object)
    }

    fn after_write(&self, api: &Api, _rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        called::changed(api);
        Ok(())
    }
}
