//! The simulator: SPEC parsing, deterministic identifiers, the real placement rules on create,
//! destroy refusing busy instances, processes, serde, and a property test over create/destroy.

use carrel_gpu::{GpuLayout, GpuModel, Placement, Profile, Shape};
use carrel_nvml::{
    BackendError, GpuBackend, GpuInfo, MigInstance, ModelName, Process, SimSpec, Simulator,
    SpecError,
};
use proptest::prelude::*;

fn sim(spec: &str) -> Simulator {
    match Simulator::from_spec(spec, "node-a") {
        Ok(s) => s,
        Err(e) => panic!("{spec}: {e}"),
    }
}

fn at(shape: Shape, start: u8) -> Placement {
    Placement { start, size: shape.memory_slots() }
}

#[test]
fn parses_good_specs() {
    let s: SimSpec = "h200x8".parse().expect("h200x8");
    assert_eq!((s.model, s.count, s.mig.len()), (GpuModel::H200_141GB, 8, 0));
    let s: SimSpec = "a100-80gbx4:mig=1g.10gb*7".parse().expect("a100");
    assert_eq!((s.model, s.count), (GpuModel::A100_80GB, 4));
    assert_eq!(s.mig.get("1g.10gb"), Some(&7));
    let s: SimSpec = "h100-80gbx2:mig=3g.40gb*2,1g.10gb*1".parse().expect("h100");
    assert_eq!(s.mig.get("3g.40gb"), Some(&2));
    assert_eq!(s.mig.get("1g.10gb"), Some(&1));
    assert_eq!(s.to_string(), "h100-80gbx2:mig=1g.10gb*1,3g.40gb*2");
    // Aliases of profile names are canonicalised; repeats add up.
    let s: SimSpec = "h200x1:mig=mig-1g.18gb*1,1g.18gb*2".parse().expect("aliases");
    assert_eq!(s.mig.get("1g.18gb"), Some(&3));
    let s: SimSpec = "b200x1:mig=1g.23gb+me*1".parse().expect("+me");
    assert_eq!(s.mig.get("1g.23gb+me"), Some(&1));
}

#[test]
fn refuses_bad_specs_with_the_syntax() {
    for (spec, needle) in [
        ("", "no 'x'"),
        ("h200", "no 'x'"),
        ("h300x8", "unknown model \"h300\""),
        ("h200xeight", "not a whole number"),
        ("h200x0", "COUNT must be 1 to 64"),
        ("h200x65", "COUNT must be 1 to 64"),
        ("h200x1:1g.18gb*1", "must start with 'mig='"),
        ("h200x1:mig=1g.18gb", "is not PROFILE*N"),
        ("h200x1:mig=1g.18gb*x", "not a whole number"),
        ("h200x1:mig=1g.18gb*0", "at least 1"),
        ("h200x1:mig=1g.10gb*1", "h200 has no MIG profile \"1g.10gb\"; it has 1g.18gb"),
    ] {
        let err = spec.parse::<SimSpec>().expect_err(spec);
        let text = err.to_string();
        assert!(matches!(err, SpecError::Syntax { .. }), "{spec}: {text}");
        assert!(text.contains(needle), "{spec}: {text}");
        assert!(text.contains("MODELxCOUNT[:mig=PROFILE*N"), "{spec}: {text}");
    }
}

#[test]
fn refuses_layouts_that_do_not_fit() {
    for (spec, needle) in [
        ("h200x1:mig=1g.18gb*8", "at most 7"),
        ("h200x1:mig=1g.18gb+me*1,1g.18gb*7", "does not fit"),
        ("a100-40gbx1:mig=4g.20gb*1,4g.20gb*1", "at most 1"),
        ("h100-80gbx1:mig=7g.80gb*1,1g.10gb*1", "does not fit"),
    ] {
        let err = Simulator::from_spec(spec, "n").expect_err(spec);
        assert!(matches!(err, SpecError::Layout { .. }), "{spec}: {err}");
        assert!(err.to_string().contains(needle), "{spec}: {err}");
    }
}

