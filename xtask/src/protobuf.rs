//! `gen-protobuf`: the protobuf schema table of the API server's request decoder.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::Value;

use crate::output::{self, Mode};

/// Where the table goes, relative to the workspace root.
const OUTPUT: &str = "apiserver-shim/src/protobuf/schema.rs";

/// The kinds the decoder accepts, as `k8s_openapi::api` paths: every kind of the group-versions
/// the server serves, and the reviews, token requests and scales clients post.
macro_rules! kinds {
    ($($group:ident :: $version:ident :: { $($kind:ident),* $(,)? })*) => {
        pub(crate) fn kinds(generator: &mut SchemaGenerator) -> Vec<Root> {
            vec![$($(root::<api::$group::$version::$kind>(generator),)*)*]
        }
    };
}

kinds! {
    core::v1::{
        Binding, ComponentStatus, ConfigMap, Endpoints, Event, LimitRange, Namespace, Node,
        PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController,
        ResourceQuota, Secret, Service, ServiceAccount,
    }
    apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet}
    batch::v1::{CronJob, Job}
    coordination::v1::{Lease}
    discovery::v1::{EndpointSlice}
    events::v1::{Event}
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding}
    networking::v1::{IPAddress, Ingress, IngressClass, NetworkPolicy, ServiceCIDR}
    policy::v1::{Eviction, PodDisruptionBudget}
    scheduling::v1::{PriorityClass}
    storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment}
    authorization::v1::{
        LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview,
        SubjectAccessReview,
    }
    authentication::v1::{SelfSubjectReview, TokenRequest, TokenReview}
    autoscaling::v1::{HorizontalPodAutoscaler, Scale}
    autoscaling::v2::{HorizontalPodAutoscaler}
    admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        ValidatingWebhookConfiguration,
    }
}

/// `DeleteOptions` is registered in every group-version: client-go sends it as the body of a
/// typed delete, with the group-version of the client.
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";

/// Messages Kubernetes encodes in JSON as something other than an object, by proto name.
const WELL_KNOWN: &[(&str, &str)] = &[
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Time", "Time"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime", "MicroTime"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.Duration", "Duration"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1", "EmbeddedJson"),
    ("k8s.io.apimachinery.pkg.runtime.RawExtension", "EmbeddedJson"),
    ("k8s.io.apimachinery.pkg.util.intstr.IntOrString", "IntOrString"),
    ("k8s.io.apimachinery.pkg.api.resource.Quantity", "Quantity"),
];

/// A kind: its `apiVersion`, `kind` and OpenAPI schema name (`io.k8s.api.core.v1.ConfigMap`).
pub(crate) struct Root {
    api_version: &'static str,
    kind: &'static str,
    schema_name: String,
}

fn root<T: k8s_openapi::Resource + JsonSchema>(generator: &mut SchemaGenerator) -> Root {
    // Adds T and everything it references to the generator's definitions.
    generator.subschema_for::<T>();
    Root { api_version: T::API_VERSION, kind: T::KIND, schema_name: T::schema_name().into_owned() }
}

/// What the generator knows of a reachable message.
struct Info {
    /// Its proto name, cased as in OpenAPI (`k8s.io.api.core.v1.SELinuxOptions`).
    name: String,
    /// The `Shape` variant.
    shape: &'static str,
    /// The JSON properties its fields are named by.
    props: Option<Props>,
    /// Whether `props` come from its own OpenAPI definition (not from a struct embedding it).
    has_definition: bool,
}

/// The properties of an OpenAPI definition.
#[derive(Clone, Debug, Default)]
pub(crate) struct Props {
    pub(crate) names: Vec<String>,
    required: Vec<String>,
}

impl Props {
    pub(crate) fn of(definition: &Value) -> Props {
        let strings = |v: Option<&Value>| -> Vec<String> {
            match v {
                Some(Value::Object(map)) => map.keys().cloned().collect(),
                Some(Value::Array(list)) => {
                    list.iter().filter_map(Value::as_str).map(str::to_owned).collect()
                }
                _ => Vec::new(),
            }
        };
        Props {
            names: strings(definition.get("properties")),
            required: strings(definition.get("required")),
        }
    }

