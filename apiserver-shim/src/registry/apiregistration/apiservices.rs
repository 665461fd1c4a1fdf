//! APIServices (`apiservices` in `apiregistration.k8s.io/v1`): how the API server serves them.
//!
//! They are stored, validated as kube-aggregator's `ValidateAPIService` validates them, and
//! listed as kubectl lists them, so that manifests registering an aggregated API (an adapter, a
//! metrics server) apply unchanged. Carrel does not forward requests to an APIService's Service:
//! its status, which is the server's to write, says so — `Available: False`, reason
//! `NotProxied` — where a local APIService (no Service) is `Available: True` as
//! kube-aggregator answers it. A request for such an API is refused with a 503, as
//! kube-aggregator refuses a request for an API whose APIService is not available, in words that
//! say why ([`unproxied`]).

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde_json::{json, Value};

use super::GROUP;
use crate::api::Api;
use crate::object::now_rfc3339;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::status::ApiResult;
use crate::table::{self, col, AGE, NAME};
use crate::validation::Errors;

/// The `apiservices` resource type.
pub const TYPE: ResourceType = served(
    GROUP,
    "v1",
    "APIService",
    "apiservices",
    "apiservice",
    false,
    NONE,
    &["api-extensions"],
    STATUS,
    &APIServices,
);

/// The refusal of a request under `/apis/<group>/<version>` that no served type answers, where
/// an APIService registers that group-version with a Service: kube-aggregator's 503 for an API
/// that is not available, saying that this server does not proxy it.
pub fn unproxied(api: &Api, group: &str, version: &str) -> Option<crate::status::ApiError> {
    let target = crate::api::Target { rt: &TYPE, namespace: None };
    let object = api.get(&target, &format!("{version}.{group}")).ok()?;
    let service = object.pointer("/spec/service")?;
    let field = |name: &str| service.get(name).and_then(Value::as_str).unwrap_or_default();
    Some(crate::status::ApiError::unavailable(format!(
        "the server is currently unable to handle the request: the aggregated API \
         {version}.{group} is served by Service {}/{}, and this server does not proxy \
         aggregated APIs (APIService {version}.{group}: Available=False, NotProxied)",
        field("namespace"),
        field("name"),
    )))
}

/// The strategy for APIServices.
#[derive(Debug)]
pub struct APIServices;

impl Validate for APIServices {
    type Object = APIService;

    /// `ValidateAPIService`.
    fn validate(&self, object: &APIService, e: &mut Errors) {
        let name = object.metadata.name.as_deref().unwrap_or_default();
        let Some(spec) = &object.spec else {
            e.required("spec.version", "");
            return;
        };
        let group = spec.group.as_deref().unwrap_or_default();
        let version = spec.version.as_deref().unwrap_or_default();
        // The name of the legacy group's, `v1.`, too.
        let expected = format!("{version}.{group}");
        if name != expected {
            e.invalid(
                "metadata.name",
                &quote(name),
                &format!("must be `spec.version+\".\"+spec.group`: {}", quote(&expected)),
            );
        }
        if group.is_empty() && version != "v1" {
            e.required(
                "spec.group",
                "only v1 may have an empty group and it better be legacy kube",
            );
        }
        if !group.is_empty() {
            e.invalid_each("spec.group", group, carrel_machinery::names::dns1123_subdomain(group));
        }
        if version.is_empty() {
            e.required("spec.version", "");
        } else {
            e.invalid_each(
                "spec.version",
                version,
                carrel_machinery::names::dns1035_label(version),
            );
        }
        if !(1..=20000).contains(&spec.group_priority_minimum) {
            e.invalid(
                "spec.groupPriorityMinimum",
                &spec.group_priority_minimum.to_string(),
                "must be positive and less than 20000",
            );
        }
        if !(1..=1000).contains(&spec.version_priority) {
            e.invalid(
                "spec.versionPriority",
                &spec.version_priority.to_string(),
                "must be positive and less than 1000",
            );
        }
        let ca_bundle = spec.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty());
        let skip_verify = spec.insecure_skip_tls_verify == Some(true);
        match &spec.service {
            None => {
                if let Some(bundle) = spec.ca_bundle.as_ref().filter(|b| !b.0.is_empty()) {
                    e.invalid(
                        "spec.caBundle",
                        &quote(&format!("{} bytes", bundle.0.len())),
                        "local APIServices may not have a caBundle",
                    );
                }
                if skip_verify {
                    e.invalid(
                        "spec.insecureSkipTLSVerify",
                        "true",
                        "local APIServices may not have insecureSkipTLSVerify",
                    );
                }
            }
            Some(service) => {
                for (field, value) in [("namespace", &service.namespace), ("name", &service.name)] {
                    if value.as_deref().unwrap_or_default().is_empty() {
                        e.required(&format!("spec.service.{field}"), "");
                    }
                }
                if let Some(port) = service.port.filter(|p| !(1..=65535).contains(p)) {
                    e.invalid(
                        "spec.service.port",
                        &port.to_string(),
                        "port is not valid: must be between 1 and 65535, inclusive",
                    );
                }
                if skip_verify && ca_bundle {
                    e.invalid(
                        "spec.insecureSkipTLSVerify",
                        "true",
                        "may not be true if caBundle is present",
                    );
                }
            }
        }
    }

    fn validate_update(&self, _old: &APIService, new: &APIService, e: &mut Errors) {
        self.validate(new, e);
    }
}

fn quote(s: &str) -> String {
    crate::object::go_quote(s)
}

