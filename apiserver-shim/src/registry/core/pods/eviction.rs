//! `POST pods/<name>/eviction`: delete a pod unless that would break its PodDisruptionBudget, as
//! kube-apiserver's `pkg/registry/core/pod/storage/eviction.go` does.
//!
//! - A pod that is finished, `Pending` or already being deleted is deleted at once: it disrupts
//!   nothing more.
//! - Otherwise the PodDisruptionBudgets of its namespace whose selector matches it decide: none,
//!   and it is deleted; more than one, and the eviction fails (500, which the subresource does not
//!   support); one, and a disruption is taken from its `status.disruptionsAllowed` (the pod is
//!   recorded in `status.disruptedPods`, the write made on the budget's `resourceVersion`), or
//!   refused with 429 while none is allowed. A pod that is running but not ready is deleted
//!   without taking a disruption when the budget's `unhealthyPodEvictionPolicy` is `AlwaysAllow`,
//!   or (`IfHealthyBudget`, the default) while the budget has the healthy pods it needs.
//! - The pod gets the condition `DisruptionTarget` (`EvictionByEvictionAPI`) and is then deleted
//!   with the Eviction's `deleteOptions`; where the decision rests on the pod's state, the delete
//!   is made on the `resourceVersion` it was read at, so a pod that changed meanwhile is not
//!   evicted on stale grounds.
//!
//! Where it differs: a write that loses a race is retried at once, not after kube-apiserver's
//! half-second backoff (writes here are a local store's compare-and-swap).

use serde_json::{json, Map, Value};

use crate::api::{Api, DeleteParams, ListParams, Target, Write};
use crate::object::{go_quote as quote, is_deleting, meta_str, now_rfc3339};
use crate::resource::{self, ResourceType, Subresource};
use crate::status::{ApiError, ApiResult, Cause};
use crate::validation::Selector;

/// The most pods a budget's `status.disruptedPods` may hold before evictions under it are
/// refused: evictions the disruption controller has not yet seen (`MaxDisruptedPodSize`).
pub const MAX_DISRUPTED_POD_SIZE: usize = 2000;

/// How many times a write that lost a race is tried again (`EvictionsRetry.Steps`).
const RETRIES: usize = 20;

/// Who the eviction's writes are made as.
const MANAGER: &str = "kube-apiserver";

/// The message of an eviction refused by a disruption budget.
pub const REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

/// The message of an eviction of a pod more than one budget selects (answered with code 500).
pub const MORE_THAN_ONE_BUDGET: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

/// Evict pod `name` of `namespace` as `eviction` (a `policy/v1` or `policy/v1beta1` Eviction)
/// asks; `dry_run` is the request's `dryRun=All`. The answer is the `Status` to send, whose
/// `code` is the HTTP status: 201 once the pod is deleted, 500 when more than one budget selects
/// it. Refusals are errors (429 while its budget allows no disruption).
pub fn evict(
    api: &Api,
    namespace: &str,
    name: &str,
    eviction: &Value,
    dry_run: bool,
) -> ApiResult<Value> {
    check_eviction(eviction, namespace, name)?;
    let mut options =
        eviction.get("deleteOptions").map(DeleteParams::from_options).unwrap_or_default();
    options.dry_run |= dry_run;
    let pods = pods_type()?;
    let target = Target { rt: pods, namespace: Some(namespace.to_owned()) };

    // A pod whose disruption has already happened is deleted without asking its budget.
    let mut tries = 0;
    let pod = loop {
        let pod = api.get(&target, name)?;
        if !can_ignore_budget(&pod) {
            break pod;
        }
        let mut params = options.clone();
        if enforces_resource_version(&pod) && options.resource_version.is_none() {
            params.resource_version = meta_str(&pod, "resourceVersion").map(str::to_owned);
        }
        match mark_and_delete(api, &target, name, params) {
            Ok(()) => return Ok(success()),
            Err(e @ ApiError::Conflict { .. })
                if options.resource_version.is_none() && tries + 1 < RETRIES =>
            {
                tracing::debug!(pod = name, error = %e, "eviction lost a race; trying again");
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    };

    let budgets = budgets_of(api, namespace, &pod)?;
    let mut take_resource_version = false;
    let budget_name = match budgets.as_slice() {
        [] => None,
        [_, _, ..] => return Ok(failure(500, MORE_THAN_ONE_BUDGET)),
        [budget] => {
            let budget_name = meta_str(budget, "name").unwrap_or_default().to_owned();
            if !is_ready(&pod) && may_delete_unhealthy(budget) {
                // It does not count as healthy: deleting it disrupts nothing the budget
                // guards, as long as it does not become ready meanwhile.
                take_resource_version = true;
            } else {
                take_disruption(api, namespace, budget.clone(), name, options.dry_run)?;
            }
            Some(budget_name)
        }
    };

    let mut params = options.clone();
    if take_resource_version {
        params.resource_version = meta_str(&pod, "resourceVersion").map(str::to_owned);
    }
    match mark_and_delete(api, &target, name, params) {
        Ok(()) => Ok(success()),
        Err(ApiError::Conflict { .. })
            if take_resource_version && options.resource_version.is_none() =>
        {
            Err(still_processing(budget_name.as_deref().unwrap_or_default()))
        }
        Err(e) => Err(e),
    }
}

/// The pod resource type.
fn pods_type() -> ApiResult<&'static ResourceType> {
    resource::built_in("", "pods").ok_or_else(|| ApiError::internal("pods are not served"))
}

/// The checks of the Eviction itself: its type, and that it names the pod of the URL.
fn check_eviction(eviction: &Value, namespace: &str, name: &str) -> ApiResult<()> {
    if let Some(version) = eviction.get("apiVersion").and_then(Value::as_str) {
        if !matches!(version, "policy/v1" | "policy/v1beta1") {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({version}) does not match the expected API version (policy/v1)"
            )));
        }
    }
    if let Some(kind) = eviction.get("kind").and_then(Value::as_str) {
        if kind != "Eviction" {
            return Err(ApiError::bad_request(format!("not a Eviction object: {}", quote(kind))));
        }
    }
    if meta_str(eviction, "name").unwrap_or_default() != name {
        return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
    }
    let body_namespace = meta_str(eviction, "namespace").unwrap_or_default();
    if !body_namespace.is_empty() && body_namespace != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

