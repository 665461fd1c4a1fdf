//! Admission: what a cluster checks of a new object after validation and before it is stored.
//!
//! An [`Api`] may carry one [`Admission`]. Tenants get a [`TenantAdmission`]: the tenant's Pod
//! Security Standard and Carrel's own rules ([`podsecurity`]: no `NVIDIA_*` or `LD_*` variable by
//! any path, including the keys an `envFrom` source holds when the pod is created; no volume
//! reference the syncer cannot carry to the host), and its GPU quota, counted from the tenant's
//! own pods by Kubernetes' effective-request rules.
//! Creates of a type the admission counts are serialised, so two pods created at once cannot both
//! take the last slice of a quota.
//!
//! Every cluster, a tenant's or not, also has kube-apiserver's built-in admission: LimitRanges
//! ([`limit_ranges`], through the pod and claim strategies) and ResourceQuotas
//! ([`resource_quota`], run by [`Api::create`] after this admission, serialised the same way
//! for the types a namespace's quotas count).

pub mod default_ingress_class;
pub mod default_storage_class;
pub mod limit_ranges;
pub(crate) mod matching;
pub mod podsecurity;
pub mod policy;
pub mod reloaded;
pub mod request;
pub mod resource_quota;
pub mod webhook;

use std::collections::BTreeMap;
use std::fmt;

use parking_lot::RwLock;
use serde_json::Value;

use crate::api::{Api, ListParams, Target};
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

pub use carrel_gpu::requests::{gpu_requests, WHOLE_GPU};
pub use podsecurity::Level;

/// A check on creates.
pub trait Admission: Send + Sync + fmt::Debug {
    /// Whether creates of `rt` must be serialised with this check (it reads what others write).
    fn serialized(&self, rt: &ResourceType) -> bool;

    /// Admit or refuse `object`, a new object of `rt`, defaulted and valid.
    fn admit_create(&self, api: &Api, rt: &ResourceType, object: &Value) -> ApiResult<()>;

    /// Admit or refuse `new`, an update of `old` (of `rt`), valid. By default, admitted.
    fn admit_update(
        &self,
        _api: &Api,
        _rt: &ResourceType,
        _old: &Value,
        _new: &Value,
    ) -> ApiResult<()> {
        Ok(())
    }
}

/// A tenant's rules for its pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantPolicy {
    /// The Pod Security Standard enforced.
    pub level: Level,
    /// Slices each MIG profile may hold at once, by canonical profile name (`1g.18gb`).
    pub gpu_quota: BTreeMap<String, i64>,
}

impl Default for TenantPolicy {
    fn default() -> Self {
        TenantPolicy { level: Level::Baseline, gpu_quota: BTreeMap::new() }
    }
}

/// Who holds the hosts that Ingresses serve, across every tenant of an installation (Carrel's
/// host-name claims, which the syncers take: first writer wins).
pub trait HostHolders: Send + Sync + fmt::Debug {
    /// The tenant holding `host` now, if any.
    fn holder(&self, host: &str) -> Option<String>;
}

/// The admission of a tenant cluster; its policy follows the `Tenant` object.
#[derive(Debug, Default)]
pub struct TenantAdmission {
    policy: RwLock<TenantPolicy>,
    /// The tenant's name and who holds the hosts Ingresses serve, once told.
    hosts: RwLock<Option<(String, std::sync::Arc<dyn HostHolders>)>>,
}

impl TenantAdmission {
    /// An admission enforcing `policy`.
    pub fn new(policy: TenantPolicy) -> TenantAdmission {
        TenantAdmission { policy: RwLock::new(policy), hosts: RwLock::default() }
    }

    /// Enforce `policy` from now on.
    pub fn set(&self, policy: TenantPolicy) {
        *self.policy.write() = policy;
    }

    /// The policy enforced.
    pub fn policy(&self) -> TenantPolicy {
        self.policy.read().clone()
    }

