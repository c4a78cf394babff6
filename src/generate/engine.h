// SPDX-License-Identifier: MIT
// The generation engine shared by `generate`, `chat` and the server: a model context with n_slots
// KV slots and one batch step over every admitted sequence (seq.h). A step feeds, per sequence,
// either the next prompt chunk or the last generated token, runs one forward pass, chooses the
// next token of every sequence that produced a row (one batched token choice, each row with its
// own sampling parameters, core/sample_rows.h), and hands each token to its sequence (stop rules,
// detokenization, logprobs, callback). Batching does not change results: rows are computed
// independently, each prompt is cut into the same fixed chunks ([k*chunk, (k+1)*chunk)) whatever
// else runs, and the noise of a sampled token depends only on (seed, position, token).
//
// KV memory is a pool of blocks of MX_KV_BLOCK positions (kv_pool.h), kv_size positions in all; a
// slot is only a row of block tables (n_slots caps the sequences at once, max_ctx one sequence). A
// sequence gets blocks as its positions fill. It is admitted when its prompt's blocks fit (plus a
// watermark of MX_ENGINE_KV_WATERMARK of the pool while others run), else it waits (mx_engine_admit
// returns 1); one whose prompt and max_new tokens could never fit the pool is refused with the numbers.
// Preemption: when a running sequence needs a block and the pool has none free or cached, the
// youngest running sequence (last admitted; possibly the one that needs it) gives all its blocks back
// and keeps its slot, sampling state and output. It waits ahead of every new sequence and resumes,
// oldest first, when its blocks fit again: it takes its full blocks still in the prefix cache and
// recomputes the rest of its prompt and generated tokens (in the same absolute chunks, without
// choosing tokens), then continues with its next token, so its output is what it would have been.
// Prefix cache: the prompt's full blocks already in the pool (the hash chain of their tokens,
// kv_pool.h) are shared instead of computed; every block a sequence fills is published when full,
// so chat turns, shared system prompts and repeated requests skip what was computed before, and
// unreferenced blocks stay cached until the pool needs them (LRU). A sequence whose next prompt
// block another running sequence is computing (n > 1 choices of one prompt, concurrent requests
// with one system prompt) waits for it before its first step, then takes it from the cache. When every prompt block is
// cached, the last prompt token is computed again in a private copy of its block (copy-on-write).
// Prompts are cut into the same absolute chunks either way, so reuse never changes a result.
//
// Padding (mx_engine_opts.batch_padding): a step of 9-56 tokens may be filled up to a multiple of 8
// with tokens of a reserved slot (its own KV block outside the pool; token 0 at positions 0, 1, ...),
// and, when every token is an output row, with output rows for them (greedy, discarded). Rows are
// computed independently, so padding changes no result on the CPU (test_engine_padding); on the GPU
// the attention's split of the context over blocks depends on the step's token count, so, as any
// change in the number of running sequences, padding may move results at float rounding. It bounds
// the step shapes a backend records.
//
// Order: a step's tokens follow the sequences' admission order (oldest first), each sequence's
// prompt chunk or next token in one place. With MLXCEL_GPU_SPLIT_MIXED=1 (models/model.h,
// mx_ctx_split_mixed) the decoding sequences' next tokens come first and the prompt chunks after
// them, so the context gives the decode tokens an attention record of their own; rows are computed
// independently, so the order changes no result on the CPU (test_engine_plans).
//
// Threading: one thread calls every function of an engine (the CLI's, or the server's scheduler).
#ifndef MX_GENERATE_ENGINE_H
#define MX_GENERATE_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "generate/seq.h"
#include "models/model.h"

typedef struct mx_engine_opts {
    int n_slots;        // sequences at once
    int max_ctx;        // positions per sequence (prompt + generated)
    int prefill_chunk;  // prompt tokens of one sequence per step, and its chunk boundaries (0: 256)
    int step_tokens;    // prompt tokens of one step over all sequences (0: MX_ENGINE_STEP_TOKENS on backends
                        // that record plans as graphs, prefill_chunk on the CPU); at least one chunk, at
                        // most n_slots chunks
    bool prefix_reuse;  // false: every prompt is computed in full
    int threads;        // host threads for token choice (0: the cores available)
    int kv_size;        // positions in the KV pool (rounded up to blocks); 0: mx_engine_default_kv_size
    // Steps of more than MX_ENGINE_PAD tokens are padded to a multiple of this many (at most
    // MX_KV_BLOCK) when that is at most MX_ENGINE_PAD_MAX, with tokens of a reserved padding slot, so the step shapes, and the plans and
    // graphs a backend records for them, are a few buckets instead of one per sequence count.
    // 0: the backend's choice (MX_ENGINE_PAD on backends that record plans as graphs, 1 on the CPU,
    // where every padded token costs its compute); 1: no padding.
    int batch_padding;
} mx_engine_opts;

// The default prompt tokens per step on a GPU: the prompts of many sequences that arrive together go
// in a few large steps, whose products fill the device (a 256-token step fills a sixth of an H200's
// multiprocessors on the 0.6B), at the cost of one longer step for the sequences already decoding.
#define MX_ENGINE_STEP_TOKENS 2048
#define MX_ENGINE_PAD 8       // the default padding: the matrix-vector kernels' token tile on the GPU
// Steps of more tokens are not padded: padded they would reach 64 tokens, where the GPU's products
// move from the float32 matrix-vector tiles to the bf16 matrix units (a different rounding).
#define MX_ENGINE_PAD_MAX 56

