#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The A/B device checks of the GPU kernels' knobs, one suite per call on a machine with an NVIDIA
# GPU: configures the cuda preset for sm_90 only and builds what the suite runs (not the rest;
# with MLXCEL_SKIP_BUILD=1 it builds nothing and checks that the targets are there: another device
# script built them earlier in the same call), runs the suite's correctness steps, then `mlxcel
# bench` (random-weight models made in ~/.cache/mlxcel/bench when missing: the first bench of a
# shape has the longer limit) and the per-op benches with each value of the knob on the same
# binary, most wanted first. Every step counts (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, the
# suite's default below, bounds the whole run so the summary is always written; a step it cuts
# fails as "not run"). $OUT gets summary.txt (the timings, bench lines and test verdict lines),
# LAST_RUN.md (the verdicts, in the section "ab_on_device.sh SUITE") and all.log (every log).
# Helpers: check_start, check_build, check_run, check_bench, check_ab (tests/gpu/check_script.sh)
# and knob_checks, knob_ab (below).
#
# Usage: MLXCEL_COMMIT=<commit> [MLXCEL_SKIP_BUILD=1] [MLXCEL_DEVICE_DEADLINE=<s>] tests/gpu/ab_on_device.sh SUITE
#   attn      flash-decoding attention (kernels/attn_decode.cu, MLXCEL_GPU_ATTN_DECODE), ~5 min,
#             deadline 300 s: the op suite (attention cases, the 4,100-position decode cases, both
#             decode kernels and cache types); the 8B shape at 8k context (`-p 8192 -n 128`) with
#             the new kernel and the previous one (=0), I16 cache and f16 (MLXCEL_GPU_KV=f16);
#             `bench_gpu_decode qwen3-8b 8192 512 50` (the attention op's time at 8k and the whole
#             decode token) with each kernel; the conformance harness.
#   attn_mma  tensor-core prefill attention (vendor/cuda/attn_mma.cu, MLXCEL_GPU_ATTN_MMA), ~8 min,
#             deadline 540 s: the op suite (the attention cases and prefill chunks at 4,100
#             positions on both cache types, bound 3e-3); model parity on cuda with the switch (the
#             fixtures' head size 32 makes the kernel decline: the dispatch changes nothing else);
#             layer 0's prefill attention time of the 8B at 512 tokens (bench_gpu_decode) with and
#             without the switch; the 8B's pp512 and pp8192 (`-n 32`) with and without it, I16 cache
#             then f16; the attention op at 8,192 tokens.
#   prefill   tensor-core prefill products (MLXCEL_GPU_PREFILL_KERNEL), ~6 min, deadline 540 s; the
#             build is for sm_90a (MLXCEL_CUDA_ARCHITECTURES=90a: an H100/H200), which the wgmma
#             product (vendor/cuda/matmul_wgmma.cu) needs: the count of HGMMA instructions in the
#             binary's SASS; the op suite (every prefill kernel against the host reference; a line
#             "...=wgmma: ... no sm_90a code" there means wgmma fell back to pipe) and the
#             conformance harness (prefill-sized layers on the pipelined kernel); pp512 (`-n 8`) of
#             the 8B and the 0.6B on pipe (the default), wgmma and wmma (tiles picked to fill the
#             device); the 0.6B at 2048
#             prompt tokens (`--ctx 4096`: forwards of 512 over a growing context) on pipe, wgmma and
#             wmma. (wmma128, fixed 128 x 128 tiles, left out for wgmma's rows: the slowest in run 20.)
#   moe       fused MoE decode (kernels/moe_stream.cu, MLXCEL_GPU_MOE_FUSED), ~5-7 min, deadline
#             480 s: `--shape qwen3-30b-a3b -p 32 -n 64` (48 layers x 128 experts, 8 active) at 0
#             (the records), 1 (expert products fused) and 2 (the routing folded in too), twice in
#             turn; the conformance harness (its MOE_FUSED section: the fused launches against the
#             CPU backend); model parity on cuda at 2 (the qwen3_moe fixtures); the conformance
#             harness and the op suite at 2.
#   moe_fast  MoE decode level 3 (MLXCEL_GPU_MOE_FUSED 1/3: the norm, router product and routing in
#             one launch, kernels/moe_router.cu; the down + combine launch reading the combine's
#             inputs early), ~5-7 min, deadline 480 s: knob_checks at 3 (the harness's MoE cases start
#             at the norm, so level 3 runs the router launch; the ids compared exactly with the
#             CPU's), knob_ab of shape 30b, the op suite with the knob.
#   matvec    decode matrix-vector products, ~5 min, deadline 540 s: the op suite and the
#             conformance harness (every matrix-vector path against the host reference and the CPU
#             backend); bench_gpu_matvec of the 8B and the 0.6B (time and GB/s of each decode
#             product shape and fused pattern on each path; it fails when the paths' outputs at the
#             model shapes differ; the logs also go to $OUT); `-p 512 -n 128` of the 8B with the
#             streaming kernel, without it (MLXCEL_GPU_NO_STREAM_MATVEC=1), with
#             MLXCEL_GPU_STREAM_ROWS=2 and with MLXCEL_GPU_PDL=1; the same of the 0.6B with and
#             without the streaming kernel; bench_gpu_decode's per-op decode times of the 8B.
#   sample    the split token choice's fast form (kernels/sample_fast.cu, MLXCEL_GPU_SAMPLE_FAST),
#             ~6 min, deadline 420 s: test_gpu_sample with the knob (the fast split form against the
#             one-block form and the host rule, in a recorded graph too, and the sample record's time
#             over 1, 8, 32 and 64 rows and 64 rows of normal logits) and at 0 (the same times
#             for the radix split form); test_backend_sample on cuda with the knob; `mlxcel bench -m
#             qwen3-0.6b-q4g64 --batch 64 -p 32 -n 128` at temperature 0.7 top-p 0.95 with the knob
#             on and off and greedy, twice in turn, then the same at --batch 32; the
#             conformance harness with the knob.
#   grouped   products of one input as one launch (MLXCEL_GPU_GROUPED=1: q/k/v and gate/up + SwiGLU
#             of batches on the tensor-core decode product, vendor/cuda/matvec_mma.cu), ~6 min,
#             deadline 480 s: the conformance harness (from 4 tokens, then from 2 with
#             MLXCEL_GPU_TC_DECODE=2) and model parity on cuda with the knob; `mlxcel bench -m
#             qwen3-0.6b-q4g64 -p 32 -n 128 --batch B` for B = 64, 32, 16, 8 with the knob off and on
#             in turn, twice; bench_gpu_decode's 64-row step (graph) off and on; the op suite with
#             the knob (its plan cases).
#   mixed     the decode tokens of steps with prompt chunks in an attention record of their own
#             (MLXCEL_GPU_SPLIT_MIXED=1, models/model.h: the decode kernel instead of the prefill
#             kernel's one-sequence-at-a-time groups), ~5-7 min, deadline 540 s: builds mlxcel and
#             mlxcel-server, then bench/server_on_device.sh's `mixed` job (its logs in $OUT/server):
#             64 streams x 4 requests through HTTP, greedy and sampled, off and on in turn, twice,
#             with the plan counters and device times of /metrics; the engine alone at --batch 64
#             with the default context and with the server's 1024.
# The one-knob suites below are built of knob_checks (the build, then the conformance harness and
# model parity on cuda with the knob's ON value) and knob_ab (`mlxcel bench` of each shape with the
# knob's OFF and ON values in turn, twice; the shapes: 0.6b and 8b `-p 512 -n 128`, 30b the
# 30B-A3B `-p 32 -n 64`, 8b_p32 `-p 32 -n 64`, 8b_p8192 `-p 8192 -n 32`).
#   stream_lean  the streaming kernel's lean one-token form (kernels/matvec_stream_lean.cuh,
#             MLXCEL_GPU_STREAM_LEAN 0/1), ~8 min, deadline 540 s: knob_checks;
#             bench_gpu_matvec of the 8B (its stream-lean column against the default stream column,
#             same weights; it fails unless every one-record output is bit for bit the default's);
#             shapes 8b, 0.6b (rows below the streaming kernel's 4096 columns: the control);
#             bench_gpu_matvec of the 8B with the knob on for every path (equal times);
#             bench_gpu_decode's per-op decode times of the 8B off and on.
#   attn_short  the flash-decoding kernel's short form (kernels/attn_decode.cu, MLXCEL_GPU_ATTN_SHORT
#             0/1: a block per query head and one split where the cache holds at most 128
#             positions), ~8 min, deadline 540 s: knob_checks and the op suite with the knob;
#             shapes 30b and 8b_p32 (groups of 8 and 4), then the controls, whose caches are longer
#             than the form's bound (nothing changes): 8b, 8b_p8192.
#   attn_rope  the q/k norm + RoPE + KV store folded into the decode attention launch of one-token
#             steps (kernels/attn_decode.cu, gpu_plan.c, MLXCEL_GPU_ATTN_ROPE 0/1), ~8 min, deadline
#             540 s: knob_checks, knob_ab of shapes 0.6b, 8b, 30b.
#   pdl2      programmatic dependent launch's level 2 against plain launches (MLXCEL_GPU_PDL 0/2:
#             the matrix-vector kernels release the next one right after their grid wait and
#             prefetch their first rows' weights into L2 before it; kernels/matvec.cuh), ~8 min,
#             deadline 540 s: knob_checks, knob_ab of shapes 0.6b, 8b, 30b.
#   pdl3      level 3, the default, against level 2 (MLXCEL_GPU_PDL 2/3: the decode attention and its
#             combine, the q/k norm + RoPE launch, the token choice and the MoE launches as dependent
#             launches that wait and then release the next kernel at once, the RoPE-folded attention's
#             and the MoE down launch's L2 prefetch before the wait), ~9 min, deadline 570 s:
#             knob_checks at 3, knob_ab of shapes 0.6b, 8b, 30b; then the conformance harness at 3
#             with MLXCEL_GPU_ATTN_ROPE=0 (the q/k launch and the unfused attention as dependent
#             launches).
#   res_early  the residual epilogue with its reads ahead (MLXCEL_GPU_STREAM_RES_EARLY 0/1,
#             kernels/matvec_res_early.cuh: the one-token o/down + residual products read each task's
#             residual and bias rows into its lanes after the grid wait, a row written per lane; the
#             default since run 49), ~9 min, deadline 590 s: knob_checks (with bench_gpu_matvec
#             built), the harness with four rows a task forced (MLXCEL_GPU_STREAM_ROWS=4);
#             bench_gpu_matvec of the 8B (streaming kernel) and the 0.6B (its residual products on
#             the fused kernel) with the knob off and on; knob_ab of shapes 8b, 0.6b, 30b.
#   short_rows  one-token launches over rows shorter than MLXCEL_GPU_STREAM_MIN_COLS on the streaming
#             kernel where the launch has at least MLXCEL_GPU_STREAM_MIN_ROWS rows (default 4096:
#             the 0.6B's norm + q/k/v, norm + gate/up and lm_head; the 30B-A3B's norm + q/k/v and
#             lm_head; off: 1073741824), ~7-8 min, deadline 575 s: the conformance harness and model
#             parity on the defaults, parity with MLXCEL_GPU_STREAM_MIN_ROWS=0 (every one-token
#             product of the fixtures on the streaming kernel); knob_ab off/on of shapes 0.6b, 30b
#             and 8b (the control: every product of the 8B is past 4096 columns), then the residual
#             reads ahead off/on (the 0.6B and 8B; the new default against the old);
#             bench_gpu_matvec and bench_gpu_decode of the 0.6B on the defaults and with the rule
#             off; last the op suite on the defaults (~150 s), as far as the deadline lets it.
#   moe_route  the MoE routing launch by rank (MLXCEL_GPU_MOE_ROUTE_RANK 0/1, kernels/moe.cu: a block
#             of 128 threads per token, the k picks by rank in one pass), ~6 min, deadline 480 s:
#             knob_checks (with bench_gpu_decode built); bench_gpu_decode qwen3-30b-a3b 64 32 200
#             (the MoE pieces as per-layer graphs) with the knob off and on; knob_ab of shape 30b.
# (The suites were attn_on_device.sh, attn_mma_on_device.sh, prefill_on_device.sh,
# moe_on_device.sh and matvec_on_device.sh, which bench/RESULTS.md names.)
# shellcheck disable=SC2317  # the suite functions are called as "suite_$suite"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
suite=${1:-}
case $suite in
attn) deadline=300 ;;
attn_mma | prefill | matvec | mixed | stream_lean | attn_short | attn_rope | pdl2) deadline=540 ;;
moe | moe_fast | grouped) deadline=480 ;;
pdl3) deadline=570 ;;
res_early) deadline=590 ;;
short_rows) deadline=575 ;;
moe_route) deadline=480 ;;
sample) deadline=420 ;;
*)
    echo "usage: tests/gpu/ab_on_device.sh attn|attn_mma|prefill|moe|moe_fast|matvec|sample|grouped|mixed|stream_lean|attn_short|attn_rope|pdl2|pdl3|res_early|short_rows|moe_route (the suites: the top of this file)" >&2
    exit 2
    ;;