/// `Status` Success, which a create answers with 201.
fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}

/// A `Status` Failure that is an answer, not an error (it has no reason).
fn failure(code: u16, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": code,
    })
}

/// The pod's phase (`Pending` when it has none).
fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending")
}

/// Whether the pod may be deleted without asking its budget (`canIgnorePDB`): it is finished,
/// not yet running, or already being deleted.
pub fn can_ignore_budget(pod: &Value) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed" | "Pending") || is_deleting(pod)
}

/// Whether a delete that skips the budget must be made on the `resourceVersion` read
/// (`shouldEnforceResourceVersion`): unless the pod is finished or being deleted, it could
/// start and become ready meanwhile.
pub fn enforces_resource_version(pod: &Value) -> bool {
    !(matches!(phase(pod), "Succeeded" | "Failed") || is_deleting(pod))
}

/// Whether the pod's `Ready` condition is `True` (`IsPodReady`).
pub fn is_ready(pod: &Value) -> bool {
    conditions(pod).any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn conditions(pod: &Value) -> impl Iterator<Item = &Value> {
    pod.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten()
}

/// Whether a pod that is not ready may go without taking a disruption from `budget`: always
/// under `AlwaysAllow`, else while the budget has the healthy pods it needs.
pub fn may_delete_unhealthy(budget: &Value) -> bool {
    if budget.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow")) {
        return true;
    }
    let count = |field: &str| {
        budget.pointer(&format!("/status/{field}")).and_then(Value::as_i64).unwrap_or(0)
    };
    count("currentHealthy") >= count("desiredHealthy") && count("desiredHealthy") > 0
}

/// Whether `budget` selects `pod`: a budget with no selector, an empty one or one that does not
/// parse selects nothing here (`getPodDisruptionBudgets`).
pub fn selects(budget: &Value, pod: &Value) -> bool {
    let selector = budget
        .pointer("/spec/selector")
        .filter(|s| !s.is_null())
        .and_then(|s| serde_json::from_value(s.clone()).ok());
    let selector = Selector::of(selector.as_ref());
    if selector.is_empty() {
        return false;
    }
    let labels =
        pod.pointer("/metadata/labels").and_then(|l| serde_json::from_value(l.clone()).ok());
    selector.matches(labels.as_ref())
}

/// The budgets of the pod's namespace that select it.
fn budgets_of(api: &Api, namespace: &str, pod: &Value) -> ApiResult<Vec<Value>> {
    let rt = budgets_type()?;
    let target = Target { rt, namespace: Some(namespace.to_owned()) };
    let mut listed = api.list(&target, &ListParams::default())?;
    let items = match listed["items"].take() {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    Ok(items.into_iter().filter(|b| selects(b, pod)).collect())
}

fn budgets_type() -> ApiResult<&'static ResourceType> {
    resource::built_in("policy", "poddisruptionbudgets")
        .ok_or_else(|| ApiError::internal("poddisruptionbudgets are not served"))
}

