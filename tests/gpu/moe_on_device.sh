#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the fused MoE decode kernels (kernels/moe_stream.cu, MLXCEL_GPU_MOE_FUSED=1),
# one call of about five to seven minutes with the build: configures the cuda preset for sm_90 only
# and builds mlxcel, test_gpu_ops, test_gpu_conformance and test_model_parity; then, most wanted
# first (the deadline may cut the last), issue 9's MoE shape `mlxcel bench --shape qwen3-30b-a3b -p
# 32 -n 64` (48 layers x 128 experts, 8 active; the random-weight model made in
# ~/.cache/mlxcel/bench when missing) with the knob at 0 (the records), 1 (expert products fused)
# and 2 (the routing folded in too), twice in turn; the conformance harness (its MLXCEL_GPU_MOE_FUSED
# section at 1 and 2: the fused launches against the CPU backend) and the whole harness at 2; model
# parity on cuda at 2 (the qwen3_moe fixtures); the op suite at 2. Every step counts
# (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default 480 s, bounds the whole run so the summary is
# always written). $OUT gets summary.txt (the bench lines), LAST_RUN.md (the verdicts) and all.log.
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/moe_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-480}
. tests/gpu/check_script.sh
check_start moe_on_device.sh
check_build 240 mlxcel test_gpu_ops test_gpu_conformance test_model_parity

bench30b() {  # bench30b NAME LIMIT ENV...: the 30B-A3B shape, its bench lines into the summary
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" env "$@" build/cuda/mlxcel bench --shape qwen3-30b-a3b -p 32 -n 64 --backend cuda
    echo "$name: $(grep -E 'pp32|tg64|^bench' "$LOGS/$name.log" | tr '\n' ' ')" | sum
}
for i in 1 2; do
    bench30b "bench_30b_records_$i" 200 MLXCEL_GPU_MOE_FUSED=0  # the first makes the model when missing
    bench30b "bench_30b_fused1_$i" 90 MLXCEL_GPU_MOE_FUSED=1
    bench30b "bench_30b_fused2_$i" 90 MLXCEL_GPU_MOE_FUSED=2
done
step gpu_conformance 90 build/cuda/test_gpu_conformance
grep -E "MOE_FUSED|MoE|check failed" "$LOGS/gpu_conformance.log" | head -40 | sum
tail -1 "$LOGS/gpu_conformance.log" | sum
step parity_cuda_moe_fused2 120 env MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_MOE_FUSED=2 build/cuda/test_model_parity
grep -E -i "moe|fail" "$LOGS/parity_cuda_moe_fused2.log" | head -20 | sum
tail -1 "$LOGS/parity_cuda_moe_fused2.log" | sum
step gpu_conformance_fused2 90 env MLXCEL_GPU_MOE_FUSED=2 build/cuda/test_gpu_conformance
tail -1 "$LOGS/gpu_conformance_fused2.log" | sum
step gpu_ops_moe_fused2 90 env MLXCEL_GPU_MOE_FUSED=2 build/cuda/test_gpu_ops
grep -E "check failed|passed|failed" "$LOGS/gpu_ops_moe_fused2.log" | tail -5 | sum
finish