esac
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-$deadline}
. tests/gpu/check_script.sh

suite_attn() {
    check_build 200 mlxcel test_gpu_ops test_gpu_conformance bench_gpu_decode
    check_run gpu_ops 90 "attention|check failed|passed|failed" -- build/cuda/test_gpu_ops
    local b=(-- --shape qwen3-8b -p 8192 -n 128) d=(-- build/cuda/bench_gpu_decode qwen3-8b 8192 512 50)
    local p="attention|decode|token"
    check_bench bench_8k_i16_flash 180 MLXCEL_GPU_ATTN_DECODE=1 "${b[@]}"
    check_bench bench_8k_i16_old 90 MLXCEL_GPU_ATTN_DECODE=0 "${b[@]}"
    check_bench bench_8k_f16_flash 90 MLXCEL_GPU_KV=f16 "${b[@]}"
    check_run decode_8k_i16_flash 60 "$p" MLXCEL_GPU_ATTN_DECODE=1 "${d[@]}"
    check_run decode_8k_i16_old 60 "$p" MLXCEL_GPU_ATTN_DECODE=0 "${d[@]}"
    check_run gpu_conformance 60 "check failed|FAIL" -- build/cuda/test_gpu_conformance
    check_bench bench_8k_f16_old 90 MLXCEL_GPU_KV=f16 MLXCEL_GPU_ATTN_DECODE=0 "${b[@]}"
    check_run decode_8k_f16_flash 60 "$p" MLXCEL_GPU_KV=f16 "${d[@]}"
}

