//! The checks kube-apiserver makes of a CustomResourceDefinition before storing it, with its
//! field paths and words.

use std::collections::HashSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use serde_json::Value;

use super::{columns, limits, parse, GROUP};
use crate::object_names::{dns1035_label, dns1123_subdomain};
use crate::resource::Registry;
use crate::status::{ApiError, ApiResult, Cause};

/// The annotation a definition in a protected group (`*.k8s.io`, `*.kubernetes.io`) must carry.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// The group of Carrel's own types (`tenants.carrel.dev`): no definition may take it.
pub const RESERVED_GROUP: &str = crate::tenant::types::GROUP;

/// Problems with a definition, collected as causes.
#[derive(Default)]
struct Problems(Vec<Cause>);

impl Problems {
    fn required(&mut self, field: impl Into<String>, detail: &str) {
        let message = if detail.is_empty() {
            "Required value".into()
        } else {
            format!("Required value: {detail}")
        };
        self.0.push(Cause::new("FieldValueRequired", field, message));
    }
    fn invalid(&mut self, field: impl Into<String>, value: &str, detail: &str) {
        self.0.push(Cause::new(
            "FieldValueInvalid",
            field,
            format!("Invalid value: \"{value}\": {detail}"),
        ));
    }
    fn unsupported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        let supported: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        self.0.push(Cause::new(
            "FieldValueNotSupported",
            field,
            format!("Unsupported value: \"{value}\": supported values: {}", supported.join(", ")),
        ));
    }
    fn forbidden(&mut self, field: impl Into<String>, detail: &str) {
        self.0.push(Cause::new("FieldValueForbidden", field, format!("Forbidden: {detail}")));
    }
    fn duplicate(&mut self, field: impl Into<String>, value: &str) {
        self.0.push(Cause::new(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: \"{value}\""),
        ));
    }
    fn too_many(&mut self, field: impl Into<String>, count: usize, most: usize) {
        self.0.push(Cause::new(
            "FieldValueTooMany",
            field,
            format!("Too many: {count}: must have at most {most} items"),
        ));
    }
    fn immutable(&mut self, field: impl Into<String>, value: &str) {
        self.0.push(Cause::new(
            "FieldValueInvalid",
            field,
            format!("Invalid value: \"{value}\": field is immutable"),
        ));
    }
    fn label(&mut self, field: &str, value: &str) {
        for problem in dns1035_label(value) {
            self.invalid(field, value, &problem);
        }
    }
}

