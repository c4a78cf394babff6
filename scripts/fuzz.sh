#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets of fuzz/ with clang (preset "fuzz": ASan + UBSan) and runs each for
# a bounded time (default 60 s; first argument or MLXCEL_FUZZ_SECONDS) from its seed corpus
# fuzz/corpus/<target> plus its regression inputs fuzz/regressions/<target>. New inputs go to
# build/fuzz/corpus/<target>, crash inputs to build/fuzz/artifacts/. Exits non-zero when any target
# finds a crash, a leak or a timeout: copy the artifact into fuzz/regressions/<target>/ (ctest then
# replays it in every build) and fix the bug.
# `--ci` runs a fixed campaign instead: seed 1 and a fixed number of inputs per target (about half a
# minute each on a 2-core machine) from the committed seeds, so a machine's speed does not change
# what is fuzzed and a CI verdict can be rerun locally with the same command (libFuzzer's corpus
# choices still depend a little on timing); a time limit of 90 s per target guards a slow machine.
# Exploratory runs (time-bounded, random seed) find new inputs; their finds become regressions.
set -euo pipefail
cd "$(dirname "$0")/.."
ci=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; fi
secs=${1:-${MLXCEL_FUZZ_SECONDS:-60}}
# Inputs per target in --ci mode: roughly 25-30 s of each target's rate on a 2-core Zen 3 at 2.45 GHz
# (from 1,100 inputs a second for jinja to 100,000 for request there), with the 90 s limit below as the guard.
ci_runs() {
  case $1 in
    config) echo 350000 ;;
    grammar) echo 900000 ;;
    jinja) echo 30000 ;;
    output) echo 330000 ;;
    request) echo 2500000 ;;
    safetensors) echo 1200000 ;;
    tokenizer_codec) echo 190000 ;;
    tokenizer_load) echo 70000 ;;
    *) echo 30000 ;;
  esac
}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target fuzz_all -j"$(nproc)"
mkdir -p build/fuzz/artifacts
status=0
for bin in build/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=${name#fuzz_}
  # A --ci campaign starts from the committed seeds alone (as on a clean clone), not from inputs
  # that earlier local runs added.
  [ $ci = 1 ] && rm -rf "build/fuzz/corpus/$corpus"
  mkdir -p "build/fuzz/corpus/$corpus"
  seeds=("fuzz/corpus/$corpus")
  [ -d "fuzz/regressions/$corpus" ] && seeds+=("fuzz/regressions/$corpus")
  if [ $ci = 1 ]; then
    limits=(-seed=1 -runs="$(ci_runs "$corpus")" -max_total_time=90)
    echo "fuzz: $name, ${limits[1]#-runs=} inputs from seed 1"
  else
    limits=(-max_total_time="$secs")
    echo "fuzz: $name for ${secs}s"
  fi
  if ! "$bin" "${limits[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
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
