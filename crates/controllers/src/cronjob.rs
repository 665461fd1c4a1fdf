//! The CronJob controller (kube-controller-manager's `cronjob-controller`,
//! `pkg/controller/cronjob/cronjob_controllerv2.go`): makes a CronJob's Jobs at its schedule's
//! times, in its `timeZone`.
//!
//! Schedules are the standard five fields and the macros `@yearly`/`@annually`, `@monthly`,
//! `@weekly`, `@daily`/`@midnight` and `@hourly`, read by `croner` in the time zone of
//! `chrono-tz`. Where it differs from Kubernetes: `@every` (robfig/cron's, not standard cron) and
//! croner's extensions (`L`, `W`, `#`, `+`) are refused; a Job made by hand from the CronJob
//! (`cronjob.kubernetes.io/instantiate: manual`, as `kubectl create job --from=cronjob/…` makes
//! it) draws no `UnexpectedJob` event and never joins `status.active`.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::ResourceExt;
use tokio::sync::watch;

use carrel_events::{EventTarget, EventType, Recorder};

use crate::job::{finished_condition, instant, time};
use crate::{owners, Context, Error};

/// The component the CronJob controller writes Events as.
pub const COMPONENT: &str = "cronjob-controller";
/// The annotation giving a Job the time it was scheduled for (RFC 3339, in the CronJob's zone).
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// The annotation kubectl puts on a Job it makes from a CronJob by hand (value `manual`).
pub const INSTANTIATE: &str = "cronjob.kubernetes.io/instantiate";
/// Past this many missed schedules, the controller says so (`TooManyMissedTimes`).
const TOO_MANY_MISSED: i64 = 100;
/// A little past the next schedule time, so that the wake-up falls after it.
const NEXT_SCHEDULE_DELTA: Duration = Duration::from_millis(100);

/// What time it is for the controller.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// How the CronJob controller tells time.
#[derive(Clone)]
pub struct Config {
    /// The current time (the system clock by default; tests drive their own).
    pub clock: Clock,
}

impl Default for Config {
    fn default() -> Config {
        Config { clock: Arc::new(Utc::now) }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config").finish_non_exhaustive()
    }
}

/// A CronJob's schedule, in its time zone.
#[derive(Debug)]
pub struct Schedule {
    cron: croner::Cron,
    zone: chrono_tz::Tz,
}

/// Why a schedule or time zone cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// The schedule is not a standard cron schedule.
    #[error("unparseable schedule: {0:?} : {1}")]
    Schedule(String, String),
    /// The time zone is unknown.
    #[error("invalid timeZone: {0:?}: unknown time zone {0}")]
    TimeZone(String),
}

const NAMES: [&str; 19] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", "SUN",
    "MON", "TUE", "WED", "THU", "FRI", "SAT",
];

impl Schedule {
    /// `schedule` in `time_zone` (UTC when `None`).
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Schedule, ScheduleError> {
        let refuse = |why: &str| ScheduleError::Schedule(schedule.to_owned(), why.to_owned());
        let zone = match time_zone {
            None => chrono_tz::UTC,
            Some(name) => name.parse().map_err(|_| ScheduleError::TimeZone(name.to_owned()))?,
        };
        let trimmed = schedule.trim();
        let fields = if let Some(name) = trimmed.strip_prefix('@') {
            match name.to_ascii_lowercase().as_str() {
                "yearly" | "annually" => "0 0 1 1 *",
                "monthly" => "0 0 1 * *",
                "weekly" => "0 0 * * 0",
                "daily" | "midnight" => "0 0 * * *",
                "hourly" => "0 * * * *",
                _ => return Err(refuse(&format!("unrecognized descriptor: {trimmed}"))),
            }
            .to_owned()
        } else {
            let count = trimmed.split_whitespace().count();
            if count != 5 {
                return Err(refuse(&format!(
                    "expected exactly 5 fields, found {count}: {trimmed}"
                )));
            }
            for token in trimmed.split(|c: char| c.is_whitespace() || matches!(c, ',' | '-' | '/'))
            {
                let plain = token.chars().all(|c| c.is_ascii_digit() || matches!(c, '*' | '?'));
                if !plain && !NAMES.contains(&token.to_ascii_uppercase().as_str()) {
                    return Err(refuse(&format!("failed to parse {token:?}")));
                }
            }
            trimmed.to_owned()
        };
        let parser = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build();
        let cron = parser.parse(&fields).map_err(|e| refuse(&e.to_string()))?;
        Ok(Schedule { cron, zone })
    }

