//! Lists at a resourceVersion, as kube-apiserver serves them: `resourceVersionMatch=Exact` (and
//! the legacy exact reading of a paginated list) shows the state at that revision, continued
//! pages are one snapshot whatever is written between them, compacted revisions are 410 and
//! revisions not reached yet are 504. The server keeps its store at hand so that the tests can
//! compact it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use carrel_e2e::TestServer;
use carrel_store::{SledStore, Store};
use serde_json::{json, Value};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a \
    consistent list result. You can start a new list without the continue parameter.";

/// A server on 127.0.0.1 over a fresh store the test can reach, stopped when dropped.
struct TestApi {
    /// Kept for its lifetime: the server stops when it is dropped.
    _server: TestServer,
    store: Arc<SledStore>,
    addr: SocketAddr,
}

impl TestApi {
    fn start() -> TestApi {
        let server = TestServer::start("");
        let addr = server
            .url
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .expect("the server's address");
        TestApi { store: server.store.clone(), _server: server, addr }
    }

    /// One HTTP/1.1 request: the status code and the JSON body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = TcpStream::connect(self.addr).expect("connect");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("send head");
        stream.write_all(body.as_bytes()).expect("send body");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read response");
        let text = String::from_utf8(raw).expect("UTF-8 response");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status code");
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        let body = if chunked { dechunk(body) } else { body.to_owned() };
        let value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body}"));
        (code, value)
    }

    /// GET that must succeed.
    fn get(&self, path: &str) -> Value {
        let (code, body) = self.request("GET", path, None);
        assert_eq!(code, 200, "GET {path}: {body}");
        body
    }

    fn create(&self, name: &str, data: &str) -> Value {
        let object = json!({"metadata": {"name": name}, "data": {"v": data}});
        let (code, body) = self.request("POST", CONFIGMAPS, Some(&object));
        assert_eq!(code, 201, "create {name}: {body}");
        body
    }

    fn update(&self, name: &str, data: &str) -> Value {
        let mut object = self.get(&format!("{CONFIGMAPS}/{name}"));
        object["data"] = json!({"v": data});
        let (code, body) = self.request("PUT", &format!("{CONFIGMAPS}/{name}"), Some(&object));
        assert_eq!(code, 200, "update {name}: {body}");
        body
    }

    fn delete(&self, name: &str) -> Value {
        let (code, body) = self.request("DELETE", &format!("{CONFIGMAPS}/{name}"), None);
        assert_eq!(code, 200, "delete {name}: {body}");
        body
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).expect("chunk size");
        if size == 0 {
            break;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
    out
}

fn rv(object: &Value) -> u64 {
    let rv = object["metadata"]["resourceVersion"].as_str().expect("a resourceVersion");
    rv.parse().expect("a numeric resourceVersion")
}