suite_attn_mma() {
    check_build 240 mlxcel test_gpu_ops test_model_parity bench_gpu_decode
    check_run gpu_ops 120 "attention|check failed|passed|failed" -- build/cuda/test_gpu_ops
    check_run parity_attn_mma 120 "passed|failed" MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_ATTN_MMA=1 -- \
        build/cuda/test_model_parity
    local v name=(simt mma)  # MLXCEL_GPU_ATTN_MMA=0, =1
    for v in 0 1; do
        check_run "op512_${name[v]}" 90 "^prefill|attention +n=512" MLXCEL_GPU_ATTN_MMA="$v" -- \
            build/cuda/bench_gpu_decode qwen3-8b 512 512 5
    done
    check_bench pp512_simt 180 MLXCEL_GPU_ATTN_MMA=0 -- --shape qwen3-8b -p 512 -n 32  # makes the 8B model
    check_bench pp512_mma 60 MLXCEL_GPU_ATTN_MMA=1 -- --shape qwen3-8b -p 512 -n 32
    for v in 0 1; do check_bench "pp8192_${name[v]}" 60 MLXCEL_GPU_ATTN_MMA="$v" -- --shape qwen3-8b -p 8192 -n 32; done
    for v in 1 0; do
        check_bench "pp8192_f16_${name[v]}" 60 MLXCEL_GPU_KV=f16 MLXCEL_GPU_ATTN_MMA="$v" -- --shape qwen3-8b -p 8192 -n 32
    done
    for v in 1 0; do
        check_run "op8k_${name[v]}" 90 "^prefill|attention +n=8192" MLXCEL_GPU_ATTN_MMA="$v" -- \
            build/cuda/bench_gpu_decode qwen3-8b 8192 8192 5
    done
}

