//! Field selectors: a port of `k8s.io/apimachinery/pkg/fields/selector.go`, and the fields each
//! resource accepts.

use std::fmt;

use serde_json::Value;

use crate::object::go_quote;
use crate::status::ApiError;

/// A field selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOp {
    /// `field=value`.
    Equals,
    /// `field==value`.
    DoubleEquals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a field selector. The value is unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field, as the client wrote it (e.g. `spec.nodeName`, `regarding.name`).
    pub field: String,
    /// The operator.
    pub op: FieldOp,
    /// The value the field is compared with.
    pub value: String,
}

/// A parsed `fieldSelector`: the AND of its terms. No terms selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Sorted as `fields.ParseSelector` sorts the raw terms.
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parse `fieldSelector` the way `fields.ParseSelector` does. An empty string selects
    /// everything; empty terms (`a=b,,c=d`) are skipped. Which fields exist is not checked here:
    /// see [`check_supported`](Self::check_supported).
    // The signature is the crate's: `ApiError` is what every handler returns.
    pub fn parse(s: &str) -> Result<FieldSelector, ApiError> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, raw)) = split_term(part) else {
                return Err(bad_request(FieldSelectorError::NotUnderstood {
                    selector: s.to_owned(),
                    term: part.to_owned(),
                }));
            };
            let value = unescape_value(raw).map_err(bad_request)?;
            if field.is_empty() && value.is_empty() {
                // ParseSelector's identity Transform turns such a term into Everything().
                continue;
            }
            requirements.push(FieldRequirement { field: field.to_owned(), op, value });
        }
        Ok(FieldSelector { requirements })
    }

    /// Check every field is selectable on a kind with these field labels (its strategy's
    /// `field_labels`), as kube-apiserver's field label conversion does before listing or
    /// watching. The first unsupported field (in sorted term order) gives a 400 with
    /// kube-apiserver's text for that kind, e.g. `field label not supported: spec.foo` (pods,
    /// events, …) or
    /// `"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"`
    /// (kinds with no field label conversion of their own, e.g. configmaps).
    // The signature is the crate's: `ApiError` is what every handler returns.
    pub fn check_supported(&self, labels: FieldLabels) -> Result<(), ApiError> {
        for r in &self.requirements {
            labels.convert(&r.field).map_err(bad_request)?;
        }
        Ok(())
    }

    /// Whether an object of a kind with these field labels satisfies every term. A field the
    /// kind does not select on reads as `""` (as `fields.Set.Get` does); callers should have
    /// refused it with [`check_supported`](Self::check_supported) first.
    pub fn matches(&self, labels: FieldLabels, object: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let have = field_value(labels, object, &r.field).unwrap_or_default();
            match r.op {
                FieldOp::Equals | FieldOp::DoubleEquals => have == r.value,
                FieldOp::NotEquals => have != r.value,
            }
        })
    }

    /// Whether the selector selects everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The name pinned by a `metadata.name=`/`==` term, if any (`RequiresExactMatch`), so callers
    /// can look one object up instead of listing. They must still apply [`matches`](Self::matches)
    /// to it, for the other terms.
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && r.op != FieldOp::NotEquals)
            .map(|r| r.value.as_str())
    }

    /// The terms, in the order `fields.ParseSelector` sorts them.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }
}

impl fmt::Display for FieldSelector {
    /// `Selector.String()`: `field=value` terms (values escaped), joined with `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if r.op == FieldOp::NotEquals { "!=" } else { "=" };
            let value = r.value.replace('\\', r"\\").replace(',', r"\,").replace('=', r"\=");
            write!(f, "{}{op}{value}", r.field)?;
        }
        Ok(())
    }
}

