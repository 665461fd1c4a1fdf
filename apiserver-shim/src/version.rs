//! The Kubernetes version this server speaks: reported at `/version` and in the OpenAPI
//! documents' `info`.

/// The Kubernetes version this server reports (kubectl picks its binary by the minor version).
pub const KUBERNETES_VERSION: (&str, &str, &str) = ("1", "33", "v1.33.0");
