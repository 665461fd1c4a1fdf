#![no_main]

#[path = "../../apiserver-shim/tests/fuzz_targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    targets::init();
    targets::crd(targets::Harness::shared(), data);
});
