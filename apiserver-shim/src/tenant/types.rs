//! The `Tenant` resource (`tenants.carrel.dev/v1alpha1`, cluster-scoped): served by the host API
//! only. Its Rust type gives the host's OpenAPI documents their schema and checks the types of
//! what clients write, as the k8s-openapi types do for the built-in kinds.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use serde_json::Value;

/// The API group of Carrel's own resources.
pub const GROUP: &str = "carrel.dev";
/// The served version.
pub const VERSION: &str = "v1alpha1";

/// A tenant: a private Kubernetes cluster, served at `/tenants/<name>/` on the host's listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.carrel.v1alpha1.Tenant")]
pub struct Tenant {
    /// APIVersion defines the versioned schema of this representation of an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind is a string value representing the REST resource this object represents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Standard object's metadata. The name is the tenant's name: a DNS-1123 label.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the tenant is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<TenantSpec>,
    /// What the tenant manager observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TenantStatus>,
}

/// What a tenant is given.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.carrel.v1alpha1.TenantSpec")]
pub struct TenantSpec {
    /// GPU quota: how many MIG slices of each profile (`1g.18gb`, `3g.71gb`, …) the tenant may
    /// hold at once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_quota: BTreeMap<String, i64>,
    /// How long the tenant lives after its creation, as a Go duration (`90m`, `2h`, `1h30m`)
    /// between `1s` and `8760h` (365 days); it is deleted when that time has passed. Unset: no
    /// expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// The Pod Security Standard enforced on the tenant's pods: `baseline` (the default) or
    /// `restricted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<String>,
    /// The tolerations of host taints the tenant's pods may carry to the host: a pod toleration
    /// reaches its host pod only when one of these covers it (tolerates every taint it
    /// tolerates). Unset: none (the GPU tolerations Carrel needs are added by the syncer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tolerations: Vec<AllowedToleration>,
    /// Bounds on what the tenant's API may store; unset fields keep their defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
}

/// A pattern of tolerations an admin allows a tenant, written as a Kubernetes toleration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.carrel.v1alpha1.AllowedToleration")]
pub struct AllowedToleration {
    /// The taint key; empty (with `Exists`) means every key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operator: String,
    /// The value `Equal` allows.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; empty means every effect.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub effect: String,
}

/// Bounds on what a tenant's API may store, all kinds together. A create beyond them is refused
/// with 403 Forbidden (`exceeded quota: tenant-objects`), as a ResourceQuota refuses; deletes
/// always work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.carrel.v1alpha1.TenantLimits")]
pub struct TenantLimits {
    /// The most objects the tenant may store (default 100000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<i64>,
    /// The most bytes its objects may take, serialized, as a quantity (`512Mi`, `2Gi`, or a
    /// number of bytes; default `2Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Quantity>,
}

/// What the tenant manager observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "dev.carrel.v1alpha1.TenantStatus")]
pub struct TenantStatus {
    /// Ready, Terminating or Failed; none while a new tenant is set up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The latest observations of the tenant's state (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The URL of the tenant's API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The PEM certificate of the tenant's CA, which signs its client certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// The host namespace holding the tenant's workloads and its admin kubeconfig Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_namespace: Option<String>,
    /// Where the tenant's cluster DNS answers (`host:port`), where the manager serves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_endpoint: Option<String>,
    /// GPU slices held, per MIG profile.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gpu_usage: BTreeMap<String, i64>,
    /// The API replica that serves the tenant from its volume, where several do (`carrel serve
    /// --replica`): given by the replicas' assigner, changed by a move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// When the tenant expires (RFC 3339), from its TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When the tenant's controllers are next due to act by the clock alone (RFC 3339): a
    /// CronJob's schedule, a Job's deadline or time to live. A tenant closed while idle is
    /// opened again then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_wake_time: Option<String>,
}

impl k8s_openapi::Resource for Tenant {
    const API_VERSION: &'static str = "carrel.dev/v1alpha1";
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "Tenant";
    const VERSION: &'static str = VERSION;
    const URL_PATH_SEGMENT: &'static str = "tenants";
    type Scope = k8s_openapi::ClusterResourceScope;
}

impl k8s_openapi::ListableResource for Tenant {
    const LIST_KIND: &'static str = "TenantList";
}

/// The longest tenant name: its host namespace `carrel-<name>` must be a DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63 - carrel_machinery::tenancy::HOST_NAMESPACE_PREFIX.len();

/// The shortest TTL a tenant may be given.
pub const MIN_TTL: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest TTL a tenant may be given: 365 days (`8760h`); a longer-lived tenant has none.
pub const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(8760 * 3600);