suite_prefill() {
    check_arch=90a
    check_build 420 mlxcel test_gpu_ops test_gpu_conformance
    # shellcheck disable=SC2016  # expanded by the inner shell
    check_run sass_wgmma 60 "^[0-9]+$" -- sh -c 'PATH=$PATH:/usr/local/cuda/bin; cuobjdump -sass build/cuda/mlxcel | grep -c HGMMA'
    check_run gpu_ops 300 "check failed|matmul tiled|wgmma" -- build/cuda/test_gpu_ops
    check_run gpu_conformance 240 "check failed|FAIL" -- build/cuda/test_gpu_conformance
    local shape k
    for shape in qwen3-8b qwen3-0.6b; do
        for k in pipe wgmma wmma; do
            check_bench "pp512_${shape}_$k" 120 MLXCEL_GPU_PREFILL_KERNEL="$k" -- --shape "$shape" -p 512 -n 8
        done
    done
    for k in pipe wgmma wmma; do
        check_bench "pp2048_qwen3-0.6b_$k" 120 MLXCEL_GPU_PREFILL_KERNEL="$k" -- --shape qwen3-0.6b -p 2048 -n 8 --ctx 4096
    done
}

suite_moe() {
    check_build 240 mlxcel test_gpu_ops test_gpu_conformance test_model_parity
    local i b=(-- --shape qwen3-30b-a3b -p 32 -n 64)
    for i in 1 2; do
        check_bench "bench_30b_records_$i" 200 MLXCEL_GPU_MOE_FUSED=0 "${b[@]}"  # the first makes the model
        check_bench "bench_30b_fused1_$i" 90 MLXCEL_GPU_MOE_FUSED=1 "${b[@]}"
        check_bench "bench_30b_fused2_$i" 90 MLXCEL_GPU_MOE_FUSED=2 "${b[@]}"
    done
    check_run gpu_conformance 90 "MOE_FUSED|MoE|check failed" -- build/cuda/test_gpu_conformance
    check_run parity_cuda_moe_fused2 120 "[Mm]o[Ee]|[Ff][Aa][Ii][Ll]" MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_MOE_FUSED=2 -- \
        build/cuda/test_model_parity
    check_run gpu_conformance_fused2 90 "check failed" MLXCEL_GPU_MOE_FUSED=2 -- build/cuda/test_gpu_conformance
    check_run gpu_ops_moe_fused2 90 "check failed|passed|failed" MLXCEL_GPU_MOE_FUSED=2 -- build/cuda/test_gpu_ops
}

