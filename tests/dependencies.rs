//! The workspace's crates depend on each other in one direction, the direction of the processes
//! they become: the store knows nothing above it, the API server knows nothing of the
//! controllers that use it, and the syncer, node agent and tenant manager reach an API server
//! only as clients do. Read from `cargo metadata`, so a dependency added against the grain fails
//! here with the edge named.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each workspace package's normal (not dev, not build) dependencies.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            let name = package["name"].as_str().expect("name").to_owned();
            let deps = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every package `from` reaches through normal dependencies inside the workspace.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut next = vec![from.to_owned()];
    while let Some(at) = next.pop() {
        for dep in graph.get(&at).into_iter().flatten() {
            if graph.contains_key(dep) && seen.insert(dep.clone()) {
                next.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn only_the_store_uses_sled() {
    let graph = normal_dependencies();
    let users: Vec<&String> =
        graph.iter().filter(|(_, deps)| deps.contains("sled")).map(|(name, _)| name).collect();
    assert_eq!(users, ["carrel-store"], "sled is the store's own business");
}

#[test]
fn controllers_reach_api_servers_only_as_clients() {
    let graph = normal_dependencies();
    for controller in ["carrel-syncer", "carrel-node-agent"] {
        let reached = reach(&graph, controller);
        assert!(
            !reached.contains("carrel-apiserver") && !reached.contains("carrel-store"),
            "{controller} links the API server or the store: {reached:?}"
        );
        assert!(graph[controller].contains("kube"), "{controller} talks to its APIs with kube");
    }
}

#[test]
fn the_api_server_knows_nothing_of_what_runs_on_it() {
    let graph = normal_dependencies();
    let reached = reach(&graph, "carrel-apiserver");
    for above in ["carrel", "carrel-syncer", "carrel-node-agent", "carrel-sim", "carrel-tenants"] {
        assert!(!reached.contains(above), "carrel-apiserver depends on {above}");
    }
}

#[test]
fn the_tenant_manager_is_a_client_of_its_host_beside_no_other_controller() {
    let graph = normal_dependencies();
    let reached = reach(&graph, "carrel-tenants");
    for other in ["carrel-syncer", "carrel-node-agent", "carrel-sim", "carrel"] {
        assert!(!reached.contains(other), "carrel-tenants depends on {other}");
    }
    assert!(graph["carrel-tenants"].contains("kube"), "the manager talks to its host with kube");
}

#[test]
fn the_production_node_agent_carries_no_simulation() {
    let graph = normal_dependencies();
    let reached = reach(&graph, "carrel-node-agent");
    assert!(!reached.contains("carrel-sim"), "the node agent links the simulated kubelet");
}

#[test]
fn the_reach_of_a_package_follows_every_edge() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_owned(), BTreeSet::from(["b".to_owned(), "serde".to_owned()]));
    graph.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    graph.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(reach(&graph, "a"), BTreeSet::from(["b".to_owned(), "c".to_owned()]));
}