/// Take one disruption from `budget` for pod `pod`, re-reading the budget after a lost race.
fn take_disruption(
    api: &Api,
    namespace: &str,
    mut budget: Value,
    pod: &str,
    dry_run: bool,
) -> ApiResult<()> {
    let rt = budgets_type()?;
    let target = Target { rt, namespace: Some(namespace.to_owned()) };
    let name = meta_str(&budget, "name").unwrap_or_default().to_owned();
    let mut tries = 0;
    loop {
        let taken = check_and_decrement(budget, pod, &now_rfc3339())?;
        if dry_run {
            return Ok(());
        }
        let write = Write::by(MANAGER, false);
        match api.update(&target, &name, taken, Some(Subresource::Status), &write) {
            Ok(_) => return Ok(()),
            Err(ApiError::Conflict { .. }) if tries + 1 < RETRIES => {
                tries += 1;
                budget = api.get(&target, &name)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `budget` with one disruption taken for `pod` at `now`, or why none may be
/// (`checkAndDecrement`): its status is older than its spec (429 until the disruption
/// controller catches up), it allows a negative number or has too many unconfirmed evictions
/// (403), or it allows none (429, naming the healthy pods it needs and has).
pub fn check_and_decrement(mut budget: Value, pod: &str, now: &str) -> ApiResult<Value> {
    let name = meta_str(&budget, "name").unwrap_or_default().to_owned();
    let int = |pointer: &str| budget.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
    if int("/status/observedGeneration") < int("/metadata/generation") {
        return Err(still_processing(&name));
    }
    let allowed = int("/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudget",
            &name,
            "pdb disruptions allowed is negative",
        ));
    }
    let disrupted =
        budget.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, Map::len);
    if disrupted > MAX_DISRUPTED_POD_SIZE {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudget",
            &name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        let why = format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            int("/status/desiredHealthy"),
            int("/status/currentHealthy"),
        );
        return Err(refused(0, why));
    }
    let observed = int("/status/observedGeneration");
    let Some(status) = budget.get_mut("status").and_then(Value::as_object_mut) else {
        return Err(ApiError::internal(format!("poddisruptionbudget {name} has no status")));
    };
    status.insert("disruptionsAllowed".into(), json!(allowed - 1));
    if allowed == 1 {
        set_insufficient(status, observed, now);
    }
    let pods = status.entry("disruptedPods").or_insert_with(|| json!({}));
    if !pods.is_object() {
        *pods = json!({});
    }
    if let Some(pods) = pods.as_object_mut() {
        pods.insert(pod.to_owned(), json!(now));
    }
    Ok(budget)
}

/// The `DisruptionAllowed` condition once no disruption is left
/// (`UpdateDisruptionAllowedCondition`): `False`, `InsufficientPods`.
fn set_insufficient(status: &mut Map<String, Value>, observed_generation: i64, now: &str) {
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(list) = list.as_array_mut() else { return };
    let wanted = json!({
        "type": "DisruptionAllowed",
        "status": "False",
        "reason": "InsufficientPods",
        "message": "",
        "observedGeneration": observed_generation,
        "lastTransitionTime": now,
    });
    match list.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(existing) => {
            // `meta.SetStatusCondition`: the transition time moves only with the status.
            if existing["status"] == "False" {
                if let Some(since) = existing.get("lastTransitionTime").cloned() {
                    let mut kept = wanted;
                    kept["lastTransitionTime"] = since;
                    *existing = kept;
                    return;
                }
            }
            *existing = wanted;
        }
        None => list.push(wanted),
    }
}

/// The 429 of an eviction refused because of budget `name`, with its `DisruptionBudget` cause.
fn refused(retry_after: u32, why: String) -> ApiError {
    ApiError::too_many_requests_because(
        REFUSED,
        retry_after,
        vec![Cause::new("DisruptionBudget", "", why)],
    )
}

/// The 429 while budget `name`'s status is behind its spec or the pod changed under the
/// decision (`createTooManyRequestsError`).
fn still_processing(name: &str) -> ApiError {
    refused(10, format!("The disruption budget {name} is still being processed by the server."))
}

