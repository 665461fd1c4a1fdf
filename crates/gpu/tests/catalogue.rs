//! Table tests of the catalogue and layout planning against NVIDIA's published tables.

use std::collections::BTreeMap;

use carrel_gpu::{
    canonical_profile_name, plan_layout, resource_name, GpuLayout, GpuModel, LayoutError, Shape,
    COMPUTE_SLICES,
};

/// (model, [names by shape: 1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g]), from the MIG user
/// guide's "Supported MIG Profiles".
const NAMES: [(GpuModel, [&str; 7]); 6] = [
    (
        GpuModel::A100_40GB,
        ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    ),
    (
        GpuModel::A100_80GB,
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    ),
    (
        GpuModel::H100_80GB,
        ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    ),
    (
        GpuModel::H100_94GB,
        ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"],
    ),
    (
        GpuModel::H200_141GB,
        ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    ),
    (
        GpuModel::B200_180GB,
        ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
    ),
];

/// (shape, NVML id, compute slices, memory slots, placements {starts}:size, max instances, +me):
/// nvml.h and `nvidia-smi mig -lgip` / `-lgipp`, the same on every model above.
#[allow(clippy::type_complexity)]
const GEOMETRY: [(Shape, u32, u8, u8, &[u8], u8, bool); 7] = [
    (Shape::G1, 0, 1, 1, &[0, 1, 2, 3, 4, 5, 6], 7, false),
    (Shape::G1Me, 7, 1, 1, &[0, 1, 2, 3, 4, 5, 6], 1, true),
    (Shape::G1DoubleMemory, 9, 1, 2, &[0, 2, 4, 6], 4, false),
    (Shape::G2, 1, 2, 2, &[0, 2, 4], 3, false),
    (Shape::G3, 2, 3, 4, &[0, 4], 2, false),
    (Shape::G4, 3, 4, 4, &[0], 1, false),
    (Shape::G7, 4, 7, 8, &[0], 1, false),
];

#[test]
fn names_per_model() {
    for (model, names) in NAMES {
        let got: Vec<&str> = model.profiles().map(|p| p.name()).collect();
        assert_eq!(got, names, "{model}");
        for (shape, name) in Shape::ALL.iter().zip(names) {
            let p = model.profile(name).expect(name);
            assert_eq!(p.shape, *shape, "{model} {name}");
        }
    }
}

#[test]
fn geometry_table() {
    for (shape, id, compute, memory, starts, max, me) in GEOMETRY {
        assert_eq!(shape.nvml_id(), id, "{shape:?}");
        assert_eq!(Shape::from_nvml_id(id), Some(shape));
        assert_eq!(shape.compute_slices(), compute, "{shape:?}");
        assert_eq!(shape.memory_slots(), memory, "{shape:?}");
        assert_eq!(shape.starts(), starts, "{shape:?}");
        assert_eq!(shape.max_instances(), max, "{shape:?}");
        assert_eq!(shape.media_engine(), me, "{shape:?}");
    }
    assert_eq!(Shape::from_nvml_id(5), None, "8-slice profile is not on these models");
}

#[test]
fn max_count_is_reachable_and_the_limit() {
    for (model, names) in NAMES {
        for (shape, name) in Shape::ALL.iter().zip(names) {
            let max = u32::from(shape.max_instances());
            let ok = plan_layout(model, &BTreeMap::from([(name.to_owned(), max)]))
                .unwrap_or_else(|e| panic!("{model} {name}×{max}: {e}"));
            assert_eq!(ok.len() as u32, max);
            let over = plan_layout(model, &BTreeMap::from([(name.to_owned(), max + 1)]));
            assert!(over.is_err(), "{model} {name}×{}", max + 1);
        }
    }
}

#[test]
fn resource_names_and_aliases() {
    assert_eq!(resource_name("1g.18gb"), "nvidia.com/mig-1g.18gb");
    assert_eq!(resource_name("1g.18gb+me"), "nvidia.com/mig-1g.18gb.me");
    let p = GpuModel::H200_141GB.profile("1g.18gb+me").expect("+me");
    assert_eq!(p.resource_name(), "nvidia.com/mig-1g.18gb.me");
    for alias in ["1g.18gb+me", "mig-1g.18gb+me", "nvidia.com/mig-1g.18gb.me", "mig-1g.18gb.me"] {
        assert_eq!(canonical_profile_name(alias).as_deref(), Some("1g.18gb+me"), "{alias}");
    }
    assert_eq!(canonical_profile_name("nvidia.com/mig-3g.71gb").as_deref(), Some("3g.71gb"));
    assert_eq!(canonical_profile_name("5g.99gb"), None);
    // The same name, different shapes on different models.
    assert_eq!(
        GpuModel::A100_40GB.profile("1g.10gb").map(|p| p.shape),
        Some(Shape::G1DoubleMemory)
    );
    assert_eq!(GpuModel::H100_80GB.profile("1g.10gb").map(|p| p.shape), Some(Shape::G1));
    assert_eq!(GpuModel::H200_141GB.profile("1g.10gb"), None);
    assert_eq!(GpuModel::from_slug("h200"), Some(GpuModel::H200_141GB));
    assert_eq!(GpuModel::from_slug("A100-80GB"), Some(GpuModel::A100_80GB));
}