/// Why a value in a `Tenant`'s spec does not read; the words go into the Invalid cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not a Go duration, or a negative one.
    #[error("invalid duration {0:?}: use a Go duration such as 90m or 1h30m")]
    Duration(String),
    /// A TTL outside [`MIN_TTL`]..=[`MAX_TTL`].
    #[error("\"{0}\": must be between 1s and 8760h (365 days)")]
    TtlOutOfRange(String),
    /// Not a byte count.
    #[error("invalid quantity {text:?}: {why}")]
    Quantity {
        /// What was written.
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// A tenant's TTL (`spec.ttl`) when it is a Go duration between [`MIN_TTL`] and [`MAX_TTL`];
/// why not otherwise.
pub fn parse_ttl(text: &str) -> Result<std::time::Duration, ValueError> {
    let ttl = parse_duration(text)?;
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(ValueError::TtlOutOfRange(text.to_owned()));
    }
    Ok(ttl)
}

/// Tenant names refused whatever their host namespace would be: names of Kubernetes' and the
/// host's own namespaces and of Carrel itself. Names starting `kube-` are refused too.
pub const RESERVED_NAMES: &[&str] =
    &["system", "host", "default", "kube-system", "kube-public", "kube-node-lease", "carrel"];

/// Why `name` may not name a tenant, if it is reserved.
pub fn reserved_name(name: &str) -> Option<String> {
    if RESERVED_NAMES.contains(&name) {
        return Some(format!("Invalid value: \"{name}\": is reserved for the host and Carrel"));
    }
    if name.starts_with("kube-") {
        return Some(format!(
            "Invalid value: \"{name}\": names starting \"kube-\" are reserved for Kubernetes"
        ));
    }
    None
}

/// The objects a tenant may store when its `spec.limits.objects` is unset.
pub const DEFAULT_OBJECT_LIMIT: u64 = 100_000;
/// The bytes a tenant's objects may take when its `spec.limits.bytes` is unset: 2 GiB.
pub const DEFAULT_BYTES_LIMIT: u64 = 2 << 30;

/// A byte count written as a Kubernetes quantity: a non-negative whole number, optionally with a
/// fraction, and a binary (`Ki` … `Ei`) or decimal (`k` … `E`) suffix, as long as the result is a
/// whole number of bytes (`1.5Ki` is 1536; `1.5`, `100m` and exponents are refused).
pub fn parse_bytes(text: &str) -> Result<u64, ValueError> {
    let bad = |why: &'static str| ValueError::Quantity { text: text.to_owned(), why };
    let digits_end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    let multiplier: u128 = match carrel_machinery::quantity::suffix_scale(suffix) {
        Some((exp10 @ 0.., exp2)) => 10u128.pow(exp10.unsigned_abs()) << exp2,
        _ => return Err(bad("use a number of bytes with a suffix such as Ki, Mi, Gi or k, M, G")),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') || fraction.len() > 18 {
        return Err(bad("not a non-negative number"));
    }
    let parse = |s: &str| if s.is_empty() { Ok(0) } else { s.parse::<u128>() };
    let (whole, numerator) = match (parse(whole), parse(fraction)) {
        (Ok(w), Ok(f)) => (w, f),
        _ => return Err(bad("not a non-negative number")),
    };
    let denominator = 10u128.pow(fraction.len() as u32);
    let fractional = numerator * multiplier;
    if !fractional.is_multiple_of(denominator) {
        return Err(bad("not a whole number of bytes"));
    }
    whole
        .checked_mul(multiplier)
        .and_then(|w| w.checked_add(fractional / denominator))
        .and_then(|total| u64::try_from(total).ok())
        .filter(|total| *total <= i64::MAX as u64)
        .ok_or_else(|| bad("too large"))
}

/// The bound on a tenant's store from its `spec.limits`, with the defaults for what is unset
/// (or invalid: validation refuses that).
pub fn store_quota(tenant: &Value) -> carrel_store::Quota {
    let objects = tenant
        .pointer("/spec/limits/objects")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_OBJECT_LIMIT);
    let bytes = tenant
        .pointer("/spec/limits/bytes")
        .and_then(quantity_bytes)
        .unwrap_or(DEFAULT_BYTES_LIMIT);
    carrel_store::Quota { objects, bytes }
}