/// Why a field selector is refused, in kube-apiserver's words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum FieldSelectorError {
    /// A term with no operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    NotUnderstood {
        /// The whole selector.
        selector: String,
        /// The term.
        term: String,
    },
    /// A backslash before a character other than `\\`, `,` and `=`.
    #[error("invalid field selector: invalid escape sequence: \\{0}")]
    InvalidEscape(char),
    /// A backslash ending the value.
    #[error("invalid field selector: invalid escape sequence: \\")]
    UnfinishedEscape,
    /// A bare `,` or `=` in a value; Go prints the rune with `%v`, that is as its number.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedCharacter(char),
    /// A field a kind with no field label conversion of its own does not select on.
    #[error("{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"", go_quote(.0))]
    NotKnown(String),
    /// A field batch/v1 Jobs do not select on.
    #[error("field label {} not supported for batchv1.Job", go_quote(.0))]
    NotSupportedForJob(String),
    /// A field a kind with a field label conversion of its own does not select on.
    #[error("field label not supported: {0}")]
    NotSupported(String),
}

/// A refused field selector as the 400 a handler returns.
fn bad_request(e: FieldSelectorError) -> ApiError {
    ApiError::bad_request(e.to_string())
}

/// `fields.splitTerms`: split on commas not escaped by a backslash (the backslash stays).
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// `fields.splitTerm`: split at the first `!=`, `==` or `=`.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (text, op) in
            [("!=", FieldOp::NotEquals), ("==", FieldOp::DoubleEquals), ("=", FieldOp::Equals)]
        {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; a bare `,` or `=` is refused.
fn unescape_value(s: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => return Err(FieldSelectorError::InvalidEscape(c)),
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(FieldSelectorError::UnescapedCharacter(c)),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(FieldSelectorError::UnfinishedEscape);
    }
    Ok(out)
}

/// Which field label conversion (and selectable field set) a kind has: what its strategy's
/// `field_labels` names, and what the selector functions here are given.
///
/// Sources (kubernetes v1.33): `pkg/apis/core/v1/conversion.go` (`addConversionFuncs`: Pod, Node,
/// ReplicationController; `AddFieldLabelConversionsForEvent`, `…ForNamespace`, `…ForSecret`,
/// `…ForService`), `pkg/apis/batch/v1/conversion.go` (Job), `pkg/apis/events/v1/conversion.go`
/// (events.k8s.io Event, mapping `regarding.*` onto the core fields), and for every other kind
/// `runtime.DefaultMetaV1FieldSelectorConversion` (only `metadata.name`, `metadata.namespace`).
/// The values come from the registries' `ToSelectableFields`/`GetAttrs`
/// (`pkg/registry/core/pod/strategy.go` and the like). Notably, `apps/v1` registers no
/// conversion, so `status.replicas` is refused for replicasets even though their registry
/// computes it (kubernetes/kubernetes#135136); batch/v1 CronJobs select on metadata only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldLabels {
    /// `metadata.name` and `metadata.namespace` only (cluster-scoped kinds' namespace is empty).
    Default {
        /// Whether the kind is cluster-scoped.
        cluster_scoped: bool,
    },
    /// Pods.
    Pod,
    /// Nodes.
    Node,
    /// ReplicationControllers.
    ReplicationController,
    /// Core (`v1`) Events.
    CoreEvent,
    /// Namespaces.
    Namespace,
    /// Secrets.
    Secret,
    /// Services.
    Service,
    /// batch/v1 Jobs.
    Job,
    /// events.k8s.io/v1 Events.
    EventsV1Event,
    /// Custom resources: `metadata.name`, `metadata.namespace` when namespaced, and the fields
    /// their definition's version declares selectable (as apiextensions-apiserver converts
    /// them).
    Custom {
        /// Whether the kind is cluster-scoped.
        cluster_scoped: bool,
        /// The declared paths (`spec.color`).
        fields: &'static [&'static str],
    },
}

