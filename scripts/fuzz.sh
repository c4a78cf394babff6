#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets of fuzz/ with clang (preset "fuzz": ASan + UBSan) and runs each for
# a bounded time (default 60 s; first argument or MLXCEL_FUZZ_SECONDS) from its seed corpus
# fuzz/corpus/<target> plus its regression inputs fuzz/regressions/<target>. New inputs go to
# build/fuzz/corpus/<target>, crash inputs to build/fuzz/artifacts/. Exits non-zero when any target
# finds a crash, a leak or a timeout: copy the artifact into fuzz/regressions/<target>/ (ctest then
# replays it in every build) and fix the bug.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${MLXCEL_FUZZ_SECONDS:-60}}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target fuzz_all -j"$(nproc)"
mkdir -p build/fuzz/artifacts
status=0
for bin in build/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=${name#fuzz_}
  mkdir -p "build/fuzz/corpus/$corpus"
  seeds=("fuzz/corpus/$corpus")
  [ -d "fuzz/regressions/$corpus" ] && seeds+=("fuzz/regressions/$corpus")
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/artifacts/$corpus-" "build/fuzz/corpus/$corpus" "${seeds[@]}" \
      >"build/fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED (see build/fuzz/$name.log and build/fuzz/artifacts/)"
    tail -40 "build/fuzz/$name.log"
    status=1
  else
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' "build/fuzz/$name.log" | tr '\n' ' '
    echo
  fi
done
exit $status
