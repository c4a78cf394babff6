// SPDX-License-Identifier: MIT
// The decoder forward pass shared by every family, written once as op records (backend.h), run in
// the context (forward_ctx.c) that owns the KV cache, the activation scratch and the plans. Shapes
// use B = tokens in the current step (at most max_batch), H = hidden, D = head_dim. Nothing is
// allocated per step once the plans of the step shapes in use are built.
//
// A step runs one plan: the records of the whole model for n tokens, followed by the output head
// (final norm, lm_head, argmax or sampling) for up to LOGIT_ROWS rows. Plans are cached by step
// shape (plan_key); everything that varies between steps of one shape (token ids, positions, slots,
// output rows) is uploaded into backend buffers the records point at, so a backend may record a plan
// once and replay it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/forward_internal.h"

static void add_matmul(mx_plan *p, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    mx_plan_add(p, (mx_op){.kind = MX_OP_MATMUL, .matmul = {out, x, w, bias, n}});
}

static void add_rmsnorm(mx_plan *p, float *out, const float *x, const float *w, int n, int dim, float eps) {
    mx_plan_add(p, (mx_op){.kind = MX_OP_RMSNORM, .rmsnorm = {out, x, w, n, dim, eps}});
}

static void add_add(mx_plan *p, float *x, const float *y, int64_t count) {
    mx_plan_add(p, (mx_op){.kind = MX_OP_ADD, .add = {x, y, count}});
}

// Where the n tokens of this step live in layer `layer` of the cache.
static mx_kv_ref kv_ref(const mx_ctx *c, int layer) {
    return (mx_kv_ref){.kv = c->kv, .lay = c->lay, .layer = layer, .slot = c->d_slot, .pos = c->d_pos, .table = c->d_table};
}

static void mlp_records(mx_plan *p, mx_ctx *c, const mx_layer *L, int n);

// The attention of the n tokens: one record, or with split > 0 (plan_key) two: tokens [0, split),
// each its own sequence's next token, with the decode hint, and the rest (prompt chunks) without.
static void attention_records(mx_plan *p, mx_ctx *c, int layer, int n, bool decode, int split, float scale,
                              int window, const float *sinks) {
    const mx_config *cfg = &c->m->cfg;
    const int NH = cfg->n_heads;
    const size_t QD = (size_t)NH * cfg->head_dim;
    mx_kv_ref kv = kv_ref(c, layer);
    if (split > 0) {
        mx_plan_add(p, (mx_op){.kind = MX_OP_ATTENTION, .attention = {c->att, c->q, kv, split, NH, scale, window, sinks, true}});
        kv.slot += split, kv.pos += split;
        mx_plan_add(p, (mx_op){.kind = MX_OP_ATTENTION, .attention = {c->att + split * QD, c->q + split * QD, kv, n - split,
                                                                      NH, scale, window, sinks, false}});
        return;
    }
    mx_plan_add(p, (mx_op){.kind = MX_OP_ATTENTION, .attention = {c->att, c->q, kv, n, NH, scale, window, sinks, decode}});
}

// One transformer block on the n tokens in c->x (decode, split: the attention's records, plan_key).
static void block_records(mx_plan *p, mx_ctx *c, const mx_layer *L, int layer, int n, bool decode, int split) {
    const mx_config *cfg = &c->m->cfg;
    int H = cfg->hidden_size, D = cfg->head_dim, NH = cfg->n_heads, NKV = cfg->n_kv_heads;
    float eps = cfg->rms_norm_eps;

    add_rmsnorm(p, c->h, c->x, L->attn_norm, n, H, eps);
    if (c->mla) {
        mx_mla_records(p, c->mla, c->m, L, kv_ref(c, layer), c->h, c->tmp, n);
        add_add(p, c->x, c->tmp, (int64_t)n * H);
        mlp_records(p, c, L, n);
        return;
    }
    add_matmul(p, c->q, c->h, &L->wq, L->bq, n);
    add_matmul(p, c->k, c->h, &L->wk, L->bk, n);
    add_matmul(p, c->v, c->h, &L->wv, L->bv, n);
    if (L->q_norm) {
        add_rmsnorm(p, c->q, c->q, L->q_norm, n * NH, D, eps);
        add_rmsnorm(p, c->k, c->k, L->k_norm, n * NKV, D, eps);
    }
    // Gemma's sliding-window layers use their own RoPE base and see the last sliding_window keys;
    // its attention scale comes from query_pre_attn_scalar.
    const mx_rope *rope = L->sliding ? &c->m->rope_local : &c->m->rope;
    int window = L->sliding ? cfg->sliding_window : 0;
    float scale = cfg->query_pre_attn_scalar > 0 ? 1.0f / sqrtf((float)cfg->query_pre_attn_scalar) : 1.0f / sqrtf((float)D);
    mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {c->q, c->d_pos, n, NH, *rope}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_ROPE, .rope = {c->k, c->d_pos, n, NKV, *rope}});
    mx_plan_add(p, (mx_op){.kind = MX_OP_KV_STORE, .kv_store = {kv_ref(c, layer), c->k, c->v, n}});
    attention_records(p, c, layer, n, decode, split, scale, window, L->sinks);
    add_matmul(p, c->tmp, c->att, &L->wo, L->bo, n);
    if (L->post_attn_norm) add_rmsnorm(p, c->tmp, c->tmp, L->post_attn_norm, n, H, eps);
    add_add(p, c->x, c->tmp, (int64_t)n * H);
    mlp_records(p, c, L, n);
}

