#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of MLXCEL_GPU_TC_FUSE=1 (vendor/cuda/matvec_mma.cu: the split product's partial
# sums added by the last block of each row range, one launch per product; gpu_plan.c: a decode
# batch's product and the residual add of its output in one launch), one call of about 200 s with
# the build: configures the cuda preset for sm_90 only and builds mlxcel and test_gpu_conformance
# (not the rest); with MLXCEL_SKIP_BUILD=1 it neither removes nor reconfigures build/cuda and builds
# nothing. Runs the conformance harness with MLXCEL_GPU_TC_FUSE=1 (every pattern against the CPU,
# the batched matmul + residual add among them), then `mlxcel bench --batch B -p 32 -n 128 --temp 0`
# on the random-weight Qwen3-0.6B (made by `mlxcel bench --shape` when missing) for B = 64 and 32,
# each with MLXCEL_GPU_TC_FUSE=1 and =0, and B = 1. Every step counts (tests/gpu/steps.sh;
# MLXCEL_DEVICE_DEADLINE, default 200 s, bounds the whole run so the summary is always written).
# $OUT gets summary.txt (the bench lines), LAST_RUN.md (the verdicts) and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/tc_fuse_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-200}
. tests/gpu/check_script.sh
check_start tc_fuse_on_device.sh
check_build 150 mlxcel test_gpu_conformance

step conformance_tc_fuse 60 env MLXCEL_GPU_TC_FUSE=1 build/cuda/test_gpu_conformance
grep -E "passed|failed|FAIL" "$LOGS/conformance_tc_fuse.log" | tail -5 | sum

model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || step make_model 60 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
bench() {  # bench NAME FUSE BATCH
    step "$1" 30 env MLXCEL_GPU_TC_FUSE="$2" build/cuda/mlxcel bench -m "$model" --backend cuda --batch "$3" \
        -p 32 -n 128 --temp 0
    echo "$1: $(grep -E '^bench:' "$LOGS/$1.log" | tail -1)" | sum
}
# Most wanted first (the deadline may cut the last).
for b in 64 32; do
    bench "bench_b${b}_fuse" 1 $b
    bench "bench_b${b}_off" 0 $b
done
bench bench_b1 0 1
finish
