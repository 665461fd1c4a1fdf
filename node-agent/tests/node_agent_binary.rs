//! The `carrel-node-agent` binary as a user runs it.

use std::process::Command;

#[test]
fn without_the_nvidia_library_the_nvml_backend_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_carrel-node-agent"))
        .args(["--node-name", "gpu-1", "--metrics-listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(dir.path().join("missing.kubeconfig"))
        .env("RUST_BACKTRACE", "0")
        .env("NO_COLOR", "1")
        .output()
        .expect("run carrel-node-agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    if carrel_nvml::Nvml::init().is_err() {
        assert!(stderr.contains("NVML is unavailable"), "{stderr}");
        assert!(stderr.contains("libnvidia-ml.so.1"), "{stderr}");
    } else {
        // With a driver, it gets as far as the missing kubeconfig.
        assert!(stderr.contains("missing.kubeconfig"), "{stderr}");
    }
}

#[test]
fn the_simulator_needs_a_spec_and_refuses_a_bad_one() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_carrel-node-agent"))
            .args(["--node-name", "sim-1", "--backend", "sim"])
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("run carrel-node-agent")
    };
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--sim-gpus"), "{stderr}");
    let out = run(&["--sim-gpus", "h200x1:mig=7g.141gb*2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("invalid GPU spec"), "{stderr}");
}
