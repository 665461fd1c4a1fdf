//! Tenants (`tenants` in `carrel.dev/v1alpha1`, cluster-scoped): the host API's own kind. Its
//! Rust type and the parsing of its fields are [`crate::tenant::types`].

use serde_json::{json, Value};

use crate::object_names::NameRule;
use crate::registry::{served, Strategy, Validate, NONE, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::status::Cause;
use crate::table::{age_cell, col, definitions, name_cell, or_none, str_at, wide, AGE, NAME};
use crate::tenant::types::{
    parse_bytes, parse_ttl, reserved_name, Tenant, GROUP, MAX_NAME_LEN, VERSION,
};
use crate::validation::{compact, Errors};

/// The `tenants` resource type.
pub const TYPE: ResourceType =
    served(GROUP, VERSION, "Tenant", "tenants", "tenant", false, &["tn"], NONE, STATUS, &Tenants);

/// The `tenants` resource type, served by the host API only.
pub static TENANTS: ResourceType = TYPE;

/// The strategy for Tenants.
#[derive(Debug)]
pub struct Tenants;

impl Validate for Tenants {
    type Object = Tenant;

    fn validate(&self, object: &Tenant, e: &mut Errors) {
        e.0.extend(validate(object));
    }
}

impl Strategy for Tenants {
    /// `metadata.name` and `metadata.namespace`, the latter read from the object (a Tenant is
    /// stored without one, so it reads `""`).
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Default { cluster_scoped: false }
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }

    fn defaults(&self, object: &mut Value) {
        let Some(root) = object.as_object_mut() else { return };
        let spec = root.entry("spec").or_insert_with(|| json!({}));
        if let Some(spec) = spec.as_object_mut() {
            crate::defaults::set_default(spec, "podSecurity", json!("baseline"));
        }
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col(
                "Phase",
                "string",
                "Ready, Terminating or Failed; none while a new tenant is set up.",
            ),
            col("Expires", "string", "When the tenant's TTL deletes it."),
            AGE,
            wide("Endpoint", "The URL of the tenant's API server."),
            wide("GPU Quota", "MIG slices the tenant may hold, per profile."),
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let quota = o
            .pointer("/spec/gpuQuota")
            .and_then(Value::as_object)
            .map(|q| q.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
            .unwrap_or_default();
        vec![
            name_cell(o),
            json!(or_none(str_at(o, "/status/phase").into())),
            json!(or_none(str_at(o, "/status/expiresAt").into())),
            age_cell(o),
            json!(or_none(str_at(o, "/status/endpoint").into())),
            json!(or_none(quota)),
        ]
    }
}

/// The checks a `Tenant` must pass beyond its name being a DNS-1123 label: room in the name for
/// the `carrel-` host namespace prefix, a name that is not reserved, a TTL within bounds, a known
/// pod security level, store limits that read, and non-negative GPU quotas for named profiles.
pub fn validate(tenant: &Tenant) -> Vec<Cause> {
    let mut causes = Vec::new();
    // That the name is a DNS-1123 label is checked with every object's name (`names::NameRule`).
    let name = tenant.metadata.name.as_deref().unwrap_or_default();
    if name.len() > MAX_NAME_LEN {
        causes.push(Cause::new(
            "FieldValueTooLong",
            "metadata.name",
            format!("Too long: may not be more than {MAX_NAME_LEN} bytes (the host namespace is carrel-<name>)"),
        ));
    }
    if let Some(why) = reserved_name(name) {
        causes.push(Cause::new("FieldValueInvalid", "metadata.name", why));
    }
    let Some(spec) = &tenant.spec else { return causes };
    if let Some(ttl) = spec.ttl.as_deref() {
        if let Err(e) = parse_ttl(ttl) {
            causes.push(Cause::new("FieldValueInvalid", "spec.ttl", format!("Invalid value: {e}")));
        }
    }
    if let Some(level) = spec.pod_security.as_deref() {
        if !matches!(level, "baseline" | "restricted") {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                "spec.podSecurity",
                format!("Unsupported value: \"{level}\": supported values: \"baseline\", \"restricted\""),
            ));
        }
    }
    let limits = spec.limits.as_ref();
    if let Some(objects) = limits.and_then(|l| l.objects).filter(|n| *n < 0) {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.limits.objects",
            format!("Invalid value: {objects}: must be a non-negative integer"),
        ));
    }
    if let Some(bytes) = limits.and_then(|l| l.bytes.as_ref()) {
        if let Err(why) = parse_bytes(&bytes.0) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.limits.bytes",
                format!("Invalid value: {}: {why}", compact(bytes)),
            ));
        }
    }
    for (profile, count) in &spec.gpu_quota {
        let field = format!("spec.gpuQuota[{profile}]");
        if carrel_gpu::canonical_profile_name(profile).is_none() {
            causes.push(Cause::new(
                "FieldValueInvalid",
                field.clone(),
                format!(
                    "Invalid value: \"{profile}\": not a MIG profile of the catalogue; known: {}",
                    carrel_gpu::known_profile_names().join(", ")
                ),
            ));
        }
        if *count < 0 {
            causes.push(Cause::new(
                "FieldValueInvalid",
                field,
                format!("Invalid value: {count}: must be a non-negative integer"),
            ));
        }
    }
    for (i, t) in spec.allowed_tolerations.iter().enumerate() {
        let path = format!("spec.allowedTolerations[{i}]");
        let (key, operator, value, effect) =
            (t.key.as_str(), t.operator.as_str(), t.value.as_str(), t.effect.as_str());
        if !matches!(operator, "" | "Equal" | "Exists") {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                format!("{path}.operator"),
                format!(
                    "Unsupported value: \"{operator}\": supported values: \"Equal\", \"Exists\""
                ),
            ));
        }
        if key.is_empty() && operator != "Exists" {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.operator"),
                format!("Invalid value: \"{operator}\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""),
            ));
        }
        if operator == "Exists" && !value.is_empty() {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("{path}.operator"),
                format!(
                    "Invalid value: \"{value}\": value must be empty when `operator` is 'Exists'"
                ),
            ));
        }
        if !matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            causes.push(Cause::new(
                "FieldValueNotSupported",
                format!("{path}.effect"),
                format!("Unsupported value: \"{effect}\": supported values: \"NoExecute\", \"NoSchedule\", \"PreferNoSchedule\""),
            ));
        }
    }
    causes
}
