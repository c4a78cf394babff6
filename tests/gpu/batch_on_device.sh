#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the tensor-core decode product (vendor/cuda/matvec_mma.cu, the default for
# batches of 4-64 tokens: column splits added by a second kernel, which also takes the batched
# residual add), one call of about five minutes with the build: configures the cuda preset for sm_90 only and builds mlxcel, test_gpu_conformance,
# test_model_parity, bench_gpu_matvec and bench_gpu_decode (not the rest); with MLXCEL_SKIP_BUILD=1
# it neither removes nor reconfigures build/cuda and builds nothing (a coordinator running several
# device scripts after one full build). Runs the conformance harness (every plan pattern against
# the CPU, the batched "matmul + add" at 4, 17, 32 and 64 tokens split and unsplit) with the
# default, and the model fixtures on cuda; then `mlxcel bench --batch B -p 32 -n 128 --temp 0` on
# the random-weight Qwen3-0.6B (made by `mlxcel bench --shape` when missing) for B in 64 32 16 8 4 1;
# bench_gpu_matvec on the 0.6B's shapes (its tc-decode path at 2-64 tokens, outputs compared with
# the float32 paths'); the per-op device times of a 64-token 0.6B step (bench_gpu_decode, direct
# launches). Every step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default
# 330 s, bounds the whole run so the summary is always written). $OUT gets summary.txt (the bench
# lines and the product table), LAST_RUN.md (the verdicts) and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/batch_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-330}
. tests/gpu/check_script.sh
check_start batch_on_device.sh
check_build 210 mlxcel test_gpu_conformance test_model_parity bench_gpu_matvec bench_gpu_decode

step conformance 90 build/cuda/test_gpu_conformance
grep -E "passed|failed|FAIL" "$LOGS/conformance.log" | tail -5 | sum
step parity 90 env MLXCEL_TEST_BACKEND=cuda tests/gpu/if_gpu.sh build/cuda/mlxcel build/cuda/test_model_parity
tail -3 "$LOGS/parity.log" | sum

model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
# Most wanted first (the deadline may cut the last).
bench() {  # bench NAME BATCH
    step "$1" 45 env -u MLXCEL_GPU_TC_DECODE build/cuda/mlxcel bench -m "$model" \
        --backend cuda --batch "$2" -p 32 -n 128 --temp 0
    echo "$1: $(grep -E '^bench:' "$LOGS/$1.log" | tail -1)" | sum
}
for b in 64 32 16 8 4 1; do bench "bench_b${b}_default" $b; done
step bench_gpu_matvec 120 build/cuda/bench_gpu_matvec qwen3-0.6b 10
grep -vE "^(skipped|$)" "$LOGS/bench_gpu_matvec.log" | tail -40 | sum
# Per-op device times of layer 0 of a 64-token step (direct launches; bench_gpu_decode's prefill of
# 64 tokens).
step ops_64_default 60 build/cuda/bench_gpu_decode qwen3-0.6b 512 64 20
grep -E "^(prefill|decode)|n=64" "$LOGS/ops_64_default.log" | sed "s/^/ops default: /" | sum
finish