/// Check a definition (and, for an update, what it may not change of `old`): 422 with every
/// problem found, or 400 when it does not decode as a definition at all. `built_in` holds the
/// types the server serves itself, which no definition may redefine.
pub fn validate(object: &Value, old: Option<&Value>, built_in: &Registry) -> ApiResult<()> {
    let crd = parse(object)?;
    // The definition replaced, if it decodes: one that does not is checked as a create is.
    let old_crd = old.and_then(|o| parse(o).ok());
    let mut p = Problems::default();
    let spec = &crd.spec;
    let name = crd.metadata.name.clone().unwrap_or_default();

    if spec.group.is_empty() {
        p.required("spec.group", "");
    } else {
        for problem in dns1123_subdomain(&spec.group) {
            p.invalid("spec.group", &spec.group, &problem);
        }
        if !spec.group.contains('.') {
            p.invalid("spec.group", &spec.group, "should be a domain with at least one dot");
        }
    }
    protected_group(&mut p, &crd, old_crd.as_ref());
    if spec.group == RESERVED_GROUP {
        p.forbidden("spec.group", &format!("the group {RESERVED_GROUP} is reserved for Carrel"));
    }
    if let Some(served) =
        built_in.all().iter().find(|t| t.group == spec.group && t.plural == spec.names.plural)
    {
        p.forbidden(
            "spec.names.plural",
            &format!(
                "\"{}\" in group \"{}\" is a resource this server serves itself; a \
                 CustomResourceDefinition may not redefine it",
                served.plural, served.group
            ),
        );
    }
    if name != format!("{}.{}", spec.names.plural, spec.group) {
        p.invalid("metadata.name", &name, "must be spec.names.plural+\".\"+spec.group");
    }
    match spec.scope.as_str() {
        "Cluster" | "Namespaced" => {}
        "" => p.required("spec.scope", ""),
        other => p.unsupported("spec.scope", other, &["Cluster", "Namespaced"]),
    }
    names(&mut p, &spec.names);
    if spec.preserve_unknown_fields == Some(true) {
        p.invalid(
            "spec.preserveUnknownFields",
            "true",
            "must be false in order to use defaults in the schema",
        );
    }
    if let Some(conversion) = &spec.conversion {
        match conversion.strategy.as_str() {
            "None" => {
                if conversion.webhook.is_some() {
                    p.forbidden(
                        "spec.conversion.webhook",
                        "should not be set when strategy is not set to Webhook",
                    );
                }
            }
            "Webhook" => match conversion.webhook.as_ref() {
                None => p.required(
                    "spec.conversion.webhook",
                    "required when strategy is set to Webhook",
                ),
                Some(webhook) => {
                    let mut e = crate::validation::Errors::default();
                    use crate::registry::admissionregistration as hooks;
                    match &webhook.client_config {
                        None => e.required(
                            "spec.conversion.webhook.clientConfig",
                            "required when strategy is set to Webhook",
                        ),
                        Some(config) => hooks::client_config(
                            config.url.as_deref(),
                            config.service.as_ref().map(|s| hooks::ServiceRef {
                                name: &s.name,
                                namespace: &s.namespace,
                                path: s.path.as_deref(),
                                port: s.port,
                            }),
                            "spec.conversion.webhook.clientConfig",
                            &mut e,
                        ),
                    }
                    hooks::review_versions(
                        &webhook.conversion_review_versions,
                        "spec.conversion.webhook.conversionReviewVersions",
                        &mut e,
                    );
                    p.0.extend(e.0);
                }
            },
            other => p.unsupported("spec.conversion.strategy", other, &["None", "Webhook"]),
        }
    }
    versions(&mut p, object, old, spec);

    if let Some(old) = &old_crd {
        if old.spec.scope != spec.scope {
            p.immutable("spec.scope", &spec.scope);
        }
        if old.spec.group != spec.group {
            p.immutable("spec.group", &spec.group);
        }
        if old.spec.names.plural != spec.names.plural {
            p.immutable("spec.names.plural", &spec.names.plural);
        }
    }
    if p.0.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, "CustomResourceDefinition", &name, p.0))
    }
}

