//! Tenants, as the API server knows them: the `Tenant` resource of the host API and the room for
//! one more in the open-file limit. The set of clusters one listener serves (the host's and each
//! tenant's, mounted under `/tenants/<name>`) is the HTTP side's (`http::clusters`). Turning `Tenant` objects into served
//! clusters is the tenant manager's (the `carrel-tenants` crate), a client of the host API.

pub mod descriptors;
pub mod types;
