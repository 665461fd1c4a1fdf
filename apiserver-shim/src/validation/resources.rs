//! Resource requirements and quantities.

use serde_json::Value;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{map_of, Errors, NEGATIVE};

/// `resource.ParseQuantity`'s error, which kube-apiserver answers while decoding (400).
pub(crate) const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// `ValidateContainerResourceRequirements`: resource names, quantities, requests within limits.
pub(crate) fn container_resources(resources: &Value, path: &str, e: &mut Errors) {
    let limits = map_of(resources, "limits");
    let requests = map_of(resources, "requests");
    for (name, q) in limits.into_iter().flatten() {
        let qpath = format!("{path}.limits[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
    }
    for (name, q) in requests.into_iter().flatten() {
        let qpath = format!("{path}.requests[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
        let (Some(request), Some(raw)) = (quantity_of(q), quantity_text(q)) else { continue };
        match limits.and_then(|l| l.get(name)) {
            Some(limit_value) => {
                let (Some(limit), Some(limit_raw)) =
                    (quantity_of(limit_value), quantity_text(limit_value))
                else {
                    continue;
                };
                if request != limit && !overcommit_allowed(name) {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&raw),
                        &format!("must be equal to {name} limit of {limit_raw}"),
                    );
                } else if request > limit {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&raw),
                        &format!("must be less than or equal to {name} limit of {limit_raw}"),
                    );
                }
            }
            None if !overcommit_allowed(name) => e.required(
                &format!("{path}.limits"),
                "Limit must be set for non overcommitable resources",
            ),
            None => {}
        }
    }
}

/// Whether a resource is native (`cpu`, `kubernetes.io/…`).
pub(crate) fn native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Requests may be below limits for native resources but hugepages.
pub(crate) fn overcommit_allowed(name: &str) -> bool {
    native_resource(name) && !name.starts_with("hugepages-")
}

/// An extended resource (`nvidia.com/gpu`): not native, a qualified name, counted in integers.
pub(crate) fn extended_resource(name: &str) -> bool {
    !native_resource(name)
        && !name.starts_with("requests.")
        && names::qualified_name(&format!("requests.{name}")).is_empty()
}

/// `validateContainerResourceName`.
pub(crate) fn container_resource_name(name: &str, path: &str, e: &mut Errors) {
    e.invalid_each(path, name, names::qualified_name(name));
    if !name.contains('/') {
        let standard = matches!(name, "cpu" | "memory" | "ephemeral-storage")
            || name.starts_with("hugepages-");
        if !standard {
            e.invalid(path, &quote(name), "must be a standard resource for containers");
        }
    } else if !native_resource(name) && !extended_resource(name) {
        e.invalid(path, &quote(name), "doesn't follow extended resource name standard");
    }
}

/// `ValidateResourceQuantityValue`: not negative; whole for extended resources.
pub(crate) fn resource_quantity(name: &str, q: &Value, path: &str, e: &mut Errors) {
    let (Some(value), Some(raw)) = (quantity_of(q), quantity_text(q)) else { return };
    if value < 0 {
        e.invalid(path, &quote(&raw), NEGATIVE);
    }
    if extended_resource(name) && value % 1_000_000_000 != 0 {
        e.invalid(path, &raw, "must be an integer");
    }
}

/// A resource quantity as text, as it was sent (kube-apiserver prints it canonicalized).
pub(crate) fn quantity_text(q: &Value) -> Option<String> {
    match q {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn quantity_of(q: &Value) -> Option<i128> {
    parse_quantity(&quantity_text(q)?)
}

/// A resource quantity as `resource.ParseQuantity` reads it, in nano-units (rounded up, and
/// saturating far beyond anything a cluster counts); `None` if it does not parse.
pub use carrel_machinery::quantity::parse_nanos as parse_quantity;