suite_moe_fast() {
    knob_checks MLXCEL_GPU_MOE_FUSED=3 test_gpu_ops
    knob_ab MLXCEL_GPU_MOE_FUSED=1 MLXCEL_GPU_MOE_FUSED=3 30b
    check_run gpu_ops_moe3 90 "check failed|passed|failed" MLXCEL_GPU_MOE_FUSED=3 -- build/cuda/test_gpu_ops
}

suite_matvec() {
    check_build 360 mlxcel test_gpu_ops test_gpu_conformance bench_gpu_matvec bench_gpu_decode
    check_run gpu_ops 240 "check failed|matrix-vector|matmul matrix" -- build/cuda/test_gpu_ops
    check_run gpu_conformance 240 "check failed|FAIL" -- build/cuda/test_gpu_conformance
    check_run bench_matvec_8b 120 "." -- build/cuda/bench_gpu_matvec qwen3-8b 20
    local b=(-- --shape qwen3-8b -p 512 -n 128)
    check_bench mlxcel_bench_qwen3-8b 150 "${b[@]}"
    check_bench mlxcel_bench_qwen3-8b_nostream 150 MLXCEL_GPU_NO_STREAM_MATVEC=1 "${b[@]}"
    check_bench mlxcel_bench_qwen3-8b_rows2 150 MLXCEL_GPU_STREAM_ROWS=2 "${b[@]}"
    check_bench mlxcel_bench_qwen3-8b_pdl 150 MLXCEL_GPU_PDL=1 "${b[@]}"
    check_run bench_matvec_0.6b 90 "." -- build/cuda/bench_gpu_matvec qwen3-0.6b 20
    b=(-- --shape qwen3-0.6b -p 512 -n 128)
    check_bench mlxcel_bench_qwen3-0.6b 120 "${b[@]}"
    check_bench mlxcel_bench_qwen3-0.6b_nostream 120 MLXCEL_GPU_NO_STREAM_MATVEC=1 "${b[@]}"
    cp "$LOGS"/bench_matvec_*.log "$OUT"/ 2>/dev/null
    step bench_decode_8b 120 build/cuda/bench_gpu_decode qwen3-8b 512 512 100
    sed -n '/^decode/,/per-op times, 512/p' "$LOGS/bench_decode_8b.log" | sed 's/^/bench_decode_8b: /' | sum
}

