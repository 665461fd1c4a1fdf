//! The registry's own invariants: every served kind registered once, and generic code that never
//! dispatches on a kind's name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::resource::Registry;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("readable").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_served_kind_is_registered_exactly_once() {
    // In the served types: each (group, version, plural) once, and each (group, kind) once in
    // the version it is stored in. Another version of a kind comes after that one, with its
    // plural and scope, and lookups by group and plural find the stored one.
    let host = Registry::host();
    let mut plurals: BTreeMap<(&str, &str, &str), usize> = BTreeMap::new();
    let mut kinds: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, t) in host.all().iter().enumerate() {
        *plurals.entry((t.group, t.version, t.plural)).or_default() += 1;
        if t.is_storage_version() {
            *kinds.entry((t.group, t.kind)).or_default() += 1;
            continue;
        }
        let stored = host.all()[..i]
            .iter()
            .find(|s| s.group == t.group && s.kind == t.kind && s.is_storage_version());
        let stored = stored.unwrap_or_else(|| {
            panic!("{}/{} {} comes before the version it is stored in", t.group, t.version, t.kind)
        });
        assert_eq!((stored.plural, stored.namespaced), (t.plural, t.namespaced), "{}", t.kind);
        let found = crate::resource::built_in(t.group, t.plural).expect("a lookup finds it");
        assert_eq!(found.version, stored.version, "{} by group and plural", t.kind);
    }
    for (key, n) in &plurals {
        assert_eq!(*n, 1, "{key:?} is registered {n} times");
    }
    for (key, n) in &kinds {
        assert_eq!(*n, 1, "{key:?} is registered {n} times");
    }

    // In the registration table: each kind module's type on one line, each once, and every kind
    // module registered (Tenant in the host's registry, beside the table).
    let table = std::fs::read_to_string(src().join("registry/mod.rs")).expect("readable");
    let start = table.find("pub static BUILT_IN").expect("the table");
    let end = start + table[start..].find("];").expect("its end");
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for line in table[start..end].lines().skip(1) {
        let line = line.trim().trim_end_matches(',');
        *lines.entry(line.to_owned()).or_default() += 1;
    }
    for (line, n) in &lines {
        assert_eq!(*n, 1, "{line} is in BUILT_IN {n} times");
    }
    assert_eq!(lines.len(), crate::resource::BUILT_IN.len());
    let mut files = Vec::new();
    rust_files(&src().join("registry"), &mut files);
    for file in files {
        let relative = file.strip_prefix(src().join("registry")).expect("under registry/");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        // A kind of its own folder: `<group>/<kind>/mod.rs`.
        if parts.len() == 3 && parts[2] == "mod" {
            parts.pop();
        }
        let [group, kind] = parts.as_slice() else { continue };
        if kind == "mod" {
            continue;
        }
        let registered = format!("{group}::{kind}::TYPE");
        if registered == "carrel::tenants::TYPE" {
            assert!(host.all().iter().any(|t| t.plural == "tenants"), "Tenant is not served");
            continue;
        }
        assert_eq!(lines.get(&registered), Some(&1), "{registered} is not in BUILT_IN");
    }
}

