#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The tensor-core prefill product check in one short call on a machine with an NVIDIA GPU (about 6
# minutes): build only what it runs (cuda preset, -Werror), then correctness first (the op suite:
# every prefill kernel of MLXCEL_GPU_PREFILL_KERNEL against the host reference, prefill-sized shapes
# that reach each block tile; the conformance harness: prefill-sized layers on the pipelined
# kernel), then the A/B on the same binary: `mlxcel bench` pp512 of the 8B and the 0.6B shapes on
# each prefill kernel (wmma: the default, tiles picked to fill the device; wmma128: the fixed
# 128 x 128 tiles of before; pipe and pipe1: the cp.async kernel of vendor/cuda/matmul_pipe.cu at
# two and one blocks per multiprocessor), then the 0.6B at 2048 prompt tokens (in forwards of 512:
# prefill over a growing context). Steps and verdicts as in run_on_device.sh (tests/gpu/steps.sh); the logs go to
# $OUT (all.log); the table of pp tok/s is the last lines of the output.
# Usage: [MLXCEL_COMMIT=<commit>] [MLXCEL_DEVICE_DEADLINE=<s>] tests/gpu/prefill_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/gpu/steps.sh
finish() {
    for f in "$LOGS"/*.log; do printf '\n===== %s\n' "$(basename "$f")"; tail -c 100000 "$f"; done >"$OUT/all.log"
    steps_finish prefill_on_device.sh
}

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$LOGS/machine.log"
. tests/gpu/devdeps.sh
mxg_install_devdeps || verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
rm -rf build/cuda
# shellcheck disable=SC2046,SC2015  # the hub flag may be empty or one word; build runs only after configure
step configure 240 cmake --preset cuda -DMLXCEL_WERROR=ON -DMLXCEL_SERVER_TESTS=OFF $(mxg_hub_flag) &&
    step build 420 cmake --build build/cuda -j"$(nproc)" --target mlxcel test_gpu_ops test_gpu_conformance ||
    { tail -30 "$LOGS/build.log"; finish; }

step gpu_ops 300 build/cuda/test_gpu_ops
grep -E "check failed|matmul tiled" "$LOGS/gpu_ops.log" | head -20
tail -1 "$LOGS/gpu_ops.log"
step gpu_conformance 240 build/cuda/test_gpu_conformance
grep -E "check failed|FAIL" "$LOGS/gpu_conformance.log" | head -10
tail -1 "$LOGS/gpu_conformance.log"

# pp tok/s of one bench log (the "pp" line of `mlxcel bench`).
pp() { grep -E "pp[0-9]+" "$LOGS/$1.log" | tail -1; }
table=()
for shape in qwen3-8b qwen3-0.6b; do
    for k in wmma wmma128 pipe pipe1; do
        name="pp512_${shape}_$k"
        step "$name" 120 env MLXCEL_GPU_PREFILL_KERNEL=$k build/cuda/mlxcel bench --shape $shape -p 512 -n 8 --backend cuda
        table+=("$(printf '%-12s %-8s %s' "$shape" "$k" "$(pp "$name")")")
    done
done
for k in wmma wmma128 pipe; do
    name="pp2048_qwen3-0.6b_$k"
    step "$name" 120 env MLXCEL_GPU_PREFILL_KERNEL=$k build/cuda/mlxcel bench --shape qwen3-0.6b -p 2048 -n 8 \
        --ctx 4096 --backend cuda
    table+=("$(printf '%-12s %-8s %s' "0.6b p2048" "$k" "$(pp "$name")")")
done
printf '%s\n' "${table[@]}" | tee "$LOGS/prefill_table.log"
finish
