//! The status the manager writes on a `Tenant`: its phase, its `Ready` condition (always the
//! first) and its `StoreHealthy` condition, the endpoint and CA bundle clients use, its host
//! namespace, its cluster DNS address, its expiry from its TTL, and its GPU usage (kept as it was, written apart from
//! the claim Leases). Pure functions of what was read; the manager does the writing.

use carrel_apiserver::object::{meta_str, now_rfc3339};
use carrel_apiserver::tenant::types::{parse_duration, MAX_TTL, MIN_TTL};
use serde_json::{json, Value};

/// The `Tenant` condition that reports whether the tenant's store accepts writes.
pub const STORE_CONDITION: &str = "StoreHealthy";

/// When a tenant expires: its creation time plus its TTL. A TTL stored before TTLs were bounded
/// counts as the nearest bound ([`MIN_TTL`], [`MAX_TTL`]), so the expiry is always a time RFC
/// 3339 can write.
pub fn expires_at(tenant: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let ttl = tenant.pointer("/spec/ttl").and_then(Value::as_str)?;
    let ttl = parse_duration(ttl).ok()?.clamp(MIN_TTL, MAX_TTL);
    let created = meta_str(tenant, "creationTimestamp")?;
    let created = chrono::DateTime::parse_from_rfc3339(created).ok()?.with_timezone(&chrono::Utc);
    Some(created + chrono::Duration::from_std(ttl).ok()?)
}

/// Whether the tenant's `Ready` condition has `reason`.
pub fn ready_reason_is(tenant: &Value, reason: &str) -> bool {
    tenant.pointer("/status/conditions/0/reason") == Some(&json!(reason))
}

/// The tenant's reported condition of `kind`, if any.
pub(crate) fn condition<'a>(tenant: &'a Value, kind: &str) -> Option<&'a Value> {
    tenant
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == kind))
}

/// The `StoreHealthy` condition of a served tenant's store in `health`: `False`, with the
/// reason, while it refuses writes after an I/O error left its disk state uncertain (it reopens
/// itself once the cause is gone). The transition time is kept while the status is unchanged.
pub fn store_condition(health: &carrel_store::Health, tenant: &Value) -> Value {
    let (status, reason, message) = match health {
        carrel_store::Health::Ok => {
            ("True", "StoreHealthy", "the tenant's store accepts writes".to_owned())
        }
        carrel_store::Health::Failed { reason } => (
            "False",
            "StoreFailed",
            format!("the tenant's store refuses writes until it is reopened: {reason}"),
        ),
    };
    let transition = match condition(tenant, STORE_CONDITION) {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    json!({
        "type": STORE_CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    })
}

/// Whether `condition` (from [`store_condition`]) says something else than what the tenant
/// reports.
pub fn store_condition_changed(tenant: &Value, wanted: &Value) -> bool {
    let reported = condition(tenant, STORE_CONDITION);
    reported.map(|c| &c["status"]) != Some(&wanted["status"])
        || reported.map(|c| &c["message"]) != Some(&wanted["message"])
}

/// What a status says besides what is read from the tenant.
#[derive(Debug)]
pub struct Observed<'a> {
    /// Ready, Terminating or Failed; none while a new tenant is set up.
    pub phase: &'a str,
    /// The `Ready` condition's reason.
    pub reason: &'a str,
    /// Its message.
    pub message: &'a str,
    /// The tenant's API URL.
    pub endpoint: String,
    /// The tenant's host namespace.
    pub host_namespace: String,
    /// What a client of the tenant's API must trust, on a secured listener.
    pub ca_bundle: Option<&'a str>,
    /// The store's condition, when the tenant is served.
    pub store: Option<Value>,
    /// Where the tenant's cluster DNS answers (`host:port`), when it is served.
    pub dns_endpoint: Option<String>,
}

/// The tenant's status for `observed`: the `Ready` condition's transition time is kept while
/// its status is unchanged, and the GPU usage is kept as it was.
pub fn status(tenant: &Value, observed: Observed<'_>) -> Value {
    let ready = if observed.phase == "Ready" { "True" } else { "False" };
    let transition = match tenant.pointer("/status/conditions/0") {
        Some(c) if c["status"] == ready => c["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    let mut conditions = vec![json!({
        "type": "Ready",
        "status": ready,
        "reason": observed.reason,
        "message": observed.message,
        "lastTransitionTime": transition,
    })];
    conditions.extend(observed.store);
    let mut status = json!({
        "phase": observed.phase,
        "conditions": conditions,
        "endpoint": observed.endpoint,
        "hostNamespace": observed.host_namespace,
    });
    if let Some(ca) = observed.ca_bundle {
        status["caBundle"] = json!(ca);
    }
    if let Some(dns) = observed.dns_endpoint {
        status["dnsEndpoint"] = json!(dns);
    }
    if let Some(expiry) = expires_at(tenant) {
        status["expiresAt"] = json!(expiry.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    // What others write in the status stays: the GPU usage (the manager's own, from the
    // claims), when the tenant is next due to wake (its controllers') and the replica serving
    // it (the assigner's, or a move's).
    for kept in ["gpuUsage", "nextWakeTime", "replica"] {
        if let Some(value) = tenant.pointer(&format!("/status/{kept}")) {
            status[kept] = value.clone();
        }
    }
    status
}
