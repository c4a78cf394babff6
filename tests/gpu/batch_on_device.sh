#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of batched decode steps (server steps of many sequences): the tensor-core decode
# product (vendor/cuda/matvec_mma.cu, the default for batches of 4-64 tokens: column splits added by
# a second kernel, which also takes the batched residual add), the flash-decoding attention kernel
# (kernels/attn_decode.cu, by the attention record's decode hint; one split and no combine launch
# from 3/4 of a wave of blocks on) and the q/k norm + RoPE launch with the KV store fused in
# (kernels/qk_norm_rope.cu). One call of about eight minutes with the build: configures the cuda
# preset for sm_90 only and builds mlxcel, test_gpu_conformance, test_gpu_ops, test_model_parity,
# bench_gpu_matvec and bench_gpu_decode (not the rest); with MLXCEL_SKIP_BUILD=1 it neither removes
# nor reconfigures build/cuda and builds nothing (a coordinator running several device scripts
# after one full build). Runs, most wanted first (the deadline may cut the last): `mlxcel bench
# --batch B -p 32 -n 128 --temp 0` on the random-weight Qwen3-0.6B (made by `mlxcel bench --shape`
# when missing) for B = 64, 32; bench_gpu_decode's 0.6B batched decode step of 64 sequences at
# context 96 (the step's time as a graph and its per-op device times: attention, the fused q/k
# norm + RoPE + KV store); the conformance harness (every plan pattern against the CPU, the
# batched "matmul + add" at 4, 17, 32 and 64 tokens split and unsplit, batched-decode layers, the
# fused pattern in every layer); B = 16, 8, 4, 1; B = 64 with the general attention kernel
# (MLXCEL_GPU_ATTN_DECODE=0, for comparison); the 32-sequence step; bench_gpu_matvec on the 0.6B's
# shapes (its tc-decode path at 2-64 tokens, outputs compared with the float32 paths'); the per-op
# device times of layer 0 of a 64-token 0.6B prefill (bench_gpu_decode, direct launches); the op
# suite (batched decode attention on both cache types and on the general kernel, the fused store
# against the kv_store record byte for byte); the model fixtures on cuda; B = 64 with fusion off
# (MLXCEL_GPU_NO_FUSION=1). Every step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default
# 540 s, bounds the whole run so the summary is always written). $OUT gets summary.txt (the bench
# lines, step times and the product table), LAST_RUN.md (the verdicts) and all.log (every log).
# (It replaces decode_steps_on_device.sh, whose steps it holds; bench/RESULTS.md names both.)
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] tests/gpu/batch_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-540}
. tests/gpu/check_script.sh
check_start batch_on_device.sh
check_build 210 mlxcel test_gpu_conformance test_gpu_ops test_model_parity bench_gpu_matvec bench_gpu_decode

model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
bench() {  # bench NAME BATCH ENV...: one bench line into the summary (MLXCEL_GPU_TC_DECODE unset)
    local name=$1 b=$2
    shift 2
    step "$name" 45 env -u MLXCEL_GPU_TC_DECODE "$@" build/cuda/mlxcel bench -m "$model" --backend cuda --batch "$b" \
        -p 32 -n 128 --temp 0
    echo "$name: $(grep -E '^bench:' "$LOGS/$name.log" | tail -1)" | sum
}
stepped() {  # stepped BATCH: bench_gpu_decode's batched decode step of the 0.6B, its per-op times
    step "step_$1" 45 build/cuda/bench_gpu_decode qwen3-0.6b 96 64 40 "$1"
    grep -E "^batched|^per-op|attention|q/k norm|kv_store|rmsnorm|swiglu|rope" "$LOGS/step_$1.log" | sed "s/^/step $1: /" | sum
}
bench bench_b64 64
bench bench_b32 32
stepped 64
step conformance 90 build/cuda/test_gpu_conformance
grep -E "batched decode|passed|failed|FAIL" "$LOGS/conformance.log" | tail -8 | sum
for b in 16 8 4 1; do bench "bench_b$b" "$b"; done
bench bench_b64_general_attn 64 MLXCEL_GPU_ATTN_DECODE=0
stepped 32
step bench_gpu_matvec 120 build/cuda/bench_gpu_matvec qwen3-0.6b 10
grep -vE "^(skipped|$)" "$LOGS/bench_gpu_matvec.log" | tail -40 | sum
step ops_64 60 build/cuda/bench_gpu_decode qwen3-0.6b 512 64 20
grep -E "^(prefill|decode)|n=64" "$LOGS/ops_64.log" | sed "s/^/ops 64: /" | sum
step gpu_ops 90 build/cuda/test_gpu_ops
grep -E "attention|check failed|passed|failed" "$LOGS/gpu_ops.log" | head -20 | sum
step parity 90 env MLXCEL_TEST_BACKEND=cuda tests/gpu/if_gpu.sh build/cuda/mlxcel build/cuda/test_model_parity
tail -3 "$LOGS/parity.log" | sum
bench bench_b64_no_fusion 64 MLXCEL_GPU_NO_FUSION=1
finish
