// SPDX-License-Identifier: MIT
// Sequence (see seq.h): creation, the per-token rules and the accessors.
#include "generate/seq_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

mx_seq *mx_seq_create(const mx_tokenizer *tok, const int32_t *prompt, int n_prompt, const mx_seq_opts *o, int max_ctx,
                      mx_error *err) {
    if (n_prompt < 1) {
        mx_fail(err, "the prompt is empty");
        return NULL;
    }
    if (o->n_logprobs > MX_SAMPLE_MAX_TOP) {
        mx_fail(err, "top logprobs %d exceeds the maximum of %d", o->n_logprobs, MX_SAMPLE_MAX_TOP);
        return NULL;
    }
    mx_seq *s = calloc(1, sizeof *s);
    if (!s) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    s->tok = tok;
    s->o = *o;
    s->n_prompt = n_prompt;
    s->max_gen = max_ctx > 1 ? max_ctx : 2;
    if (o->max_new >= 0 && o->max_new + 1 < s->max_gen) s->max_gen = o->max_new + 1;
    s->prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    s->stop_ids = malloc(sizeof(int32_t) * (size_t)(o->n_stop_ids > 0 ? o->n_stop_ids : 1));
    s->gen = malloc(sizeof(int32_t) * (size_t)s->max_gen);
    s->text_cap = tok ? mx_detok_cap(tok) : 16;
    s->text = malloc(s->text_cap);
    s->sampler = mx_sampler_create(&o->sampling, s->max_gen);
    if (!s->prompt || !s->stop_ids || !s->gen || !s->text || !s->sampler) {
        mx_seq_free(s);
        mx_fail(err, "out of memory");
        return NULL;
    }
    memcpy(s->prompt, prompt, sizeof(int32_t) * (size_t)n_prompt);
    if (o->n_stop_ids > 0) memcpy(s->stop_ids, o->stop_ids, sizeof(int32_t) * (size_t)o->n_stop_ids);
    s->o.stop_ids = s->stop_ids;
    for (int i = 0; i < n_prompt; i++) mx_sampler_accept(s->sampler, prompt[i], false);
    if (tok) mx_detok_init(&s->detok, tok, o->skip_special);
    s->slot = -1;
    return s;
}

void mx_seq_free(mx_seq *s) {
    if (!s) return;
    mx_sampler_free(s->sampler);
    free(s->prompt);
    free(s->stop_ids);
    free(s->gen);
    free(s->text);
    free(s->mask);
    free(s);
}

static bool is_stop(const mx_seq *s, const mx_model *m, int32_t id) {
    if (s->o.ignore_eos) return false;
    if (mx_model_is_eos(m, id)) return true;
    for (int i = 0; i < s->o.n_stop_ids; i++)
        if (s->stop_ids[i] == id) return true;
    return false;
}

void mx_seq_end(mx_seq *s, mx_finish why) {
    if (s->finish != MX_FINISH_NONE) return;
    s->finish = why;
    s->t_done = mx_now();
    if (why == MX_FINISH_CANCELLED || why == MX_FINISH_ERROR || !s->tok || !s->o.on_token) return;
    size_t len = mx_detok_flush(&s->detok, s->text, s->text_cap);
    if (!len) return;
    // Held-back bytes at the end (an unfinished character) reach the consumer as a last piece.
    mx_token_event ev = {.id = -1, .text = s->text, .len = len, .lp = NULL};
    s->o.on_token(s->o.user, &ev);
}

int mx_seq_prepare(mx_seq *s, int vocab, mx_error *err) {
    if (!s->o.matcher || s->mask) return 0;
    if (!(s->mask = calloc((size_t)((vocab + 31) / 32), sizeof(uint32_t)))) return mx_fail(err, "out of memory");
    mx_sampler_set_allowed(s->sampler, s->mask);
    mx_seq_update_mask(s);
    return 0;
}

bool mx_seq_update_mask(mx_seq *s) {
    if (!s->o.matcher || s->finish != MX_FINISH_NONE) return s->finish == MX_FINISH_NONE;
    mx_error err = {{0}};
    int allowed = mx_matcher_mask(s->o.matcher, s->mask, &err);
    if (allowed > 0) return true;
    if (allowed < 0) {
        snprintf(s->error, sizeof s->error, "%s", err.msg);
        s->error_is_request = allowed == MX_GRAM_BOUND;
        mx_seq_end(s, MX_FINISH_ERROR);
        return false;
    }
    mx_seq_end(s, MX_FINISH_STOP);  // the grammar is complete and allows no end token
    return false;
}

void mx_seq_take(mx_seq *s, const mx_model *m, const mx_sample_out *out, int max_ctx) {
    int32_t id = out->id;
    if (s->n_gen == 0) s->t_first = mx_now();
    mx_error err = {{0}};
    int refused = s->o.matcher ? mx_matcher_accept(s->o.matcher, id, &err) : 0;
    if (refused) {
        snprintf(s->error, sizeof s->error, "%s", err.msg);
        s->error_is_request = refused == MX_GRAM_BOUND;
        mx_seq_end(s, MX_FINISH_ERROR);
        return;
    }
    mx_sampler_accept(s->sampler, id, true);
    if (s->n_gen < s->max_gen) s->gen[s->n_gen] = id;
    s->n_gen++;
    s->last = id;
    if (is_stop(s, m, id)) {
        mx_seq_end(s, MX_FINISH_STOP);
        return;
    }
    size_t len = s->tok ? mx_detok_push(&s->detok, id, s->text, s->text_cap) : 0;
    mx_token_event ev = {.id = id, .text = s->text, .len = len, .lp = s->o.n_logprobs >= 0 ? out : NULL};
    if (s->o.on_token && !s->o.on_token(s->o.user, &ev)) {
        mx_seq_end(s, MX_FINISH_STOP);
        return;
    }
    if ((s->o.max_new >= 0 && s->n_gen >= s->o.max_new) || s->n_fed + 1 >= max_ctx) mx_seq_end(s, MX_FINISH_LENGTH);
    else mx_seq_update_mask(s);
}

const char *mx_seq_error(const mx_seq *s) { return s->error; }
bool mx_seq_error_is_request(const mx_seq *s) { return s->error_is_request; }

mx_finish mx_seq_finish_reason(const mx_seq *s) { return s->finish; }
int mx_seq_prompt_len(const mx_seq *s) { return s->n_prompt; }
int mx_seq_reused(const mx_seq *s) { return s->reused; }
double mx_seq_time_admitted(const mx_seq *s) { return s->t_admit; }
double mx_seq_time_first(const mx_seq *s) { return s->t_first; }
double mx_seq_time_done(const mx_seq *s) { return s->t_done; }

const int32_t *mx_seq_generated(const mx_seq *s, int *n) {
    *n = s->n_gen < s->max_gen ? s->n_gen : s->max_gen;
    return s->gen;
}
