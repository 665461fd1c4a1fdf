//! MutatingWebhookConfigurations (`mutatingwebhookconfigurations` in
//! `admissionregistration.k8s.io/v1`): how the API server serves them. Called by
//! [`crate::admission::webhook`], which reads them again after every write of one.

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::{json, Value};

use super::{default_webhooks, webhooks, GROUP};
use crate::admission::webhook as called;
use crate::api::Api;
use crate::defaults::set_default;
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, Validate, NONE};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::validation::Errors;

/// The `mutatingwebhookconfigurations` resource type.
pub const TYPE: ResourceType = served(
    GROUP,
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    "mutatingwebhookconfiguration",
    false,
    NONE,
    &["api-extensions"],
    &[],
    &MutatingWebhookConfigurations,
);

/// The strategy for MutatingWebhookConfigurations.
#[derive(Debug)]
pub struct MutatingWebhookConfigurations;

/// The reinvocation policies a mutating webhook may have.
const REINVOCATION: &[&str] = &["IfNeeded", "Never"];

impl Validate for MutatingWebhookConfigurations {
    type Object = MutatingWebhookConfiguration;

    /// The checks every webhook has (as the validating kind's), and its `reinvocationPolicy`.
    fn validate(&self, object: &MutatingWebhookConfiguration, e: &mut Errors) {
        let hooks = object.webhooks.as_deref().unwrap_or_default();
        let common: Vec<_> = hooks
            .iter()
            .filter_map(|h| serde_json::to_value(h).ok())
            .filter_map(|h| serde_json::from_value(h).ok())
            .collect();
        webhooks(&common, e);
        for (i, hook) in hooks.iter().enumerate() {
            if let Some(policy) =
                hook.reinvocation_policy.as_deref().filter(|p| !REINVOCATION.contains(p))
            {
                e.not_supported(
                    &format!("webhooks[{i}].reinvocationPolicy"),
                    &quote(policy),
                    REINVOCATION,
                );
            }
        }
    }

    fn validate_update(
        &self,
        _old: &MutatingWebhookConfiguration,
        new: &MutatingWebhookConfiguration,
        e: &mut Errors,
    ) {
        self.validate(new, e);
    }
}

impl Strategy for MutatingWebhookConfigurations {
    /// The defaults of every webhook, and `reinvocationPolicy: Never`.
    fn defaults(&self, object: &mut Value) {
        default_webhooks(object);
        let hooks = object.get_mut("webhooks").and_then(Value::as_array_mut);
        for hook in hooks.into_iter().flatten().filter_map(Value::as_object_mut) {
            set_default(hook, "reinvocationPolicy", json!("Never"));
        }
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