suite_sample() {
    check_build 240 mlxcel test_gpu_sample test_backend_sample test_gpu_conformance
    local p="sample record|differ from|graphs recorded|check failed|passed|failed"
    check_run gpu_sample_fast 120 "$p" MLXCEL_GPU_SAMPLE_FAST=1 -- build/cuda/test_gpu_sample
    check_run backend_sample_fast 60 "check failed|passed|failed" MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_SAMPLE_FAST=1 -- \
        build/cuda/test_backend_sample
    local m=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64 i b
    [ -f "$m/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
    for b in 64 32; do
        local a=(-- -m "$m" --batch "$b" -p 32 -n 128)
        for i in 1 2; do
            check_bench "b${b}_sampled_fast_$i" 60 MLXCEL_GPU_SAMPLE_FAST=1 "${a[@]}" --temp 0.7 --top-p 0.95
            check_bench "b${b}_sampled_radix_$i" 60 MLXCEL_GPU_SAMPLE_FAST=0 "${a[@]}" --temp 0.7 --top-p 0.95
            check_bench "b${b}_greedy_$i" 60 "${a[@]}"
        done
    done
    check_run gpu_sample_radix 120 "sample record" MLXCEL_GPU_SAMPLE_FAST=0 -- build/cuda/test_gpu_sample
    check_run gpu_conformance_fast 120 "check failed|FAIL" MLXCEL_GPU_SAMPLE_FAST=1 -- build/cuda/test_gpu_conformance
}

suite_grouped() {
    check_build 240 mlxcel test_gpu_ops test_gpu_conformance test_model_parity bench_gpu_decode
    local on=(MLXCEL_GPU_GROUPED=1) p="check failed|FAIL|passed|failed"
    check_run gpu_conformance_grouped 90 "$p" "${on[@]}" -- build/cuda/test_gpu_conformance
    check_run gpu_conformance_grouped_tc2 90 "$p" "${on[@]}" MLXCEL_GPU_TC_DECODE=2 -- build/cuda/test_gpu_conformance
    check_run parity_cuda_grouped 90 "$p" MLXCEL_TEST_BACKEND=cuda "${on[@]}" MLXCEL_GPU_TC_DECODE=2 -- \
        build/cuda/test_model_parity
    local model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64 b i
    [ -f "$model/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
    local a=(-m "$model" -p 32 -n 128 --temp 0)
    for i in 1 2; do
        for b in 64 32 16 8; do
            check_bench "b${b}_off_$i" 40 MLXCEL_GPU_GROUPED=0 -- "${a[@]}" --batch "$b"
            check_bench "b${b}_on_$i" 40 "${on[@]}" -- "${a[@]}" --batch "$b"
        done
    done
    for i in off on; do
        check_run "step64_$i" 50 "^batched|^per-op|n=64" MLXCEL_GPU_GROUPED="$([ "$i" = on ] && echo 1 || echo 0)" -- \
            build/cuda/bench_gpu_decode qwen3-0.6b 96 64 40 64
    done
    check_run gpu_ops_grouped 150 "check failed|passed|failed" "${on[@]}" -- build/cuda/test_gpu_ops
}

suite_mixed() {
    check_build 300 mlxcel mlxcel-server
    check_run server_mixed 400 "split=.*(c= 64|decode steps|plans:)|engine --ctx.*bench" OUT="$OUT/server" -- \
        bench/server_on_device.sh mixed
}

# knob_checks ON [TARGET...]: builds mlxcel, test_gpu_conformance, test_model_parity and the TARGETs,
# then runs the conformance harness and model parity on cuda with ON (VAR=VALUE; steps
# gpu_conformance_SUITE, parity_cuda_SUITE).
knob_checks() {
    local set_on=$1 p="check failed|FAIL|passed|failed"
    shift
    check_build 300 mlxcel test_gpu_conformance test_model_parity "$@"
    check_run "gpu_conformance_$suite" 120 "$p" "$set_on" -- build/cuda/test_gpu_conformance
    check_run "parity_cuda_$suite" 90 "$p" MLXCEL_TEST_BACKEND=cuda "$set_on" -- build/cuda/test_model_parity
}

# knob_ab OFF ON SHAPE...: check_ab of `mlxcel bench` for each SHAPE (the top of this file), OFF
# against ON (VAR=VALUE each); a model's first bench in the call has the limit that makes it.
knob_ab() {
    local set_off=$1 set_on=$2 shape model make limit args made=" "
    shift 2
    for shape in "$@"; do
        case $shape in
        0.6b) model=qwen3-0.6b make=90 limit=40 args=(-p 512 -n 128) ;;
        8b) model=qwen3-8b make=150 limit=60 args=(-p 512 -n 128) ;;
        8b_p32) model=qwen3-8b make=150 limit=40 args=(-p 32 -n 64) ;;
        8b_p8192) model=qwen3-8b make=150 limit=60 args=(-p 8192 -n 32) ;;
        30b) model=qwen3-30b-a3b make=200 limit=60 args=(-p 32 -n 64) ;;
        *)
            verdict "bench_$shape" FAIL "script error: knob_ab knows no shape $shape"
            continue
            ;;
        esac
        case $made in *" $model "*) make=$limit ;; esac
        made+="$model "
        check_ab "bench_$shape" "$make" "$limit" "$set_off" "$set_on" -- --shape "$model" "${args[@]}"
    done
}

