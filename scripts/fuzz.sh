#!/usr/bin/env bash
# Run every coverage-guided fuzz target (fuzz/, cargo-fuzz and libFuzzer) for a while each, and
# print what each did: executions, new coverage, findings.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default 60 s, every target)
#
# Stable Rust is enough: cargo-fuzz's -Z flags are allowed with RUSTC_BOOTSTRAP=1, and the
# targets are built without a sanitizer (-s none; AddressSanitizer needs a nightly std), which
# costs nothing for safe Rust. Runs at low priority (nice 19, or CARREL_FUZZ_NICE), one libFuzzer
# process at a time.
# Corpora are kept in fuzz/corpus/<target> between runs; a crash is written to
# fuzz/artifacts/<target>/ and the script goes on with the next target, then exits non-zero.
# Environment: CARREL_FUZZ_TARGET_DIR (build directory, default fuzz/target), CARREL_FUZZ_NICE
# (the niceness the build and runs get, default 19),
# CARREL_FUZZ_RSS_MB (libFuzzer's -rss_limit_mb, default 2048),
# CARREL_FUZZ_TIMEOUT (seconds for one input before it counts as a hang, default 10).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(json_body yaml_body protobuf_body patch label_selector field_selector continue_token
    crd cel token client_cert)
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
  exit 2
fi
export RUSTC_BOOTSTRAP=1
target_dir="${CARREL_FUZZ_TARGET_DIR:-target}"
niceness="${CARREL_FUZZ_NICE:-19}"
nice -n "$niceness" cargo fuzz build -s none --target-dir "$target_dir"

failed=()
printf '%-16s %12s %10s %8s %s\n' target executions exec/s seconds result
for target in "${targets[@]}"; do
  mkdir -p "corpus/$target" "artifacts/$target"
  log="$(mktemp)"
  set +e
  nice -n "$niceness" cargo fuzz run -s none --target-dir "$target_dir" "$target" "corpus/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -timeout="${CARREL_FUZZ_TIMEOUT:-10}" \
    -rss_limit_mb="${CARREL_FUZZ_RSS_MB:-2048}" -print_final_stats=1 \
    -artifact_prefix="artifacts/$target/" >"$log" 2>&1
  status=$?
  set -e
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
  if [ "$status" -eq 0 ]; then
    result="ok, $(grep -oE 'cov: [0-9]+' "$log" | tail -1)"
  else
    result="FAILED (exit $status), see fuzz/artifacts/$target/ and $log"
    failed+=("$target")
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" | head -5 | sed 's/^/    /'
  fi
  printf '%-16s %12s %10s %8s %s\n' "$target" "$runs" "$rate" "$seconds" "$result"
  [ "$status" -eq 0 ] && rm -f "$log"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "findings in: ${failed[*]}" >&2
  exit 1
fi