/// What the tests compare of a listed configmap: name, resourceVersion and data.
fn summary(items: &Value) -> Vec<(String, u64, String)> {
    items
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            let name = o["metadata"]["name"].as_str().expect("a name").to_owned();
            (name, rv(o), o["data"]["v"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// Every page of a list from `first` (a path with its query), following continue tokens; the
/// pages' items and resourceVersions.
fn pages(api: &TestApi, first: &str, between: impl Fn()) -> (Vec<(String, u64, String)>, Vec<u64>) {
    let mut items = Vec::new();
    let mut revisions = Vec::new();
    let mut list = api.get(first);
    loop {
        items.extend(summary(&list["items"]));
        revisions.push(rv(&list));
        let Some(token) = list["metadata"]["continue"].as_str().map(str::to_owned) else {
            return (items, revisions);
        };
        between();
        list = api.get(&format!("{CONFIGMAPS}?limit=2&continue={token}"));
    }
}

#[test]
fn exact_lists_show_the_state_at_an_old_resource_version() {
    let api = TestApi::start();
    for name in ["a", "b", "c"] {
        api.create(name, &format!("{name}1"));
    }
    let then = api.get(CONFIGMAPS);
    let old = rv(&then);
    let old_items = summary(&then["items"]);
    assert_eq!(old_items.len(), 3);

    api.update("a", "a2");
    api.delete("b");
    api.create("d", "d1");
    let mut labelled = api.get(&format!("{CONFIGMAPS}/c"));
    labelled["metadata"]["labels"] = json!({"tier": "web"});
    let (code, body) = api.request("PUT", &format!("{CONFIGMAPS}/c"), Some(&labelled));
    assert_eq!(code, 200, "{body}");
    let now = api.get(CONFIGMAPS);
    assert_ne!(summary(&now["items"]), old_items);

    // Exact: the old state, at the old revision.
    let exact = api.get(&format!("{CONFIGMAPS}?resourceVersion={old}&resourceVersionMatch=Exact"));
    assert_eq!(rv(&exact), old);
    assert_eq!(summary(&exact["items"]), old_items);
    // Selectors apply to the objects as they were: c had no label then.
    let selected = api.get(&format!(
        "{CONFIGMAPS}?resourceVersion={old}&resourceVersionMatch=Exact&labelSelector=tier%3Dweb"
    ));
    assert_eq!(selected["items"], json!([]), "{selected}");
    let selected = api.get(&format!("{CONFIGMAPS}?labelSelector=tier%3Dweb"));
    assert_eq!(summary(&selected["items"]).len(), 1, "{selected}");

    // A paginated list at a resourceVersion is exact too (kube-apiserver's legacy reading), and
    // its continue tokens stay at that revision.
    let (items, revisions) =
        pages(&api, &format!("{CONFIGMAPS}?resourceVersion={old}&limit=2"), || ());
    assert_eq!(items, old_items);
    assert_eq!(revisions, vec![old, old]);
    let (items, _) = pages(
        &api,
        &format!("{CONFIGMAPS}?resourceVersion={old}&resourceVersionMatch=Exact&limit=2"),
        || (),
    );
    assert_eq!(items, old_items);

    // Not older than (explicitly, or a resourceVersion without a limit) and "0": the newest.
    for query in [
        format!("resourceVersion={old}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={old}"),
        "resourceVersion=0".to_owned(),
        "resourceVersion=0&resourceVersionMatch=NotOlderThan".to_owned(),
    ] {
        let list = api.get(&format!("{CONFIGMAPS}?{query}"));
        assert_eq!(summary(&list["items"]), summary(&now["items"]), "{query}");
        assert!(rv(&list) >= rv(&now), "{query}");
    }
}

#[test]
fn compacted_and_future_resource_versions_are_refused_as_kube_apiserver_does() {
    let api = TestApi::start();
    let first = api.create("a", "1");
    api.update("a", "2");
    api.store.compact(rv(&first)).expect("compact");
    let current = api.store.current_revision();

    // Compacted: 410 Expired.
    let old = rv(&first) - 1;
    for query in [
        format!("resourceVersion={old}&resourceVersionMatch=Exact"),
        format!("resourceVersion={old}&limit=5"),
    ] {
        let (code, status) = api.request("GET", &format!("{CONFIGMAPS}?{query}"), None);
        assert_eq!(code, 410, "{query}: {status}");
        assert_eq!(status["reason"], "Expired", "{status}");
        assert_eq!(status["message"], "The resourceVersion for the provided list is too old.");
    }
    // The compacted revision itself is still there.
    let at =
        api.get(&format!("{CONFIGMAPS}?resourceVersion={}&resourceVersionMatch=Exact", old + 1));
    assert_eq!(summary(&at["items"]), vec![("a".to_owned(), old + 1, "1".to_owned())]);

    // Not reached yet: 504 Timeout, retry after a second, whatever the match.
    let future = current + 10;
    for query in [
        format!("resourceVersion={future}&resourceVersionMatch=Exact"),
        format!("resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={future}"),
        format!("resourceVersion={future}&limit=1"),
    ] {
        let (code, status) = api.request("GET", &format!("{CONFIGMAPS}?{query}"), None);
        assert_eq!(code, 504, "{query}: {status}");
        assert_eq!(status["reason"], "Timeout", "{status}");
        assert_eq!(status["details"]["retryAfterSeconds"], 1, "{status}");
        assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("Timeout: Too large resource version: "), "{message}");
    }
}

#[test]
fn invalid_combinations_of_resource_version_parameters_are_refused() {
    let api = TestApi::start();
    for i in 0..3 {
        api.create(&format!("c{i}"), "x");
    }
    let page = api.get(&format!("{CONFIGMAPS}?limit=1"));
    let token = page["metadata"]["continue"].as_str().expect("a continue token").to_owned();
    let current = rv(&page);

    let invalid = |query: &str, message: &str| {
        let (code, status) = api.request("GET", &format!("{CONFIGMAPS}?{query}"), None);
        assert_eq!(code, 422, "{query}: {status}");
        assert_eq!(status["reason"], "Invalid", "{query}: {status}");
        assert_eq!(status["details"]["causes"][0]["field"], "resourceVersionMatch", "{status}");
        let got = status["message"].as_str().unwrap_or_default();
        assert!(got.contains(message), "{query}: {got}");
    };
    invalid(
        "resourceVersionMatch=Exact",
        "resourceVersionMatch is forbidden unless resourceVersion is provided",
    );
    invalid(
        "resourceVersionMatch=NotOlderThan",
        "resourceVersionMatch is forbidden unless resourceVersion is provided",
    );
    invalid(
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
    );
    invalid(
        &format!("resourceVersion={current}&resourceVersionMatch=Newest"),
        "supported values: \"Exact\", \"NotOlderThan\", \"\"",
    );
    invalid(
        &format!("resourceVersion={current}&resourceVersionMatch=Exact&continue={token}"),
        "resourceVersionMatch is forbidden when continue is provided",
    );

    let bad_request = |query: &str, message: &str| {
        let (code, status) = api.request("GET", &format!("{CONFIGMAPS}?{query}"), None);
        assert_eq!(code, 400, "{query}: {status}");
        assert_eq!(status["reason"], "BadRequest", "{query}: {status}");
        let got = status["message"].as_str().unwrap_or_default();
        assert!(got.contains(message), "{query}: {got}");
    };
    bad_request(
        &format!("resourceVersion={current}&continue={token}"),
        "specifying resource version is not allowed when using continue",
    );
    bad_request("resourceVersion=abc&resourceVersionMatch=Exact", "invalid resourceVersion");
    // With a continue token, resourceVersion=0 is tolerated: the token decides.
    let next = api.get(&format!("{CONFIGMAPS}?limit=1&resourceVersion=0&continue={token}"));
    assert_eq!(rv(&next), current);
    assert_eq!(summary(&next["items"])[0].0, "c1");
}

#[test]
fn a_continue_token_whose_snapshot_is_compacted_is_expired() {
    let api = TestApi::start();
    for i in 0..3 {
        api.create(&format!("c{i}"), "x");
    }
    let page = api.get(&format!("{CONFIGMAPS}?limit=1"));
    let token = page["metadata"]["continue"].as_str().expect("a continue token").to_owned();
    api.update("c2", "y");
    // Still inside the history: the next page is from the first page's snapshot.
    let next = api.get(&format!("{CONFIGMAPS}?limit=1&continue={token}"));
    assert_eq!(rv(&next), rv(&page));
    api.store.compact(api.store.current_revision()).expect("compact");
    let (code, status) =
        api.request("GET", &format!("{CONFIGMAPS}?limit=1&continue={token}"), None);
    assert_eq!(code, 410, "{status}");
    assert_eq!(status["reason"], "Expired", "{status}");
    assert_eq!(status["message"], CONTINUE_EXPIRED);
    // A new list works.
    assert_eq!(summary(&api.get(CONFIGMAPS)["items"]).len(), 3);
}

#[test]
fn paging_under_concurrent_writes_is_a_consistent_snapshot() {
    const KEYS: usize = 24;
    let api = Arc::new(TestApi::start());
    // Every write and what it left, by revision: (name, Some((rv, data))) or (name, None).
    let mut log: Vec<(u64, String, Option<String>)> = Vec::new();
    for i in 0..KEYS {
        let name = format!("k{i:02}");
        let o = api.create(&name, "v0");
        log.push((rv(&o), name, Some("v0".to_owned())));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let churn = {
        let (api, stop, writes) = (api.clone(), stop.clone(), writes.clone());
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut alive = [true; KEYS];
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // Walk the keys backwards, so that pages still to come keep changing.
                let i = KEYS - 1 - n % KEYS;
                let name = format!("k{i:02}");
                let data = format!("v{}", n + 1);
                let entry = match (alive[i], n % 3) {
                    (false, _) => {
                        let o = api.create(&name, &data);
                        (rv(&o), name, Some(data))
                    }
                    (true, 0) => {
                        let o = api.delete(&name);
                        (rv(&o), name, None)
                    }
                    (true, _) => {
                        let o = api.update(&name, &data);
                        (rv(&o), name, Some(data))
                    }
                };
                alive[i] = entry.2.is_some();
                log.push(entry);
                n += 1;
                writes.fetch_add(1, Ordering::Relaxed);
            }
            log
        })
    };

    // Read the pages while the churn writes, at least one write between every two pages.
    let deadline = Instant::now() + Duration::from_secs(60);
    let wait_for_a_write = || {
        let seen = writes.load(Ordering::Relaxed);
        while writes.load(Ordering::Relaxed) == seen {
            assert!(Instant::now() < deadline, "the churn stopped writing");
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for_a_write();
    let (items, revisions) = pages(&api, &format!("{CONFIGMAPS}?limit=2"), wait_for_a_write);
    stop.store(true, Ordering::Relaxed);
    log.extend(churn.join().expect("churn"));
    let snapshot = revisions[0];
    assert!(revisions.iter().all(|r| *r == snapshot), "{revisions:?}");
    assert!(revisions.len() > 5, "several pages: {revisions:?}");
    assert!(
        log.iter().filter(|(r, _, _)| *r > snapshot).count() >= revisions.len() - 1,
        "writes landed between the pages"
    );

    // The state at the snapshot's revision, from the writes' own answers.
    let mut state: BTreeMap<String, (u64, String)> = BTreeMap::new();
    log.sort_by_key(|(r, _, _)| *r);
    for (r, name, data) in log.iter().filter(|(r, _, _)| *r <= snapshot) {
        match data {
            Some(data) => state.insert(name.clone(), (*r, data.clone())),
            None => state.remove(name),
        };
    }
    let want: Vec<(String, u64, String)> =
        state.into_iter().map(|(name, (r, data))| (name, r, data)).collect();
    assert_eq!(items, want, "the pages against the state at {snapshot}");
    // And the newest state has moved on.
    assert_ne!(summary(&api.get(CONFIGMAPS)["items"]), want);
}