impl FieldLabels {
    /// The kind's field label conversion: the field as the selectable field set names it, or
    /// kube-apiserver's error text.
    fn convert(self, label: &str) -> Result<&str, FieldSelectorError> {
        let meta = matches!(label, "metadata.name" | "metadata.namespace");
        let accepted = match self {
            FieldLabels::Default { .. } => {
                return if meta {
                    Ok(label)
                } else {
                    Err(FieldSelectorError::NotKnown(label.to_owned()))
                };
            }
            FieldLabels::Custom { cluster_scoped, fields } => {
                label == "metadata.name"
                    || (!cluster_scoped && label == "metadata.namespace")
                    || fields.contains(&label)
            }
            FieldLabels::Job => {
                return if meta || label == "status.successful" {
                    Ok(label)
                } else {
                    Err(FieldSelectorError::NotSupportedForJob(label.to_owned()))
                };
            }
            FieldLabels::Pod => {
                if label == "spec.host" {
                    // Old v1 clients' name for spec.nodeName.
                    return Ok("spec.nodeName");
                }
                meta || matches!(
                    label,
                    "spec.nodeName"
                        | "spec.restartPolicy"
                        | "spec.schedulerName"
                        | "spec.serviceAccountName"
                        | "spec.hostNetwork"
                        | "status.phase"
                        | "status.podIP"
                        | "status.podIPs"
                        | "status.nominatedNodeName"
                )
            }
            FieldLabels::Node => matches!(label, "metadata.name" | "spec.unschedulable"),
            FieldLabels::ReplicationController => meta || label == "status.replicas",
            FieldLabels::CoreEvent => {
                meta || matches!(
                    label,
                    "involvedObject.kind"
                        | "involvedObject.namespace"
                        | "involvedObject.name"
                        | "involvedObject.uid"
                        | "involvedObject.apiVersion"
                        | "involvedObject.resourceVersion"
                        | "involvedObject.fieldPath"
                        | "reason"
                        | "reportingComponent"
                        | "source"
                        | "type"
                )
            }
            FieldLabels::Namespace => matches!(label, "metadata.name" | "status.phase"),
            FieldLabels::Secret => meta || label == "type",
            FieldLabels::Service => meta || matches!(label, "spec.clusterIP" | "spec.type"),
            FieldLabels::EventsV1Event => {
                let mapped = match label {
                    "regarding.kind" => "involvedObject.kind",
                    "regarding.namespace" => "involvedObject.namespace",
                    "regarding.name" => "involvedObject.name",
                    "regarding.uid" => "involvedObject.uid",
                    "regarding.apiVersion" => "involvedObject.apiVersion",
                    "regarding.resourceVersion" => "involvedObject.resourceVersion",
                    "regarding.fieldPath" => "involvedObject.fieldPath",
                    "reportingController" => "reportingComponent",
                    "reason" | "source" | "type" | "metadata.name" | "metadata.namespace" => label,
                    _ => return Err(FieldSelectorError::NotSupported(label.to_owned())),
                };
                return Ok(mapped);
            }
        };
        if accepted {
            Ok(label)
        } else {
            Err(FieldSelectorError::NotSupported(label.to_owned()))
        }
    }

