//! The controllers every Kubernetes cluster has, as kube-controller-manager runs them, for one
//! cluster: its workloads' controllers, its garbage collector, the ResourceQuota status and the
//! Services' Endpoints and EndpointSlices.
//!
//! They reach the cluster only through a [`kube::Client`], so the same code runs for a tenant of
//! `carrel up` (an in-process client of its API) and against any Kubernetes API. Each controller
//! is event-driven from the cluster's watches (kube-runtime's `Controller`): between changes it
//! does no work, and [`run`] ends every one of them when told to stop, which is how an idle
//! tenant costs nothing.
//!
//! Semantics, conditions, events and reasons follow kube-controller-manager's: each module says
//! which of its controllers it follows and where it differs.

use std::sync::Arc;

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use kube::Client;
use tokio::sync::watch;

use carrel_events::Recorder;

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod endpointslice_mirroring;
pub mod gc;
pub mod job;
pub mod node_lifecycle;
pub mod owners;
pub mod pods;
pub mod replicaset;
pub mod resource_quota;
pub mod root_ca;
pub mod service_pods;
pub mod statefulset;
pub mod ttl;

/// What can go wrong in a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API refused a read or a write, or could not be reached.
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    /// An object the controller reads could not be understood.
    #[error("{0}")]
    Invalid(String),
}

/// What the controllers of one cluster share.
#[derive(Clone)]
pub struct Context {
    /// The cluster's API.
    pub client: Client,
    /// When each object's controller is next due to act by the clock alone.
    pub wakeups: Arc<Wakeups>,
}

/// When the controllers are next due to act with nothing changing in the cluster: a CronJob's
/// next schedule, a Job's deadline or its time to live, a rollout's progress deadline. Each
/// controller says it for the object it reconciled; [`run_with`] gives the earliest still to
/// come when the controllers stop, so that whoever stopped them (an idle tenant closing) can
/// start them again in time.
#[derive(Debug, Default)]
pub struct Wakeups(parking_lot::Mutex<HashMap<String, DateTime<Utc>>>);

impl Wakeups {
    /// The controller of `key` (`cronjob/<namespace>/<name>`) is due again after `wait`, or only
    /// on a change (`None`).
    pub fn after(&self, key: String, wait: Option<std::time::Duration>) {
        let at = wait.and_then(|w| chrono::Duration::from_std(w).ok()).map(|w| Utc::now() + w);
        let mut due = self.0.lock();
        match at {
            Some(at) => {
                due.insert(key, at);
            }
            None => {
                due.remove(&key);
            }
        }
    }

    /// The earliest time after `now` a controller is due; those past are under way or
    /// were for objects since gone.
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.0.lock().values().filter(|&&at| at > now).min().copied()
    }
}

/// The key [`Wakeups`] knows an object by: its controller, namespace and name.
pub fn wakeup_key(controller: &str, namespace: &str, name: &str) -> String {
    format!("{controller}/{namespace}/{name}")
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client) -> Arc<Context> {
        Arc::new(Context { client, wakeups: Arc::default() })
    }

    /// A recorder of Events from `component` (kube-controller-manager's names:
    /// `replicaset-controller`, `job-controller`, …).
    pub fn recorder(&self, component: &str) -> Recorder {
        Recorder::for_component(self.client.clone(), component, "")
    }
}

/// What a cluster tells its controllers beyond its API.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The CA (PEM) that verifies the cluster's API server, published in every namespace as
    /// `kube-root-ca.crt`; none, no ConfigMap is published.
    pub root_ca: Option<String>,
}

/// Run every controller against `client`'s cluster until `stop` is true; then, the earliest
/// time one of them is due to act by the clock alone ([`Wakeups`]), if any.
pub async fn run(client: Client, stop: watch::Receiver<bool>) -> Option<DateTime<Utc>> {
    run_with(client, Options::default(), stop).await
}

/// [`run`], with what `options` tell.
pub async fn run_with(
    client: Client,
    options: Options,
    stop: watch::Receiver<bool>,
) -> Option<DateTime<Utc>> {
    let context = Context::new(client);
    let wakeups = context.wakeups.clone();
    run_controllers(context, options, stop).await;
    wakeups.next_after(Utc::now())
}

async fn run_controllers(context: Arc<Context>, options: Options, stop: watch::Receiver<bool>) {
    // One line per controller.
    let mut controllers: Vec<(&'static str, BoxFuture<'static, ()>)> = vec![
        ("garbage collector", Box::pin(gc::run(context.clone(), stop.clone()))),
        ("replicaset", Box::pin(replicaset::run_replicasets(context.clone(), stop.clone()))),
        (
            "replicationcontroller",
            Box::pin(replicaset::run_replication_controllers(context.clone(), stop.clone())),
        ),
        ("deployment", Box::pin(deployment::run(context.clone(), stop.clone()))),
        ("statefulset", Box::pin(statefulset::run(context.clone(), stop.clone()))),
        ("daemonset", Box::pin(daemonset::run(context.clone(), stop.clone()))),
        ("job", Box::pin(job::run(context.clone(), job::Config::default(), stop.clone()))),
        ("node-lifecycle", Box::pin(node_lifecycle::run(context.clone(), stop.clone()))),
        ("ttl-after-finished", Box::pin(ttl::run(context.clone(), stop.clone()))),
        ("resourcequota", Box::pin(resource_quota::run(context.clone(), stop.clone()))),
        ("disruption", Box::pin(disruption::run(context.clone(), stop.clone()))),
        ("endpoints", Box::pin(endpoints::run(context.clone(), stop.clone()))),
        ("endpointslice", Box::pin(endpointslice::run(context.clone(), stop.clone()))),
        (
            "endpointslice-mirroring",
            Box::pin(endpointslice_mirroring::run(context.clone(), stop.clone())),
        ),
        (
            "cronjob",
            Box::pin(cronjob::run(context.clone(), cronjob::Config::default(), stop.clone())),
        ),
    ];
    if let Some(ca) = options.root_ca {
        controllers.push((
            "root-ca-cert-publisher",
            Box::pin(root_ca::run(context.clone(), ca, stop.clone())),
        ));
    }
    let mut running: HashSet<&'static str> = controllers.iter().map(|(name, _)| *name).collect();
    let mut ended: FuturesUnordered<_> =
        controllers.into_iter().map(|(name, run)| run.map(move |()| name)).collect();
    if !run_until(&mut ended, &mut running, stopped(&stop)).await {
        return;
    }
    // Each ends by itself once its reconciles under way are done; one still waiting for its
    // first list (kube-runtime's controllers wait for it) is dropped after a moment.
    if !run_until(&mut ended, &mut running, tokio::time::sleep(STOP_GRACE)).await {
        return;
    }
    tracing::debug!(controllers = ?running, "dropped controllers that had not ended when stopped");
}

/// Run the controllers in `ended`, crossing off those that end in `running`, until `signal`:
/// true then, false if all of them ended first.
async fn run_until(
    ended: &mut FuturesUnordered<impl std::future::Future<Output = &'static str>>,
    running: &mut HashSet<&'static str>,
    signal: impl std::future::Future<Output = ()>,
) -> bool {
    tokio::pin!(signal);
    loop {
        tokio::select! {
            name = ended.next() => match name {
                Some(name) => { running.remove(name); }
                None => return false,
            },
            () = &mut signal => return true,
        }
    }
}

/// How long the controllers have to end by themselves once told to stop.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A future that is ready once `stop` is true (or its sender is gone).
pub fn stopped(stop: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }
}
