//! What the embedded host of `carrel up` lacks and a real cluster has: a kubelet per simulated
//! node ([`kubelet`], with its containers' logs in [`logs`]) and a scheduler ([`scheduler`]).

pub mod kubelet;
pub mod logs;
pub mod scheduler;
