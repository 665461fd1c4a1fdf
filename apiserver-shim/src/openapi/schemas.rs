//! The schemas of the documents: each served kind's and list's schema, from [`k8s_openapi`]'s
//! types through [`schemars`] (or from a custom resource's definition), with Kubernetes' names and
//! the `x-kubernetes-group-version-kind` extension.

use std::collections::BTreeMap;

use k8s_openapi::api::{autoscaling::v1 as autoscaling, core::v1 as core};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::ListableResource;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::resource::{Registry, ResourceType, Subresource};

use super::{annotations, SCHEMA_REF_PREFIX};

/// The schema names of a kind and of its list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindNames {
    /// The kind's schema (`io.k8s.api.core.v1.Pod`).
    pub kind: String,
    /// Its list's schema (`io.k8s.api.core.v1.PodList`).
    pub list: String,
}

/// The schema names of a custom resource's kind, as kube-apiserver names them: the group
/// reversed, the version, the kind (`com.example.stable.v1.CronTab`).
fn custom_names(rt: &ResourceType) -> KindNames {
    let group: Vec<&str> = rt.group.split('.').rev().collect();
    let kind = format!("{}.{}.{}", group.join("."), rt.version, rt.kind);
    let list = match &rt.custom {
        Some(custom) => format!("{}.{}.{}", group.join("."), rt.version, custom.list_kind),
        None => format!("{kind}List"),
    };
    KindNames { kind, list }
}

/// The schema names of any served type: built-in or custom.
pub(super) fn names_of(rt: &ResourceType) -> Option<KindNames> {
    match rt.custom {
        Some(_) => Some(custom_names(rt)),
        None => kind_names(rt),
    }
}

/// A custom resource's schema as published: its definition's, with the fields every object has
/// and the group-version-kind marker.
fn custom_schema(rt: &ResourceType, custom: &crate::crd::Custom) -> Value {
    let mut schema = match custom.openapi.as_ref() {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let properties = schema.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(properties) = properties {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. In CamelCase."}),
        );
        properties.insert(
            "metadata".into(),
            described_ref(&meta::ObjectMeta::schema_name(), "Standard object's metadata."),
        );
    }
    schema.insert("type".into(), json!("object"));
    schema.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([gvk(rt.group, rt.version, rt.kind)]),
    );
    if !custom.selectable_fields.is_empty() {
        let fields: Vec<Value> =
            custom.selectable_fields.iter().map(|f| json!({"fieldPath": f})).collect();
        schema.insert("x-kubernetes-selectable-fields".into(), Value::Array(fields));
    }
    Value::Object(schema)
}

/// A custom resource's list schema.
fn custom_list_schema(rt: &ResourceType, names: &KindNames, list_kind: &str) -> Value {
    json!({
        "description": format!("{list_kind} is a list of {}", rt.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": schema_ref(&names.kind)},
            "metadata": described_ref(&meta::ListMeta::schema_name(), "Standard list metadata."),
        },
        "x-kubernetes-group-version-kind": [gvk(rt.group, rt.version, list_kind)],
    })
}

/// The schema names of a built-in kind, from its typed form; `None` for a kind without one.
pub fn kind_names(rt: &ResourceType) -> Option<KindNames> {
    rt.strategy.schema_names()
}

/// `{group, version, kind}`, as the `x-kubernetes-group-version-kind` extension spells it.
pub(super) fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

pub(super) fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{SCHEMA_REF_PREFIX}{name}") })
}

/// A `$ref` with a description beside it, in OpenAPI 3.0's form (a `$ref` takes no siblings).
fn described_ref(name: &str, description: &str) -> Value {
    json!({"allOf": [schema_ref(name)], "description": description})
}

/// The schema of `T`'s list type; k8s-openapi's generic `List<T>` has none.
pub(crate) fn list_schema<T: JsonSchema + ListableResource>(
    generator: &mut SchemaGenerator,
) -> Value {
    generator.subschema_for::<meta::ListMeta>();
    let schema = T::schema_name();
    let kind = T::KIND;
    json!({
        "description": format!("{} is a list of {kind} objects.", T::LIST_KIND),
        "type": "object",
        "properties": {
            "apiVersion": {
                "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values.",
                "type": "string",
            },
            "items": {
                "description": format!("The {kind} objects in the list."),
                "type": "array",
                "items": schema_ref(&schema),
            },
            "kind": {
                "description": "Kind is a string value representing the REST resource this object represents. In CamelCase.",
                "type": "string",
            },
            "metadata": described_ref(
                &meta::ListMeta::schema_name(),
                "Standard list metadata: the list's resourceVersion and continue token.",
            ),
        },
        "required": ["items"],
    })
}

