//! The official Kubernetes Python client against a Carrel API server. `scripts/test.sh` installs
//! the client into a virtual environment and points `CARREL_PYTHON` at its interpreter.

use std::process::Command;

use carrel_e2e::TestServer;

/// The interpreter with the `kubernetes` package.
fn python() -> String {
    if let Ok(python) = std::env::var("CARREL_PYTHON") {
        return python;
    }
    let importable = Command::new("python3")
        .args(["-c", "import kubernetes"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        importable,
        "the Python tests need the `kubernetes` package: run scripts/test.sh, or set CARREL_PYTHON \
         to an interpreter that has it"
    );
    "python3".into()
}

fn run(scenario: &str) {
    let server = TestServer::start("/tenants/py");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/client_checks.py");
    let output = Command::new(python())
        .args([script, &server.url, scenario])
        .output()
        .expect("run the Python client");
    assert!(
        output.status.success(),
        "{scenario} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn python_watch_replays_from_a_resource_version() {
    run("watch_replays_from_a_resource_version");
}

#[test]
fn python_create_from_yaml_takes_every_document() {
    run("create_from_yaml_takes_every_document");
}

#[test]
fn python_lists_paginate_and_select() {
    run("lists_paginate_and_select");
}

#[test]
fn python_errors_are_status_objects() {
    run("errors_are_status_objects");
}

#[test]
fn python_strategic_merge_patch_of_service_ports() {
    run("strategic_merge_patch_of_service_ports");
}

#[test]
fn python_informer_converges_through_relists_and_rewatches() {
    run("informer_converges_through_relists_and_rewatches");
}

#[test]
fn python_dynamic_client_on_custom_resources() {
    run("dynamic_client_on_custom_resources");
}
