// SPDX-License-Identifier: MIT
// Engine (see engine.h). Every buffer of a step is sized at creation (n_slots output rows, n_slots +
// chunk batch tokens), except the edits array, which grows at admission when a sequence may need
// more edits than the others; a step allocates nothing.
//
// Token choice: when every row of a step is plain greedy (no edits, no mask, no logprobs) the
// backend's argmax picks them; otherwise the backend's batched token choice runs every row with its
// own parameters (mx_ctx_forward_choose: only ids and logprobs come back). A backend without that
// record, or a step with more edits than it takes, downloads the logits and the engine's host
// sampler (the same rule, core/sample_rows.h) runs the rows over the engine's threads.
#include "generate/engine.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/thread_pool.h"
#include "generate/seq_internal.h"

struct mx_engine {
    mx_model *m;
    mx_ctx *ctx;
    int n_slots, max_ctx, chunk, vocab;
    bool prefix_reuse;
    mx_seq **slots;            // [n_slots] admitted sequences
    int32_t **kept;            // [n_slots][max_ctx] tokens whose KV the slot holds
    int *n_kept;               // [n_slots]
    uint64_t *last_used;       // [n_slots] release counter at the last release (LRU among free slots)
    uint64_t releases;
    mx_pool *pool;
    // step buffers
    int32_t *b_tok, *b_pos, *b_slot, *b_rows;  // [n_slots + chunk]
    int *b_end;                                // [n_slots] tokens fed after this step, -1: none
    mx_seq **row_seq;                          // [n_slots]
    float *logits;                             // [n_slots, vocab]
    int32_t *ids;                              // [n_slots]
    mx_sample_row *rows;                       // [n_slots]
    mx_sample_out *outs;                       // [n_slots]
    mx_logit_mod *mods;                        // [cap_mods]
    int cap_mods;
    void *scratch;                             // host sampler scratch, per pool thread
    mx_engine_stats st;
};

mx_engine *mx_engine_create(mx_model *m, const mx_engine_opts *o, mx_error *err) {
    if (o->n_slots < 1 || o->max_ctx < 2) {
        mx_fail(err, "an engine needs at least one slot and two positions (got %d slots, %d positions)", o->n_slots,
                o->max_ctx);
        return NULL;
    }
    mx_engine *e = calloc(1, sizeof *e);
    if (!e) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    e->m = m;
    e->n_slots = o->n_slots;
    e->max_ctx = o->max_ctx;
    e->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 256;
    e->vocab = mx_model_config(m)->vocab_size;
    e->prefix_reuse = o->prefix_reuse;
    size_t nb = (size_t)(e->n_slots + e->chunk), ns = (size_t)e->n_slots;
    e->pool = mx_pool_create(o->threads);
    int threads = e->pool ? mx_pool_threads(e->pool) : 1;
    e->slots = calloc(ns, sizeof *e->slots);
    e->kept = calloc(ns, sizeof *e->kept);
    e->n_kept = calloc(ns, sizeof *e->n_kept);
    e->last_used = calloc(ns, sizeof *e->last_used);
    e->b_tok = malloc(4 * nb), e->b_pos = malloc(4 * nb), e->b_slot = malloc(4 * nb), e->b_rows = malloc(4 * nb);
    e->b_end = malloc(sizeof(int) * ns);
    e->row_seq = calloc(ns, sizeof *e->row_seq);
    e->logits = malloc(sizeof(float) * ns * (size_t)e->vocab);
    e->ids = malloc(sizeof(int32_t) * ns);
    e->rows = malloc(sizeof *e->rows * ns);
    e->outs = malloc(sizeof *e->outs * ns);
    e->scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(e->vocab) * (size_t)threads);
    bool ok = e->pool && e->slots && e->kept && e->n_kept && e->last_used && e->b_tok && e->b_pos && e->b_slot &&
              e->b_rows && e->b_end && e->row_seq && e->logits && e->ids && e->rows && e->outs && e->scratch;
    for (int i = 0; ok && i < e->n_slots; i++) ok = (e->kept[i] = malloc(sizeof(int32_t) * (size_t)e->max_ctx)) != NULL;
    if (!ok) {
        mx_fail(err, "out of memory");
        mx_engine_free(e);
        return NULL;
    }
    if (!(e->ctx = mx_ctx_create(m, e->n_slots, e->max_ctx, (int)nb, err))) {
        mx_engine_free(e);
        return NULL;
    }
    return e;
}

