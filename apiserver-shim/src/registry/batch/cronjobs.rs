//! CronJobs (`cronjobs` in `batch/v1`): how the API server serves them.

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::{json, Value};

use crate::defaults::{default_pod_spec, object_at, set_default, set_default_status};
use crate::object::go_quote as quote;
use crate::registry::batch::jobs::{job_quantities, job_spec};
use crate::registry::{served, Strategy, Validate, ALL, STATUS};
use crate::resource::ResourceType;
use crate::validation::{go_label_selector, Errors};

/// The `cronjobs` resource type.
pub const TYPE: ResourceType =
    served("batch", "v1", "CronJob", "cronjobs", "cronjob", true, &["cj"], ALL, STATUS, &CronJobs);

/// The strategy for CronJobs.
#[derive(Debug)]
pub struct CronJobs;

impl Validate for CronJobs {
    type Object = CronJob;

    fn validate(&self, object: &CronJob, e: &mut Errors) {
        cron_job(object, e);
    }

    fn quantities<'a>(&self, object: &'a CronJob, found: &mut Vec<&'a Quantity>) {
        let job = object.spec.as_ref().and_then(|s| s.job_template.spec.as_ref());
        job_quantities(job, found);
    }
}

impl Strategy for CronJobs {
    fn pod_spec<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        object.pointer("/spec/jobTemplate/spec/template/spec").filter(|v| v.is_object())
    }

    fn defaults(&self, object: &mut Value) {
        // Its status is a struct, not a pointer, in Go: kube-apiserver always writes one.
        set_default_status(object, json!({}));
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
fn cron_job(object: &CronJob, e: &mut Errors) {
    let zero = CronJobSpec::default();
    let spec = object.spec.as_ref().unwrap_or(&zero);
    let schedule = spec.schedule.as_str();
    if schedule.is_empty() {
        e.required("spec.schedule", "");
    } else {
        if let Err(problem) = parse_cron(schedule) {
            e.invalid("spec.schedule", &quote(schedule), &problem.to_string());
        }
        if schedule.contains("TZ") {
            e.invalid(
                "spec.schedule",
                &quote(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            );
        }
    }
    e.nonnegative(spec.starting_deadline_seconds, "spec.startingDeadlineSeconds");
    match spec.concurrency_policy.as_deref().unwrap_or_default() {
        "Allow" | "Forbid" | "Replace" => {}
        "" => e.required("spec.concurrencyPolicy", ""),
        other => e.not_supported(
            "spec.concurrencyPolicy",
            &quote(other),
            &["Allow", "Forbid", "Replace"],
        ),
    }
    let zero_job = JobSpec::default();
    let job = spec.job_template.spec.as_ref().unwrap_or(&zero_job);
    job_spec(job, "spec.jobTemplate.spec", e);
    if let Some(selector) = job.selector.as_ref() {
        e.invalid(
            "spec.jobTemplate.spec.selector",
            &go_label_selector(Some(selector)),
            "`selector` will be auto-generated",
        );
    }
    if job.manual_selector == Some(true) {
        e.not_supported("spec.jobTemplate.spec.manualSelector", "true", &["nil", "false"]);
    }
    e.nonnegative(spec.successful_jobs_history_limit, "spec.successfulJobsHistoryLimit");
    e.nonnegative(spec.failed_jobs_history_limit, "spec.failedJobsHistoryLimit");
    let name = object.metadata.name.as_deref().unwrap_or_default();
    if name.len() > 52 {
        // The controller appends an 11-character suffix to name the Jobs (63 at most).
        e.invalid("metadata.name", &quote(name), "must be no more than 52 characters");
    }
}

const MONTHS: &[&str] =
    &["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// Why a schedule does not parse, in robfig/cron's words (kube-apiserver returns them).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The schedule is empty.
    #[error("empty spec string")]
    Empty,
    /// Not five fields.
    #[error("expected exactly 5 fields, found {}: [{}]", .0.len(), .0.join(" "))]
    FieldCount(Vec<String>),
    /// An `@every` duration that does not parse.
    #[error("failed to parse duration {spec}: {source}")]
    Duration {
        /// The descriptor (`@every 1d`).
        spec: String,
        /// Why the duration does not parse.
        source: carrel_machinery::duration::Error,
    },
    /// A descriptor that is not one of cron's.
    #[error("unrecognized descriptor: {0}")]
    Descriptor(String),
    /// A number that does not parse (`strconv.Atoi`).
    #[error(
        "failed to parse int from {expr}: strconv.Atoi: parsing {}: {}",
        quote(.expr),
        atoi_reason(.source)
    )]
    Int {
        /// The text.
        expr: String,
        /// Why it does not parse.
        source: std::num::ParseIntError,
    },
    /// A negative number.
    #[error("negative number ({n}) not allowed: {expr}")]
    Negative {
        /// The number.
        n: i64,
        /// The expression it is in.
        expr: String,
    },
    /// `N-M-O`.
    #[error("too many hyphens: {0}")]
    Hyphens(String),
    /// `N/M/O`.
    #[error("too many slashes: {0}")]
    Slashes(String),
    /// A range starting below the field's minimum.
    #[error("beginning of range ({start}) below minimum ({min}): {expr}")]
    BelowMinimum {
        /// The range's start.
        start: u64,
        /// The field's minimum.
        min: u64,
        /// The expression.
        expr: String,
    },
    /// A range ending above the field's maximum.
    #[error("end of range ({end}) above maximum ({max}): {expr}")]
    AboveMaximum {
        /// The range's end.
        end: u64,
        /// The field's maximum.
        max: u64,
        /// The expression.
        expr: String,
    },
    /// A range whose start is past its end.
    #[error("beginning of range ({start}) beyond end of range ({end}): {expr}")]
    Backwards {
        /// The range's start.
        start: u64,
        /// The range's end.
        end: u64,
        /// The expression.
        expr: String,
    },
    /// A step of 0.
    #[error("step of range should be a positive number: {0}")]
    ZeroStep(String),
}

