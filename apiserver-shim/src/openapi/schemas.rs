//! The schemas of the documents: each served kind's and list's schema, from [`k8s_openapi`]'s
//! types through [`schemars`] (or from a custom resource's definition), with Kubernetes' names and
//! the `x-kubernetes-group-version-kind` extension.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1 as apps, autoscaling::v1 as autoscaling, batch::v1 as batch,
    coordination::v1 as coordination, core::v1 as core, events::v1 as events,
    networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac,
    scheduling::v1 as scheduling, storage::v1 as storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
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

/// A kind's Rust type, through what a document needs from it: its schema names, and a way to add
/// its schemas (and its list's) to a generator.
struct Kind {
    names: fn() -> KindNames,
    add: fn(&mut SchemaGenerator) -> Value,
    decode: fn(&Value) -> Result<(), DecodeError>,
}

/// Why an object does not decode as its kind's type, as kube-apiserver's decoder words it: the
/// field's path (when the problem is below the object's root), then serde's complaint.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The object itself is not of the kind's shape.
    #[error(transparent)]
    Object(serde_json::Error),
    /// A field holds a value not of its type (`spec.replicas: invalid type: …`).
    #[error("{path}: {source}")]
    Field {
        /// The field, dotted (`spec.replicas`).
        path: String,
        /// serde's complaint.
        source: serde_json::Error,
    },
}

fn kind_of<T>() -> Kind
where
    T: JsonSchema + ListableResource + serde::de::DeserializeOwned,
{
    Kind {
        decode: |value| {
            serde_path_to_error::deserialize::<_, T>(value).map(drop).map_err(|e| {
                let path = e.path().to_string();
                let source = e.into_inner();
                match path.as_str() {
                    "." => DecodeError::Object(source),
                    _ => DecodeError::Field { path, source },
                }
            })
        },
        names: || {
            let kind = T::schema_name().into_owned();
            KindNames { list: format!("{kind}List"), kind }
        },
        add: |generator| {
            generator.subschema_for::<T>();
            list_schema::<T>(generator)
        },
    }
}

/// The Rust type of a served kind; `None` for a kind k8s-openapi does not know.
fn kind(group: &str, version: &str, kind: &str) -> Option<Kind> {
    Some(match (group, version, kind) {
        ("", "v1", "Namespace") => kind_of::<core::Namespace>(),
        ("", "v1", "Pod") => kind_of::<core::Pod>(),
        ("", "v1", "Service") => kind_of::<core::Service>(),
        ("", "v1", "Endpoints") => kind_of::<core::Endpoints>(),
        ("", "v1", "ConfigMap") => kind_of::<core::ConfigMap>(),
        ("", "v1", "Secret") => kind_of::<core::Secret>(),
        ("", "v1", "ServiceAccount") => kind_of::<core::ServiceAccount>(),
        ("", "v1", "Event") => kind_of::<core::Event>(),
        ("", "v1", "Node") => kind_of::<core::Node>(),
        ("", "v1", "PersistentVolumeClaim") => kind_of::<core::PersistentVolumeClaim>(),
        ("", "v1", "PersistentVolume") => kind_of::<core::PersistentVolume>(),
        ("", "v1", "ResourceQuota") => kind_of::<core::ResourceQuota>(),
        ("", "v1", "LimitRange") => kind_of::<core::LimitRange>(),
        ("", "v1", "ReplicationController") => kind_of::<core::ReplicationController>(),
        ("apps", "v1", "Deployment") => kind_of::<apps::Deployment>(),
        ("apps", "v1", "ReplicaSet") => kind_of::<apps::ReplicaSet>(),
        ("apps", "v1", "StatefulSet") => kind_of::<apps::StatefulSet>(),
        ("apps", "v1", "DaemonSet") => kind_of::<apps::DaemonSet>(),
        ("batch", "v1", "Job") => kind_of::<batch::Job>(),
        ("batch", "v1", "CronJob") => kind_of::<batch::CronJob>(),
        ("coordination.k8s.io", "v1", "Lease") => kind_of::<coordination::Lease>(),
        ("events.k8s.io", "v1", "Event") => kind_of::<events::Event>(),
        ("rbac.authorization.k8s.io", "v1", "Role") => kind_of::<rbac::Role>(),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => kind_of::<rbac::RoleBinding>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => kind_of::<rbac::ClusterRole>(),
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            kind_of::<rbac::ClusterRoleBinding>()
        }
        ("networking.k8s.io", "v1", "NetworkPolicy") => kind_of::<networking::NetworkPolicy>(),
        ("networking.k8s.io", "v1", "Ingress") => kind_of::<networking::Ingress>(),
        ("policy", "v1", "PodDisruptionBudget") => kind_of::<policy::PodDisruptionBudget>(),
        ("scheduling.k8s.io", "v1", "PriorityClass") => kind_of::<scheduling::PriorityClass>(),
        ("storage.k8s.io", "v1", "StorageClass") => kind_of::<storage::StorageClass>(),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            kind_of::<apiextensions::CustomResourceDefinition>()
        }
        ("carrel.dev", "v1alpha1", "Tenant") => kind_of::<crate::tenant::types::Tenant>(),
        _ => return None,
    })
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
        None => kind_names(rt.group, rt.version, rt.kind),
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

/// The schema names of a served kind, or `None` when k8s-openapi does not know it.
pub fn kind_names(group: &str, version: &str, kind_name: &str) -> Option<KindNames> {
    kind(group, version, kind_name).map(|k| (k.names)())
}

/// Whether `object` decodes as its kind's type: every field of the type that the object sets
/// holds a value of the field's type (a number where Kubernetes has an int32, …). The error
/// names the field, as kube-apiserver's decoder does. Kinds without a type pass.
pub fn check_types(
    group: &str,
    version: &str,
    kind_name: &str,
    object: &Value,
) -> Result<(), DecodeError> {
    match kind(group, version, kind_name) {
        Some(k) => (k.decode)(object),
        None => Ok(()),
    }
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
fn list_schema<T: JsonSchema + ListableResource>(generator: &mut SchemaGenerator) -> Value {
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
        let Some(k) = kind(rt.group, rt.version, rt.kind) else { continue };
        lists.push(((k.names)().list, (k.add)(&mut generator)));
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
        if let Some(names) = kind_names(rt.group, rt.version, rt.kind) {
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
