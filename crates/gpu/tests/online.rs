//! What an online allocator can and cannot reach, on one H200 GPU with instances that stay.
//!
//! The placement benchmark compares `allocate` with the most a stream allows in hindsight (every
//! request that fits when it arrives is placed). These tests settle how far that comparison can
//! go: with two arrivals some policy always matches the hindsight optimum, and `allocate` does;
//! with three arrivals no policy that decides without seeing the future can, whatever it does.

use carrel_gpu::{
    allocate, Fleet, Gpu, GpuLayout, GpuModel, Holder, Instance, Mode, Node, Placement, Profile,
    Quotas, Request, Shape,
};

const MODEL: GpuModel = GpuModel::H200_141GB;

/// The layouts one more instance of `shape` can lead to.
fn moves(layout: GpuLayout, shape: Shape) -> Vec<GpuLayout> {
    let mut out = Vec::new();
    for &start in shape.starts() {
        if layout.can_add(shape, start) {
            let mut next = layout;
            next.add(Profile { model: MODEL, shape }, start).expect("can_add said so");
            if !out.contains(&next) {
                out.push(next);
            }
        }
    }
    out
}

/// The most of `rest` that can still be placed from `layout`, knowing all of it; a request that
/// fits must be placed.
fn hindsight(layout: GpuLayout, rest: &[Shape]) -> usize {
    let Some((&first, tail)) = rest.split_first() else { return 0 };
    let next = moves(layout, first);
    if next.is_empty() {
        return hindsight(layout, tail);
    }
    1 + next.into_iter().map(|l| hindsight(l, tail)).max().unwrap_or(0)
}

/// Whether some online policy (one that sees only the arrivals so far) places as many as
/// [`hindsight`] on every stream of `len` arrivals: a game in which the stream picks the next
/// arrival and the policy its placement.
fn online_can_match(layout: GpuLayout, stream: &mut Vec<Shape>, placed: usize, len: usize) -> bool {
    if stream.len() == len {
        return placed == hindsight(GpuLayout::new(), stream);
    }
    Shape::ALL.into_iter().all(|shape| {
        stream.push(shape);
        let next = moves(layout, shape);
        let ok = if next.is_empty() {
            online_can_match(layout, stream, placed, len)
        } else {
            next.into_iter().any(|l| online_can_match(l, stream, placed + 1, len))
        };
        stream.pop();
        ok
    })
}

#[test]
fn no_online_policy_matches_hindsight_on_three_arrivals() {
    assert!(online_can_match(GpuLayout::new(), &mut Vec::new(), 0, 1));
    assert!(online_can_match(GpuLayout::new(), &mut Vec::new(), 0, 2));
    assert!(!online_can_match(GpuLayout::new(), &mut Vec::new(), 0, 3));
}

/// The smallest witness, by hand: the first arrival is a `2g`. Placed at slot 0 or 2, it loses
/// `2g, 1g, 4g` (the optimum puts it at 4, the `1g` at 6, the `4g` at 0); placed at 4, it loses
/// `2g, 2g, 3g` (the optimum has both `2g` at 0 and 2 and the `3g` at 4).
#[test]
fn every_first_placement_of_a_2g_loses_one_of_two_streams() {
    let a = [Shape::G2, Shape::G1, Shape::G4];
    let b = [Shape::G2, Shape::G2, Shape::G3];
    assert_eq!(hindsight(GpuLayout::new(), &a), 3);
    assert_eq!(hindsight(GpuLayout::new(), &b), 3);
    for &start in Shape::G2.starts() {
        let mut first = GpuLayout::new();
        first.add(Profile { model: MODEL, shape: Shape::G2 }, start).expect("valid start");
        let best_a = 1 + hindsight(first, &a[1..]);
        let best_b = 1 + hindsight(first, &b[1..]);
        assert!(best_a < 3 || best_b < 3, "2g at {start} keeps both streams whole");
    }
}

fn fleet(instances: &[(Shape, u8)]) -> Fleet {
    let instances = instances
        .iter()
        .enumerate()
        .map(|(i, &(shape, start))| Instance {
            uuid: format!("MIG-{i}"),
            shape,
            placement: Placement { start, size: shape.memory_slots() },
            holder: Some(Holder {
                tenant: "t".into(),
                namespace: "default".into(),
                pod: format!("p{i}"),
            }),
        })
        .collect();
    Fleet {
        nodes: vec![Node {
            name: "n".into(),
            gpus: vec![Gpu {
                uuid: "GPU-0".into(),
                index: 0,
                model: MODEL,
                mig_enabled: true,
                instances,
            }],
        }],
    }
}

/// Where two arrivals are all there is, a policy can match the optimum; `allocate` does, on every
/// pair of shapes.
#[test]
fn allocate_matches_hindsight_on_every_two_arrival_stream() {
    let mut quotas = Quotas::new();
    for p in MODEL.profiles() {
        quotas.set("t", p.name(), 100).expect("known profile");
    }
    for a in Shape::ALL {
        for b in Shape::ALL {
            let mut held: Vec<(Shape, u8)> = Vec::new();
            for shape in [a, b] {
                let request = Request {
                    tenant: "t".into(),
                    profile: Profile { model: MODEL, shape }.name().into(),
                    count: 1,
                    nodes: None,
                };
                if let Ok(got) = allocate(&fleet(&held), &quotas, &request, Mode::Dynamic) {
                    held.push((shape, got.devices[0].placement.start));
                }
            }
            assert_eq!(held.len(), hindsight(GpuLayout::new(), &[a, b]), "{a:?} then {b:?}");
        }
    }
}