// The MLP half of a block (norm, dense or MoE MLP, residual add) on the n tokens in c->x.
static void mlp_records(mx_plan *p, mx_ctx *c, const mx_layer *L, int n) {
    const mx_config *cfg = &c->m->cfg;
    int H = cfg->hidden_size;
    float eps = cfg->rms_norm_eps;
    add_rmsnorm(p, c->h, c->x, L->ffn_norm, n, H, eps);
    if (L->moe) {
        int E = cfg->num_experts, K = cfg->num_experts_per_tok, I = cfg->moe_intermediate_size;
        add_matmul(p, c->router, c->h, &L->router, L->router_linear_bias, n);
        if (L->router_bias)
            mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_ROUTE_GROUPED,
                                   .moe_route_grouped = {c->moe_ids, c->moe_w, c->router, L->router_bias, n, E, K,
                                                         cfg->n_group, cfg->topk_group, cfg->norm_topk_prob,
                                                         (float)cfg->routed_scaling_factor}});
        else
            mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_ROUTE,
                                   .moe_route = {c->moe_ids, c->moe_w, c->router, n, E, K, cfg->norm_topk_prob}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_MATMUL, .moe_matmul = {c->gate, c->h, &L->e_gate, c->moe_ids, n * K, K}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_MATMUL, .moe_matmul = {c->up, c->h, &L->e_up, c->moe_ids, n * K, K}});
        if (L->e_gate_bias) {  // gpt_oss: expert biases and the clamped SwiGLU
            mx_plan_add(p, (mx_op){.kind = MX_OP_EXPERT_BIAS, .expert_bias = {c->gate, L->e_gate_bias, c->moe_ids, n * K, I}});
            mx_plan_add(p, (mx_op){.kind = MX_OP_EXPERT_BIAS, .expert_bias = {c->up, L->e_up_bias, c->moe_ids, n * K, I}});
            mx_plan_add(p, (mx_op){.kind = MX_OP_SWIGLU_CLAMPED,
                                   .swiglu_clamped = {c->gate, c->gate, c->up, (int64_t)n * K * I,
                                                      (float)cfg->swiglu_limit, 1.702f}});
        } else {
            mx_plan_add(p, (mx_op){.kind = MX_OP_SWIGLU, .swiglu = {c->gate, c->gate, c->up, (int64_t)n * K * I}});
        }
        mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_MATMUL,
                               .moe_matmul = {c->moe_y, c->gate, &L->e_down, c->moe_ids, n * K, 1}});
        if (L->e_down_bias)
            mx_plan_add(p, (mx_op){.kind = MX_OP_EXPERT_BIAS, .expert_bias = {c->moe_y, L->e_down_bias, c->moe_ids, n * K, H}});
        mx_plan_add(p, (mx_op){.kind = MX_OP_MOE_COMBINE, .moe_combine = {c->x, c->moe_y, c->moe_w, n, K, H}});
        if (L->s_gate.rows > 0) {  // shared experts (deepseek_v3): a dense MLP on every token
            int IS = (int)L->s_gate.rows;
            add_matmul(p, c->gate, c->h, &L->s_gate, NULL, n);
            add_matmul(p, c->up, c->h, &L->s_up, NULL, n);
            mx_plan_add(p, (mx_op){.kind = MX_OP_SWIGLU, .swiglu = {c->gate, c->gate, c->up, (int64_t)n * IS}});
            add_matmul(p, c->tmp, c->gate, &L->s_down, NULL, n);
            add_add(p, c->x, c->tmp, (int64_t)n * H);
        }
        return;
    }
    int I = cfg->intermediate_size;
    add_matmul(p, c->gate, c->h, &L->w_gate, L->b_gate, n);
    add_matmul(p, c->up, c->h, &L->w_up, L->b_up, n);
    if (c->m->family->gemma)
        mx_plan_add(p, (mx_op){.kind = MX_OP_GEGLU, .geglu = {c->gate, c->gate, c->up, (int64_t)n * I}});
    else
        mx_plan_add(p, (mx_op){.kind = MX_OP_SWIGLU, .swiglu = {c->gate, c->gate, c->up, (int64_t)n * I}});
    add_matmul(p, c->tmp, c->gate, &L->w_down, L->b_down, n);
    if (L->post_ffn_norm) add_rmsnorm(p, c->tmp, c->tmp, L->post_ffn_norm, n, H, eps);
    add_add(p, c->x, c->tmp, (int64_t)n * H);
}

