#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A short GPU check of token selection on a machine with an NVIDIA GPU: builds the cuda preset
# (installing build/devdeps like run_on_device.sh when the C libraries are missing), then runs the
# backend sampling test on the GPU, model parity on cuda, greedy generation (same text as the CPU)
# and seeded sampled generation twice (same text both times), with LD_LIBRARY_PATH unset.
# Every step counts (tests/gpu/steps.sh): one line "N passed, M failed" at the end, recorded with
# the commit in tests/gpu/LAST_RUN.md; exit 1 when any step failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/steps.sh
. tests/gpu/devdeps.sh
if mxg_install_devdeps; then
    verdict dependencies OK "C libraries present"
else
    verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
fi
rm -rf build/cuda
# shellcheck disable=SC2046  # the hub flag is nothing or one word
step configure 300 cmake --preset cuda -DMLXCEL_WERROR=ON -DMLXCEL_SERVER_TESTS=OFF $(mxg_hub_flag) || tail -20 "$LOGS/configure.log"
step build 420 cmake --build build/cuda -j"$(nproc)" || { grep -E "error" "$LOGS/build.log" | head -20; steps_finish check_sampling_on_device.sh; }
step sample_cuda 120 env MLXCEL_TEST_BACKEND=cuda build/cuda/test_backend_sample
tail -3 "$LOGS/sample_cuda.log"
step parity_cuda 300 env MLXCEL_TEST_BACKEND=cuda build/cuda/test_model_parity
tail -3 "$LOGS/parity_cuda.log"
g() { env -u LD_LIBRARY_PATH build/cuda/mlxcel generate -p "Once upon a time" -n 40 "$@" 2>>"$LOGS/generate.err"; }
if a=$(g --temp 0) && b=$(g --temp 0 --backend cpu); then
    echo "greedy cuda: $a"
    if [ "$a" = "$b" ]; then
        verdict "greedy cuda == cpu" OK "same text"
    else
        verdict "greedy cuda == cpu" FAIL "cuda: $a / cpu: $b"
    fi
else
    verdict "greedy cuda == cpu" FAIL "generate failed: $(tail -2 "$LOGS/generate.err")"
fi
if a=$(g --temp 0.8 --top-p 0.9 --seed 42) && b=$(g --temp 0.8 --top-p 0.9 --seed 42) && c=$(g --temp 0.8 --seed 43); then
    echo "sampled cuda: $a"
    if [ "$a" = "$b" ] && [ "$a" != "$c" ]; then
        verdict "seeded sampling" OK "same seed same text, other seed other text"
    else
        verdict "seeded sampling" FAIL "not reproducible or seed ignored"
    fi
else
    verdict "seeded sampling" FAIL "generate failed: $(tail -2 "$LOGS/generate.err")"
fi
steps_finish check_sampling_on_device.sh
