//! The allocator: unit tests and property tests.

use std::collections::{BTreeMap, BTreeSet};

use carrel_gpu::{
    allocate, AllocError, Allocation, DeviceSource, Fleet, Gpu, GpuModel, Holder, Instance, Mode,
    Node, Placement, Quotas, Request, Shape, Usage,
};
use proptest::prelude::*;

fn gpu(uuid: &str, model: GpuModel, instances: Vec<Instance>) -> Gpu {
    Gpu { uuid: uuid.to_owned(), index: 0, model, mig_enabled: true, instances }
}

fn inst(uuid: &str, shape: Shape, start: u8, tenant: Option<&str>) -> Instance {
    Instance {
        uuid: uuid.to_owned(),
        shape,
        placement: Placement { start, size: shape.memory_slots() },
        holder: tenant.map(|t| holder(t, uuid)),
    }
}

fn holder(tenant: &str, pod: &str) -> Holder {
    Holder { tenant: tenant.to_owned(), namespace: "default".to_owned(), pod: pod.to_owned() }
}

fn request(tenant: &str, profile: &str, count: u32) -> Request {
    Request { tenant: tenant.to_owned(), profile: profile.to_owned(), count, nodes: None }
}

fn quotas(tenant: &str, pairs: &[(&str, u32)]) -> Quotas {
    let mut q = Quotas::new();
    for (p, c) in pairs {
        q.set(tenant, p, *c).expect("known profile");
    }
    q
}

fn fleet(nodes: Vec<(&str, Vec<Gpu>)>) -> Fleet {
    Fleet { nodes: nodes.into_iter().map(|(n, gpus)| Node { name: n.to_owned(), gpus }).collect() }
}

#[test]
fn fixed_takes_a_free_instance_on_the_busier_gpu() {
    let h = Shape::G1;
    let f = fleet(vec![(
        "n1",
        vec![
            gpu("g0", GpuModel::H200_141GB, vec![inst("a", h, 0, None)]),
            gpu(
                "g1",
                GpuModel::H200_141GB,
                vec![inst("b", h, 6, None), inst("c", Shape::G3, 0, Some("t2"))],
            ),
        ],
    )]);
    let q = quotas("t", &[("1g.18gb", 1)]);
    let a = allocate(&f, &q, &request("t", "mig-1g.18gb", 1), Mode::Fixed).expect("placed");
    assert_eq!(a.devices.len(), 1);
    assert_eq!(a.devices[0].gpu_uuid, "g1");
    assert_eq!(a.devices[0].source, DeviceSource::Existing { instance_uuid: "b".to_owned() });
    assert!(a.removals.is_empty());
}