#[test]
fn initial_layout_is_placed_as_planned() {
    // The brief's example: 3+3+1 compute slices, but 4+4+1 memory slots, so it is refused.
    let err =
        Simulator::from_spec("h100-80gbx2:mig=3g.40gb*2,1g.10gb*1", "n").expect_err("9 slots");
    assert!(err.to_string().contains("needs 9 memory slots; the GPU has 8"), "{err}");
    let s = sim("h100-80gbx2:mig=4g.40gb*1,3g.40gb*1");
    let gpus = s.gpus().expect("gpus");
    assert_eq!(gpus.len(), 2);
    for g in &gpus {
        assert!(g.mig_enabled);
        assert_eq!(g.model, ModelName::Known(GpuModel::H100_80GB));
        let inst = s.instances(g.index).expect("instances");
        let placed: Vec<(&str, u8, u8)> = inst
            .iter()
            .map(|i| (i.profile.as_str(), i.placement.start, i.placement.size))
            .collect();
        assert_eq!(placed, [("4g.40gb", 0, 4), ("3g.40gb", 4, 4)]);
        assert!(inst.iter().all(|i| i.gpu_index == g.index && i.compute_instance_id == Some(0)));
    }
    let s = sim("a100-80gbx4:mig=1g.10gb*7");
    for g in 0..4 {
        let starts: Vec<u8> =
            s.instances(g).expect("i").iter().map(|i| i.placement.start).collect();
        assert_eq!(starts, [0, 1, 2, 3, 4, 5, 6]);
    }
}

fn is_uuid(s: &str, prefix: &str) -> bool {
    let Some(rest) = s.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let groups: Vec<&str> = rest.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit() && !c.is_uppercase()))
}

#[test]
fn identifiers_are_uuid_shaped_unique_and_deterministic() {
    let spec = "a100-80gbx4:mig=1g.10gb*7";
    let a = Simulator::from_spec(spec, "node-a").expect("a");
    let a2 = Simulator::from_spec(spec, "node-a").expect("a2");
    let b = Simulator::from_spec(spec, "node-b").expect("b");
    let ids = |s: &Simulator| -> Vec<String> {
        let mut v = Vec::new();
        for g in s.gpus().expect("gpus") {
            v.push(g.uuid.clone());
            v.extend(s.instances(g.index).expect("i").into_iter().filter_map(|i| i.uuid));
        }
        v
    };
    let (ia, ia2, ib) = (ids(&a), ids(&a2), ids(&b));
    assert_eq!(ia.len(), 4 + 28);
    assert_eq!(ia, ia2, "same spec and node: same identifiers");
    for id in &ia {
        assert!(is_uuid(id, "GPU") || is_uuid(id, "MIG"), "{id}");
    }
    let mut all: Vec<&String> = ia.iter().chain(ib.iter()).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 64, "identifiers differ across devices and nodes");
    // A re-created instance gets a new UUID, as on hardware; the same again after a restart.
    let run = || {
        let s = Simulator::from_spec("h200x1", "n").expect("s");
        let first = s.create_instance(0, Shape::G1, at(Shape::G1, 0)).expect("c1");
        s.destroy_instance(0, first.gpu_instance_id).expect("d");
        let second = s.create_instance(0, Shape::G1, at(Shape::G1, 0)).expect("c2");
        assert_ne!(first.uuid, second.uuid);
        (first.uuid, second.uuid)
    };
    assert_eq!(run(), run());
}

#[test]
fn valid_placements_are_created_on_every_model() {
    let valid = [
        (Shape::G1, 0),
        (Shape::G1, 6),
        (Shape::G1Me, 3),
        (Shape::G1DoubleMemory, 6),
        (Shape::G2, 4),
        (Shape::G3, 4),
        (Shape::G4, 0),
        (Shape::G7, 0),
    ];
    for model in GpuModel::ALL {
        for (shape, start) in valid {
            let s = sim(&format!("{}x1", model.slug()));
            let inst = s.create_instance(0, shape, at(shape, start)).expect("valid placement");
            assert_eq!(inst.profile, Profile { model, shape }.name());
            assert_eq!((inst.placement.start, inst.placement.size), (start, shape.memory_slots()));
            assert_eq!(s.instances(0).expect("i"), vec![inst]);
        }
    }
}

/// (instances already there, the create, words of the reason).
type Case = (&'static [(Shape, u8)], (Shape, Placement), &'static str);