    /// The first time of the schedule strictly after `after`.
    pub fn next(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.zone);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(next.with_timezone(&Utc))
    }
}

/// How many schedule times were missed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missed {
    /// None.
    None,
    /// A few.
    Few,
    /// More than 100.
    Many,
}

/// What a CronJob's scheduling reads of it.
#[derive(Clone, Copy, Debug)]
pub struct Times {
    /// When it was created.
    pub created: DateTime<Utc>,
    /// `status.lastScheduleTime`.
    pub last_scheduled: Option<DateTime<Utc>>,
    /// `spec.startingDeadlineSeconds`.
    pub starting_deadline: Option<i64>,
}

/// The earliest time considered, the most recent schedule time not after `now` (if any), and how
/// many were missed (`mostRecentScheduleTime`).
pub fn most_recent_schedule_time(
    times: Times,
    now: DateTime<Utc>,
    schedule: &Schedule,
    with_deadline: bool,
) -> (DateTime<Utc>, Option<DateTime<Utc>>, Missed) {
    let mut earliest = times.last_scheduled.unwrap_or(times.created);
    if let Some(deadline) = times.starting_deadline.filter(|_| with_deadline) {
        let window_start = now - chrono::Duration::seconds(deadline);
        if window_start > earliest {
            earliest = window_start;
        }
    }
    let Some(t1) = schedule.next(earliest) else { return (earliest, None, Missed::None) };
    if now < t1 {
        return (earliest, None, Missed::None);
    }
    let Some(t2) = schedule.next(t1) else { return (earliest, Some(t1), Missed::None) };
    if now < t2 {
        return (earliest, Some(t1), Missed::None);
    }
    let between = (t2 - t1).num_seconds().max(1);
    let missed = (now - t1).num_seconds() / between + 1;
    let potential = t1 + chrono::Duration::seconds((missed - 2) * between);
    let mut most_recent = None;
    let mut t = schedule.next(potential);
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = schedule.next(at);
    }
    let missed = if missed > TOO_MANY_MISSED { Missed::Many } else { Missed::Few };
    (earliest, most_recent, missed)
}

/// How long until the schedule time after the most recent one (`nextScheduleTimeDuration`).
pub fn next_schedule_wait(
    times: Times,
    now: DateTime<Utc>,
    schedule: &Schedule,
) -> Option<Duration> {
    let (earliest, most_recent, _) = most_recent_schedule_time(times, now, schedule, false);
    let next = schedule.next(most_recent.unwrap_or(earliest))?;
    Some((next - now).to_std().unwrap_or_default() + NEXT_SCHEDULE_DELTA)
}

/// The name of the CronJob's Job for `scheduled`: `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, scheduled: DateTime<Utc>) -> String {
    format!("{cronjob}-{}", scheduled.timestamp().div_euclid(60))
}

struct State {
    context: Arc<Context>,
    config: Config,
    recorder: Recorder,
}

/// Run the CronJob controller until `stop` is true.
pub async fn run(context: Arc<Context>, config: Config, stop: watch::Receiver<bool>) {
    let client = context.client.clone();
    let state = Arc::new(State { recorder: context.recorder(COMPONENT), context, config });
    Controller::new(Api::<CronJob>::all(client.clone()), watcher::Config::default())
        .owns(Api::<Job>::all(client), watcher::Config::default())
        .graceful_shutdown_on(crate::stopped(&stop))
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

fn error_policy(cronjob: Arc<CronJob>, error: &Error, _state: Arc<State>) -> Action {
    tracing::debug!(cronjob = %cronjob.name_any(), %error, "cronjob sync failed");
    Action::requeue(Duration::from_secs(5))
}

fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

fn is_manual(job: &Job) -> bool {
    job.annotations().get(INSTANTIATE).is_some_and(|v| v == "manual")
}

type Events = Vec<(EventType, &'static str, String)>;

async fn delete_job(api: &Api<Job>, name: &str, events: &mut Events) -> Result<(), Error> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            events.push((EventType::Normal, "SuccessfulDelete", format!("Deleted job {name}")));
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => {
            events.push((EventType::Warning, "FailedDelete", format!("Deleted job: {e}")));
            Err(e.into())
        }
    }
}

