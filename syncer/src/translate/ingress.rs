//! A tenant Ingress as its host Ingress, the tenant's view of a host IngressClass, and the host
//! names an Ingress asks for.
//!
//! A tenant Ingress is carried to the tenant's host namespace with its rules, hosts and class;
//! each backend Service and TLS Secret is named by its host name ([`host_names::host_name`]):
//! the host Service the syncer keeps for the tenant Service, and the host copy of the Secret.
//! Its annotations (the ingress controller's settings) are carried too, but for those that could
//! reach beyond the tenant's own objects on a shared controller: configuration snippets, and a
//! Secret named in another namespace; a Secret named in the Ingress's own is named by its host
//! copy, which is made. A resource backend names a tenant object the host cannot reach: such an
//! Ingress is not carried.
//!
//! Every host an Ingress serves is claimed for the tenant before it is carried (first writer
//! wins, across all tenants): its rules' and TLS entries' hosts, and [`CATCH_ALL`] for a rule
//! without a host or a default backend, which a controller serves for every host no other rule
//! names.

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

pub use carrel_machinery::ingress::{covering_wildcard, CATCH_ALL};

/// A tenant Ingress as the host is to hold it.
#[derive(Debug)]
pub struct HostIngress {
    /// The host Ingress.
    pub ingress: Ingress,
    /// The tenant Secrets (of the Ingress's namespace) it names, by their host copies: these
    /// must be copied first.
    pub secrets: BTreeSet<String>,
    /// The annotations left behind, each with why.
    pub left: Vec<String>,
}

/// Why a tenant Ingress is not carried.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum IngressNotCarried {
    /// A backend names a resource of the tenant, not a Service.
    #[error("a resource backend ({0}) names a tenant object the host's ingress controller cannot reach; only Service backends are carried")]
    ResourceBackend(String),
}

/// The hosts Ingress `ingress` serves and claims ([`carrel_machinery::ingress::hosts`]).
pub fn ingress_hosts(ingress: &Ingress) -> BTreeSet<String> {
    serde_json::to_value(ingress).map(|v| carrel_machinery::ingress::hosts(&v)).unwrap_or_default()
}

/// Whether annotation `key: value` of an Ingress in `namespace` is carried, and as what:
/// `Ok(None)` as it is, `Ok(Some((value, secret)))` rewritten to name the host copy of tenant
/// Secret `secret`, `Err(why)` left behind.
fn carried_annotation(
    namespace: &str,
    key: &str,
    value: &str,
) -> Result<Option<(String, String)>, String> {
    let name = key.rsplit('/').next().unwrap_or(key);
    if name.contains("snippet") {
        return Err(format!(
            "annotation {key} is not carried: configuration snippets run in the shared ingress \
             controller"
        ));
    }
    if !name.ends_with("secret") {
        return Ok(None);
    }
    let secret = match value.split_once('/') {
        None => value,
        Some((ns, secret)) if ns == namespace => secret,
        Some(_) => {
            return Err(format!(
                "annotation {key} is not carried: it names a Secret in another namespace"
            ))
        }
    };
    Ok(Some((host_names::host_name(namespace, secret), secret.to_owned())))
}

/// Backend `backend` of an Ingress in `namespace`, naming its host Service.
fn host_backend(
    namespace: &str,
    backend: &IngressBackend,
) -> Result<IngressBackend, IngressNotCarried> {
    if let Some(resource) = &backend.resource {
        let group = resource.api_group.as_deref().unwrap_or("");
        let kind = if group.is_empty() {
            resource.kind.clone()
        } else {
            format!("{}.{group}", resource.kind)
        };
        return Err(IngressNotCarried::ResourceBackend(format!("{kind}/{}", resource.name)));
    }
    let mut carried = backend.clone();
    if let Some(service) = carried.service.as_mut() {
        service.name = host_names::host_name(namespace, &service.name);
    }
    Ok(carried)
}