// Share of the pool kept free when admitting or resuming a sequence while others run (at least a block).
#define MX_ENGINE_KV_WATERMARK 0.01
// Share of the backend's free memory the default KV pool takes.
#define MX_ENGINE_KV_SHARE 0.5
// The default pool: what fits in MX_ENGINE_KV_SHARE of the backend's free memory (host memory for the
// CPU, device memory for a GPU), at most twice n_slots x max_ctx (every slot full, and as much again
// for cached prefixes), at least max_ctx.
int mx_engine_default_kv_size(const mx_model *m, int n_slots, int max_ctx);

typedef struct mx_engine_stats {
    uint64_t steps, prompt_tokens, reused_tokens, generated_tokens;
    double busy_seconds;       // time in steps
    double last_tok_per_s;     // tokens chosen per second in the last step
    // the KV pool: blocks of kv_block_size positions held by sequences, cached (unreferenced, kept
    // for the prefix cache) and free; prefix-cache hits and misses (full prompt blocks found or
    // computed) and evictions (cached blocks reused for new contents)
    int kv_blocks, kv_block_size, kv_blocks_used, kv_blocks_cached, kv_blocks_free;
    uint64_t prefix_hits, prefix_misses, prefix_evictions;
    uint64_t preemptions;      // running sequences whose blocks were taken back (engine.h: Preemption)
    uint64_t recomputed_tokens;  // tokens fed again after preemptions (computed before, blocks taken back)
    int preempted_now;         // preempted sequences waiting to resume
    uint64_t padding_tokens;   // tokens of the padding slot added to steps (mx_engine_opts.batch_padding)
    // Seconds in the phases of the steps (the one clock, core/clock.h): host preparation (resumption,
    // block growth, the batch and the sampling rows), the forward pass with the backend's token choice
    // (it ends with the backend's sync: the chosen ids are downloaded), the host token choice (only
    // when the backend cannot choose), and the sequences taking their tokens (stop rules,
    // detokenization, logprobs, the consumers' callbacks, publishing full blocks).
    double t_prepare, t_forward, t_host_choose, t_finish;
    // How the steps' plans ran (backend.h, mx_plan_runs; only the runs inside this engine's steps):
    // recorded graphs replayed, graphs recorded, plans run directly (record by record: a step shape's
    // first run on a GPU, every run on the CPU), and the device's time of those runs (0 unless the
    // backend times them: MLXCEL_GPU_PLAN_TIMES=1). Step plans the context built and evicted from its
    // cache (mx_ctx_plan_counts: a new step shape, or one that was evicted, is built).
    uint64_t plan_replays, plan_recordings, plan_direct_runs, plans_built, plans_evicted;
    double plan_device_seconds;
    // Steps with prompt chunks whose decode tokens had an attention record of their own
    // (MLXCEL_GPU_SPLIT_MIXED=1, models/model.h mx_ctx_split_mixed).
    uint64_t split_steps;
    // Decode steps: steps without prompt tokens (each token a sequence's next one, plus any padding):
    // their count, their sequences' output rows, and their part of t_forward and plan_device_seconds.
    uint64_t decode_steps, decode_rows;
    double t_forward_decode, decode_device_seconds;
} mx_engine_stats;

typedef struct mx_engine mx_engine;

mx_engine *mx_engine_create(mx_model *m, const mx_engine_opts *o, mx_error *err);
void mx_engine_free(mx_engine *e);
int mx_engine_max_ctx(const mx_engine *e);
int mx_engine_slots(const mx_engine *e);
int mx_engine_kv_size(const mx_engine *e);  // positions in the KV pool

// Admits a sequence into a free slot. Returns 0 (admitted), 1 (no free slot, not enough free KV
// blocks for its prompt, or a preempted sequence waiting: try again after a step or a release) or
// -1 (it can never run: err names the numbers).
int mx_engine_admit(mx_engine *e, mx_seq *s, mx_error *err);
// Takes a sequence out; an unfinished one ends as MX_FINISH_CANCELLED. Its slot becomes free and its
// blocks go back to the pool (its full blocks stay cached for the prefix cache).
void mx_engine_release(mx_engine *e, mx_seq *s);
// Ends an admitted sequence now (for example a deadline: MX_FINISH_LENGTH); it stays admitted.
void mx_engine_end(mx_engine *e, mx_seq *s, mx_finish why);
// Admitted sequences that have not finished (preempted ones included).
int mx_engine_running(const mx_engine *e);
// One step over every admitted unfinished sequence. Finished sequences stay admitted (their
// finish reason set) until released. Returns -1 (err set) when the model failed; the sequences of
// that step end as MX_FINISH_ERROR.
int mx_engine_step(mx_engine *e, mx_error *err);
// Runs steps until every admitted sequence has finished.
int mx_engine_run(mx_engine *e, mx_error *err);
// Forgets the cached blocks no sequence holds (chat's /reset).
void mx_engine_forget(mx_engine *e);
void mx_engine_stats_get(const mx_engine *e, mx_engine_stats *out);

#endif
