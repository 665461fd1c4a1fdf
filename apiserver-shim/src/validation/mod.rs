//! kube-apiserver 1.33's validation of what users most often get wrong, in its words: object
//! metadata for every kind, the common per-kind spec checks, and the fields an update may not
//! change. Every cause of one object is reported together, each with kube-apiserver's field path,
//! reason (`FieldValueInvalid`, `FieldValueRequired`, …) and message (`Invalid value: "x": …`).
//!
//! Bad values are printed as kube-apiserver prints them: strings quoted as Go's `%q`, numbers
//! bare, label maps and selectors as Go's `%#v`. Other structured values (a whole pod template, a
//! list of owner references) are printed as compact JSON, where kube-apiserver prints Go structs.
//!
//! The checks of one kind are its strategy's ([`crate::registry`]); this folder holds the entry
//! points and what is shared between kinds.

mod errors;
mod format;
mod int_or_percent;
mod meta;
mod pod;
mod read;
mod resources;
mod selector;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use serde_json::Value;

use crate::object::go_quote as quote;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

pub use errors::Errors;
pub(crate) use errors::NEGATIVE;
pub(crate) use format::{go_label_selector, go_string_map, go_strings, shown};
pub(crate) use int_or_percent::{
    at_most_100_percent, int_or_percent, int_or_percent_value, int_or_string,
};
pub(crate) use meta::{annotations, labels, object_meta, STANDARD_FINALIZERS};
pub(crate) use pod::{always_restarts, pod_spec, pod_template, protocol, PORT_RANGE};
pub use read::semantic_eq;
pub(crate) use read::{at, changed, field, items, map_of, object_keys, text};
pub use resources::parse_quantity;
pub(crate) use resources::{container_resources, quantity_of, quantity_text, QUANTITY_FORMAT};
pub(crate) use selector::{
    immutable_selector, label_selector, required_selector, template_matches, Selector,
};

/// The checks kube-apiserver makes on create and update: a 400 for a quantity that does not
/// parse (kube-apiserver refuses it while decoding), else a 422 Invalid listing every cause.
pub fn validate(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    check_quantities(rt, object)?;
    let found = causes(rt, object);
    if found.is_empty() {
        return Ok(());
    }
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid(rt.group, rt.kind, name, found))
}

/// Every validation cause of an object, as kube-apiserver's `Validate<Kind>` finds them.
pub fn causes(rt: &ResourceType, object: &Value) -> Vec<Cause> {
    let mut e = Errors::default();
    object_meta(rt, object, &mut e);
    rt.strategy.validate(object, &mut e);
    e.0
}

/// A 400 BadRequest for the first resource quantity that does not parse, worded as
/// kube-apiserver's decoding error.
pub fn check_quantities(rt: &ResourceType, object: &Value) -> ApiResult<()> {
    let mut lists: Vec<&Value> = Vec::new();
    if let Some(spec) = rt.strategy.pod_spec(object) {
        for list in ["containers", "initContainers"] {
            for c in items(spec, list) {
                lists.push(at(at(c, "resources"), "limits"));
                lists.push(at(at(c, "resources"), "requests"));
            }
        }
    }
    rt.strategy.quantities(object, &mut lists);
    let bad = lists
        .iter()
        .filter_map(|list| list.as_object())
        .flat_map(|map| map.values())
        .any(|q| quantity_of(q).is_none());
    if bad {
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {QUANTITY_FORMAT}",
            kind = rt.kind,
            version = rt.version,
        )));
    }
    Ok(())
}

/// The causes an update adds to validation: fields it may not change, in kube-apiserver's words.
/// `old` and `new` both carry their defaults.
pub fn update_causes(rt: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    let mut e = Errors::default();
    // `ValidateObjectMetaUpdate`: no new finalizers once the object is being deleted.
    let (old_meta, new_meta) = (at(old, "metadata"), at(new, "metadata"));
    if field(old_meta, "deletionTimestamp").is_some() {
        let before: BTreeSet<&str> =
            items(old_meta, "finalizers").iter().filter_map(Value::as_str).collect();
        let extra: BTreeSet<&str> = items(new_meta, "finalizers")
            .iter()
            .filter_map(Value::as_str)
            .filter(|f| !before.contains(f))
            .collect();
        if !extra.is_empty() {
            let list = extra.iter().map(|f| quote(f)).collect::<Vec<_>>().join(", ");
            e.forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new \
                     finalizers []string{{{list}}}"
                ),
            );
        }
    }
    rt.strategy.validate_update(old, new, &mut e);
    e.0
}
