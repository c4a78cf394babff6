// SPDX-License-Identifier: MIT
// A generation sequence: one prompt and everything that decides and receives its continuation.
// It owns its sampling state (penalty history, seed), its stop rules (model end-of-sequence tokens
// unless ignore_eos, extra stop ids such as a chat template's end-of-turn token, max_new, the
// context), its streaming detokenizer and its output state (generated ids, finish reason). Text
// stop strings and other text rules belong to the consumer: on_token returning false stops the
// sequence with MX_FINISH_STOP (the server's stop strings, Ctrl-C in `chat`).
//
// Constrained decoding: sampling parameters may carry an allowed-token bitmask (mx_sampling.allowed,
// uint32 words over the vocabulary) that the consumer rewrites from on_token before the next step;
// or the sequence is given a grammar matcher (mx_seq_opts.matcher), and then it keeps the mask
// itself: the matcher's mask before every token, the chosen token fed back to it, and the sequence
// ends (MX_FINISH_STOP) when the grammar allows nothing more, or with MX_FINISH_ERROR when the
// matcher cannot compute a mask or follow a token (a bound of the matcher, out of memory).
//
// A sequence is created by its consumer, run by an engine (engine.h) on the engine's thread, and
// freed by its consumer after the engine released it. Callbacks run on the engine's thread.
#ifndef MX_GENERATE_SEQ_H
#define MX_GENERATE_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sample_rows.h"
#include "grammar/grammar.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

typedef enum mx_finish {
    MX_FINISH_NONE,       // still running (or not started)
    MX_FINISH_STOP,       // a stop token, or on_token asked to stop
    MX_FINISH_LENGTH,     // max_new tokens, or the context is full
    MX_FINISH_CANCELLED,  // released by its consumer before finishing
    MX_FINISH_ERROR,      // the engine failed (message in the engine's error)
} mx_finish;

// One generated token as the consumer sees it.
typedef struct mx_token_event {
    int32_t id;
    const char *text;         // text completed by this token (UTF-8; may be empty)
    size_t len;
    const mx_sample_out *lp;  // logprobs (n_logprobs >= 0), else NULL
} mx_token_event;

typedef struct mx_seq_opts {
    mx_sampling sampling;
    int max_new;                // generated tokens at most; -1: until a stop or the context is full
    bool ignore_eos;            // stop tokens (the model's and stop_ids) are ordinary tokens
    const int32_t *stop_ids;    // more stop tokens (copied), e.g. the chat template's end of turn
    int n_stop_ids;
    int n_logprobs;             // -1: none; else the chosen token's logprob and n best (<= 20)
    bool skip_special;          // the detokenizer drops special tokens from the text
    mx_matcher *matcher;        // optional grammar (borrowed; must outlive the sequence)
    // Called for each generated token that is not a stop token; return false to stop.
    bool (*on_token)(void *user, const mx_token_event *ev);
    void *user;
} mx_seq_opts;

typedef struct mx_seq mx_seq;

// tok may be NULL (no text: events carry ids only). max_ctx bounds the generated tokens kept.
mx_seq *mx_seq_create(const mx_tokenizer *tok, const int32_t *prompt, int n_prompt, const mx_seq_opts *o, int max_ctx,
                      mx_error *err);
void mx_seq_free(mx_seq *s);

mx_finish mx_seq_finish_reason(const mx_seq *s);
int mx_seq_prompt_len(const mx_seq *s);
// Generated ids so far (stop token included when one ended the sequence).
const int32_t *mx_seq_generated(const mx_seq *s, int *n);
// Why a sequence ended with MX_FINISH_ERROR ("" otherwise).
const char *mx_seq_error(const mx_seq *s);
// True when that error is the request's own: its grammar needs more than the matcher's bounds
// allow (a server answers 400); false for failures of the engine or of memory (500).
bool mx_seq_error_is_request(const mx_seq *s);
// Prompt tokens that were found in the cache and not computed again.
int mx_seq_reused(const mx_seq *s);
// Monotonic times (mx_now) of admission, of the first generated token and of the finish.
double mx_seq_time_admitted(const mx_seq *s);
double mx_seq_time_first(const mx_seq *s);
double mx_seq_time_done(const mx_seq *s);

#endif