    /// Refuse, from now on, a new Ingress of tenant `tenant` for a host (or a name under a
    /// wildcard) that `holders` says another tenant holds.
    pub fn set_hosts(&self, tenant: &str, holders: std::sync::Arc<dyn HostHolders>) {
        *self.hosts.write() = Some((tenant.to_owned(), holders));
    }

    /// Refuse `object` of `rt` (an Ingress) if it asks for one of `hosts` that another tenant
    /// holds.
    fn admit_hosts(
        &self,
        rt: &ResourceType,
        object: &Value,
        hosts: std::collections::BTreeSet<String>,
    ) -> ApiResult<()> {
        let Some((tenant, holders)) = self.hosts.read().clone() else { return Ok(()) };
        for host in hosts {
            let wildcard = carrel_machinery::ingress::covering_wildcard(&host);
            let held = [Some(host.clone()), wildcard]
                .into_iter()
                .flatten()
                .find_map(|h| holders.holder(&h).filter(|holder| *holder != tenant).map(|_| h));
            if let Some(held) = held {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                let why = if held == host {
                    format!("host {host:?} is served for another tenant")
                } else {
                    format!("host {host:?} is under {held:?}, served for another tenant")
                };
                return Err(ApiError::forbidden(rt.group, rt.plural, name, &why));
            }
        }
        Ok(())
    }
}

impl TenantAdmission {
    /// Refuse `pod` unless its every container meets the tenant's Pod Security Standard and
    /// Carrel's own rules ([`podsecurity`]).
    fn admit_pod_security(&self, api: &Api, pod: &Value) -> ApiResult<()> {
        let level = self.policy.read().level;
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let mut violations = podsecurity::check(level, pod);
        violations.extend(podsecurity::env_source_violations(pod, &|source| {
            env_source_keys(api, pod, source)
        }));
        if violations.is_empty() {
            return Ok(());
        }
        let why = podsecurity::forbidden_message(level, &violations);
        Err(ApiError::forbidden("", "pods", name, &why))
    }
}

fn is_pods(rt: &ResourceType) -> bool {
    rt.strategy.is_pod()
}

impl Admission for TenantAdmission {
    fn serialized(&self, rt: &ResourceType) -> bool {
        is_pods(rt)
    }

    /// An update that makes an object serve hosts it did not serve is checked as a create is;
    /// so is a pod given an ephemeral container, whose pod security is that of the whole pod
    /// with it (as the PodSecurity plugin checks `pods/ephemeralcontainers`).
    fn admit_update(
        &self,
        api: &Api,
        rt: &ResourceType,
        old: &Value,
        new: &Value,
    ) -> ApiResult<()> {
        let ephemeral = |pod: &Value| pod.pointer("/spec/ephemeralContainers").cloned();
        if is_pods(rt) && ephemeral(old) != ephemeral(new) {
            return self.admit_pod_security(api, new);
        }
        let Some(hosts) = rt.strategy.served_hosts(new) else { return Ok(()) };
        let before = rt.strategy.served_hosts(old).unwrap_or_default();
        let added = hosts.into_iter().filter(|h| !before.contains(h)).collect();
        self.admit_hosts(rt, new, added)
    }

    fn admit_create(&self, api: &Api, rt: &ResourceType, pod: &Value) -> ApiResult<()> {
        if let Some(hosts) = rt.strategy.served_hosts(pod) {
            return self.admit_hosts(rt, pod, hosts);
        }
        if !is_pods(rt) {
            return Ok(());
        }
        self.admit_pod_security(api, pod)?;
        let policy = self.policy();
        let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        let wanted = gpu_requests(pod)
            .map_err(|why| ApiError::forbidden("", "pods", name, &why.to_string()))?;
        if wanted.is_empty() {
            return Ok(());
        }
        let pods = api.list(&Target { rt, namespace: None }, &ListParams::default())?;
        let mut used: BTreeMap<String, i64> = BTreeMap::new();
        for other in pods["items"].as_array().into_iter().flatten() {
            if terminal(other) {
                continue;
            }
            // Pods stored before were admitted, so their requests parse.
            for (resource, n) in gpu_requests(other).unwrap_or_default() {
                *used.entry(resource).or_default() += n;
            }
        }
        check_quota(&policy.gpu_quota, &wanted, &used)
            .map_err(|why| ApiError::forbidden("", "pods", name, &why.to_string()))
    }
}