/// A definition in a group of the Kubernetes project (`k8s.io`, `kubernetes.io` and their
/// subdomains) must say where its API was approved, as kube-apiserver requires
/// (`validateAPIApproval`): a URL, or a reason starting with `unapproved`. An update that leaves
/// the annotation's state as it was is not held to it.
fn protected_group(
    p: &mut Problems,
    crd: &ext::CustomResourceDefinition,
    old: Option<&ext::CustomResourceDefinition>,
) {
    let group = crd.spec.group.as_str();
    let protected = group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io");
    if !protected {
        return;
    }
    #[derive(PartialEq)]
    enum Approval {
        Invalid,
        Approved,
        Bypassed,
        Missing,
    }
    let state = |crd: &ext::CustomResourceDefinition| {
        let annotation = crd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(API_APPROVED_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let state = if annotation.is_empty() {
            Approval::Missing
        } else if annotation.starts_with("unapproved") {
            Approval::Bypassed
        } else if is_absolute_url(&annotation) {
            Approval::Approved
        } else {
            Approval::Invalid
        };
        (state, annotation)
    };
    let (new_state, annotation) = state(crd);
    if old.is_some_and(|old| state(old).0 == new_state) {
        return;
    }
    let field = format!("metadata.annotations[{API_APPROVED_ANNOTATION}]");
    match new_state {
        Approval::Approved | Approval::Bypassed => {}
        Approval::Missing => p.required(
            field,
            &format!(
                "protected groups must have approval annotation \"{API_APPROVED_ANNOTATION}\", \
                 see https://github.com/kubernetes/enhancements/pull/1111"
            ),
        ),
        Approval::Invalid => p.invalid(
            field,
            &annotation,
            &format!(
                "protected groups must have approval annotation \"{API_APPROVED_ANNOTATION}\" \
                 with either a URL or a reason starting with \"unapproved\", see \
                 https://github.com/kubernetes/enhancements/pull/1111"
            ),
        ),
    }
}

/// Whether `s` parses as Go's `url.ParseRequestURI` with a scheme and a host:
/// `https://github.com/kubernetes/kubernetes/pull/1`.
fn is_absolute_url(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once("://") else { return false };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    scheme_ok && !host.is_empty() && !s.contains(char::is_whitespace)
}

fn names(p: &mut Problems, names: &ext::CustomResourceDefinitionNames) {
    if names.plural.is_empty() {
        p.required("spec.names.plural", "");
    } else {
        p.label("spec.names.plural", &names.plural);
    }
    if let Some(singular) = names.singular.as_deref().filter(|s| !s.is_empty()) {
        p.label("spec.names.singular", singular);
    }
    if names.kind.is_empty() {
        p.required("spec.names.kind", "");
    } else if names.kind.contains(|c: char| !c.is_ascii_alphanumeric())
        || !names.kind.starts_with(|c: char| c.is_ascii_alphabetic())
    {
        p.invalid(
            "spec.names.kind",
            &names.kind,
            "may have mixed case, but should otherwise match: ^[a-z]([-a-z0-9]*[a-z0-9])?$",
        );
    }
    if let Some(list_kind) = names.list_kind.as_deref().filter(|s| !s.is_empty()) {
        if list_kind == names.kind {
            p.invalid("spec.names.listKind", list_kind, "kind and listKind may not be the same");
        }
    }
    for (i, short) in names.short_names.iter().flatten().enumerate() {
        p.label(&format!("spec.names.shortNames[{i}]"), short);
    }
    for (i, category) in names.categories.iter().flatten().enumerate() {
        p.label(&format!("spec.names.categories[{i}]"), category);
    }
}

fn versions(
    p: &mut Problems,
    object: &Value,
    old: Option<&Value>,
    spec: &ext::CustomResourceDefinitionSpec,
) {
    // The schemas of the definition replaced, by version name.
    let old_schemas: std::collections::HashMap<&str, &Value> = old
        .and_then(|o| o.pointer("/spec/versions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| Some((v.get("name")?.as_str()?, v.pointer("/schema/openAPIV3Schema")?)))
        .collect();
    if spec.versions.is_empty() {
        p.required("spec.versions", "must have exactly one version marked as storage version");
        return;
    }
    let storage = spec.versions.iter().filter(|v| v.storage).count();
    if storage != 1 {
        p.invalid(
            "spec.versions",
            &format!("{storage}"),
            "must have exactly one version marked as storage version",
        );
    }
    if !spec.versions.iter().any(|v| v.served) {
        p.invalid("spec.versions", "", "must have at least one version marked as served");
    }
    // What the schemas would make the server hold, counted before any is compiled.
    let too_large = limits::check_schemas(&limits::footprint(object));
    let compile = too_large.is_empty();
    p.0.extend(too_large);
    let mut seen = HashSet::new();
    let raw = object.pointer("/spec/versions").and_then(Value::as_array);
    for (i, version) in spec.versions.iter().enumerate() {
        let at = format!("spec.versions[{i}]");
        if version.name.is_empty() {
            p.required(format!("{at}.name"), "");
        } else {
            p.label(&format!("{at}.name"), &version.name);
        }
        if !seen.insert(version.name.as_str()) {
            p.duplicate(format!("{at}.name"), &version.name);
        }
        let schema =
            raw.and_then(|vs| vs.get(i)).and_then(|v| v.pointer("/schema/openAPIV3Schema"));
        match schema {
            None => p.required(format!("{at}.schema.openAPIV3Schema"), "schemas are required"),
            Some(_) if !compile => {}
            Some(schema) => {
                let path = format!("{at}.schema.openAPIV3Schema");
                // As kube-apiserver, an update that leaves a version's schema as it was does not
                // hold its rules' estimated costs against it.
                let unchanged = old_schemas.get(version.name.as_str()) == Some(&schema);
                let parsed = if unchanged {
                    carrel_schema::Schema::parse_accepted(schema, &path)
                } else {
                    carrel_schema::Schema::parse(schema, &path)
                };
                if let Err(errors) = parsed {
                    p.0.extend(errors.into_iter().map(super::cause));
                }
            }
        }
        for (j, column) in version.additional_printer_columns.iter().flatten().enumerate() {
            let at = format!("{at}.additionalPrinterColumns[{j}]");
            if column.name.is_empty() {
                p.required(format!("{at}.name"), "");
            }
            const TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];
            if !TYPES.contains(&column.type_.as_str()) {
                p.unsupported(format!("{at}.type"), &column.type_, TYPES);
            }
            if column.json_path.is_empty() {
                p.required(format!("{at}.jsonPath"), "");
            } else if let Err(e) = columns::check_path(&column.json_path) {
                p.invalid(
                    format!("{at}.jsonPath"),
                    &column.json_path,
                    &format!("invalid JSONPath: {e}"),
                );
            }
            if column.priority.is_some_and(|n| n < 0) {
                p.invalid(
                    format!("{at}.priority"),
                    &column.priority.unwrap_or(0).to_string(),
                    "must be greater than or equal to 0",
                );
            }
        }
        if let Some(scale) = version.subresources.as_ref().and_then(|s| s.scale.as_ref()) {
            let at = format!("{at}.subresources.scale");
            if !scale.spec_replicas_path.starts_with(".spec.") {
                p.invalid(
                    format!("{at}.specReplicasPath"),
                    &scale.spec_replicas_path,
                    "should be a json path under .spec",
                );
            }
            if !scale.status_replicas_path.starts_with(".status.") {
                p.invalid(
                    format!("{at}.statusReplicasPath"),
                    &scale.status_replicas_path,
                    "should be a json path under .status",
                );
            }
            if let Some(selector) = &scale.label_selector_path {
                if !(selector.starts_with(".spec.") || selector.starts_with(".status.")) {
                    p.invalid(
                        format!("{at}.labelSelectorPath"),
                        selector,
                        "should be a json path under either .spec or .status",
                    );
                }
            }
        }
        if let Some(fields) = version.selectable_fields.as_deref() {
            let schema = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref());
            selectable_fields(fields, schema, &format!("{at}.selectableFields"), p);
        }
    }
}

/// The most selectable fields a version may declare.
const MAX_SELECTABLE_FIELDS: usize = 8;

/// `validateSelectableFields`: each a simple JSON path (dot notation, no arrays), not into
/// `metadata`, declared once, naming a string, boolean or integer field of the version's schema;
/// at most [`MAX_SELECTABLE_FIELDS`].
fn selectable_fields(
    fields: &[ext::SelectableField],
    schema: Option<&ext::JSONSchemaProps>,
    at: &str,
    p: &mut Problems,
) {
    let mut seen = std::collections::HashSet::new();
    for (i, field) in fields.iter().enumerate() {
        let at = format!("{at}[{i}].jsonPath");
        let path = field.json_path.as_str();
        if path.is_empty() {
            p.required(at, "");
            continue;
        }
        let Some(rest) = path.strip_prefix('.') else {
            p.invalid(at, path, "must be a simple json path starting with .");
            continue;
        };
        let simple = |segment: &str| {
            !segment.is_empty()
                && segment.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !rest.split('.').all(simple) {
            p.invalid(at, path, "must be a simple JSON path without array notation");
            continue;
        }
        if rest == "metadata" || rest.starts_with("metadata.") {
            p.invalid(at, path, "must not point to fields in metadata");
            continue;
        }
        if !seen.insert(path) {
            p.duplicate(at, path);
            continue;
        }
        let Some(schema) = schema else { continue };
        let found = rest.split('.').try_fold(schema, |props, segment| {
            props.properties.as_ref().and_then(|m| m.get(segment))
        });
        match found.and_then(|f| f.type_.as_deref()) {
            None => p.invalid(at, path, "is an invalid path"),
            Some("string" | "boolean" | "integer") => {}
            Some(_) => p.invalid(
                at,
                path,
                "must point to a field of type string, boolean or integer. Enum string fields \
                 and strings with formats are allowed",
            ),
        }
    }
    if fields.len() > MAX_SELECTABLE_FIELDS {
        p.too_many(at, fields.len(), MAX_SELECTABLE_FIELDS);
    }
}
