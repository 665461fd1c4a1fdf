//! Resource requirements and quantities.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::object::go_quote as quote;
use crate::object_names as names;
use crate::validation::{Errors, NEGATIVE};

/// `resource.ParseQuantity`'s error, which kube-apiserver answers while decoding (400).
pub(crate) const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// `ValidateContainerResourceRequirements`: resource names, quantities, requests within limits.
pub(crate) fn container_resources(
    resources: Option<&ResourceRequirements>,
    path: &str,
    e: &mut Errors,
) {
    let limits = resources.and_then(|r| r.limits.as_ref());
    let requests = resources.and_then(|r| r.requests.as_ref());
    for (name, q) in limits.into_iter().flatten() {
        let qpath = format!("{path}.limits[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
    }
    for (name, q) in requests.into_iter().flatten() {
        let qpath = format!("{path}.requests[{name}]");
        container_resource_name(name, &qpath, e);
        resource_quantity(name, q, &qpath, e);
        let Some(request) = parse_quantity(&q.0) else { continue };
        match limits.and_then(|l| l.get(name)) {
            Some(limit_quantity) => {
                let Some(limit) = parse_quantity(&limit_quantity.0) else { continue };
                let limit_raw = &limit_quantity.0;
                if request != limit && !overcommit_allowed(name) {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&q.0),
                        &format!("must be equal to {name} limit of {limit_raw}"),
                    );
                } else if request > limit {
                    e.invalid(
                        &format!("{path}.requests"),
                        &quote(&q.0),
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

/// The resource quantities of a pod spec's containers and init containers (their limits and
/// requests), which must parse for the object to decode.
pub(crate) fn pod_quantities<'a>(spec: Option<&'a PodSpec>, found: &mut Vec<&'a Quantity>) {
    let Some(spec) = spec else { return };
    let init = spec.init_containers.iter().flatten();
    for resources in spec.containers.iter().chain(init).filter_map(|c| c.resources.as_ref()) {
        found.extend(resources.limits.iter().flat_map(BTreeMap::values));
        found.extend(resources.requests.iter().flat_map(BTreeMap::values));
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
pub(crate) fn resource_quantity(name: &str, q: &Quantity, path: &str, e: &mut Errors) {
    let Some(value) = parse_quantity(&q.0) else { return };
    if value < 0 {
        e.invalid(path, &quote(&q.0), NEGATIVE);
    }
    if extended_resource(name) && value % 1_000_000_000 != 0 {
        e.invalid(path, &q.0, "must be an integer");
    }
}

/// A resource quantity as `resource.ParseQuantity` reads it, in nano-units (rounded up, and
/// saturating far beyond anything a cluster counts); `None` if it does not parse.
pub use carrel_machinery::quantity::parse_nanos as parse_quantity;