/// The keys ConfigMap or Secret `source` of `pod`'s namespace holds now; `None` if there is none.
fn env_source_keys(
    api: &Api,
    pod: &Value,
    (kind, name): podsecurity::EnvSource<'_>,
) -> Option<Vec<String>> {
    let namespace = pod.pointer("/metadata/namespace").and_then(Value::as_str)?;
    let plural = if kind == "Secret" { "secrets" } else { "configmaps" };
    let registry = api.registry();
    let rt = registry.get("", "v1", plural)?;
    let object = match api.get(&Target { rt, namespace: Some(namespace.to_owned()) }, name) {
        Ok(o) => o,
        Err(e) => {
            if !matches!(e, ApiError::NotFound { .. }) {
                tracing::warn!(namespace, kind, name, error = %e.message(), "reading an envFrom source");
            }
            return None;
        }
    };
    Some(
        ["data", "stringData"]
            .iter()
            .filter_map(|f| object.get(*f).and_then(Value::as_object))
            .flat_map(|m| m.keys().cloned())
            .collect(),
    )
}

/// Whether a pod has finished (its slices are free again).
pub fn terminal(pod: &Value) -> bool {
    matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"))
}

/// The quota of a resource name: a MIG resource has its profile's quota; `nvidia.com/gpu` the
/// sum of the tenant's `7g` quotas.
fn quota_of(quota: &BTreeMap<String, i64>, resource: &str) -> i64 {
    if resource == WHOLE_GPU {
        return quota.iter().filter(|(p, _)| p.starts_with("7g.")).map(|(_, n)| *n).sum();
    }
    quota.iter().filter(|(p, _)| carrel_gpu::resource_name(p) == resource).map(|(_, n)| *n).sum()
}

/// A GPU request over a tenant's quota, in ResourceQuota's words; each list is `resource=n`
/// joined by commas, for the resources over quota.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("exceeded GPU quota: requested: {requested}, used: {used}, limited: {limited}")]
pub struct QuotaExceeded {
    /// What the pod asks for.
    pub requested: String,
    /// What the tenant's pods hold now.
    pub used: String,
    /// The quota.
    pub limited: String,
}

