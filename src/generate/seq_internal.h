// SPDX-License-Identifier: MIT
// Private to src/generate: the sequence's fields as the engine drives them.
#ifndef MX_GENERATE_SEQ_INTERNAL_H
#define MX_GENERATE_SEQ_INTERNAL_H

#include "generate/seq.h"
#include "models/model.h"

struct mx_seq {
    const mx_tokenizer *tok;
    int32_t *prompt;     // [n_prompt] (owned)
    int n_prompt;
    mx_seq_opts o;       // stop_ids points at stop_ids below
    int32_t *stop_ids;   // [n_stop_ids] (owned)
    mx_sampler *sampler;
    mx_detok detok;
    char *text;          // [text_cap] detokenizer output
    size_t text_cap;
    int32_t *gen;        // [max_gen] generated ids
    int n_gen, max_gen;
    mx_finish finish;
    char error[256];
    bool error_is_request;  // the error is the request's own (its grammar's bounds), not the engine's
    uint32_t *mask;      // [ceil(vocab / 32)] the matcher's allowed tokens for the next step
    // engine state
    int slot;            // -1: not admitted
    int n_fed;           // tokens in the slot's cache (prompt first, then generated)
    int reused;          // prompt tokens found in the cache
    int32_t last;        // the last generated token, fed at the next step
    double t_admit, t_first, t_done;
};

// At admission: with a matcher, allocates the mask (vocab bits), points the sampler at it and fills
// it for the first token. Returns 0 or -1 (err set).
int mx_seq_prepare(mx_seq *s, int vocab, mx_error *err);
// With a matcher: the allowed tokens of the next step; ends the sequence (MX_FINISH_STOP) when the
// grammar allows nothing more. Returns false when it ended.
bool mx_seq_update_mask(mx_seq *s);
// Takes the chosen token of a step: records it, applies the stop rules, streams its text and calls
// on_token. Sets s->finish when the sequence ends. max_ctx: positions per sequence.
void mx_seq_take(mx_seq *s, const mx_model *m, const mx_sample_out *out, int max_ctx);
// Ends the sequence (flushes the detokenizer's held text through on_token when it ends normally).
void mx_seq_end(mx_seq *s, mx_finish why);

#endif
