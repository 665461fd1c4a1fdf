//! Carrel's one naming rule between a tenant and the host it runs on: the host namespace that
//! holds a tenant's workloads and its admin kubeconfig Secret. The tenant manager creates it, the
//! syncer places the tenant's pods in it and the CLI reads the kubeconfig from it, so it is
//! computed here once.

/// What every tenant's host namespace starts with.
pub const HOST_NAMESPACE_PREFIX: &str = "carrel-";

/// The name of a tenant's namespace in the host: `carrel-<tenant>`.
pub fn host_namespace(tenant: &str) -> String {
    format!("{HOST_NAMESPACE_PREFIX}{tenant}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_host_namespace_carries_the_prefix() {
        assert_eq!(host_namespace("team-a"), "carrel-team-a");
        assert!(host_namespace("x").starts_with(HOST_NAMESPACE_PREFIX));
    }
}