suite_stream_lean() {
    local k=MLXCEL_GPU_STREAM_LEAN i
    knob_checks "$k=1" bench_gpu_matvec bench_gpu_decode
    check_run bench_matvec_8b 120 "." -- build/cuda/bench_gpu_matvec qwen3-8b 20
    knob_ab "$k=0" "$k=1" 8b 0.6b
    check_run bench_matvec_8b_on 120 "." "$k=1" -- build/cuda/bench_gpu_matvec qwen3-8b 20
    cp "$LOGS"/bench_matvec_*.log "$OUT"/ 2>/dev/null
    for i in 0 1; do
        check_run "decode_8b_$i" 60 "^decode|matmul|plan|lm_head" "$k=$i" -- \
            build/cuda/bench_gpu_decode qwen3-8b 512 512 100
    done
}

suite_attn_short() {
    local k=MLXCEL_GPU_ATTN_SHORT
    knob_checks "$k=1" test_gpu_ops
    check_run gpu_ops_short 90 "attention|check failed|FAIL|passed|failed" "$k=1" -- build/cuda/test_gpu_ops
    knob_ab "$k=0" "$k=1" 30b 8b_p32 8b 8b_p8192
}

suite_attn_rope() {
    knob_checks MLXCEL_GPU_ATTN_ROPE=1
    knob_ab MLXCEL_GPU_ATTN_ROPE=0 MLXCEL_GPU_ATTN_ROPE=1 0.6b 8b 30b
}