/// Mark the pod as the target of a disruption (unless the delete is a dry run), then delete it
/// with `params` (`addConditionAndDeletePod`). The preconditions of `params` are checked before
/// the mark, on the pod as it is (the mark is made again on a pod that changed meanwhile, as
/// kube-apiserver's guaranteed update does), and a `resourceVersion` precondition moves to the
/// marked pod's.
fn mark_and_delete(
    api: &Api,
    target: &Target<'_>,
    name: &str,
    mut params: DeleteParams,
) -> ApiResult<()> {
    let mut tries = 0;
    while !params.dry_run {
        let mut pod = api.get(target, name)?;
        check_preconditions(&pod, name, &params)?;
        if !set_disruption_target(&mut pod, &now_rfc3339()) {
            break;
        }
        let write = Write::by(MANAGER, false);
        match api.update(target, name, pod, Some(Subresource::Status), &write) {
            Ok(marked) => {
                if params.resource_version.is_some() {
                    params.resource_version =
                        meta_str(&marked, "resourceVersion").map(str::to_owned);
                }
                break;
            }
            Err(ApiError::Conflict { .. }) if tries + 1 < RETRIES => tries += 1,
            Err(e) => return Err(e),
        }
    }
    api.delete(target, name, &params).map(drop)
}

/// The preconditions of a delete, checked on `pod` before it is marked.
fn check_preconditions(pod: &Value, name: &str, params: &DeleteParams) -> ApiResult<()> {
    let uid = meta_str(pod, "uid").unwrap_or_default();
    if let Some(wanted) = params.uid.as_deref().filter(|u| !u.is_empty() && *u != uid) {
        return Err(ApiError::conflict(
            "",
            "Pod",
            name,
            &format!(
                "the UID in the precondition ({wanted}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
            ),
        ));
    }
    let version = meta_str(pod, "resourceVersion").unwrap_or_default();
    if let Some(wanted) =
        params.resource_version.as_deref().filter(|v| !v.is_empty() && *v != version)
    {
        return Err(ApiError::conflict(
            "",
            "Pod",
            name,
            &format!(
                "the ResourceVersion in the precondition ({wanted}) does not match the ResourceVersion in record ({version}). The object might have been modified"
            ),
        ));
    }
    Ok(())
}