/// Every layout that keeps memory slots apart, the starts valid and at most one +me also fits
/// the 7 compute slices: the compute rule never binds before the memory rule.
#[test]
fn memory_rules_imply_compute_rule() {
    fn walk(layout: GpuLayout, from: usize, seen: &mut u32) {
        *seen += 1;
        assert!(layout.compute() <= COMPUTE_SLICES);
        let placements: Vec<(Shape, u8)> =
            Shape::ALL.iter().flat_map(|s| s.starts().iter().map(move |&st| (*s, st))).collect();
        for (i, &(shape, start)) in placements.iter().enumerate().skip(from) {
            let fits_memory = layout.occupied() & shape.mask_at(start) == 0
                && !(shape.media_engine() && layout.media_engine_used());
            if fits_memory {
                assert!(layout.can_add(shape, start), "{shape:?}@{start} on {layout:?}");
                let mut next = layout;
                let model = GpuModel::H200_141GB;
                next.add(carrel_gpu::Profile { model, shape }, start).expect("valid");
                walk(next, i, seen);
            }
        }
    }
    let mut seen = 0;
    walk(GpuLayout::new(), 0, &mut seen);
    assert!(seen > 100, "{seen} layouts");
}

fn layout(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
}

#[test]
fn plan_layout_examples() {
    let h200 = GpuModel::H200_141GB;
    let got = plan_layout(h200, &layout(&[("1g.18gb", 3), ("3g.71gb", 1)])).expect("fits");
    let starts: Vec<(String, u8, u8)> = got
        .iter()
        .map(|i| (i.profile.name().to_owned(), i.placement.start, i.placement.size))
        .collect();
    // The 3g takes one half; the three 1g pack into the other.
    assert_eq!(starts.len(), 4);
    let g3 = starts.iter().find(|s| s.0 == "3g.71gb").expect("3g");
    assert_eq!(g3.2, 4);
    let half = if g3.1 == 0 { 4..8 } else { 0..4 };
    assert!(starts.iter().filter(|s| s.0 == "1g.18gb").all(|s| half.contains(&s.1)));

    // 4g + 3g: the 4g must take 0, the 3g 4.
    let got = plan_layout(h200, &layout(&[("4g.71gb", 1), ("3g.71gb", 1)])).expect("fits");
    assert_eq!(got[0].placement.start, 0);
    assert_eq!(got[0].profile.name(), "4g.71gb");
    assert_eq!(got[1].placement.start, 4);

    // A full GPU of 1g: 7.
    assert!(plan_layout(h200, &layout(&[("1g.18gb", 7)])).is_ok());
    // 2g ×3 + 1g double memory at 6.
    assert!(plan_layout(h200, &layout(&[("2g.35gb", 3), ("1g.35gb", 1)])).is_ok());
    // Aliases work.
    assert!(plan_layout(h200, &layout(&[("nvidia.com/mig-1g.18gb.me", 1)])).is_ok());
}

#[test]
fn plan_layout_errors() {
    let h100 = GpuModel::H100_80GB;
    match plan_layout(h100, &layout(&[("1g.18gb", 1)])) {
        Err(LayoutError::UnknownProfile { known, .. }) => assert!(known.contains(&"1g.10gb")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        plan_layout(h100, &layout(&[("3g.40gb", 3)])),
        Err(LayoutError::TooMany { max: 2, .. })
    ));
    assert!(matches!(
        plan_layout(h100, &layout(&[("1g.10gb+me", 1), ("mig-1g.10gb.me", 1)])),
        Err(LayoutError::MediaEngine { count: 2 })
    ));
    // 4g (slots 0-3) + 2 × 3g cannot: compute 10 > 7.
    let e = plan_layout(h100, &layout(&[("4g.40gb", 1), ("3g.40gb", 2)])).expect_err("no");
    assert!(e.to_string().contains("compute"), "{e}");
    // 4g + 2g×3: compute 10.
    assert!(plan_layout(h100, &layout(&[("4g.40gb", 1), ("2g.20gb", 3)])).is_err());
    // 3g×2 + 1g: 9 memory slots.
    let e = plan_layout(h100, &layout(&[("3g.40gb", 2), ("1g.10gb", 1)])).expect_err("no");
    assert!(e.to_string().contains("memory"), "{e}");
    // 4g + 1g double memory ×2 + 1g: compute 7, memory 9.
    assert!(plan_layout(h100, &layout(&[("4g.40gb", 1), ("1g.20gb", 2), ("1g.10gb", 1)])).is_err());
    // Geometry only: 3g (4 slots) + 1g.20gb ×2 (2 each) = 8 slots, compute 5: fits.
    assert!(plan_layout(h100, &layout(&[("3g.40gb", 1), ("1g.20gb", 2)])).is_ok());
    // 2g ×2 + 1g×3 + 1g.20gb: slots 4+3+2 = 9.
    assert!(plan_layout(h100, &layout(&[("2g.20gb", 2), ("1g.10gb", 3), ("1g.20gb", 1)])).is_err());
    // 1g ×7 + 1g.20gb: compute 8.
    assert!(plan_layout(h100, &layout(&[("1g.10gb", 6), ("1g.20gb", 1)])).is_ok());
}
