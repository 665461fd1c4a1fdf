//! `carrel gpu map`: the fleet's MIG slices and who holds each.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};

use carrel_gpu::{Fleet, Profile, MEMORY_SLOTS};

use crate::host;

/// `carrel gpu …`.
#[derive(Debug, clap::Subcommand)]
pub enum GpuCommand {
    /// Per node and GPU, the MIG slices that exist and the tenant and pod holding each.
    Map {
        /// Output format: a picture (default) or json.
        #[arg(short = 'o', long = "output", value_parser = ["json", "picture"])]
        output: Option<String>,
    },
}

/// Run a `carrel gpu` command.
pub async fn run(kubeconfig: Option<&Path>, command: GpuCommand) -> anyhow::Result<i32> {
    match command {
        GpuCommand::Map { output } => {
            let client = host::client(kubeconfig).await?;
            let (fleet, _) = carrel_syncer::placement::fleet(&client)
                .await
                .context("reading the GPU inventory and claims from the host")?;
            let text = match output.as_deref() {
                Some("json") => {
                    serde_json::to_string_pretty(&map_json(&fleet)).context("encoding JSON")? + "\n"
                }
                _ => picture(&fleet, colour_wanted()),
            };
            print(&text);
            Ok(0)
        }
    }
}

#[allow(clippy::print_stdout)]
fn print(text: &str) {
    print!("{text}");
}

