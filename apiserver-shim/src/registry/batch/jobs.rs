//! Jobs (`jobs` in `batch/v1`): how the API server serves them.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Map, Value};

use crate::defaults::{default_template, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::registry::{served, Strategy, Validate, ALL, NONE, STATUS};
use crate::resource::ResourceType;
use crate::selector::FieldLabels;
use crate::table::{age_cell, col, definitions, name_cell, AGE, NAME};
use crate::validation::{
    go_label_selector, label_selector, pod_quantities, pod_template, same, same_selector, shown,
    template_matches, Errors, Selector,
};

/// The `jobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "Job", "jobs", "job", true, NONE, ALL, STATUS, &Jobs);

/// The strategy for Jobs.
#[derive(Debug)]
pub struct Jobs;

impl Validate for Jobs {
    type Object = Job;

    fn validate(&self, object: &Job, e: &mut Errors) {
        job(object.spec.as_ref(), e);
    }

    fn validate_update(&self, old: &Job, new: &Job, e: &mut Errors) {
        job_update(old, new, e);
    }

    fn quantities<'a>(&self, object: &'a Job, found: &mut Vec<&'a Quantity>) {
        job_quantities(object.spec.as_ref(), found);
    }
}

/// What a delete of a Job that leaves the propagation unset is told (kube-apiserver's words).
pub const ORPHANS_PODS: &str = "child pods are preserved by default when jobs are deleted; set \
     propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this \
     warning";

impl Strategy for Jobs {
    fn orphans_by_default(&self) -> Option<&'static str> {
        Some(ORPHANS_PODS)
    }

    fn field_labels(&self, _rt: &ResourceType) -> FieldLabels {
        FieldLabels::Job
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({}));
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

/// The resource quantities of a Job's pod template.
pub(crate) fn job_quantities<'a>(spec: Option<&'a JobSpec>, found: &mut Vec<&'a Quantity>) {
    pod_quantities(spec.and_then(|s| s.template.spec.as_ref()), found);
}

/// `validateJobSpec` at `path` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
pub(crate) fn job_spec(spec: &JobSpec, path: &str, e: &mut Errors) {
    e.nonnegative(spec.parallelism, &format!("{path}.parallelism"));
    e.nonnegative(spec.completions, &format!("{path}.completions"));
    e.nonnegative(spec.active_deadline_seconds, &format!("{path}.activeDeadlineSeconds"));
    e.nonnegative(spec.backoff_limit, &format!("{path}.backoffLimit"));
    e.nonnegative(spec.ttl_seconds_after_finished, &format!("{path}.ttlSecondsAfterFinished"));
    if let Some(mode) = spec.completion_mode.as_deref() {
        match mode {
            "NonIndexed" => {}
            "Indexed" => {
                if spec.completions.is_none() {
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
    pod_template(Some(&spec.template), &format!("{path}.template"), e);
    let rpath = format!("{path}.template.spec.restartPolicy");
    let pod = spec.template.spec.as_ref();
    match pod.and_then(|p| p.restart_policy.as_deref()).unwrap_or_default() {
        "Always" | "" => e.required(&rpath, "valid values: \"OnFailure\", \"Never\""),
        "OnFailure" | "Never" => {}
        other => e.not_supported(&rpath, &quote(other), &["OnFailure", "Never"]),
    }
}

/// `ValidateJobSpec`. This server does not generate a Job's selector, so none is required; one
/// given must match the template.
pub(crate) fn job(spec: Option<&JobSpec>, e: &mut Errors) {
    let zero = JobSpec::default();
    let spec = spec.unwrap_or(&zero);
    job_spec(spec, "spec", e);
    if let Some(raw) = spec.selector.as_ref() {
        label_selector(Some(raw), "spec.selector", e);
        let selector = Selector::of(Some(raw));
        if !matches!(selector, Selector::Invalid) {
            template_matches(&selector, Some(&spec.template), e);
        }
    }
}

/// `ValidateJobSpecUpdate`: selector, completion mode and (unless suspended and never started,
/// for its scheduling directives) template are immutable; completions only change with
/// parallelism for Indexed Jobs.
fn job_update(old: &Job, new: &Job, e: &mut Errors) {
    let zero = JobSpec::default();
    let before = old.spec.as_ref().unwrap_or(&zero);
    let after = new.spec.as_ref().unwrap_or(&zero);
    let indexed = after.completion_mode.as_deref() == Some("Indexed");
    if before.completions != after.completions {
        if !indexed {
            e.invalid("spec.completions", &shown(after.completions.as_ref()), "field is immutable");
        } else if after.completions != after.parallelism {
            e.invalid(
                "spec.completions",
                &shown(after.completions.as_ref()),
                "can only be modified in tandem with spec.parallelism",
            );
        }
    }
    if !same_selector(before.selector.as_ref(), after.selector.as_ref()) {
        e.invalid(
            "spec.selector",
            &go_label_selector(after.selector.as_ref()),
            "field is immutable",
        );
    }
    let mut template = before.template.clone();
    let unstarted = old.status.as_ref().is_none_or(|s| s.start_time.is_none());
    if after.suspend == Some(true) && unstarted {
        // Scheduling directives of a suspended Job that never started may change.
        let new_template = &after.template;
        if let Some(meta) = template.metadata.as_mut() {
            let new_meta = new_template.metadata.as_ref();
            meta.labels = new_meta.and_then(|m| m.labels.clone());
            meta.annotations = new_meta.and_then(|m| m.annotations.clone());
        }
        if let Some(spec) = template.spec.as_mut() {
            let new_spec = new_template.spec.as_ref();
            spec.node_selector = new_spec.and_then(|s| s.node_selector.clone());
            spec.tolerations = new_spec.and_then(|s| s.tolerations.clone());
            spec.affinity = new_spec.and_then(|s| s.affinity.clone());
            spec.scheduling_gates = new_spec.and_then(|s| s.scheduling_gates.clone());
        }
    }
    if template != after.template {
        e.invalid("spec.template", &shown(Some(&after.template)), "field is immutable");
    }
    if !same(before.completion_mode.as_ref(), after.completion_mode.as_ref()) {
        e.invalid(
            "spec.completionMode",
            &shown(after.completion_mode.as_ref()),
            "field is immutable",
        );
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
