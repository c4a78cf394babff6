#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the tensor-core prefill attention (vendor/cuda/attn_mma.cu, MLXCEL_GPU_ATTN_MMA=1),
# one call of about eight minutes with the build: configures the cuda preset for sm_90 only and
# builds mlxcel, test_gpu_ops, test_model_parity and bench_gpu_decode; runs the op suite (its
# MLXCEL_GPU_ATTN_MMA=1 section: the attention cases and prefill chunks at 4,100 positions on both
# cache types, bound 3e-3) and the parity test with the switch (the fixtures have head size 32 and
# 20-token prompts, so there the kernel declines: this checks that the dispatch changes nothing
# else); then, most wanted first (the deadline may cut the last): the attention op's time in a
# Qwen3-8B prefill of 512 tokens (`bench_gpu_decode qwen3-8b 512 512 20`, layer 0's "attention"
# line) with and without the switch, `mlxcel bench --shape qwen3-8b -p 512 -n 32` and `-p 8192
# -n 32` with and without it (I16 cache, then f16), and the attention op at 8,192 tokens. Every step
# counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default 540 s, bounds the whole run).
# $OUT gets summary.txt (timings and bench lines), LAST_RUN.md (the verdicts) and all.log.
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/attn_mma_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-540}
. tests/gpu/check_script.sh
check_start attn_mma_on_device.sh
check_build 240 mlxcel test_gpu_ops test_model_parity bench_gpu_decode

step gpu_ops 120 build/cuda/test_gpu_ops
grep -E "attention|check failed|passed|failed" "$LOGS/gpu_ops.log" | head -30 | sum
step parity_attn_mma 120 env MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_ATTN_MMA=1 build/cuda/test_model_parity
tail -2 "$LOGS/parity_attn_mma.log" | sum

optime() {  # optime NAME CONTEXT PREFILL ENV...: layer 0's prefill attention time and the prefill rate
    local name=$1 ctx=$2 n=$3
    shift 3
    step "$name" 90 env "$@" build/cuda/bench_gpu_decode qwen3-8b "$ctx" "$n" 5
    grep -E "^prefill|attention +n=$n" "$LOGS/$name.log" | sed "s/^/$name: /" | sum
}
optime op512_simt 512 512 MLXCEL_GPU_ATTN_MMA=0
optime op512_mma 512 512 MLXCEL_GPU_ATTN_MMA=1
bench8b() {  # bench8b NAME PROMPT LIMIT ENV...: the bench line into the summary
    local name=$1 p=$2 limit=$3
    shift 3
    step "$name" "$limit" env "$@" build/cuda/mlxcel bench --shape qwen3-8b -p "$p" -n 32 --backend cuda
    echo "$name: $(grep -E "pp$p|tg32|^bench" "$LOGS/$name.log" | tr '\n' ' ')" | sum
}
bench8b pp512_simt 512 180 MLXCEL_GPU_ATTN_MMA=0  # makes the 8B model when missing
bench8b pp512_mma 512 60 MLXCEL_GPU_ATTN_MMA=1
bench8b pp8192_simt 8192 60 MLXCEL_GPU_ATTN_MMA=0
bench8b pp8192_mma 8192 60 MLXCEL_GPU_ATTN_MMA=1
bench8b pp8192_f16_mma 8192 60 MLXCEL_GPU_KV=f16 MLXCEL_GPU_ATTN_MMA=1
bench8b pp8192_f16_simt 8192 60 MLXCEL_GPU_KV=f16 MLXCEL_GPU_ATTN_MMA=0
optime op8k_mma 8192 8192 MLXCEL_GPU_ATTN_MMA=1
optime op8k_simt 8192 8192 MLXCEL_GPU_ATTN_MMA=0
finish
