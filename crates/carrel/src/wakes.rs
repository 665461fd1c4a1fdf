//! Idle tenants opened again when their controllers are due: a tenant closed while idle runs no
//! controller, so a CronJob's next schedule, a Job's deadline or its time to live would pass
//! unseen. When a tenant's controllers stop they say when they are next due
//! ([`carrel_controllers::Wakeups`]); that time is kept in the host `Tenant`'s
//! `status.nextWakeTime` (so a restarted `carrel up`, which opens no tenant, knows it too) and
//! one timer per tenant opens it then. No periodic work: timers only, one per tenant due.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, SecondsFormat, Utc};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use parking_lot::Mutex;
use serde_json::json;

use carrel_apiserver::http::Clusters;
use carrel_apiserver::tenant::types::Tenant;

/// The wake-ups of every tenant of one `carrel up`.
pub struct Wakes {
    host: kube::Client,
    handle: tokio::runtime::Handle,
    /// What opens a tenant: set once tenants are served.
    clusters: OnceLock<Arc<Clusters>>,
    /// Each served tenant's `status.nextWakeTime` as last read or written.
    recorded: Mutex<HashMap<String, Option<String>>>,
    /// The timer of each tenant due to wake.
    timers: Mutex<HashMap<String, tokio::task::AbortHandle>>,
}

impl std::fmt::Debug for Wakes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wakes").field("due", &self.timers.lock().len()).finish_non_exhaustive()
    }
}

impl Wakes {
    pub fn new(host: kube::Client, handle: tokio::runtime::Handle) -> Arc<Wakes> {
        Arc::new(Wakes {
            host,
            handle,
            clusters: OnceLock::new(),
            recorded: Mutex::default(),
            timers: Mutex::default(),
        })
    }

    /// Open tenants through `clusters` when they are due, starting with those whose host
    /// objects say so now (a restart serves every tenant closed).
    pub fn start(self: &Arc<Self>, clusters: Arc<Clusters>) {
        if self.clusters.set(clusters).is_err() {
            return;
        }
        let wakes = self.clone();
        self.handle.spawn(async move {
            let tenants: Api<Tenant> = Api::all(wakes.host.clone());
            match tenants.list(&ListParams::default()).await {
                Ok(list) => {
                    for tenant in list.items {
                        let Some(name) = tenant.metadata.name.clone() else { continue };
                        let recorded = tenant.status.and_then(|s| s.next_wake_time);
                        let at = recorded.as_deref().and_then(parse);
                        wakes.recorded.lock().entry(name.clone()).or_insert(recorded);
                        if let Some(at) = at {
                            wakes.wake_at(&name, at);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "listing tenants for their wake-ups"),
            }
        });
    }

    /// Tenant `name` is served (open), as host object `recorded` says of its next wake-up: no
    /// timer is needed while it is open.
    pub fn serving(&self, name: &str, recorded: Option<String>) {
        self.recorded.lock().insert(name.to_owned(), recorded);
        if let Some(timer) = self.timers.lock().remove(name) {
            timer.abort();
        }
    }

    /// Tenant `name` is gone: nothing is kept of it.
    pub fn gone(&self, name: &str) {
        self.recorded.lock().remove(name);
        if let Some(timer) = self.timers.lock().remove(name) {
            timer.abort();
        }
    }

    /// Tenant `name`'s controllers stopped (it closed), due next at `next`: recorded on its
    /// host object when that changes, and a timer set.
    ///
    /// Controllers stopped soon after they started may not have looked at every object yet, so
    /// a time recorded before that is still to come is kept (the earlier of the two): a time is
    /// never lost, and one that was for an object since gone costs one opening at most.
    pub async fn stopped(self: &Arc<Self>, name: &str, next: Option<DateTime<Utc>>) {
        let (value, changed) = {
            let recorded = self.recorded.lock();
            // Gone meanwhile.
            let Some(recorded) = recorded.get(name) else { return };
            let earlier = recorded.as_deref().and_then(parse).filter(|&at| at > Utc::now());
            let next = match (next, earlier) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let value = next.map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true));
            let changed = *recorded != value;
            (value, changed)
        };
        let next = value.as_deref().and_then(parse);
        if changed {
            let tenants: Api<Tenant> = Api::all(self.host.clone());
            let patch = json!({"status": {"nextWakeTime": value}});
            match tenants.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.recorded.lock().insert(name.to_owned(), value);
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return,
                Err(e) => {
                    tracing::warn!(tenant = %name, error = %e, "recording the tenant's next wake-up")
                }
            }
        }
        if let Some(at) = next {
            self.wake_at(name, at);
        }
    }

    /// Open tenant `name` at `at`, in place of any timer it had.
    fn wake_at(self: &Arc<Self>, name: &str, at: DateTime<Utc>) {
        let Some(clusters) = self.clusters.get().cloned() else { return };
        let wait = (at - Utc::now()).to_std().unwrap_or_default();
        let tenant = name.to_owned();
        let timer = self.handle.spawn(async move {
            tokio::time::sleep(wait).await;
            tracing::debug!(%tenant, "opening the idle tenant: its controllers are due");
            if let Some(Err(e)) = clusters.wake(&tenant).await {
                tracing::warn!(%tenant, error = %e, "opening an idle tenant for its controllers");
            }
        });
        if let Some(old) = self.timers.lock().insert(name.to_owned(), timer.abort_handle()) {
            old.abort();
        }
    }
}

fn parse(at: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(at).ok().map(|t| t.with_timezone(&Utc))
}
