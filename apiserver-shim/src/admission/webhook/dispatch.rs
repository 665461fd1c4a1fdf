//! Which admission webhooks a request calls, and what their answers do to it, as
//! kube-apiserver's `MutatingAdmissionWebhook` and `ValidatingAdmissionWebhook` plugins decide.
//!
//! The webhooks of a cluster are read from its own store, in configuration name order and in
//! order within a configuration, once per change: every write of a configuration bumps
//! [`changed`]'s generation. A webhook is called for a request its rules, `namespaceSelector`
//! and `objectSelector` select (`crate::admission::matching`, under its `matchPolicy`) and
//! whose `matchConditions` are all true. Mutating webhooks ([`mutate`]) are called one after
//! another, each shown what the ones before it made of the object; a `JSONPatch` answer is
//! applied and the object defaulted again; a webhook with `reinvocationPolicy: IfNeeded` is
//! called once more when a later one changed the object. Validating webhooks ([`validate`]) are
//! called all at once; the first refusal, in webhook order, refuses the request.
//!
//! A webhook that cannot be called, times out or answers with something that is not an answer
//! fails the request with a 500 (`failurePolicy: Fail`) or is passed over (`Ignore`). A dry run
//! calls only webhooks without side effects (`None`, `NoneOnDryRun`); the others refuse it with a
//! 400. Warnings of every answer become the request's `Warning` headers.
//!
//! A request runs off its runtime's async workers, as every store call does; where the HTTP
//! layer says so ([`on_request_thread`]), its thread drives its webhook calls on its own
//! runtime, with no hand-off to another thread; elsewhere (a test, a caller of [`crate::Api`] of
//! its own) they go out on a runtime of webhook calls (`runtime`).
//!
//! Left out, as kube-apiserver has them: `admissionReviewVersions` without `v1` (a webhook that
//! accepts only `v1beta1` fails as a call that could not be made); `CONNECT` requests (exec,
//! attach, port forward) and `pods/eviction` do not call webhooks (an eviction's delete calls
//! them as a `DELETE` of the pod), and a pod's `binding` calls them as an `UPDATE` of the pod;
//! `authorizer` in match conditions (refused when the configuration is written); audit
//! annotations are logged with `tracing`, there being no audit log.

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use carrel_schema::{Activation, Expression};
use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingWebhook,
};
use serde_json::{json, Value};

use super::client::{call, Answer, CallError, Endpoint, Hook, ServiceAddress, ServiceResolver};
use crate::admission::matching;
use crate::admission::reloaded::{stored, Reloaded};
use crate::admission::request::{in_version, namespace_object, request_value, Attributes};
use crate::api::{Api, Target};
use crate::registry::admissionregistration::{
    mutatingwebhookconfigurations, validatingwebhookconfigurations, webhooks_of, GROUP,
};
use crate::resource::{built_in, ResourceType};
use crate::status::{ApiError, ApiResult};

/// The webhooks of a cluster, read once per change of their configurations.
pub type Cache = Reloaded<Loaded>;

/// Note a write of a webhook configuration: the next request reads them again.
pub fn changed(api: &Api) {
    api.webhooks.changed();
}

#[derive(Debug, Default)]
pub struct Loaded {
    mutating: Vec<Webhook>,
    validating: Vec<Webhook>,
}

/// One webhook of a configuration, ready to match and call.
#[derive(Debug)]
struct Webhook {
    spec: ValidatingWebhook,
    /// Its rules and selectors, as the matcher reads them.
    matches: MatchResources,
    /// `failurePolicy: Ignore`.
    ignore_failures: bool,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    reinvoke: bool,
    /// Its match conditions, compiled; `Err` for one stored that no longer compiles.
    conditions: Result<Vec<(String, Expression)>, String>,
    hook: Hook,
}