// Final norm, output projection and token choice for r rows of c->x: rows 0..r-1 in place, or the
// rows listed in d_rows. Results stay in c->logits / c->d_argmax / c->d_outs (token choice: the
// rows' parameters, positions included, are in d_srows).
static void head_records(mx_plan *p, mx_ctx *c, int r, bool gathered, ids_kind ids) {
    const mx_config *cfg = &c->m->cfg;
    int H = cfg->hidden_size, V = cfg->vocab_size;
    const float *src = c->x;
    if (gathered) {
        mx_plan_add(p, (mx_op){.kind = MX_OP_GATHER_ROWS, .gather_rows = {c->out_h, c->x, c->d_rows, r, H}});
        src = c->out_h;
    }
    add_rmsnorm(p, c->out_h, src, c->m->final_norm, r, H, cfg->rms_norm_eps);
    if (ids == IDS_HIDDEN) return;
    add_matmul(p, c->logits, c->out_h, &c->m->lm_head, NULL, r);
    if (ids == IDS_ARGMAX) mx_plan_add(p, (mx_op){.kind = MX_OP_ARGMAX, .argmax = {c->d_argmax, c->logits, r, V}});
    if (ids == IDS_SAMPLE)
        mx_plan_add(p, (mx_op){.kind = MX_OP_SAMPLE, .sample = {c->d_outs, c->logits, r, V, c->d_srows, c->d_mods}});
}

static mx_plan *build_plan(mx_ctx *c, plan_key k, mx_error *err) {
    mx_plan *p = mx_plan_create(err);
    if (!p) return NULL;
    if (k.n > 0) {
        mx_plan_add(p, (mx_op){.kind = MX_OP_EMBED, .embed = {c->x, &c->m->embed, c->d_tokens, k.n}});
        if (c->m->embed_scale != 1.0f)
            mx_plan_add(p, (mx_op){.kind = MX_OP_SCALE,
                                   .scale = {c->x, (int64_t)k.n * c->m->cfg.hidden_size, c->m->embed_scale}});
        for (int l = 0; l < c->m->cfg.n_layers; l++) block_records(p, c, &c->m->layers[l], l, k.n, k.decode, k.split);
    }
    if (k.r > 0) head_records(p, c, k.r, k.gathered, k.ids);
    return p;
}

// Until when a cached plan is worth keeping, in plan runs (forward_internal.h: PLAN_CACHE): its last
// run, and PLAN_KEEP_REUSED runs more for a plan that ran more than once (a shape that recurs, such as
// a decode step's, against the one-off shapes of the steps with prompt chunks).
static uint64_t keep_until(const cached_plan *e) { return e->last_use + (e->runs > 1 ? PLAN_KEEP_REUSED : 0); }

// The plan for a step shape: from the cache, or built in an empty entry or in place of the plan with
// the earliest keep_until (the least recently used of those that ran once, while there are some).
static mx_plan *plan_for(mx_ctx *c, plan_key k, mx_error *err) {
    cached_plan *slot = &c->plans[0];
    for (int i = 0; i < PLAN_CACHE; i++) {
        cached_plan *e = &c->plans[i];
        if (e->plan && e->key.n == k.n && e->key.r == k.r && e->key.gathered == k.gathered && e->key.ids == k.ids &&
            e->key.decode == k.decode && e->key.split == k.split) {
            e->last_use = ++c->uses;
            e->runs++;
            return e->plan;
        }
        if (!e->plan ? slot->plan != NULL : (slot->plan && keep_until(e) < keep_until(slot))) slot = e;
    }
    mx_plan *p = build_plan(c, k, err);
    if (!p) return NULL;
    c->plans_built++;
    c->plans_evicted += slot->plan != NULL;
    mx_plan_free(c->be, slot->plan);
    *slot = (cached_plan){k, p, ++c->uses, 1};
    return p;
}