/// A quantity field's bytes, whether written as a number or a string.
pub(crate) fn quantity_bytes(value: &Value) -> Option<u64> {
    match value {
        Value::String(s) => parse_bytes(s).ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// A Go duration (`90m`, `1h30m`, `1.5h`, `45s`), as `time.ParseDuration` reads it, that is not
/// negative. One too long for Go's `int64` of nanoseconds (past about 292 years) reads as the
/// longest duration, so a TTL stored before TTLs were bounded still counts as the longest one
/// ([`parse_ttl`] refuses it).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, ValueError> {
    use carrel_machinery::duration::{parse, Error};
    let bad = || ValueError::Duration(text.to_owned());
    let text = text.trim();
    if text.starts_with('-') {
        return Err(bad());
    }
    match parse(text) {
        Ok(nanos) => Ok(std::time::Duration::from_nanos(nanos.unsigned_abs())),
        Err(Error::OutOfRange(_)) => Ok(std::time::Duration::MAX),
        Err(_) => Err(bad()),
    }
}

/// A tenant object's GPU quota by canonical profile name (`mig-1g.18gb` and `1g.18gb` are one
/// key); entries that are not a known profile and a count are left out (validation refuses them).
pub fn gpu_quota(tenant: &Value) -> std::collections::BTreeMap<String, i64> {
    tenant
        .pointer("/spec/gpuQuota")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(p, n)| Some((carrel_gpu::canonical_profile_name(p)?, n.as_i64()?)))
        .collect()
}

/// The tolerations a tenant's admin allows (`spec.allowedTolerations`), for its syncer.
pub fn allowed_tolerations(tenant: &Value) -> Vec<carrel_gpu::fit::Toleration> {
    let allowed = tenant.pointer("/spec/allowedTolerations").and_then(Value::as_array);
    allowed.into_iter().flatten().filter_map(|t| serde_json::from_value(t.clone()).ok()).collect()
}

impl k8s_openapi::Metadata for Tenant {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::status::Cause;

