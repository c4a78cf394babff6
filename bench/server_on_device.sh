#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Server measurements on the GPU machine: builds mlxcel and mlxcel-server with the cuda preset (the
# C libraries from the carried build/devdeps, as run_on_device.sh does), makes the random-weight
# Qwen3-0.6B 4-bit model that `mlxcel bench --shape qwen3-0.6b` writes and gives it the demo model's
# Qwen3 tokenizer, then runs each job named on the command line, logging to $OUT/JOB.log:
#   constrained     bench/constrained_bench.py at 8 and 32 clients (issue 15's cost on the H200)
#   table           bench/serve_throughput.py at 1, 8, 32 and 64 streams, greedy and temp 0.7 top-p 0.9,
#                   then the server's step phases from /metrics (cumulative)
#   engine          mlxcel bench --batch at 1, 8, 16, 32 and 64 sequences, greedy and sampled
#   ops             per-op device times of 8-, 16-, 32- and 64-token steps (bench_gpu_decode), $OUT/ops.tgz
#   crossover       greedy --batch 16, 32, 64 with MLXCEL_GPU_MATVEC_TOKENS 8 (the old crossover), 63, 128
#   padding         greedy and sampled --batch 13 against 16 (13 runs padded to 16 on the GPU)
#   rounds4         the 1- and 64-stream levels with 4 requests per stream (the engine never idles
#                   between a stream's requests), greedy and temp 0.7 top-p 0.9
#   prefix          `--parallel 16 --ctx 4096`: a 2,000-token prompt, then the same plus 16 tokens
#                   (serve_throughput.py --shared-prefix 2000): both times to first token
#   kvsize          `--parallel 16 --ctx 4096 --kv-size 8192`: one 3,500-token prompt, then 16
#                   concurrent 128-token requests at temp 0.7 top-p 0.9, both served
#   mixed           MLXCEL_GPU_SPLIT_MIXED off and on in turn, twice: rounds4's levels (1 and 64
#                   streams, 4 requests each, greedy and temp 0.7 top-p 0.9) on a server with
#                   MLXCEL_GPU_PLAN_TIMES=1, each level's decode steps, plan runs (graph replays,
#                   recordings, direct runs) and device times from /metrics; then the engine alone
#                   (`mlxcel bench --batch 64 -p 32 -n 128 --temp 0`) at its default context and at
#                   the server's --ctx 1024 (a KV pool of the server's size), greedy
# The servers inherit the environment (MLXCEL_GPU_* knobs for a whole job); SERVE_ENV adds variables
# for one server (the mixed job's A/B).
# usage: bench/server_on_device.sh JOB...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. tests/gpu/devdeps.sh
mxg_install_devdeps || { echo "C libraries missing and no build/devdeps carried"; exit 1; }
# Configured once; built every time (incremental), so binaries left from an earlier tree are never run.
{ { [ -f build/cuda/CMakeCache.txt ] || cmake --preset cuda -DMLXCEL_SERVER_TESTS=OFF $(mxg_hub_flag); } &&
  cmake --build build/cuda -j"$(nproc)" --target mlxcel mlxcel-server; } >>"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
