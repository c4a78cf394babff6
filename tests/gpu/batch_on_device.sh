#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the tensor-core decode product (vendor/cuda/matvec_mma.cu, MLXCEL_GPU_TC_DECODE),
# one call of about five minutes with the build: configures the cuda preset for sm_90 only and builds
# mlxcel, test_gpu_conformance, test_model_parity and bench_gpu_matvec (not the rest); runs the
# conformance harness and the model fixtures on cuda with the product on for batches of 2-64 tokens
# (the float32 paths' bounds); bench_gpu_matvec on the 0.6B's shapes (its tc-decode path at 2-64
# tokens, outputs compared with the default path's); then `mlxcel bench --batch B -p 32 -n 128
# --temp 0` on the random-weight Qwen3-0.6B (made by `mlxcel bench --shape` when missing) for B in
# 64 32 16 8 with the product on (MLXCEL_GPU_TC_DECODE=2), the same with it off, and B=1 (never on
# it). Every step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default 300 s, bounds the whole
# run so the summary is always written). $OUT gets summary.txt (the bench lines and the product
# table), LAST_RUN.md (the verdicts) and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> tests/gpu/batch_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-300}
. tests/gpu/steps.sh
. tests/gpu/devdeps.sh
sum() { tee -a "$OUT/summary.txt"; }
finish() {
    for f in "$LOGS"/*.log; do printf '\n===== %s\n' "$(basename "$f")"; tail -c 100000 "$f"; done >"$OUT/all.log"
    steps_finish batch_on_device.sh
}
if mxg_install_devdeps; then
    verdict dependencies OK "C libraries present"
else
    verdict dependencies FAIL "C libraries missing and no build/devdeps carried"
fi
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | sum
rm -rf build/cuda
step configure 120 cmake --preset cuda -DMLXCEL_CUDA_ARCHITECTURES=90 -DMLXCEL_WERROR=ON -DMLXCEL_SERVER_TESTS=OFF \
    $(mxg_hub_flag) || { tail -20 "$LOGS/configure.log"; finish; }
step build 210 cmake --build build/cuda -j"$(nproc)" --target mlxcel test_gpu_conformance test_model_parity bench_gpu_matvec ||
    { grep -E "error" "$LOGS/build.log" | head -20; finish; }

step conformance_tc_decode 90 env MLXCEL_GPU_TC_DECODE=2 build/cuda/test_gpu_conformance
grep -E "passed|failed|FAIL" "$LOGS/conformance_tc_decode.log" | tail -5 | sum
step parity_tc_decode 90 env MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_TC_DECODE=2 tests/gpu/if_gpu.sh build/cuda/mlxcel \
    build/cuda/test_model_parity
tail -3 "$LOGS/parity_tc_decode.log" | sum

model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
# Most wanted first (the deadline may cut the last): the product on at 64..8 sequences, then off.
bench() {  # bench NAME TC BATCH
    step "$1" 45 env MLXCEL_GPU_TC_DECODE="$2" build/cuda/mlxcel bench -m "$model" --backend cuda --batch "$3" -p 32 \
        -n 128 --temp 0
    echo "$1: $(grep -E '^bench:' "$LOGS/$1.log" | tail -1)" | sum
}
for b in 64 32 16 8; do bench "bench_b${b}_tc" 2 $b; done
for b in 64 32 16 8 1; do bench "bench_b${b}_off" 0 $b; done
step bench_gpu_matvec 120 build/cuda/bench_gpu_matvec qwen3-0.6b 10
grep -vE "^(skipped|$)" "$LOGS/bench_gpu_matvec.log" | tail -40 | sum
finish