/// The host Ingress of tenant Ingress `ingress` in host namespace `host_namespace`.
pub fn host_ingress(
    tenant: &str,
    host_namespace: &str,
    ingress: &Ingress,
) -> Result<HostIngress, IngressNotCarried> {
    let namespace = ingress.metadata.namespace.clone().unwrap_or_default();
    let name = ingress.metadata.name.clone().unwrap_or_default();
    let uid = ingress.metadata.uid.clone().unwrap_or_default();
    let spec = ingress.spec.clone().unwrap_or_default();
    let mut secrets = BTreeSet::new();
    let mut left = Vec::new();
    let mut annotations = BTreeMap::new();
    for (key, value) in ingress.metadata.annotations.iter().flatten() {
        if key.starts_with("kubectl.kubernetes.io/") {
            continue;
        }
        match carried_annotation(&namespace, key, value) {
            Ok(None) => {
                annotations.insert(key.clone(), value.clone());
            }
            Ok(Some((host_value, secret))) => {
                annotations.insert(key.clone(), host_value);
                secrets.insert(secret);
            }
            Err(why) => left.push(why),
        }
    }
    annotations.extend(host_names::host_annotations(&namespace, &name, &uid));
    let default_backend =
        spec.default_backend.as_ref().map(|b| host_backend(&namespace, b)).transpose()?;
    let mut rules = spec.rules.clone();
    for rule in rules.iter_mut().flatten() {
        for path in rule.http.iter_mut().flat_map(|h| h.paths.iter_mut()) {
            path.backend = host_backend(&namespace, &path.backend)?;
        }
    }
    let mut tls = spec.tls.clone();
    for entry in tls.iter_mut().flatten() {
        if let Some(secret) = entry.secret_name.as_mut().filter(|s| !s.is_empty()) {
            secrets.insert(secret.clone());
            *secret = host_names::host_name(&namespace, secret);
        }
    }
    let ingress = Ingress {
        metadata: ObjectMeta {
            name: Some(host_names::host_name(&namespace, &name)),
            namespace: Some(host_namespace.to_owned()),
            labels: Some(host_names::host_labels(tenant)),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: spec.ingress_class_name.clone(),
            default_backend,
            rules,
            tls,
        }),
        status: None,
    };
    Ok(HostIngress { ingress, secrets, left })
}

/// What of a host Ingress the syncer keeps in line with the tenant's: its spec and the
/// annotations it writes (others' annotations, and the status, are the host's).
pub fn host_ingress_shown(ingress: &Ingress) -> Value {
    json!({"spec": ingress.spec, "annotations": ingress.metadata.annotations})
}

/// The tenant's mirror of host IngressClass `host`, labelled
/// [`host_names::LABEL_HOST_INGRESS_CLASS`]: its name, its controller and whether it is the
/// default. The host's `parameters` name the host's own objects and are left out.
pub fn tenant_ingress_class(host: &Value) -> Value {
    let name = host.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
    let mut annotations = Map::new();
    if is_default_ingress_class(host) {
        annotations.insert(IS_DEFAULT_INGRESS_CLASS.to_owned(), json!("true"));
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {
            "name": name,
            "labels": {host_names::LABEL_HOST_INGRESS_CLASS: "true"},
            "annotations": annotations,
        },
        "spec": {"controller": host.pointer("/spec/controller").cloned().unwrap_or(Value::Null)},
    })
}

/// What a tenant is shown of an IngressClass (its mirror as [`tenant_ingress_class`] writes it).
pub fn ingress_class_shown(class: &Value) -> Value {
    json!({
        "controller": class.pointer("/spec/controller"),
        "default": is_default_ingress_class(class),
        "labelled": class.pointer("/metadata/labels").and_then(|l| l.get(host_names::LABEL_HOST_INGRESS_CLASS)),
        "parameters": class.pointer("/spec/parameters"),
    })
}

/// The annotation that marks the default IngressClass.
pub const IS_DEFAULT_INGRESS_CLASS: &str = "ingressclass.kubernetes.io/is-default-class";