void mx_ctx_plan_counts(const mx_ctx *c, uint64_t *built, uint64_t *evicted, uint64_t *split) {
    *built = c->plans_built;
    *evicted = c->plans_evicted;
    *split = c->split_runs;
}

bool mx_ctx_can_choose(const mx_ctx *c) { return c->be->ops->supports(c->be, MX_OP_SAMPLE, NULL); }
int mx_ctx_max_edits(const mx_ctx *c) {
    (void)c;
    return MAX_EDITS;
}

// Uploads the token-choice rows of one pass (outputs first..first+r-1 of the call), their masks
// pointing into d_masks.
static int upload_choice(mx_ctx *c, int first, int r, mx_error *err) {
    const mx_backend_ops *o = c->be->ops;
    size_t words = (size_t)(c->m->cfg.vocab_size + 31) / 32;
    for (int i = 0; i < r; i++) {
        c->pass_rows[i] = c->choose_rows[first + i];
        if (!c->pass_rows[i].allowed) continue;
        uint32_t *dst = c->d_masks + (size_t)i * words;
        if (o->upload(c->be, dst, c->pass_rows[i].allowed, 4 * words, err)) return -1;
        c->pass_rows[i].allowed = dst;
    }
    return o->upload(c->be, c->d_srows, c->pass_rows, sizeof(mx_sample_row) * (size_t)r, err);
}

// Runs the step of `n` tokens (0: none, the body already ran) with outputs for the r rows `rows`
// (indices into the step; r <= LOGIT_ROWS), then copies the outputs into the caller's arrays.
static int run_step(mx_ctx *c, int n, bool decode, int split, const int32_t *rows, int r, float *logits, int32_t *ids,
                    float *hidden, int first_out, mx_error *err) {
    const mx_backend_ops *o = c->be->ops;
    bool gathered = false;
    for (int i = 0; i < r; i++) gathered |= rows[i] != i;
    if (gathered && o->upload(c->be, c->d_rows, rows, sizeof(int32_t) * (size_t)r, err)) return -1;
    bool choose = c->choose_rows && r > 0 && !hidden;
    if (choose && upload_choice(c, first_out, r, err)) return -1;
    plan_key k = {n, r, gathered, hidden ? IDS_HIDDEN : choose ? IDS_SAMPLE : ids ? IDS_ARGMAX : IDS_NONE, n > 0 && decode,
                  n > 0 && !c->mla ? split : 0};
    mx_plan *p = plan_for(c, k, err);
    if (!p || mx_plan_run(c->be, p, err)) return -1;
    c->split_runs += k.split > 0;
    if (choose && o->download(c->be, c->choose_outs + first_out, c->d_outs, sizeof(mx_sample_out) * (size_t)r, err))
        return -1;
    if (ids && o->download(c->be, ids, c->d_argmax, sizeof(int32_t) * (size_t)r, err)) return -1;
    if (hidden && r > 0 &&
        o->download(c->be, hidden, c->out_h, sizeof(float) * (size_t)r * c->m->cfg.hidden_size, err))
        return -1;
    if (logits && r > 0 &&
        o->download(c->be, logits, c->logits, sizeof(float) * (size_t)r * c->m->cfg.vocab_size, err))
        return -1;
    return 0;
}

// Whether no slot has more than MX_DECODE_SLOT_TOKENS of the n tokens (the attention records' decode
// hint): one count per slot in the context's counters (check_batch has checked the slots), cleared
// again before returning. *split: when the context splits mixed steps (c->split_mixed) and the
// hint is false, the leading tokens whose slots have at most that many (their attention record
// keeps the hint); else 0.
static bool few_per_slot(mx_ctx *c, const int32_t *slot, int n, int *split) {
    bool few = true;
    int lead = 0;
    for (int i = 0; i < n; i++) few = ++c->slot_tokens[slot[i]] <= MX_DECODE_SLOT_TOKENS && few;
    while (!few && c->split_mixed && lead < n && c->slot_tokens[slot[lead]] <= MX_DECODE_SLOT_TOKENS) lead++;
    for (int i = 0; i < n; i++) c->slot_tokens[slot[i]] = 0;
    *split = lead;
    return few;
}