void mx_engine_free(mx_engine *e) {
    if (!e) return;
    mx_ctx_free(e->ctx);
    mx_pool_free(e->pool);
    for (int i = 0; e->kept && i < e->n_slots; i++) free(e->kept[i]);
    free(e->kept), free(e->n_kept), free(e->last_used), free(e->slots);
    free(e->b_tok), free(e->b_pos), free(e->b_slot), free(e->b_rows), free(e->b_end), free(e->row_seq);
    free(e->logits), free(e->ids), free(e->rows), free(e->outs), free(e->mods), free(e->scratch);
    free(e);
}

int mx_engine_max_ctx(const mx_engine *e) { return e->max_ctx; }
int mx_engine_slots(const mx_engine *e) { return e->n_slots; }

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

// Room for the edits of every admitted sequence at once (grown at admission, never in a step).
static int reserve_mods(mx_engine *e, mx_error *err) {
    long need = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i]) need += mx_sampler_max_mods(e->slots[i]->sampler);
    if (need <= e->cap_mods) return 0;
    mx_logit_mod *g = realloc(e->mods, sizeof *g * (size_t)need);
    if (!g) return mx_fail(err, "out of memory (%ld logit edits)", need);
    e->mods = g;
    e->cap_mods = (int)need;
    return 0;
}

int mx_engine_admit(mx_engine *e, mx_seq *s, mx_error *err) {
    if (s->n_prompt + 1 > e->max_ctx)
        return mx_fail(err, "the prompt has %d tokens but a sequence holds %d (prompt + at least 1 generated token)",
                       s->n_prompt, e->max_ctx);
    if (mx_seq_prepare(s, e->vocab, err)) return -1;
    int best = -1, best_len = -1;
    for (int i = 0; i < e->n_slots; i++) {
        if (e->slots[i]) continue;
        int len = e->prefix_reuse ? common_prefix(e->kept[i], e->n_kept[i], s->prompt, s->n_prompt) : 0;
        if (len > best_len || (len == best_len && e->last_used[i] < e->last_used[best])) best = i, best_len = len;
    }
    if (best < 0) return 1;
    if (best_len >= s->n_prompt) best_len = s->n_prompt - 1;  // the last prompt token makes the first row
    e->slots[best] = s;
    if (reserve_mods(e, err)) {
        e->slots[best] = NULL;
        return -1;
    }
    s->slot = best;
    s->n_fed = s->reused = best_len;
    e->n_kept[best] = best_len;
    s->t_admit = mx_now();
    e->st.reused_tokens += (uint64_t)best_len;
    e->st.prompt_tokens += (uint64_t)(s->n_prompt - best_len);
    return 0;
}

void mx_engine_release(mx_engine *e, mx_seq *s) {
    if (s->slot < 0) return;
    mx_seq_end(s, MX_FINISH_CANCELLED);
    e->slots[s->slot] = NULL;
    e->last_used[s->slot] = ++e->releases;
    s->slot = -1;
}

void mx_engine_end(mx_engine *e, mx_seq *s, mx_finish why) {
    (void)e;
    mx_seq_end(s, why);
}

int mx_engine_running(const mx_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) n += e->slots[i] && e->slots[i]->finish == MX_FINISH_NONE;
    return n;
}

void mx_engine_forget(mx_engine *e) {
    for (int i = 0; i < e->n_slots; i++)
        if (!e->slots[i]) e->n_kept[i] = 0;
}

void mx_engine_stats_get(const mx_engine *e, mx_engine_stats *out) { *out = e->st; }

