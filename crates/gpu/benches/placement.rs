//! Placement quality and decision latency of `carrel_gpu::allocate` (dynamic mode).
//!
//! Run with `cargo bench -p carrel-gpu --bench placement`. A plain program (no harness), seeded
//! and bounded; a watchdog ends a hung run.
//!
//! | section | ours | baseline |
//! |---|---|---|
//! | 2 H200, 60 seeded streams of 20 arrivals | requests placed by `allocate` | the online optimum: the most any sequence of placement choices places under the allocator's rules (every request that fits when it arrives is placed), found by exhaustive search in hindsight; the clairvoyant optimum (may also turn requests away) is shown for information |
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

/// Requests placed, arrivals, the mean share of compute slices held after each arrival, and per
/// arrival the GPU (position in inventory order) and start it got.
struct Outcome {
    placed: usize,
    arrivals: usize,
    slices_used: f64,
    trace: Vec<Option<(usize, u8)>>,
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
    let mut trace = Vec::with_capacity(arrivals.len());
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
        trace.push(decision.as_ref().map(|alloc| {
            let d = &alloc.devices[0];
            let node: usize = d.node["node-".len()..].parse().unwrap_or(0);
            (node * 8 + d.gpu_index as usize, d.placement.start)
        }));
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
    Outcome {
        placed,
        arrivals: arrivals.len(),
        slices_used: used_sum / arrivals.len() as f64,
        trace,
    }
}

/// GPUs in the searches.
const SEARCH_GPUS: usize = 2;

/// A GPU's claimed instances in the searches, packed: for each memory slot where an instance
/// starts, 10 bits = its shape (index + 1, 4 bits) and its departure step (6 bits). Equal GPUs
/// have equal values, so a fleet state sorts into a canonical form.
type Claims = u128;
type State = [Claims; SEARCH_GPUS];

fn claims(c: Claims) -> impl Iterator<Item = (u8, Shape, usize)> {
    (0..8u8).filter_map(move |slot| {
        let field = (c >> (10 * u32::from(slot))) & 0x3ff;
        (field != 0).then(|| (slot, Shape::ALL[(field >> 6) as usize - 1], (field & 0x3f) as usize))
    })
}

/// The rules of a search for the best choice sequence in hindsight.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// The allocator's rules: a request that fits when it arrives is placed (no turning away).
    Online,
    /// Clairvoyant: a request may also be turned away to keep room for later ones.
    MayReject,
}

/// Exhaustive search over every sequence of placement choices on empty GPUs, knowing the whole
/// stream. Only claimed instances count: a free one can always be removed, so whether a request
/// fits depends on the claimed ones alone, exactly as for `allocate` in dynamic mode. At each
/// arrival it tries every start slot clear of claimed instances on every GPU, once per distinct
/// GPU state (GPUs with identical claims are interchangeable). Memoised on (step, canonical fleet
/// state: departed instances dropped, GPUs sorted); `None` past `budget` states.
struct Search<'a> {
    arrivals: &'a [Arrival],
    rules: Rules,
    memo: HashMap<(usize, State), usize>,
    budget: usize,
}

impl Search<'_> {
    fn new(arrivals: &[Arrival], rules: Rules, budget: usize) -> Search<'_> {
        Search { arrivals, rules, memo: HashMap::new(), budget }
    }

    /// The placements open to arrival `step` in `state`: (GPU, start), one GPU per distinct state.
    fn options(&self, step: usize, state: &State) -> Vec<(usize, u8)> {
        let shape = self.arrivals[step].shape;
        let mut out = Vec::new();
        for g in 0..state.len() {
            if state[..g].contains(&state[g]) {
                continue; // identical GPUs: one is enough
            }
            let mut layout = GpuLayout::new();
            for (start, s, _) in claims(state[g]) {
                let _ = layout.add(Profile { model: MODEL, shape: s }, start);
            }
            for &start in shape.starts() {
                if layout.can_add(shape, start) {
                    out.push((g, start));
                }
            }
        }
        out
    }

    fn after(&self, step: usize, state: &State, (g, start): (usize, u8)) -> State {
        let a = self.arrivals[step];
        let leave = (step + a.stay).min(63) as u128; // past the stream's end: never leaves
        let mut next = *state;
        next[g] |= (((a.shape.index() as u128 + 1) << 6) | leave) << (10 * u32::from(start));
        next
    }

    /// Departed instances dropped (what the state looks like when arrival `step` comes).
    fn settle(step: usize, state: &mut State) {
        for gpu in state {
            for (slot, _, leave) in claims(*gpu) {
                if leave <= step {
                    *gpu &= !(0x3ff << (10 * u32::from(slot)));
                }
            }
        }
    }

    /// The most requests placed from arrival `step` on, from `state`.
    fn best(&mut self, step: usize, mut state: State) -> Option<usize> {
        if step == self.arrivals.len() {
            return Some(0);
        }
        Self::settle(step, &mut state);
        state.sort();
        if let Some(&v) = self.memo.get(&(step, state)) {
            return Some(v);
        }
        if self.memo.len() > self.budget {
            return None;
        }
        let options = self.options(step, &state);
        let mut best = if options.is_empty() || self.rules == Rules::MayReject {
            self.best(step + 1, state)?
        } else {
            0
        };
        for o in options {
            let next = self.after(step, &state, o);
            best = best.max(1 + self.best(step + 1, next)?);
        }
        self.memo.insert((step, state), best);
        Some(best)
    }

    /// One optimal choice sequence (call after `best(0, ..)` succeeded): per arrival, the GPU and
    /// start, or `None` when it was not placed.
    fn path(&mut self) -> Vec<Option<(usize, u8)>> {
        let mut state = [0; SEARCH_GPUS];
        let mut out = Vec::new();
        for step in 0..self.arrivals.len() {
            Self::settle(step, &mut state);
            let target = self.best(step, state).unwrap_or(0);
            let options = self.options(step, &state);
            let chosen = options.into_iter().find(|&o| {
                let next = self.after(step, &state, o);
                1 + self.best(step + 1, next).unwrap_or(0) == target
            });
            if let Some(o) = chosen {
                state = self.after(step, &state, o);
            }
            out.push(chosen);
        }
        out
    }
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