#[test]
fn invalid_placements_are_refused_with_the_reason() {
    let cases: &[Case] = &[
        (&[], (Shape::G1, at(Shape::G1, 7)), "valid starts [0, 1, 2, 3, 4, 5, 6]"),
        (&[], (Shape::G2, at(Shape::G2, 1)), "valid starts [0, 2, 4]"),
        (&[], (Shape::G2, at(Shape::G2, 6)), "valid starts [0, 2, 4]"),
        (&[], (Shape::G3, at(Shape::G3, 2)), "valid starts [0, 4]"),
        (&[], (Shape::G4, at(Shape::G4, 4)), "valid starts [0]"),
        (&[], (Shape::G7, at(Shape::G7, 1)), "valid starts [0]"),
        (&[], (Shape::G1DoubleMemory, at(Shape::G1DoubleMemory, 1)), "valid starts [0, 2, 4, 6]"),
        (&[], (Shape::G3, Placement { start: 0, size: 2 }), "takes 4 memory slots, not 2"),
        (&[(Shape::G4, 0)], (Shape::G2, at(Shape::G2, 2)), "overlaps"),
        (&[(Shape::G1, 5)], (Shape::G3, at(Shape::G3, 4)), "overlaps"),
        (&[(Shape::G7, 0)], (Shape::G1, at(Shape::G1, 6)), "overlaps"),
        (&[(Shape::G1Me, 0)], (Shape::G1Me, at(Shape::G1Me, 1)), "media engine"),
        (&[(Shape::G4, 0)], (Shape::G4, at(Shape::G4, 0)), "overlaps"),
    ];
    for model in GpuModel::ALL {
        for (existing, (shape, placement), needle) in cases {
            let s = sim(&format!("{}x1", model.slug()));
            for (sh, st) in *existing {
                s.create_instance(0, *sh, at(*sh, *st)).expect("setup");
            }
            let before = s.instances(0).expect("i");
            let err = s.create_instance(0, *shape, *placement).expect_err("invalid");
            assert!(
                matches!(&err, BackendError::InvalidPlacement { index: 0, reason } if reason.contains(needle)),
                "{model} {shape:?} {placement:?}: {err}"
            );
            assert_eq!(s.instances(0).expect("i"), before, "a refused create changes nothing");
        }
    }
    // Unknown GPU, MIG disabled.
    let s = sim("h200x1");
    assert_eq!(
        s.create_instance(3, Shape::G1, at(Shape::G1, 0)),
        Err(BackendError::GpuNotFound { index: 3 })
    );
    s.set_mig_mode(0, false).expect("disable");
    assert!(!s.mig_mode(0).expect("mode").current);
    assert_eq!(
        s.create_instance(0, Shape::G1, at(Shape::G1, 0)),
        Err(BackendError::MigDisabled { index: 0 })
    );
    assert!(s.utilization(0).expect("u").is_some(), "utilisation outside MIG mode");
    s.set_mig_mode(0, true).expect("enable");
    assert_eq!(s.utilization(0), Ok(None), "no utilisation in MIG mode");
    s.create_instance(0, Shape::G1, at(Shape::G1, 0)).expect("create");
    assert!(matches!(s.set_mig_mode(0, false), Err(BackendError::InUse { .. })));
}

#[test]
fn processes_block_destroy() {
    let s = sim("h200x2:mig=3g.71gb*2");
    let gpu = s.gpus().expect("g").remove(1);
    let inst = s.instances(1).expect("i").remove(0);
    let mig = inst.uuid.clone().expect("uuid");
    s.add_process(&mig, 4242, Some(1 << 30)).expect("add");
    s.add_process(&gpu.uuid, 7, None).expect("add to GPU");
    assert_eq!(
        s.add_process("MIG-nope", 1, None),
        Err(BackendError::DeviceNotFound { uuid: "MIG-nope".to_owned() })
    );
    assert_eq!(
        s.processes(&mig).expect("p"),
        vec![Process { pid: 4242, used_memory_bytes: Some(1 << 30), device: mig.clone() }]
    );
    let on_gpu: Vec<u32> = s.processes(&gpu.uuid).expect("p").iter().map(|p| p.pid).collect();
    assert_eq!(on_gpu, [7, 4242], "the GPU lists its instances' processes too");
    let err = s.destroy_instance(1, inst.gpu_instance_id).expect_err("busy");
    assert!(
        matches!(&err, BackendError::InUse { device, reason } if *device == mig && reason.contains("4242")),
        "{err}"
    );
    assert!(s.remove_process(&mig, 4242));
    assert!(!s.remove_process(&mig, 4242));
    s.destroy_instance(1, inst.gpu_instance_id).expect("idle now");
    assert_eq!(s.instances(1).expect("i").len(), 1);
    assert_eq!(
        s.destroy_instance(1, inst.gpu_instance_id),
        Err(BackendError::InstanceNotFound { index: 1, gpu_instance_id: inst.gpu_instance_id })
    );
    assert_eq!(
        s.processes(&mig),
        Err(BackendError::DeviceNotFound { uuid: mig.clone() }),
        "a destroyed instance is gone"
    );
}