/// Every schema reachable from one group-version's paths, with kube-apiserver's extensions.
pub fn schemas_for(registry: &Registry, group: &str, version: &str) -> Map<String, Value> {
    let settings = SchemaSettings::openapi3().with(|s| s.meta_schema = None);
    let mut generator = SchemaGenerator::new(settings);
    let mut lists = Vec::new();
    let mut scale = false;
    let mut customs = Vec::new();
    for rt in registry.in_group_version(group, version) {
        scale |= rt.has(Subresource::Scale);
        if let Some(custom) = &rt.custom {
            let names = custom_names(rt);
            customs.push((names.kind.clone(), custom_schema(rt, custom)));
            customs.push((names.list.clone(), custom_list_schema(rt, &names, custom.list_kind)));
            continue;
        }
        let (Some(names), Some(list)) =
            (rt.strategy.schema_names(), rt.strategy.add_schemas(&mut generator))
        else {
            continue;
        };
        lists.push((names.list, list));
    }
    if !customs.is_empty() {
        generator.subschema_for::<meta::ObjectMeta>();
        generator.subschema_for::<meta::ListMeta>();
    }
    // What every group-version's operations use besides its kinds.
    generator.subschema_for::<meta::APIResourceList>();
    generator.subschema_for::<meta::DeleteOptions>();
    generator.subschema_for::<meta::Patch>();
    generator.subschema_for::<meta::Status>();
    // A watch event's schema does not depend on the object type it carries.
    generator.subschema_for::<meta::WatchEvent<core::Pod>>();
    if scale {
        generator.subschema_for::<autoscaling::Scale>();
    }
    let mut schemas = generator.take_definitions(true);
    schemas.extend(lists);

    // A kind is marked in every document it appears in, as kube-apiserver marks it (apps/v1's
    // document holds core/v1's PersistentVolumeClaim, through StatefulSet's claim templates).
    for (name, gvks) in group_version_kinds(registry) {
        let Some(Value::Object(schema)) = schemas.get_mut(&name) else { continue };
        // kube-apiserver requires no top-level field of a kind; k8s-openapi marks `metadata`
        // required only because its Rust field is not optional.
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|r| r != "metadata");
            if required.is_empty() {
                schema.remove("required");
            }
        }
        schema.insert("x-kubernetes-group-version-kind".into(), gvks);
    }
    annotations::apply(&mut schemas);
    // Custom schemas are published as their definitions give them.
    schemas.extend(customs);
    schemas
}

/// The `x-kubernetes-group-version-kind` of every schema that is a served kind, keyed by schema
/// name: the kinds and their lists, `Scale`, `Status`, and the options and events that every
/// served group-version registers, as kube-apiserver's do.
fn group_version_kinds(registry: &Registry) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for rt in registry.all() {
        if let Some(names) = kind_names(rt) {
            let list_kind = format!("{}List", rt.kind);
            all.insert(names.kind, json!([gvk(rt.group, rt.version, rt.kind)]));
            all.insert(names.list, json!([gvk(rt.group, rt.version, &list_kind)]));
        }
    }
    let every_version = |kind: &str| -> Value {
        let mut gvks = vec![gvk("", "v1", kind)];
        for (g, versions) in registry.groups() {
            gvks.extend(versions.iter().filter(|_| !g.is_empty()).map(|v| gvk(g, v, kind)));
        }
        Value::Array(gvks)
    };
    all.insert(meta::DeleteOptions::schema_name().into(), every_version("DeleteOptions"));
    all.insert(meta::WatchEvent::<core::Pod>::schema_name().into(), every_version("WatchEvent"));
    all.insert(meta::Status::schema_name().into(), json!([gvk("", "v1", "Status")]));
    all.insert(
        autoscaling::Scale::schema_name().into(),
        json!([gvk("autoscaling", "v1", "Scale")]),
    );
    all
}