/// `Ok` when `wanted` on top of `used` stays within `quota`; else ResourceQuota's words.
fn check_quota(
    quota: &BTreeMap<String, i64>,
    wanted: &BTreeMap<String, i64>,
    used: &BTreeMap<String, i64>,
) -> Result<(), QuotaExceeded> {
    // Whole GPUs and 7g slices draw on the same quota.
    let sevens = |m: &BTreeMap<String, i64>| -> i64 {
        m.iter()
            .filter(|(r, _)| *r == WHOLE_GPU || r.starts_with("nvidia.com/mig-7g."))
            .map(|(_, n)| *n)
            .sum()
    };
    let over: Vec<&String> = wanted
        .iter()
        .filter(|(resource, n)| {
            let limit = quota_of(quota, resource);
            let use_now = if *resource == WHOLE_GPU {
                sevens(used)
            } else {
                used.get(*resource).copied().unwrap_or(0)
                    + if resource.starts_with("nvidia.com/mig-7g.") {
                        used.get(WHOLE_GPU).copied().unwrap_or(0)
                    } else {
                        0
                    }
            };
            use_now + **n > limit
        })
        .map(|(r, _)| r)
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    let list = |f: &dyn Fn(&str) -> i64| -> String {
        over.iter().map(|r| format!("{r}={}", f(r))).collect::<Vec<_>>().join(",")
    };
    Err(QuotaExceeded {
        requested: list(&|r| wanted[r]),
        used: list(&|r| {
            if r == WHOLE_GPU {
                sevens(used)
            } else {
                used.get(r).copied().unwrap_or(0)
            }
        }),
        limited: list(&|r| quota_of(quota, r)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Write;
    use serde_json::json;
    use std::sync::Arc;

    /// An API with a tenant's admission, through the create path a request takes.
    fn tenant_api() -> (tempfile::TempDir, Api) {
        let dir = tempfile::tempdir().expect("dir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Api::new(Arc::new(store)).expect("api");
        api.set_admission(Arc::new(TenantAdmission::new(TenantPolicy::default())));
        (dir, api)
    }

    fn create(api: &Api, plural: &str, object: Value) -> ApiResult<Value> {
        let registry = api.registry();
        let rt = registry.get("", "v1", plural).expect("type");
        api.create(
            &Target { rt, namespace: Some("default".into()) },
            object,
            &Write::by("t", false),
        )
    }

    fn env_from_pod(name: &str, from: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "c", "image": "x", "envFrom": [from]}]}})
    }

    #[test]
    fn a_pod_reading_a_forbidden_key_through_env_from_is_refused() {
        let (_dir, api) = tenant_api();
        create(
            &api,
            "configmaps",
            json!({"metadata": {"name": "cfg"}, "data": {"LD_PRELOAD": "/x.so", "A": "1"}}),
        )
        .expect("configmap");
        create(
            &api,
            "secrets",
            json!({"metadata": {"name": "sec"}, "stringData": {"NVIDIA_VISIBLE_DEVICES": "all"}}),
        )
        .expect("secret");
        create(&api, "configmaps", json!({"metadata": {"name": "clean"}, "data": {"A": "1"}}))
            .expect("configmap");
        let e = create(&api, "pods", env_from_pod("a", json!({"configMapRef": {"name": "cfg"}})))
            .expect_err("refused");
        assert_eq!((e.code(), e.reason()), (403, "Forbidden"));
        assert_eq!(
            e.message(),
            "pods \"a\" is forbidden: Carrel refuses environment variables that steer the GPU \
             runtime or the dynamic loader (NVIDIA_*, LD_*): container \"c\" gets LD_PRELOAD \
             from key \"LD_PRELOAD\" of ConfigMap \"cfg\" (envFrom)"
        );
        let e = create(&api, "pods", env_from_pod("b", json!({"secretRef": {"name": "sec"}})))
            .expect_err("refused");
        assert!(
            e.message().contains(
                "gets NVIDIA_VISIBLE_DEVICES from key \"NVIDIA_VISIBLE_DEVICES\" of Secret \"sec\""
            ),
            "{}",
            e.message()
        );
        let e = create(
            &api,
            "pods",
            env_from_pod("c", json!({"prefix": "NVIDIA_", "configMapRef": {"name": "clean"}})),
        )
        .expect_err("refused");
        assert!(e.message().contains("sets envFrom prefix \"NVIDIA_\""), "{}", e.message());
        // A clean source, a harmless prefix and a source not there yet are fine.
        create(&api, "pods", env_from_pod("d", json!({"configMapRef": {"name": "clean"}})))
            .expect("clean");
        create(
            &api,
            "pods",
            env_from_pod("e", json!({"prefix": "APP_", "configMapRef": {"name": "cfg"}})),
        )
        .expect("prefixed");
        create(&api, "pods", env_from_pod("f", json!({"configMapRef": {"name": "later"}})))
            .expect("missing");
    }

    #[test]
    fn quota_counts_usage_and_names_everything() {
        let quota = BTreeMap::from([("1g.18gb".to_owned(), 2), ("7g.141gb".to_owned(), 1)]);
        let want = |r: &str, n| BTreeMap::from([(r.to_owned(), n)]);
        assert!(check_quota(&quota, &want("nvidia.com/mig-1g.18gb", 2), &BTreeMap::new()).is_ok());
        let message = check_quota(
            &quota,
            &want("nvidia.com/mig-1g.18gb", 1),
            &want("nvidia.com/mig-1g.18gb", 2),
        )
        .expect_err("over");
        assert_eq!(
            message.to_string(),
            "exceeded GPU quota: requested: nvidia.com/mig-1g.18gb=1, used: nvidia.com/mig-1g.18gb=2, limited: nvidia.com/mig-1g.18gb=2"
        );
        // A whole GPU draws on the 7g quota, and the other way round.
        assert!(check_quota(&quota, &want(WHOLE_GPU, 1), &BTreeMap::new()).is_ok());
        assert!(
            check_quota(&quota, &want(WHOLE_GPU, 1), &want("nvidia.com/mig-7g.141gb", 1)).is_err()
        );
        assert!(
            check_quota(&quota, &want("nvidia.com/mig-7g.141gb", 1), &want(WHOLE_GPU, 1)).is_err()
        );
        // A profile without quota has none.
        assert!(check_quota(&quota, &want("nvidia.com/mig-2g.35gb", 1), &BTreeMap::new()).is_err());
    }
}