#[test]
fn serde_round_trip() {
    let s = sim("h100-94gbx1:mig=1g.12gb+me*1,2g.24gb*1");
    let gpus = s.gpus().expect("g");
    let json = serde_json::to_string(&gpus).expect("ser");
    assert!(json.contains("\"model\":\"h100-94gb\""), "{json}");
    let back: Vec<GpuInfo> = serde_json::from_str(&json).expect("de");
    assert_eq!(back, gpus);
    let inst = s.instances(0).expect("i");
    let json = serde_json::to_string(&inst).expect("ser");
    let back: Vec<MigInstance> = serde_json::from_str(&json).expect("de");
    assert_eq!(back, inst);
    let other: ModelName = serde_json::from_str("\"Tesla T4\"").expect("other");
    assert_eq!(other, ModelName::Other("Tesla T4".to_owned()));
    assert_eq!(serde_json::to_string(&other).expect("ser"), "\"Tesla T4\"");
}

#[test]
fn recognises_driver_names() {
    use carrel_nvml::recognise_model;
    const GIB: u64 = 1 << 30;
    for (name, mem, model) in [
        ("NVIDIA A100-SXM4-40GB", 40 * GIB, Some(GpuModel::A100_40GB)),
        ("NVIDIA A100-SXM4-80GB", 80 * GIB, Some(GpuModel::A100_80GB)),
        ("NVIDIA A100 80GB PCIe", 80 * GIB, Some(GpuModel::A100_80GB)),
        ("NVIDIA H100 80GB HBM3", 80 * GIB - GIB / 2, Some(GpuModel::H100_80GB)),
        ("NVIDIA H100 NVL", 94 * GIB, Some(GpuModel::H100_94GB)),
        ("NVIDIA H200", 140 * GIB, Some(GpuModel::H200_141GB)),
        ("NVIDIA B200", 179 * GIB, Some(GpuModel::B200_180GB)),
        ("Tesla T4", 15 * GIB, None),
    ] {
        assert_eq!(recognise_model(name, mem), model, "{name}");
    }
    // The product name a simulated container's `nvidia-smi -L` shows is one the driver gives and
    // these names are recognised from.
    for (model, mem) in [
        (GpuModel::A100_40GB, 40 * GIB),
        (GpuModel::A100_80GB, 80 * GIB),
        (GpuModel::H100_80GB, 80 * GIB - GIB / 2),
        (GpuModel::H100_94GB, 94 * GIB),
        (GpuModel::H200_141GB, 140 * GIB),
        (GpuModel::B200_180GB, 179 * GIB),
    ] {
        assert_eq!(recognise_model(model.product_name(), mem), Some(model), "{model:?}");
    }
}

#[derive(Clone, Debug)]
enum Op {
    Create(Shape, u8),
    Destroy(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..Shape::ALL.len(), 0u8..8).prop_map(|(s, st)| Op::Create(Shape::ALL[s], st)),
        (0usize..8).prop_map(Op::Destroy),
    ]
}

proptest! {
    #[test]
    fn any_creates_and_destroys_keep_a_valid_layout(
        model in 0..GpuModel::ALL.len(),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let model = GpuModel::ALL[model];
        let s = Simulator::from_spec(&format!("{}x1", model.slug()), "prop").expect("sim");
        for op in ops {
            let before = s.instances(0).expect("i");
            let mut layout = GpuLayout::new();
            for i in &before {
                let p = i.profile_on(model).expect("profile");
                layout.add(p, i.placement.start).expect("valid before");
            }
            match op {
                Op::Create(shape, start) => {
                    let result = s.create_instance(0, shape, at(shape, start));
                    prop_assert_eq!(result.is_ok(), layout.can_add(shape, start), "{:?}", result);
                }
                Op::Destroy(k) => {
                    if let Some(i) = before.get(k) {
                        s.destroy_instance(0, i.gpu_instance_id).expect("destroy");
                    }
                }
            }
            let after = s.instances(0).expect("i");
            let mut check = GpuLayout::new();
            for i in &after {
                let p = i.profile_on(model).expect("profile");
                prop_assert_eq!(i.placement.size, p.shape.memory_slots());
                prop_assert!(check.add(p, i.placement.start).is_ok(), "{:?}", after);
            }
            let mut ids: Vec<u32> = after.iter().map(|i| i.gpu_instance_id).collect();
            ids.dedup();
            prop_assert_eq!(ids.len(), after.len());
            let mut uuids: Vec<String> = after.iter().filter_map(|i| i.uuid.clone()).collect();
            uuids.sort();
            uuids.dedup();
            prop_assert_eq!(uuids.len(), after.len());
        }
    }
}