fn colour_wanted() -> bool {
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// The `-o json` document: nodes → GPUs → instances, holders in the tenant's names.
pub fn map_json(fleet: &Fleet) -> Value {
    let nodes: Vec<Value> = fleet
        .nodes
        .iter()
        .map(|node| {
            let gpus: Vec<Value> = node
                .gpus
                .iter()
                .map(|gpu| {
                    let mut instances: Vec<&carrel_gpu::Instance> = gpu.instances.iter().collect();
                    instances.sort_by_key(|i| i.placement.start);
                    let instances: Vec<Value> = instances
                        .into_iter()
                        .map(|i| {
                            let mut v = json!({
                                "uuid": i.uuid,
                                "profile": Profile { model: gpu.model, shape: i.shape }.name(),
                                "start": i.placement.start,
                                "size": i.placement.size,
                            });
                            if let Some(h) = &i.holder {
                                v["tenant"] = json!(h.tenant);
                                v["namespace"] = json!(h.namespace);
                                v["pod"] = json!(h.pod);
                            }
                            v
                        })
                        .collect();
                    json!({
                        "uuid": gpu.uuid,
                        "model": gpu.model.slug(),
                        "index": gpu.index,
                        "migEnabled": gpu.mig_enabled,
                        "instances": instances,
                    })
                })
                .collect();
            json!({"name": node.name, "gpus": gpus})
        })
        .collect();
    json!({"nodes": nodes})
}

const PALETTE: [&str; 6] =
    ["\x1b[42;30m", "\x1b[44;97m", "\x1b[45;97m", "\x1b[43;30m", "\x1b[46;30m", "\x1b[41;97m"];
const FREE: &str = "\x1b[47;30m";
const RESET: &str = "\x1b[0m";

/// The terminal picture: one bar of memory slots per GPU, each instance a block, then a line per
/// instance naming its profile and holder.
pub fn picture(fleet: &Fleet, colour: bool) -> String {
    let mut out = String::new();
    if fleet.nodes.is_empty() {
        out.push_str("no GPU node has published an inventory\n");
        return out;
    }
    let mut tenants: Vec<String> = Vec::new();
    for node in &fleet.nodes {
        out.push_str(&format!("node {}\n", node.name));
        for gpu in &node.gpus {
            let mut instances: Vec<&carrel_gpu::Instance> = gpu.instances.iter().collect();
            instances.sort_by_key(|i| i.placement.start);
            let mut cells: Vec<String> = Vec::new();
            let mut slot = 0u8;
            let cell = |text: &str, style: &str| -> String {
                if colour {
                    format!("{style}{text}{RESET}")
                } else {
                    text.to_owned()
                }
            };
            for i in &instances {
                while slot < i.placement.start {
                    cells.push(cell(" . ", FREE));
                    slot += 1;
                }
                let width = usize::from(i.placement.size) * 3;
                let mark = match &i.holder {
                    Some(h) => {
                        if !tenants.contains(&h.tenant) {
                            tenants.push(h.tenant.clone());
                        }
                        let n = tenants.iter().position(|t| *t == h.tenant).unwrap_or(0);
                        let label: String =
                            h.tenant.chars().take(width.saturating_sub(2)).collect();
                        cell(&format!("[{label:^w$}]", w = width - 2), PALETTE[n % PALETTE.len()])
                    }
                    None => cell(&format!("[{:^w$}]", "free", w = width - 2), FREE),
                };
                cells.push(mark);
                slot = i.placement.start + i.placement.size;
            }
            while slot < MEMORY_SLOTS {
                cells.push(cell(" . ", FREE));
                slot += 1;
            }
            let mode = if gpu.mig_enabled { "MIG" } else { "MIG off" };
            out.push_str(&format!(
                "  GPU {} {} {} ({mode})\n    {}\n",
                gpu.index,
                gpu.model.slug(),
                gpu.uuid,
                cells.join("")
            ));
            for i in instances {
                let profile = Profile { model: gpu.model, shape: i.shape }.name();
                let who = match &i.holder {
                    Some(h) => format!("{}: {}/{}", h.tenant, h.namespace, h.pod),
                    None => "free".to_owned(),
                };
                let uuid = if i.uuid.is_empty() { "(being created)" } else { &i.uuid };
                out.push_str(&format!(
                    "    slots {}-{} {profile:<12} {uuid} {who}\n",
                    i.placement.start,
                    i.placement.start + i.placement.size - 1
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use carrel_gpu::{Gpu, GpuModel, Holder, Instance, Node, Placement, Shape};

    fn fleet() -> Fleet {
        Fleet {
            nodes: vec![Node {
                name: "sim-0".into(),
                gpus: vec![Gpu {
                    uuid: "GPU-1".into(),
                    index: 0,
                    model: GpuModel::H200_141GB,
                    mig_enabled: true,
                    instances: vec![
                        Instance {
                            uuid: "MIG-b".into(),
                            shape: Shape::G3,
                            placement: Placement { start: 4, size: 4 },
                            holder: None,
                        },
                        Instance {
                            uuid: "MIG-a".into(),
                            shape: Shape::G1,
                            placement: Placement { start: 0, size: 1 },
                            holder: Some(Holder {
                                tenant: "team-a".into(),
                                namespace: "ml".into(),
                                pod: "train".into(),
                            }),
                        },
                    ],
                }],
            }],
        }
    }

    #[test]
    fn json_names_holders_in_tenant_terms() {
        let v = map_json(&fleet());
        let instances = &v["nodes"][0]["gpus"][0]["instances"];
        assert_eq!(instances[0]["profile"], "1g.18gb");
        assert_eq!(instances[0]["tenant"], "team-a");
        assert_eq!(instances[0]["pod"], "train");
        assert_eq!(instances[1]["start"], 4);
        assert_eq!(instances[1]["size"], 4);
        assert!(instances[1].get("tenant").is_none());
        assert_eq!(v["nodes"][0]["gpus"][0]["model"], "h200");
    }

    #[test]
    fn the_picture_has_one_cell_per_slot() {
        let plain = picture(&fleet(), false);
        assert!(plain.contains("node sim-0"), "{plain}");
        assert!(plain.contains("[t]"), "a 1-slot holder is one cell: {plain}");
        assert!(plain.contains(" .  .  . [   free   ]"), "{plain}");
        assert!(plain.contains("team-a: ml/train"), "{plain}");
        assert!(!plain.contains('\x1b'));
        let coloured = picture(&fleet(), true);
        assert!(coloured.contains("\x1b[42;30m"), "{coloured}");
    }
}
