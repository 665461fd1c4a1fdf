//! Tenants, as the API server knows them: the `Tenant` resource of the host API, the set of
//! clusters one listener serves (the host's and each tenant's, mounted under `/tenants/<name>`),
//! and the room for one more in the open-file limit. Turning `Tenant` objects into served
//! clusters is the tenant manager's (the `carrel-tenants` crate), a client of the host API.

pub mod clusters;
pub mod descriptors;
pub mod types;

pub use clusters::Clusters;
