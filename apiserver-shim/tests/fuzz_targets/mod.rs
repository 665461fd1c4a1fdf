//! The fuzz targets: every decoder and parser a tenant can reach, each behind one function that
//! takes one input, runs it through the decoder (directly and, where a tenant reaches it through
//! HTTP, as a request to an in-process API server) and panics when a property fails.
//!
//! One source for both runners: `tests/fuzz_props.rs` drives these functions with proptest in the
//! normal test suite (arbitrary bytes and structured inputs, a bounded number of cases), and the
//! cargo-fuzz crate in `fuzz/` includes this file and drives them with libFuzzer
//! (`scripts/fuzz.sh`). The properties, for every input:
//! - no panic, and the work is bounded (inputs are capped at [`MAX_INPUT`] bytes);
//! - a malformed input is the decoder's own error: a Kubernetes `Status` with a 4xx code over
//!   HTTP, the crate's error type otherwise; never a 5xx;
//! - where a round trip exists it holds (selectors printed and parsed again, continue tokens
//!   paged through), and a credential changed in any byte is refused.

#![allow(dead_code)] // Each runner uses its own subset.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::Request;
use carrel_apiserver::auth::ca::TenantCa;
use carrel_apiserver::auth::token::{ObjectRef, Signer, TokenClaims};
use carrel_apiserver::auth::AuthError;
use carrel_apiserver::selector::{FieldLabels, FieldOp, FieldSelector, LabelSelector};
use carrel_apiserver::{protobuf, strict_json, Api, Server};
use carrel_store::{ListOptions, SledStore, Store};
use http_body_util::BodyExt as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde_json::{json, Value};
use tower::ServiceExt as _;

/// The largest input a target takes; longer ones are cut. Request bodies are capped far higher
/// by the server, but the decoders' cost per byte is what is tested, and a short input runs many
/// more times in the same minutes.
pub const MAX_INPUT: usize = 64 * 1024;

/// Called by each libFuzzer target before its input: puts the default panic hook back in place
/// of libFuzzer's, which aborts at once, so that the panics the code under test catches itself
/// (the CEL parser's, see `carrel_schema::cel`) stay caught. A panic that escapes still reaches
/// libFuzzer's handler, which aborts and records the input.
pub fn init() {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| drop(std::panic::take_hook()));
}

fn cap(data: &[u8]) -> &[u8] {
    &data[..data.len().min(MAX_INPUT)]
}

/// An in-process API server over a store in a temporary directory, with a few objects to patch
/// and list, and the credentials of a tenant.
#[derive(Debug)]
pub struct Harness {
    _dir: tempfile::TempDir,
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    store: Arc<SledStore>,
    signer: Signer,
    ca: TenantCa,
    /// A client certificate (DER) the CA issued, and a token the signer issued.
    client_der: Vec<u8>,
    token: String,
}

const ISSUER: &str = "https://carrel.invalid";
const AUDIENCE: &str = "https://carrel.invalid";

impl Harness {
    pub fn new() -> Harness {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Arc::new(
            SledStore::open(dir.path().join("store"), carrel_store::Options::create())
                .expect("store"),
        );
        let api = Arc::new(Api::new(store.clone()).expect("api"));
        let router = carrel_apiserver::router(Arc::new(Server::new(api, "")));
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let signer = Signer::generate().expect("signing key");
        let ca = TenantCa::generate("fuzz").expect("tenant CA");
        let (cert_pem, _key) =
            ca.issue_client("alice", &["dev"], Duration::from_secs(3600)).expect("client cert");
        let client_der = pem_der(&cert_pem);
        let claims = TokenClaims::new(
            ISSUER,
            "default",
            ObjectRef::new("builder", "0b0b0b0b-0000-0000-0000-000000000000"),
            vec![AUDIENCE.to_owned()],
            SystemTime::now(),
            Duration::from_secs(3600),
        );
        let token = signer.issue(&claims).expect("token");
        let harness = Harness { _dir: dir, runtime, router, store, signer, ca, client_der, token };
        harness.seed();
        harness
    }