#[test]
fn over_quota_names_profile_quota_and_usage() {
    let f = fleet(vec![(
        "n1",
        vec![gpu(
            "g0",
            GpuModel::H200_141GB,
            vec![inst("a", Shape::G1, 0, Some("t")), inst("b", Shape::G1, 1, None)],
        )],
    )]);
    let q = quotas("t", &[("1g.18gb", 1)]);
    let e = allocate(&f, &q, &request("t", "1g.18gb", 1), Mode::Fixed).expect_err("over");
    assert_eq!(
        e,
        AllocError::OverQuota {
            tenant: "t".to_owned(),
            profile: "1g.18gb".to_owned(),
            quota: 1,
            usage: 1,
            requested: 1
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("1g.18gb") && msg.contains("quota 1") && msg.contains("in use 1"),
        "{msg}"
    );
    // No quota at all.
    let e = allocate(&f, &Quotas::new(), &request("u", "1g.18gb", 1), Mode::Fixed).expect_err("0");
    assert!(matches!(e, AllocError::OverQuota { quota: 0, .. }));
}

#[test]
fn unknown_profile_lists_known_ones() {
    let e = allocate(&Fleet::default(), &Quotas::new(), &request("t", "5g.1gb", 1), Mode::Fixed)
        .expect_err("unknown");
    match e {
        AllocError::UnknownProfile { known, .. } => assert!(known.contains(&"1g.18gb")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_free_instance_and_fleet_cannot_hold() {
    let f = fleet(vec![(
        "n1",
        vec![gpu("g0", GpuModel::H200_141GB, vec![inst("a", Shape::G4, 0, Some("x"))])],
    )]);
    let q = quotas("t", &[("3g.71gb", 4), ("4g.71gb", 4)]);
    let e = allocate(&f, &q, &request("t", "3g.71gb", 1), Mode::Fixed).expect_err("none free");
    assert!(matches!(e, AllocError::NoFreeInstance { free: 0, .. }), "{e:?}");
    // Dynamic: the 3g fits at 4.
    let a = allocate(&f, &q, &request("t", "3g.71gb", 1), Mode::Dynamic).expect("fits");
    assert_eq!(a.devices[0].placement, Placement { start: 4, size: 4 });
    assert_eq!(a.devices[0].source, DeviceSource::Create);
    // Two 3g: only one fits.
    let e = allocate(&f, &q, &request("t", "3g.71gb", 2), Mode::Dynamic).expect_err("one only");
    assert!(matches!(e, AllocError::FleetCannotHold { placeable: 1, .. }), "{e:?}");
    // A second 4g: max one per GPU.
    let e = allocate(&f, &q, &request("t", "4g.71gb", 1), Mode::Dynamic).expect_err("4g");
    assert!(matches!(e, AllocError::FleetCannotHold { placeable: 0, .. }), "{e:?}");
}

#[test]
fn dynamic_removes_free_instances_never_claimed_ones() {
    let f = fleet(vec![(
        "n1",
        vec![gpu(
            "g0",
            GpuModel::H100_80GB,
            vec![
                inst("free1", Shape::G1, 4, None),
                inst("free2", Shape::G1, 5, None),
                inst("held", Shape::G2, 0, Some("x")),
            ],
        )],
    )]);
    let q = quotas("t", &[("3g.40gb", 1), ("4g.40gb", 1)]);
    let a = allocate(&f, &q, &request("t", "3g.40gb", 1), Mode::Dynamic).expect("fits");
    assert_eq!(a.devices[0].placement.start, 4);
    let removed: BTreeSet<&str> = a.removals.iter().map(|r| r.instance_uuid.as_str()).collect();
    assert_eq!(removed, BTreeSet::from(["free1", "free2"]));
    // The 4g would need the claimed 2g's slots.
    assert!(allocate(&f, &q, &request("t", "4g.40gb", 1), Mode::Dynamic).is_err());
}

#[test]
fn dynamic_keeps_large_regions_whole() {
    // An empty H200 and one with a 3g held at 0: a 1g goes into the used half.
    let f = fleet(vec![(
        "n1",
        vec![
            gpu("empty", GpuModel::H200_141GB, vec![]),
            gpu("used", GpuModel::H200_141GB, vec![inst("h", Shape::G3, 0, Some("x"))]),
        ],
    )]);
    let q = quotas("t", &[("1g.18gb", 7), ("2g.35gb", 3)]);
    let a = allocate(&f, &q, &request("t", "1g.18gb", 1), Mode::Dynamic).expect("fits");
    assert_eq!(a.devices[0].gpu_uuid, "used");
    // On an empty GPU a 1g goes to slot 6, leaving a 4g/3g half and three 2g starts.
    let f = fleet(vec![("n1", vec![gpu("empty", GpuModel::H200_141GB, vec![])])]);
    let a = allocate(&f, &q, &request("t", "1g.18gb", 1), Mode::Dynamic).expect("fits");
    assert_eq!(a.devices[0].placement.start, 6);
    // Three 2g pack into one GPU.
    let a = allocate(&f, &q, &request("t", "2g.35gb", 3), Mode::Dynamic).expect("fits");
    let starts: BTreeSet<u8> = a.devices.iter().map(|d| d.placement.start).collect();
    assert_eq!(starts, BTreeSet::from([0, 2, 4]));
}

#[test]
fn node_constraint_and_mig_off_and_models() {
    let f = fleet(vec![
        ("a", vec![gpu("ga", GpuModel::H200_141GB, vec![])]),
        (
            "b",
            vec![
                Gpu { mig_enabled: false, ..gpu("gb0", GpuModel::H200_141GB, vec![]) },
                gpu("gb1", GpuModel::H100_80GB, vec![]),
            ],
        ),
    ]);
    let q = quotas("t", &[("1g.18gb", 5)]);
    let mut r = request("t", "1g.18gb", 1);
    r.nodes = Some(BTreeSet::from(["b".to_owned()]));
    let e = allocate(&f, &q, &r, Mode::Dynamic).expect_err("only H100 or MIG off on b");
    assert!(e.to_string().contains("no MIG-enabled GPU"), "{e}");
    r.nodes = None;
    let a = allocate(&f, &q, &r, Mode::Dynamic).expect("on a");
    assert_eq!(a.devices[0].node, "a");
}

#[test]
fn media_engine_rule() {
    let f = fleet(vec![(
        "n",
        vec![
            gpu("g0", GpuModel::B200_180GB, vec![inst("me", Shape::G1Me, 0, Some("x"))]),
            gpu("g1", GpuModel::B200_180GB, vec![inst("me2", Shape::G1Me, 3, None)]),
        ],
    )]);
    let q = quotas("t", &[("1g.23gb+me", 2)]);
    // g0's engine is held; g1's is free. Fixed mode reuses its instance; dynamic mode moves it to
    // slot 6 (lower loss), removing the free one first. A second +me is impossible.
    let r = request("t", "nvidia.com/mig-1g.23gb.me", 1);
    let a = allocate(&f, &q, &r, Mode::Fixed).expect("reuse");
    assert_eq!(a.devices[0].gpu_uuid, "g1");
    assert!(matches!(a.devices[0].source, DeviceSource::Existing { .. }));
    let a = allocate(&f, &q, &r, Mode::Dynamic).expect("move");
    assert_eq!(a.devices[0].gpu_uuid, "g1");
    assert_eq!(a.devices[0].placement.start, 6);
    assert_eq!(a.removals.len(), 1);
    assert_eq!(a.removals[0].instance_uuid, "me2");
    assert!(allocate(&f, &q, &request("t", "1g.23gb+me", 2), Mode::Dynamic).is_err());
}

#[test]
fn usage_is_rebuilt_from_claims() {
    let f = fleet(vec![(
        "n",
        vec![
            gpu("g0", GpuModel::H200_141GB, vec![inst("a", Shape::G1, 0, Some("t"))]),
            gpu("g1", GpuModel::H100_80GB, vec![inst("b", Shape::G1, 0, Some("t"))]),
        ],
    )]);
    let u = Usage::from_fleet(&f);
    assert_eq!(u.get("t", "1g.18gb"), 1);
    assert_eq!(u.get("t", "1g.10gb"), 1);
    assert_eq!(u.get("u", "1g.10gb"), 0);
}

#[test]
fn invalid_inventory_is_an_error() {
    let f = fleet(vec![(
        "n",
        vec![gpu(
            "g0",
            GpuModel::H200_141GB,
            vec![inst("a", Shape::G2, 0, None), inst("b", Shape::G1, 1, None)],
        )],
    )]);
    let q = quotas("t", &[("1g.18gb", 1)]);
    assert!(f.validate().is_err());
    let e = allocate(&f, &q, &request("t", "1g.18gb", 1), Mode::Dynamic).expect_err("overlap");
    assert!(matches!(e, AllocError::Inventory(_)), "{e:?}");
}

// ---- properties ----

const MODELS: [GpuModel; 3] = [GpuModel::H200_141GB, GpuModel::A100_40GB, GpuModel::B200_180GB];
const TENANTS: [&str; 3] = ["t0", "t1", "t2"];

/// A random valid fleet: each GPU gets random instances placed where they fit, each held by a
/// random tenant or free.
fn arb_fleet() -> impl Strategy<Value = Fleet> {
    let gpu = (
        0..MODELS.len(),
        any::<bool>(),
        prop::collection::vec((0..7usize, 0..7u8, 0..4usize), 0..8),
    );
    prop::collection::vec(prop::collection::vec(gpu, 1..4), 1..4).prop_map(|nodes| {
        let mut next = 0;
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(ni, gpus)| Node {
                name: format!("node-{ni}"),
                gpus: gpus
                    .into_iter()
                    .enumerate()
                    .map(|(gi, (m, mig, insts))| {
                        let model = MODELS[m];
                        let mut layout = carrel_gpu::GpuLayout::new();
                        let mut instances = Vec::new();
                        if mig {
                            for (s, start_i, t) in insts {
                                let shape = Shape::ALL[s];
                                let starts = shape.starts();
                                let start = starts[usize::from(start_i) % starts.len()];
                                if layout.can_add(shape, start) {
                                    let profile = carrel_gpu::Profile { model, shape };
                                    layout.add(profile, start).expect("checked");
                                    next += 1;
                                    instances.push(inst(
                                        &format!("MIG-{next}"),
                                        shape,
                                        start,
                                        TENANTS.get(t).copied(),
                                    ));
                                }
                            }
                        }
                        Gpu {
                            uuid: format!("GPU-{ni}-{gi}"),
                            index: gi as u32,
                            model,
                            mig_enabled: mig,
                            instances,
                        }
                    })
                    .collect(),
            })
            .collect();
        Fleet { nodes }
    })
}

fn arb_request() -> impl Strategy<Value = (Request, bool)> {
    (0..TENANTS.len(), 0..7usize, 0..MODELS.len(), 1..4u32, any::<bool>(), any::<bool>()).prop_map(
        |(t, s, m, count, constrain, dynamic)| {
            let name =
                carrel_gpu::Profile { model: MODELS[m], shape: Shape::ALL[s] }.name().to_owned();
            let mut r = request(TENANTS[t], &name, count);
            if constrain {
                r.nodes = Some(BTreeSet::from(["node-0".to_owned(), "node-2".to_owned()]));
            }
            (r, dynamic)
        },
    )
}

fn arb_quotas() -> impl Strategy<Value = BTreeMap<(usize, usize, usize), u32>> {
    prop::collection::btree_map((0..3usize, 0..7usize, 0..3usize), 0..6u32, 0..20)
}

fn build_quotas(q: &BTreeMap<(usize, usize, usize), u32>) -> Quotas {
    let mut quotas = Quotas::new();
    for (&(t, s, m), &c) in q {
        let name = carrel_gpu::Profile { model: MODELS[m], shape: Shape::ALL[s] }.name();
        quotas.set(TENANTS[t], name, c).expect("known");
    }
    quotas
}

fn check(before: &Fleet, quotas: &Quotas, r: &Request, mode: Mode, a: &Allocation) {
    let name = carrel_gpu::canonical_profile_name(&r.profile).expect("known");
    assert_eq!(a.devices.len() as u32, r.count);
    if mode == Mode::Fixed {
        assert!(a.removals.is_empty());
        assert!(a.devices.iter().all(|d| matches!(d.source, DeviceSource::Existing { .. })));
    }
    // Removals and reused devices are free instances of the fleet; never claimed.
    let all: BTreeMap<&str, (&str, &Gpu, &Instance)> = before
        .gpus()
        .flat_map(|(n, g)| g.instances.iter().map(move |i| (i.uuid.as_str(), (n, g, i))))
        .collect();
    for rm in &a.removals {
        let (_, _, i) = all[rm.instance_uuid.as_str()];
        assert!(i.holder.is_none(), "removed a claimed instance");
    }
    let mut used = BTreeSet::new();
    for d in &a.devices {
        assert_eq!(d.profile.name(), name);
        if let Some(nodes) = &r.nodes {
            assert!(nodes.contains(&d.node));
        }
        if let DeviceSource::Existing { instance_uuid } = &d.source {
            let (_, _, i) = all[instance_uuid.as_str()];
            assert!(i.holder.is_none(), "gave a claimed instance");
            assert!(used.insert(instance_uuid.clone()), "one device twice");
        }
    }
    // Applied, the fleet stays valid (no overlap, every plan a valid placement), each device has
    // one holder, and quotas hold.
    let mut after = before.clone();
    let mut n = 0;
    after.apply(a, &holder(&r.tenant, "p"), || {
        n += 1;
        format!("NEW-{n}")
    });
    after.validate().expect("valid after apply");
    let u_before = Usage::from_fleet(before).get(&r.tenant, &name);
    let u_after = Usage::from_fleet(&after).get(&r.tenant, &name);
    assert_eq!(u_after, u_before + r.count);
    assert!(u_after <= quotas.get(&r.tenant, &name));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn allocations_are_valid(fleet in arb_fleet(), (r, dynamic) in arb_request(), q in arb_quotas()) {
        let quotas = build_quotas(&q);
        let mode = if dynamic { Mode::Dynamic } else { Mode::Fixed };
        let first = allocate(&fleet, &quotas, &r, mode);
        // Deterministic.
        prop_assert_eq!(&first, &allocate(&fleet, &quotas, &r, mode));
        match &first {
            Ok(a) => check(&fleet, &quotas, &r, mode, a),
            Err(AllocError::OverQuota { quota, usage, requested, .. }) => {
                prop_assert!(usage + requested > *quota);
            }
            Err(AllocError::NoFreeInstance { .. }) => prop_assert_eq!(mode, Mode::Fixed),
            Err(AllocError::FleetCannotHold { .. }) => prop_assert_eq!(mode, Mode::Dynamic),
            Err(e) => prop_assert!(false, "unexpected {e:?}"),
        }
        // Whatever fixed mode places, dynamic mode places too.
        if mode == Mode::Fixed && first.is_ok() {
            prop_assert!(allocate(&fleet, &quotas, &r, Mode::Dynamic).is_ok());
        }
    }

    /// A stream of requests and releases never breaks the invariants.
    #[test]
    fn streams_keep_invariants(
        fleet in arb_fleet(),
        steps in prop::collection::vec((arb_request(), any::<bool>()), 1..25),
        q in arb_quotas(),
    ) {
        let quotas = build_quotas(&q);
        let mut fleet = fleet;
        let mut n = 0;
        for (i, ((r, dynamic), release)) in steps.into_iter().enumerate() {
            let mode = if dynamic { Mode::Dynamic } else { Mode::Fixed };
            if let Ok(a) = allocate(&fleet, &quotas, &r, mode) {
                check(&fleet, &quotas, &r, mode, &a);
                fleet.apply(&a, &holder(&r.tenant, &format!("p{i}")), || { n += 1; format!("S-{n}") });
            }
            if release {
                fleet.release(&holder(&r.tenant, &format!("p{}", i / 2)));
            }
            fleet.validate().expect("valid");
        }
    }
}

#[test]
fn an_inventory_round_trips_through_json() {
    use carrel_gpu::catalogue::{GpuModel, Shape};
    use carrel_gpu::inventory::{Fleet, Gpu, Holder, Instance, Node};
    use carrel_gpu::layout::Placement;
    let fleet = Fleet {
        nodes: vec![Node {
            name: "gpu-1".into(),
            gpus: vec![Gpu {
                uuid: "GPU-1".into(),
                index: 0,
                model: GpuModel::H200_141GB,
                mig_enabled: true,
                instances: vec![Instance {
                    uuid: "MIG-1".into(),
                    shape: Shape::G3,
                    placement: Placement { start: 0, size: 4 },
                    holder: Some(Holder {
                        tenant: "a".into(),
                        namespace: "ml".into(),
                        pod: "p".into(),
                    }),
                }],
            }],
        }],
    };
    let json = serde_json::to_value(&fleet).unwrap();
    assert_eq!(json["nodes"][0]["gpus"][0]["model"], "h200");
    assert_eq!(json["nodes"][0]["gpus"][0]["migEnabled"], true);
    let back: Fleet = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, fleet);
    let mut bad = json;
    bad["nodes"][0]["gpus"][0]["model"] = "v100".into();
    let err = serde_json::from_value::<Fleet>(bad).unwrap_err().to_string();
    assert!(err.contains("\"v100\" is not a GPU model"), "{err}");
}
