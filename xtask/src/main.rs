//! Carrel's code generators. Each writes one file, marked generated in its first line and in
//! `.gitattributes`; with `--check` it writes nothing and fails when the committed file is stale
//! (the `generated_files_are_fresh` test runs every generator so).
//!
//! `cargo run -p xtask -- gen-protobuf` writes `apiserver-shim/src/protobuf/schema.rs`, the table the
//! API server's protobuf request decoder walks: for every message reachable from the kinds the
//! server accepts, its fields with their numbers, wire types and JSON names.
//!
//! `cargo run -p xtask -- gen-manifests` writes `manifests/base/generated/`: the `Tenant` CRD from
//! its Rust type and the components' ClusterRoles from their rule lists (see `manifests.rs`).
//!
//! `cargo run -p xtask -- gen-annotations` writes `apiserver-shim/src/openapi/annotation_table.rs`,
//! the list, map and patch annotations of the served schemas, from the Go comment tags k8s-pb
//! keeps in its doc comments (see `annotations.rs`).
//!
//! - Field numbers and wire types come from the `k8s-pb` crate (kube-rs's prost bindings of
//!   Kubernetes' `generated.proto` files): its source is parsed with `syn`, reading each field's
//!   `#[prost(...)]` attribute and Rust type.
//! - JSON names come from the `k8s-openapi` crate's `schemars::JsonSchema` impls: prost's
//!   snake_case names (`pod_ip`, `r#type`) are lowerCamelCased and then matched, ignoring case and
//!   underscores, against the real JSON properties of the same type (`podIP`, `type`).
//!   Whatever cannot be matched is reported and recorded in the generated file's header.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod annotations;
mod manifests;
mod output;
mod protobuf;

use anyhow::{bail, Result};

use output::Mode;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = Mode::from_args(&args);
    match args.first().map(String::as_str) {
        Some("gen-protobuf") => protobuf::generate(mode),
        Some("gen-annotations") => annotations::generate(mode),
        Some("gen-manifests") => manifests::generate(mode),
        _ => bail!(
            "usage: cargo run -p xtask -- gen-protobuf|gen-annotations|gen-manifests [--check]"
        ),
    }
}

/// The workspace's root directory (xtask's parent).
fn workspace_root() -> std::path::PathBuf {
    let xtask = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed generated files are what the generators write today.
    #[test]
    fn generated_files_are_fresh() {
        protobuf::generate(Mode::Check).unwrap_or_else(|e| panic!("{e:#}"));
        annotations::generate(Mode::Check).unwrap_or_else(|e| panic!("{e:#}"));
        manifests::generate(Mode::Check).unwrap_or_else(|e| panic!("{e:#}"));
    }
}