    /// One harness per process, for the libFuzzer targets (which take one input per call).
    pub fn shared() -> &'static Harness {
        static HARNESS: OnceLock<Harness> = OnceLock::new();
        HARNESS.get_or_init(Harness::new)
    }

    /// Objects for the patches to patch and the lists to page through.
    fn seed(&self) {
        for i in 0..5 {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm{i}"), "labels": {"app": "a", "tier": i.to_string()}},
                "data": {"k": "v"}});
            let (status, body) =
                self.request("POST", CONFIGMAPS, JSON, cm.to_string().into_bytes());
            assert_eq!(status, 201, "seeding: {}", String::from_utf8_lossy(&body));
        }
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx",
                        "ports": [{"containerPort": 80}], "env": [{"name": "A", "value": "1"}]}]}}}});
        let (status, body) = self.request(
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            JSON,
            deployment.to_string().into_bytes(),
        );
        assert_eq!(status, 201, "seeding: {}", String::from_utf8_lossy(&body));
    }

    /// Send one request; the status and body of the answer, checked with [`check_answer`].
    pub fn request(
        &self,
        method: &str,
        uri: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Vec<u8>) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", content_type)
            .header("user-agent", "fuzz")
            .body(Body::from(body))
            .expect("request");
        let (status, body) = self.runtime.block_on(async {
            let answer = self.router.clone().oneshot(request).await.expect("answer");
            let status = answer.status().as_u16();
            let body = answer.into_body().collect().await.expect("body").to_bytes();
            (status, body.to_vec())
        });
        check_answer(method, uri, status, &body);
        (status, body)
    }
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}

const JSON: &str = "application/json";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// An answer to a tenant's request is a success, or a client error carried as a Kubernetes
/// `Status` whose code is the HTTP status: never a server error.
pub fn check_answer(method: &str, uri: &str, status: u16, body: &[u8]) {
    assert!(
        status < 500,
        "{method} {uri}: {status} {}",
        String::from_utf8_lossy(&body[..body.len().min(2000)])
    );
    if status >= 400 {
        let value: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!("{method} {uri}: {status} with a body that is not JSON ({e})")
        });
        assert_eq!(value["kind"], "Status", "{method} {uri}: {value}");
        assert_eq!(value["code"], status, "{method} {uri}: {value}");
    }
}

fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).expect("PEM")
}

fn query_escape(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

// ------------------------------------------------------------------------------------------------
// Request bodies: JSON, YAML, protobuf
// ------------------------------------------------------------------------------------------------

/// A JSON body: the duplicate-noticing decoder directly, then a dry-run create.
pub fn json_body(h: &Harness, data: &[u8]) {
    let data = cap(data);
    if let Ok((value, _duplicates)) = strict_json::parse(data) {
        // What it decoded prints as JSON that decodes again, without duplicates.
        let printed = serde_json::to_vec(&value).expect("a decoded value prints");
        let (_, duplicates) = strict_json::parse(&printed).expect("printed JSON decodes");
        assert!(duplicates.is_empty(), "{duplicates:?}");
    }
    h.request("POST", &format!("{CONFIGMAPS}?dryRun=All"), JSON, data.to_vec());
}

/// A YAML body, as a dry-run create.
pub fn yaml_body(h: &Harness, data: &[u8]) {
    h.request("POST", &format!("{CONFIGMAPS}?dryRun=All"), "application/yaml", cap(data).to_vec());
}

/// A protobuf body: the decoder directly (its errors are 4xx `ApiError`s), then a dry-run create.
pub fn protobuf_body(h: &Harness, data: &[u8]) {
    let data = cap(data);
    if let Err(e) = protobuf::decode_request(data) {
        assert!((400..500).contains(&e.code()), "{e:?}");
    }
    h.request("POST", &format!("{CONFIGMAPS}?dryRun=All"), protobuf::MEDIA_TYPE, data.to_vec());
}

// ------------------------------------------------------------------------------------------------
// Patches
// ------------------------------------------------------------------------------------------------

/// The four patch types, by their media types.
pub const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// What a patch is applied to: a ConfigMap, a Deployment (lists with merge keys), its status and
/// its scale.
pub const PATCH_TARGETS: [&str; 4] = [
    "/api/v1/namespaces/default/configmaps/cm0",
    "/apis/apps/v1/namespaces/default/deployments/d",
    "/apis/apps/v1/namespaces/default/deployments/d/status",
    "/apis/apps/v1/namespaces/default/deployments/d/scale",
];

/// A dry-run patch of one of the four types to one of the targets.
pub fn patch(h: &Harness, patch_type: usize, target: usize, data: &[u8]) {
    let content_type = PATCH_TYPES[patch_type % PATCH_TYPES.len()];
    let uri =
        format!("{}?dryRun=All&fieldManager=fuzz", PATCH_TARGETS[target % PATCH_TARGETS.len()]);
    h.request("PATCH", &uri, content_type, cap(data).to_vec());
}

/// A patch target for a libFuzzer input: the first byte picks the type and target.
pub fn patch_bytes(h: &Harness, data: &[u8]) {
    if let Some((&pick, rest)) = data.split_first() {
        patch(h, usize::from(pick & 3), usize::from(pick >> 2 & 3), rest);
    }
}

// ------------------------------------------------------------------------------------------------
// Selectors
// ------------------------------------------------------------------------------------------------

/// A label selector: parsed, printed and parsed again to the same selector; matched against
/// labels; and sent as a list's `labelSelector`.
pub fn label_selector(h: Option<&Harness>, s: &str) {
    let s = &s[..floor_char_boundary(s, MAX_INPUT)];
    match LabelSelector::parse(s) {
        Ok(selector) => {
            let printed = selector.to_string();
            let again = LabelSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?}, which fails: {e:?}"));
            assert_eq!(again, selector, "{s:?} printed as {printed:?}");
            let labels = json!({"metadata": {"labels": {"app": "a", "tier": "1", "x": "-5"}}});
            selector.matches_object(&labels);
        }
        Err(e) => assert_eq!(e.code(), 400, "{s:?}: {e:?}"),
    }
    if let Some(h) = h {
        h.request("GET", &format!("{CONFIGMAPS}?labelSelector={}", query_escape(s)), JSON, vec![]);
    }
}

