// SPDX-License-Identifier: MIT
// Sampling parameters and the per-sequence sampler state. A sampler remembers what the penalties
// need (the last repetition_context tokens, counts of generated tokens) and turns that, the
// logit_bias and the allowed-token mask into one row of the batched token choice
// (core/sample_rows.h), which the host or a backend then runs. mlx-lm's order: logit_bias, then
// the repetition penalty, then presence/frequency penalties, then the top-p, min-p and top-k filters
// on the probabilities, then temperature. temp 0 is greedy. Noise is keyed by (seed, position,
// token), so the same seed and prompt give the same tokens whatever else is in the batch.
// Memory: a sampler's tables are sized at creation (max_generated); accepting tokens allocates
// nothing.
#ifndef MX_SAMPLE_SAMPLER_H
#define MX_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/sample_rows.h"

typedef struct mx_logit_bias {
    int32_t id;
    float bias;
} mx_logit_bias;

typedef struct mx_sampling {
    float temp;                 // 0: greedy
    float top_p;                // 1: off
    float min_p;                // 0: off
    int top_k;                  // 0: off
    float repetition_penalty;   // 1: off; applied over the last repetition_context tokens
    int repetition_context;
    float presence_penalty;     // OpenAI-style, over all generated tokens; 0: off
    float frequency_penalty;
    uint64_t seed;
    bool has_seed;              // false: seeded from the clock when the sampler is created
    // Borrowed: the caller keeps these alive as long as the sampler.
    const mx_logit_bias *logit_bias;  // added to the logits before everything else
    int n_logit_bias;
    // Optional allowed-token bitmask over the vocabulary (uint32 words, bit i % 32 of word i / 32 set:
    // token i may be chosen), read at every step, so a constrained decoder (a grammar) may rewrite
    // it between steps. NULL: every token. The mask lives in host memory; the engine copies it to
    // the backend when the backend chooses tokens.
    const uint32_t *allowed;
} mx_sampling;

// temp 0.0 / top_p 1 / min_p 0 / top_k 0 / no penalties / context 20 / no seed / no bias / no mask.
mx_sampling mx_sampling_defaults(void);
// True when repetition, presence or frequency penalties are on (they need the token history).
bool mx_sampling_has_penalties(const mx_sampling *p);

typedef struct mx_sampler mx_sampler;

// max_generated: tokens this sampler will accept as generated at most (sizes its tables).
mx_sampler *mx_sampler_create(const mx_sampling *p, int max_generated);
void mx_sampler_free(mx_sampler *s);
// Forgets the token history (penalties) and reseeds (a new clock seed when the parameters have none).
void mx_sampler_reset(mx_sampler *s);
// Records a token for the penalties (prompt tokens count for the repetition penalty, as in mlx-lm).
void mx_sampler_accept(mx_sampler *s, int32_t id, bool generated);
// Edits at most this many tokens per row (sizes the caller's mods array).
int mx_sampler_max_mods(const mx_sampler *s);
// The row for the next token. pos: position of the row's input token (the noise counter);
// n_top: logprobs wanted (-1: none). Appends the row's edits at mods[*n_mods] (room for
// mx_sampler_max_mods) and advances *n_mods.
void mx_sampler_row(mx_sampler *s, int32_t pos, int n_top, mx_sample_row *row, mx_logit_mod *mods, int *n_mods);
// Replaces the allowed-token mask pointer (a grammar's mask owned by the sequence).
void mx_sampler_set_allowed(mx_sampler *s, const uint32_t *allowed);
// The seed in use (the clock seed when the parameters had none).
uint64_t mx_sampler_seed(const mx_sampler *s);

#endif