#[cfg(test)]
mod ingress_hosts {
    use super::*;
    use crate::api::Write;
    use serde_json::json;
    use std::sync::Arc;

    /// Hosts held: `app.example.com` and `*.apps.example.com` by tenant b.
    #[derive(Debug)]
    struct Held;

    impl HostHolders for Held {
        fn holder(&self, host: &str) -> Option<String> {
            matches!(host, "app.example.com" | "*.apps.example.com").then(|| "b".to_owned())
        }
    }

    #[test]
    fn an_ingress_for_a_host_another_tenant_holds_is_refused_at_once() {
        let dir = tempfile::tempdir().expect("dir");
        let store =
            carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
                .expect("store");
        let api = Api::new(Arc::new(store)).expect("api");
        let admission = Arc::new(TenantAdmission::default());
        api.set_admission(admission.clone());
        let create = |name: &str, host: &str| {
            let registry = api.registry();
            let rt = registry.get("networking.k8s.io", "v1", "ingresses").expect("type");
            let ingress = json!({"metadata": {"name": name}, "spec": {"rules": [{"host": host,
                "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend":
                    {"service": {"name": "web", "port": {"number": 80}}}}]}}]}});
            api.create(
                &Target { rt, namespace: Some("default".into()) },
                ingress,
                &Write::by("t", false),
            )
        };
        // Not told of holders yet: admitted (the syncer still refuses to carry it).
        create("early", "app.example.com").expect("admitted");
        admission.set_hosts("a", Arc::new(Held));
        let refused = create("web", "app.example.com").expect_err("refused");
        assert_eq!(refused.code(), 403);
        assert_eq!(
            refused.message(),
            "ingresses.networking.k8s.io \"web\" is forbidden: host \"app.example.com\" is served for another tenant"
        );
        let under = create("under", "x.apps.example.com").expect_err("refused");
        assert!(under.message().contains("is under \"*.apps.example.com\""), "{}", under.message());
        create("free", "free.example.com").expect("a free host is admitted");
        // An update to a held host is refused; one that keeps its hosts is not, even one
        // admitted before the holders were known.
        let registry = api.registry();
        let rt = registry.get("networking.k8s.io", "v1", "ingresses").expect("type");
        let target = Target { rt, namespace: Some("default".into()) };
        let mut moved = api.get(&target, "free").expect("get");
        moved["spec"]["rules"][0]["host"] = json!("app.example.com");
        let refused =
            api.update(&target, "free", moved, None, &Write::by("t", false)).expect_err("refused");
        assert_eq!(refused.code(), 403);
        let mut labelled = api.get(&target, "early").expect("get");
        labelled["metadata"]["labels"] = json!({"a": "b"});
        api.update(&target, "early", labelled, None, &Write::by("t", false))
            .expect("its hosts kept");
        // Tenant b itself is admitted.
        admission.set_hosts("b", Arc::new(Held));
        create("mine", "app.example.com").expect("its own host");
    }
}
