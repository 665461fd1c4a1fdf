//! Pure translations between tenant and host objects, one module each: the objects a pod
//! references and their host copies (`references.rs`), a tenant pod into its
//! host pod (`host_pod.rs`), a host pod's status back into the tenant's
//! (`status.rs`), a tenant claim into its host claim and back (`claim.rs`),
//! a virtual node (`virtual_node.rs`), the tenant's view of a host
//! StorageClass (`storage_class.rs`) and a tenant NetworkPolicy as its host
//! policy, beside the isolation policy of every host namespace
//! (`network_policy.rs`), a tenant Service as its host Service and back
//! (`service.rs`) with the EndpointSlices of one that selects nothing (`endpoint_slice.rs`),
//! and a tenant Ingress as its host Ingress, with the tenant's view of a host
//! IngressClass (`ingress.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use carrel_gpu::fit::Toleration;
use carrel_gpu::pod_refs::{self, Reference, Referent};
use carrel_gpu::runtime_env::steers_runtime;
use carrel_gpu::Claim;

use crate::host_names;
mod claim;
mod endpoint_slice;
mod host_pod;
mod ingress;
mod network_policy;
mod references;
mod service;
mod status;
mod storage_class;
mod virtual_node;

#[cfg(test)]
mod claim_tests;
#[cfg(test)]
mod network_policy_tests;
#[cfg(test)]
mod tests;

pub use claim::*;
pub use endpoint_slice::*;
pub use host_pod::*;
pub use ingress::*;
pub use network_policy::*;
pub use references::*;
pub use service::*;
pub use status::*;
pub use storage_class::*;
pub use virtual_node::*;
