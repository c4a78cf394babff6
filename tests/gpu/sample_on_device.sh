#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The device check of the split sample kernels (kernels/sample_split.cu), one call of about four
# minutes with the build: configures the cuda preset for sm_90 only and builds mlxcel,
# test_gpu_sample and test_backend_sample (not the rest); runs test_gpu_sample (the split form
# against the one-block form and the host rule on random batches, inside a recorded graph too, and
# the record's time over 1 and 8 rows of 151,936 logits in both forms) and test_backend_sample with
# the split form allowed (MLXCEL_GPU_SAMPLE_BLOCKS=128); then `mlxcel bench --batch 1` and `--batch 8`
# on the random-weight Qwen3-0.6B (made by `mlxcel bench --shape` when missing), greedy and at
# temperature 0.7 with top-p 0.9, the sampled ones with each form. Every step counts
# (tests/gpu/steps.sh; MLXCEL_DEVICE_DEADLINE, default 225 s, bounds the whole run so the summary is
# always written). $OUT gets summary.txt (the timings and bench lines), LAST_RUN.md (the verdicts)
# and all.log (every log).
# Usage: MLXCEL_COMMIT=<commit> tests/gpu/sample_on_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
export MLXCEL_DEVICE_DEADLINE=${MLXCEL_DEVICE_DEADLINE:-225}
. tests/gpu/check_script.sh
check_start sample_on_device.sh
check_build 210 mlxcel test_gpu_sample test_backend_sample

step gpu_sample_split 90 build/cuda/test_gpu_sample
grep -E "sample record|differ from|graphs recorded|check failed|passed|failed" "$LOGS/gpu_sample_split.log" | head -30 | sum
step backend_sample_split 60 env MLXCEL_TEST_BACKEND=cuda MLXCEL_GPU_SAMPLE_BLOCKS=128 build/cuda/test_backend_sample
tail -3 "$LOGS/backend_sample_split.log" | sum

model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || step make_model 90 build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda
# Most wanted first (the deadline may cut the last): greedy and split at 1 and 8 sequences, then the
# one-block form again for the A/B in the same run.
bench() {  # bench NAME BLOCKS BATCH TEMP
    step "$1" 45 env MLXCEL_GPU_SAMPLE_BLOCKS="$2" build/cuda/mlxcel bench -m "$model" --backend cuda --batch "$3" -p 32 \
        -n 128 --temp "$4" --top-p 0.9
    echo "$1: $(grep -E '^bench:' "$LOGS/$1.log" | tail -1)" | sum
}
for b in 1 8; do
    bench "bench_b${b}_greedy" 1 $b 0
    bench "bench_b${b}_sampled_split" 128 $b 0.7
done
for b in 1 8; do bench "bench_b${b}_sampled_one_block" 1 $b 0.7; done
finish