    /// The causes of a tenant written as JSON, decoded as the API decodes it.
    fn validate(tenant: &Value) -> Vec<Cause> {
        let tenant: Tenant = crate::registry::form::decode(tenant).expect("decodes");
        crate::registry::carrel::tenants::validate(&tenant)
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("90m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("1.5h").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("250ms").unwrap().as_millis(), 250);
        for bad in ["", "10", "h", "1d", "-1h", "1h x"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// TTLs are read by Go's parser: a plus sign and the Greek mu are Go's syntax, fractions
    /// are exact, and a duration past Go's range is the longest one, refused as a TTL.
    #[test]
    fn ttls_read_as_go_reads_durations() {
        assert_eq!(parse_ttl("+1h"), Ok(std::time::Duration::from_secs(3600)));
        assert_eq!(parse_duration("1μs"), Ok(std::time::Duration::from_micros(1)));
        assert_eq!(parse_duration("0.1s"), Ok(std::time::Duration::from_millis(100)));
        assert_eq!(parse_duration("99999999999999999999h"), Ok(std::time::Duration::MAX));
        assert_eq!(
            parse_ttl("99999999999999999999h").map_err(|e| e.to_string()),
            Err("\"99999999999999999999h\": must be between 1s and 8760h (365 days)".to_owned())
        );
        assert_eq!(
            parse_duration("-0s").map_err(|e| e.to_string()),
            Err("invalid duration \"-0s\": use a Go duration such as 90m or 1h30m".to_owned())
        );
    }

    #[test]
    fn tenants_are_validated_with_field_paths() {
        let ok = json!({"metadata": {"name": "team-a"}, "spec": {"ttl": "2h", "podSecurity": "restricted", "gpuQuota": {"1g.18gb": 2, "1g.18gb+me": 1, "mig-3g.71gb": 1}}});
        assert!(validate(&ok).is_empty(), "{:?}", validate(&ok));
        let bad = json!({"metadata": {"name": "Team_A"}, "spec": {"ttl": "2 days", "podSecurity": "privileged", "gpuQuota": {"big": -1}}});
        let fields: Vec<String> = validate(&bad).into_iter().map(|c| c.field).collect();
        for field in ["spec.ttl", "spec.podSecurity", "spec.gpuQuota[big]"] {
            assert!(fields.iter().any(|f| f == field), "{field} missing from {fields:?}");
        }
        // The name is checked as every object's is, by its kind's name rule: a DNS-1123 label.
        let rule = crate::registry::carrel::tenants::TENANTS.strategy.name_rule();
        assert_eq!(rule, crate::object_names::NameRule::Label);
        for bad_name in ["Team_A", "team.a"] {
            assert!(!rule.check(bad_name).is_empty(), "{bad_name} accepted");
        }
        let long = json!({"metadata": {"name": "a".repeat(57)}});
        assert_eq!(validate(&long)[0].reason, "FieldValueTooLong");
    }

    #[test]
    fn ttls_are_bounded() {
        assert_eq!(parse_ttl("1m").unwrap().as_secs(), 60);
        assert_eq!(parse_ttl("8760h").unwrap().as_secs(), 8760 * 3600);
        assert_eq!(parse_ttl("1h30m").unwrap().as_secs(), 5400);
        for bad in ["1ns", "999ms", "0s", "8760h1s", "2562048h", "99999999h", "1e400h", "x"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?} accepted");
            let tenant = json!({"metadata": {"name": "t"}, "spec": {"ttl": bad}});
            let causes = validate(&tenant);
            assert_eq!(causes.len(), 1, "{bad}: {causes:?}");
            assert_eq!(
                (causes[0].reason, causes[0].field.as_str()),
                ("FieldValueInvalid", "spec.ttl")
            );
        }
    }

    #[test]
    fn reserved_names_are_refused() {
        for name in [
            "system",
            "host",
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "carrel",
            "kube-x",
        ] {
            let causes = validate(&json!({"metadata": {"name": name}}));
            assert_eq!(causes.len(), 1, "{name}: {causes:?}");
            assert_eq!(causes[0].field, "metadata.name");
            assert!(causes[0].message.contains("reserved"), "{}", causes[0].message);
        }
        for name in ["team-a", "systems", "my-kube-x", "carrel-x", "x"] {
            assert!(validate(&json!({"metadata": {"name": name}})).is_empty(), "{name} refused");
        }
    }

    #[test]
    fn byte_quantities() {
        for (text, bytes) in [
            ("0", 0),
            ("1000", 1000),
            ("1k", 1000),
            ("512Mi", 512 << 20),
            ("2Gi", 2 << 30),
            ("1.5Ki", 1536),
            ("0.5G", 500_000_000),
            ("7Ei", 7 << 60),
        ] {
            assert_eq!(parse_bytes(text), Ok(bytes), "{text}");
        }
        for bad in ["", ".", "-1", "1.5", "100m", "1e3", "1 Gi", "1gi", "1.2.3", "8Ei", "2Gi "] {
            assert!(parse_bytes(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn allowed_tolerations_are_kubernetes_tolerations() {
        let ok = json!({"metadata": {"name": "team-a"}, "spec": {"allowedTolerations": [
            {"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Exists"},
        ]}});
        assert!(validate(&ok).is_empty(), "{:?}", validate(&ok));
        let spec: TenantSpec = serde_json::from_value(ok["spec"].clone()).expect("decodes");
        assert_eq!(spec.allowed_tolerations[1].operator, "Exists");
        let bad = json!({"metadata": {"name": "team-a"}, "spec": {"allowedTolerations": [
            {"operator": "Equal"}, {"key": "k", "operator": "Exists", "value": "v"},
            {"key": "k", "operator": "Maybe", "effect": "Sometimes"},
        ]}});
        let fields: Vec<String> = validate(&bad).into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "spec.allowedTolerations[0].operator",
                "spec.allowedTolerations[1].operator",
                "spec.allowedTolerations[2].operator",
                "spec.allowedTolerations[2].effect",
            ]
        );
    }

    #[test]
    fn store_limits_are_validated_and_default_when_unset() {
        let unset = json!({"metadata": {"name": "a"}, "spec": {}});
        assert_eq!(
            store_quota(&unset),
            carrel_store::Quota { objects: DEFAULT_OBJECT_LIMIT, bytes: DEFAULT_BYTES_LIMIT }
        );
        let set =
            json!({"metadata": {"name": "a"}, "spec": {"limits": {"objects": 10, "bytes": "1Mi"}}});
        assert!(validate(&set).is_empty(), "{:?}", validate(&set));
        assert_eq!(store_quota(&set), carrel_store::Quota { objects: 10, bytes: 1 << 20 });
        let numeric = json!({"metadata": {"name": "a"}, "spec": {"limits": {"bytes": 4096}}});
        assert!(validate(&numeric).is_empty());
        assert_eq!(
            store_quota(&numeric),
            carrel_store::Quota { objects: DEFAULT_OBJECT_LIMIT, bytes: 4096 }
        );
        // A count that is not an integer is refused by the decoder (400), before validation.
        for objects in [json!(1.5), json!("10")] {
            let tenant =
                json!({"metadata": {"name": "a"}, "spec": {"limits": {"objects": objects}}});
            let decoded = crate::registry::form::decode::<Tenant>(&tenant);
            assert!(decoded.is_err(), "{objects} decodes");
        }
        for (limits, field) in [
            (json!({"objects": -1}), "spec.limits.objects"),
            (json!({"bytes": "lots"}), "spec.limits.bytes"),
            (json!({"bytes": -5}), "spec.limits.bytes"),
            (json!({"bytes": "100m"}), "spec.limits.bytes"),
        ] {
            let tenant = json!({"metadata": {"name": "a"}, "spec": {"limits": limits}});
            let causes = validate(&tenant);
            assert_eq!(causes.len(), 1, "{limits}: {causes:?}");
            assert_eq!(causes[0].field, field);
            assert_eq!(causes[0].reason, "FieldValueInvalid");
        }
    }
}
