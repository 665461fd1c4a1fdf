//! Carrel's naming rules between a tenant and the host it runs on, each written once because
//! several components use it: the host namespace that holds a tenant's workloads and its admin
//! kubeconfig Secret (the tenant manager creates it, the syncer places the tenant's pods in it,
//! the CLI reads the kubeconfig from it), and the label of a tenant's host-name claims (the
//! syncer takes them, the tenant manager releases them).

/// The label naming the tenant that holds a host-name claim: a Lease in the host's `carrel`
/// namespace, one per host that a tenant's Ingresses serve (the syncer takes them, first writer
/// wins; the tenant manager releases a deleted tenant's).
pub const LABEL_HOSTNAME_HOLDER: &str = "ingress.carrel.dev/tenant";

/// The annotation recording the host a host-name claim is for.
pub const ANNOTATION_HOSTNAME: &str = "ingress.carrel.dev/host";

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
