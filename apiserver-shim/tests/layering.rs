//! The API server's modules form layers: a module may use the modules below it, and only the
//! modules of the documented core (docs/ARCHITECTURE.md, "The core") may use each other in a
//! cycle. This test reads the crate's sources, builds the graph of `crate::<module>` references
//! between its top-level modules (tests excluded) and fails on any cycle that leaves the core,
//! naming one path around it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The modules allowed to depend on each other in a cycle: the served kinds and what they are made
/// of. A `ResourceType` names its kind's strategy (`registry`) and, for a custom resource, its
/// definition (`crd`); strategies call the generic API (`api`, `admission`, `access`), and the
/// machinery that takes a `ResourceType` (defaults, validation, schemas and managed fields) is in
/// turn what strategies are written with. Everything else (the HTTP side, the listener,
/// discovery, selectors, table columns, tenants) sits above or below this core and may not close
/// a loop through it. Keep in step with docs/ARCHITECTURE.md, "The core".
const CORE: &[&str] = &[
    "access",
    "admission",
    "api",
    "crd",
    "defaults",
    "managed",
    "openapi",
    "registry",
    "resource",
    "typed",
    "validation",
];

/// The crate's top-level modules and the source files of each (tests left out).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in fs::read_dir(src).expect("read src") {
        let path = entry.expect("dir entry").path();
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if file_name == "lib.rs" || file_name == "main.rs" {
            continue;
        }
        let (name, files) = if path.is_dir() {
            (file_name.clone(), rust_files(&path))
        } else if let Some(stem) = file_name.strip_suffix(".rs") {
            (stem.to_owned(), vec![path.clone()])
        } else {
            continue;
        };
        modules.insert(name, files.into_iter().filter(|f| !is_test_file(f)).collect());
    }
    modules
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or_default();
    name == "tests" || name.ends_with("_tests")
}

/// The code of a source file: without its `#[cfg(test)]` module (by convention the last item of a
/// file) and without comments, whose links are not dependencies.
fn code_of(source: &str) -> String {
    let code = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    code.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The top-level modules `source` names through `crate::`, in paths and in `use crate::{…}`.
fn references(source: &str, known: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::b, c, d::{e, f}}`: the first segment of each top-level item.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        rest = &group[i..];
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphanumeric() || c == '_') => {
                        let word: String = group[i..]
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if known.contains(word.as_str()) {
                            found.insert(word);
                        }
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let word: String =
                rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if known.contains(word.as_str()) {
                found.insert(word);
            }
        }
    }
    found
}

/// The strongly connected components of `graph` with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        next: usize,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                component.insert(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

/// A path from `from` back to itself through `within`, for the failure message.
fn loop_through(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: &str,
    within: &BTreeSet<String>,
) -> Vec<String> {
    // Breadth-first from `from`'s successors back to `from`.
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::new();
    for next in graph[from].iter().filter(|n| within.contains(*n)) {
        came_from.insert(next.clone(), from.to_owned());
        queue.push_back(next.clone());
    }
    while let Some(at) = queue.pop_front() {
        if at == from {
            break;
        }
        for next in graph[&at].iter().filter(|n| within.contains(*n)) {
            if !came_from.contains_key(next) {
                came_from.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    let mut path = vec![from.to_owned()];
    let mut at = came_from.get(from).cloned();
    while let Some(step) = at {
        path.push(step.clone());
        if step == from {
            break;
        }
        at = came_from.get(&step).cloned();
    }
    path.reverse();
    path
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let known: BTreeSet<&str> = modules.keys().map(String::as_str).collect();
    modules
        .iter()
        .map(|(name, files)| {
            let mut uses = BTreeSet::new();
            for file in files {
                let source = fs::read_to_string(file).expect("read source");
                uses.extend(references(&code_of(&source), &known));
            }
            uses.remove(name);
            (name.clone(), uses)
        })
        .collect()
}

#[test]
fn modules_form_layers_around_one_core() {
    let graph = graph();
    for core in CORE {
        assert!(graph.contains_key(*core), "the core names {core}, which is not a module");
    }
    let core: BTreeSet<String> = CORE.iter().map(|c| (*c).to_owned()).collect();
    let outside: Vec<(BTreeSet<String>, Vec<String>)> = cycles(&graph)
        .into_iter()
        .filter(|c| !c.is_subset(&core))
        .map(|c| {
            let start = c.iter().find(|m| !core.contains(*m)).expect("a module outside").clone();
            let path = loop_through(&graph, &start, &c);
            (c, path)
        })
        .collect();
    assert!(
        outside.is_empty(),
        "import cycles leave the core {CORE:?}:\n{}",
        outside
            .iter()
            .map(|(c, path)| format!("  {c:?}, e.g. {}", path.join(" -> ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_reference_reader_sees_paths_and_use_groups() {
    let known: BTreeSet<&str> = ["api", "status", "resource", "server"].into_iter().collect();
    let found = references(
        "use crate::{api::Api, status::{ApiError, Cause}};\nfn f() { crate::resource::intern(\"x\"); }",
        &known,
    );
    let want: BTreeSet<String> =
        ["api", "resource", "status"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, want);
    let code = code_of(
        "/// Read by [`crate::api::Api`].\nuse crate::status::Cause;\n#[cfg(test)]\nmod tests {\n    use crate::server;\n}\n",
    );
    let want: BTreeSet<String> = ["status".to_owned()].into();
    assert_eq!(references(&code, &known), want, "comments and tests are not dependencies");
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), ["b".to_owned()].into());
    g.insert("b".to_owned(), ["c".to_owned()].into());
    g.insert("c".to_owned(), ["a".to_owned()].into());
    g.insert("d".to_owned(), ["a".to_owned()].into());
    let found = cycles(&g);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0], ["a", "b", "c"].iter().map(|s| s.to_string()).collect());
    assert_eq!(loop_through(&g, "a", &found[0]), ["a", "b", "c", "a"]);
}
