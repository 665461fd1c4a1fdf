//! ResourceQuotas at admission, as kube-apiserver's `ResourceQuota` plugin applies them to a
//! create in a namespace that has quotas: the quotas that count the new object (by its kind's
//! evaluator, [`carrel_machinery::quota`]: `pods`, `count/<resource>[.<group>]`, `services`,
//! `requests.cpu`, `requests.nvidia.com/gpu`, … and the quota's scopes) are checked against what
//! the namespace's stored objects use plus what the new object asks for. Over a limit, or
//! missing the cpu and memory a quota makes every container specify, the create is a 403 with
//! kube-apiserver's words (`exceeded quota: …`, `failed quota: …`).
//!
//! Usage is counted from the stored objects, listed while creates the quotas count are
//! serialised ([`Api::create`] holds the admission lock from `counting` until the object is
//! stored), so two creates cannot both take the last unit. kube-apiserver reads a quota's
//! `status.used` instead, and writes it back after each admitted create; here the
//! resourcequota controller (`carrel_controllers::resource_quota`) brings `status.used` up to
//! date a moment after the create.
//!
//! Events are never counted, nor creates outside a namespace, nor the server's own bootstrap
//! objects. Updates are not checked (kube-apiserver also charges a Service changed to a
//! LoadBalancer or a claim grown on update).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use carrel_machinery::quota::{self, Evaluator, Quota};

use crate::api::{Api, ListParams, Target};
use crate::object::meta_str;
use crate::resource::ResourceType;
use crate::status::{ApiError, ApiResult};