impl Webhook {
    fn new(spec: ValidatingWebhook, reinvoke: bool) -> Webhook {
        let rules = spec.rules.iter().flatten().map(|r| NamedRuleWithOperations {
            api_groups: r.api_groups.clone(),
            api_versions: r.api_versions.clone(),
            operations: r.operations.clone(),
            resources: r.resources.clone(),
            scope: r.scope.clone(),
            resource_names: None,
        });
        let matches = MatchResources {
            exclude_resource_rules: None,
            match_policy: spec.match_policy.clone(),
            namespace_selector: spec.namespace_selector.clone(),
            object_selector: spec.object_selector.clone(),
            resource_rules: Some(rules.collect()),
        };
        let conditions = spec
            .match_conditions
            .iter()
            .flatten()
            .map(|c| match super::compile_condition(&c.expression) {
                Ok(e) => Ok((c.name.clone(), e)),
                Err(why) => Err(format!("compilation failed: {why}")),
            })
            .collect();
        let config = &spec.client_config;
        let service = config
            .service
            .as_ref()
            .map(|s| (s.namespace.as_str(), s.name.as_str(), s.port, s.path.as_deref()));
        let endpoint = Endpoint::of(config.url.as_deref(), service)
            .unwrap_or_else(|| Endpoint::Url(String::new()));
        let hook = Hook {
            name: spec.name.clone(),
            endpoint,
            ca_bundle: config.ca_bundle.as_ref().map(|b| b.0.clone()),
            timeout: Duration::from_secs(spec.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64),
        };
        Webhook {
            ignore_failures: spec.failure_policy.as_deref() == Some("Ignore"),
            reinvoke,
            matches,
            conditions,
            hook,
            spec,
        }
    }
}

/// The cluster's webhooks as of now: read again after a write of a configuration.
fn load(api: &Api) -> ApiResult<Arc<Loaded>> {
    api.webhooks.get(|| load_from(api))
}

