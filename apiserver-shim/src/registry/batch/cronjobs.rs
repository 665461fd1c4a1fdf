//! CronJobs (`cronjobs` in `batch/v1`): how the API server serves them.

use serde_json::{json, Value};

use crate::defaults::{default_pod_spec, object_at, set_default};
use crate::object::go_quote as quote;
use crate::registry::batch::jobs::job_spec;
use crate::registry::{served, Strategy, ALL, STATUS};
use crate::resource::ResourceType;
use crate::validation::{at, field, go_label_selector, text, Errors};

/// The `cronjobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "CronJob", "cronjobs", "cronjob", true, &["cj"], ALL, STATUS, &CronJobs);

/// The strategy for CronJobs.
#[derive(Debug)]
pub struct CronJobs;

impl Strategy for CronJobs {
    fn validate(&self, object: &Value, e: &mut Errors) {
        cron_job(object, e);
    }

    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/jobTemplate/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        if let Some(spec) = object_at(object, "spec") {
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
        }
        if let Some(pod) = object
            .pointer_mut("/spec/jobTemplate/spec/template/spec")
            .and_then(Value::as_object_mut)
        {
            default_pod_spec(pod);
        }
    }

    fn has_defaults(&self) -> bool {
        true
    }
}

/// `ValidateCronJobCreate` / `validateCronJobSpec`.
fn cron_job(object: &Value, e: &mut Errors) {
    let spec = at(object, "spec");
    let schedule = text(spec, "schedule");
    if schedule.is_empty() {
        e.required("spec.schedule", "");
    } else {
        if let Err(problem) = parse_cron(schedule) {
            e.invalid("spec.schedule", &quote(schedule), &problem);
        }
        if schedule.contains("TZ") {
            e.invalid(
                "spec.schedule",
                &quote(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            );
        }
    }
    e.nonnegative(spec, "startingDeadlineSeconds", "spec.startingDeadlineSeconds");
    match text(spec, "concurrencyPolicy") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => e.required("spec.concurrencyPolicy", ""),
        other => e.not_supported(
            "spec.concurrencyPolicy",
            &quote(other),
            &["Allow", "Forbid", "Replace"],
        ),
    }
    let job = at(at(spec, "jobTemplate"), "spec");
    job_spec(job, "spec.jobTemplate.spec", e);
    if let Some(selector) = field(job, "selector") {
        e.invalid(
            "spec.jobTemplate.spec.selector",
            &go_label_selector(Some(selector)),
            "`selector` will be auto-generated",
        );
    }
    if job.get("manualSelector") == Some(&Value::Bool(true)) {
        e.not_supported("spec.jobTemplate.spec.manualSelector", "true", &["nil", "false"]);
    }
    e.nonnegative(spec, "successfulJobsHistoryLimit", "spec.successfulJobsHistoryLimit");
    e.nonnegative(spec, "failedJobsHistoryLimit", "spec.failedJobsHistoryLimit");
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if name.len() > 52 {
        // The controller appends an 11-character suffix to name the Jobs (63 at most).
        e.invalid("metadata.name", &quote(name), "must be no more than 52 characters");
    }
}

const MONTHS: &[&str] =
    &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// `cron.ParseStandard`: five fields (minute, hour, day of month, month, day of week) or a
/// descriptor (`@daily`, `@every 1h`, …); its error message otherwise.
pub fn parse_cron(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let spec = if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        // The time zone itself is not checked here; the TZ error says enough.
        spec.find(' ').map_or("", |i| spec[i..].trim())
    } else {
        spec
    };
    if spec.starts_with('@') {
        return descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let bounds: [(u64, u64, &[&str]); 5] =
        [(0, 59, &[]), (0, 23, &[]), (1, 31, &[]), (1, 12, MONTHS), (0, 6, DAYS)];
    for (field, (min, max, names)) in fields.iter().zip(bounds) {
        for expr in field.split(',').filter(|e| !e.is_empty()) {
            cron_range(expr, min, max, names)?;
        }
    }
    Ok(())
}

pub(crate) fn descriptor(spec: &str) -> Result<(), String> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match spec.strip_prefix("@every ") {
            Some(duration) => carrel_machinery::duration::parse(duration)
                .map(drop)
                .map_err(|e| format!("failed to parse duration {spec}: {e}")),
            None => Err(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// `strconv.Atoi`, then robfig/cron's refusal of negative numbers.
fn cron_int(expr: &str) -> Result<u64, String> {
    let n: i64 = expr.parse().map_err(|e: std::num::ParseIntError| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("failed to parse int from {expr}: strconv.Atoi: parsing {}: {why}", quote(expr))
    })?;
    u64::try_from(n).map_err(|_| format!("negative number ({n}) not allowed: {expr}"))
}

fn cron_int_or_name(expr: &str, names: &[&str]) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    match names.iter().position(|n| *n == lower) {
        // Months count from 1, days of the week from 0.
        Some(i) => Ok(i as u64 + u64::from(names.len() == 12)),
        None => cron_int(expr),
    }
}

/// robfig/cron's `getRange`: `*`, `?`, `N`, `N-M`, each with an optional `/step`.
fn cron_range(expr: &str, min: u64, max: u64, names: &[&str]) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let (start, mut end) = if low_high[0] == "*" || low_high[0] == "?" {
        (min, max)
    } else {
        let start = cron_int_or_name(low_high[0], names)?;
        match low_high.len() {
            1 => (start, start),
            2 => (start, cron_int_or_name(low_high[1], names)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = cron_int(range_and_step[1])?;
            if single {
                end = max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < min {
        return Err(format!("beginning of range ({start}) below minimum ({min}): {expr}"));
    }
    if end > max {
        return Err(format!("end of range ({end}) above maximum ({max}): {expr}"));
    }
    if start > end {
        return Err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}"));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}