/// The `Available` condition of an APIService's spec: local ones are; ones backed by a Service
/// are not, Carrel forwarding nothing to them.
fn available(object: &Value) -> (bool, &'static str, String) {
    let spec = &object["spec"];
    match spec.get("service").filter(|s| !s.is_null()) {
        None => (true, "Local", "Local APIServices are always available".to_owned()),
        Some(service) => {
            let group = spec["group"].as_str().unwrap_or_default();
            let version = spec["version"].as_str().unwrap_or_default();
            let path = if group.is_empty() {
                format!("/api/{version}")
            } else {
                format!("/apis/{group}/{version}")
            };
            (
                false,
                "NotProxied",
                format!(
                    "Carrel does not forward aggregated APIs: requests for {path} are not sent to service {}/{}",
                    service["namespace"].as_str().unwrap_or_default(),
                    service["name"].as_str().unwrap_or_default()
                ),
            )
        }
    }
}

impl Strategy for APIServices {
    /// `service.port` defaults to 443.
    fn defaults(&self, object: &mut Value) {
        if let Some(service) = object.pointer_mut("/spec/service").and_then(Value::as_object_mut) {
            service.entry("port").or_insert(json!(443));
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }

    /// The status is the server's: the `Available` condition of the spec, its transition time
    /// kept while its status holds.
    fn before_store(
        &self,
        _api: &Api,
        _name: &str,
        old: Option<&Value>,
        new: &mut Value,
        _status_only: bool,
    ) -> ApiResult<()> {
        let (up, reason, message) = available(new);
        let status = if up { "True" } else { "False" };
        let since = old
            .and_then(|o| o.pointer("/status/conditions/0"))
            .filter(|c| c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_owned))
            .unwrap_or_else(now_rfc3339);
        new["status"] = json!({"conditions": [{
            "type": "Available",
            "status": status,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }]});
        Ok(())
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        table::definitions(&[
            NAME,
            col("Service", "string", "The service backing the API, or Local"),
            col("Available", "string", "Whether the API is available"),
            AGE,
        ])
    }

    /// As kubectl prints them: the Service as `namespace/name` or `Local`, and `True` or
    /// `False (<reason>)`.
    fn cells(&self, _rt: &ResourceType, object: &Value) -> Vec<Value> {
        let service = match object.pointer("/spec/service").filter(|s| !s.is_null()) {
            Some(s) => format!("{}/{}", table::str_at(s, "/namespace"), table::str_at(s, "/name")),
            None => "Local".to_owned(),
        };
        let condition = object.pointer("/status/conditions/0");
        let available = match condition {
            Some(c) if c["status"] == "True" => "True".to_owned(),
            Some(c) => format!("False ({})", c["reason"].as_str().unwrap_or_default()),
            None => "Unknown".to_owned(),
        };
        vec![table::name_cell(object), json!(service), json!(available), table::age_cell(object)]
    }
}

#[cfg(test)]
mod tests {

    use serde_json::{json, Value};

    use crate::api::{Api, Target, Write};
    use crate::resource::built_in;
    use crate::status::ApiResult;

    fn create(api: &Api, object: Value) -> ApiResult<Value> {
        let rt = built_in("apiregistration.k8s.io", "apiservices").expect("served");
        api.create(&Target { rt, namespace: None }, object, &Write::by("kubectl", false))
    }

    fn service(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": name}, "spec": spec})
    }

    #[test]
    fn apiservices_are_stored_with_a_status_that_says_what_is_served() {
        let (_dir, api) = crate::api::scratch();
        let metrics = create(
            &api,
            service(
                "v1beta1.metrics.k8s.io",
                json!({"group": "metrics.k8s.io", "version": "v1beta1",
                       "service": {"namespace": "kube-system", "name": "metrics-server"},
                       "groupPriorityMinimum": 100, "versionPriority": 100,
                       "insecureSkipTLSVerify": true}),
            ),
        )
        .expect("created");
        assert_eq!(metrics["spec"]["service"]["port"], 443, "defaulted");
        let condition = &metrics["status"]["conditions"][0];
        assert_eq!(condition["type"], "Available");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "NotProxied");
        assert_eq!(
            condition["message"],
            "Carrel does not forward aggregated APIs: requests for /apis/metrics.k8s.io/v1beta1 \
             are not sent to service kube-system/metrics-server"
        );
        let rt = built_in("apiregistration.k8s.io", "apiservices").expect("served");
        let cells = rt.strategy.cells(rt, &metrics);
        assert_eq!(cells[1], "kube-system/metrics-server");
        assert_eq!(cells[2], "False (NotProxied)");

        let local = create(
            &api,
            service(
                "v1.widgets.example.com",
                json!({"group": "widgets.example.com", "version": "v1",
                       "groupPriorityMinimum": 1000, "versionPriority": 15}),
            ),
        )
        .expect("created");
        assert_eq!(local["status"]["conditions"][0]["status"], "True");
        assert_eq!(local["status"]["conditions"][0]["reason"], "Local");
        assert_eq!(rt.strategy.cells(rt, &local)[1], "Local");

        let err = create(
            &api,
            service(
                "metrics",
                json!({"group": "metrics.k8s.io", "version": "v1beta1",
                       "groupPriorityMinimum": 0, "versionPriority": 100}),
            ),
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        let causes: Vec<String> =
            err.causes().iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        assert_eq!(
            causes,
            [
                "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\"",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
            ]
        );
    }
}
