#!/usr/bin/env bash
# Run every Carrel test: unit, crate and end-to-end tiers, including the kill -9 crash tests.
# Installs nothing by hand: whatever a test needs is installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

# The crash test kills a writer with SIGKILL this many times (see crates/store/tests/crash.rs).
export CARREL_CRASH_ITERATIONS="${CARREL_CRASH_ITERATIONS:-25}"

cargo test --workspace --locked "$@"