/// Lines outside `registry/` and `crd/` that may name a served plural in a match, each because it
/// is not a dispatch on a kind.
const ALLOWED: &[(&str, &str)] = &[
    // URL routing: `namespaces/<ns>/…` is the path segment of every namespaced resource, and a
    // namespace's own subresources are routed by their path as kube-apiserver's mux does.
    (
        "http/request_info.rs",
        r#"["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty()"#,
    ),
    ("http/request_info.rs", r#"["namespaces", ns, plural, rest @ ..] =>"#),
    ("http/reviews.rs", r#"["apis", "authorization.k8s.io", "v1", "namespaces", ns,"#),
    ("http/reviews.rs", r#"["api", "v1", "namespaces", ns, "serviceaccounts", name, "token"] =>"#),
    // Flow control's work estimate reads the request path before any type is looked up.
    ("flowcontrol/work.rs", r#"matches!(resource, ["namespaces", _, "pods", _, "log"])"#),
    (
        "flowcontrol/work.rs",
        r#"matches!(resource, ["namespaces", _, "pods", _, "exec" | "attach" | "portforward"])"#,
    ),
    ("flowcontrol/work.rs", r#"["api", "v1", "namespaces", _, "pods"]"#),
    ("flowcontrol/work.rs", r#"matches!(resource, [_] | ["namespaces", _, _])"#),
    // An envFrom source's kind names the type that holds it; the request's kind is a pod's.
    (
        "admission/mod.rs",
        r#"let plural = if kind == "Secret" { "secrets" } else { "configmaps" };"#,
    ),
    // A binding's roleRef names a role kind; the `bind` check asks for the resource it is.
    ("rbac/escalation.rs", r#""ClusterRole" => Some("clusterroles"),"#),
    ("rbac/escalation.rs", r#""Role" => Some("roles"),"#),
];

#[test]
fn generic_code_never_matches_on_a_served_plural() {
    let host = Registry::host();
    let plurals: Vec<String> = host.all().iter().map(|t| format!("\"{}\"", t.plural)).collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src()).expect("under src/").to_string_lossy().into_owned();
        let name = file.file_name().expect("a name").to_string_lossy();
        let skipped = relative.starts_with("registry/")
            || relative.starts_with("crd/")
            || name == "tests.rs"
            || name.ends_with("_tests.rs")
            // Generated.
            || relative == "protobuf/schema.rs"
            || relative == "openapi/annotations.rs";
        if skipped {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        // Unit tests at the end of a file name kinds freely.
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        for line in code.lines() {
            let line = line.trim();
            let in_match = line.contains("=>")
                || line.contains("matches!(")
                || line.contains("== \"")
                || line.contains("!= \"")
                || line.contains("(rt.group, rt.plural)");
            if !in_match || line.starts_with("//") {
                continue;
            }
            if !plurals.iter().any(|p| line.contains(p.as_str())) {
                continue;
            }
            let allowed = ALLOWED.iter().any(|(f, l)| *f == relative && line.contains(l));
            if !allowed {
                found.push(format!("{relative}: {line}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "generic code matches on served plurals (move it into the kind's strategy):\n{}",
        found.join("\n")
    );
}

/// The types a custom resource definition of `scope` serves (`widgets.example.com`, one version).
fn custom_types(scope: &str) -> Vec<crate::resource::ResourceType> {
    let mut crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": scope,
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]},
    });
    crd["status"] = crate::crd::status_of(&crd, None, &[]).expect("status");
    let types = crate::crd::types_of(&crd);
    assert_eq!(types.len(), 1, "{scope}");
    types
}

#[test]
fn each_type_selects_on_the_field_labels_of_its_kind() {
    use crate::selector::FieldLabels;
    // The kinds with a field label conversion of their own.
    let own: &[(&str, &str, FieldLabels)] = &[
        ("", "pods", FieldLabels::Pod),
        ("", "nodes", FieldLabels::Node),
        ("", "replicationcontrollers", FieldLabels::ReplicationController),
        ("", "events", FieldLabels::CoreEvent),
        ("", "namespaces", FieldLabels::Namespace),
        ("", "secrets", FieldLabels::Secret),
        ("", "services", FieldLabels::Service),
        ("batch", "jobs", FieldLabels::Job),
        ("events.k8s.io", "events", FieldLabels::EventsV1Event),
    ];
    let host = Registry::host();
    let custom = [custom_types("Namespaced"), custom_types("Cluster")].concat();
    let mut found = 0;
    for t in host.all().iter().chain(&custom) {
        let want = match own.iter().find(|(g, p, _)| *g == t.group && *p == t.plural) {
            Some((_, _, labels)) => {
                found += 1;
                *labels
            }
            // Built-in kinds: metadata only, no namespace on cluster-scoped ones.
            None if crate::resource::built_in(t.group, t.plural).is_some() => {
                FieldLabels::Default { cluster_scoped: !t.namespaced }
            }
            // Custom resources: as apiextensions-apiserver converts them (no selectable fields
            // in these definitions).
            None if t.custom.is_some() => {
                FieldLabels::Custom { cluster_scoped: !t.namespaced, fields: &[] }
            }
            // Tenants: metadata only, the namespace read from the object.
            None => FieldLabels::Default { cluster_scoped: false },
        };
        assert_eq!(t.strategy.field_labels(t), want, "{}/{}", t.group, t.plural);
    }
    assert_eq!(found, own.len(), "every kind of its own is served");
}

#[test]
fn validation_reads_typed_objects_only() {
    // Every kind's checks are in its `impl Validate`, over its typed form: no JSON value in them,
    // nor in the shared checks of `validation/` (bad values printed from JSON aside, `format.rs`).
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src()).expect("under src/").to_string_lossy().into_owned();
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable");
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
        if relative.starts_with("validation/") && relative != "validation/format.rs" {
            if code.contains("serde_json::Value") || code.contains("&Value") {
                found.push(relative.clone());
            }
            continue;
        }
        for block in code.split("\nimpl ").skip(1).filter(|b| b.contains("Validate for ")) {
            let block = block.split("\n}\n").next().unwrap_or_default();
            if block.contains("Value") {
                found.push(format!("{relative}: impl {}", block.lines().next().unwrap_or("")));
            }
        }
    }
    assert!(found.is_empty(), "validation reading JSON: {found:#?}");
}