async fn reconcile(cronjob: Arc<CronJob>, state: Arc<State>) -> Result<Action, Error> {
    let (Some(uid), Some(namespace)) = (cronjob.uid(), cronjob.namespace()) else {
        return Err(Error::Invalid("a CronJob without uid or namespace".into()));
    };
    let name = cronjob.name_any();
    let now = (state.config.clock)();
    let api: Api<Job> = Api::namespaced(state.context.client.clone(), &namespace);
    let cj_api: Api<CronJob> = Api::namespaced(state.context.client.clone(), &namespace);
    let jobs: Vec<Job> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| owners::is_controlled_by(&j.metadata, &uid))
        .collect();
    let spec = cronjob.spec.clone().unwrap_or_default();
    let mut status = cronjob.status.clone().unwrap_or_default();
    let mut active = status.active.clone().unwrap_or_default();
    let mut events: Events = Vec::new();

    // 1. The active list against the Jobs as they are.
    let mut fresh: Option<CronJob> = None;
    for job in &jobs {
        let job_uid = job.uid();
        let found = active.iter().any(|r| r.uid == job_uid);
        let finished = finished_condition(job);
        if !found && finished.is_none() {
            // The CronJob read may predate the status write that listed the Job: look again.
            if fresh.is_none() && !is_manual(job) {
                fresh = Some(cj_api.get(&name).await?);
            }
            let listed = fresh
                .as_ref()
                .and_then(|f| f.status.as_ref())
                .and_then(|s| s.active.as_ref()?.iter().find(|r| r.uid == job_uid).cloned());
            if let Some(reference) = listed {
                active.push(reference);
            } else if !is_manual(job) {
                let message = format!(
                    "Saw a job that the controller did not create or forgot: {}",
                    job.name_any()
                );
                events.push((EventType::Warning, "UnexpectedJob", message));
            }
        } else if let (true, Some(condition)) = (found, finished) {
            active.retain(|r| r.uid != job_uid);
            let message =
                format!("Saw completed job: {}, condition: {}", job.name_any(), condition.type_);
            events.push((EventType::Normal, "SawCompletedJob", message));
        }
        if finished.is_some_and(|c| c.type_ == "Complete") {
            let completed = job.status.as_ref().and_then(|s| s.completion_time.as_ref());
            if let Some(at) = completed {
                let later =
                    status.last_successful_time.as_ref().is_none_or(|t| instant(t) < instant(at));
                if later {
                    status.last_successful_time = Some(at.clone());
                }
            }
        }
    }
    let mut kept = Vec::new();
    for reference in active {
        if jobs.iter().any(|j| j.uid() == reference.uid) {
            kept.push(reference);
            continue;
        }
        let job_name = reference.name.clone().unwrap_or_default();
        if api.get_opt(&job_name).await?.is_some() {
            kept.push(reference);
        } else {
            let message = format!("Active job went missing: {job_name}");
            events.push((EventType::Normal, "MissingJob", message));
        }
    }
    let mut active = kept;

    // 2. The schedule.
    let mut requeue = None;
    let mut refusal = None;
    if cronjob.metadata.deletion_timestamp.is_none() && spec.suspend != Some(true) {
        match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
            Err(error) => {
                let reason = match error {
                    ScheduleError::Schedule(..) => "UnparseableSchedule",
                    ScheduleError::TimeZone(_) => "UnknownTimeZone",
                };
                events.push((EventType::Warning, reason, error.to_string()));
            }
            Ok(schedule) => {
                let times = Times {
                    created: cronjob.metadata.creation_timestamp.as_ref().map_or(now, instant),
                    last_scheduled: status.last_schedule_time.as_ref().map(instant),
                    starting_deadline: spec.starting_deadline_seconds,
                };
                let (_, most_recent, missed) =
                    most_recent_schedule_time(times, now, &schedule, true);
                if missed == Missed::Many && most_recent.is_some() {
                    let message = "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew";
                    events.push((EventType::Warning, "TooManyMissedTimes", message.into()));
                }
                if let Some(scheduled) = most_recent {
                    let job_name = job_name(&name, scheduled);
                    let too_late = spec
                        .starting_deadline_seconds
                        .is_some_and(|d| scheduled + chrono::Duration::seconds(d) < now);
                    let done = active.iter().any(|r| r.name.as_deref() == Some(job_name.as_str()))
                        || status.last_schedule_time.as_ref().map(instant) == Some(scheduled);
                    let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
                    if too_late {
                        let at = scheduled.format("%a, %d %b %Y %H:%M:%S %z");
                        let message = format!("Missed scheduled time to start a job: {at}");
                        events.push((EventType::Warning, "MissSchedule", message));
                    } else if done {
                    } else if policy == "Forbid" && !active.is_empty() {
                        let message = "Not starting job because prior execution is running and concurrency policy is Forbid";
                        events.push((EventType::Normal, "JobAlreadyActive", message.into()));
                    } else {
                        if policy == "Replace" {
                            for reference in std::mem::take(&mut active) {
                                let old = reference.name.clone().unwrap_or_default();
                                delete_job(&api, &old, &mut events).await?;
                            }
                        }
                        match create_job(&api, &cronjob, &spec, &job_name, scheduled, &uid).await {
                            Ok(Some((job, made))) => {
                                if made {
                                    let message = format!("Created job {job_name}");
                                    events.push((EventType::Normal, "SuccessfulCreate", message));
                                }
                                if !active.iter().any(|r| r.uid == job.uid()) {
                                    active.push(job_ref(&job));
                                }
                                status.last_schedule_time = Some(time(scheduled));
                            }
                            Ok(None) => {}
                            Err(error) => {
                                let message = format!("Error creating job: {error}");
                                events.push((EventType::Warning, "FailedCreate", message));
                                refusal = Some(error);
                            }
                        }
                    }
                }
                let times = Times {
                    last_scheduled: status.last_schedule_time.as_ref().map(instant),
                    ..times
                };
                requeue = next_schedule_wait(times, now, &schedule);
            }
        }
    }

    // 3. History limits.
    let mut history: [(Vec<&Job>, Option<i32>); 2] = [
        (Vec::new(), spec.successful_jobs_history_limit),
        (Vec::new(), spec.failed_jobs_history_limit),
    ];
    for job in &jobs {
        match finished_condition(job).map(|c| c.type_.as_str()) {
            Some("Complete") => history[0].0.push(job),
            Some("Failed") => history[1].0.push(job),
            _ => {}
        }
    }
    for (mut finished, limit) in history {
        let Some(limit) = limit else { continue };
        let excess = finished.len().saturating_sub(limit.max(0) as usize);
        // Oldest start first; Jobs that never started count as newest.
        finished.sort_by(|a, b| {
            let start =
                |j: &Job| j.status.as_ref().and_then(|s| s.start_time.as_ref()).map(instant);
            match (start(a), start(b)) {
                (Some(x), Some(y)) if x != y => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                _ => a.name_any().cmp(&b.name_any()),
            }
        });
        for job in finished.into_iter().take(excess) {
            delete_job(&api, &job.name_any(), &mut events).await?;
            active.retain(|r| r.uid != job.uid());
        }
    }

    // 4. Status, then Events.
    status.active = (!active.is_empty()).then_some(active);
    let mut written = Ok(());
    if cronjob.status.as_ref() != Some(&status) {
        let mut current = (*cronjob).clone();
        current.status = Some(status);
        written = write_status(&cj_api, current).await;
    }
    let target = EventTarget {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        namespace: namespace.clone(),
        name: name.clone(),
        uid: Some(uid.clone()),
    };
    for (kind, reason, message) in events {
        if let Err(error) = state.recorder.record(&target, kind, reason, &message).await {
            tracing::debug!(%error, "recording a cronjob event failed");
        }
    }
    // What was done is told even when the status could not be written (a conflict): the next
    // sync finds the Job made and does not make or tell it again.
    written?;
    if let Some(error) = refusal {
        return Err(error);
    }
    state.context.wakeups.after(crate::wakeup_key("cronjob", &namespace, &name), requeue);
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Write `cronjob`'s status; when its metadata changed meanwhile (a conflict), write it again
/// over the newer object: this controller is the one writer of a CronJob's status.
async fn write_status(api: &Api<CronJob>, cronjob: CronJob) -> Result<(), kube::Error> {
    let name = cronjob.name_any();
    match api.replace_status(&name, &PostParams::default(), &cronjob).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let mut newer = api.get(&name).await?;
            newer.status = cronjob.status;
            api.replace_status(&name, &PostParams::default(), &newer).await.map(drop)
        }
        other => other.map(drop),
    }
}

