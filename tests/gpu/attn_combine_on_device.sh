#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of MLXCEL_GPU_ATTN_COMBINE_LAST=1 (the flash-decoding kernel's last split block
# merges the splits, no combine launch; kernels/attn_decode.cu): configures the cuda preset for sm_90
# only and builds mlxcel and test_gpu_ops (not the rest); runs the op suite with the knob on (its
# attention cases with the merge in the kernel, the 4,100-position decode twice); then
# `mlxcel bench --shape qwen3-0.6b -p 512 -n 128 --backend cuda` with the knob on and off, and, when
# the 8B bench model is already in ~/.cache/mlxcel/bench, `--shape qwen3-8b -p 8192 -n 128` on and off
# (the deadline may cut these last). Every step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE,
# default 200 s, bounds the whole run so the summary is always written). $OUT gets summary.txt,
# LAST_RUN.md (the verdicts) and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/attn_combine_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-200}
. tests/gpu/check_script.sh
check_start attn_combine_on_device.sh
check_build 150 mlxcel test_gpu_ops

step gpu_ops_combine_last 90 env MLXCEL_GPU_ATTN_COMBINE_LAST=1 build/cuda/test_gpu_ops
grep -E "attention|COMBINE_LAST|check failed|passed|failed" "$LOGS/gpu_ops_combine_last.log" | head -30 | sum

bench() {  # bench NAME LIMIT SHAPE PROMPT ENV...: one bench line into the summary
    local name=$1 limit=$2 shape=$3 prompt=$4
    shift 4
    step "$name" "$limit" env "$@" build/cuda/mlxcel bench --shape "$shape" -p "$prompt" -n 128 --backend cuda
    echo "$name: $(grep -E 'pp[0-9]|tg128|^bench' "$LOGS/$name.log" | tr '\n' ' ')" | sum
}
bench bench_06b_merge_on 60 qwen3-0.6b 512 MLXCEL_GPU_ATTN_COMBINE_LAST=1  # makes the 0.6B model when missing
bench bench_06b_merge_off 40 qwen3-0.6b 512 MLXCEL_GPU_ATTN_COMBINE_LAST=0
bench bench_06b_merge_on2 40 qwen3-0.6b 512 MLXCEL_GPU_ATTN_COMBINE_LAST=1  # the order's effect
if [ -f "$HOME/.cache/mlxcel/bench/qwen3-8b-q4g64/config.json" ]; then
    bench bench_8k_merge_on 90 qwen3-8b 8192 MLXCEL_GPU_ATTN_COMBINE_LAST=1
    bench bench_8k_merge_off 90 qwen3-8b 8192 MLXCEL_GPU_ATTN_COMBINE_LAST=0
else
    echo "8B bench model not in ~/.cache/mlxcel/bench: its 8k benches skipped" | sum
fi
finish