fn load_from(api: &Api) -> ApiResult<Loaded> {
    let mut loaded = Loaded::default();
    for item in stored(api, &mutatingwebhookconfigurations::TYPE)? {
        let reinvoke: Vec<bool> = item["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| h["reinvocationPolicy"] == "IfNeeded")
            .collect();
        let hooks = webhooks_of(&item).into_iter().zip(reinvoke);
        loaded.mutating.extend(hooks.map(|(spec, reinvoke)| Webhook::new(spec, reinvoke)));
    }
    for item in stored(api, &validatingwebhookconfigurations::TYPE)? {
        loaded.validating.extend(webhooks_of(&item).into_iter().map(|s| Webhook::new(s, false)));
    }
    Ok(loaded)
}

/// Whether the request is about admission's own configuration, which no webhook may lock (as
/// kube-apiserver exempts it).
fn exempt(a: &Attributes<'_>) -> bool {
    a.rt.group == GROUP
}

/// Call the mutating webhooks that select the request, on `object` (the object to be stored,
/// defaulted; `null` for a delete, which they may see but not change): their patches applied
/// to it in turn, each followed by `defaults`.
pub fn mutate(
    api: &Api,
    attributes: &Attributes<'_>,
    object: &mut Value,
    defaults: &dyn Fn(&mut Value),
) -> ApiResult<()> {
    if exempt(attributes) {
        return Ok(());
    }
    let loaded = load(api)?;
    let hooks = &loaded.mutating;
    if hooks.is_empty() {
        return Ok(());
    }
    let namespace = namespace_object(api, attributes)?;
    let registry = api.registry();
    let resolver = ClusterServices(api);
    // Which webhooks were called (their index), which may be called again, and whether a
    // change since calls for it.
    let mut reinvocable: Vec<usize> = Vec::new();
    let mut again: Vec<usize> = Vec::new();
    for round in 0..2 {
        for (i, webhook) in hooks.iter().enumerate() {
            if round == 1 && !again.contains(&i) {
                continue;
            }
            let shown = object.clone();
            let a = Attributes {
                object: (!shown.is_null()).then_some(&shown),
                namespace_object: namespace.as_ref(),
                ..*attributes
            };
            let Some(matched) = selects(webhook, &a, registry.all())? else { continue };
            let answer = match ask(webhook, &a, matched, &resolver)? {
                Some(answer) => answer,
                None => continue,
            };
            let changed = apply_patch(webhook, &a, &answer, object, defaults)?;
            if changed && round == 0 {
                again.clone_from(&reinvocable);
            }
            if webhook.reinvoke && round == 0 {
                reinvocable.push(i);
            }
        }
        if again.is_empty() {
            break;
        }
    }
    Ok(())
}

/// Call the validating webhooks that select the request, all at once: the first refusal (in
/// webhook order) refuses it.
pub fn validate(api: &Api, attributes: &Attributes<'_>) -> ApiResult<()> {
    if exempt(attributes) {
        return Ok(());
    }
    let loaded = load(api)?;
    let hooks = &loaded.validating;
    if hooks.is_empty() {
        return Ok(());
    }
    let namespace = namespace_object(api, attributes)?;
    let a = Attributes { namespace_object: namespace.as_ref(), ..*attributes };
    let registry = api.registry();
    let resolver = ClusterServices(api);
    let mut calls = Vec::new();
    for webhook in hooks {
        let Some(matched) = selects(webhook, &a, registry.all())? else { continue };
        if let Some(pending) = start(webhook, &a, matched, &resolver)? {
            calls.push((webhook, pending));
        }
    }
    let (webhooks, pending): (Vec<&Webhook>, Vec<Pending>) = calls.into_iter().unzip();
    let mut first = None;
    for (webhook, outcome) in webhooks.into_iter().zip(wait_all(pending)) {
        let outcome = outcome.and_then(|answer| {
            if answer.0.get("patch").is_some_and(|p| !p.is_null()) {
                return Err(CallError::Response {
                    hook: webhook.hook.name.clone(),
                    reason: "validating webhooks may not return patches".into(),
                });
            }
            Ok(answer)
        });
        if let Err(e) = handle(webhook, &a, outcome).map(drop) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Whether `webhook` is called for the request: the type it matched as, after its rules,
/// selectors and match conditions; a condition that fails to evaluate refuses the request
/// (403), unless the webhook ignores failures.
fn selects<'r>(
    webhook: &Webhook,
    a: &Attributes<'r>,
    served: &'r [ResourceType],
) -> ApiResult<Option<&'r ResourceType>> {
    let Some(matched) = matching::matches(&webhook.matches, true, a, served) else {
        return Ok(None);
    };
    let conditions = match &webhook.conditions {
        Ok(c) if c.is_empty() => return Ok(Some(matched)),
        Ok(c) => c,
        Err(why) => return condition_failed(webhook, a, why.clone()).map(|()| None),
    };
    let mut activation = Activation::default();
    activation.bind_json("object", &in_version(a, matched, a.object));
    activation.bind_json("oldObject", &in_version(a, matched, a.old));
    activation.bind_json("request", &request_value(a, matched));
    let mut errors = Vec::new();
    for (name, expression) in conditions {
        match expression.eval(&activation) {
            Ok(v) if v.as_bool() == Some(false) => return Ok(None),
            Ok(v) if v.as_bool() == Some(true) => {}
            Ok(_) => errors.push(format!("matchCondition '{name}' must evaluate to bool")),
            Err(why) => {
                errors.push(format!("matchCondition '{name}' resulted in error: {}", why.0))
            }
        }
    }
    if errors.is_empty() {
        return Ok(Some(matched));
    }
    condition_failed(webhook, a, errors.join(", ")).map(|()| None)
}

/// A match condition that could not be evaluated: the webhook is passed over when it ignores
/// failures; otherwise the request is refused.
fn condition_failed(webhook: &Webhook, a: &Attributes<'_>, why: String) -> ApiResult<()> {
    if webhook.ignore_failures {
        tracing::warn!(webhook = webhook.hook.name, why, "match conditions failed; ignored");
        return Ok(());
    }
    Err(ApiError::forbidden(a.rt.group, a.rt.plural, a.name, &why))
}

/// Call `webhook` and wait: its answer when it allowed the request, `None` when its failure is
/// ignored, the refusal otherwise.
fn ask(
    webhook: &Webhook,
    a: &Attributes<'_>,
    matched: &ResourceType,
    resolver: &ClusterServices<'_>,
) -> ApiResult<Option<Answer>> {
    match start(webhook, a, matched, resolver)? {
        Some(pending) => handle(webhook, a, pending.wait()),
        None => Ok(None),
    }
}

/// What an outcome of a call does to the request: an allowing answer (its warnings added to
/// the request's), a refusal, or, for a failed call, nothing or a 500 by the failure policy.
fn handle(
    webhook: &Webhook,
    a: &Attributes<'_>,
    outcome: Result<Answer, CallError>,
) -> ApiResult<Option<Answer>> {
    let answer = match outcome {
        Ok(answer) => answer,
        Err(e) if webhook.ignore_failures => {
            tracing::warn!(error = %e, "failed calling webhook, failing open");
            return Ok(None);
        }
        Err(e) => {
            tracing::warn!(error = %e, "failed calling webhook, failing closed");
            return Err(ApiError::internal(format!("Internal error occurred: {e}")));
        }
    };
    let response = &answer.0;
    for warning in response["warnings"].as_array().into_iter().flatten() {
        if let Some(w) = warning.as_str() {
            a.requester.warn(w.to_owned());
        }
    }
    if let Some(annotations) = response["auditAnnotations"].as_object() {
        for (key, value) in annotations {
            tracing::info!(
                target: "carrel::admission::audit",
                annotation = format!("{}/{key}", webhook.hook.name),
                value = value.as_str().unwrap_or_default(),
                resource = a.rt.plural,
                namespace = a.namespace,
                name = a.name,
                "audit annotation"
            );
        }
    }
    if response["allowed"].as_bool() != Some(true) {
        return Err(ApiError::webhook_denied(
            a.rt.group,
            a.rt.plural,
            a.name,
            &webhook.hook.name,
            response.get("status"),
        ));
    }
    Ok(Some(answer))
}

/// Apply a mutating webhook's `JSONPatch` to `object`, then `defaults`: whether it changed.
fn apply_patch(
    webhook: &Webhook,
    a: &Attributes<'_>,
    answer: &Answer,
    object: &mut Value,
    defaults: &dyn Fn(&mut Value),
) -> ApiResult<bool> {
    let response = &answer.0;
    let Some(patch) = response["patch"].as_str().filter(|p| !p.is_empty()) else {
        return Ok(false);
    };
    let name = &webhook.hook.name;
    let failed = |reason: String| {
        let e = CallError::Response { hook: name.clone(), reason };
        handle(webhook, a, Err(e)).map(|_| false)
    };
    match response["patchType"].as_str() {
        Some("JSONPatch") => {}
        other => return failed(format!("unsupported patch type {:?}", other.unwrap_or_default())),
    }
    let bytes = match base64::engine::general_purpose::STANDARD.decode(patch) {
        Ok(bytes) => bytes,
        Err(e) => return failed(format!("received undecodable patch in webhook response: {e}")),
    };
    let operations: json_patch::Patch = match serde_json::from_slice(&bytes) {
        Ok(p) => p,
        Err(e) => return failed(format!("received undecodable patch in webhook response: {e}")),
    };
    if operations.0.is_empty() {
        return Ok(false);
    }
    if a.object.is_none() {
        return Err(ApiError::internal(format!(
            "Internal error occurred: admission webhook \"{name}\" attempted to modify the object, which is not supported for this operation"
        )));
    }
    let mut patched = object.clone();
    if let Err(e) = json_patch::patch(&mut patched, &operations) {
        return Err(ApiError::internal(format!("Internal error occurred: {e}")));
    }
    // What a webhook may not change: what the object is.
    for field in ["apiVersion", "kind"] {
        if patched.get(field) != object.get(field) {
            return Err(ApiError::internal(format!(
                "Internal error occurred: admission webhook \"{name}\" may not change {field}"
            )));
        }
    }
    defaults(&mut patched);
    let changed = patched != *object;
    *object = patched;
    Ok(changed)
}

/// A call, ready to be made.
pub(crate) struct Pending(Pin<Box<dyn Future<Output = Result<Answer, CallError>> + Send>>);

impl Pending {
    fn ready(outcome: Result<Answer, CallError>) -> Pending {
        Pending(Box::pin(std::future::ready(outcome)))
    }

    /// Make the call and wait for its outcome (bounded by the webhook's timeout).
    pub(crate) fn wait(self) -> Result<Answer, CallError> {
        let mut outcomes = wait_all(vec![self]);
        outcomes.pop().expect("one call, one outcome")
    }
}

thread_local! {
    /// Whether this thread runs a request off its runtime's workers (in `block_in_place` or on
    /// the blocking pool), where it may drive the runtime's futures itself.
    static REQUEST_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, a request's work off the async workers of its runtime: webhook calls made within it
/// are driven by this thread on that runtime, with no hand-off to another thread.
pub fn on_request_thread<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            REQUEST_THREAD.set(self.0);
        }
    }
    let _reset = Reset(REQUEST_THREAD.replace(true));
    f()
}

