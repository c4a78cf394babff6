// SPDX-License-Identifier: MIT
// The CLI's generation loop: prefill a prompt into one KV slot (in chunks), then decode token by
// token with a sampler, streaming text through a callback. Shared by generate, chat and bench.
#ifndef MX_APP_GEN_LOOP_H
#define MX_APP_GEN_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "models/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

typedef struct gen_stats {
    int prompt_tokens;
    int generated_tokens;
    double prompt_seconds;
    double generate_seconds;
    bool hit_eos;
    bool stopped;   // the callback asked to stop
} gen_stats;

typedef struct gen_request {
    mx_ctx *ctx;
    const mx_model *model;
    const mx_tokenizer *tok;     // NULL: no text output (bench)
    mx_sampler *sampler;         // host sampler (penalties, or backends without a sample op)
    const mx_sampling *params;   // the sampler's parameters: without penalties, tokens are chosen
                                 // on the backend (argmax, or its sample op) and no logits travel
    const int32_t *prompt;       // tokens to feed, starting at position start_pos
    int n_prompt;
    int start_pos;               // tokens already in the slot's cache (chat turns)
    int max_new;                 // -1: until EOS or the context is full
    bool ignore_eos;             // bench: always generate max_new
    int32_t extra_eos;           // another stop token (the chat template's end of turn), or -1
    // Called with each piece of complete UTF-8 text; return false to stop early.
    bool (*on_text)(void *user, const char *text, size_t len);
    void *user;
    int32_t *out_ids;            // optional: generated ids (room for max_new)
    mx_matcher *matcher;         // optional grammar: only tokens it allows are sampled (host path);
                                 // generation ends when it allows nothing more
} gen_request;

// Returns 0 or -1 with err set. The slot's cache ends holding prompt + generated tokens
// (stats->prompt_tokens + stats->generated_tokens positions after start_pos).
int gen_run(const gen_request *r, gen_stats *stats, mx_error *err);

#endif
