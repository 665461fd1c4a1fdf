//! `gen-annotations`: the list, map and patch annotations of Kubernetes' fields
//! (`x-kubernetes-list-type`, `-list-map-keys`, `-patch-strategy`, `-patch-merge-key`,
//! `-map-type`), which k8s-openapi's schemas lack and the API server's OpenAPI documents,
//! strategic merge patch and server-side apply need.
//!
//! The facts are the Go comment tags of the Kubernetes types (`+listType=map`, `+listMapKey=name`,
//! `+patchStrategy=merge`, `+patchMergeKey=name`, `+mapType=atomic`, `+structType=atomic`), which
//! k8s-pb keeps in its doc comments. Each is written for the OpenAPI schema (from k8s-openapi,
//! for the kinds of `gen-protobuf`) and JSON property its message and field stand for; a field
//! of a struct Go embeds inline (`EphemeralContainer` embeds `EphemeralContainerCommon`) is
//! written for the embedding schema. Tags on fields the schemas do not have (newer than the
//! Kubernetes version of k8s-openapi) are left out, and so is `+patchStrategy=replace`, which
//! the server has no variant for.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{anyhow, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use schemars::SchemaGenerator;

use crate::output::{self, Mode};
use crate::protobuf::{self, Key, PbMessage, Props, Ty};

/// Where the table goes, relative to the workspace root.
const OUTPUT: &str = "apiserver-shim/src/openapi/annotation_table.rs";

/// One entry: schema, property (`""`: the schema itself) and the annotations as Rust source.
type Entry = (String, String, String);

/// Run the generator.
pub fn generate(mode: Mode) -> Result<()> {
    let metadata = protobuf::cargo_metadata()?;
    let root_dir = PathBuf::from(
        metadata["workspace_root"].as_str().ok_or_else(|| anyhow!("no workspace_root"))?,
    );
    let (pb_version, pb_manifest) = protobuf::package(&metadata, "k8s-pb")?;
    let (openapi_version, _) = protobuf::package(&metadata, "k8s-openapi")?;
    let pb_src = pb_manifest.parent().ok_or_else(|| anyhow!("k8s-pb manifest path"))?.join("src");
    let messages = protobuf::parse_k8s_pb(&pb_src)?;

    let mut generator = SchemaGenerator::default();
    protobuf::kinds(&mut generator);
    // Schemas the server publishes beyond the kinds the protobuf decoder takes.
    generator.subschema_for::<CustomResourceDefinition>();
    generator.subschema_for::<APIService>();
    generator.subschema_for::<meta::APIResourceList>();
    generator.subschema_for::<meta::Status>();
    let definitions = generator.definitions().clone();

    let mut entries: Vec<Entry> = Vec::new();
    for (schema, definition) in &definitions {
        // k8s-pb's modules are `apiextensions_apiserver` and `kube_aggregator` where the schema
        // names have a dash.
        let pb_name = schema
            .replace("apiextensions-apiserver", "apiextensions_apiserver")
            .replace("kube-aggregator", "kube_aggregator");
        let Some(key) = protobuf::key_of_schema_name(&pb_name, &messages) else { continue };
        let props = Props::of(definition);
        let message = &messages[&key];
        if let Some(a) = annotations(&message.markers) {
            entries.push((schema.clone(), String::new(), a));
        }
        fields_of(&key, &messages, &props, schema, &mut entries, 0);
    }
    entries.sort();
    entries.dedup();

    let mut out = output::header("gen-annotations");
    writeln!(
        out,
        "//! The list, map and patch annotations of Kubernetes' fields, from the Go comment tags \
         k8s-pb {pb_version} keeps, for the schemas of k8s-openapi {openapi_version}: see \
         xtask/src/annotations.rs. {} entries.",
        entries.len()
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "use super::annotations::{{ListAnnotations, ListType, MapType, PatchStrategy}};"
    )?;
    writeln!(out)?;
    writeln!(out, "/// Every annotated field: (schema, property, annotations); the property `\"\"` names the schema itself.")?;
    writeln!(out, "#[rustfmt::skip]")?;
    writeln!(out, "pub(super) static GENERATED: &[(&str, &str, ListAnnotations)] = &[")?;
    for (schema, property, a) in &entries {
        writeln!(out, "    ({schema:?}, {property:?}, {a}),")?;
    }
    writeln!(out, "];")?;
    output::emit(&root_dir, OUTPUT, &out, mode)?;
    eprintln!("{OUTPUT}: {} entries", entries.len());
    Ok(())
}

/// The entries of the fields of message `key`, named by `props`, the properties of `schema`.
fn fields_of(
    key: &Key,
    messages: &BTreeMap<Key, PbMessage>,
    props: &Props,
    schema: &str,
    entries: &mut Vec<Entry>,
    depth: usize,
) {
    let Some(message) = messages.get(key) else { return };
    for field in &message.fields {
        let camel = protobuf::lower_camel(&field.rust_name);
        // `x_kubernetes_list_type` is `x-kubernetes-list-type`.
        let dashed =
            || props.names.iter().find(|p| p.replace('-', "").eq_ignore_ascii_case(&camel));
        match props.find(&camel).or_else(|| dashed().map(String::as_str)) {
            Some(property) => {
                if let Some(a) = annotations(&field.markers) {
                    entries.push((schema.to_owned(), property.to_owned(), a));
                }
            }
            // A field with no property is a struct embedded inline: its fields are the schema's.
            None => {
                if let (Ty::Message(inner), true) = (&field.ty, depth < 4) {
                    fields_of(inner, messages, props, schema, entries, depth + 1);
                }
            }
        }
    }
}

/// The `ListAnnotations` expression of a set of comment tags; `None` when none applies.
fn annotations(markers: &[(String, String)]) -> Option<String> {
    let mut list_type = "None".to_owned();
    let mut keys: Vec<String> = Vec::new();
    let mut merge_key = "None".to_owned();
    let mut strategy = "None".to_owned();
    let mut map_type = "None".to_owned();
    for (name, value) in markers {
        match (name.as_str(), value.as_str()) {
            ("listType", "atomic") => list_type = "Some(ListType::Atomic)".into(),
            ("listType", "set") => list_type = "Some(ListType::Set)".into(),
            ("listType", "map") => list_type = "Some(ListType::Map)".into(),
            ("listMapKey", key) => keys.push(format!("{key:?}")),
            ("patchMergeKey", key) => merge_key = format!("Some({key:?})"),
            ("patchStrategy", "merge") => strategy = "Some(PatchStrategy::Merge)".into(),
            ("patchStrategy", "retainKeys") => strategy = "Some(PatchStrategy::RetainKeys)".into(),
            ("patchStrategy", "merge,retainKeys" | "retainKeys,merge") => {
                strategy = "Some(PatchStrategy::MergeRetainKeys)".into();
            }
            ("mapType" | "structType", "atomic") => map_type = "Some(MapType::Atomic)".into(),
            ("mapType" | "structType", "granular") => map_type = "Some(MapType::Granular)".into(),
            _ => {}
        }
    }
    if [&list_type, &merge_key, &strategy, &map_type].iter().all(|v| *v == "None")
        && keys.is_empty()
    {
        return None;
    }
    Some(format!(
        "ListAnnotations {{ list_type: {list_type}, list_map_keys: &[{}], patch_merge_key: {merge_key}, patch_strategy: {strategy}, map_type: {map_type} }}",
        keys.join(", ")
    ))
}
