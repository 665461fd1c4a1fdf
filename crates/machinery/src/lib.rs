//! The rules of Kubernetes' API machinery that several parts of Carrel apply, written once:
//! Go's string quoting ([`quote`]), Go durations ([`duration`]), DNS-1123 names and qualified
//! names ([`names`]), resource quantities ([`quantity`]) and ResourceQuota's evaluators
//! ([`quota`]: what an object counts against a quota). Each follows the Go code that
//! kube-apiserver runs, messages included, so what Carrel answers reads as Kubernetes' answer.
//! Beside them, the rules of Carrel's tenancy that several processes share ([`tenancy`]: a
//! tenant's host namespace; [`ingress`]: the hosts an Ingress serves, which one tenant holds).
//!
//! Pure code with no IO and no dependency on the rest of Carrel: the CRD schema crate, the API
//! server, the syncer and the controllers all build on it.

pub mod duration;
pub mod ingress;
pub mod names;
pub mod quantity;
pub mod quota;
pub mod quote;
pub mod tenancy;
