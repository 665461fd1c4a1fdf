//! Webhook configurations written through the API, and the requests that call them, against a
//! real webhook server (TLS with its own CA on a loopback port, [`super::tests::serve`]).

use std::sync::Arc;

use serde_json::{json, Value};

use super::tests::{serve, Server};
use super::Egress;
use crate::admission::policy::Requester;
use crate::api::{Api, DeleteParams, Target, Write};
use crate::auth::UserInfo;
use crate::status::{ApiError, ApiResult};
use crate::ServiceNetwork;

fn api() -> (tempfile::TempDir, Api) {
    let dir = tempfile::tempdir().expect("dir");
    let store =
        carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
            .expect("store");
    let network = ServiceNetwork::default().with_webhook_egress(Egress::with_loopback());
    (dir, Api::new_in(Arc::new(store), network).expect("api"))
}

fn target(group: &str, plural: &str, ns: Option<&str>) -> Target<'static> {
    let rt = crate::resource::built_in(group, plural).expect("type");
    Target { rt, namespace: ns.map(str::to_owned) }
}

fn write() -> Write {
    let user = UserInfo { name: "ada".into(), groups: vec!["devs".into()], ..Default::default() };
    Write { requester: Requester::new(Some(user)), ..Write::by("kubectl", false) }
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
           "data": {"k": "v"}})
}

fn create_configmap(api: &Api, name: &str, write: &Write) -> ApiResult<Value> {
    api.create(&target("", "configmaps", Some("default")), configmap(name), write)
}

