//! The controllers every Kubernetes cluster has, as kube-controller-manager runs them, for one
//! cluster: its workloads' controllers and its garbage collector.
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

use futures::future::BoxFuture;
use kube::Client;
use tokio::sync::watch;

use carrel_events::Recorder;

pub mod cronjob;
pub mod deployment;
pub mod gc;
pub mod job;
pub mod owners;
pub mod pods;
pub mod replicaset;
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
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client) -> Arc<Context> {
        Arc::new(Context { client })
    }

    /// A recorder of Events from `component` (kube-controller-manager's names:
    /// `replicaset-controller`, `job-controller`, …).
    pub fn recorder(&self, component: &str) -> Recorder {
        Recorder::for_component(self.client.clone(), component, "")
    }
}

/// Run every controller against `client`'s cluster until `stop` is true.
pub async fn run(client: Client, stop: watch::Receiver<bool>) {
    let context = Context::new(client);
    // One line per controller.
    let controllers: Vec<BoxFuture<'static, ()>> = vec![
        Box::pin(gc::run(context.clone(), stop.clone())),
        Box::pin(replicaset::run_replicasets(context.clone(), stop.clone())),
        Box::pin(replicaset::run_replication_controllers(context.clone(), stop.clone())),
        Box::pin(deployment::run(context.clone(), stop.clone())),
        Box::pin(job::run(context.clone(), job::Config::default(), stop.clone())),
        Box::pin(ttl::run(context.clone(), stop.clone())),
        Box::pin(cronjob::run(context.clone(), cronjob::Config::default(), stop.clone())),
    ];
    futures::future::join_all(controllers).await;
}

/// A future that is ready once `stop` is true (or its sender is gone).
pub fn stopped(stop: &watch::Receiver<bool>) -> impl std::future::Future<Output = ()> + Send {
    let mut stop = stop.clone();
    async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }
}
