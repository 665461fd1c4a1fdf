//! What every cluster starts with: the system namespaces, each with its `default`
//! ServiceAccount, Kubernetes' default ClusterRoles and ClusterRoleBindings, and the
//! `kubernetes` and `kube-dns` Services, and the `kubernetes` Endpoints and EndpointSlice naming
//! where the API answers. Whatever is missing is created in one atomic store write ([`Api::create_all_as_server`]), so a new
//! cluster's bootstrap is one durable commit; on a store that has them, an administrator's
//! changes to existing ones are kept.

use k8s_openapi::api::rbac::v1::ClusterRole;
use serde_json::{json, Value};

use carrel_store::Store;

use crate::object::meta_str;
use crate::status::{ApiError, ApiResult};

use super::{internal, key_for, namespaces, Api, ListParams, Target, Write, SYSTEM_NAMESPACES};

/// How often the bootstrap is made again when another writer created one of its objects between
/// its look at the store and its write.
const ATTEMPTS: usize = 3;

impl Api {
    /// Create what is missing of the bootstrap, record where the API answers now in the
    /// `kubernetes` Service and endpoints already stored, then bring the aggregated
    /// ClusterRoles already stored up to date with any of their parts just created.
    pub(super) fn bootstrap(&self) -> ApiResult<()> {
        for attempt in 1..=ATTEMPTS {
            let missing = self.missing_bootstrap()?;
            if missing.is_empty() {
                break;
            }
            let count = missing.len();
            match self.create_all_as_server(missing) {
                Ok(_) => {
                    tracing::debug!(objects = count, "created the cluster's bootstrap objects");
                    break;
                }
                Err(e @ ApiError::AlreadyExists { .. }) if attempt < ATTEMPTS => {
                    tracing::debug!(error = %e, "a bootstrap object was created meanwhile; again");
                }
                Err(e) => return Err(e),
            }
        }
        self.reconcile_api_endpoints()?;
        self.aggregate_cluster_roles()
    }

    fn exists(&self, key: &str) -> ApiResult<bool> {
        Ok(self.store.get(key).map_err(internal)?.is_some())
    }

    /// The bootstrap objects not stored, in the order they are created: each missing namespace
    /// followed by its `default` ServiceAccount (what its create would add), then the missing
    /// ClusterRoles and ClusterRoleBindings, then the `kubernetes` and `kube-dns` Services.
    fn missing_bootstrap(&self) -> ApiResult<Vec<(Target<'_>, Value)>> {
        let namespaces = self.rt("", "namespaces");
        let service_accounts = self.rt("", "serviceaccounts");
        let mut missing = Vec::new();
        for ns in SYSTEM_NAMESPACES {
            if self.exists(&key_for(namespaces, None, ns))? {
                continue;
            }
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            missing.push((Target { rt: namespaces, namespace: None }, body));
            let account = namespaces::default_service_account();
            let name = meta_str(&account, "name").unwrap_or_default();
            if !self.exists(&key_for(service_accounts, Some(ns), name))? {
                let target = Target { rt: service_accounts, namespace: Some((*ns).to_owned()) };
                missing.push((target, account));
            }
        }
        missing.extend(self.missing_rbac()?);
        let services = self.rt("", "services");
        if !self.exists(&key_for(services, Some("default"), "kubernetes"))? {
            let target = Target { rt: services, namespace: Some("default".to_owned()) };
            missing.push((target, self.kubernetes_service()));
        }
        for (target, wanted) in self.api_endpoints() {
            let name = meta_str(&wanted, "name").unwrap_or_default();
            if !self.exists(&key_for(target.rt, Some("default"), name))? {
                missing.push((target, wanted));
            }
        }
        if let Some(dns) = self.kube_dns_service() {
            if !self.exists(&key_for(services, Some("kube-system"), "kube-dns"))? {
                let target = Target { rt: services, namespace: Some("kube-system".to_owned()) };
                missing.push((target, dns));
            }
        }
        Ok(missing)
    }

