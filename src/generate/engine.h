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
// Prefix reuse: a slot keeps the tokens whose keys and values it holds after its sequence is
// released. A new sequence goes to the free slot whose kept tokens share the longest prefix with
// its prompt (the least recently used free slot when none shares any), and only the rest of the
// prompt is computed. `chat` gets its turn-to-turn reuse from this; the server gets shared system
// prompts and repeated requests.
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
} mx_engine_opts;

typedef struct mx_engine_stats {
    uint64_t steps, prompt_tokens, reused_tokens, generated_tokens;
    double busy_seconds;       // time in steps
    double last_tok_per_s;     // tokens chosen per second in the last step
} mx_engine_stats;

typedef struct mx_engine mx_engine;

mx_engine *mx_engine_create(mx_model *m, const mx_engine_opts *o, mx_error *err);
void mx_engine_free(mx_engine *e);
int mx_engine_max_ctx(const mx_engine *e);
int mx_engine_slots(const mx_engine *e);

// Admits a sequence into a free slot. Returns 0 (admitted), 1 (no free slot: try again after a
// release) or -1 (it can never run: err names the numbers).
int mx_engine_admit(mx_engine *e, mx_seq *s, mx_error *err);
// Takes a sequence out; an unfinished one ends as MX_FINISH_CANCELLED. Its slot becomes free and
// keeps the tokens it computed for prefix reuse.
void mx_engine_release(mx_engine *e, mx_seq *s);
// Ends an admitted sequence now (for example a deadline: MX_FINISH_LENGTH); it stays admitted.
void mx_engine_end(mx_engine *e, mx_seq *s, mx_finish why);
// Admitted sequences that have not finished.
int mx_engine_running(const mx_engine *e);
// One step over every admitted unfinished sequence. Finished sequences stay admitted (their
// finish reason set) until released. Returns -1 (err set) when the model failed; the sequences of
// that step end as MX_FINISH_ERROR.
int mx_engine_step(mx_engine *e, mx_error *err);
// Runs steps until every admitted sequence has finished.
int mx_engine_run(mx_engine *e, mx_error *err);
// Forgets what the free slots keep (chat's /reset).
void mx_engine_forget(mx_engine *e);
void mx_engine_stats_get(const mx_engine *e, mx_engine_stats *out);

#endif