/// A field selector: parsed, printed and parsed again to the same terms (`==` prints as `=`);
/// checked against the fields pods support; and sent as a list's `fieldSelector`.
pub fn field_selector(h: Option<&Harness>, s: &str) {
    let s = &s[..floor_char_boundary(s, MAX_INPUT)];
    match FieldSelector::parse(s) {
        Ok(selector) => {
            let printed = selector.to_string();
            let again = FieldSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{s:?} printed as {printed:?}, which fails: {e:?}"));
            let terms = |sel: &FieldSelector| {
                let mut terms: Vec<_> = sel
                    .requirements()
                    .iter()
                    .map(|r| (r.field.clone(), r.op == FieldOp::NotEquals, r.value.clone()))
                    .collect();
                terms.sort();
                terms
            };
            assert_eq!(terms(&again), terms(&selector), "{s:?} printed as {printed:?}");
            if let Err(e) = selector.check_supported(FieldLabels::Pod) {
                assert_eq!(e.code(), 400, "{s:?}: {e:?}");
            }
            let pod = json!({"metadata": {"name": "p", "namespace": "default"},
                "spec": {"nodeName": "n"}, "status": {"phase": "Running"}});
            selector.matches(FieldLabels::Pod, &pod);
        }
        Err(e) => assert_eq!(e.code(), 400, "{s:?}: {e:?}"),
    }
    if let Some(h) = h {
        h.request("GET", &format!("/api/v1/pods?fieldSelector={}", query_escape(s)), JSON, vec![]);
    }
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

// ------------------------------------------------------------------------------------------------
// Continue tokens
// ------------------------------------------------------------------------------------------------

/// A continue token: the store takes it or refuses it as invalid, expired or from the future
/// (nothing else); over HTTP it is a 400 or 410, or a page.
pub fn continue_token(h: &Harness, token: &str) {
    let token = &token[..floor_char_boundary(token, MAX_INPUT)];
    let options =
        ListOptions { limit: Some(2), continue_token: Some(token.to_owned()), revision: None };
    match h.store.list("/", &options) {
        Ok(_)
        | Err(
            carrel_store::Error::InvalidContinue { .. }
            | carrel_store::Error::Expired { .. }
            | carrel_store::Error::FutureRevision { .. },
        ) => {}
        Err(other) => panic!("{token:?}: {other:?}"),
    }
    h.request(
        "GET",
        &format!("{CONFIGMAPS}?limit=2&continue={}", query_escape(token)),
        JSON,
        vec![],
    );
}

/// Paging through a list with its continue tokens returns every object once, in order: the
/// tokens decode to where the previous page ended. `limit` of 0 is "no limit".
pub fn continue_round_trip(h: &Harness, limit: usize) {
    let all = h.store.list("/", &ListOptions::default()).expect("list");
    let mut keys = Vec::new();
    let mut options = ListOptions { limit: Some(limit), ..ListOptions::default() };
    loop {
        let page = h.store.list("/", &options).expect("page");
        assert_eq!(page.revision, all.revision);
        keys.extend(page.items.into_iter().map(|o| o.key));
        match page.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => break,
        }
    }
    let want: Vec<_> = all.items.into_iter().map(|o| o.key).collect();
    assert_eq!(keys, want);
}

// ------------------------------------------------------------------------------------------------
// CRDs: definitions, schemas, CEL rules
// ------------------------------------------------------------------------------------------------

/// A CustomResourceDefinition (JSON): checked as a create checks it (422 or 400, never worse),
/// each version's schema parsed and, when it parses, used to validate, prune and default the
/// definition's `x-sample` field. Then a dry-run create.
pub fn crd(h: &Harness, data: &[u8]) {
    let data = cap(data);
    let Ok(definition) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    crd_value(h, &definition);
}

