//! Jobs (`jobs` in `batch/v1`): how the API server serves them.

use serde_json::{json, Map, Value};

use crate::defaults::{default_template, object_at, set_default};
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, ALL, NONE, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{
    at, field, go_label_selector_value, label_selector, pod_template, semantic_eq, shown,
    template_matches, text, Errors, Selector,
};

/// The `jobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "Job", "jobs", "job", true, NONE, ALL, STATUS, &Jobs);

/// The strategy for Jobs.
#[derive(Debug)]
pub struct Jobs;

impl crate::registry::form::Validate for Jobs {
    type Object = k8s_openapi::api::batch::v1::Job;
}

impl Strategy for Jobs {
    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Job
    }

    fn validate(&self, object: &Value, e: &mut Errors) {
        job(at(object, "spec"), e);
    }

    fn validate_update(&self, old: &Value, new: &Value, e: &mut Errors) {
        job_update(old, new, e);
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            default_job_spec(spec);
        }
        // A Job's template gets the pod defaults, restartPolicy Always included, which
        // validation then refuses: kube-apiserver asks for OnFailure or Never explicitly.
        default_template(object);
    }

    fn has_defaults(&self) -> bool {
        true
    }

    fn columns(&self, _rt: &ResourceType) -> Vec<Value> {
        definitions(&[
            NAME,
            col("Status", "string", "Status of the job."),
            col(
                "Completions",
                "string",
                "The desired number of successfully finished pods the job should be run with.",
            ),
            col("Duration", "string", "Time required to complete the job."),
            AGE,
        ])
    }

    fn cells(&self, _rt: &ResourceType, o: &Value) -> Vec<Value> {
        let name = name_cell(o);
        let age = age_cell(o);
        let completions = o.pointer("/spec/completions").and_then(Value::as_i64).unwrap_or(1);
        let succeeded = o.pointer("/status/succeeded").and_then(Value::as_i64).unwrap_or(0);
        let status = if succeeded >= completions { "Complete" } else { "Running" };
        vec![name, json!(status), json!(format!("{succeeded}/{completions}")), json!(""), age]
    }
}

/// `validateJobSpec` at `path` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
pub(crate) fn job_spec(spec: &Value, path: &str, e: &mut Errors) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        e.nonnegative(spec, key, &format!("{path}.{key}"));
    }
    if let Some(mode) = field(spec, "completionMode").and_then(Value::as_str) {
        match mode {
            "NonIndexed" => {}
            "Indexed" => {
                if field(spec, "completions").is_none() {
                    e.required(&format!("{path}.completions"), "when completion mode is Indexed");
                }
            }
            other => e.not_supported(
                &format!("{path}.completionMode"),
                &quote(other),
                &["NonIndexed", "Indexed"],
            ),
        }
    }
    pod_template(at(spec, "template"), &format!("{path}.template"), e);
    let rpath = format!("{path}.template.spec.restartPolicy");
    match text(at(at(spec, "template"), "spec"), "restartPolicy") {
        "Always" | "" => e.required(&rpath, "valid values: \"OnFailure\", \"Never\""),
        "OnFailure" | "Never" => {}
        other => e.not_supported(&rpath, &quote(other), &["OnFailure", "Never"]),
    }
}

/// `ValidateJobSpec`. This server does not generate a Job's selector, so none is required; one
/// given must match the template.
pub(crate) fn job(spec: &Value, e: &mut Errors) {
    job_spec(spec, "spec", e);
    if let Some(raw) = field(spec, "selector") {
        label_selector(Some(raw), "spec.selector", e);
        let selector = Selector::of(Some(raw));
        if !matches!(selector, Selector::Invalid) {
            template_matches(&selector, spec, e);
        }
    }
}

/// `ValidateJobSpecUpdate`: selector, completion mode and (unless suspended and never started,
/// for its scheduling directives) template are immutable; completions only change with
/// parallelism for Indexed Jobs.
fn job_update(old: &Value, new: &Value, e: &mut Errors) {
    let (before, after) = (at(old, "spec"), at(new, "spec"));
    let indexed = text(after, "completionMode") == "Indexed";
    if !semantic_eq(before.get("completions"), after.get("completions")) {
        if !indexed {
            e.invalid("spec.completions", &shown(after.get("completions")), "field is immutable");
        } else if after.get("completions") != after.get("parallelism") {
            e.invalid(
                "spec.completions",
                &shown(after.get("completions")),
                "can only be modified in tandem with spec.parallelism",
            );
        }
    }
    if !semantic_eq(before.get("selector"), after.get("selector")) {
        e.invalid(
            "spec.selector",
            &go_label_selector_value(field(after, "selector")),
            "field is immutable",
        );
    }
    let mut template = at(before, "template").clone();
    let unstarted = at(at(old, "status"), "startTime").is_null();
    if after.get("suspend") == Some(&Value::Bool(true)) && unstarted {
        // Scheduling directives of a suspended Job that never started may change.
        let new_template = at(after, "template");
        if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in ["labels", "annotations"] {
                meta.remove(key);
                if let Some(v) = at(new_template, "metadata").get(key) {
                    meta.insert(key.into(), v.clone());
                }
            }
        }
        if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
            for key in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                spec.remove(key);
                if let Some(v) = at(new_template, "spec").get(key) {
                    spec.insert(key.into(), v.clone());
                }
            }
        }
    }
    if !semantic_eq(Some(&template), after.get("template")) {
        e.invalid("spec.template", &shown(after.get("template")), "field is immutable");
    }
    if !semantic_eq(before.get("completionMode"), after.get("completionMode")) {
        e.invalid("spec.completionMode", &shown(after.get("completionMode")), "field is immutable");
    }
}

/// `SetDefaults_Job`: a Job with neither completions nor parallelism runs one pod to completion.
fn default_job_spec(spec: &mut Map<String, Value>) {
    let unset = |spec: &Map<String, Value>, key: &str| spec.get(key).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
}
