#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The decode matrix-vector check in one short call on a machine with an NVIDIA GPU (about 5
# minutes): build only what it runs (cuda preset), then correctness first (the op suite and the
# conformance harness: every matrix-vector path against the host reference and the CPU backend),
# then the A/B of the paths on the same binary: tests/gpu/bench_gpu_matvec (time and GB/s of each
# decode product shape and fused pattern on the streaming kernel, with its other task shape
# (MLXCEL_GPU_STREAM_ROWS=4), without it, and on the previous kernels; it fails when the paths'
# one-record outputs at the model shapes differ), `mlxcel bench` with and without the streaming
# kernel (MLXCEL_GPU_NO_STREAM_MATVEC=1; the 8B also with MLXCEL_GPU_STREAM_ROWS=4 and with
# MLXCEL_GPU_PDL=1, the products' first weights loaded while the previous kernel ends) and
# bench_gpu_decode's per-op times. Steps and verdicts as in run_on_device.sh (tests/gpu/steps.sh);
# the logs go to $OUT (all.log, bench_matvec_*.log).
# Usage: [MLXCEL_COMMIT=<commit>] [MLXCEL_DEVICE_DEADLINE=<s>] tests/gpu/matvec_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/gpu/steps.sh
finish() {
    for f in "$LOGS"/*.log; do printf '\n===== %s\n' "$(basename "$f")"; tail -c 100000 "$f"; done >"$OUT/all.log"
    cp "$LOGS"/bench_matvec_*.log "$OUT"/ 2>/dev/null
    steps_finish matvec_on_device.sh
}

nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader | tee "$LOGS/machine.log"
. tests/gpu/devdeps.sh
mxg_install_devdeps || verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
rm -rf build/cuda
step configure 240 cmake --preset cuda -DMLXCEL_WERROR=ON -DMLXCEL_SERVER_TESTS=OFF $(mxg_hub_flag) &&
    step build 360 cmake --build build/cuda -j"$(nproc)" --target mlxcel test_gpu_ops test_gpu_conformance \
        bench_gpu_matvec bench_gpu_decode || { tail -30 "$LOGS/build.log"; finish; }

step gpu_ops 240 build/cuda/test_gpu_ops
grep -E "check failed|matrix-vector|matmul matrix" "$LOGS/gpu_ops.log" | head -20
tail -1 "$LOGS/gpu_ops.log"
step gpu_conformance 240 build/cuda/test_gpu_conformance
grep -E "check failed|FAIL" "$LOGS/gpu_conformance.log" | head -10
tail -1 "$LOGS/gpu_conformance.log"

# In order of what matters most, so that a deadline (MLXCEL_DEVICE_DEADLINE) cuts the least.
step bench_matvec_8b 120 build/cuda/bench_gpu_matvec qwen3-8b 20
cat "$LOGS/bench_matvec_8b.log"
step mlxcel_bench_qwen3-8b 150 build/cuda/mlxcel bench --shape qwen3-8b -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-8b.log"
step mlxcel_bench_qwen3-8b_nostream 150 env MLXCEL_GPU_NO_STREAM_MATVEC=1 build/cuda/mlxcel bench --shape qwen3-8b \
    -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-8b_nostream.log"
step mlxcel_bench_qwen3-8b_rows4 150 env MLXCEL_GPU_STREAM_ROWS=4 build/cuda/mlxcel bench --shape qwen3-8b \
    -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-8b_rows4.log"
step mlxcel_bench_qwen3-8b_pdl 150 env MLXCEL_GPU_PDL=1 build/cuda/mlxcel bench --shape qwen3-8b -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-8b_pdl.log"
step bench_matvec_0.6b 90 build/cuda/bench_gpu_matvec qwen3-0.6b 20
cat "$LOGS/bench_matvec_0.6b.log"
step mlxcel_bench_qwen3-0.6b 120 build/cuda/mlxcel bench --shape qwen3-0.6b -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-0.6b.log"
step mlxcel_bench_qwen3-0.6b_nostream 120 env MLXCEL_GPU_NO_STREAM_MATVEC=1 build/cuda/mlxcel bench --shape qwen3-0.6b \
    -p 512 -n 128 --backend cuda
tail -3 "$LOGS/mlxcel_bench_qwen3-0.6b_nostream.log"
step bench_decode_8b 120 build/cuda/bench_gpu_decode qwen3-8b 512 512 100
sed -n '/^decode/,/per-op times, 512/p' "$LOGS/bench_decode_8b.log"
finish