suite_pdl2() {
    knob_checks MLXCEL_GPU_PDL=2
    knob_ab MLXCEL_GPU_PDL=0 MLXCEL_GPU_PDL=2 0.6b 8b 30b
}

suite_pdl3() {
    knob_checks MLXCEL_GPU_PDL=3
    knob_ab MLXCEL_GPU_PDL=2 MLXCEL_GPU_PDL=3 0.6b 8b 30b
    check_run gpu_conformance_pdl3_rope_off 90 "check failed|FAIL|passed|failed" MLXCEL_GPU_PDL=3 MLXCEL_GPU_ATTN_ROPE=0 -- \
        build/cuda/test_gpu_conformance
}

suite_res_early() {
    local k=MLXCEL_GPU_STREAM_RES_EARLY shape i
    knob_checks "$k=1" bench_gpu_matvec
    check_run gpu_conformance_res_early_rows4 120 "check failed|FAIL|passed|failed" "$k=1" \
        MLXCEL_GPU_STREAM_ROWS=4 -- build/cuda/test_gpu_conformance
    for shape in 8b 0.6b; do
        for i in 0 1; do
            check_run "bench_matvec_${shape}_$i" 120 "." "$k=$i" -- build/cuda/bench_gpu_matvec "qwen3-$shape" 10
        done
    done
    cp "$LOGS"/bench_matvec_*.log "$OUT"/ 2>/dev/null
    knob_ab "$k=0" "$k=1" 8b 0.6b 30b
}

suite_short_rows() {
    local off=MLXCEL_GPU_STREAM_MIN_ROWS=1073741824 on=MLXCEL_GPU_STREAM_MIN_ROWS=4096
    local p="check failed|FAIL|passed|failed" pd="^decode|plan|attention|lm_head" i
    check_build 300 mlxcel test_gpu_conformance test_model_parity bench_gpu_matvec bench_gpu_decode test_gpu_ops
    check_run gpu_conformance_default 60 "$p" -- build/cuda/test_gpu_conformance
    check_run parity_cuda_default 60 "$p" MLXCEL_TEST_BACKEND=cuda -- build/cuda/test_model_parity
    check_run parity_cuda_min_rows0 60 "$p" MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_STREAM_MIN_ROWS=0 -- \
        build/cuda/test_model_parity
    knob_ab "$off" "$on" 0.6b 30b 8b
    check_ab bench_0.6b_res 40 40 MLXCEL_GPU_STREAM_RES_EARLY=0 MLXCEL_GPU_STREAM_RES_EARLY=1 -- \
        --shape qwen3-0.6b -p 512 -n 128
    check_ab bench_8b_res 40 40 MLXCEL_GPU_STREAM_RES_EARLY=0 MLXCEL_GPU_STREAM_RES_EARLY=1 -- \
        --shape qwen3-8b -p 512 -n 128
    check_run bench_matvec_0.6b_default 60 "." -- build/cuda/bench_gpu_matvec qwen3-0.6b 10
    check_run bench_matvec_0.6b_rows_off 60 "." "$off" -- build/cuda/bench_gpu_matvec qwen3-0.6b 10
    for i in on off; do
        local set=$on
        [ "$i" = off ] && set=$off
        check_run "decode_0.6b_$i" 60 "$pd" "$set" -- build/cuda/bench_gpu_decode qwen3-0.6b 512 512 50
    done
    # Last: the whole op suite takes ~150 s or more (run 48), the deadline may cut it.
    check_run gpu_ops_default 200 "check failed|FAIL|passed|failed" -- build/cuda/test_gpu_ops
}

suite_moe_route() {
    local k=MLXCEL_GPU_MOE_ROUTE_RANK i
    knob_checks "$k=1" bench_gpu_decode
    for i in 0 1; do
        check_run "decode_30b_$i" 60 "^decode|graph|moe|plan" "$k=$i" -- \
            build/cuda/bench_gpu_decode qwen3-30b-a3b 64 32 200
    done
    knob_ab "$k=0" "$k=1" 30b
}

check_start "ab_on_device.sh $suite"
"suite_$suite"
finish