    /// The `kubernetes` Service in `default`, on the first address of the Service network, as
    /// kube-apiserver keeps it (its endpoints are the API server's own, [`Api::api_endpoints`]).
    fn kubernetes_service(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"component": "apiserver", "provider": "kubernetes"},
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": self.service_network.first().to_string(),
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.api_port()}],
                "sessionAffinity": "None",
            },
        })
    }

    /// The port the API answers on: the advertised one, or kube-apiserver's secure port.
    fn api_port(&self) -> u16 {
        self.service_network.api_endpoint().map_or(6443, |a| a.port())
    }

    /// Where the cluster's API answers, as kube-apiserver's endpoint reconciler records its own
    /// address: the `kubernetes` Endpoints in `default` (not mirrored: the slice is written
    /// too) and its EndpointSlice. None for an API with no address to advertise.
    fn api_endpoints(&self) -> Vec<(Target<'_>, Value)> {
        let Some(address) = self.service_network.api_endpoint() else { return Vec::new() };
        let (ip, port) = (address.ip().to_string(), address.port());
        let family = if address.is_ipv4() { "IPv4" } else { "IPv6" };
        let ports = json!([{"name": "https", "port": port, "protocol": "TCP"}]);
        let in_default = |rt| Target { rt, namespace: Some("default".to_owned()) };
        vec![
            (
                in_default(self.rt("", "endpoints")),
                json!({
                    "apiVersion": "v1",
                    "kind": "Endpoints",
                    "metadata": {
                        "name": "kubernetes",
                        "namespace": "default",
                        "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"},
                    },
                    "subsets": [{"addresses": [{"ip": ip}], "ports": ports}],
                }),
            ),
            (
                in_default(self.rt("discovery.k8s.io", "endpointslices")),
                json!({
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "kubernetes",
                        "namespace": "default",
                        "labels": {"kubernetes.io/service-name": "kubernetes"},
                    },
                    "addressType": family,
                    "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
                    "ports": ports,
                }),
            ),
        ]
    }

    /// Bring the stored `kubernetes` Service's target port, Endpoints and EndpointSlice to
    /// where the API answers now (a restart on another address), as kube-apiserver's endpoint
    /// reconciler does on start. What else is in them is kept.
    pub(super) fn reconcile_api_endpoints(&self) -> ApiResult<()> {
        let services = self.rt("", "services");
        let mut wanted = vec![(
            Target { rt: services, namespace: Some("default".to_owned()) },
            self.kubernetes_service(),
            &["/spec/ports"][..],
        )];
        for (target, object) in self.api_endpoints() {
            let fields: &[&str] = match object["kind"].as_str() {
                Some("Endpoints") => &["/subsets"],
                _ => &["/addressType", "/endpoints", "/ports"],
            };
            wanted.push((target, object, fields));
        }
        for (target, object, fields) in wanted {
            let name = meta_str(&object, "name").unwrap_or_default().to_owned();
            let mut current = match self.get(&target, &name) {
                Ok(current) => current,
                // Deleted since: the next start's bootstrap makes it again.
                Err(ApiError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            let mut changed = false;
            for field in fields {
                let Some(value) = object.pointer(field) else { continue };
                match current.pointer_mut(field) {
                    Some(stored) if stored == value => {}
                    Some(stored) => {
                        *stored = value.clone();
                        changed = true;
                    }
                    None => {
                        let (parent, key) = field.rsplit_once('/').expect("a pointer");
                        if let Some(Value::Object(parent)) = current.pointer_mut(parent) {
                            parent.insert(key.to_owned(), value.clone());
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                continue;
            }
            match self.update(&target, &name, current, None, &Write::server()) {
                Ok(_) => tracing::debug!(kind = %object["kind"], "recorded the API's new address"),
                // Written meanwhile: the next start reconciles again.
                Err(ApiError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The cluster DNS Service, `kube-system/kube-dns`, on the Service network's tenth address as
    /// kubeadm places it, with CoreDNS's labels and ports. It selects no pods: the cluster's DNS
    /// is served by Carrel, not by pods of the cluster.
    fn kube_dns_service(&self) -> Option<Value> {
        let ip = self.service_network.dns()?;
        Some(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "namespace": "kube-system",
                "labels": {
                    "k8s-app": "kube-dns",
                    "kubernetes.io/cluster-service": "true",
                    "kubernetes.io/name": "CoreDNS",
                },
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip.to_string(),
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
                "sessionAffinity": "None",
            },
        }))
    }

    /// The default ClusterRoles and ClusterRoleBindings not stored. A missing aggregated role
    /// comes with its rules aggregated from every ClusterRole, stored or missing, as the
    /// aggregation after their creates would have made them.
    fn missing_rbac(&self) -> ApiResult<Vec<(Target<'_>, Value)>> {
        let roles_rt = self.rt("rbac.authorization.k8s.io", "clusterroles");
        let bindings_rt = self.rt("rbac.authorization.k8s.io", "clusterrolebindings");
        let mut roles = Vec::new();
        for role in crate::rbac::bootstrap::cluster_roles() {
            let name = role.metadata.name.as_deref().unwrap_or_default();
            if !self.exists(&key_for(roles_rt, None, name))? {
                roles.push(role);
            }
        }
        let mut bindings = Vec::new();
        for binding in crate::rbac::bootstrap::cluster_role_bindings() {
            let name = binding.metadata.name.as_deref().unwrap_or_default();
            if !self.exists(&key_for(bindings_rt, None, name))? {
                bindings.push(binding);
            }
        }
        if !roles.is_empty() {
            let mut all = self.stored_cluster_roles()?;
            all.extend(roles.iter().cloned());
            for aggregated in crate::rbac::aggregate(&all) {
                if let Some(role) =
                    roles.iter_mut().find(|r| r.metadata.name == aggregated.metadata.name)
                {
                    role.rules = aggregated.rules;
                }
            }
        }
        let encode = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| ApiError::internal(format!("encoding the bootstrap policy: {e}")))
        };
        let mut missing = Vec::with_capacity(roles.len() + bindings.len());
        for role in roles {
            missing.push((
                Target { rt: roles_rt, namespace: None },
                encode(serde_json::to_value(role))?,
            ));
        }
        for binding in bindings {
            let target = Target { rt: bindings_rt, namespace: None };
            missing.push((target, encode(serde_json::to_value(binding))?));
        }
        Ok(missing)
    }

    /// Every stored ClusterRole, typed (one that does not decode is left out).
    fn stored_cluster_roles(&self) -> ApiResult<Vec<ClusterRole>> {
        let rt = self.rt("rbac.authorization.k8s.io", "clusterroles");
        let listed = self.list(&Target { rt, namespace: None }, &ListParams::default())?;
        Ok(listed["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| serde_json::from_value(r.clone()).ok())
            .collect())
    }

    /// Store the rules of every aggregated ClusterRole whose labelled parts changed.
    pub(crate) fn aggregate_cluster_roles(&self) -> ApiResult<()> {
        let rt = self.rt("rbac.authorization.k8s.io", "clusterroles");
        let target = Target { rt, namespace: None };
        let roles = self.stored_cluster_roles()?;
        for changed in crate::rbac::aggregate(&roles) {
            let name = changed.metadata.name.clone().unwrap_or_default();
            let mut current = self.get(&target, &name)?;
            current["rules"] = serde_json::to_value(&changed.rules)
                .map_err(|e| ApiError::internal(format!("encoding aggregated rules: {e}")))?;
            match self.update(&target, &name, current, None, &Write::server()) {
                // A concurrent write of the role: it aggregates again itself.
                Ok(_) | Err(ApiError::AlreadyExists { .. } | ApiError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
