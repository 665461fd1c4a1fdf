//! Tenants: the `Tenant` resource of the host API, the set of clusters one listener serves, and
//! the manager that turns `Tenant` objects into running tenant clusters.

pub mod clusters;
pub mod descriptors;
pub mod manager;
pub mod types;

pub use clusters::Clusters;
