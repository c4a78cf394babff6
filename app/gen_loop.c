// SPDX-License-Identifier: MIT
// Generation loop (see gen_loop.h). The last sampled token is fed back at the next step; the
// loop allocates its buffers once per call, never per token.
#include "gen_loop.h"

#include <stdlib.h>

#include <time.h>

#include "cli.h"

// Sets the context up to choose tokens on the backend when the parameters allow it; returns true
// when it does (then forward() hands back token ids and no logits are needed).
static bool choose_on_backend(const gen_request *r, mx_error *err, int *rc) {
    *rc = 0;
    if (!r->params || mx_sampling_has_penalties(r->params) || r->matcher) return false;
    const mx_sampling *p = r->params;
    mx_sample_params sp = {.temp = p->temp, .top_p = p->top_p, .min_p = p->min_p, .top_k = p->top_k, .seed = p->seed};
    if (!p->has_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp.seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    }
    int s = mx_ctx_set_sampling(r->ctx, p->temp > 0.0f ? &sp : NULL, err);
    if (s < 0) *rc = -1;
    return s == 1;
}

int gen_run(const gen_request *r, gen_stats *st, mx_error *err) {
    const mx_config *cfg = mx_model_config(r->model);
    int V = cfg->vocab_size, max_ctx = mx_ctx_max_ctx(r->ctx);
    *st = (gen_stats){0};
    if (r->n_prompt < 1) return mx_fail(err, "the prompt is empty");
    if (r->start_pos + r->n_prompt >= max_ctx)
        return mx_fail(err, "the prompt has %d tokens but the context holds %d (use --ctx)", r->start_pos + r->n_prompt,
                       max_ctx);
    float *logits = malloc(sizeof(float) * V);
    int32_t *pos = malloc(sizeof(int32_t) * r->n_prompt), *slot = calloc(r->n_prompt, sizeof(int32_t));
    size_t cap = r->tok ? mx_detok_cap(r->tok) : 16;
    char *text = malloc(cap);
    uint32_t *mask = r->matcher ? malloc(sizeof(uint32_t) * (size_t)((V + 31) / 32)) : NULL;
    if (!logits || !pos || !slot || !text || (r->matcher && !mask)) {
        free(logits), free(pos), free(slot), free(text), free(mask);
        return mx_fail(err, "out of memory");
    }
    for (int i = 0; i < r->n_prompt; i++) pos[i] = r->start_pos + i;
    for (int i = 0; i < r->n_prompt; i++) mx_sampler_accept(r->sampler, r->prompt[i], false);
    mx_detok detok;
    if (r->tok) mx_detok_init(&detok, r->tok, false);

    int rc = 0;
    bool on_backend = choose_on_backend(r, err, &rc);
    int32_t chosen = -1;
    double t0 = cli_now();
    int32_t last_row = r->n_prompt - 1;
    mx_batch b = {r->n_prompt, r->prompt, pos, slot, 1, &last_row};
    if (rc == 0) rc = mx_ctx_forward(r->ctx, &b, on_backend ? NULL : logits, on_backend ? &chosen : NULL, err);
    st->prompt_tokens = r->n_prompt;
    st->prompt_seconds = cli_now() - t0;
    int p = r->start_pos + r->n_prompt;
    double t1 = cli_now();
    while (rc == 0) {
        if (r->matcher) {
            if (mx_matcher_mask(r->matcher, mask) == 0) break;  // the grammar is complete and has no end token
            mx_mask_logits(mask, logits, V);
        }
        int32_t id = on_backend ? chosen : mx_sampler_sample(r->sampler, logits);
        if (r->matcher && mx_matcher_accept(r->matcher, id, err)) {
            rc = -1;
            break;
        }
        mx_sampler_accept(r->sampler, id, true);
        if (r->out_ids) r->out_ids[st->generated_tokens] = id;
        st->generated_tokens++;
        bool eos = mx_model_is_eos(r->model, id) || (r->extra_eos >= 0 && id == r->extra_eos);
        if (r->tok && !(eos && !r->ignore_eos)) {
            size_t len = mx_detok_push(&detok, id, text, cap);
            if (len && r->on_text && !r->on_text(r->user, text, len)) st->stopped = true;
        }
        if (eos && !r->ignore_eos) {
            st->hit_eos = true;
            break;
        }
        if (st->stopped || (r->max_new >= 0 && st->generated_tokens >= r->max_new) || p + 1 >= max_ctx) break;
        int32_t zero = 0, row = 0, tokpos = p;
        mx_batch step = {1, &id, &tokpos, &zero, 1, &row};
        rc = mx_ctx_forward(r->ctx, &step, on_backend ? NULL : logits, on_backend ? &chosen : NULL, err);
        p++;
    }
    st->generate_seconds = cli_now() - t1;
    if (rc == 0 && r->tok && r->on_text) {
        size_t len = mx_detok_flush(&detok, text, cap);
        if (len) r->on_text(r->user, text, len);
    }
    free(logits);
    free(mask);
    free(pos);
    free(slot);
    free(text);
    return rc;
}