/// Go's reason for an `strconv.Atoi` failure.
fn atoi_reason(e: &std::num::ParseIntError) -> &'static str {
    match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
            "value out of range"
        }
        _ => "invalid syntax",
    }
}

/// `cron.ParseStandard`: five fields (minute, hour, day of month, month, day of week) or a
/// descriptor (`@daily`, `@every 1h`, …); its error otherwise.
pub fn parse_cron(spec: &str) -> Result<(), ScheduleError> {
    if spec.is_empty() {
        return Err(ScheduleError::Empty);
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
        return Err(ScheduleError::FieldCount(fields.iter().map(|f| (*f).to_owned()).collect()));
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

pub(crate) fn descriptor(spec: &str) -> Result<(), ScheduleError> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match spec.strip_prefix("@every ") {
            Some(duration) => carrel_machinery::duration::parse(duration)
                .map(drop)
                .map_err(|source| ScheduleError::Duration { spec: spec.to_owned(), source }),
            None => Err(ScheduleError::Descriptor(spec.to_owned())),
        },
    }
}

/// `strconv.Atoi`, then robfig/cron's refusal of negative numbers.
fn cron_int(expr: &str) -> Result<u64, ScheduleError> {
    let n: i64 =
        expr.parse().map_err(|source| ScheduleError::Int { expr: expr.to_owned(), source })?;
    u64::try_from(n).map_err(|_| ScheduleError::Negative { n, expr: expr.to_owned() })
}

fn cron_int_or_name(expr: &str, names: &[&str]) -> Result<u64, ScheduleError> {
    let lower = expr.to_lowercase();
    match names.iter().position(|n| *n == lower) {
        // Months count from 1, days of the week from 0.
        Some(i) => Ok(i as u64 + u64::from(names.len() == 12)),
        None => cron_int(expr),
    }
}

/// robfig/cron's `getRange`: `*`, `?`, `N`, `N-M`, each with an optional `/step`.
fn cron_range(expr: &str, min: u64, max: u64, names: &[&str]) -> Result<(), ScheduleError> {
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
            _ => return Err(ScheduleError::Hyphens(expr.to_owned())),
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
        _ => return Err(ScheduleError::Slashes(expr.to_owned())),
    };
    let expr = expr.to_owned();
    if start < min {
        return Err(ScheduleError::BelowMinimum { start, min, expr });
    }
    if end > max {
        return Err(ScheduleError::AboveMaximum { end, max, expr });
    }
    if start > end {
        return Err(ScheduleError::Backwards { start, end, expr });
    }
    if step == 0 {
        return Err(ScheduleError::ZeroStep(expr));
    }
    Ok(())
}