/// A webhook called at `path` of `server` for configmaps, with `extra` fields.
fn hook(server: &Server, name: &str, path: &str, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {
            "url": format!("https://127.0.0.1:{}{path}", server.address.port()),
            "caBundle": base64_of(&server.ca),
        },
        "rules": [{"operations": ["*"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        hook[k] = v.clone();
    }
    hook
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn configure(api: &Api, plural: &str, name: &str, hooks: Vec<Value>) -> ApiResult<Value> {
    let kind = match plural {
        "mutatingwebhookconfigurations" => "MutatingWebhookConfiguration",
        _ => "ValidatingWebhookConfiguration",
    };
    api.create(
        &target("admissionregistration.k8s.io", plural, None),
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
               "metadata": {"name": name}, "webhooks": hooks}),
        &Write::by("kubectl", false),
    )
}

/// Run `f`, which calls webhooks and waits for them, off the test's async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_are_defaulted_and_refused_in_kube_apiservers_words() {
    let (_dir, api) = api();
    let server = serve().await;
    let stored = blocking(|| {
        configure(
            &api,
            "mutatingwebhookconfigurations",
            "defaults",
            vec![json!({
                "name": "by-service.example.com",
                "clientConfig": {"service": {"namespace": "default", "name": "hook"}},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["pods"]}],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            })],
        )
    })
    .unwrap();
    let hook = &stored["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["matchPolicy"], "Equivalent");
    assert_eq!(hook["timeoutSeconds"], 10);
    assert_eq!(hook["namespaceSelector"], json!({}));
    assert_eq!(hook["objectSelector"], json!({}));
    assert_eq!(hook["reinvocationPolicy"], "Never");
    assert_eq!(hook["rules"][0]["scope"], "*");
    assert_eq!(hook["clientConfig"]["service"]["port"], 443);
    assert_eq!(stored["metadata"]["generation"], 1);

    let refused = |extra: Value| {
        let mut h = super::dispatch_tests::hook(&server, "check.example.com", "/", extra);
        if h["clientConfig"]["url"] == "drop" {
            h["clientConfig"].as_object_mut().unwrap().remove("url");
        }
        let err = blocking(|| configure(&api, "validatingwebhookconfigurations", "bad", vec![h]))
            .unwrap_err();
        assert_eq!(err.code(), 422, "{err}");
        err.causes().iter().map(|c| format!("{}: {}", c.field, c.message)).collect::<Vec<_>>()
    };
    assert_eq!(
        refused(json!({"name": "example.com"})),
        ["webhooks[0].name: Invalid value: \"example.com\": should be a domain with at least three segments separated by dots"]
    );
    assert_eq!(
        refused(json!({"sideEffects": null})),
        ["webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"]
    );
    assert_eq!(
        refused(json!({"sideEffects": "Some"})),
        ["webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""]
    );
    assert_eq!(
        refused(json!({"timeoutSeconds": 31})),
        ["webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"]
    );
    assert_eq!(
        refused(json!({"admissionReviewVersions": []})),
        ["webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"]
    );
    assert_eq!(
        refused(json!({"clientConfig": {"url": "http://hooks.example.com/x"}})),
        ["webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme"]
    );
    assert_eq!(
        refused(json!({"clientConfig": {"url": "https://hooks.example.com/x",
                                         "service": {"namespace": "default", "name": "hook"}}})),
        ["webhooks[0].clientConfig: Required value: exactly one of url or service is required"]
    );
    let err = refused(json!({"matchConditions": [{"name": "p", "expression": "params.x == 1"}]}));
    assert!(
        err[0].starts_with("webhooks[0].matchConditions[0].expression: Invalid value"),
        "{err:?}"
    );
    let err = refused(json!({"matchConditions": [
        {"name": "a", "expression": "authorizer.group('').resource('x').check('get').allowed()"}]}));
    assert!(err[0].contains("Carrel does not provide the authorizer"), "{err:?}");
    let two =
        vec![hook_named(&server, "same.example.com"), hook_named(&server, "same.example.com")];
    let err =
        blocking(|| configure(&api, "validatingwebhookconfigurations", "dup", two)).unwrap_err();
    assert_eq!(err.causes()[0].message, "Duplicate value: \"same.example.com\"");
}

fn hook_named(server: &Server, name: &str) -> Value {
    hook(server, name, "/", json!({}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_webhooks_patch_what_is_stored_and_see_the_whole_request() {
    let (_dir, api) = api();
    let server = serve().await;
    blocking(|| {
        configure(
            &api,
            "mutatingwebhookconfigurations",
            "label",
            vec![hook(&server, "label.example.com", "/label", json!({"timeoutSeconds": 5}))],
        )
    })
    .unwrap();
    let created = blocking(|| create_configmap(&api, "web", &write())).unwrap();
    assert_eq!(created["metadata"]["labels"], json!({"mutated": "yes"}));
    let stored = blocking(|| api.get(&target("", "configmaps", Some("default")), "web")).unwrap();
    assert_eq!(stored["metadata"]["labels"], json!({"mutated": "yes"}), "stored as patched");

    let (query, review) = server.asked.lock()["/label"].clone();
    assert_eq!(query, "/label?timeout=5s");
    let request = &review["request"];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(request["kind"], json!({"group": "", "version": "v1", "kind": "ConfigMap"}));
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["name"], "web");
    assert_eq!(request["userInfo"], json!({"username": "ada", "groups": ["devs"]}));
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "CreateOptions");
    assert_eq!(request["object"]["data"], json!({"k": "v"}));
    assert!(request.get("oldObject").is_none() && request.get("subResource").is_none());
    assert!(request["uid"].as_str().is_some_and(|u| u.len() == 36));

    // An update shows the object before it too, and is patched the same way.
    let mut changed = stored.clone();
    changed["data"]["k"] = json!("w");
    changed["metadata"]["labels"] = json!({"other": "x"});
    let updated = blocking(|| {
        api.update(&target("", "configmaps", Some("default")), "web", changed, None, &write())
    })
    .unwrap();
    assert_eq!(updated["metadata"]["labels"], json!({"other": "x", "mutated": "yes"}));
    let request = server.asked.lock()["/label"].1["request"].clone();
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["oldObject"]["data"], json!({"k": "v"}));
    assert_eq!(request["options"]["kind"], "UpdateOptions");

    // The server's own records are not sent (a namespace's `default` ServiceAccount is not a
    // configmap, but the kube-root-ca.crt-like writes of the server are made as the server).
    let before = server.calls.lock().get("/label").copied();
    blocking(|| {
        api.create(&target("", "configmaps", Some("default")), configmap("own"), &Write::server())
    })
    .unwrap();
    assert_eq!(server.calls.lock().get("/label").copied(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_webhooks_refuse_warn_and_see_dry_runs_deletes_and_selectors() {
    let (_dir, api) = api();
    let server = serve().await;
    let only_bad = json!({"objectSelector": {"matchLabels": {"check": "deny"}}});
    blocking(|| {
        configure(
            &api,
            "validatingwebhookconfigurations",
            "checks",
            vec![
                hook(&server, "deny.example.com", "/deny", only_bad),
                hook(&server, "warn.example.com", "/warn", json!({})),
            ],
        )
    })
    .unwrap();
    // Not selected by the denying webhook: admitted, with the other's warning.
    let w = write();
    blocking(|| create_configmap(&api, "fine", &w)).unwrap();
    assert_eq!(w.requester.warnings(), ["careful with that"]);
    assert!(!server.asked.lock().contains_key("/deny"), "its object selector did not select");

    let mut bad = configmap("bad");
    bad["metadata"]["labels"] = json!({"check": "deny"});
    let err = blocking(|| api.create(&target("", "configmaps", Some("default")), bad, &write()))
        .unwrap_err();
    assert_eq!(err.code(), 403);
    assert_eq!(err.reason(), "Forbidden");
    assert_eq!(
        err.message(),
        "configmaps \"bad\" is forbidden: admission webhook \"deny.example.com\" denied the \
         request: no configmaps named bad"
    );
    assert_eq!(
        err.to_status()["details"],
        json!({"name": "bad", "kind": "configmaps"}),
        "as kube-apiserver's ToStatusErr: the resource as the kind"
    );
    assert!(matches!(
        blocking(|| api.get(&target("", "configmaps", Some("default")), "bad")),
        Err(ApiError::NotFound { .. })
    ));

    // A dry run calls webhooks without side effects, and says so.
    let dry = Write::by("kubectl", true);
    blocking(|| create_configmap(&api, "dry", &dry)).unwrap();
    assert_eq!(server.asked.lock()["/warn"].1["request"]["dryRun"], true);

    // A delete is shown the object deleted.
    blocking(|| {
        api.delete(&target("", "configmaps", Some("default")), "fine", &DeleteParams::default())
    })
    .unwrap();
    let request = server.asked.lock()["/warn"].1["request"].clone();
    assert_eq!(request["operation"], "DELETE");
    assert_eq!(request["oldObject"]["metadata"]["name"], "fine");
    assert!(request.get("object").is_none());
    assert_eq!(request["options"]["kind"], "DeleteOptions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_the_failure_policy_and_refusals_keep_their_code() {
    let (_dir, api) = api();
    let server = serve().await;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut gone = hook(&server, "gone.example.com", "/", json!({"failurePolicy": "Ignore"}));
    gone["clientConfig"]["url"] = json!(format!("https://127.0.0.1:{}/", closed.port()));
    blocking(|| configure(&api, "validatingwebhookconfigurations", "ignored", vec![gone.clone()]))
        .unwrap();
    blocking(|| create_configmap(&api, "one", &write())).expect("an ignored failure admits");

    gone["failurePolicy"] = json!("Fail");
    gone["name"] = json!("gone-closed.example.com");
    blocking(|| configure(&api, "validatingwebhookconfigurations", "closed", vec![gone])).unwrap();
    let err = blocking(|| create_configmap(&api, "two", &write())).unwrap_err();
    assert_eq!(err.code(), 500);
    assert!(
        err.message().starts_with(&format!(
            "Internal error occurred: failed calling webhook \"gone-closed.example.com\": failed \
             to call webhook: Post \"https://127.0.0.1:{}/?timeout=10s\": dial tcp",
            closed.port()
        )),
        "{err}"
    );
    // The configurations themselves are not locked by the webhooks that fail.
    blocking(|| {
        api.delete(
            &target("admissionregistration.k8s.io", "validatingwebhookconfigurations", None),
            "closed",
            &DeleteParams::default(),
        )
    })
    .expect("admission's configuration is exempt");
    blocking(|| create_configmap(&api, "two", &write())).unwrap();

    // A refusal with a code of its own.
    let some = hook(&server, "some.example.com", "/deny-500", json!({}));
    blocking(|| configure(&api, "validatingwebhookconfigurations", "some", vec![some])).unwrap();
    let err = blocking(|| create_configmap(&api, "three", &write())).unwrap_err();
    assert_eq!(err.code(), 500);
    assert_eq!(
        err.message(),
        "Internal error occurred: admission webhook \"some.example.com\" denied the request: broke"
    );
    // A patch that does not apply fails the request as kube-apiserver's does.
    let patcher = hook(&server, "bad-patch.example.com", "/bad-patch", json!({}));
    blocking(|| configure(&api, "mutatingwebhookconfigurations", "bad-patch", vec![patcher]))
        .unwrap();
    let err = blocking(|| create_configmap(&api, "four", &write())).unwrap_err();
    assert_eq!(err.code(), 500, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_asks_is_called_again_after_a_later_one_changed_the_object() {
    let (_dir, api) = api();
    let server = serve().await;
    blocking(|| {
        configure(
            &api,
            "mutatingwebhookconfigurations",
            "a-count",
            vec![hook(
                &server,
                "count.example.com",
                "/count",
                json!({"reinvocationPolicy": "IfNeeded"}),
            )],
        )
    })
    .unwrap();
    blocking(|| {
        configure(
            &api,
            "mutatingwebhookconfigurations",
            "b-label",
            vec![hook(
                &server,
                "label.example.com",
                "/label",
                json!({"matchConditions": [
                    {"name": "not-skipped", "expression": "object.metadata.name != 'skip'"}]}),
            )],
        )
    })
    .unwrap();
    let created = blocking(|| create_configmap(&api, "web", &write())).unwrap();
    assert_eq!(created["metadata"]["labels"], json!({"mutated": "yes"}));
    assert_eq!(
        created["metadata"]["annotations"]["count"], "2",
        "called again once the later webhook changed the object"
    );

    // A false match condition skips the later webhook: nothing changes after the counter.
    let created = blocking(|| create_configmap(&api, "skip", &write())).unwrap();
    assert!(created["metadata"].get("labels").is_none());
    assert_eq!(created["metadata"]["annotations"]["count"], "1");
}