/// Make `calls` at once and wait for all their outcomes, in order: on the request's own runtime
/// where its thread may drive it ([`on_request_thread`]), else on a runtime of webhook calls.
fn wait_all(calls: Vec<Pending>) -> Vec<Result<Answer, CallError>> {
    let count = calls.len();
    let all = futures::future::join_all(calls.into_iter().map(|p| p.0));
    if REQUEST_THREAD.get() {
        // A multi-threaded runtime's workers drive its IO while this thread waits; a
        // current-thread runtime's could be the one this thread stands in for.
        let handle = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if let Some(handle) = handle {
            return handle.block_on(all);
        }
    }
    let (tx, rx) = mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(all.await);
    });
    rx.recv().unwrap_or_else(|_| {
        let lost = || CallError::Call {
            hook: String::new(),
            url: String::new(),
            reason: "the call was lost".into(),
        };
        (0..count).map(|_| Err(lost())).collect()
    })
}

/// Start a call of `webhook` about the request as type `matched`: `None` when nothing is to be
/// called (the failure ignored), a 400 for a dry run a webhook with side effects cannot see.
fn start(
    webhook: &Webhook,
    a: &Attributes<'_>,
    matched: &ResourceType,
    resolver: &ClusterServices<'_>,
) -> ApiResult<Option<Pending>> {
    let name = &webhook.hook.name;
    if a.dry_run && !matches!(webhook.spec.side_effects.as_str(), "None" | "NoneOnDryRun") {
        return Err(ApiError::bad_request(format!(
            "admission webhook \"{name}\" does not support dry run"
        )));
    }
    if !webhook.spec.admission_review_versions.iter().any(|v| v == "v1") {
        return Ok(Some(Pending::ready(Err(CallError::Call {
            hook: name.clone(),
            url: String::new(),
            reason: "webhook does not accept the v1 AdmissionReview this server sends".into(),
        }))));
    }
    Ok(Some(send_with(resolver, &webhook.hook, review(a, matched))))
}

