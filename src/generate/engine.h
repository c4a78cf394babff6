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
    int prefill_chunk;  // prompt tokens per step over all sequences (0: 256)
    bool prefix_reuse;  // false: every prompt is computed in full
    int threads;        // host threads for token choice (0: the cores available)
    int kv_size;        // positions in the KV pool (rounded up to blocks); 0: mx_engine_default_kv_size
} mx_engine_opts;

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
    // Seconds in the phases of the steps (the one clock, core/clock.h): host preparation (resumption,
    // block growth, the batch and the sampling rows), the forward pass with the backend's token choice
    // (it ends with the backend's sync: the chosen ids are downloaded), the host token choice (only
    // when the backend cannot choose), and the sequences taking their tokens (stop rules,
    // detokenization, logprobs, the consumers' callbacks, publishing full blocks).
    double t_prepare, t_forward, t_host_choose, t_finish;
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
