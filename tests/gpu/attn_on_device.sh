#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the flash-decoding attention kernel (kernels/attn_decode.cu), one call of
# about five minutes with the build: configures the cuda preset for sm_90 only and builds mlxcel,
# test_gpu_ops, test_gpu_conformance and bench_gpu_decode (not the rest); runs the op suite (its
# attention cases, the 4,100-position decode cases included, on both decode kernels and both cache
# types) and the conformance harness; then, most wanted first (the deadline may cut the last), the
# Qwen3-8B shape at 8k context: `mlxcel bench --shape qwen3-8b -p 8192 -n 128` (the random-weight
# model made in ~/.cache/mlxcel/bench when missing) with the new kernel and the previous one
# (MLXCEL_GPU_ATTN_DECODE=0), I16 cache and f16 (MLXCEL_GPU_KV=f16), and `bench_gpu_decode qwen3-8b
# 8192 512 50` (the attention op's time at 8k, and the whole decode token) with each kernel. Every
# step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default 300 s, bounds the whole run so the
# summary is always written). $OUT gets summary.txt (the timings and bench lines), LAST_RUN.md (the
# verdicts) and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/attn_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-300}
. tests/gpu/check_script.sh
check_start attn_on_device.sh
check_build 200 mlxcel test_gpu_ops test_gpu_conformance bench_gpu_decode

step gpu_ops 90 build/cuda/test_gpu_ops
grep -E "attention|check failed|passed|failed" "$LOGS/gpu_ops.log" | head -30 | sum

bench8k() {  # bench8k NAME LIMIT ENV...: the 8B at 8k context, the bench line into the summary
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" env "$@" build/cuda/mlxcel bench --shape qwen3-8b -p 8192 -n 128 --backend cuda
    echo "$name: $(grep -E 'pp8192|tg128|^bench' "$LOGS/$name.log" | tr '\n' ' ')" | sum
}
model=$HOME/.cache/mlxcel/bench/qwen3-8b-q4g64
[ -f "$model/config.json" ] || echo "8B model missing: the first bench makes it" | sum
bench8k bench_8k_i16_flash 180 MLXCEL_GPU_ATTN_DECODE=1  # makes the 8B model when missing
bench8k bench_8k_i16_old 90 MLXCEL_GPU_ATTN_DECODE=0
bench8k bench_8k_f16_flash 90 MLXCEL_GPU_KV=f16
decode() {  # decode NAME ENV...: per-op times at 8k (layer 0) and the whole token
    local name=$1
    shift
    step "$name" 60 env "$@" build/cuda/bench_gpu_decode qwen3-8b 8192 512 50
    grep -E "attention|decode|token" "$LOGS/$name.log" | sed "s/^/$name: /" | sum
}
decode decode_8k_i16_flash MLXCEL_GPU_ATTN_DECODE=1
decode decode_8k_i16_old MLXCEL_GPU_ATTN_DECODE=0
step gpu_conformance 60 build/cuda/test_gpu_conformance
tail -3 "$LOGS/gpu_conformance.log" | sum
bench8k bench_8k_f16_old 90 MLXCEL_GPU_KV=f16 MLXCEL_GPU_ATTN_DECODE=0
decode decode_8k_f16_flash MLXCEL_GPU_KV=f16
finish