/// Whether IngressClass `class` is marked as the default.
pub fn is_default_ingress_class(class: &Value) -> bool {
    class
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(IS_DEFAULT_INGRESS_CLASS))
        .and_then(Value::as_str)
        == Some("true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(spec: Value, annotations: Value) -> Ingress {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "annotations": annotations},
            "spec": spec,
        }))
        .expect("decodes")
    }

    fn backend(service: &str) -> Value {
        json!({"service": {"name": service, "port": {"name": "http"}}})
    }

    #[test]
    fn the_typed_ingress_claims_its_hosts() {
        let spec = json!({"rules": [{"host": "A.example.com"}], "defaultBackend": backend("web")});
        let got: Vec<String> = ingress_hosts(&ingress(spec, json!({}))).into_iter().collect();
        assert_eq!(got, [CATCH_ALL, "a.example.com"]);
    }

    #[test]
    fn backends_and_secrets_are_named_by_their_host_names() {
        let spec = json!({
            "ingressClassName": "nginx",
            "defaultBackend": backend("fallback"),
            "rules": [{"host": "a.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": backend("web")}]}}],
            "tls": [{"hosts": ["a.example.com"], "secretName": "web-tls"}, {"hosts": ["b.example.com"]}],
        });
        let carried = host_ingress("t", "carrel-t", &ingress(spec, json!({}))).expect("carried");
        let host = serde_json::to_value(&carried.ingress).expect("encodes");
        assert_eq!(host["metadata"]["name"], json!("web-x-shop"));
        assert_eq!(host["metadata"]["namespace"], json!("carrel-t"));
        assert_eq!(host["metadata"]["labels"]["carrel.dev/tenant"], json!("t"));
        assert_eq!(host["metadata"]["annotations"][host_names::ANNOTATION_NAME], json!("web"));
        assert_eq!(host["spec"]["ingressClassName"], json!("nginx"));
        assert_eq!(host["spec"]["defaultBackend"]["service"]["name"], json!("fallback-x-shop"));
        let path = &host["spec"]["rules"][0]["http"]["paths"][0];
        assert_eq!(
            path["backend"]["service"],
            json!({"name": "web-x-shop", "port": {"name": "http"}})
        );
        assert_eq!(path["pathType"], json!("Prefix"));
        assert_eq!(host["spec"]["tls"][0]["secretName"], json!("web-tls-x-shop"));
        assert_eq!(host["spec"]["tls"][1].get("secretName"), None);
        assert_eq!(carried.secrets, BTreeSet::from(["web-tls".to_owned()]));
        assert!(carried.left.is_empty());
    }

    #[test]
    fn annotations_that_reach_beyond_the_tenant_stay_behind() {
        let annotations = json!({
            "nginx.ingress.kubernetes.io/rewrite-target": "/$1",
            "cert-manager.io/cluster-issuer": "letsencrypt",
            "nginx.ingress.kubernetes.io/server-snippet": "location /x {}",
            "nginx.ingress.kubernetes.io/auth-secret": "basic-auth",
            "nginx.ingress.kubernetes.io/auth-tls-secret": "shop/ca",
            "nginx.ingress.kubernetes.io/proxy-ssl-secret": "kube-system/admin",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        });
        let spec = json!({"defaultBackend": backend("web")});
        let carried = host_ingress("t", "carrel-t", &ingress(spec, annotations)).expect("carried");
        let a = carried.ingress.metadata.annotations.clone().unwrap_or_default();
        let get = |k: &str| a.get(k).map(String::as_str);
        assert_eq!(get("nginx.ingress.kubernetes.io/rewrite-target"), Some("/$1"));
        assert_eq!(get("cert-manager.io/cluster-issuer"), Some("letsencrypt"));
        assert_eq!(get("nginx.ingress.kubernetes.io/auth-secret"), Some("basic-auth-x-shop"));
        assert_eq!(get("nginx.ingress.kubernetes.io/auth-tls-secret"), Some("ca-x-shop"));
        assert_eq!(get("nginx.ingress.kubernetes.io/server-snippet"), None);
        assert_eq!(get("nginx.ingress.kubernetes.io/proxy-ssl-secret"), None);
        assert_eq!(get("kubectl.kubernetes.io/last-applied-configuration"), None);
        assert_eq!(carried.secrets, BTreeSet::from(["basic-auth".to_owned(), "ca".to_owned()]));
        assert_eq!(carried.left.len(), 2, "{:?}", carried.left);
        assert!(carried.left.iter().any(|w| w.contains("server-snippet")));
        assert!(carried
            .left
            .iter()
            .any(|w| w.contains("proxy-ssl-secret") && w.contains("another namespace")));
    }

    #[test]
    fn a_resource_backend_is_not_carried() {
        let spec = json!({"rules": [{"host": "a.example.com", "http": {"paths": [
            {"path": "/", "pathType": "Prefix", "backend":
                {"resource": {"apiGroup": "k8s.example.com", "kind": "StorageBucket", "name": "static"}}}]}}]});
        let refused =
            host_ingress("t", "carrel-t", &ingress(spec, json!({}))).expect_err("refused");
        assert_eq!(
            refused,
            IngressNotCarried::ResourceBackend("StorageBucket.k8s.example.com/static".into())
        );
    }

    #[test]
    fn a_mirrored_class_shows_its_controller_and_default_only() {
        let host = json!({"metadata": {"name": "nginx", "uid": "h",
                "annotations": {IS_DEFAULT_INGRESS_CLASS: "true", "other": "x"}},
            "spec": {"controller": "k8s.io/ingress-nginx", "parameters": {"kind": "C", "name": "p"}}});
        let mirror = tenant_ingress_class(&host);
        assert_eq!(mirror["metadata"]["name"], json!("nginx"));
        assert_eq!(mirror["metadata"]["annotations"], json!({IS_DEFAULT_INGRESS_CLASS: "true"}));
        assert_eq!(mirror["spec"], json!({"controller": "k8s.io/ingress-nginx"}));
        assert!(is_default_ingress_class(&mirror));
        assert_ne!(ingress_class_shown(&mirror), ingress_class_shown(&host));
    }
}
