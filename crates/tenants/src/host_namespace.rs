//! A tenant's namespace in the host (`carrel-<name>`): where its workloads run and where its
//! admin kubeconfig Secret is kept. The manager records the tenant's name and UID
//! ([`OWNER_UID`]) on the namespace when it creates it; one that exists without this tenant's
//! UID is not adopted (the tenant is not served and says why) and is never deleted.

use carrel_apiserver::object::meta_str;
use serde_json::{json, Value};

use crate::host::{self, code, Host};
use crate::manager::ManagerError;
use carrel_machinery::tenancy::host_namespace;

/// The Secret in a tenant's host namespace that holds its admin kubeconfig.
pub const KUBECONFIG_SECRET: &str = "admin-kubeconfig";
/// Annotation on a tenant's host namespace: the UID of the `Tenant` it was created for. Only
/// that tenant uses it, and deleting only that tenant deletes it.
pub const OWNER_UID: &str = "carrel.dev/tenant-uid";
/// Label on a tenant's host namespace: the tenant's name.
pub const OWNER_LABEL: &str = "carrel.dev/tenant";
/// The `Ready` condition's reason while the host namespace belongs to something else.
pub const NOT_OWNED: &str = "HostNamespaceNotOwned";

/// Whether host namespace `namespace` was created for `tenant`: it records the tenant's UID.
pub fn owned_by(namespace: &Value, tenant: &Value) -> bool {
    let recorded = namespace.pointer("/metadata/annotations").and_then(|a| a.get(OWNER_UID));
    let uid = meta_str(tenant, "uid");
    uid.is_some_and(|uid| !uid.is_empty() && recorded.and_then(Value::as_str) == Some(uid))
}

/// Create the tenant's host namespace, recording the tenant's name and UID on it, or find it
/// created for this tenant; [`ManagerError::NotOwned`] when it exists without this tenant's UID
/// (made by someone else, or for an earlier tenant of the same name and not yet gone).
pub async fn own(host: &Host, name: &str, tenant: &Value) -> Result<(), ManagerError> {
    let namespace = host_namespace(name);
    let uid = meta_str(tenant, "uid").unwrap_or_default();
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": namespace,
        "labels": {OWNER_LABEL: name},
        "annotations": {OWNER_UID: uid},
    }});
    match host.create(host::NAMESPACES, &body).await {
        Ok(_) => Ok(()),
        Err(e) if code(&e) == Some(409) => {
            let existing = host.get(host::NAMESPACES, &namespace).await?;
            if owned_by(&existing, tenant) {
                Ok(())
            } else {
                Err(ManagerError::NotOwned { tenant: name.to_owned(), namespace })
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Keep the `admin-kubeconfig` Secret, holding `kubeconfig`, in the tenant's host namespace
/// (which it owns).
pub async fn keep_kubeconfig(
    host: &Host,
    name: &str,
    kubeconfig: &str,
) -> Result<(), ManagerError> {
    let secrets = host::secrets(&host_namespace(name));
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KUBECONFIG_SECRET, "labels": {OWNER_LABEL: name}},
        "type": "Opaque",
        "data": {"kubeconfig": base64_encode(kubeconfig.as_bytes())},
    });
    match host.get_opt(&secrets, KUBECONFIG_SECRET).await? {
        Some(existing) if existing["data"] == secret["data"] => Ok(()),
        Some(mut existing) => {
            existing["data"] = secret["data"].clone();
            host.replace(&secrets, KUBECONFIG_SECRET, &existing).await?;
            Ok(())
        }
        None => {
            host.create(&secrets, &secret).await?;
            Ok(())
        }
    }
}

/// Delete the tenant's host namespace if it records this tenant's UID; one that does not is
/// someone else's and is left alone.
pub async fn delete_owned(host: &Host, name: &str, tenant: &Value) -> Result<(), ManagerError> {
    let namespace = host_namespace(name);
    let Some(existing) = host.get_opt(host::NAMESPACES, &namespace).await? else {
        return Ok(());
    };
    if !owned_by(&existing, tenant) {
        tracing::info!(tenant = %name, %namespace, "leaving the host namespace: not the tenant's");
        return Ok(());
    }
    // The very namespace checked: not one made again under the name since.
    match host.delete(host::NAMESPACES, &namespace, meta_str(&existing, "uid")).await {
        Ok(()) => Ok(()),
        Err(e) if matches!(code(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