static bool plain_greedy(const mx_sample_row *r) { return r->temp <= 0.0f && r->n_mod == 0 && !r->allowed && r->n_top < 0; }

// Appends token `tok` of sequence s at position pos to the batch (and to the slot's kept tokens).
static void put(mx_engine *e, int *n, mx_seq *s, int32_t tok, int pos) {
    e->b_tok[*n] = tok;
    e->b_pos[*n] = pos;
    e->b_slot[*n] = s->slot;
    e->kept[s->slot][pos] = tok;
    (*n)++;
}

int mx_engine_step(mx_engine *e, mx_error *err) {
    int n = 0, n_out = 0, prefill = 0;
    for (int i = 0; i < e->n_slots; i++) {
        mx_seq *s = e->slots[i];
        e->b_end[i] = -1;
        if (!s || s->finish != MX_FINISH_NONE) continue;
        if (s->n_fed < s->n_prompt) {
            int start = s->n_fed, end = (start / e->chunk + 1) * e->chunk;
            if (end > s->n_prompt) end = s->n_prompt;
            if (prefill > 0 && prefill + (end - start) > e->chunk) continue;
            for (int t = start; t < end; t++) put(e, &n, s, s->prompt[t], t);
            prefill += end - start;
            e->b_end[i] = end;
            if (end == s->n_prompt) {
                e->b_rows[n_out] = n - 1;
                e->row_seq[n_out++] = s;
            }
        } else {
            put(e, &n, s, s->last, s->n_fed);
            e->b_end[i] = s->n_fed + 1;
            e->b_rows[n_out] = n - 1;
            e->row_seq[n_out++] = s;
        }
    }
    if (n == 0) return 0;
    int n_mods = 0;
    bool greedy = true;
    for (int k = 0; k < n_out; k++) {
        mx_seq *s = e->row_seq[k];
        mx_sampler_row(s->sampler, e->b_pos[e->b_rows[k]], s->o.n_logprobs, &e->rows[k], e->mods, &n_mods);
        greedy = greedy && plain_greedy(&e->rows[k]);
    }
    bool on_backend = !greedy && mx_ctx_can_choose(e->ctx) && n_mods <= mx_ctx_max_edits(e->ctx);
    bool host = !greedy && !on_backend;
    mx_batch b = {n, e->b_tok, e->b_pos, e->b_slot, n_out, e->b_rows};
    double t0 = mx_now();
    int rc = on_backend ? mx_ctx_forward_choose(e->ctx, &b, e->rows, e->mods, n_mods, e->outs, err)
                        : mx_ctx_forward(e->ctx, &b, host ? e->logits : NULL, host ? NULL : e->ids, err);
    if (rc == 0 && host) mx_sample_rows_host(e->pool, e->logits, n_out, e->vocab, e->rows, e->mods, e->scratch, e->outs);
    double dt = mx_now() - t0;
    if (rc) {
        for (int i = 0; i < e->n_slots; i++)
            if (e->b_end[i] >= 0) mx_seq_end(e->slots[i], MX_FINISH_ERROR);
        return -1;
    }
    for (int i = 0; i < e->n_slots; i++) {
        if (e->b_end[i] < 0) continue;
        e->slots[i]->n_fed = e->b_end[i];
        e->n_kept[i] = e->b_end[i];
    }
    for (int k = 0; k < n_out; k++) {
        if (greedy) e->outs[k] = (mx_sample_out){.id = e->ids[k]};
        mx_seq_take(e->row_seq[k], e->m, &e->outs[k], e->max_ctx);
    }
    e->st.steps++;
    e->st.generated_tokens += (uint64_t)n_out;
    e->st.busy_seconds += dt;
    e->st.last_tok_per_s = dt > 0 ? n_out / dt : 0.0;
    return 0;
}

int mx_engine_run(mx_engine *e, mx_error *err) {
    while (mx_engine_running(e) > 0)
        if (mx_engine_step(e, err)) return -1;
    return 0;
}