/// A call of `hook`, a webhook of the cluster of `api` (its Services, its egress), with
/// `review`.
pub(crate) fn send(api: &Api, hook: &Hook, review: Value) -> Pending {
    send_with(&ClusterServices(api), hook, review)
}

fn send_with(resolver: &ClusterServices<'_>, hook: &Hook, review: Value) -> Pending {
    let resolved = match &hook.endpoint {
        Endpoint::Service { namespace, name, port, .. } => {
            Resolved(Some(resolver.resolve_port(namespace, name, *port)))
        }
        Endpoint::Url(_) => Resolved(None),
    };
    let hook = hook.clone();
    let egress = resolver.0.service_network.webhook_egress();
    Pending(Box::pin(async move { call(&hook, &review, egress, &resolved).await }))
}

/// The runtime webhook calls are made on where a request's thread cannot drive its own: one
/// worker, started with the first such call.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("admission-webhooks")
            .enable_all()
            .build()
            .expect("a runtime for admission webhook calls")
    })
}

/// The `AdmissionReview` sent about the request, as type `matched` shows it.
fn review(a: &Attributes<'_>, matched: &ResourceType) -> Value {
    let mut request = request_value(a, matched);
    let fields = request.as_object_mut().expect("an object");
    // Go's `omitempty`.
    for field in ["name", "namespace", "subResource", "requestSubResource"] {
        if fields.get(field).and_then(Value::as_str) == Some("") {
            fields.remove(field);
        }
    }
    if let Some(user) = fields.get_mut("userInfo").and_then(Value::as_object_mut) {
        user.retain(|_, v| match v {
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        });
    }
    fields.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
    for (field, object) in [("object", a.object), ("oldObject", a.old)] {
        if object.is_some() {
            fields.insert(field.into(), in_version(a, matched, object));
        }
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// The cluster's own Services, as its webhooks are reached.
struct ClusterServices<'a>(&'a Api);

impl ClusterServices<'_> {
    /// Where Service `namespace/name` answers on `port`: its cluster IP (which must serve the
    /// port), or the name an `ExternalName` Service names.
    fn resolve_port(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
    ) -> Result<ServiceAddress, String> {
        let rt = built_in("", "services").expect("services are served");
        let target = Target { rt, namespace: Some(namespace.to_owned()) };
        let service = match self.0.get(&target, name) {
            Ok(s) => s,
            Err(ApiError::NotFound { .. }) => return Err(format!("service \"{name}\" not found")),
            Err(e) => return Err(e.message().to_owned()),
        };
        let spec = &service["spec"];
        if spec["type"] == "ExternalName" {
            return Ok(ServiceAddress::Name(
                spec["externalName"].as_str().unwrap_or("").to_owned(),
            ));
        }
        let ip = spec["clusterIP"].as_str().unwrap_or("");
        if ip.is_empty() || ip == "None" {
            return Err(format!("cannot route to service with ClusterIP {ip:?}"));
        }
        let serves = spec["ports"].as_array().into_iter().flatten().any(|p| p["port"] == port);
        if !serves {
            return Err(format!("no service port {port} found for service \"{name}\""));
        }
        ip.parse().map(ServiceAddress::Ip).map_err(|_| format!("invalid cluster IP {ip:?}"))
    }
}

/// A Service's address, resolved before the call leaves the request's thread.
struct Resolved(Option<Result<ServiceAddress, String>>);

impl ServiceResolver for Resolved {
    fn resolve(&self, _namespace: &str, _name: &str) -> Result<ServiceAddress, String> {
        self.0.clone().unwrap_or_else(|| Err("not a Service".into()))
    }
}
