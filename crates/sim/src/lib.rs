//! What the embedded host of `carrel up` lacks and a real cluster has: a kubelet per simulated
//! node ([`kubelet`], with its containers' logs in [`logs`]), a scheduler ([`scheduler`]) and a
//! storage provisioner with its default StorageClass ([`provisioner`]), what a container runs
//! when a client execs into it ([`exec`]), and what pods and nodes use ([`usage`]).
//! Apart from the production node agent, which knows nothing of them; `carrel up` and the tests
//! run them beside it.

pub mod exec;
pub mod kubelet;
pub mod logs;
pub mod provisioner;
pub mod scheduler;
pub mod usage;

pub use logs::{LogLine, LogStore};
pub use provisioner::run_provisioner;
pub use scheduler::run_scheduler;

/// Resolves when `stop` turns true or its sender is gone.
pub(crate) async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
