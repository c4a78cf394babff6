// SPDX-License-Identifier: MIT
// Token sampling from logits, in mlx-lm's order: penalties, then top-p, min-p and top-k filters on
// the probabilities, then temperature. temp 0 is greedy. The same seed gives the same tokens.
// A sampler owns its scratch (sized by the vocabulary at creation): sampling allocates nothing.
#ifndef MX_SAMPLE_SAMPLER_H
#define MX_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

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
    bool has_seed;              // false: seeded from the clock
} mx_sampling;

// temp 0.0 / top_p 1 / min_p 0 / top_k 0 / no penalties / context 20 / no seed.
mx_sampling mx_sampling_defaults(void);
// True when repetition, presence or frequency penalties are on (they need the token history).
bool mx_sampling_has_penalties(const mx_sampling *p);
// True when sampling needs the full logits (anything but plain greedy).
bool mx_sampling_needs_logits(const mx_sampling *p);

typedef struct mx_sampler mx_sampler;

mx_sampler *mx_sampler_create(const mx_sampling *p, int vocab);
void mx_sampler_free(mx_sampler *s);
// Forgets the token history (penalties) and reseeds.
void mx_sampler_reset(mx_sampler *s);
// Records a token for the penalties (prompt tokens count for the repetition penalty, as in mlx-lm).
void mx_sampler_accept(mx_sampler *s, int32_t id, bool generated);
// Picks the next token. logits[vocab] is modified (penalties applied in place).
int32_t mx_sampler_sample(mx_sampler *s, float *logits);

#endif