/// Streams and arrivals per stream of the 2-GPU comparison.
const STREAMS: u64 = 60;
const ARRIVALS: usize = 20;

/// Print a stream where ours places fewer than the online optimum, side by side.
fn show_loss(arrivals: &[Arrival], ours: &[Option<(usize, u8)>], best: &[Option<(usize, u8)>]) {
    let at = |c: Option<(usize, u8)>| match c {
        Some((g, s)) => format!("GPU {g} @ {s}"),
        None => "not placed".to_owned(),
    };
    println!("  step  profile      leaves  ours          optimum");
    for (step, a) in arrivals.iter().enumerate() {
        let mark = if ours[step].is_none() && best[step].is_some() { "  <-" } else { "" };
        println!(
            "  {step:>4}  {:<11}  {:>6}  {:<12}  {}{mark}",
            Profile { model: MODEL, shape: a.shape }.name(),
            step + a.stay,
            at(ours[step]),
            at(best[step])
        );
    }
}

fn main() {
    watchdog(Duration::from_secs(300), "placement benchmark");
    let mut table = Table::default();

    section("2 GPUs: ours against the best placement policy in hindsight");
    table.header(&format!(
        "Placement on {SEARCH_GPUS} H200 ({STREAMS} seeded streams of {ARRIVALS} arrivals, stays of 2–10 steps)"
    ));
    let (mut ours_total, mut ff_total, mut opt_total, mut clair_total) = (0, 0, 0, 0);
    let (mut equal, mut ff_equal, mut seeds, mut shown) = (0, 0, 0, 0);
    let searched = Instant::now();
    for seed in 0..STREAMS {
        let arrivals = stream(1000 + seed, ARRIVALS, (2, 10));
        let mut online = Search::new(&arrivals, Rules::Online, 2_000_000);
        let mut clairvoyant = Search::new(&arrivals, Rules::MayReject, 2_000_000);
        let (Some(opt), Some(clair)) =
            (online.best(0, [0; SEARCH_GPUS]), clairvoyant.best(0, [0; SEARCH_GPUS]))
        else {
            println!("seed {seed}: search over budget, skipped");
            continue;
        };
        let ours = simulate(SEARCH_GPUS, &arrivals, Policy::Ours);
        let ff = simulate(SEARCH_GPUS, &arrivals, Policy::FirstFit).placed;
        // Both policies follow the online rules, so neither can beat their optimum.
        assert!(ours.placed <= opt && ff <= opt && opt <= clair, "seed {seed}: search is wrong");
        seeds += 1;
        ours_total += ours.placed;
        ff_total += ff;
        opt_total += opt;
        clair_total += clair;
        equal += usize::from(ours.placed == opt);
        ff_equal += usize::from(ff == opt);
        if ours.placed < opt {
            println!(
                "seed {seed}: ours {}, first fit {ff}, online optimum {opt}, clairvoyant {clair}",
                ours.placed
            );
            if shown < 2 {
                shown += 1;
                show_loss(&arrivals, &ours.trace, &online.path());
            }
        }
    }
    println!(
        "{seeds} streams in {:.1} s: ours {ours_total}, first fit {ff_total}, online optimum \
         {opt_total}, clairvoyant {clair_total}; ours optimal on {equal}, first fit on {ff_equal}",
        searched.elapsed().as_secs_f64()
    );
    table.row(
        "requests placed, ours vs online optimum",
        format!("{ours_total}"),
        format!("{opt_total} (online optimum)"),
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
        "requests placed, first fit vs online optimum",
        format!("{ff_total} ({ff_equal} optimal)"),
        format!("{opt_total} (online optimum)"),
        ratio(ff_total as f64, opt_total as f64),
        "(reference)".to_owned(),
    );
    table.row(
        "requests placed, ours vs clairvoyant",
        format!("{ours_total}"),
        format!("{clair_total} (may reject)"),
        ratio(ours_total as f64, clair_total as f64),
        "(information)".to_owned(),
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