/// [`crd`] of a decoded definition.
pub fn crd_value(h: &Harness, definition: &Value) {
    if let Err(e) =
        carrel_apiserver::crd::validate(definition, None, &carrel_apiserver::Registry::default())
    {
        assert!(matches!(e.code(), 400 | 422), "{e:?}");
    }
    let sample = definition.get("x-sample").cloned().unwrap_or(Value::Null);
    let versions = definition.pointer("/spec/versions").and_then(Value::as_array);
    for version in versions.into_iter().flatten() {
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            schema_and_object(schema, &sample);
        }
    }
    h.request(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions?dryRun=All",
        JSON,
        serde_json::to_vec(definition).expect("prints"),
    );
}

/// A structural schema parsed (errors are field errors), and an object validated (against
/// itself as the old object too, for transition rules), pruned and defaulted by it.
pub fn schema_and_object(schema: &Value, object: &Value) {
    let Ok(parsed) = carrel_schema::Schema::parse(schema, "spec.validation.openAPIV3Schema") else {
        return;
    };
    parsed.validate(object, None);
    parsed.validate(object, Some(object));
    let mut pruned = object.clone();
    parsed.prune(&mut pruned);
    parsed.apply_defaults(&mut pruned);
}

/// One CEL rule on an object's `spec`, compiled and run against `spec`.
pub fn cel_rule(rule: &str, spec: &Value) {
    let rule = &rule[..floor_char_boundary(rule, 4096)];
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "n": {"type": "integer"}, "s": {"type": "string"},
                "l": {"type": "array", "items": {"type": "string"}},
                "m": {"type": "object", "additionalProperties": {"type": "integer"}}},
            "x-kubernetes-validations": [{"rule": rule, "messageExpression": rule}]}}});
    schema_and_object(&schema, &json!({"spec": spec}));
}

/// A libFuzzer input for [`cel_rule`]: the rule, a NUL, then the spec as JSON.
pub fn cel_bytes(data: &[u8]) {
    let data = cap(data);
    let (rule, spec) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{}"[..]),
    };
    let spec = serde_json::from_slice(spec).unwrap_or_else(|_| json!({}));
    cel_rule(&String::from_utf8_lossy(rule), &spec);
}

// ------------------------------------------------------------------------------------------------
// Credentials: service-account tokens and client certificates
// ------------------------------------------------------------------------------------------------

/// An arbitrary bearer token is refused (only the signer's own tokens pass), with an
/// authentication error.
pub fn token(h: &Harness, token: &str) {
    let token = &token[..floor_char_boundary(token, MAX_INPUT)];
    if token == h.token {
        return;
    }
    let refused: AuthError = h
        .signer
        .verify(token, ISSUER, &[AUDIENCE])
        .expect_err("a token the signer did not issue is refused");
    let _ = refused.to_string();
}

/// The harness's valid token with `edit` applied: refused unless it is unchanged.
pub fn token_mutated(h: &Harness, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = h.token.clone().into_bytes();
    edit(&mut bytes);
    token(h, &String::from_utf8_lossy(&bytes));
}

/// The valid token verifies (the signer and the mutation tests are sound).
pub fn token_valid(h: &Harness) {
    h.signer.verify(&h.token, ISSUER, &[AUDIENCE]).expect("the issued token verifies");
}

/// An arbitrary client certificate chain is refused with an authentication error.
pub fn client_cert(h: &Harness, chain: &[Vec<u8>]) {
    if chain.first().is_some_and(|leaf| *leaf == h.client_der) && chain.len() == 1 {
        return;
    }
    let chain: Vec<CertificateDer<'_>> =
        chain.iter().map(|c| CertificateDer::from(cap(c))).collect();
    let refused =
        h.ca.verify(&chain, UnixTime::now()).expect_err("a certificate the CA did not issue");
    let _ = refused.to_string();
}

/// The harness's client certificate with `edit` applied: refused unless unchanged.
pub fn client_cert_mutated(h: &Harness, edit: impl FnOnce(&mut Vec<u8>)) {
    let mut der = h.client_der.clone();
    edit(&mut der);
    client_cert(h, &[der]);
}

/// The valid certificate verifies.
pub fn client_cert_valid(h: &Harness) {
    let chain = [CertificateDer::from(h.client_der.as_slice())];
    h.ca.verify(&chain, UnixTime::now()).expect("the issued certificate verifies");
}

/// A libFuzzer input for [`client_cert`]: certificates separated by the byte 0xff.
pub fn client_cert_bytes(h: &Harness, data: &[u8]) {
    let chain: Vec<Vec<u8>> = data.split(|&b| b == 0xff).map(<[u8]>::to_vec).take(4).collect();
    client_cert(h, &chain);
}