    /// The value of a (converted) field in the kind's selectable field set; `""` for a field the
    /// set lacks, as `fields.Set.Get` answers.
    fn value(self, object: &Value, field: &str) -> String {
        let text = |pointer: &str| str_at(object, pointer).to_owned();
        match (self, field) {
            (_, "metadata.name") => text("/metadata/name"),
            (FieldLabels::Custom { .. }, "metadata.namespace") => text("/metadata/namespace"),
            (FieldLabels::Custom { .. }, path) => selectable_value(object, path),
            (FieldLabels::Default { cluster_scoped: true }, "metadata.namespace") => String::new(),
            (_, "metadata.namespace") => text("/metadata/namespace"),

            (FieldLabels::Pod, "spec.nodeName") => text("/spec/nodeName"),
            (FieldLabels::Pod, "spec.restartPolicy") => {
                or_default(text("/spec/restartPolicy"), "Always")
            }
            (FieldLabels::Pod, "spec.schedulerName") => {
                or_default(text("/spec/schedulerName"), "default-scheduler")
            }
            (FieldLabels::Pod, "spec.serviceAccountName") => text("/spec/serviceAccountName"),
            (FieldLabels::Pod, "spec.hostNetwork") => {
                bool_at(object, "/spec/hostNetwork").to_string()
            }
            (FieldLabels::Pod, "status.phase") => text("/status/phase"),
            (FieldLabels::Pod, "status.podIP") => {
                // v1 -> internal conversion: podIP wins when set, else podIPs[0].
                let ip = text("/status/podIP");
                if ip.is_empty() {
                    text("/status/podIPs/0/ip")
                } else {
                    ip
                }
            }
            (FieldLabels::Pod, "status.nominatedNodeName") => text("/status/nominatedNodeName"),

            (FieldLabels::Node, "spec.unschedulable") => {
                bool_at(object, "/spec/unschedulable").to_string()
            }
            (FieldLabels::ReplicationController, "status.replicas") => {
                int_at(object, "/status/replicas")
            }
            (FieldLabels::Job, "status.successful") => int_at(object, "/status/succeeded"),
            (FieldLabels::Namespace, "status.phase") => or_default(text("/status/phase"), "Active"),
            (FieldLabels::Secret, "type") => or_default(text("/type"), "Opaque"),
            (FieldLabels::Service, "spec.clusterIP") => text("/spec/clusterIP"),
            (FieldLabels::Service, "spec.type") => or_default(text("/spec/type"), "ClusterIP"),

            (FieldLabels::CoreEvent, _) => event_value(
                object,
                field,
                "involvedObject",
                "source/component",
                "reportingComponent",
            ),
            (FieldLabels::EventsV1Event, _) => event_value(
                object,
                field,
                "regarding",
                "deprecatedSource/component",
                "reportingController",
            ),

            // Accepted by the conversion but absent from the field set (e.g. status.podIPs).
            _ => String::new(),
        }
    }
}

/// A custom resource's selectable field at `path` (`spec.color`): a string as it is, a number or
/// a boolean as printed, anything else (or nothing) as `""`, as apiextensions-apiserver reads
/// the path.
fn selectable_value(object: &Value, path: &str) -> String {
    let pointer: String = path.split('.').map(|s| format!("/{s}")).collect();
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// An event's selectable field, from a core/v1 or an events.k8s.io/v1 object.
fn event_value(
    object: &Value,
    field: &str,
    reference: &str,
    source_component: &str,
    reporting: &str,
) -> String {
    let text = |pointer: String| str_at(object, &pointer).to_owned();
    if let Some(sub) = field.strip_prefix("involvedObject.") {
        return text(format!("/{reference}/{sub}"));
    }
    match field {
        "reason" => text("/reason".to_owned()),
        "type" => text("/type".to_owned()),
        "reportingComponent" => text(format!("/{reporting}")),
        "source" => or_default(
            text(format!("/{source_component}")),
            str_at(object, &format!("/{reporting}")),
        ),
        _ => String::new(),
    }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn bool_at(object: &Value, pointer: &str) -> bool {
    object.pointer(pointer).and_then(Value::as_bool).unwrap_or(false)
}

fn int_at(object: &Value, pointer: &str) -> String {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0).to_string()
}

fn or_default(value: String, default: &str) -> String {
    if value.is_empty() {
        default.to_owned()
    } else {
        value
    }
}

/// The value of a selectable field of an object of a kind with these field labels, as
/// kube-apiserver compares it: a string, booleans as `"true"`/`"false"`, integers in decimal,
/// missing fields as `""` — except that fields the API always defaults read as their default when
/// missing (pods' `spec.restartPolicy` `Always` and `spec.schedulerName` `default-scheduler`,
/// secrets' `type` `Opaque`, services' `spec.type` `ClusterIP`, namespaces' `status.phase`
/// `Active`).
///
/// `field` is named as a client writes it in `fieldSelector` (`spec.host` on pods, `regarding.*`
/// and `reportingController` on events.k8s.io events). `None` if the kind does not accept the
/// field; the table and its sources are on [`FieldLabels`]. Every kind accepts `metadata.name`;
/// every one but nodes and namespaces accepts `metadata.namespace` (`""` on cluster-scoped
/// objects).
pub fn field_value(labels: FieldLabels, object: &Value, field: &str) -> Option<String> {
    let converted = labels.convert(field).ok()?;
    Some(labels.value(object, converted))
}