/// Set the pod's `DisruptionTarget` condition to `True`, `EvictionByEvictionAPI`
/// (`UpdatePodCondition`); whether it changed.
pub fn set_disruption_target(pod: &mut Value, now: &str) -> bool {
    let wanted = json!({
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
        "lastTransitionTime": now,
    });
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let Some(list) = pod["status"]["conditions"].as_array_mut() else { return false };
    match list.iter_mut().find(|c| c["type"] == "DisruptionTarget") {
        None => {
            list.push(wanted);
            true
        }
        Some(existing) => {
            let same = ["status", "reason", "message"].iter().all(|f| existing[f] == wanted[f]);
            if same {
                return false;
            }
            let mut updated = wanted;
            if existing["status"] == "True" {
                updated["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = updated;
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "web"}},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        })
    }

    fn budget(status: Value) -> Value {
        json!({
            "metadata": {"name": "web", "generation": 1},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            "status": status,
        })
    }

    #[test]
    fn finished_pending_and_deleting_pods_skip_their_budget() {
        assert!(can_ignore_budget(&pod("Succeeded", false)));
        assert!(can_ignore_budget(&pod("Failed", false)));
        assert!(can_ignore_budget(&pod("Pending", false)));
        assert!(can_ignore_budget(&json!({"metadata": {"name": "p"}})), "no phase is Pending");
        assert!(!can_ignore_budget(&pod("Running", true)));
        let mut deleting = pod("Running", true);
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert!(can_ignore_budget(&deleting));
        assert!(!enforces_resource_version(&deleting));
        assert!(enforces_resource_version(&pod("Pending", false)), "it could start meanwhile");
        assert!(!enforces_resource_version(&pod("Failed", false)));
    }

    #[test]
    fn a_budget_selects_by_its_selector_and_an_empty_one_selects_nothing() {
        let p = pod("Running", true);
        assert!(selects(&budget(json!({})), &p));
        let mut other = budget(json!({}));
        other["spec"]["selector"] = json!({"matchLabels": {"app": "db"}});
        assert!(!selects(&other, &p));
        other["spec"]["selector"] = json!({});
        assert!(!selects(&other, &p), "an empty selector matches nothing here");
        other["spec"]["selector"] = Value::Null;
        assert!(!selects(&other, &p));
        other["spec"]["selector"] =
            json!({"matchExpressions": [{"key": "app", "operator": "Near"}]});
        assert!(!selects(&other, &p), "an invalid selector matches nothing");
    }

    #[test]
    fn a_disruption_is_taken_and_the_pod_recorded() {
        let b = budget(json!({"observedGeneration": 1, "disruptionsAllowed": 2,
            "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3,
            "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 1}]}));
        let once = check_and_decrement(b, "p1", "2026-01-01T00:00:00Z").expect("allowed");
        assert_eq!(once["status"]["disruptionsAllowed"], 1);
        assert_eq!(once["status"]["disruptedPods"], json!({"p1": "2026-01-01T00:00:00Z"}));
        assert_eq!(once["status"]["conditions"][0]["status"], "True", "one is still allowed");
        let twice = check_and_decrement(once, "p2", "2026-01-01T00:00:05Z").expect("allowed");
        assert_eq!(twice["status"]["disruptionsAllowed"], 0);
        assert_eq!(twice["status"]["disruptedPods"].as_object().map(Map::len), Some(2));
        let condition = &twice["status"]["conditions"][0];
        assert_eq!(
            (&condition["status"], &condition["reason"]),
            (&json!("False"), &json!("InsufficientPods"))
        );
        assert_eq!(condition["lastTransitionTime"], "2026-01-01T00:00:05Z");

        let refused =
            check_and_decrement(twice, "p3", "2026-01-01T00:00:06Z").expect_err("none left");
        assert_eq!(refused.code(), 429);
        assert_eq!(refused.message(), REFUSED);
        assert_eq!(refused.retry_after(), None);
        let status = refused.to_status();
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 1 healthy pods and has 3 currently"}])
        );
    }

    #[test]
    fn a_stale_or_broken_budget_refuses() {
        let stale = budget(json!({"observedGeneration": 0, "disruptionsAllowed": 1}));
        let e = check_and_decrement(stale, "p", "2026-01-01T00:00:00Z").expect_err("stale");
        assert_eq!((e.code(), e.retry_after()), (429, Some(10)));
        assert_eq!(
            e.causes()[0].message,
            "The disruption budget web is still being processed by the server."
        );
        let negative = budget(json!({"observedGeneration": 1, "disruptionsAllowed": -1}));
        let e = check_and_decrement(negative, "p", "2026-01-01T00:00:00Z").expect_err("negative");
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.message(),
            "poddisruptionbudget.policy \"web\" is forbidden: pdb disruptions allowed is negative"
        );
        let many: Map<String, Value> = (0..=MAX_DISRUPTED_POD_SIZE)
            .map(|i| (format!("p{i}"), json!("2026-01-01T00:00:00Z")))
            .collect();
        let full = budget(
            json!({"observedGeneration": 1, "disruptionsAllowed": 5, "disruptedPods": many}),
        );
        assert_eq!(
            check_and_decrement(full, "p", "2026-01-01T00:00:00Z").expect_err("full").code(),
            403
        );
    }

    #[test]
    fn an_unready_pod_goes_freely_under_always_allow_or_a_healthy_budget() {
        let healthy = budget(json!({"currentHealthy": 2, "desiredHealthy": 1}));
        assert!(may_delete_unhealthy(&healthy));
        let short = budget(json!({"currentHealthy": 1, "desiredHealthy": 2}));
        assert!(!may_delete_unhealthy(&short));
        let nothing_needed = budget(json!({"currentHealthy": 0, "desiredHealthy": 0}));
        assert!(!may_delete_unhealthy(&nothing_needed));
        let mut always = short.clone();
        always["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert!(may_delete_unhealthy(&always));
        assert!(!is_ready(&pod("Running", false)) && is_ready(&pod("Running", true)));
    }

    #[test]
    fn the_disruption_target_condition_is_set_once() {
        let mut p = pod("Running", true);
        assert!(set_disruption_target(&mut p, "2026-01-01T00:00:00Z"));
        let c = &p["status"]["conditions"][1];
        assert_eq!(
            (&c["type"], &c["reason"]),
            (&json!("DisruptionTarget"), &json!("EvictionByEvictionAPI"))
        );
        assert_eq!(c["message"], "Eviction API: evicting");
        assert!(!set_disruption_target(&mut p, "2026-01-01T00:01:00Z"));
        let mut bare = json!({"metadata": {"name": "p"}});
        assert!(set_disruption_target(&mut bare, "2026-01-01T00:00:00Z"));
        assert_eq!(bare["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn the_eviction_must_name_its_pod() {
        let ok = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"}});
        assert!(check_eviction(&ok, "ns", "p").is_ok());
        let beta =
            json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p"}});
        assert!(check_eviction(&beta, "ns", "p").is_ok());
        let e = check_eviction(&ok, "ns", "q").expect_err("another pod");
        assert_eq!(e.message(), "name in URL does not match name in Eviction object");
        assert_eq!(check_eviction(&ok, "other", "p").expect_err("namespace").code(), 400);
        let wrong = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        assert_eq!(check_eviction(&wrong, "ns", "p").expect_err("a pod").code(), 400);
    }
}
