//! What a tenant's CustomResourceDefinitions make the process hold, measured as its resident
//! set (VmRSS): huge definitions are refused without growing it, definitions at the limits grow
//! it by a bounded amount, and creating and deleting definitions in a loop does not grow it.
//!
//! One test in its own process, so that no other test's memory is counted.

use std::sync::Arc;

use carrel_apiserver::api::{Api, DeleteParams, Target, Write};
use carrel_apiserver::crd::limits;
use carrel_apiserver::resource::built_in;
use serde_json::{json, Map, Value};

/// The process's resident set, in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

fn definitions() -> Target<'static> {
    Target {
        rt: built_in("apiextensions.k8s.io", "customresourcedefinitions").expect("served"),
        namespace: None,
    }
}

/// A definition whose `spec` has `fields` string properties, each with its own pattern.
fn definition(plural: &str, fields: usize, seed: usize) -> Value {
    let mut properties = Map::new();
    for i in 0..fields {
        properties.insert(
            format!("field{i:05}"),
            json!({"type": "string", "pattern": format!("^[a-z]{{1,{}}}-{seed}-{i}$", 1 + i % 60)}),
        );
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.mem.example.com")},
        "spec": {
            "group": "mem.example.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "kind": format!("K{plural}")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": properties}}}}}],
        },
    })
}

/// An object of `plural` that sets every field, so that every pattern is run.
fn object(api: &Api, plural: &str, fields: usize) {
    let registry = api.registry();
    let rt = registry.get("mem.example.com", "v1", plural).expect("served").clone();
    let spec: Map<String, Value> =
        (0..fields).map(|i| (format!("field{i:05}"), json!("abc"))).collect();
    let body = json!({"apiVersion": "mem.example.com/v1", "kind": rt.kind,
                      "metadata": {"name": "a", "namespace": "default"}, "spec": spec});
    let target = Target { rt: &rt, namespace: Some("default".into()) };
    // Every value misses its pattern: the answer is a 422 with every field, after each ran.
    let e = api.create(&target, body, &Write::by("test", false)).expect_err("patterns run");
    assert_eq!(e.code(), 422);
}

#[test]
fn definitions_hold_bounded_memory_and_release_it() {
    let dir = tempfile::tempdir().expect("dir");
    let store =
        carrel_store::SledStore::open(dir.path().join("s"), carrel_store::Options::create())
            .expect("store");
    let api = Api::new(Arc::new(store)).expect("api");
    let create = |object: Value| api.create(&definitions(), object, &Write::by("test", false));
    let start = rss_mib();

    // The report's definition, a few times: about 1 MiB, 20,000 patterns. Each is refused before
    // it is compiled.
    for i in 0..4 {
        let huge = definition(&format!("huge{i}s"), 20_000, i);
        assert!(serde_json::to_vec(&huge).expect("json").len() > 900 * 1024);
        let e = create(huge).expect_err("refused");
        assert_eq!(e.code(), 422, "{}", e.message());
    }
    let after_huge = rss_mib();
    assert!(
        after_huge - start < 128.0,
        "refused definitions grew RSS from {start:.0} MiB to {after_huge:.0} MiB"
    );

    // As many patterns as a tenant may have, in definitions at the per-definition limit, every
    // pattern run once.
    let per_definition = limits::MAX_PATTERNS;
    let count = limits::MAX_TOTAL_PATTERNS / per_definition;
    let cycle = |seed: usize| {
        for d in 0..count {
            let plural = format!("full{d}s");
            create(definition(&plural, per_definition, seed)).expect("at the limits");
            object(&api, &plural, per_definition);
        }
        let full = rss_mib();
        for d in 0..count {
            let name = format!("full{d}s.mem.example.com");
            api.delete(&definitions(), &name, &DeleteParams::default()).expect("deleted");
        }
        assert!(api.registry().all().iter().all(|t| t.group != "mem.example.com"));
        (full, rss_mib())
    };
    let (full, emptied) = cycle(0);
    assert!(
        full - after_huge < 512.0,
        "a tenant at its limits grew RSS from {after_huge:.0} MiB to {full:.0} MiB"
    );

    // Creating and deleting them again (with new patterns each time) does not grow the process.
    let mut seen = Vec::new();
    for seed in 1..=4 {
        seen.push(cycle(seed));
    }
    let last = seen.last().map_or(emptied, |c| c.1);
    assert!(
        last - emptied < 64.0,
        "RSS grew from {emptied:.0} MiB over create/delete cycles (full, emptied): {seen:?}"
    );
}