/// The quotas of `namespace` that count creates of `rt`, by name; empty when none does (the
/// create is then neither serialised nor checked).
pub(crate) fn counting(api: &Api, rt: &ResourceType, namespace: &str) -> ApiResult<Vec<Quota>> {
    if !rt.namespaced || namespace.is_empty() {
        return Ok(Vec::new());
    }
    let Some(evaluator) = Evaluator::of(rt.group, rt.plural) else { return Ok(Vec::new()) };
    let Some(quotas) = crate::resource::built_in("", "resourcequotas") else {
        return Ok(Vec::new());
    };
    let mut found: Vec<Quota> = items(api, quotas, namespace)?
        .iter()
        .map(Quota::from_object)
        .filter(|q| !evaluator.matching_resources(q.hard.keys().map(String::as_str)).is_empty())
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Admit or refuse `object`, a new object of `rt`, defaulted and valid, against `quotas` (from
/// [`counting`]).
pub(crate) fn admit_create(
    api: &Api,
    rt: &ResourceType,
    object: &Value,
    quotas: &[Quota],
) -> ApiResult<()> {
    if quotas.is_empty() {
        return Ok(());
    }
    let Some(evaluator) = Evaluator::of(rt.group, rt.plural) else { return Ok(()) };
    let namespace = meta_str(object, "namespace").unwrap_or_default();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    let verdict = quota::admit(quotas, &evaluator, object, now, || items(api, rt, namespace))?;
    verdict.map_err(|refusal| {
        let name = meta_str(object, "name").unwrap_or_default();
        ApiError::forbidden(rt.group, rt.plural, name, &refusal.to_string())
    })
}

/// The stored objects of `rt` in `namespace`.
fn items(api: &Api, rt: &ResourceType, namespace: &str) -> ApiResult<Vec<Value>> {
    let target = Target { rt, namespace: Some(namespace.to_owned()) };
    let mut list = api.list(&target, &ListParams::default())?;
    Ok(match list.get_mut("items").map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::admission::{TenantAdmission, TenantPolicy};
    use crate::api::Write;

    fn create(api: &Api, group: &str, plural: &str, object: Value) -> ApiResult<Value> {
        let rt = crate::resource::built_in(group, plural).expect("type");
        let target = Target { rt, namespace: Some("default".into()) };
        api.create(&target, object, &Write::by("t", false))
    }

    fn quota(api: &Api, name: &str, spec: Value) {
        create(api, "", "resourcequotas", json!({"metadata": {"name": name}, "spec": spec}))
            .expect("quota");
    }

    fn pod(name: &str, resources: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "c", "image": "x", "resources": resources}]}})
    }

    #[test]
    fn creates_over_a_quota_are_refused_with_kube_apiservers_words() {
        let (_dir, api) = crate::api::scratch();
        quota(
            &api,
            "q",
            json!({"hard": {"pods": "2", "count/configmaps": "1",
                            "requests.nvidia.com/mig-1g.18gb": "1"}}),
        );
        let gpu = json!({"limits": {"nvidia.com/mig-1g.18gb": "1"}});
        create(&api, "", "pods", pod("a", gpu.clone())).expect("first GPU pod");
        let e = create(&api, "", "pods", pod("b", gpu)).expect_err("second GPU pod");
        assert_eq!((e.code(), e.reason()), (403, "Forbidden"));
        assert_eq!(
            e.message(),
            "pods \"b\" is forbidden: exceeded quota: q, requested: \
             requests.nvidia.com/mig-1g.18gb=1, used: requests.nvidia.com/mig-1g.18gb=1, \
             limited: requests.nvidia.com/mig-1g.18gb=1"
        );
        create(&api, "", "pods", pod("b", json!({}))).expect("a pod without a GPU");
        let e = create(&api, "", "pods", pod("c", json!({}))).expect_err("a third pod");
        assert_eq!(
            e.message(),
            "pods \"c\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, \
             limited: pods=2"
        );
        create(&api, "", "configmaps", json!({"metadata": {"name": "one"}})).expect("configmap");
        let e = create(&api, "", "configmaps", json!({"metadata": {"name": "two"}}))
            .expect_err("a second configmap");
        assert_eq!(
            e.message(),
            "configmaps \"two\" is forbidden: exceeded quota: q, requested: count/configmaps=1, \
             used: count/configmaps=1, limited: count/configmaps=1"
        );
        // Secrets are not counted; another namespace has no quota.
        create(&api, "", "secrets", json!({"metadata": {"name": "s"}})).expect("secret");
        let rt = crate::resource::built_in("", "pods").expect("pods");
        let other = Target { rt, namespace: Some("kube-system".into()) };
        api.create(&other, pod("free", json!({})), &Write::by("t", false)).expect("elsewhere");
    }

    #[test]
    fn a_quota_on_cpu_makes_every_container_specify_it_and_dry_runs_are_checked_too() {
        let (_dir, api) = crate::api::scratch();
        quota(&api, "compute", json!({"hard": {"limits.cpu": "1", "requests.memory": "1Gi"}}));
        let e = create(&api, "", "pods", pod("p", json!({"requests": {"memory": "1Gi"}})))
            .expect_err("no cpu limit");
        assert_eq!(
            e.message(),
            "pods \"p\" is forbidden: failed quota: compute: must specify limits.cpu for: c"
        );
        let rt = crate::resource::built_in("", "pods").expect("pods");
        let target = Target { rt, namespace: Some("default".into()) };
        let big = pod("p", json!({"limits": {"cpu": "2", "memory": "512Mi"}}));
        let e = api.create(&target, big, &Write::by("t", true)).expect_err("dry run over");
        assert_eq!(
            e.message(),
            "pods \"p\" is forbidden: exceeded quota: compute, requested: limits.cpu=2, \
             used: limits.cpu=0, limited: limits.cpu=1"
        );
    }

    #[test]
    fn deployments_are_counted_by_their_group_resource() {
        let (_dir, api) = crate::api::scratch();
        quota(&api, "apps", json!({"hard": {"count/deployments.apps": "0"}}));
        let deployment = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let e = create(&api, "apps", "deployments", deployment).expect_err("over");
        assert_eq!(
            e.message(),
            "deployments.apps \"web\" is forbidden: exceeded quota: apps, requested: \
             count/deployments.apps=1, used: count/deployments.apps=0, \
             limited: count/deployments.apps=0"
        );
    }

    #[test]
    fn tenants_get_quotas_checked_after_their_own_admission() {
        let (_dir, api) = crate::api::scratch();
        api.set_admission(Arc::new(TenantAdmission::new(TenantPolicy::default())));
        quota(&api, "q", json!({"hard": {"pods": "1"}}));
        create(&api, "", "pods", pod("a", json!({}))).expect("first");
        let e = create(&api, "", "pods", pod("b", json!({}))).expect_err("second");
        assert!(e.message().contains("exceeded quota: q, requested: pods=1"), "{}", e.message());
        // Serialised: pods created at once never overrun the quota.
        let (_dir, api) = crate::api::scratch();
        let api = Arc::new(api);
        quota(&api, "q", json!({"hard": {"pods": "3"}}));
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let api = api.clone();
                std::thread::spawn(move || {
                    create(&api, "", "pods", pod(&format!("p{i}"), json!({}))).is_ok()
                })
            })
            .collect();
        let created = handles.into_iter().filter_map(|h| h.join().ok()).filter(|ok| *ok).count();
        assert_eq!(created, 3);
    }
}
