#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Set-up, build, then run the whole test suite of the CPU build (ctest). With --sanitize it also
# builds with AddressSanitizer + UBSan (build/cpu-asan) and runs the suite there, except the tests
# labelled "slow" (whole-corpus perplexity), which only repeat the same code paths at length, and
# "repeat" (another test's program with a knob whose code the sanitized suite runs elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build/cpu --output-on-failure -j2
if [ "${1:-}" = "--sanitize" ]; then
  cmake --preset cpu-asan ${MLXCEL_CMAKE_ARGS:-}
  cmake --build --preset cpu-asan -j"$(nproc)"
  ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build/cpu-asan --output-on-failure -LE 'slow|repeat' -j2
fi