model=$HOME/.cache/mlxcel/bench/qwen3-0.6b-q4g64
[ -f "$model/config.json" ] || build/cuda/mlxcel bench --shape qwen3-0.6b -p 1 -n 1 --backend cuda >/dev/null
cp models/qwen3-demo-44m-4bit/tokenizer*.json "$model/"
serve() {  # serve PORT ARGS...: starts the server in the background and waits until it answers
    local port=$1; shift
    # shellcheck disable=SC2086  # SERVE_ENV: VAR=VALUE words
    env ${SERVE_ENV:-} build/cuda/mlxcel-server -m "$model" --backend cuda --port "$port" "$@" 2>>"$OUT/server.log" &
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0; sleep 0.5; done
    return 1
}
for job in "$@"; do
    echo "== $job" | tee -a "$OUT/summary.txt"
    case $job in
    constrained)
        for c in 8 32; do
            timeout 240 python3 bench/constrained_bench.py build/cuda/mlxcel-server -m "$model" --backend cuda \
                --parallel $c --clients $c --tokens 128 --rounds 3 2>&1 | tee -a "$OUT/constrained.log" | tail -1 |
                sed "s/^/clients $c: /" | tee -a "$OUT/summary.txt"
        done ;;
    table)
        serve 8090 --parallel 64 --ctx 1024 || { echo "server did not start"; continue; }
        for t in "--temperature 0" "--temperature 0.7 --top-p 0.9"; do
            timeout 240 python3 bench/serve_throughput.py --url http://127.0.0.1:8090 -c 1,8,32,64 --max-tokens 128 \
                --prompt-tokens 32 --rounds 2 $t 2>&1 | tee -a "$OUT/table.log" | tee -a "$OUT/summary.txt"
            # where the server's step time went so far (cumulative): engine phases and the scheduler's gaps
            curl -sf http://127.0.0.1:8090/metrics |
                grep -E "^mlxcel_(steps_total|step_.*seconds_total|scheduler_|generated_tokens_total|gpu_|plan|decode_|split_)" |
                sed "s/^/after $t: /" | tee -a "$OUT/summary.txt"
        done
        kill %1; wait ;;
    engine)
        for t in 0 0.7; do
            for b in 1 8 16 32 64; do
                timeout 120 build/cuda/mlxcel bench -m "$model" --backend cuda --batch $b -p 32 -n 128 --temp $t \
                    --top-p 0.9 2>&1 | tee -a "$OUT/engine.log" | tail -3 | tee -a "$OUT/summary.txt"
            done
        done ;;
    crossover)  # greedy engine steps with the matrix-vector / tiled crossover moved (MLXCEL_GPU_MATVEC_TOKENS)
        for mv in 8 63 128; do
            for b in 16 32 64; do
                echo "MLXCEL_GPU_MATVEC_TOKENS=$mv" | tee -a "$OUT/crossover.log"
                MLXCEL_GPU_MATVEC_TOKENS=$mv timeout 120 build/cuda/mlxcel bench -m "$model" --backend cuda --batch $b \
                    -p 32 -n 128 --temp 0 2>&1 | tee -a "$OUT/crossover.log" | tail -3 |
                    sed "s/^/tokens<=$mv: /" | tee -a "$OUT/summary.txt"
            done
        done ;;
    ops)  # per-op device times of a Qwen3-0.6B step of N tokens (tests/gpu/bench_gpu_decode's prefill)
        cmake --build build/cuda -j"$(nproc)" --target bench_gpu_decode >>"$OUT/build.log" 2>&1 || { echo "build failed"; continue; }
        for n in 8 16 32 64; do
            timeout 120 build/cuda/bench_gpu_decode qwen3-0.6b 512 $n 50 >"$OUT/ops_$n.log" 2>&1
            grep -E "^(prefill|decode)" "$OUT/ops_$n.log" | sed "s/^/tokens $n: /" | tee -a "$OUT/summary.txt"
        done
        tar czf "$OUT/ops.tgz" -C "$OUT" $(cd "$OUT" && ls ops_*.log) && rm -f "$OUT"/ops_*.log ;;
    padding)  # step padding: 13 sequences run as 16 (engine.h), so their steps should cost the same
        for t in 0 0.7; do
            for b in 13 16; do
                timeout 120 build/cuda/mlxcel bench -m "$model" --backend cuda --batch $b -p 32 -n 128 --temp $t \
                    --top-p 0.9 2>&1 | tee -a "$OUT/padding.log" | tail -3 | tee -a "$OUT/summary.txt"
            done
        done ;;
    rounds4)
        serve 8090 --parallel 64 --ctx 1024 || { echo "server did not start"; continue; }
        for t in "--temperature 0" "--temperature 0.7 --top-p 0.9"; do
            timeout 120 python3 bench/serve_throughput.py --url http://127.0.0.1:8090 -c 1,64 --max-tokens 128 \
                --prompt-tokens 32 --rounds 4 $t 2>&1 | tee -a "$OUT/rounds4.log" | grep -v '^JSON' | tee -a "$OUT/summary.txt"
        done
        kill %1; wait ;;
    prefix)
        serve 8091 --parallel 16 --ctx 4096 || { echo "server did not start"; continue; }
        timeout 120 python3 bench/serve_throughput.py --url http://127.0.0.1:8091 --shared-prefix 2000 2>&1 |
            tee -a "$OUT/prefix.log" | grep -v '^JSON' | tee -a "$OUT/summary.txt"
        curl -sf http://127.0.0.1:8091/metrics | grep -E "^mlxcel_prefix_cache" | tee -a "$OUT/summary.txt"
        kill %1; wait ;;
    kvsize)
        serve 8092 --parallel 16 --ctx 4096 --kv-size 8192 || { echo "server did not start"; continue; }
        timeout 120 python3 bench/serve_throughput.py --url http://127.0.0.1:8092 -c 1 --prompt-tokens 3500 \
            --max-tokens 16 --rounds 1 2>&1 | tee -a "$OUT/kvsize.log" | grep -v '^JSON' | sed 's/^/3500-token prompt: /' |
            tee -a "$OUT/summary.txt"
        timeout 120 python3 bench/serve_throughput.py --url http://127.0.0.1:8092 -c 16 --prompt-tokens 32 \
            --max-tokens 128 --rounds 1 --temperature 0.7 --top-p 0.9 2>&1 | tee -a "$OUT/kvsize.log" | grep -v '^JSON' |
            sed 's/^/16 concurrent: /' | tee -a "$OUT/summary.txt"
        curl -sf http://127.0.0.1:8092/health | tee -a "$OUT/summary.txt"; echo | tee -a "$OUT/summary.txt"
        kill %1; wait ;;
    mixed)
        for i in 1 2; do
            for split in 0 1; do
                SERVE_ENV="MLXCEL_GPU_PLAN_TIMES=1 MLXCEL_GPU_SPLIT_MIXED=$split" serve 8093 --parallel 64 --ctx 1024 ||
                    { echo "server did not start (split=$split run $i)" | tee -a "$OUT/summary.txt"; kill %1; wait; continue; }
                for t in "--temperature 0" "--temperature 0.7 --top-p 0.9"; do
                    timeout 120 python3 bench/serve_throughput.py --url http://127.0.0.1:8093 -c 1,64 --max-tokens 128 \
                        --prompt-tokens 32 --rounds 4 $t 2>&1 | tee -a "$OUT/mixed.log" | grep -v '^JSON' |
                        sed "s/^/split=$split run $i: /" | tee -a "$OUT/summary.txt"
                done
                kill %1; wait
            done
        done
        for ctx in 161 1024; do  # 161: the bench's own default for -p 32 -n 128
            timeout 120 build/cuda/mlxcel bench -m "$model" --backend cuda --batch 64 -p 32 -n 128 --temp 0 --ctx $ctx 2>&1 |
                tee -a "$OUT/mixed.log" | grep -E "^rep|^bench" | sed "s/^/engine --ctx $ctx: /" | tee -a "$OUT/summary.txt"
        done ;;
    *) echo "unknown job $job" ;;
    esac
done
