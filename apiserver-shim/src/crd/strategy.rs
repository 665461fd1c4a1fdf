//! The strategy of custom resources: what their definition's version says (schema, printer
//! columns, scale paths), read from the type's [`crate::crd::Custom`] part.

use serde_json::{Map, Value};

use crate::api::Api;
use crate::registry::Strategy;
use crate::resource::{ResourceType, Subresource};
use crate::selector::FieldLabels;
use crate::status::ApiResult;

/// Every custom resource's strategy.
#[derive(Debug)]
pub struct CustomResources;

impl crate::registry::form::Validate for CustomResources {
    type Object = crate::registry::form::Untyped;
}

impl Strategy for CustomResources {
    /// `metadata.name` and `metadata.namespace`, the latter read from the object whatever the
    /// scope (a cluster-scoped custom resource is stored without one, so it reads `""`).
    fn field_labels(&self, rt: &ResourceType) -> FieldLabels {
        let fields = rt.custom.as_ref().map_or(&[][..], |c| c.selectable_fields);
        FieldLabels::Custom { cluster_scoped: !rt.namespaced, fields }
    }

    /// Once their definition is terminating, a write may be what lets it go.
    fn after_write(&self, api: &Api, rt: &ResourceType, _aggregate: bool) -> ApiResult<()> {
        if let Some(custom) = rt.custom.as_ref().filter(|c| c.terminating) {
            api.finish_definition(&custom.definition)?;
        }
        Ok(())
    }

    /// Custom resources always keep a generation.
    fn has_generation(&self, _rt: &ResourceType) -> bool {
        true
    }

    /// A change of the spec, and for a custom resource without a status subresource, of
    /// anything but its metadata.
    fn bumps_generation(&self, rt: &ResourceType, old: &Value, new: &Value) -> bool {
        if !rt.has(Subresource::Status) {
            let content = |o: &Value| {
                o.as_object().map(|m| {
                    m.iter()
                        .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind"))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect::<Map<String, Value>>()
                })
            };
            return content(old) != content(new);
        }
        crate::object::spec_part(old) != crate::object::spec_part(new)
    }

    /// The name, then the definition's printer columns.
    fn columns(&self, rt: &ResourceType) -> Vec<Value> {
        let Some(custom) = &rt.custom else { return Vec::new() };
        let name = crate::table::NAME;
        std::iter::once(crate::table::definition(
            name.name,
            name.kind,
            name.format,
            name.description,
            name.priority.into(),
        ))
        .chain(custom.columns.iter().map(|c| {
            crate::table::definition(&c.name, &c.type_, &c.format, &c.description, c.priority)
        }))
        .collect()
    }

    fn cells(&self, rt: &ResourceType, object: &Value) -> Vec<Value> {
        match &rt.custom {
            Some(custom) => crate::crd::cells(&custom.columns, object),
            None => Vec::new(),
        }
    }
}
