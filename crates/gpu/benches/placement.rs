//! Placement quality and decision latency of `carrel_gpu::allocate` (dynamic mode).
//!
//! Run with `cargo bench -p carrel-gpu --bench placement`. A plain program (no harness), seeded
//! and bounded; a watchdog ends a hung run.
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | 2 H200, 60 seeded streams of 20 arrivals | requests placed by `allocate` | the most any sequence of choices places (exhaustive search, rejections allowed) |
//! | 16 and 100 H200, seeded mixed streams | requests placed, slices used | first fit: first GPU, lowest valid start clear of claimed instances |
//! | 10, 100, 1,000 H200 filled to ~70% | `allocate` decision time | first-fit decision time |
//!
//! In every stream one arrival comes per step and stays a random number of steps; a departure
//! frees its instance (it stays, unclaimed, for the allocator to reuse or remove).

#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use carrel_bench::{ms, ratio, section, verdict, watchdog, Run, Table};
use carrel_gpu::{
    allocate, Allocation, Device, DeviceSource, Fleet, Gpu, GpuLayout, GpuModel, Holder, Mode,
    Node, Placement, Profile, Quotas, Removal, Request, Shape, COMPUTE_SLICES,
};

const MODEL: GpuModel = GpuModel::H200_141GB;
/// (shape, weight in %) of the mixed workload.
const MIX: [(Shape, u32); 7] = [
    (Shape::G1, 35),
    (Shape::G1Me, 5),
    (Shape::G1DoubleMemory, 10),
    (Shape::G2, 20),
    (Shape::G3, 15),
    (Shape::G4, 10),
    (Shape::G7, 5),
];
const TENANT: &str = "bench";

/// splitmix64: a small seeded generator, so streams are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn shape(&mut self) -> Shape {
        let mut r = self.below(100) as u32;
        for (s, w) in MIX {
            if r < w {
                return s;
            }
            r -= w;
        }
        Shape::G1
    }
}

/// One arrival: its shape and how many steps it stays.
#[derive(Clone, Copy)]
struct Arrival {
    shape: Shape,
    stay: usize,
}

fn stream(seed: u64, len: usize, stay: (u64, u64)) -> Vec<Arrival> {
    let mut rng = Rng(seed);
    (0..len)
        .map(|_| Arrival {
            shape: rng.shape(),
            stay: (stay.0 + rng.below(stay.1 - stay.0 + 1)) as usize,
        })
        .collect()
}