    /// The property a lowerCamelCased field name stands for: the same, or the same ignoring case
    /// and underscores (`podIp` is `podIP`).
    pub(crate) fn find(&self, camel: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|p| *p == camel)
            .or_else(|| self.names.iter().find(|p| loose(p) == loose(camel)))
            .map(String::as_str)
    }
}

/// A message in k8s-pb: module path (`["api", "core", "v1"]`) and Rust name.
pub(crate) type Key = (Vec<String>, String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    Double,
    Float,
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "string" => Scalar::String,
            "bytes" => Scalar::Bytes,
            "bool" => Scalar::Bool,
            "int32" => Scalar::Int32,
            "int64" => Scalar::Int64,
            "double" => Scalar::Double,
            "float" => Scalar::Float,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Ty {
    Scalar(Scalar),
    Message(Key),
}

#[derive(Clone, Debug)]
enum Card {
    Single,
    Repeated,
    Map(Scalar),
}

#[derive(Clone, Debug)]
pub(crate) struct PbField {
    tag: u32,
    pub(crate) rust_name: String,
    pub(crate) ty: Ty,
    card: Card,
    /// The Go comment tags of its doc (`+listType=map`, `+listMapKey=name`), as `(tag, value)`.
    pub(crate) markers: Vec<(String, String)>,
}

#[derive(Clone, Debug)]
pub(crate) struct PbMessage {
    pub(crate) fields: Vec<PbField>,
    /// The Go comment tags of the message's own doc (`+structType=atomic`).
    pub(crate) markers: Vec<(String, String)>,
}

/// The Go comment tags (`+name=value` lines) of a doc comment.
fn markers(attrs: &[syn::Attribute]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let syn::Meta::NameValue(nv) = &attr.meta else { continue };
        let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &nv.value else {
            continue;
        };
        let text = text.value();
        let Some(tag) = text.trim().strip_prefix('+') else { continue };
        if let Some((name, value)) = tag.split_once('=') {
            out.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    out
}

/// Run the generator.
pub fn generate(mode: Mode) -> Result<()> {
    let metadata = cargo_metadata()?;
    let root_dir = PathBuf::from(
        metadata["workspace_root"].as_str().ok_or_else(|| anyhow!("no workspace_root"))?,
    );
    let (pb_version, pb_manifest) = package(&metadata, "k8s-pb")?;
    let (openapi_version, _) = package(&metadata, "k8s-openapi")?;
    let pb_src = pb_manifest.parent().ok_or_else(|| anyhow!("k8s-pb manifest path"))?.join("src");

    let messages = parse_k8s_pb(&pb_src)?;
    eprintln!("parsed {} messages from {}", messages.len(), pb_src.display());

    let mut generator = SchemaGenerator::default();
    let mut roots = kinds(&mut generator);
    generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>();
    let api_versions: BTreeSet<&'static str> = roots.iter().map(|r| r.api_version).collect();
    for api_version in api_versions {
        roots.push(Root {
            api_version,
            kind: "DeleteOptions",
            schema_name: DELETE_OPTIONS.to_owned(),
        });
    }
    let definitions = generator.definitions().clone();
    // OpenAPI definitions by lower-cased name: prost renames `SELinuxOptions` `SeLinuxOptions`.
    let by_lower: BTreeMap<String, String> =
        definitions.keys().map(|k| (k.to_ascii_lowercase(), k.clone())).collect();

    // The messages reachable from the kinds.
    let mut root_keys = Vec::new();
    for r in &roots {
        let key = key_of_schema_name(&r.schema_name, &messages)
            .with_context(|| format!("no k8s-pb message for {} {}", r.api_version, r.kind))?;
        root_keys.push(key);
    }
    let mut reachable = BTreeSet::new();
    let mut queue: VecDeque<Key> = root_keys.iter().cloned().collect();
    while let Some(key) = queue.pop_front() {
        if !reachable.insert(key.clone()) {
            continue;
        }
        let message = messages.get(&key).ok_or_else(|| anyhow!("no message {key:?}"))?;
        for field in &message.fields {
            if let Ty::Message(target) = &field.ty {
                queue.push_back(target.clone());
            }
        }
    }

    // Proto names, with the case of the OpenAPI definition where there is one.
    let mut infos: BTreeMap<Key, Info> = BTreeMap::new();
    let mut wrappers = Vec::new();
    for key in &reachable {
        let openapi = format!("io.k8s.{}.{}", key.0.join("."), key.1);
        let definition = by_lower.get(&openapi.to_ascii_lowercase()).map(|d| &definitions[d]);
        let name = match by_lower.get(&openapi.to_ascii_lowercase()) {
            Some(d) => format!("k8s.io.{}", d.trim_start_matches("io.k8s.")),
            None => format!("k8s.io.{}.{}", key.0.join("."), key.1),
        };
        let well_known = WELL_KNOWN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        let shape = match (well_known, definition) {
            (Some(shape), _) => shape,
            (None, None) if is_list_wrapper(&messages[key]) => {
                wrappers.push(name.clone());
                "List"
            }
            (None, _) => "Object",
        };
        let props = match (shape, definition) {
            ("Object", Some(d)) => Some(Props::of(d)),
            _ => None,
        };
        let has_definition = props.is_some();
        infos.insert(key.clone(), Info { name, shape, props, has_definition });
    }

    // Go embeds some structs with `json:",inline"` (`Volume` embeds `VolumeSource`): the proto
    // message has a field for the embedded struct, JSON has its fields among the parent's. A
    // field that matches no property but whose message's fields mostly do is such a field.
    let mut inline: BTreeSet<(Key, u32)> = BTreeSet::new();
    for (key, info) in &infos {
        let Some(props) = &info.props else { continue };
        for field in &messages[key].fields {
            let (Ty::Message(target), Card::Single) = (&field.ty, &field.card) else { continue };
            if props.find(&lower_camel(&field.rust_name)).is_some() {
                continue;
            }
            let target_info = &infos[target];
            if target_info.shape != "Object" {
                continue;
            }
            let names: Vec<String> = match &target_info.props {
                Some(p) => p.names.clone(),
                None => messages[target].fields.iter().map(|f| lower_camel(&f.rust_name)).collect(),
            };
            let matched = names.iter().filter(|n| props.find(n).is_some()).count();
            if matched > 0 && matched * 2 >= names.len() {
                inline.insert((key.clone(), field.tag));
            }
        }
    }
    let mut inlined_into: Vec<(Key, Key)> = Vec::new();
    for (key, tag) in &inline {
        let field = messages[key].fields.iter().find(|f| f.tag == *tag).expect("inline field");
        if let Ty::Message(target) = &field.ty {
            inlined_into.push((target.clone(), key.clone()));
        }
    }
    for (target, parent) in inlined_into {
        // An embedded struct without a definition of its own is named by its parents' properties.
        let Some(parent_props) = infos[&parent].props.clone() else { continue };
        let info = infos.get_mut(&target).expect("inlined message");
        if !info.has_definition {
            let props = info.props.get_or_insert_with(Props::default);
            props.names.extend(parent_props.names);
            props.required.extend(parent_props.required);
        }
    }

    let mut order: Vec<(&String, &Key)> = infos.iter().map(|(k, i)| (&i.name, k)).collect();
    order.sort();
    let index: BTreeMap<&Key, usize> =
        order.iter().enumerate().map(|(i, (_, k))| (*k, i)).collect();

    let mut unmatched = Vec::new();
    let mut embedded = Vec::new();
    let mut no_definition = Vec::new();
    let mut body = String::new();
    for (i, (name, key)) in order.iter().enumerate() {
        let message = &messages[*key];
        let info = &infos[*key];
        let shape = info.shape;
        if shape == "Object" && info.props.is_none() {
            no_definition.push(name.to_string());
        }
        writeln!(body, "    // {i}")?;
        writeln!(body, "    Message {{")?;
        writeln!(body, "        name: {name:?},")?;
        writeln!(body, "        shape: Shape::{shape},")?;
        writeln!(body, "        fields: &[")?;
        for field in &message.fields {
            let camel = lower_camel(&field.rust_name);
            let is_inline = inline.contains(&((*key).clone(), field.tag));
            let json = match &info.props {
                _ if is_inline => {
                    if let Ty::Message(target) = &field.ty {
                        embedded.push(format!(
                            "{name}.{} (field {}) embeds {}",
                            field.rust_name, field.tag, infos[target].name
                        ));
                    }
                    camel
                }
                None => camel,
                Some(props) => match props.find(&camel) {
                    Some(p) => p.to_owned(),
                    None => {
                        unmatched.push(format!(
                            "{name}.{} (field {}): no such property in Kubernetes 1.33, used {camel:?}",
                            field.rust_name, field.tag
                        ));
                        camel
                    }
                },
            };
            let required = info.props.as_ref().is_some_and(|p| p.required.contains(&json));
            let (ty, comment) = match &field.ty {
                Ty::Scalar(s) => (format!("{s:?}"), String::new()),
                Ty::Message(target) => (
                    format!("Msg({})", index[target]),
                    format!(" // {}", short(&infos[target].name)),
                ),
            };
            let card = match &field.card {
                Card::Single if is_inline => "Inline".to_owned(),
                Card::Single => match &field.ty {
                    Ty::Scalar(Scalar::String | Scalar::Bytes) if !required => {
                        "OmitEmpty".to_owned()
                    }
                    _ => "Optional".to_owned(),
                },
                Card::Repeated => "Repeated".to_owned(),
                Card::Map(key) => format!("Map({key:?})"),
            };
            writeln!(
                body,
                "            Field::new({}, {json:?}, {ty}, {card}),{comment}",
                field.tag
            )?;
        }
        writeln!(body, "        ],")?;
        writeln!(body, "    }},")?;
    }

    let mut kinds: Vec<(&str, &str, usize)> =
        roots.iter().zip(&root_keys).map(|(r, key)| (r.api_version, r.kind, index[key])).collect();
    kinds.sort();
    kinds.dedup();

    let mut report = String::new();
    let mut section = |title: &str, lines: &[String]| {
        if !lines.is_empty() {
            report.push('\n');
            report.push_str(title);
            report.push('\n');
            for line in lines {
                report.push_str("- ");
                report.push_str(line);
                report.push('\n');
            }
        }
    };
    section(
        "Fields that match no property of their type's OpenAPI schema (newer than Kubernetes 1.33?):",
        &unmatched,
    );
    section(
        "Go structs embedded with `json:\",inline\"` (their fields are the parent's):",
        &embedded,
    );
    section("Proto-only wrappers of a list (in JSON, the list itself):", &wrappers);
    section("Messages with no OpenAPI definition (JSON names are lowerCamelCase):", &no_definition);

    let mut out = output::header("gen-protobuf");
    writeln!(
        out,
        "//! The protobuf schema table of the API server's request decoder: see xtask/src/protobuf.rs."
    )?;
    writeln!(out, "//!")?;
    writeln!(
        out,
        "//! Field numbers and types from k8s-pb {pb_version}; JSON names from k8s-openapi \
         {openapi_version} (Kubernetes 1.33). {} messages, reachable from {} kinds.",
        order.len(),
        kinds.len()
    )?;
    for line in report.lines() {
        writeln!(out, "//!{}{line}", if line.is_empty() { "" } else { " " })?;
    }
    writeln!(out)?;
    writeln!(out, "use super::Card::*;")?;
    writeln!(out, "use super::Ty::*;")?;
    writeln!(out, "use super::{{Field, Message, Shape}};")?;
    writeln!(out)?;
    writeln!(out, "/// Every message, sorted by name.")?;
    writeln!(out, "pub(super) static MESSAGES: &[Message] = &[")?;
    out.push_str(&body);
    writeln!(out, "];")?;
    writeln!(out)?;
    writeln!(out, "/// `(apiVersion, kind, message)`, sorted.")?;
    writeln!(out, "pub(super) static KINDS: &[(&str, &str, usize)] = &[")?;
    for (api_version, kind, i) in &kinds {
        writeln!(out, "    ({api_version:?}, {kind:?}, {i}),")?;
    }
    writeln!(out, "];")?;

    output::emit(&root_dir, OUTPUT, &out, mode)?;

    eprintln!("{OUTPUT}: {} messages, {} kinds", order.len(), kinds.len());
    eprint!("{report}");
    Ok(())
}

/// `cargo metadata` of this workspace.
pub(crate) fn cargo_metadata() -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// The version and manifest path of the one package called `name`.
pub(crate) fn package(metadata: &Value, name: &str) -> Result<(String, PathBuf)> {
    let found: Vec<&Value> = metadata["packages"]
        .as_array()
        .ok_or_else(|| anyhow!("no packages in cargo metadata"))?
        .iter()
        .filter(|p| p["name"] == name)
        .collect();
    match found.as_slice() {
        [p] => Ok((
            p["version"].as_str().unwrap_or_default().to_owned(),
            PathBuf::from(p["manifest_path"].as_str().unwrap_or_default()),
        )),
        [] => bail!("{name} is not in the workspace's dependencies"),
        _ => bail!("more than one version of {name} in the workspace's dependencies"),
    }
}

/// Every prost message in k8s-pb's source, by module path and name.
pub(crate) fn parse_k8s_pb(src: &Path) -> Result<BTreeMap<Key, PbMessage>> {
    let mut files = Vec::new();
    collect_rs_files(src, &mut files)?;
    files.sort();
    let mut messages = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src)?;
        let mut module: Vec<String> = relative
            .parent()
            .map(|p| p.iter().map(|c| c.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        match relative.file_stem().and_then(|s| s.to_str()) {
            Some("mod" | "lib") => {}
            Some(stem) => module.push(stem.to_owned()),
            None => continue,
        }
        let text = std::fs::read_to_string(&file)?;
        let parsed =
            syn::parse_file(&text).with_context(|| format!("parsing {}", file.display()))?;
        collect_messages(&parsed.items, &module, &mut messages)
            .with_context(|| format!("in {}", file.display()))?;
    }
    Ok(messages)
}

fn collect_rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn collect_messages(
    items: &[syn::Item],
    module: &[String],
    out: &mut BTreeMap<Key, PbMessage>,
) -> Result<()> {
    for item in items {
        match item {
            syn::Item::Struct(s) if derives_message(&s.attrs) => {
                let mut fields = Vec::new();
                for field in &s.fields {
                    let rust_name =
                        field.ident.as_ref().map(ToString::to_string).unwrap_or_default();
                    let rust_name = rust_name.trim_start_matches("r#").to_owned();
                    let mut parsed = parse_field(field, rust_name.clone(), module)
                        .with_context(|| format!("field {}.{rust_name}", s.ident))?;
                    parsed.markers = markers(&field.attrs);
                    fields.push(parsed);
                }
                let message = PbMessage { fields, markers: markers(&s.attrs) };
                out.insert((module.to_vec(), s.ident.to_string()), message);
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    let mut inner = module.to_vec();
                    inner.push(m.ident.to_string());
                    collect_messages(items, &inner, out)?;
                }
            }
            syn::Item::Enum(e) if derives_message(&e.attrs) => {
                bail!("oneof {} is not supported", e.ident)
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the attributes derive `::prost::Message`.
fn derives_message(attrs: &[syn::Attribute]) -> bool {
    let mut found = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.segments.last().is_some_and(|s| s.ident == "Message") {
                found = true;
            }
            Ok(())
        });
    }
    found
}

/// One field from its `#[prost(...)]` attribute and its Rust type.
fn parse_field(field: &syn::Field, rust_name: String, module: &[String]) -> Result<PbField> {
    let attr = field
        .attrs
        .iter()
        .find(|a| a.path().is_ident("prost"))
        .ok_or_else(|| anyhow!("no #[prost] attribute"))?;
    let mut tag = None;
    let mut kind = None;
    let mut map = None;
    let mut repeated = false;
    attr.parse_nested_meta(|meta| {
        let ident = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
        let value = if meta.input.peek(syn::Token![=]) {
            Some(meta.value()?.parse::<syn::LitStr>()?.value())
        } else {
            None
        };
        match ident.as_str() {
            "tag" => tag = value,
            "repeated" => repeated = true,
            "optional" | "boxed" | "packed" | "required" => {}
            "btree_map" | "map" | "hash_map" => map = value,
            other => kind = Some(other.to_owned()),
        }
        Ok(())
    })?;
    let tag: u32 = tag.ok_or_else(|| anyhow!("no tag"))?.parse()?;
    let resolve = |kind: &str, position: usize| -> Result<Ty> {
        if kind == "message" {
            let path = message_type(&field.ty, position)?;
            Ok(Ty::Message(resolve_path(&path, module)?))
        } else {
            Scalar::parse(kind).map(Ty::Scalar).ok_or_else(|| anyhow!("unsupported type {kind}"))
        }
    };
    if let Some(map) = map {
        let (key, value) = map.split_once(',').ok_or_else(|| anyhow!("map attribute {map:?}"))?;
        let key = Scalar::parse(key.trim()).ok_or_else(|| anyhow!("unsupported map key {key}"))?;
        let ty = resolve(value.trim(), 1)?;
        return Ok(PbField { tag, rust_name, ty, card: Card::Map(key), markers: Vec::new() });
    }
    let kind = kind.ok_or_else(|| anyhow!("no type in #[prost]"))?;
    if kind == "enumeration" || kind == "oneof" {
        bail!("{kind} is not supported");
    }
    let ty = resolve(&kind, 0)?;
    Ok(PbField {
        tag,
        rust_name,
        ty,
        card: if repeated { Card::Repeated } else { Card::Single },
        markers: Vec::new(),
    })
}

/// The path of the message type inside `Option<…>`, `Vec<…>`, `Box<…>` or (the value of)
/// `BTreeMap<_, …>`.
fn message_type(ty: &syn::Type, map_position: usize) -> Result<Vec<String>> {
    let syn::Type::Path(path) = ty else { bail!("unexpected field type") };
    let last = path.path.segments.last().ok_or_else(|| anyhow!("empty type path"))?;
    let wrapper = last.ident.to_string();
    if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
        let types: Vec<&syn::Type> = args
            .args
            .iter()
            .filter_map(|a| match a {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect();
        let inner = match wrapper.as_str() {
            "Option" | "Vec" | "Box" => types.first(),
            "BTreeMap" | "HashMap" => types.get(map_position),
            other => bail!("unexpected generic type {other}"),
        };
        return message_type(inner.ok_or_else(|| anyhow!("no type argument"))?, 0);
    }
    Ok(path.path.segments.iter().map(|s| s.ident.to_string()).collect())
}

/// The absolute key of a type path written in `module` (`super::super::core::v1::PodSpec`).
fn resolve_path(path: &[String], module: &[String]) -> Result<Key> {
    let (name, prefix) = path.split_last().ok_or_else(|| anyhow!("empty path"))?;
    let mut base: Vec<String> = module.to_vec();
    let mut rest = prefix;
    if rest.first().is_some_and(|s| s == "crate") {
        base.clear();
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop().ok_or_else(|| anyhow!("super above the crate root"))?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Ok((base, name.clone()))
}

/// The k8s-pb message of an OpenAPI schema name (`io.k8s.api.core.v1.ConfigMap`).
pub(crate) fn key_of_schema_name(
    schema_name: &str,
    messages: &BTreeMap<Key, PbMessage>,
) -> Option<Key> {
    let rest = schema_name.strip_prefix("io.k8s.")?;
    let (module, name) = rest.rsplit_once('.')?;
    let module: Vec<String> = module.split('.').map(str::to_owned).collect();
    messages.keys().find(|(m, n)| *m == module && n.eq_ignore_ascii_case(name)).cloned()
}

/// A proto-only message that wraps a list (`ExtraValue { repeated string items = 1; }`).
fn is_list_wrapper(message: &PbMessage) -> bool {
    matches!(message.fields.as_slice(), [f] if f.rust_name == "items" && matches!(f.card, Card::Repeated))
}

/// `pod_ip` → `podIp`, `external_i_ps` → `externalIPs`.
pub(crate) fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').enumerate() {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            if i == 0 {
                out.push(first);
            } else {
                out.extend(first.to_uppercase());
            }
            out.push_str(chars.as_str());
        }
    }
    out
}

/// A name compared ignoring case and underscores.
fn loose(name: &str) -> String {
    name.chars().filter(|c| *c != '_').flat_map(char::to_lowercase).collect()
}

/// `k8s.io.api.core.v1.PodSpec` → `core.v1.PodSpec`, for comments.
fn short(name: &str) -> &str {
    name.trim_start_matches("k8s.io.")
        .trim_start_matches("api.")
        .trim_start_matches("apimachinery.pkg.apis.")
        .trim_start_matches("apimachinery.pkg.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(lower_camel("pod_ip"), "podIp");
        assert_eq!(lower_camel("external_i_ps"), "externalIPs");
        assert_eq!(lower_camel("type"), "type");
        assert_eq!(loose("podIP"), loose("podIp"));
        assert_eq!(
            resolve_path(
                &["super".into(), "super".into(), "x".into(), "T".into()],
                &["api".into(), "core".into(), "v1".into()]
            )
            .unwrap(),
            (vec!["api".to_owned(), "x".to_owned()], "T".to_owned())
        );
    }
}
