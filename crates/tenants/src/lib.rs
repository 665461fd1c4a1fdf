//! The tenant manager: turns the host's `Tenant` objects into served tenant clusters.
//!
//! For each tenant it keeps a store directory (`<data>/tenants/<name>/store`), serves the
//! tenant's API under `/tenants/<name>` of the listener's [`Clusters`], keeps a host namespace
//! `carrel-<name>` holding a Secret `admin-kubeconfig`, and reports all that in the tenant's
//! status. It is a controller ([`Manager::run`], on `kube_runtime`'s `Controller`) that reaches
//! the host only through a `kube::Client`, so the host may be any Kubernetes API server that
//! serves the `Tenant` resource; in `carrel up` it is the embedded one, reached through
//! `carrel_apiserver::local_client`.
//!
//! - [`manager`]: the controller and one tenant's reconcile (GPU usage read and claims released
//!   through `carrel_gpu::leases`);
//! - [`tenant_cluster`]: opening a tenant's store and credentials and mounting its API;
//! - [`tenant_status`]: the status the manager writes (phase, conditions, expiry);
//! - [`host_namespace`](mod@host_namespace): the tenant's host namespace and its kubeconfig Secret;
//! - [`identity`]: the tenant's admin credential, its in-process admin client and token issuer;
//! - [`service_account`]: what the manager may do on a host, and its client of an in-process one;
//! - [`replicas`]: tenants spread over several API replicas (membership, assignment,
//!   forwarding, moves);
//! - [`host`]: the host API as JSON objects, through the client.
//!
//! [`Clusters`]: carrel_apiserver::http::Clusters

pub mod host;
pub mod host_namespace;
pub mod identity;
pub mod manager;
pub mod replicas;
pub mod service_account;
pub mod tenant_cluster;
pub mod tenant_status;

#[cfg(test)]
mod tests;

pub use carrel_machinery::tenancy::host_namespace;
pub use host_namespace::{owned_by, KUBECONFIG_SECRET, NOT_OWNED, OWNER_LABEL, OWNER_UID};
pub use identity::{admin_client, admin_user, issuer, ADMIN_GROUP, ADMIN_USER};
pub use manager::{Manager, ManagerError, TenantHooks, FINALIZER, MANAGER};
pub use service_account::in_process_client;
pub use tenant_status::{expires_at, STORE_CONDITION};
