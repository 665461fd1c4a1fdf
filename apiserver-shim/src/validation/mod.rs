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

use serde_json::Value;

use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};

pub use errors::Errors;
pub(crate) use errors::NEGATIVE;
pub(crate) use format::{compact, go_label_selector, go_string_map, go_strings, shown};
pub(crate) use int_or_percent::{
    at_most_100_percent, int_or_percent, int_or_percent_value, int_or_string,
};
pub(crate) use meta::{annotations, labels, object_meta, object_meta_update, STANDARD_FINALIZERS};
pub(crate) use pod::{
    always_restarts, ephemeral_containers_update, no_ephemeral_containers, pod_spec, pod_template,
    protocol, POD_UPDATE_FORBIDDEN, PORT_RANGE,
};
pub(crate) use read::same;
pub use resources::parse_quantity;
pub(crate) use resources::{
    container_resource_name, container_resources, pod_quantities, QUANTITY_FORMAT,
};
pub(crate) use selector::{
    immutable_selector, label_selector, required_selector, same_selector, template_labels,
    template_matches, Selector,
};

thread_local! {
    /// Whether the write being validated on this thread is the server's own.
    static SERVER_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `check` as the validation of a write the server makes of its own record (its bootstrap
/// objects): [`server_write`] is true within it. Validation is synchronous, so the scope is the
/// thread's for the duration of the call.
pub(crate) fn as_server<T>(check: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SERVER_WRITE.with(|w| w.set(self.0));
        }
    }
    let _reset = Reset(SERVER_WRITE.with(|w| w.replace(true)));
    check()
}

/// Whether the write being validated is the server's own ([`as_server`]). Only the rules that
/// guard against what a *user* may point at relax for it: the cluster's `kubernetes` endpoints
/// name the address the API server itself answers on, a loopback one where it listens only
/// there.
pub(crate) fn server_write() -> bool {
    SERVER_WRITE.with(std::cell::Cell::get)
}

/// The checks kube-apiserver makes on create and update, on the object decoded once into its
/// kind's typed form: 400 when it does not decode (a value of the wrong type, a quantity that
/// does not parse), else a 422 Invalid listing every cause. `old` is the stored object of an
/// update, with its defaults.
pub fn validate(rt: &ResourceType, object: &Value, old: Option<&Value>) -> ApiResult<()> {
    let found = rt.strategy.check(rt, object, old)?;
    if found.is_empty() {
        return Ok(());
    }
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    Err(ApiError::invalid(rt.group, rt.kind, name, found))
}

/// Every validation cause of an object's metadata, as every kind's (a custom resource's rest is
/// its schema's): 400 when the metadata does not decode.
pub fn meta_causes(rt: &ResourceType, object: &Value) -> ApiResult<Vec<Cause>> {
    let meta = match object.get("metadata") {
        Some(meta) => crate::registry::form::decode(meta)
            .map_err(|e| crate::registry::form::not_decodable(rt, format_args!("metadata.{e}")))?,
        None => Default::default(),
    };
    let mut e = Errors::default();
    object_meta(rt, &meta, &mut e);
    Ok(e.0)
}