static int check_batch(const mx_ctx *c, const mx_batch *b, mx_error *err) {
    int V = c->m->cfg.vocab_size;
    for (int t = 0; t < b->n; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= V)
            return mx_fail(err, "token id %d at batch row %d is outside the vocabulary (0..%d)", b->tokens[t], t, V - 1);
        if (b->pos[t] < 0 || b->pos[t] >= c->lay.max_ctx)
            return mx_fail(err, "position %d is outside the context of %d tokens", b->pos[t], c->lay.max_ctx);
        if (b->slot[t] < 0 || b->slot[t] >= c->lay.n_slots)
            return mx_fail(err, "KV slot %d does not exist (%d slots)", b->slot[t], c->lay.n_slots);
        if (c->table[(size_t)b->slot[t] * mx_kv_table_len(&c->lay) + b->pos[t] / MX_KV_BLOCK] < 0)
            return mx_fail(err, "position %d of KV slot %d has no block", b->pos[t], b->slot[t]);
    }
    for (int i = 0; i < b->n_out; i++)
        if (b->out_rows[i] < 0 || b->out_rows[i] >= b->n) return mx_fail(err, "output row %d is not in the batch", b->out_rows[i]);
    return 0;
}

// The forward pass with outputs as logits and/or ids, or (hidden != NULL) final hidden states.
static int forward(mx_ctx *c, const mx_batch *b, float *logits, int32_t *ids, float *hidden, mx_error *err) {
    if (check_batch(c, b, err)) return -1;
    const mx_backend_ops *o = c->be->ops;
    if (c->table_dirty) {
        if (o->upload(c->be, c->d_table, c->table, 4 * (size_t)c->lay.n_slots * mx_kv_table_len(&c->lay), err)) return -1;
        c->table_dirty = false;
    }
    int V = hidden ? c->m->cfg.hidden_size : c->m->cfg.vocab_size;
    if (hidden) logits = NULL, ids = NULL;
    bool outputs = logits || ids || hidden || c->choose_rows;
    int32_t local[LOGIT_ROWS];
    int out_done = 0;
    for (int start = 0; start < b->n; start += c->max_batch) {
        int n = b->n - start < c->max_batch ? b->n - start : c->max_batch;
        if (o->upload(c->be, c->d_tokens, b->tokens + start, 4 * (size_t)n, err) ||
            o->upload(c->be, c->d_pos, b->pos + start, 4 * (size_t)n, err) ||
            o->upload(c->be, c->d_slot, b->slot + start, 4 * (size_t)n, err))
            return -1;
        int split;
        const bool decode = few_per_slot(c, b->slot + start, n, &split);
        // Output rows that fall in this step, in the caller's order, LOGIT_ROWS per pass; the first
        // pass shares the plan of the step's body (one plan per decode step).
        int body = n;
        do {
            int cnt = 0;
            while (outputs && out_done + cnt < b->n_out && cnt < LOGIT_ROWS && b->out_rows[out_done + cnt] >= start &&
                   b->out_rows[out_done + cnt] < start + n) {
                local[cnt] = b->out_rows[out_done + cnt] - start;
                cnt++;
            }
            if (body == 0 && cnt == 0) break;
            if (run_step(c, body, decode, split, local, cnt, logits ? logits + (size_t)out_done * V : NULL,
                         ids ? ids + out_done : NULL, hidden ? hidden + (size_t)out_done * V : NULL, out_done, err))
                return -1;
            out_done += cnt;
            body = 0;
        } while (1);
    }
    if (outputs && out_done != b->n_out) return mx_fail(err, "output rows must be listed in batch order");
    return o->sync(c->be, err);
}

int mx_ctx_forward(mx_ctx *c, const mx_batch *b, float *logits, int32_t *ids, mx_error *err) {
    c->choose_rows = NULL;
    return forward(c, b, logits, ids, NULL, err);
}

int mx_ctx_forward_hidden(mx_ctx *c, const mx_batch *b, float *hidden, mx_error *err) {
    c->choose_rows = NULL;
    return forward(c, b, NULL, NULL, hidden, err);
}

int mx_ctx_forward_choose(mx_ctx *c, const mx_batch *b, const mx_sample_row *rows, const mx_logit_mod *mods,
                          int n_mods, mx_sample_out *outs, mx_error *err) {
    if (!mx_ctx_can_choose(c)) return mx_fail(err, "the %s backend cannot choose tokens itself", c->be->ops->name);
    if (n_mods > MAX_EDITS) return mx_fail(err, "%d logit edits exceed the %d a step takes", n_mods, MAX_EDITS);
    if (n_mods > 0 && c->be->ops->upload(c->be, c->d_mods, mods, sizeof *mods * (size_t)n_mods, err)) return -1;
    c->choose_rows = rows;
    c->choose_outs = outs;
    int rc = forward(c, b, NULL, NULL, NULL, err);
    c->choose_rows = NULL;
    c->choose_outs = NULL;
    return rc;
}