fn empty_fleet(gpus: usize) -> Fleet {
    Fleet {
        nodes: (0..gpus.div_ceil(8))
            .map(|n| Node {
                name: format!("node-{n:04}"),
                gpus: (0..8.min(gpus - n * 8))
                    .map(|g| Gpu {
                        uuid: format!("GPU-{n}-{g}"),
                        index: g as u32,
                        model: MODEL,
                        mig_enabled: true,
                        instances: Vec::new(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

fn quotas() -> Quotas {
    let mut q = Quotas::new();
    for p in MODEL.profiles() {
        let _ = q.set(TENANT, p.name(), u32::MAX / 2);
    }
    q
}

fn request(shape: Shape) -> Request {
    Request {
        tenant: TENANT.to_owned(),
        profile: Profile { model: MODEL, shape }.name().to_owned(),
        count: 1,
        nodes: None,
    }
}

/// The baseline: the first GPU in inventory order, and on it the lowest valid start clear of
/// claimed instances, removing the free instances in the way.
fn first_fit(fleet: &Fleet, shape: Shape) -> Option<Allocation> {
    for node in &fleet.nodes {
        for gpu in &node.gpus {
            let mut claimed = GpuLayout::new();
            for i in gpu.instances.iter().filter(|i| i.holder.is_some()) {
                let _ = claimed.add(gpu.profile_of(i), i.placement.start);
            }
            for &start in shape.starts() {
                let mask = shape.mask_at(start);
                let mut layout = claimed;
                let mut removals = Vec::new();
                for i in gpu.instances.iter().filter(|i| i.holder.is_none()) {
                    let in_way = i.placement.mask() & mask != 0
                        || (shape.media_engine() && i.shape.media_engine());
                    if in_way {
                        removals.push(Removal {
                            node: node.name.clone(),
                            gpu_uuid: gpu.uuid.clone(),
                            instance_uuid: i.uuid.clone(),
                            profile: gpu.profile_of(i),
                            placement: i.placement,
                        });
                    } else {
                        let _ = layout.add(gpu.profile_of(i), i.placement.start);
                    }
                }
                if layout.can_add(shape, start) {
                    return Some(Allocation {
                        devices: vec![Device {
                            node: node.name.clone(),
                            gpu_uuid: gpu.uuid.clone(),
                            gpu_index: gpu.index,
                            profile: Profile { model: gpu.model, shape },
                            placement: Placement { start, size: shape.memory_slots() },
                            source: DeviceSource::Create,
                        }],
                        removals,
                    });
                }
            }
        }
    }
    None
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    Ours,
    FirstFit,
}

/// Requests placed, arrivals, and the mean share of compute slices held after each arrival.
struct Outcome {
    placed: usize,
    arrivals: usize,
    slices_used: f64,
}

fn simulate(gpus: usize, arrivals: &[Arrival], policy: Policy) -> Outcome {
    let mut fleet = empty_fleet(gpus);
    let quotas = quotas();
    let mut departures: BTreeMap<usize, Vec<Holder>> = BTreeMap::new();
    let mut placed = 0;
    let mut held_slices = 0u64;
    let mut held: HashMap<String, u64> = HashMap::new();
    let mut used_sum = 0.0;
    let mut n = 0u64;
    for (step, a) in arrivals.iter().enumerate() {
        if let Some(leaving) = departures.remove(&step) {
            for h in leaving {
                fleet.release(&h);
                held_slices -= held.remove(&h.pod).unwrap_or(0);
            }
        }
        let decision = match policy {
            Policy::Ours => allocate(&fleet, &quotas, &request(a.shape), Mode::Dynamic).ok(),
            Policy::FirstFit => first_fit(&fleet, a.shape),
        };
        if let Some(alloc) = decision {
            let h = Holder {
                tenant: TENANT.to_owned(),
                namespace: "default".to_owned(),
                pod: format!("p{step}"),
            };
            fleet.apply(&alloc, &h, || {
                n += 1;
                format!("MIG-{n}")
            });
            let slices = u64::from(a.shape.compute_slices());
            held_slices += slices;
            held.insert(h.pod.clone(), slices);
            departures.entry(step + a.stay).or_default().push(h);
            placed += 1;
        }
        used_sum += held_slices as f64 / (gpus as f64 * f64::from(COMPUTE_SLICES));
    }
    Outcome { placed, arrivals: arrivals.len(), slices_used: used_sum / arrivals.len() as f64 }
}

/// The most requests any sequence of choices places on `gpus` empty GPUs (claimed instances
/// only: free ones can always be removed). Memoised depth-first search; `None` past `budget`
/// states.
fn exhaustive(gpus: usize, arrivals: &[Arrival], budget: usize) -> Option<usize> {
    // A GPU's state: its claimed (start, shape, departure step), sorted.
    type State = Vec<Vec<(u8, Shape, usize)>>;
    fn go(
        step: usize,
        mut state: State,
        arrivals: &[Arrival],
        memo: &mut HashMap<(usize, State), usize>,
        budget: usize,
    ) -> Option<usize> {
        if step == arrivals.len() {
            return Some(0);
        }
        for gpu in &mut state {
            gpu.retain(|&(_, _, leave)| leave > step);
        }
        let mut canon = state.clone();
        canon.sort();
        if let Some(&v) = memo.get(&(step, canon.clone())) {
            return Some(v);
        }
        if memo.len() > budget {
            return None;
        }
        let a = arrivals[step];
        let mut best = go(step + 1, state.clone(), arrivals, memo, budget)?;
        let mut tried: Vec<&Vec<(u8, Shape, usize)>> = Vec::new();
        for g in 0..state.len() {
            if tried.contains(&&state[g]) {
                continue; // identical GPUs: one is enough
            }
            tried.push(&state[g]);
            let mut layout = GpuLayout::new();
            for &(start, shape, _) in &state[g] {
                let _ = layout.add(Profile { model: MODEL, shape }, start);
            }
            for &start in a.shape.starts() {
                if layout.can_add(a.shape, start) {
                    let mut next = state.clone();
                    next[g].push((start, a.shape, step + a.stay));
                    next[g].sort();
                    let v = 1 + go(step + 1, next, arrivals, memo, budget)?;
                    best = best.max(v);
                }
            }
        }
        memo.insert((step, canon), best);
        Some(best)
    }
    let mut memo = HashMap::new();
    go(0, vec![Vec::new(); gpus], arrivals, &mut memo, budget)
}

/// A fleet filled by our allocator to about `fill` of its compute slices.
fn filled_fleet(gpus: usize, fill: f64, seed: u64) -> Fleet {
    let mut fleet = empty_fleet(gpus);
    let quotas = quotas();
    let mut rng = Rng(seed);
    let target = (gpus as f64 * f64::from(COMPUTE_SLICES) * fill) as u64;
    let mut used = 0u64;
    let mut n = 0u64;
    let mut misses = 0;
    while used < target && misses < 1000 {
        let shape = rng.shape();
        match allocate(&fleet, &quotas, &request(shape), Mode::Dynamic) {
            Ok(a) => {
                let h = Holder {
                    tenant: TENANT.to_owned(),
                    namespace: "default".to_owned(),
                    pod: format!("fill{n}"),
                };
                fleet.apply(&a, &h, || {
                    n += 1;
                    format!("MIG-{n}")
                });
                used += u64::from(shape.compute_slices());
                // Some of it leaves again, so free instances are scattered around.
                if rng.below(4) == 0 {
                    fleet.release(&h);
                    used -= u64::from(shape.compute_slices());
                }
            }
            Err(_) => misses += 1,
        }
    }
    fleet
}

fn time_decisions(fleet: &Fleet, shapes: &[Shape], policy: Policy) -> Run {
    let quotas = quotas();
    let requests: Vec<Request> = shapes.iter().map(|&s| request(s)).collect();
    let mut lat = Vec::with_capacity(shapes.len());
    let started = Instant::now();
    for (r, &s) in requests.iter().zip(shapes) {
        let t = Instant::now();
        let out = match policy {
            Policy::Ours => allocate(fleet, &quotas, r, Mode::Dynamic).ok(),
            Policy::FirstFit => first_fit(fleet, s),
        };
        lat.push(t.elapsed());
        std::hint::black_box(out);
    }
    Run::from_parts(lat, started.elapsed())
}

fn main() {
    watchdog(Duration::from_secs(300), "placement benchmark");
    let mut table = Table::default();

    section("2 GPUs: ours against the exhaustive optimum");
    table.header("Placement on 2 H200 (60 seeded streams of 20 arrivals, stays of 2–10 steps)");
    let (mut ours_total, mut opt_total, mut ff_total, mut equal, mut seeds) = (0, 0, 0, 0, 0);
    for seed in 0..60u64 {
        let arrivals = stream(1000 + seed, 20, (2, 10));
        let Some(opt) = exhaustive(2, &arrivals, 2_000_000) else {
            println!("seed {seed}: search over budget, skipped");
            continue;
        };
        let ours = simulate(2, &arrivals, Policy::Ours).placed;
        let ff = simulate(2, &arrivals, Policy::FirstFit).placed;
        seeds += 1;
        ours_total += ours;
        opt_total += opt;
        ff_total += ff;
        equal += usize::from(ours == opt);
        if ours < opt {
            println!("seed {seed}: ours {ours}, first fit {ff}, optimum {opt}");
        }
    }
    println!("{seeds} streams: ours {ours_total}, first fit {ff_total}, optimum {opt_total}; ours optimal on {equal}");
    table.row(
        "requests placed, ours vs optimum",
        format!("{ours_total}"),
        format!("{opt_total} (optimum)"),
        ratio(ours_total as f64, opt_total as f64),
        verdict(ours_total == opt_total, "= optimum".to_owned()),
    );
    table.row(
        "streams where ours is optimal",
        format!("{equal} of {seeds}"),
        "-".to_owned(),
        "-".to_owned(),
        verdict(equal == seeds, "all".to_owned()),
    );
    table.row(
        "requests placed, first fit vs optimum",
        format!("{ff_total}"),
        format!("{opt_total} (optimum)"),
        ratio(ff_total as f64, opt_total as f64),
        "(reference)".to_owned(),
    );

    for (gpus, stay, len) in [(16usize, (20u64, 100u64), 3000usize), (100, (150, 650), 4000)] {
        section(&format!("{gpus} GPUs: ours against first fit"));
        table.header(&format!(
            "Mixed workload on {gpus} H200 (3 seeds × {len} arrivals, stays of {}–{} steps)",
            stay.0, stay.1
        ));
        let (mut o_placed, mut f_placed, mut arr, mut o_used, mut f_used) = (0, 0, 0, 0.0, 0.0);
        for seed in 0..3u64 {
            let arrivals = stream(7 + seed, len, stay);
            let o = simulate(gpus, &arrivals, Policy::Ours);
            let f = simulate(gpus, &arrivals, Policy::FirstFit);
            println!(
                "seed {seed}: ours {}/{} placed, {:.1}% slices; first fit {}/{}, {:.1}%",
                o.placed,
                o.arrivals,
                o.slices_used * 100.0,
                f.placed,
                f.arrivals,
                f.slices_used * 100.0
            );
            o_placed += o.placed;
            f_placed += f.placed;
            arr += o.arrivals;
            o_used += o.slices_used / 3.0;
            f_used += f.slices_used / 3.0;
        }
        table.row(
            "requests placed",
            format!("{:.1}%", 100.0 * o_placed as f64 / arr as f64),
            format!("{:.1}% (first fit)", 100.0 * f_placed as f64 / arr as f64),
            ratio(o_placed as f64, f_placed as f64),
            verdict(o_placed > f_placed, "> first fit".to_owned()),
        );
        table.row(
            "compute slices used (mean)",
            format!("{:.1}%", 100.0 * o_used),
            format!("{:.1}% (first fit)", 100.0 * f_used),
            ratio(o_used, f_used),
            verdict(o_used >= f_used, "≥ first fit".to_owned()),
        );
    }

    section("decision latency");
    table.header(
        "Decision latency, dynamic mode, 1 device (fleet ~70% full, scattered free instances)",
    );
    for gpus in [10usize, 100, 1000] {
        let fleet = filled_fleet(gpus, 0.7, 42);
        let mut rng = Rng(99);
        let shapes: Vec<Shape> = (0..2000).map(|_| rng.shape()).collect();
        // Warm up, then measure.
        let _ = time_decisions(&fleet, &shapes[..200], Policy::Ours);
        let ours = time_decisions(&fleet, &shapes, Policy::Ours);
        let ff = time_decisions(&fleet, &shapes, Policy::FirstFit);
        println!("{gpus} GPUs: ours {}; first fit {}", ours.describe(), ff.describe());
        let target = if gpus == 1000 {
            verdict(ours.p99() <= Duration::from_micros(100), "p99 ≤ 100 µs".to_owned())
        } else {
            "-".to_owned()
        };
        table.row(
            &format!("{gpus} GPUs, p50"),
            ms(ours.p50()),
            format!("{} (first fit)", ms(ff.p50())),
            ratio(ours.p50().as_secs_f64(), ff.p50().as_secs_f64()),
            "-".to_owned(),
        );
        table.row(
            &format!("{gpus} GPUs, p99"),
            ms(ours.p99()),
            format!("{} (first fit)", ms(ff.p99())),
            ratio(ours.p99().as_secs_f64(), ff.p99().as_secs_f64()),
            target,
        );
    }
    table.print();
}