/// Make the Job for `scheduled` (`getJobFromTemplate2`); a Job of that name the CronJob already
/// controls is taken as made (`(job, false)`), one it does not control is left alone (`None`).
async fn create_job(
    api: &Api<Job>,
    cronjob: &CronJob,
    spec: &k8s_openapi::api::batch::v1::CronJobSpec,
    name: &str,
    scheduled: DateTime<Utc>,
    uid: &str,
) -> Result<Option<(Job, bool)>, Error> {
    let template = &spec.job_template;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    let zone: chrono_tz::Tz =
        spec.time_zone.as_deref().and_then(|z| z.parse().ok()).unwrap_or(chrono_tz::UTC);
    let stamp = scheduled.with_timezone(&zone).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    annotations.insert(SCHEDULED_TIMESTAMP.into(), stamp);
    let owner = owners::controller_ref(cronjob)
        .ok_or_else(|| Error::Invalid("a CronJob without name or uid".into()))?;
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: cronjob.namespace(),
            labels: meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    match api.create(&PostParams::default(), &job).await {
        Ok(made) => Ok(Some((made, true))),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = api.get(name).await?;
            if owners::is_controlled_by(&existing.metadata, uid) {
                Ok(Some((existing, false)))
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_schedule_in_a_time_zone_fires_at_its_local_time() {
        let paris = Schedule::parse("0 9 * * *", Some("Europe/Paris")).unwrap();
        // Winter: UTC+1; summer: UTC+2.
        assert_eq!(paris.next(at("2026-01-15T00:00:00Z")), Some(at("2026-01-15T08:00:00Z")));
        assert_eq!(paris.next(at("2026-07-15T00:00:00Z")), Some(at("2026-07-15T07:00:00Z")));
        let utc = Schedule::parse("0 9 * * *", None).unwrap();
        assert_eq!(utc.next(at("2026-01-15T09:00:00Z")), Some(at("2026-01-16T09:00:00Z")));
        let ny = Schedule::parse("30 1 * * MON", Some("America/New_York")).unwrap();
        assert_eq!(ny.next(at("2026-01-01T00:00:00Z")), Some(at("2026-01-05T06:30:00Z")));
    }

    #[test]
    fn macros_are_read_and_non_standard_schedules_refused() {
        let cases = [
            ("@hourly", "2026-01-01T01:00:00Z"),
            ("@daily", "2026-01-02T00:00:00Z"),
            ("@midnight", "2026-01-02T00:00:00Z"),
            ("@weekly", "2026-01-04T00:00:00Z"),
            ("@monthly", "2026-02-01T00:00:00Z"),
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("*/15 * * * *", "2026-01-01T00:15:00Z"),
            ("0 0 1,15 jan-mar *", "2026-01-15T00:00:00Z"),
        ];
        for (schedule, next) in cases {
            let parsed = Schedule::parse(schedule, None).unwrap();
            assert_eq!(parsed.next(at("2026-01-01T00:00:00Z")), Some(at(next)), "{schedule}");
        }
        for bad in ["@every 5m", "* * * *", "0 * * * * *", "0 0 L * *", "0 0 * * 5#2", "x * * * *"]
        {
            assert!(Schedule::parse(bad, None).is_err(), "{bad}");
        }
        assert!(matches!(
            Schedule::parse("@daily", Some("Mars/Base")),
            Err(ScheduleError::TimeZone(_))
        ));
    }

    #[test]
    fn the_most_recent_missed_time_and_how_many_were_missed() {
        let every_minute = Schedule::parse("* * * * *", None).unwrap();
        let created = at("2026-01-01T00:00:30Z");
        let times = Times { created, last_scheduled: None, starting_deadline: None };
        let (_, recent, missed) =
            most_recent_schedule_time(times, at("2026-01-01T00:00:59Z"), &every_minute, true);
        assert_eq!((recent, missed), (None, Missed::None));
        let (_, recent, missed) =
            most_recent_schedule_time(times, at("2026-01-01T00:01:10Z"), &every_minute, true);
        assert_eq!((recent, missed), (Some(at("2026-01-01T00:01:00Z")), Missed::None));
        let (_, recent, missed) =
            most_recent_schedule_time(times, at("2026-01-01T00:05:10Z"), &every_minute, true);
        assert_eq!((recent, missed), (Some(at("2026-01-01T00:05:00Z")), Missed::Few));
        let (_, recent, missed) =
            most_recent_schedule_time(times, at("2026-01-01T03:00:10Z"), &every_minute, true);
        assert_eq!((recent, missed), (Some(at("2026-01-01T03:00:00Z")), Missed::Many));
        // A starting deadline bounds how far back the controller looks.
        let bounded = Times { starting_deadline: Some(30), ..times };
        let (_, _, missed) =
            most_recent_schedule_time(bounded, at("2026-01-01T03:00:10Z"), &every_minute, true);
        assert_eq!(missed, Missed::None);
        let wait = next_schedule_wait(times, at("2026-01-01T00:00:40Z"), &every_minute).unwrap();
        assert_eq!(wait, Duration::from_millis(20_100));
        assert_eq!(job_name("report", at("2026-01-01T00:01:00Z")), "report-29453761");
    }
}
